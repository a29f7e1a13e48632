"""A report says what a reader needs and nothing else: each cell's error beside its budget in a unit a reader
compares (a correctly rounded result is never marginal), failures most severe first, the example furthest
over its budget beside the shrunk one, candidate strings as text, distinct junit names, a step summary under
GitHub's limit, and the seed documents named."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from tests.conformance_run import Run, run_suite
from transformer_conformance.conformance.harness import repro
from transformer_conformance.conformance.harness.compare import CheckFailure, Record
from transformer_conformance.reports.html_page import fmt_share, severity, share
from transformer_conformance.reports.html_report import render_html
from transformer_conformance.reports.markdown import render_markdown
from transformer_conformance.reports.writer import step_summary


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Run:
    """numpy (correctly rounded), ε outside the square root (its shrunk example is borderline, its worst is
    not), and a candidate 1 % off whose name is markup, on RMSNorm's forward and the 70B accounting check."""
    done = run_suite(
        tmp_path_factory.mktemp("reading"),
        "--adapter=numpy,tests.planted:RmsEpsOutsideSqrt,tests.faulty:MarkupName",
        "--behaviour=rms_norm,accounting",
        "-k",
        "forward or gqa",
        "--dtype=float32",
    )
    assert done.returncode == 1, done.stdout[-2000:] + done.stderr[-2000:]
    return done


def test_a_correctly_rounded_result_uses_none_of_its_budget(run: Run) -> None:
    (c,) = run.checks(adapter="numpy", check="rms_norm/forward")
    assert c["max_ulp"] == pytest.approx(0.5, abs=0.01) and c["budget_used"] > 0.9
    assert share(c) == 0.0
    assert "| `rms_norm/forward` | pass 0.5 · 0% |" in (run.report_dir / "report.md").read_text()


def test_shares_read_as_percentages_then_multiples() -> None:
    assert (fmt_share(0.5), fmt_share(1.0), fmt_share(9.9), fmt_share(1034830.97)) == (
        "50%",
        "100%",
        "990%",
        "1.03e+06× budget",
    )


def test_the_worst_example_is_kept_beside_the_shrunk_one(run: Run) -> None:
    """Shrinking ends on the smallest failing example, often a borderline one: the example furthest over its
    budget is kept too, with its own reproduction, and shown beside it."""
    rec = Record("rms_norm/forward", "rms_norm", "", "")
    calls = [{"method": "forward", "inputs": {}, "params": {}, "oracle": 1.0, "candidate": 2.0}]
    for share_, text in ((339.0, "error 339 ulp"), (1.5, "error 0.75 ulp")):  # generation, then the shrunk one
        failure = CheckFailure(text)
        failure.share = share_
        repro.store(rec, "rms_norm", "float32", calls, failure=failure)
    assert rec.extra["worst"]["share"] == 339.0 and rec.extra["worst"]["message"] == "error 339 ulp"
    (c,) = run.checks(adapter="rms-eps-outside-sqrt", check="rms_norm/forward")
    assert c["extra"]["worst"]["repro"]["adapter"]["spec"] == "tests.planted:RmsEpsOutsideSqrt"
    c = dict(c, extra=dict(c["extra"], worst=dict(c["extra"]["worst"], share=339.0, message="error 339 ulp")))
    report = dict(run.report, checks=[c])
    assert "Furthest over its budget (339× budget), before shrinking" in render_markdown(report)
    assert "error 339 ulp" in render_html(report)
    assert "-float32-worst.py" in render_html(report)


def test_failures_most_severe_first(run: Run) -> None:
    failed = sorted((c for c in run.report["checks"] if c["status"] == "failed"), key=severity)
    assert [c["adapter"] for c in failed][:1] == ["evil|*name*<b>`x`"]  # 1 % off: 1e5 ulps
    md = (run.report_dir / "report.md").read_text()
    assert md.index("rms-eps-outside-sqrt · `rms_norm/forward`") > md.index("name\\*\\<b\\>\\`x\\` · `rms_norm")


def test_candidate_strings_are_text(run: Run) -> None:
    md = (run.report_dir / "report.md").read_text()
    assert "## evil\\|\\*name\\*\\<b\\>\\`x\\`" in md
    outside_code = "".join(md.split("```")[::2])  # messages are code blocks: their text is shown as it is
    assert "<b>" not in outside_code


def test_junit_names_are_distinct(run: Run) -> None:
    root = ET.parse(run.report_dir / "junit.xml").getroot()
    for suite in root.iter("testsuite"):
        names = [(case.get("classname"), case.get("name")) for case in suite.iter("testcase")]
        assert len(names) == len(set(names)), names
    gqa = [case.get("name") for case in root.iter("testcase") if "gqa" in (case.get("name") or "")]
    assert "accounting/gqa-70b[tied]" in gqa and "accounting/gqa-70b[untied]" in gqa


def test_the_seed_documents_are_named(run: Run) -> None:
    assert set(run.report["seeds"]) == {"seed-000", "seed-002", "seed-004"}
    assert "## Seed documents" in (run.report_dir / "report.md").read_text()


def test_the_step_summary_stays_under_the_limit() -> None:
    blocks = "".join(f"\n### case {i}\n\n```\n{'x' * 900}\n```\n" for i in range(2000))
    md = "# Conformance report\n\n## Failures\n" + blocks
    out = step_summary(md, limit=100_000)
    assert len(out.encode()) <= 100_000
    assert out.count("### case") + int(out.split("(")[-1].split(" more")[0]) == 2000
    assert out.count("```") % 2 == 0  # never cut inside a block
    assert step_summary("short", limit=100) == "short"


def test_a_failing_check_costs_about_what_a_passing_one_does(tmp_path: Path) -> None:
    """A candidate wrong everywhere must not make the gate crawl: a failing check runs no more examples than a
    passing one (ci's 40), and still reports its first failure shrunk, with its @reproduce_failure line."""
    done = run_suite(tmp_path, "--adapter=tests.faulty:OnePercentOff", "test_rmsnorm.py", "--dtype=float32")
    assert done.returncode == 1, done.stdout[-2000:] + done.stderr[-2000:]
    failed = [c for c in done.report["checks"] if c["status"] == "failed"]
    assert len(failed) == 5  # forward, gradient, scale-invariance and the two size-regime checks
    for c in failed:
        assert c["examples"] <= 40, (c["check"], c["examples"])
        assert "@reproduce_failure" in c["counterexample"]

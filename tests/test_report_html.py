"""report.html, badge.svg and the step summary: what a person reads and publishes about a run."""

from __future__ import annotations

import base64
import html
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from tests.conformance_run import ROOT, Run
from transformer_conformance.adapters.numpy.adapter import NumpyAdapter
from transformer_conformance.reports.writer import write_reports

INJECTED = "<script>alert(1)</script>"
FILES = ("report.json", "report.md", "report.html", "junit.xml", "badge.svg")


def _html(run: Run) -> str:
    return (run.report_dir / "report.html").read_text(encoding="utf-8")


def test_all_files_written_atomically(defect_run: Run) -> None:
    """Every run writes the five report files beside each other, and leaves no temporary file behind."""
    names = {p.name for p in defect_run.report_dir.iterdir()}
    assert set(FILES) <= names
    assert not [n for n in names if n.endswith(".tmp")], names


def test_self_contained(defect_run: Run) -> None:
    """No request leaves the page: nothing is loaded from elsewhere, and the page's policy forbids it."""
    page = _html(defect_run)
    assert not re.search(r"""(?:src|href|action)\s*=\s*["']?\s*(?:https?:|//|ftp:)""", page, re.I)
    assert not re.search(r"<(?:link|iframe|object|embed|img)\b", page, re.I)
    assert "default-src 'none'" in page


def test_matrix_has_every_check(defect_run: Run) -> None:
    """The matrix holds one cell per check × adapter × dtype, each with its status."""
    page = _html(defect_run)
    matrix = page[page.index('id="matrix"') : page.index('id="precision"')]
    statuses = re.findall(r'data-status="(\w+)"', matrix)
    checks = defect_run.report["checks"]
    assert sorted(statuses) == sorted(c["status"] for c in checks)
    assert ">raises<" in matrix and ">z-loss-linear<" in matrix  # one column group per adapter
    assert "1.73e+07 ulp" in matrix or re.search(r"\d ulp( · [^<]+)?</small>", matrix)


def test_precision_view(defect_run: Run) -> None:
    """The precision table shows the worst ulp per behaviour and dtype, red where a budget was exceeded."""
    page = _html(defect_run)
    table = page[page.index('id="precision"') : page.index('id="failures"')]
    z = next(c for c in defect_run.checks(adapter="z-loss-linear", check="z_loss/value", dtype="float32"))
    assert f"{z['max_ulp']:.3g}" in table
    assert "#f8b4b4" in table  # the failing z-loss cell


def test_failure_section(defect_run: Run) -> None:
    """Each failure shows the property in words, the seed statement, the message and the counterexample."""
    page = _html(defect_run)
    failed = defect_run.checks(status="failed")
    # raises: rms_norm's forward, regime-forward and gradient in bfloat16; z-loss-linear: z_loss's value and
    # gradient (and default α) in float32
    assert len(failed) == 6
    assert page.count('<article class="failure') == len(failed)
    for c in failed:
        assert html.escape(c["property"]) in page
        assert html.escape(c["cites"]) in page
        assert html.escape(c["message"]) in page
    assert "Shrunk counterexample" in page and "reproduce_failure" in page
    # a script for each failing call small enough to write out; a size regime's says why it has none
    big = [c for c in failed if "omitted" in (c.get("extra") or {}).get("repro", {})]
    assert page.count('class="script"') == len(failed) - len(big)
    assert page.count("No reproduction script: the failing call has") == len(big)


def test_markup_from_candidates_is_text(defect_run: Run) -> None:
    """A candidate's error message holding markup is shown escaped; the only script is the page's own."""
    page = _html(defect_run)
    assert INJECTED not in page
    assert html.escape(INJECTED) in page
    assert page.count("<script") == 1


def _scripts(run: Run) -> dict[str, str]:
    """The downloadable reproduction scripts of report.html, by file name (checking the shown copy)."""
    page = _html(run)
    out = {}
    for name, b64 in re.findall(r'download="([^"]+)" href="data:text/x-python;charset=utf-8;base64,([^"]+)"', page):
        script = base64.b64decode(b64).decode()
        assert html.escape(script) in page  # the <pre> shows the same text the download holds
        out[name] = script
    return out


def _run_script(script: str, tmp_path: Path) -> str:
    path = tmp_path / "repro.py"
    path.write_text(script)
    proc = subprocess.run(
        [sys.executable, str(path)], cwd=ROOT, capture_output=True, text=True, check=False
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


def test_reproduction_script_shows_the_discrepancy(defect_run: Run, tmp_path: Path) -> None:
    """The failure's script, run on its own, calls the candidate and shows the same wrong value next to the
    oracle's as the report recorded."""
    c = defect_run.checks(adapter="z-loss-linear", check="z_loss/value", dtype="float32")[0]
    call = c["extra"]["repro"]["calls"][0]
    assert c["extra"]["repro"]["adapter"]["spec"] == "tests.planted:ZLossLinear"
    script = _scripts(defect_run)["repro-z-loss-linear-z_loss-value-float32.py"]
    assert "tests.planted" not in script.split("CASE =")[0]  # the adapter comes from the recorded spec
    out = _run_script(script, tmp_path)
    got, want = call["candidate"]["values"], call["oracle"]["values"]
    for g, w in zip(got, want, strict=True):
        assert f"candidate {g!r}" in out and f"oracle {w!r}" in out
    worst = max(abs(g - w) for g, w in zip(got, want, strict=True))
    shown = float(re.search(r"largest difference: (\S+)", out).group(1))  # type: ignore[union-attr]
    assert shown == pytest.approx(worst, rel=1e-12) and shown > 0


def test_reproduction_script_of_a_raising_candidate(defect_run: Run, tmp_path: Path) -> None:
    """For a candidate that raises, the script shows the exception; the markup in it is harmless text."""
    out = _run_script(_scripts(defect_run)["repro-raises-rms_norm-forward-float32.py"], tmp_path)
    assert f"raised ValueError: kernel launch failed: {INJECTED}" in out


def test_badge(defect_run: Run, builtin_run: Run) -> None:
    """badge.svg states passed / declared checks: red for the defective run, green for the good one."""
    ns = "{http://www.w3.org/2000/svg}"
    bad = ET.parse(defect_run.report_dir / "badge.svg").getroot()
    declared = [c for c in defect_run.report["checks"] if c["status"] not in ("unsupported", "skipped")]
    passed = sum(c["status"] == "passed" for c in declared)
    assert 0 < passed < len(declared) and passed / len(declared) < 0.5
    assert [t.text for t in bad.iter(f"{ns}text")] == ["conformance", f"{passed}/{len(declared)}"]
    assert bad.findall(f"{ns}rect")[1].get("fill") == "#e05d44"  # red: under half of the declared checks pass
    good = ET.parse(builtin_run.report_dir / "badge.svg").getroot()
    assert [t.text for t in good.iter(f"{ns}text")] == ["conformance", "2/2"]
    assert good.findall(f"{ns}rect")[1].get("fill") == "#2ea043"


def test_step_summary(defect_run: Run, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With GITHUB_STEP_SUMMARY set, report.md is appended to that file (what was there stays)."""
    summary = tmp_path / "summary.md"
    summary.write_text("earlier step\n")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    paths = write_reports(
        tmp_path / "out",
        results=defect_run.report["checks"],
        adapters=[NumpyAdapter()],
        profile="ci",
        seed=None,
        started=0.0,
        exitstatus=1,
    )
    assert [p.name for p in paths] == list(FILES)
    text = summary.read_text()
    assert text.startswith("earlier step\n# Conformance report")
    assert (tmp_path / "out" / "report.md").read_text() in text

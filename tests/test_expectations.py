"""Expectation files (--expectations): a known failure does not fail the run, a new one does; malformed
files are usage errors of one line; what the expectations decided is in every report file."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from tests.conformance_run import Run, run_suite
from transformer_conformance.conformance.runner import expectations
from transformer_conformance.reports.schema import validate

#: the planted z-loss defect (α·z for α·z²) breaks z_loss/value and z_loss/gradient; default-alpha passes (the
#: size-regime checks, which it breaks too, are left out: these runs are about the expectation file)
ZLOSS = ("--adapter=tests.planted:ZLossLinear", "test_losses.py", "--behaviour=z_loss", "--dtype=float32")

KNOWN = """\
# the planted defect's failures, as a user lists their candidate's
[[expect]]
check = "z_loss/value"
adapter = "z-loss-linear"
status = "fail"
reason = "z-loss computed as alpha*z"
match = "^z_loss output: got .* should be "

[[expect]]
check = "z_loss/gradient"
dtype = ["float32", "bfloat16"]
status = "skip"
reason = "the gradient of alpha*z is not worth the time"

[[expect]]
check = "z_loss/default-alpha"
status = "fail"
reason = "thought to use alpha 1e-3"

[[expect]]
check = "rope/*"
adapter = "z-loss-linear"
status = "fail"
reason = "an entry no check of this run matches"
"""


def _write(tmp_path: Path, text: str, name: str = "expect.toml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


# -- parsing and matching (in process) --------------------------------------------------------------------


def test_parse_valid_file() -> None:
    entries = expectations.parse(KNOWN, "known.toml")
    assert [e.check for e in entries] == ["z_loss/value", "z_loss/gradient", "z_loss/default-alpha", "rope/*"]
    value, grad, _, rope = entries
    assert (value.adapter, value.dtypes, value.status, value.line) == ("z-loss-linear", None, "fail", 2)
    assert grad.dtypes == ("float32", "bfloat16") and grad.status == "skip" and grad.adapter is None
    assert rope.behaviour == "rope" and value.behaviour is None
    assert expectations.parse("", "empty.toml") == []  # a file with no entry expects nothing


def test_matching() -> None:
    """An exact id, 'behaviour/*' and a bare behaviour name; dtype and adapter narrow; skip before fail."""
    text = """
[[expect]]
check = "layer_norm"
status = "fail"
reason = "r1"
[[expect]]
check = "layer_norm/forward"
dtype = "float16"
adapter = "jax"
status = "skip"
reason = "r2"
[[expect]]
check = "glu/*"
status = "fail"
reason = "r3"
"""
    behaviour, exact, glu = entries = expectations.parse(text, "f.toml")
    assert behaviour.matches("layer_norm/gradient", "layer_norm", "any", "bfloat16")
    assert not behaviour.matches("rms_norm/forward", "rms_norm", "any", "float32")
    assert exact.matches("layer_norm/forward", "layer_norm", "jax", "float16")
    assert not exact.matches("layer_norm/forward", "layer_norm", "flax", "float16")
    assert not exact.matches("layer_norm/forward", "layer_norm", "jax", "float32")
    assert glu.matches("glu/forward", "mlp", "torch", "float32") and not glu.matches("mlp/forward", "mlp", "t", None)
    assert expectations.decide(entries, "layer_norm/forward", "layer_norm", "jax", "float16") is exact
    assert expectations.decide(entries, "layer_norm/forward", "layer_norm", "jax", "float32") is behaviour
    assert expectations.decide(entries, "rope/forward", "rope", "jax", "float32") is None


def test_match_covers_every_distinct_failure() -> None:
    """With ``match``, a failure is the known one only if every distinct failure of the check contains it."""
    (listed,) = expectations.parse("[[expect]]\n" + ENTRY + 'match = "got (nan|-?inf)"\n', "m.toml")
    assert listed.describes(["∂L/∂x: got nan at (0, 0), should be 1"])
    assert not listed.describes(["∂L/∂x: got nan at (0, 0)", "output: got 3 at (1,), should be 2"])
    (anything,) = expectations.parse("[[expect]]\n" + ENTRY, "m.toml")
    assert anything.match is None and anything.describes(["output: got 3 at (1,), should be 2"])


def test_shipped_files_parse() -> None:
    """The expectation files of the built-in adapters are valid, and each entry names a built-in adapter."""
    from transformer_conformance.adapters.registry import BUILTIN

    files = sorted(Path(__file__).resolve().parent.parent.glob("expectations/*.toml"))
    assert files
    for path in files:
        entries = expectations.load(path)
        assert entries, path
        assert all(e.adapter in BUILTIN and e.status == "fail" for e in entries), path


# -- malformed files: one line, exit status 4 --------------------------------------------------------------


ENTRY = 'check = "rms_norm/forward"\nstatus = "fail"\nreason = "r"\n'


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (None, "cannot read expectations file"),
        ("[[expect]\ncheck = 1", "not valid TOML: "),
        ("[[expect]]\n" + ENTRY + "dtypes = 'float16'\n", "entry 1 (check 'rms_norm/forward'): unknown key 'dtypes'"),
        ('[[expect]]\ncheck = "rms_norm/forward"\nstatus = "fail"\n', "'reason' is required and must not be empty"),
        ('[[expect]]\ncheck = "rms_norm/forward"\nstatus = "fail"\nreason = "  "\n', "'reason' is required"),
        ('[[expect]]\ncheck = "rms_norm/forward"\nstatus = "xfail"\nreason = "r"\n', "unknown status 'xfail'"),
        ('[[expect]]\ncheck = "rms_norm/forward"\nreason = "r"\n', "'status' is required"),
        ("[[expect]]\n" + ENTRY + 'dtype = "float8"\n', "unknown dtype 'float8'; expected one of float32"),
        ('[[expect]]\nstatus = "fail"\nreason = "r"\n', "entry 1: 'check' is required"),
        ("[[expects]]\n" + ENTRY, "unknown top-level key 'expects'"),
        ("[[expect]]\n" + ENTRY + 'match = "got (nan"\n', "'match' 'got (nan' is not a regular expression: "),
        ("[[expect]]\n" + ENTRY + 'match = ""\n', "'match' must be a non-empty regular expression"),
        ('[[expect]]\ncheck = "rms_norm"\nstatus = "skip"\nreason = "r"\nmatch = "nan"\n', "'match' belongs to"),
        ("[[expect]]\n" + ENTRY + 'sometimes = "yes"\n', "'sometimes' must be true or false"),
        ('[[expect]]\ncheck = "rms_norm"\nstatus = "skip"\nreason = "r"\nsometimes = true\n', "'sometimes' belongs to"),
    ],
    ids=[
        "missing-file",
        "not-toml",
        "unknown-key",
        "no-reason",
        "empty-reason",
        "bad-status",
        "no-status",
        "bad-dtype",
        "no-check",
        "top-level-key",
        "bad-match",
        "empty-match",
        "match-on-skip",
        "sometimes-not-bool",
        "sometimes-on-skip",
    ],
)
def test_malformed_file_is_one_line(tmp_path: Path, text: str | None, expected: str) -> None:
    path = tmp_path / "expect.toml" if text is None else _write(tmp_path, text)
    run = run_suite(tmp_path / "out", "--adapter=numpy", "--expectations", str(path), "test_rmsnorm.py")
    assert run.returncode == 4, run.stdout[-1500:] + run.stderr[-1500:]
    errors = [line for line in run.stderr.splitlines() if line.startswith("ERROR:")]
    assert len(errors) == 1 and "Traceback" not in run.stderr, run.stderr
    assert expected in errors[0] and str(path) in errors[0], errors[0]


# -- runs of a planted defect ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def known_run(tmp_path_factory: pytest.TempPathFactory) -> Run:
    d = tmp_path_factory.mktemp("known")
    return run_suite(d / "out", *ZLOSS, "-k", "not regime", "--expectations", str(_write(d, KNOWN)))


def test_known_failure_passes_the_gate(known_run: Run) -> None:
    """Every failure of the defect is listed: exit 0; verdict known-failures, not conformant."""
    assert known_run.returncode == 0, known_run.stdout[-3000:] + known_run.stderr[-2000:]
    assert known_run.report["verdict"] == "known-failures"
    assert validate(known_run.report) == []


def test_known_failure_keeps_its_details(known_run: Run) -> None:
    """A known failure keeps the message, the counterexample and the reproduction payload, and its reason."""
    (c,) = known_run.checks(check="z_loss/value")
    assert c["status"] == "known_failure"
    assert c["expectation"]["reason"] == "z-loss computed as alpha*z" and c["expectation"]["entry"] == 1
    assert "should be" in c["message"] and "reproduce_failure" in c["counterexample"]
    assert c["extra"]["repro"]["calls"] and c["max_ulp"] > 1
    md = (known_run.report_dir / "report.md").read_text()
    assert "## Known failures" in md and "| z_loss | `z_loss/value` | known failure" in md
    page = (known_run.report_dir / "report.html").read_text()
    assert 'class="cell s-known_failure"' in page and "z-loss computed as alpha*z" in page
    assert 'id="known-failures"' in page and page.count('class="script"') == 1
    case = next(
        e
        for e in ET.parse(known_run.report_dir / "junit.xml").getroot().iter("testcase")
        if e.get("name") == "z_loss/value[float32]"
    )
    skipped = case.find("skipped")
    assert case.find("failure") is None and skipped is not None and skipped.get("type") == "known-failure"
    assert "reproduce_failure" in (skipped.text or "")
    badge = (known_run.report_dir / "badge.svg").read_text()
    assert "1/3, 1 known" in badge  # the unexpected pass passed; the skipped check is declared


def test_skip_is_not_run(known_run: Run) -> None:
    """A "skip" entry: the check is skipped with its reason and never calls the candidate."""
    (c,) = known_run.checks(check="z_loss/gradient")
    assert c["status"] == "skipped" and c["message"] == "the gradient of alpha*z is not worth the time"
    assert "examples" not in c and c["expectation"]["status"] == "skip"
    assert 'class="cell s-expected_skip"' in (known_run.report_dir / "report.html").read_text()


def test_unexpected_pass_is_a_warning(known_run: Run) -> None:
    """A listed check that passes: a warning and a prominent notice, not a failure."""
    (c,) = known_run.checks(check="z_loss/default-alpha")
    assert c["status"] == "unexpectedly_passed"
    assert "ExpectationWarning: z-loss-linear z_loss/default-alpha [float32] unexpectedly passed" in known_run.stdout
    assert "UNEXPECTEDLY PASSED: z-loss-linear z_loss/default-alpha" in known_run.stdout
    assert "1 check unexpectedly passed" in (known_run.report_dir / "report.md").read_text()
    assert 'id="unexpected"' in (known_run.report_dir / "report.html").read_text()


def test_a_failure_only_some_samples_reach_may_pass(tmp_path: Path) -> None:
    """A "sometimes" entry whose check passes (this sample missed the failure): passed, the entry named, no warning."""
    alpha = 'reason = "thought to use alpha 1e-3"'
    text = KNOWN.replace(alpha, alpha + "\nsometimes = true")
    run = run_suite(tmp_path / "out", *ZLOSS, "-k", "not regime", "--expectations", str(_write(tmp_path, text)))
    assert run.returncode == 0, run.stdout[-3000:]
    (c,) = run.checks(check="z_loss/default-alpha")
    assert c["status"] == "passed" and c["expectation"]["sometimes"] is True
    assert "unexpectedly passed" not in run.stdout and validate(run.report) == []
    (entry,) = [e for e in run.report["expectations"]["entries"] if e["check"] == "z_loss/default-alpha"]
    assert entry["sometimes"] is True and entry["matched"] == 1


def test_unmatched_entry_is_warned_and_listed(known_run: Run) -> None:
    assert "expect.toml entry 4 (check 'rope/*'; adapter z-loss-linear; status fail) matches no check" in (
        known_run.stdout
    )
    entries = known_run.report["expectations"]["entries"]
    assert [e["matched"] for e in entries] == [1, 1, 1, 0]
    assert "**1 entry matched no check in this run.**" in (known_run.report_dir / "report.md").read_text()


def test_without_the_file_the_run_fails(tmp_path: Path) -> None:
    run = run_suite(tmp_path, *ZLOSS, "-k", "value")
    assert run.returncode == 1 and run.report["verdict"] == "non-conformant"
    assert [c["status"] for c in run.checks(check="z_loss/value")] == ["failed"]


def test_new_failure_fails_the_run(tmp_path: Path) -> None:
    """Only z_loss/value listed: the gradient's failure is new and fails the run; value stays known."""
    path = _write(tmp_path, '[[expect]]\ncheck = "z_loss/value"\nstatus = "fail"\nreason = "alpha*z"\n')
    run = run_suite(tmp_path / "out", *ZLOSS, "-k", "not default and not regime", "--expectations", str(path))
    assert run.returncode == 1, run.stdout[-2000:]
    assert run.report["verdict"] == "non-conformant"
    assert [c["status"] for c in run.checks(check="z_loss/value")] == ["known_failure"]
    assert [c["status"] for c in run.checks(check="z_loss/gradient")] == ["failed"]


def test_match_not_found_is_a_new_failure(tmp_path: Path) -> None:
    """A "fail" entry whose match is not in the failure's message does not cover it: the check fails, its
    message says which entry did not match, and the entry is not shown as deciding it."""
    path = _write(tmp_path, '[[expect]]\ncheck = "z_loss/value"\nstatus = "fail"\nreason = "r"\nmatch = "got nan"\n')
    run = run_suite(tmp_path / "out", *ZLOSS, "-k", "value", "--expectations", str(path))
    assert run.returncode == 1 and run.report["verdict"] == "non-conformant", run.stdout[-2000:]
    (c,) = run.checks(check="z_loss/value")
    assert c["status"] == "failed" and "expectation" not in c, c
    assert c["message"].endswith(f"(not the known failure of {path} entry 1: its match 'got nan' is not in it)")
    assert run.report["expectations"]["entries"][0]["match"] == "got nan"
    assert validate(run.report) == []
    assert ", failures matching got nan" in (run.report_dir / "report.md").read_text()


@pytest.mark.slow
@pytest.mark.parametrize(
    ("match", "status"), [(None, "known_failure"), ("ended the process", "known_failure"), ("overflow", "failed")]
)
def test_known_crash(tmp_path: Path, match: str | None, status: str) -> None:
    """A candidate that ends its process, listed as a known failure: the crash is known, the run passes
    (with a ``match``, only when the expression is in the crash's message)."""
    entry = '[[expect]]\ncheck = "rms_norm/forward"\nstatus = "fail"\nreason = "exits"\n'
    path = _write(tmp_path, entry + (f'match = "{match}"\n' if match else ""))
    run = run_suite(
        tmp_path / "out",
        "--adapter=tests.faulty:EndsProcess",
        "--dtype=float32",
        "-n",
        "1",
        "-k",
        "test_forward",
        "--expectations",
        str(path),
        "test_rmsnorm.py",
    )
    assert run.returncode == (status == "failed"), run.stdout[-2000:]
    (c,) = run.checks(check="rms_norm/forward")
    assert c["status"] == status and "ended the process" in c["message"]
    assert ("expectation" in c) == (status == "known_failure")


def test_junit_is_valid(known_run: Run) -> None:
    """junit.xml with known failures, expected skips and unexpected passes is still valid JUnit XML; the
    known failure and the expected skip count as skipped, nothing as a failure."""
    xmlschema = pytest.importorskip("xmlschema")
    xmlschema.XMLSchema(str(Path(__file__).with_name("junit.xsd"))).validate(str(known_run.report_dir / "junit.xml"))
    root = ET.parse(known_run.report_dir / "junit.xml").getroot()
    assert (root.get("failures"), root.get("errors"), root.get("skipped")) == ("0", "0", "2")

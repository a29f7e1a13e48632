"""Command-line behaviour: bad options get one clear line and exit status 4; misbehaving candidates are
verdicts in a complete report, never the end of the run."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conformance_run import Run, run_suite
from transformer_conformance.adapters.contract import DTYPES
from transformer_conformance.adapters.registry import BUILTIN


def _usage_error(tmp_path: Path, *args: str) -> str:
    run = run_suite(tmp_path, *args, "test_rmsnorm.py")
    assert run.returncode == 4, run.stdout[-1500:] + run.stderr[-1500:]
    errors = [line for line in run.stderr.splitlines() if line.startswith("ERROR:")]
    assert len(errors) == 1, run.stderr
    assert "Traceback" not in run.stderr
    return errors[0]


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (
            ["--adapter", "nope"],
            "unknown adapter 'nope'; built-in adapters: " + ", ".join(sorted(BUILTIN)),
        ),
        (["--adapter", "no_such_pkg.mod:Adapter"], "cannot import 'no_such_pkg.mod': ModuleNotFoundError"),
        (["--adapter", "tests.faulty:Missing"], "module 'tests.faulty' has no attribute 'Missing'"),
        (["--adapter", "tests.faulty:not_an_adapter"], "is not an adapter: it has no conventions"),
        (["--adapter", "tests.faulty:bad_conventions"], "must be a transformer_conformance.adapters.Conventions"),
        (["--adapter", "tests.faulty:capabilities_list"], "adapter.capabilities must be a mapping of operation name"),
        (["--behaviour", "nope"], "unknown behaviour 'nope'; expected one of accounting, alibi, attention"),
        (["--adapter", "tests.faulty:unknown_op"], "declares unknown operation 'flash_attention'"),
        (["--adapter", "numpy,numpy"], "two adapters share the name 'numpy'"),
        (["--dtype", "float8"], "unknown dtype 'float8'; expected one of float32, bfloat16, float16"),
    ],
    ids=[
        "unknown-name",
        "no-import",
        "no-attr",
        "not-adapter",
        "bad-conventions",
        "capabilities-not-a-mapping",
        "unknown-behaviour",
        "unknown-op",
        "duplicate",
        "bad-dtype",
    ],
)
def test_bad_option_is_one_line(tmp_path: Path, args: list[str], expected: str) -> None:
    """Each malformed option stops the run with exit 4 and one line naming the problem."""
    assert expected in _usage_error(tmp_path, *args)


#: a run refused for a mistyped adapter name, in a fresh interpreter: its exit status and whether torch was imported
TYPO_RUN = """
import sys
from transformer_conformance.conformance.runner.cli import main
status = main(["--adapter", "numpy,torhc", "--report-dir", sys.argv[1], "test_rmsnorm.py"])
print(status, "torch" in sys.modules)
"""


def test_mistyped_adapter_is_refused_before_torch_is_imported(tmp_path: Path) -> None:
    """An unknown adapter name is a usage error before the run imports anything for its adapters (torch, which
    the Triton interpreter's switch imports where triton is installed, takes seconds)."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}  # as on a machine where no run set it
    run = subprocess.run(
        [sys.executable, "-c", TYPO_RUN, str(tmp_path)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
        check=False,
    )
    assert run.stdout.split()[-2:] == ["4", "False"], run.stdout[-1500:] + run.stderr[-1500:]
    assert "unknown adapter 'torhc'" in run.stderr


def test_unwritable_report_dir(tmp_path: Path) -> None:
    """A report directory that cannot be written is a usage error, reported before any check runs."""
    blocker = tmp_path / "file"
    blocker.write_text("")
    run = run_suite(blocker / "sub", "--adapter", "numpy", "test_rmsnorm.py")
    assert run.returncode == 4
    assert "cannot write the report to" in run.stderr


@pytest.fixture(scope="module")
def faulty_run(tmp_path_factory: pytest.TempPathFactory) -> Run:
    names = ["Raises", "ReturnsNaN", "WrongShape", "WrongDtype", "ModifiesInput", "OnlyRmsNormFloat32"]
    return run_suite(
        tmp_path_factory.mktemp("faulty"),
        *[f"--adapter=tests.faulty:{n}" for n in names],
        "test_rmsnorm.py",
        "test_rope.py",
    )


@pytest.mark.slow
@pytest.mark.parametrize(
    ("adapter", "fragment"),
    [
        ("raises", "raised ValueError: kernel launch failed: <script>alert(1)</script> [raises.rms_norm("),
        ("returns-nan", "rms_norm output: got nan at"),
        ("wrong-shape", "rms_norm output: got shape"),
        ("wrong-dtype", "rms_norm output: got dtype float64, should be"),
        ("modifies-input", "modified its input x"),
    ],
)
def test_misbehaving_candidate_is_a_failed_check(faulty_run: Run, adapter: str, fragment: str) -> None:
    """Raising, NaN, wrong shape or dtype, or writing into an input: a failed check with the example."""
    failed = faulty_run.checks(adapter=adapter, check="rms_norm/forward", status="failed")
    assert len(failed) == 3, faulty_run.checks(adapter=adapter, check="rms_norm/forward")
    assert fragment in failed[0]["message"]
    assert failed[0]["counterexample"]


@pytest.mark.slow
def test_run_goes_on_after_misbehaviour(faulty_run: Run) -> None:
    """Other behaviours of the misbehaving candidates are still checked, and pass; the run exits 1."""
    assert faulty_run.returncode == 1
    for adapter in ("raises", "returns-nan", "wrong-shape", "wrong-dtype", "modifies-input"):
        # (the autocast modes, which these NumPy candidates do not declare, are unsupported)
        rope = [c for c in faulty_run.checks(adapter=adapter, behaviour="rope") if c["dtype"] in DTYPES]
        assert rope and all(c["status"] == "passed" for c in rope), rope


@pytest.mark.slow
def test_undeclared_is_unsupported_never_passed(faulty_run: Run) -> None:
    """What an adapter does not declare is reported unsupported; only what it declares can pass."""
    checks = faulty_run.checks(adapter="only-rms-float32")
    passed = {(c["check"], c["dtype"]) for c in checks if c["status"] == "passed"}
    assert passed == {
        ("rms_norm/forward", "float32"),
        ("rms_norm/regime-forward", "float32"),
        ("rms_norm/scale-invariance", "float32"),
    }
    unsupported = [c for c in checks if c["status"] == "unsupported"]
    assert {c["behaviour"] for c in unsupported} == {"rms_norm", "rope"}
    assert any("does not declare gradients of rms_norm" in c["message"] for c in unsupported)
    assert any("does not declare rms_norm in bfloat16" in c["message"] for c in unsupported)


@pytest.mark.slow
def test_report_files(faulty_run: Run) -> None:
    """report.json carries the schema, environment, adapters and per-check fields; report.md the matrix."""
    r = faulty_run.report
    assert (r["schema"], r["schema_version"]) == ("transformer-conformance/report", 2)
    assert r["verdict"] == "non-conformant" and r["hypothesis"]["profile"] == "ci"
    assert {a["name"] for a in r["adapters"]} >= {"raises", "only-rms-float32"}
    assert r["summary"]["failed"] > 0 and r["summary"]["unsupported"] > 0
    for c in r["checks"]:
        assert {"check", "behaviour", "property", "cites", "adapter", "dtype", "status", "duration_s"} <= set(c)
        assert c["cites"].startswith("seed-")
    md = (faulty_run.report_dir / "report.md").read_text()
    assert "**Verdict: non-conformant**" in md
    assert "| rms_norm | `rms_norm/forward` | **FAIL**" in md
    assert "## Time per behaviour" in md and "## Failures" in md


def test_interrupted_run_leaves_a_valid_partial_report(tmp_path: Path) -> None:
    """Ctrl-C in the middle of a run: exit 2, and a complete report of the verdicts reached so far."""
    run = run_suite(
        tmp_path, "--adapter=tests.faulty:InterruptsRun", "test_rmsnorm.py", "test_rope.py"
    )
    assert run.returncode == 2, run.stdout[-1500:]
    r = run.report
    assert r["verdict"] == "incomplete"
    rms = [c for c in r["checks"] if c["behaviour"] == "rms_norm"]
    assert len(rms) >= 3 and all(c["status"] == "passed" for c in rms)  # the verdicts reached are kept
    assert (tmp_path / "report.md").read_text().startswith("# Conformance report")


def test_hang_is_stopped_and_reported(tmp_path: Path) -> None:
    """A call that never returns is stopped after --example-timeout; the check fails as hung, the rest run."""
    run = run_suite(
        tmp_path,
        "--adapter=tests.faulty:Hangs",
        "--example-timeout=0.5",
        "--dtype=float32",
        "test_rmsnorm.py",
        "test_rope.py",
    )
    assert run.returncode == 1
    hung = run.checks(check="rms_norm/forward")[0]
    assert hung["status"] == "failed" and "hung: made no progress" in hung["message"], hung["message"]
    assert all(c["status"] == "passed" for c in run.checks(behaviour="rope"))


@pytest.mark.slow
@pytest.mark.parametrize("workers", ["1", "2"])
def test_crash_is_isolated(tmp_path: Path, workers: str) -> None:
    """A candidate that ends its process fails the check it was in; with -n the other checks still run (the workers
    that replace the ones it ended are given the rest of their operation's checks: conformance/runner/scheduling.py)."""
    run = run_suite(
        tmp_path,
        "--adapter=tests.faulty:EndsProcess",
        "--dtype=float32",
        "-n",
        workers,
        "test_rmsnorm.py",
        "test_rope.py",
    )
    assert run.returncode == 1, run.stdout[-2000:]
    crashed = [c for c in run.checks(behaviour="rms_norm") if c["status"] == "failed"]
    assert crashed and "ended the process" in crashed[0]["message"]
    rope = run.checks(behaviour="rope")
    assert rope and all(c["status"] == "passed" for c in rope)


def test_nothing_checked_is_not_conformant(tmp_path: Path) -> None:
    """A candidate of which no check ran (it declares nothing) is not a pass: its own verdict, exit 5."""
    run = run_suite(tmp_path, "--adapter=tests.faulty:DeclaresNothing", "test_rmsnorm.py")
    assert run.returncode == 5, run.stdout[-2000:] + run.stderr[-2000:]
    report = run.report
    assert report["verdict"] == "nothing-checked" and report["exit_status"] == 5
    assert report["unchecked"] == ["declares-nothing"]
    assert report["summary"]["unsupported"] > 0 and report["summary"]["passed"] == 0
    assert "Nothing of declares-nothing was checked" in (tmp_path / "report.md").read_text()
    assert "nothing was verified" in run.stdout


def test_one_unchecked_candidate_fails_the_gate(tmp_path: Path) -> None:
    """Beside a candidate that passes, one of which nothing ran still makes the run nothing-checked."""
    run = run_suite(tmp_path, "--adapter=numpy,tests.faulty:DeclaresNothing", "test_rmsnorm.py", "-k", "forward")
    assert run.returncode == 5, run.stdout[-2000:] + run.stderr[-2000:]
    assert run.report["verdict"] == "nothing-checked" and run.report["unchecked"] == ["declares-nothing"]
    assert run.report["summary"]["passed"] > 0


def _cli(*args: str) -> str:
    import subprocess
    import sys

    proc = subprocess.run(
        [sys.executable, "-m", "transformer_conformance.conformance", *args], capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_version_is_the_suites() -> None:
    import re
    from importlib.metadata import version

    out = _cli("--version")
    # run from this checkout, the commit follows the version (tests/test_provenance.py)
    v = re.escape(version("transformer-conformance"))
    assert re.match(rf"transformer-conformance {v}(, commit [0-9a-f]+(, modified)?)? \(pytest ", out), out


def test_help_starts_with_the_suites_options() -> None:
    lines = _cli("--help").splitlines()
    assert lines[0] == "usage: transformer-conformance [OPTIONS]"
    assert len(lines) < 80
    options = [line.split()[0] for line in lines if line.startswith("  --")]
    for name in ("--adapter", "--dtype", "--behaviour", "--expectations", "--report-dir", "--help-pytest"):
        assert name in options, lines
    assert "--hypothesis-profile" in _cli("--help-pytest")

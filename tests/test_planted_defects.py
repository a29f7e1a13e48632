"""Each planted defect is reported as non-conformant, by the check of the behaviour it breaks."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conformance_run import Run, run_suite
from tests.planted import BREAKS

# each planted defect's whole conformance run: minutes
pytestmark = pytest.mark.slow


def _dtype(cls: type) -> str:
    return BREAKS[cls][2] or "float32"


@pytest.fixture(scope="module")
def planted_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Run]:
    """One conformance run per dtype the defects are expected to fail in, each restricted to that dtype."""
    runs = {}
    for dtype in sorted({_dtype(cls) for cls in BREAKS}):
        adapters = [f"--adapter=tests.planted:{cls.__name__}" for cls in BREAKS if _dtype(cls) == dtype]
        runs[dtype] = run_suite(tmp_path_factory.mktemp(f"planted-{dtype}"), *adapters, f"--dtype={dtype}", "-n", "2")
    return runs


@pytest.fixture(scope="module")
def planted_run(planted_runs: dict[str, Run]) -> Run:
    return planted_runs["float32"]


def test_run_is_non_conformant(planted_runs: dict[str, Run]) -> None:
    """A run with a defective candidate exits 1 (pytest's 'tests failed') and says non-conformant."""
    for run in planted_runs.values():
        assert run.returncode == 1, run.stdout[-2000:] + run.stderr[-2000:]
        assert run.report["verdict"] == "non-conformant"


@pytest.mark.parametrize("cls", list(BREAKS), ids=[c.__name__ for c in BREAKS])
def test_defect_caught_by_its_behaviour(planted_runs: dict[str, Run], cls: type) -> None:
    """The defect fails the check of the behaviour it breaks, and no other behaviour's checks."""
    behaviour, check_ids, dtype = BREAKS[cls]
    planted_run = planted_runs[_dtype(cls)]
    name = cls.name  # type: ignore[attr-defined]
    failed = planted_run.checks(adapter=name, status="failed")
    for check_id in (check_ids,) if isinstance(check_ids, str) else check_ids:  # every check named must catch it
        assert any(c["check"] == check_id and (dtype is None or c["dtype"] == dtype) for c in failed), (
            f"{name}: {check_id} [{dtype}] did not fail; failures: {[(c['check'], c['dtype']) for c in failed]}"
        )
        caught = next(c for c in failed if c["check"] == check_id)
        assert "should be" in caught["message"] and f"[{name}." in caught["message"], caught["message"]
    assert {c["behaviour"] for c in failed} == {behaviour}, [(c["check"], c["dtype"]) for c in failed]
    assert not planted_run.checks(adapter=name, status="error")


def test_dynamic_ntk_checks_tell_the_design_from_the_regression(planted_run: Run) -> None:
    """A dynamic NTK that keeps its cache at n = L but resets below it (HF's design) fails the n = L check
    and passes the n < L one; one that never resets fails both. An expectation entry naming the design
    (``rope_scaled/dynamic-at-trained-length``) therefore leaves a regression below L visible."""

    def status(adapter: str, check: str) -> str:
        (c,) = planted_run.checks(adapter=adapter, check=check, dtype="float32")
        return str(c["status"])

    below, at = "rope_scaled/dynamic-below-trained-length", "rope_scaled/dynamic-at-trained-length"
    assert (status("dynamic-ntk-keeps-at-l", below), status("dynamic-ntk-keeps-at-l", at)) == ("passed", "failed")
    assert (status("dynamic-ntk-sticky", below), status("dynamic-ntk-sticky", at)) == ("failed", "failed")


def test_failure_carries_counterexample(planted_run: Run, tmp_path: Path) -> None:
    """A failed check records the shrunk example (what the candidate was given) and Hypothesis's reproduction
    blob, without the call of the suite's own test function."""
    c = planted_run.checks(adapter="z-loss-linear", check="z_loss/value", dtype="float32")[0]
    assert "Draw 1 (case): Case(inputs={'logits': array(" in c["counterexample"]
    assert "Falsifying example" not in c["counterexample"] and "Failing test case" not in c["counterexample"]
    assert "reproduce_failure" in c["counterexample"]
    assert c["examples"] >= 1 and c["max_ulp"] > 1


def test_first_failing_example_recorded(planted_run: Run) -> None:
    """A failed Hypothesis check records the index of its first failing example (before shrinking)."""
    c = planted_run.checks(adapter="z-loss-linear", check="z_loss/value", dtype="float32")[0]
    assert 1 <= c["first_failure"] <= c["examples"]
    passed = planted_run.checks(adapter="z-loss-linear", status="passed")
    assert passed and all("first_failure" not in p for p in passed)

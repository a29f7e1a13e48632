"""Each planted defect is reported as non-conformant, by the check of the behaviour it breaks."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conformance_run import Run, run_suite
from tests.planted import BREAKS


@pytest.fixture(scope="module")
def planted_run(tmp_path_factory: pytest.TempPathFactory) -> Run:
    adapters = [f"--adapter=tests.planted:{cls.__name__}" for cls in BREAKS]
    return run_suite(tmp_path_factory.mktemp("planted"), *adapters, "-n", "2")


def test_run_is_non_conformant(planted_run: Run) -> None:
    """A run with a defective candidate exits 1 (pytest's 'tests failed') and says non-conformant."""
    assert planted_run.returncode == 1, planted_run.stdout[-2000:] + planted_run.stderr[-2000:]
    assert planted_run.report["verdict"] == "non-conformant"


@pytest.mark.parametrize("cls", list(BREAKS), ids=[c.__name__ for c in BREAKS])
def test_defect_caught_by_its_behaviour(planted_run: Run, cls: type) -> None:
    """The defect fails the check of the behaviour it breaks, and no other behaviour's checks."""
    behaviour, check_ids, dtype = BREAKS[cls]
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


def test_failure_carries_counterexample(planted_run: Run, tmp_path: Path) -> None:
    """A failed check records the shrunk example and Hypothesis's reproduction blob."""
    c = planted_run.checks(adapter="z-loss-linear", check="z_loss/value", dtype="float32")[0]
    assert "Falsifying example" in c["counterexample"] or "Failing test case" in c["counterexample"]
    assert "reproduce_failure" in c["counterexample"]
    assert c["examples"] >= 1 and c["max_ulp"] > 1

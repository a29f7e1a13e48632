"""Answers that must be computed (docs/gating.md): candidates right in every value they return, delivering them in
the ways candidates optimised against a check do, fail with a message naming the pattern; a candidate declaring
what it does (in-place, non-deterministic) passes; the harness's rules leave a correct answer alone."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from tests.conformance_run import Run, run_suite
from tests.gaming import CAUGHT, LastBitNoiseDeclared
from transformer_conformance.conformance.harness import integrity


@pytest.fixture(scope="module")
def gaming_run(tmp_path_factory: pytest.TempPathFactory) -> Run:
    """The integrity check of rms_norm, then its agreement checks, one process, float32 (integrity first: a cache
    by shape is seen filling)."""
    adapters = [f"--adapter=tests.gaming:{cls.__name__}" for cls in [*CAUGHT, LastBitNoiseDeclared]]
    return run_suite(
        tmp_path_factory.mktemp("gaming"),
        *adapters,
        "--dtype=float32",
        "--hypothesis-profile=ci-noshrink",
        "test_integrity.py::test_rms_norm",
        "test_rmsnorm.py::test_forward",
    )


@pytest.mark.parametrize("cls", list(CAUGHT), ids=[c.__name__ for c in CAUGHT])
def test_gaming_candidate_caught(gaming_run: Run, cls: type) -> None:
    check, words = CAUGHT[cls]
    name = cls.name  # type: ignore[attr-defined]
    failed = {c["check"]: c["message"] for c in gaming_run.checks(adapter=name, status="failed")}
    assert check in failed, f"{name}: {check} did not fail; failures: {failed}"
    assert words in failed[check] and f"{name}.rms_norm(" in failed[check], failed[check]
    assert not gaming_run.checks(adapter=name, status="error")


def test_declared_nondeterminism_passes(gaming_run: Run) -> None:
    """Declared, answers that differ in their last bits are each held to the budget, and pass."""
    mine = gaming_run.checks(adapter=LastBitNoiseDeclared.name)
    assert mine and all(c["status"] == "passed" for c in mine), [(c["check"], c.get("message")) for c in mine]


def test_poisoned_memory_is_named() -> None:
    """Memory filled with the poison byte reads as NaN in every float format, and is told apart from a NaN
    arithmetic makes."""
    for dtype in (np.float16, np.float32, np.float64):
        a = np.frombuffer(bytes([integrity.POISON]) * 8, dtype=dtype).copy()
        assert np.isnan(a).all()
        assert integrity.poisoned(a, (0,))
        assert not integrity.poisoned(np.array([np.nan], dtype), (0,))


def test_fresh_answer_alone_passes() -> None:
    """A fresh, plain, settled answer passes every rule; the same array returned again does not."""
    x = np.ones((2, 3), np.float32)
    out = x * 2
    integrity.check_aliasing("t.op", "t.op(x)", out, {"x": x}, in_place=False)
    integrity.remember("t.op", "t.op(x)", out)
    integrity.check_kept("t.op", "t.op(x)")
    with pytest.raises(integrity.Violation, match="the answer of the previous call"):
        integrity.check_aliasing("t.op", "t.op(x)", out, {"x": x}, in_place=False)
    with pytest.raises(integrity.Violation, match="shares memory with its input x"):
        integrity.check_aliasing("t.other", "t.other(x)", x[:1], {"x": x}, in_place=False)
    integrity.check_aliasing("t.other", "t.other(x)", x[:1], {"x": x}, in_place=True)
    out[0, 0] = 7
    with pytest.raises(integrity.Violation, match="changed afterwards, while its caller held it"):
        integrity.check_kept("t.op", "t.op(x)")


def test_threads_left_running_are_waited_for() -> None:
    """A thread still running after the call is joined; an answer it changes meanwhile fails, one it leaves
    alone passes."""
    out = np.zeros(3)
    before = integrity.threads()
    threading.Thread(target=time.sleep, args=(0.01,)).start()
    integrity.settle(out, before, "t.op()")

    def late() -> None:
        time.sleep(0.01)
        out[1] = 1.0

    before = integrity.threads()
    threading.Thread(target=late, name="late").start()
    with pytest.raises(integrity.Violation, match=r"changed after the call returned: got 0.0 at \(1,\)"):
        integrity.settle(out, before, "t.op()")


def test_previous_answer_held_until_the_next_call() -> None:
    """The harness holds the previous answer of each operation (so its memory cannot be handed out again), and
    only that one: the next call's answer replaces it."""
    first, second = np.arange(4.0), np.arange(4.0)
    integrity.remember("t.held", "t.held()", first)
    assert integrity._LATEST["t.held"][0].array is first
    integrity.remember("t.held", "t.held()", second)
    assert [r.array for r in integrity._LATEST["t.held"]] == [second]

"""A call is judged hung on the candidate's own progress (conformance/harness/watchdog.py), so a busy machine
never turns into a verdict: a candidate getting a small share of a core, or waiting on its own worker
processes, is not hung; one that sleeps forever or spins forever is."""

from __future__ import annotations

import multiprocessing
import time

import pytest

from transformer_conformance.conformance.harness.watchdog import Hung, watch


def _spin(seconds: float) -> None:
    end = time.process_time() + seconds
    while time.process_time() < end:
        pass


def test_a_sleeping_call_is_hung() -> None:
    with pytest.raises(Hung, match="made no progress"), watch(0.5):
        time.sleep(3600)


def test_a_spinning_call_is_hung() -> None:
    # a limit long enough that a busy machine does not starve the spinning process for a whole window
    with pytest.raises(Hung, match="s of CPU time without returning"), watch(2.0):
        _spin(3600)


def test_a_call_with_a_small_share_of_a_core_is_not_hung() -> None:
    """What a loaded machine does to a correct candidate: 10 % of a core, for five times the limit."""
    with watch(2.0):
        end = time.monotonic() + 10.0
        while time.monotonic() < end:
            _spin(0.01)
            time.sleep(0.09)


def test_the_first_call_may_warm_up_longer() -> None:
    """An operation's first call (compilation) may use ten times the CPU time of the limit."""
    with watch(1.0, first_call=True):
        _spin(3.0)
    with pytest.raises(Hung, match="s of CPU time without returning"), watch(1.0):
        _spin(3.0)


def _work(seconds: float) -> None:
    """A quarter of a core for ``seconds`` of wall time."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        _spin(0.025)
        time.sleep(0.075)


def test_work_in_child_processes_is_progress() -> None:
    """A candidate waiting on its own worker process (a compiler's pool) is making progress: here the waiting
    process itself uses no CPU for twice the limit."""
    ctx = multiprocessing.get_context("spawn")
    with watch(2.0):
        child = ctx.Process(target=_work, args=(4.0,))
        child.start()
        child.join()
    assert child.exitcode == 0


def test_no_limit_is_not_watched() -> None:
    with watch(0):
        time.sleep(0.6)

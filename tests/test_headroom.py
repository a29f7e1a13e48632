"""Candidates are called with room on CPython's frame stack (conformance/harness/headroom.py): what their calls cost
does not depend on how deep the harness is when it calls them."""

from __future__ import annotations

import resource
import sys
from collections.abc import Callable

import pytest

from transformer_conformance.conformance.harness import headroom


def test_call_passes_arguments_and_results() -> None:
    assert headroom.call(lambda a, b=1: (a, b), 2, b=3) == (2, 3)
    with pytest.raises(KeyError, match="x"):
        headroom.call({}.__getitem__, "x")


def test_the_calling_frame_is_over_64_kib() -> None:
    assert headroom.SLOTS * 8 > 64 * 1024
    assert headroom._CALL.__code__.co_nlocals >= headroom.SLOTS


def _leaf(x: int) -> int:
    return x + 1


def _loop() -> int:
    """A loop calling a function thousands of times, as an interpreter's inner loop does."""
    total = 0
    for i in range(20_000):
        total = _leaf(total) + (i & 0)
    return total


def _faults_at(depth: int, run: Callable[[], int]) -> int:
    if depth:
        return _faults_at(depth - 1, run)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    run()
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="page faults counted by getrusage on Linux")
def test_no_depth_pays_for_the_stack() -> None:
    """From every depth the loop runs without page faults of its own: a chunk opened and freed at each of its calls
    would fault at each (20,000 calls)."""
    worst = max(_faults_at(depth, lambda: headroom.call(_loop)) for depth in range(0, 400, 3))
    assert worst < 1000, worst


@pytest.mark.skipif(
    not sys.platform.startswith("linux") or sys.version_info >= (3, 13),
    reason="page faults counted on Linux; CPython 3.13 keeps a chunk spare (gh-142183)",
)
def test_without_it_some_depth_faults_at_every_call() -> None:
    """What the headroom prevents: called directly, from some depth each of the loop's calls opens a chunk."""
    assert max(_faults_at(depth, _loop) for depth in range(0, 400, 1)) >= 20_000

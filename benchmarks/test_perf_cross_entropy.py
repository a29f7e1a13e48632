"""Softmax cross-entropy over the vocabulary: memory-bound, placed against the copy bandwidth."""

import pytest

from benchmarks.perf.plugin import Case, PerfRun


@pytest.mark.perf_op("cross_entropy")
def test_cross_entropy(perf_case: Case, perf_run: PerfRun, benchmark: object) -> None:
    perf_run.measure(perf_case, benchmark)

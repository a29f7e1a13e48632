"""RoPE: an element-wise rotation, memory-bound, placed against the copy bandwidth."""

import pytest

from benchmarks.perf.plugin import Case, PerfRun


@pytest.mark.perf_op("rope")
def test_rope(perf_case: Case, perf_run: PerfRun, benchmark: object) -> None:
    perf_run.measure(perf_case, benchmark)

"""LayerNorm: memory-bound (seed-002 §3.2.1), placed against the copy bandwidth."""

import pytest

from benchmarks.perf.plugin import Case, PerfRun


@pytest.mark.perf_op("layer_norm")
def test_layer_norm(perf_case: Case, perf_run: PerfRun, benchmark: object) -> None:
    perf_run.measure(perf_case, benchmark)

"""The SwiGLU MLP (three matrix products: compute-bound, placed against the matmul rate) and its GLU
element-wise product alone (memory-bound, placed against the copy bandwidth)."""

import pytest

from benchmarks.perf.plugin import Case, PerfRun


@pytest.mark.perf_op("swiglu_mlp")
def test_swiglu_mlp(perf_case: Case, perf_run: PerfRun, benchmark: object) -> None:
    perf_run.measure(perf_case, benchmark)


@pytest.mark.perf_op("swiglu_product")
def test_swiglu_product(perf_case: Case, perf_run: PerfRun, benchmark: object) -> None:
    perf_run.measure(perf_case, benchmark)

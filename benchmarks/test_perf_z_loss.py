"""z-loss, alpha·logsumexp²: memory-bound, placed against the copy bandwidth."""

import pytest

from benchmarks.perf.plugin import Case, PerfRun


@pytest.mark.perf_op("z_loss")
def test_z_loss(perf_case: Case, perf_run: PerfRun, benchmark: object) -> None:
    perf_run.measure(perf_case, benchmark)

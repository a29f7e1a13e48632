"""pytest wiring of the performance report: the hooks and fixtures live in benchmarks.perf.plugin."""

from benchmarks.perf.plugin import (  # noqa: F401 - pytest finds hooks and fixtures by name in a conftest
    perf_run,
    pytest_addoption,
    pytest_collection_modifyitems,
    pytest_configure,
    pytest_generate_tests,
    pytest_sessionfinish,
    pytest_terminal_summary,
)

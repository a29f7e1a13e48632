"""pytest wiring of the conformance suite: the hooks and fixtures live in conformance.plugin."""

from conformance.plugin import (  # noqa: F401 - pytest finds hooks and fixtures by name in a conftest
    declared_support,
    expected_skip,
    pytest_addoption,
    pytest_collection_modifyitems,
    pytest_configure,
    pytest_generate_tests,
    pytest_runtest_call,
    pytest_runtest_logreport,
    pytest_runtest_makereport,
    pytest_sessionfinish,
    pytest_sessionstart,
    pytest_terminal_summary,
    record,
)

"""reports/report.schema.json: real runs validate; other schema versions and foreign JSON get one clear line."""

from __future__ import annotations

import copy

import pytest

from reports.schema import load_schema, problem, validate
from tests.conformance_run import Run

pytest.importorskip("jsonschema")


def test_schema_is_a_valid_json_schema() -> None:
    import jsonschema

    jsonschema.Draft202012Validator.check_schema(load_schema())
    assert load_schema()["properties"]["schema_version"] == {"const": 1}


def test_real_runs_validate(defect_run: Run, builtin_run: Run) -> None:
    """A non-conformant run (failures with their reproduction payload) and a conformant one both validate."""
    for run in (defect_run, builtin_run):
        assert validate(run.report) == []
    assert any("repro" in c.get("extra", {}) for c in defect_run.report["checks"])


@pytest.mark.parametrize(
    ("version", "expected"),
    [
        (0, "report schema version 0 is older than the version this suite reads (1); re-run the suite"),
        (2, "report schema version 2 is not the version this suite reads (1)"),
        ("1", "report schema version '1' is not the version this suite reads (1)"),
    ],
)
def test_other_schema_versions(builtin_run: Run, version: object, expected: str) -> None:
    doc = copy.deepcopy(builtin_run.report)
    doc["schema_version"] = version
    errors = validate(doc)
    assert len(errors) == 1 and errors[0].startswith(expected), errors


def test_foreign_and_broken_documents(builtin_run: Run) -> None:
    assert "not a conformance report" in (problem([1, 2]) or "")
    assert "not a conformance report" in (problem({"schema": "other"}) or "")
    doc = copy.deepcopy(builtin_run.report)
    doc["checks"][0]["status"] = "great"
    errors = validate(doc)
    assert errors and errors[0].startswith("checks/0/status:"), errors

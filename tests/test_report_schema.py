"""reports/report.schema.json: real runs validate; other schema versions and foreign JSON get one clear line."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from tests.conformance_run import Run
from transformer_conformance.reports.schema import load_schema, problem, validate

pytest.importorskip("jsonschema")


def test_schema_is_a_valid_json_schema() -> None:
    import jsonschema

    jsonschema.Draft202012Validator.check_schema(load_schema())
    assert load_schema()["properties"]["schema_version"] == {"enum": [1, 2]}


def test_real_runs_validate(defect_run: Run, builtin_run: Run) -> None:
    """A non-conformant run (failures with their reproduction payload) and a conformant one both validate."""
    for run in (defect_run, builtin_run):
        assert validate(run.report) == []
    assert any("repro" in c.get("extra", {}) for c in defect_run.report["checks"])


@pytest.mark.parametrize(
    ("version", "expected"),
    [
        (0, "report schema version 0 is older than the versions this suite reads (1, 2); re-run the suite"),
        (3, "report schema version 3 is not the versions this suite reads (1, 2)"),
        ("1", "report schema version '1' is not the versions this suite reads (1, 2)"),
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


def as_version_1(report: dict[str, Any]) -> dict[str, Any]:
    """A report as the suite wrote it before expectation files (schema version 1)."""
    doc = copy.deepcopy(report)
    doc["schema_version"] = 1
    del doc["expectations"]
    for k in ("known_failure", "unexpectedly_passed"):
        del doc["summary"][k]
    return doc


def test_version_1_reports_still_load(builtin_run: Run, tmp_path: Path) -> None:
    """A report written before schema version 2 validates, renders and is merged by the dashboard."""
    from transformer_conformance.reports.dashboard import build_site, load

    old = as_version_1(builtin_run.report)
    assert validate(old) == []
    path = tmp_path / "old.json"
    path.write_text(json.dumps(old))
    runs, errors = load([str(path)])
    assert errors == [] and len(runs) == 1
    build_site(runs, tmp_path / "site")
    assert "2/2" in (tmp_path / "site" / "index.html").read_text()


def test_version_2_requires_its_fields(builtin_run: Run) -> None:
    doc = copy.deepcopy(builtin_run.report)
    assert doc["schema_version"] == 2 and doc["expectations"] == {"files": [], "entries": []}
    del doc["expectations"]
    assert any("expectations" in e for e in validate(doc))

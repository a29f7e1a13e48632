"""Checking a report.json against the published schema (reports/report.schema.json, schema versions 1 and 2).

:func:`problem` needs nothing beyond the standard library and says, in one line, why a document is not a
report this suite reads (foreign JSON, another schema version); :func:`validate` adds full validation
against the JSON Schema with the ``jsonschema`` package (the project's dev extra).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from transformer_conformance.reports.writer import READABLE_VERSIONS, SCHEMA, SCHEMA_VERSION

SCHEMA_PATH = Path(__file__).with_name("report.schema.json")


def load_schema() -> dict[str, Any]:
    schema: dict[str, Any] = json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))
    return schema


def problem(doc: Any) -> str | None:
    """Why ``doc`` is not a report of a schema version this suite reads, or None if it looks like one."""
    if not isinstance(doc, dict):
        return f"not a conformance report: the document is a JSON {type(doc).__name__}, not an object"
    if doc.get("schema") != SCHEMA:
        return f'not a conformance report: its "schema" is {doc.get("schema")!r}, not {SCHEMA!r}'
    v = doc.get("schema_version")
    if type(v) is not int or v not in READABLE_VERSIONS:
        older = type(v) is int and v < min(READABLE_VERSIONS)
        readable = ", ".join(str(n) for n in READABLE_VERSIONS)
        return (
            f"report schema version {v!r} is {'older than' if older else 'not'} the versions this suite reads "
            f"({readable}); {'re-run the suite to write' if older else 'use the suite version that wrote it, or'}"
            f" a version-{SCHEMA_VERSION} report"
        )
    missing = [k for k in ("verdict", "summary", "adapters", "checks", "created") if k not in doc]
    if missing:
        return f"malformed report: missing {', '.join(missing)}"
    if not isinstance(doc["checks"], list) or not all(isinstance(c, dict) for c in doc["checks"]):
        return 'malformed report: "checks" is not a list of objects'
    return None


def validate(doc: Any) -> list[str]:
    """Every way ``doc`` departs from the schema (empty: valid). The version is checked first, so a report
    of another schema version gets one clear line rather than a list of mismatches."""
    first = problem(doc)
    if first is not None:
        return [first]
    import jsonschema

    validator = jsonschema.Draft202012Validator(load_schema())
    return [
        f"{'/'.join(str(p) for p in e.absolute_path) or '(top)'}: {e.message}"
        for e in sorted(validator.iter_errors(doc), key=lambda e: list(e.absolute_path))
    ]

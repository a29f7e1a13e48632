"""Reading a performance run (``perf.json`` of ``nox -s bench``, docs/performance.md) for the reports.

The conformance reports show a performance run beside the verdict, never as part of it: report.html when
the run is given with ``--perf-json`` (or lies at ``REPORT_DIR/bench/perf.json``, where ``nox -s bench``
writes it), and the dashboard when perf.json files are given with the report.json files. Only the standard
library is needed: the reports do not import the benchmark harness.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

PERF_SCHEMA = "transformer-conformance/perf"
PERF_SCHEMA_VERSION = 1
RESULT_FIELDS = ("behaviour", "op", "adapter", "dtype", "pass", "size", "time_s")


class PerfRunError(ValueError):
    """A file that is not a performance run this suite reads."""


def is_perf(doc: Any) -> bool:
    return isinstance(doc, dict) and doc.get("schema") == PERF_SCHEMA


def problem(doc: Any) -> str | None:
    """Why ``doc`` is not a performance run the reports can show, or None."""
    if not is_perf(doc):
        schema = doc.get("schema") if isinstance(doc, dict) else None
        return f"not a performance run: its schema is {schema!r}, not {PERF_SCHEMA!r}"
    if doc.get("schema_version") != PERF_SCHEMA_VERSION:
        return f"performance run schema version {doc.get('schema_version')!r}, not {PERF_SCHEMA_VERSION}"
    results = doc.get("results")
    if not isinstance(results, list):
        return 'malformed performance run: "results" is not a list'
    for r in results:
        if not isinstance(r, dict) or any(k not in r for k in RESULT_FIELDS):
            return f"malformed performance run: a result lacks one of {', '.join(RESULT_FIELDS)}"
        if not isinstance(r["time_s"], dict) or "median" not in r["time_s"]:
            return "malformed performance run: a result's time_s has no median"
    return None


def load(path: Path) -> dict[str, Any]:
    """The run in ``path``, with ``source`` set to the path; raises PerfRunError saying why it cannot be read."""
    try:
        doc = json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise PerfRunError(f"{path}: cannot read: {exc.strerror or exc}") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise PerfRunError(f"{path}: not JSON: {str(exc).splitlines()[0]}") from None
    why = problem(doc)
    if why is not None:
        raise PerfRunError(f"{path}: {why}")
    doc["source"] = str(path)
    return dict(doc)

"""Writing a run's report: ``report.json`` (schema in docs/report.md and reports/report.schema.json),
``report.md``, ``report.html``, ``junit.xml`` and ``badge.svg``; and, when ``GITHUB_STEP_SUMMARY`` is set,
report.md appended to GitHub's step summary.

Every file is written atomically (a temporary file renamed over the old one), so an interrupted run
leaves either the previous complete report or the new one, never a truncated file.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import os
import platform
import re
import sys
import tempfile
import time
from collections.abc import Iterable, Mapping, Sequence
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

from transformer_conformance.reports import provenance
from transformer_conformance.reports.badge import render_badge
from transformer_conformance.reports.html_page import kind
from transformer_conformance.reports.html_report import render_html
from transformer_conformance.reports.junit import render_junit
from transformer_conformance.reports.markdown import render_markdown

SCHEMA = "transformer-conformance/report"
SCHEMA_VERSION = 2
#: every schema version this suite still reads (version 1: before expectation files)
READABLE_VERSIONS = (1, 2)
STATUSES = ("passed", "failed", "error", "unsupported", "skipped", "known_failure", "unexpectedly_passed")


def suite_version() -> str:
    """The suite's version (its commit, when known, is :func:`provenance.current`'s)."""
    return provenance.current().version


def _lib_versions(names: Iterable[str]) -> dict[str, str]:
    out = {}
    for n in names:
        try:
            out[n] = version(n)
        except PackageNotFoundError:
            pass
    return out


def atomic_write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, 0o644)  # readable like any published file (mkstemp creates it private)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def verdict(checks: Sequence[dict[str, Any]], exitstatus: int, unchecked: Sequence[str] = ()) -> str:
    """The run's verdict. ``unchecked``: candidates of which no check ran (all unsupported, deselected or
    skipped): the run verified nothing of them, which is never conformant."""
    if exitstatus in (2, 3):  # interrupted or internal error: what is here is partial
        return "incomplete"
    if any(c["status"] in ("failed", "error") for c in checks):
        return "non-conformant"
    if unchecked or not checks:
        return "nothing-checked"
    if any(c["status"] == "known_failure" or kind(c) == "expected_skip" for c in checks):
        return "known-failures"  # nothing new failed; what an expectation file excuses remains
    return "conformant"


def build_report(
    results: list[dict[str, Any]],
    adapters: Sequence[Any],
    profile: str,
    seed: Any,
    started: float,
    exitstatus: int,
    specs: Mapping[str, str] | None = None,
    expectations: Mapping[str, Any] | None = None,
    unchecked: Sequence[str] = (),
    hypothesis_settings: Mapping[str, Any] | None = None,
    seeds: Mapping[str, str] | None = None,
    reached: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    checks = sorted(results, key=lambda c: (c["adapter"], c["behaviour"], c["check"], c["dtype"] or ""))
    summary = {s: sum(1 for c in checks if c["status"] == s) for s in STATUSES}
    return {
        "schema": SCHEMA,
        "schema_version": SCHEMA_VERSION,
        **provenance.current().report_fields(),  # suite_version, and suite_commit when known
        "created": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "duration_s": round(time.time() - started, 3),
        "exit_status": exitstatus,
        "verdict": verdict(checks, exitstatus, unchecked),
        **({"unchecked": list(unchecked)} if unchecked else {}),
        "summary": summary,
        "hypothesis": {
            "profile": profile,
            "seed": seed,
            "version": _lib_versions(["hypothesis"]).get("hypothesis"),
            **(hypothesis_settings or {}),
        },
        "environment": {
            "python": sys.version.split()[0],
            "platform": platform.platform(),
            "machine": platform.machine(),
            "libraries": _lib_versions(
                [
                    "numpy",
                    "ml_dtypes",
                    "torch",
                    "jax",
                    "flax",
                    "transformers",
                    "triton",
                    "liger-kernel",
                    "pytest",
                    "pytest-xdist",
                ]
            ),
        },
        "adapters": [
            {
                "name": a.name,
                **({"spec": specs[a.name]} if specs and a.name in specs else {}),
                "conventions": a.conventions.describe(),
                "capabilities": {op: _capability(c) for op, c in a.capabilities.items()},
                "environment": _safe_env(a),
                **({"declarations": lint} if (lint := declaration_lint(checks, a.name)) else {}),
            }
            for a in adapters
        ],
        "expectations": dict(expectations) if expectations else {"files": [], "entries": []},
        **({"seeds": dict(seeds)} if seeds else {}),
        "checks": checks,
        **({"reached": dict(reached)} if reached else {}),
    }


def declaration_lint(checks: Sequence[dict[str, Any]], adapter: str) -> list[dict[str, Any]]:
    """For each loosening declaration of ``adapter`` some check measured (``extra.without``: the largest share
    of the budget computed without it), whether any check needed it: a check that did not pass, or a share
    over 1. An unneeded declaration widens budgets the candidate does not use (docs/report.md)."""
    seen: dict[str, dict[str, Any]] = {}
    for c in checks:
        if c["adapter"] != adapter:
            continue
        for name, used in (c.get("extra") or {}).get("without", {}).items():
            d = seen.setdefault(name, {"declaration": name, "needed": False, "worst_share": 0.0, "checks": []})
            d["worst_share"] = max(d["worst_share"], float(used))
            d["needed"] = d["needed"] or float(used) > 1.0 or c["status"] not in ("passed", "unexpectedly_passed")
            label = f"{c['check']} {c['dtype'] or ''}".strip()
            if label not in d["checks"]:
                d["checks"].append(label)
    return [seen[k] for k in sorted(seen)]


def _capability(c: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"dtypes": sorted(c.dtypes), "grad": c.grad}
    values = getattr(c, "values", None)  # an adapter written against an older contract may not have them
    if values:
        out["values"] = {k: sorted(v) for k, v in values.items()}
    autocast = getattr(c, "autocast", None)
    if autocast:
        out["autocast"] = sorted(autocast)
    compiles = getattr(c, "compiles", "no")
    if compiles != "no":
        out["compiles"] = compiles
    if getattr(c, "interpreted", False):
        out["interpreted"] = True
    return out


def _safe_env(adapter: Any) -> dict[str, str]:
    try:
        return {str(k): str(v) for k, v in adapter.environment().items()}
    except Exception as exc:  # noqa: BLE001 - a report must not die of a candidate's environment()
        return {"error": f"environment() raised {type(exc).__name__}: {exc}"}


def _finite(obj: Any) -> Any:
    """JSON has no NaN or infinity: such numbers are written as strings ("inf", "nan")."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return str(obj)
    if isinstance(obj, dict):
        return {k: _finite(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_finite(v) for v in obj]
    return obj


_NUMBER = r'(?:-?\d[\d.eE+-]*|"(?:-?inf|nan)"|null)'
#: a list of up to 8 numbers as json.dumps indents it, one per line (a JSON string holds no raw newline, so
#: no text inside a string matches)
_SHORT_LIST = re.compile(rf"\[\n *({_NUMBER}(?:,\n *{_NUMBER}){{0,7}})\n *\]")


def to_json(report: dict[str, Any]) -> str:
    """report.json's text: indented, with short lists of numbers (shapes, series points) on one line."""
    text = json.dumps(report, indent=2, allow_nan=False, default=str)
    return _SHORT_LIST.sub(lambda m: "[" + re.sub(r",\n *", ", ", m.group(1)) + "]", text) + "\n"


def write_reports(directory: Path, perf: dict[str, Any] | None = None, **kw: Any) -> list[Path]:
    """Write the run's report files to ``directory``; ``perf``: a performance run for report.html to show."""
    report = _finite(build_report(**kw))
    md = render_markdown(report)
    files = {
        "report.json": to_json(report),
        "report.md": md,
        "report.html": render_html(report, perf=perf),
        "junit.xml": render_junit(report),
        "badge.svg": render_badge(report),
    }
    for name, text in files.items():
        atomic_write(directory / name, text)
    append_step_summary(md)
    return [directory / name for name in files]


#: GitHub drops a step summary over 1 MiB: the report's share of it, whatever fails
STEP_SUMMARY_LIMIT = 512 * 1024


def step_summary(markdown: str, limit: int = STEP_SUMMARY_LIMIT) -> str:
    """report.md as the job's summary: whole if it fits in ``limit`` bytes, else cut before a failure's heading
    (never inside a block) with a line saying how many failures are left to report.md."""
    if len(markdown.encode()) <= limit:
        return markdown
    note = (
        "\n\n> **The summary stops here** ({} more failure sections): report.md, an artifact of the job, has "
        "them all.\n"
    )
    cut = markdown.encode()[: limit - 400].decode(errors="ignore")
    at = cut.rfind("\n### ")
    if at < 0:
        at = cut.rfind("\n## ")
    head = markdown[: max(at, 0)]
    left = markdown[len(head) :].count("\n### ")
    return head + note.format(left)


def append_step_summary(markdown: str) -> None:
    """On GitHub Actions, add report.md to the job's summary page (the file GITHUB_STEP_SUMMARY names), within
    GitHub's size limit."""
    target = os.environ.get("GITHUB_STEP_SUMMARY")
    if not target:
        return
    with open(target, "a", encoding="utf-8") as f:
        f.write(step_summary(markdown) + "\n")

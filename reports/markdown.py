"""``report.md``: the summary matrix a person pastes into a pull request."""

from __future__ import annotations

import re
from collections import defaultdict
from typing import Any

from transformer_conformance.reports import reached
from transformer_conformance.reports.html_page import fmt_share, kind, not_declared, severity, share
from transformer_conformance.reports.md_text import esc as _esc

DTYPE_ORDER = ("float32", "bfloat16", "float16", "autocast-bfloat16", "autocast-float16")  # autocast: a mode
MARK = {
    "passed": "pass",
    "failed": "**FAIL**",
    "error": "**ERROR**",
    "unsupported": "unsupported",
    "skipped": "skipped",
    "known_failure": "known failure",
    "unexpectedly_passed": "**unexpectedly passed**",
}
MEASURED = ("passed", "failed", "known_failure", "unexpectedly_passed")


def _cell(c: dict[str, Any]) -> str:
    text = MARK[c["status"]]
    if kind(c) == "expected_skip":
        text = "skipped (expected)"
    if c["status"] in MEASURED and c.get("max_ulp") is not None:
        text += f" {c['max_ulp']:.3g}"
        if share(c) is not None:
            text += f" · {fmt_share(share(c))}"
    return text


def _entry(c: dict[str, Any]) -> str:
    e = c["expectation"]
    return f"{e['file']} entry {e['entry']}: {e['reason']}"


def _failure_block(c: dict[str, Any]) -> list[str]:
    lines = [
        f"### {_esc(c['adapter'])} · `{c['check']}` · {c['dtype'] or '—'} ({c['status'].replace('_', ' ')})",
        "",
        f"Property: {c['property']} — {c['cites']}",
        "",
    ]
    if c.get("expectation"):
        lines += [f"Expected by {_esc(_entry(c))}", ""]
    lines += _fenced(c.get("message", ""))
    worst = (c.get("extra") or {}).get("worst")
    if worst and worst.get("message") != c.get("message"):
        lines += [
            "",
            f"Furthest over its budget ({fmt_share(worst['share'])}), before shrinking:",
            "",
            *_fenced(worst["message"]),
        ]
    if c.get("counterexample"):
        lines += [
            "",
            "<details><summary>shrunk counterexample</summary>",
            "",
            *_fenced(c["counterexample"]),
            "",
            "</details>",
        ]
    return [*lines, ""]


def _matching(e: dict[str, Any]) -> str:
    """A "fail" entry's ``match``, as its status cell shows it (the failures it lists)."""
    return f", failures matching {_esc(e['match'])}" if e.get("match") else ""


def _expectations(report: dict[str, Any]) -> list[str]:
    entries = (report.get("expectations") or {}).get("entries") or []
    if not entries:
        return []
    lines = [
        "",
        "## Expectations",
        "",
        "Entries of the expectation files (docs/expectations.md); matched: the checks of this run each covers.",
        "",
        "| file | entry | check | dtype | adapter | status | reason | matched |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for e in entries:
        dtype = ", ".join(e["dtype"]) if e["dtype"] else "every"
        matched = str(e["matched"]) if e["matched"] else "**none**"
        lines.append(
            f"| {_esc(e['file'])} | {e['entry']} | {_esc(e['check'])} | {dtype} | {_esc(e['adapter'] or 'every')} "
            f"| {e['status']}{_matching(e)} | {_esc(e['reason'])} | {matched} |"
        )
    unmatched = [e for e in entries if not e["matched"]]
    if unmatched:
        lines += ["", f"**{len(unmatched)} entr{'ies' if len(unmatched) != 1 else 'y'} matched no check in this run.**"]
    return lines


def _narrowed(checks: list[dict[str, Any]]) -> list[str]:
    rows: dict[tuple[str, str, str], list[str]] = defaultdict(list)
    for c in checks:
        if not_declared(c):
            rows[(c["adapter"], c["check"], not_declared(c))].append(c["dtype"] or "—")
    if not rows:
        return []
    lines = [
        "",
        "## Checks run on the declared values only",
        "",
        "The adapter declares only some values of the operation's named choices; these checks never drew the "
        "others (docs/adapter-contract.md).",
        "",
    ]
    lines += [f"- {_esc(a)} · `{check}` · {', '.join(d)} — {_esc(why)}" for (a, check, why), d in rows.items()]
    return lines


def _unneeded_declarations(report: dict[str, Any]) -> list[str]:
    """The declaration lint: declared conventions the candidate did not need (docs/report.md)."""
    rows = [(a["name"], d) for a in report["adapters"] for d in a.get("declarations", []) if not d["needed"]]
    if not rows:
        return []
    lines = [
        "",
        "## Declarations not needed",
        "",
        "Each of these declared conventions widens a budget, yet every check it applies to passed within the "
        "budget computed without it: remove it, so that the checks judge the candidate by the tighter budget.",
        "",
        "| adapter | declaration | largest share of the budget without it | checks |",
        "|---|---|---|---|",
    ]
    for name, d in rows:
        shown = ", ".join(f"`{c}`" for c in d["checks"][:4]) + (" …" if len(d["checks"]) > 4 else "")
        lines.append(f"| {_esc(name)} | `{_esc(d['declaration'])}` | {100 * d['worst_share']:.0f}% | {shown} |")
    return lines


def _declared_values(a: dict[str, Any]) -> str:
    parts = [
        f"{op} {key} {', '.join(values)}"
        for op, cap in a.get("capabilities", {}).items()
        for key, values in cap.get("values", {}).items()
    ]
    return f"; declares only: {'; '.join(parts)}" if parts else ""


def _fenced(text: str) -> list[str]:
    """``text`` in a code block whose fence no run of backticks in it can close."""
    runs = [len(m) for m in re.findall(r"`+", text)]
    fence = "`" * max(3, max(runs, default=0) + 1)
    return [fence, text, fence]


def _settings(report: dict[str, Any]) -> str:
    h = report["hypothesis"]
    if "max_examples" not in h:
        return ""
    return f" ({h['max_examples']} examples a check{', derandomised' if h.get('derandomize') else ''})"


def _suite(report: dict[str, Any]) -> str:
    """The suite's version, with the commit it comes from when the report has it."""
    if "suite_commit" not in report:
        return str(report["suite_version"])
    modified = ", modified" if report.get("suite_modified") else ""
    return f"{report['suite_version']} (commit `{report['suite_commit']}`{modified})"


def render_markdown(report: dict[str, Any]) -> str:
    checks = report["checks"]
    s = report["summary"]
    lines = [
        "# Conformance report",
        "",
        f"**Verdict: {report['verdict']}** — "
        + ", ".join(f"{n} {k.replace('_', ' ')}" for k, n in s.items() if n)
        + ".",
        "",
        f"Suite {_suite(report)}, schema {report['schema_version']}; Hypothesis profile "
        f"`{report['hypothesis']['profile']}`, seed `{report['hypothesis']['seed']}`{_settings(report)}; "
        f"{report['created']}; {report['duration_s']:.1f} s.",
        "",
        "Cells: status, the worst error seen in ulps of the dtype against the float64 oracle, and the largest "
        "share of an element's error budget used beyond the output's own rounding (0% for a correctly rounded "
        "result; over 100% fails). docs/report.md explains how to read them.",
    ]
    for name in report.get("unchecked", []):
        lines += [
            "",
            f"> **Nothing of {_esc(name)} was checked**: every check was unsupported, deselected or skipped, so "
            "this run verified nothing of it (exit status 5). Declare what the candidate implements "
            "(`capabilities`), or widen `--behaviour` / `--dtype` / `-k`.",
        ]
    surprises = [c for c in checks if c["status"] == "unexpectedly_passed"]
    if surprises:
        lines += [
            "",
            f"> **{len(surprises)} check{'s' if len(surprises) != 1 else ''} unexpectedly passed** (a warning, not a "
            "failure): an expectation file lists them as known failures; remove the entry if the defect is fixed.",
            ">",
        ]
        lines += [
            f"> - {_esc(c['adapter'])} · `{c['check']}` · {c['dtype'] or '—'} — {_esc(_entry(c))}" for c in surprises
        ]
    by_adapter: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for c in checks:
        by_adapter[c["adapter"]].append(c)
    for adapter, rows in by_adapter.items():
        dtypes = [d for d in DTYPE_ORDER if any(c["dtype"] == d for c in rows)]
        has_none = any(c["dtype"] is None for c in rows)
        cols = dtypes + (["—"] if has_none else [])
        lines += [
            "",
            f"## {_esc(adapter)}",
            "",
            "| behaviour | check | " + " | ".join(cols) + " |",
            "|---|---|" + "---|" * len(cols),
        ]
        table: dict[tuple[str, str], dict[str, str]] = defaultdict(dict)
        undeclared: dict[tuple[str, str], bool] = {}
        for c in rows:
            table[(c["behaviour"], c["check"])][c["dtype"] or "—"] = _cell(c)
            key = (c["behaviour"], c["check"])
            undeclared[key] = undeclared.get(key, True) and c["status"] == "unsupported"
        for (behaviour, check), cells in sorted(table.items()):
            if not undeclared[(behaviour, check)]:
                lines.append(f"| {behaviour} | `{check}` | " + " | ".join(cells.get(d, "") for d in cols) + " |")
        hidden = sorted(key for key, none in undeclared.items() if none)
        if hidden:
            behaviours = sorted({b for b, _ in hidden})
            lines += [
                "",
                f"Not declared by {_esc(adapter)}, so not run: {len(hidden)} check{'s' if len(hidden) != 1 else ''} "
                f"of {', '.join(behaviours)}.",
            ]
    durations: dict[str, float] = defaultdict(float)
    for c in checks:
        durations[c["behaviour"]] += c.get("duration_s", 0.0)
    lines += ["", "## Time per behaviour", "", "| behaviour | seconds |", "|---|---|"]
    lines += [f"| {b} | {t:.2f} |" for b, t in sorted(durations.items())]
    failures = sorted((c for c in checks if c["status"] in ("failed", "error")), key=severity)
    if failures:
        lines += ["", "## Failures", ""]
        for c in failures:
            lines += _failure_block(c)
    known = [c for c in checks if c["status"] == "known_failure"]
    if known:
        lines += ["", "## Known failures", "", "Listed in an expectation file: they do not fail the run.", ""]
        for c in known:
            lines += _failure_block(c)
    lines += _narrowed(checks)
    lines += _unneeded_declarations(report)
    lines += _expectations(report)
    lines += reached.markdown(report)
    if report.get("seeds"):
        lines += ["", "## Seed documents", "", "Each check cites the statement it enforces by seed id and section:", ""]
        lines += [f"- `{sid}` — {_esc(title)}" for sid, title in report["seeds"].items()]
    lines += ["", "## Adapters and their declared conventions", ""]
    for a in report["adapters"]:
        env = ", ".join(f"{k} {v}" for k, v in a["environment"].items())
        conv = "; ".join(f"{k}: {v}" for k, v in a["conventions"].items())
        lines += [f"- **{_esc(a['name'])}** ({_esc(env)}) — {_esc(conv)}{_esc(_declared_values(a))}"]
    lines.append("")
    return "\n".join(lines)

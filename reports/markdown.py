"""``report.md``: the summary matrix a person pastes into a pull request."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

DTYPE_ORDER = ("float32", "bfloat16", "float16")
MARK = {
    "passed": "pass",
    "failed": "**FAIL**",
    "error": "**ERROR**",
    "unsupported": "unsupported",
    "skipped": "skipped",
}


def _cell(c: dict[str, Any]) -> str:
    text = MARK[c["status"]]
    if c["status"] in ("passed", "failed") and c.get("max_ulp") is not None:
        text += f" {c['max_ulp']:.3g}"
    return text


def _esc(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def render_markdown(report: dict[str, Any]) -> str:
    checks = report["checks"]
    s = report["summary"]
    lines = [
        "# Conformance report",
        "",
        f"**Verdict: {report['verdict']}** — " + ", ".join(f"{n} {k}" for k, n in s.items() if n) + ".",
        "",
        f"Suite {report['suite_version']}, schema {report['schema_version']}; Hypothesis profile "
        f"`{report['hypothesis']['profile']}`, seed `{report['hypothesis']['seed']}`; {report['created']}; "
        f"{report['duration_s']:.1f} s.",
        "",
        "Cells: status, then the worst error seen in ulps of the dtype against the float64 oracle "
        "(docs/report.md explains how to read them).",
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
            f"## {adapter}",
            "",
            "| behaviour | check | " + " | ".join(cols) + " |",
            "|---|---|" + "---|" * len(cols),
        ]
        table: dict[tuple[str, str], dict[str, str]] = defaultdict(dict)
        for c in rows:
            table[(c["behaviour"], c["check"])][c["dtype"] or "—"] = _cell(c)
        for (behaviour, check), cells in sorted(table.items()):
            lines.append(f"| {behaviour} | `{check}` | " + " | ".join(cells.get(d, "") for d in cols) + " |")
    durations: dict[str, float] = defaultdict(float)
    for c in checks:
        durations[c["behaviour"]] += c.get("duration_s", 0.0)
    lines += ["", "## Time per behaviour", "", "| behaviour | seconds |", "|---|---|"]
    lines += [f"| {b} | {t:.2f} |" for b, t in sorted(durations.items())]
    failures = [c for c in checks if c["status"] in ("failed", "error")]
    if failures:
        lines += ["", "## Failures", ""]
        for c in failures:
            lines += [
                f"### {c['adapter']} · `{c['check']}` · {c['dtype'] or '—'} ({c['status']})",
                "",
                f"Property: {c['property']} — {c['cites']}",
                "",
                "```",
                c.get("message", ""),
                "```",
            ]
            if c.get("counterexample"):
                lines += [
                    "",
                    "<details><summary>counterexample</summary>",
                    "",
                    "```",
                    c["counterexample"],
                    "```",
                    "",
                    "</details>",
                ]
            lines.append("")
    lines += ["", "## Adapters and their declared conventions", ""]
    for a in report["adapters"]:
        env = ", ".join(f"{k} {v}" for k, v in a["environment"].items())
        conv = "; ".join(f"{k}: {v}" for k, v in a["conventions"].items())
        lines += [f"- **{a['name']}** ({_esc(env)}) — {_esc(conv)}"]
    lines.append("")
    return "\n".join(lines)

"""The "Parameters and regimes reached" section of report.md and report.html, from report.json's ``reached``.

Per adapter, one row per operation: its calls, each parameter's values (a range for many numbers; ⚠ when the run
drew it only at its default or None), and each listed regime's count (⚠ not reached; "not drawn" for a regime the
contract leaves undefined). docs/report.md documents the field; docs/coverage.md the regimes.
"""

from __future__ import annotations

import html
from typing import Any

from transformer_conformance.reports.md_text import esc

#: At most this many values of one parameter are written out; more are shown as their range and count
SHOWN = 5


def _value(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:g}"
    return str(v)


def param_text(name: str, slot: dict[str, Any]) -> str:
    vals = slot["values"]
    n = len(vals) + slot.get("more", 0)
    if len(vals) > SHOWN and slot.get("min") is not None:
        nones = ", None" if None in vals else ""
        text = f"{_value(slot['min'])} … {_value(slot['max'])}{nones} ({n} values)"
    else:
        text = ", ".join(_value(v) for v in vals[:SHOWN]) + (f", … ({n} values)" if n > SHOWN else "")
    if "declared" in slot:  # a named choice the adapter declares in part: what it declares is what is drawn
        return f"{name}: {text} (declares {', '.join(slot['declared'])})"
    return f"{name}: {text}" + ("" if slot.get("varied", True) else " ⚠ default only")


def regime_text(name: str, r: dict[str, Any]) -> str:
    if r.get("drawn") is False:
        return f"{name}: not drawn"
    counts = r.get("counts", {})
    if not counts:
        return f"{name}: ⚠ not reached"
    return f"{name}: {sum(counts.values())} ({', '.join(sorted(counts))})"


def gaps(reached: dict[str, Any]) -> list[str]:
    """'adapter op: what' for every parameter left at its default and every drawn regime not reached."""
    out = []
    for adapter, ops in reached.items():
        for op, e in ops.items():
            out += [
                f"{adapter} {op}: parameter {p}"
                for p, s in e["params"].items()
                if not s.get("varied", True) and "declared" not in s
            ]
            out += [
                f"{adapter} {op}: regime {r}"
                for r, v in e["regimes"].items()
                if v.get("drawn", True) and not v.get("counts")
            ]
    return out


def _esc_md(text: str) -> str:
    return text.replace("|", "\\|").replace("<", "&lt;").replace("\n", " ")


def calls_text(e: dict[str, Any]) -> str:
    """An operation's calls, with the shapes they came in (most in one dtype), whether a shape plan chose them, and
    the programs the candidate built: "252 · 5 shapes, planned · 16 programs built"."""
    parts = [str(e["calls"])]
    shapes = e.get("shapes") or {}
    if shapes:
        most = max(shapes.values())
        how = ", planned" if e.get("planned_calls") else ""
        if e.get("planned_value_calls"):
            how = ", planned with their values"
        parts.append(f"{most} shape{'s' if most != 1 else ''}{how}")
    built = sum((e.get("compiles") or {}).values())
    if built:
        parts.append(f"{built} program{'s' if built != 1 else ''} built")
    return " · ".join(parts)


def markdown(report: dict[str, Any]) -> list[str]:
    reached = report.get("reached") or {}
    if not reached:
        return []
    missing = gaps(reached)
    lines = [
        "",
        "## Parameters and regimes reached",
        "",
        "What the examples of this run gave each candidate: every parameter's values and how many calls reached each "
        "input regime the suite lists for the operation (by dtype). "
        + (
            f"**{len(missing)} gap{'s' if len(missing) != 1 else ''}** (⚠): "
            + "; ".join(esc(m) for m in missing[:8])
            + (" …" if len(missing) > 8 else "")
            if missing
            else "Every parameter was drawn beyond its default and every listed regime was reached."
        ),
    ]
    for adapter, ops in reached.items():
        lines += [
            "",
            f"<details><summary>{html.escape(adapter)}: {len(ops)} operations</summary>",
            "",
            "| operation | calls (shapes per dtype, at most) | parameters | regimes |",
            "|---|---|---|---|",
        ]
        for op, e in ops.items():
            params = "; ".join(param_text(p, s) for p, s in e["params"].items()) or "—"
            regs = "; ".join(regime_text(r, v) for r, v in e["regimes"].items()) or "—"
            lines.append(f"| {op} | {_esc_md(calls_text(e))} | {_esc_md(params)} | {_esc_md(regs)} |")
        lines += ["", "</details>"]
    return lines


def html_section(report: dict[str, Any]) -> str:
    reached = report.get("reached") or {}
    if not reached:
        return ""
    missing = gaps(reached)
    parts = ['<h2 id="reached">Parameters and regimes reached</h2>']
    if missing:
        parts.append(f"<p>{len(missing)} gap(s): " + html.escape("; ".join(missing)) + "</p>")
    else:
        parts.append("<p>Every parameter was drawn beyond its default and every listed regime was reached.</p>")
    for adapter, ops in reached.items():
        rows = "".join(
            f"<tr><td>{html.escape(op)}</td><td>{html.escape(calls_text(e))}</td><td>"
            + "<br>".join(html.escape(param_text(p, s)) for p, s in e["params"].items())
            + "</td><td>"
            + "<br>".join(
                f'<span title="{html.escape(v.get("reason", ""))}">{html.escape(regime_text(r, v))}</span>'
                for r, v in e["regimes"].items()
            )
            + "</td></tr>"
            for op, e in ops.items()
        )
        parts.append(
            f"<details><summary>{html.escape(adapter)}: {len(ops)} operations</summary><table><thead><tr>"
            "<th>operation</th><th>calls</th><th>parameters</th><th>regimes (hover: why)</th></tr></thead>"
            f"<tbody>{rows}</tbody></table></details>"
        )
    return "".join(parts)

"""The precision plots of report.html: a check's worst error per bucket of an input coordinate.

Checks that keep a series (report.json ``checks[].series``, conformance/harness/series.py) are drawn one panel per
check × adapter × output, one colour per dtype: the worst error in each bucket as points joined by a solid
line, and the error budget of that same element as a dashed line. RoPE's series run along the position
index (its angle m·θ is computed, and rounded, at every position), the norms' along the row's RMS (the
input magnitude). Reports written before series existed have none, and show no plots.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from transformer_conformance.reports.html_page import DTYPE_ORDER, esc, fmt_ulp
from transformer_conformance.reports.svg_plot import (
    DTYPE_COLOURS,
    PALETTE,
    Line,
    Scale,
    fmt_number,
    fmt_power_of_two,
    plot,
)

#: per coordinate: the x-axis label, its scale, how a bucket reads in a tooltip, and what the plot shows
AXES: dict[str, tuple[str, Scale, str]] = {
    "position": ("position index", "log1p", "Error against position"),
    "row RMS": ("RMS of the input row", "log2", "Error against input magnitude"),
}


#: the log scale's bottom, in ulps: smaller errors are all as good as exact
Y_FLOOR = 0.01


def _number(v: Any) -> float | None:
    try:
        return float(v)
    except (TypeError, ValueError):
        return None


def _bucket(coordinate: str, lo: float, hi: float) -> str:
    if coordinate == "position":
        return f"position {lo:.0f}" if hi - lo <= 1 else f"positions {lo:.0f}–{hi - 1:.0f}"
    return f"row RMS in [{fmt_power_of_two(lo)}, {fmt_power_of_two(hi)})"


def _colour(dtype: str, i: int) -> str:
    return DTYPE_COLOURS.get(dtype, PALETTE[i % len(PALETTE)])


def series_plot(coordinate: str, title: str, by_dtype: list[tuple[str, dict[str, Any]]]) -> str:
    """One panel: per dtype, the worst error per bucket and its budget."""
    xlabel, scale, _ = AXES[coordinate]
    lines = []
    for i, (dtype, s) in enumerate(by_dtype):
        pts = [p for p in s.get("points", []) if isinstance(p, list) and len(p) == 4]
        xs = [_number(p[0]) or 0.0 for p in pts]
        errors = [_number(p[2]) for p in pts]
        budgets = [_number(p[3]) for p in pts]
        tips = [
            f"{dtype}, {_bucket(coordinate, x, _number(p[1]) or x)}: worst error {fmt_ulp(e)} ulp, "
            f"its budget {fmt_ulp(b)} ulp"
            for x, p, e, b in zip(xs, pts, errors, budgets, strict=True)
        ]
        colour = _colour(dtype, i)
        lines.append(Line(f"{dtype} error", list(zip(xs, errors, strict=True)), colour, tips=tips))
        if any(b is not None for b in budgets):
            lines.append(
                Line(f"{dtype} budget", list(zip(xs, budgets, strict=True)), colour, dashed=True, markers=False)
            )
    return plot(
        title,
        lines,
        xlabel,
        "error (ulp of the dtype)",
        xscale=scale,
        yscale="auto",
        xfmt=fmt_power_of_two if scale == "log2" else fmt_number,
        y_floor=Y_FLOOR,
    )


def precision_plots(report: dict[str, Any]) -> str:
    """The plots of every check that kept a series, grouped by behaviour and coordinate ('' if none did)."""
    adapters = [a["name"] for a in report.get("adapters", [])]
    groups: dict[tuple[str, str], dict[tuple[str, str, str], list[tuple[str, dict[str, Any]]]]] = defaultdict(
        lambda: defaultdict(list)
    )
    for c in report["checks"]:
        for s in c.get("series") or []:
            if not isinstance(s, dict) or s.get("x") not in AXES:
                continue
            key = (c["check"], c["adapter"], str(s.get("output", "")))
            groups[(c["behaviour"], s["x"])][key].append((c["dtype"] or "", s))
    if not groups:
        return ""
    out = [
        '<div id="precision-plots"><h3>Error plots</h3>'
        '<p class="muted">For the checks that keep it, the worst error in each bucket of an input coordinate, over '
        "all examples: one colour per dtype, points joined by a solid line; the dashed line of the same colour "
        "is the error budget of that same element (a point above its dashed line failed). RoPE's error is shown "
        "against the position index, the norms' against the RMS of the input row. Hover a point for its bucket "
        "and values.</p>"
    ]
    order = {n: i for i, n in enumerate(adapters)}
    for (behaviour, coordinate), panels in sorted(groups.items()):
        out.append(f'<h4>{esc(AXES[coordinate][2])}: {esc(behaviour)}</h4><div class="plots">')
        for (check_id, adapter, output), by_dtype in sorted(
            panels.items(), key=lambda kv: (kv[0][0], order.get(kv[0][1], len(order)), kv[0][1], kv[0][2])
        ):
            by_dtype.sort(key=lambda ds: (DTYPE_ORDER.index(ds[0]) if ds[0] in DTYPE_ORDER else 9, ds[0]))
            out.append(series_plot(coordinate, f"{adapter} · {check_id} · {output}", by_dtype))
        out.append("</div>")
    out.append("</div>")
    return "".join(out)

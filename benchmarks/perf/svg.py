"""A small SVG line chart: a grid of panels, one line per adapter, sizes along x. No plotting library."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from xml.sax.saxutils import escape

PALETTE = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf")
PANEL_W, PANEL_H = 330, 230
LEFT, RIGHT, TOP, BOTTOM = 58, 12, 28, 62


@dataclass
class Panel:
    title: str
    xlabels: Sequence[str]  # categories along x, in order
    series: dict[str, list[float | None]]  # name -> one value per x category (None: not measured)
    ylabel: str
    reference: float | None = None  # a dashed horizontal line (1 for ratios)
    percent: bool = False  # y values are fractions shown as percentages
    notes: list[str] = field(default_factory=list)


def _nice_step(span: float, ticks: int = 5) -> float:
    raw = span / ticks
    mag = 10 ** math.floor(math.log10(raw))
    return next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)


def _fmt(v: float, percent: bool) -> str:
    if percent:
        return f"{v * 100:.0f}%" if v >= 1 else f"{v * 100:.3g}%"
    return f"{v:.3g}"


def _panel(p: Panel, x0: float, y0: float, colours: dict[str, str]) -> list[str]:
    w, h = PANEL_W - LEFT - RIGHT, PANEL_H - TOP - BOTTOM
    ox, oy = x0 + LEFT, y0 + TOP
    values = [v for vs in p.series.values() for v in vs if v is not None and math.isfinite(v)]
    top = max([*values, p.reference or 0.0, 1e-12])
    step = _nice_step(top * 1.1)
    ymax = step * math.ceil(top * 1.1 / step)
    n = max(len(p.xlabels), 1)

    def px(i: int) -> float:
        return ox + (w * (i + 0.5) / n)

    def py(v: float) -> float:
        return oy + h - h * v / ymax

    out = [
        f'<text x="{x0 + PANEL_W / 2:.1f}" y="{y0 + 16:.1f}" text-anchor="middle" font-weight="bold">'
        f"{escape(p.title)}</text>",
        f'<rect x="{ox}" y="{oy}" width="{w}" height="{h}" fill="none" stroke="#888"/>',
    ]
    k = 0
    while k * step <= ymax + 1e-12:
        v = k * step
        out.append(f'<line x1="{ox}" x2="{ox + w}" y1="{py(v):.1f}" y2="{py(v):.1f}" stroke="#eee"/>')
        out.append(f'<text x="{ox - 4}" y="{py(v) + 4:.1f}" text-anchor="end">{_fmt(v, p.percent)}</text>')
        k += 1
    out.append(
        f'<text transform="translate({x0 + 12},{oy + h / 2:.1f}) rotate(-90)" text-anchor="middle">'
        f"{escape(p.ylabel)}</text>"
    )
    for i, label in enumerate(p.xlabels):
        out.append(
            f'<text transform="translate({px(i):.1f},{oy + h + 10}) rotate(30)" font-size="9">{escape(label)}</text>'
        )
    if p.reference is not None:
        out.append(
            f'<line x1="{ox}" x2="{ox + w}" y1="{py(p.reference):.1f}" y2="{py(p.reference):.1f}" '
            'stroke="#444" stroke-dasharray="4 3"/>'
        )
    for name, vs in p.series.items():
        c = colours[name]
        pts = [(px(i), py(v)) for i, v in enumerate(vs) if v is not None and math.isfinite(v)]
        if len(pts) > 1:
            path = " ".join(f"{x:.1f},{y:.1f}" for x, y in pts)
            out.append(f'<polyline points="{path}" fill="none" stroke="{c}" stroke-width="1.8"/>')
        for x, y in pts:
            out.append(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="3" fill="{c}"><title>{escape(name)}</title></circle>')
    return out


def chart(title: str, panels: Sequence[Panel], columns: int) -> str:
    """An SVG document: ``panels`` laid out ``columns`` to a row, under a title and a legend."""
    names: list[str] = []
    for p in panels:
        names += [n for n in p.series if n not in names]
    colours = {n: PALETTE[i % len(PALETTE)] for i, n in enumerate(names)}
    rows = max(1, math.ceil(len(panels) / columns))
    head = 48
    width, height = columns * PANEL_W, head + rows * PANEL_H
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="11">',
        f'<rect width="{width}" height="{height}" fill="white"/>',
        f'<text x="10" y="18" font-size="14" font-weight="bold">{escape(title)}</text>',
    ]
    x = 10.0
    for n in names:
        out.append(f'<rect x="{x:.1f}" y="28" width="12" height="12" fill="{colours[n]}"/>')
        out.append(f'<text x="{x + 16:.1f}" y="38">{escape(n)}</text>')
        x += 24 + 7 * len(n)
    for i, p in enumerate(panels):
        out += _panel(p, (i % columns) * PANEL_W, head + (i // columns) * PANEL_H, colours)
    out.append("</svg>")
    return "\n".join(out) + "\n"

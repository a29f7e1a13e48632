"""Plain line and scatter plots as inline SVG, for the self-contained HTML reports (no plotting library).

:func:`plot` draws one panel: a title, a legend (one entry per line), axes with ticks and labels, linear or
logarithmic scales, dashed reference lines, and a tooltip per point. Every text it is given is escaped,
so names that come from candidates (adapter names) are shown as text. The SVG is a complete XML document
(it parses on its own) and can be placed as is inside an HTML page.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

from transformer_conformance.reports.html_page import esc

Scale = Literal["linear", "log", "log2", "log1p"]

#: one colour per dtype, the same in every plot
DTYPE_COLOURS = {"float32": "#0969da", "bfloat16": "#d1242f", "float16": "#1a7f37", "float64": "#8250df"}
PALETTE = ("#0969da", "#d1242f", "#1a7f37", "#bc4c00", "#8250df", "#6e7781", "#bf3989", "#1b7c83")

CHAR_W = 6.2  # average width of an 11 px character, for laying out text
SUPERSCRIPT = str.maketrans("-0123456789", "⁻⁰¹²³⁴⁵⁶⁷⁸⁹")


@dataclass
class Line:
    """One series: points (x, y) in data units; y None or non-finite leaves a gap."""

    name: str
    points: Sequence[tuple[float, float | None]]
    colour: str = PALETTE[0]
    dashed: bool = False
    markers: bool = True
    joined: bool = True
    #: one tooltip per point (default: the name and the point's coordinates)
    tips: Sequence[str] | None = None


@dataclass
class Reference:
    """A dashed horizontal line across the panel at ``y``, labelled at its right end."""

    y: float
    label: str = ""


@dataclass(frozen=True)
class _Axis:
    scale: Scale
    lo: float  # in transformed units
    hi: float
    start: float  # pixel of lo
    end: float  # pixel of hi

    def t(self, v: float) -> float:
        return _transform(v, self.scale)

    def px(self, v: float) -> float:
        t = min(max(self.t(v), self.lo), self.hi)
        return self.start + (t - self.lo) / (self.hi - self.lo) * (self.end - self.start)


def _transform(v: float, scale: Scale) -> float:
    if scale == "linear":
        return v
    if scale == "log1p":
        return math.log10(1.0 + max(v, 0.0))
    if v <= 0:
        return -math.inf
    return math.log10(v) if scale == "log" else math.log2(v)


def _nice_step(span: float, ticks: int = 5) -> float:
    raw = span / ticks if span > 0 else 1.0
    mag = 10 ** math.floor(math.log10(raw))
    return next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw * (1 - 1e-9))


def _limits(values: list[float], scale: Scale, extra: Sequence[float] = ()) -> tuple[float, float]:
    """The axis range in transformed units: the data (and reference lines), padded to whole ticks."""
    ts = [_transform(v, scale) for v in [*values, *extra]]
    ts = [t for t in ts if math.isfinite(t)]
    if not ts:
        return (0.0, 1.0)
    lo, hi = min(ts), max(ts)
    if scale == "linear":
        if lo >= 0:
            lo = 0.0  # a non-negative quantity: from zero
        if hi - lo < 1e-12:
            lo, hi = lo - 0.5 if lo else lo, hi + (abs(hi) * 0.1 or 1.0)
        step = _nice_step(hi - lo)
        return math.floor(lo / step + 1e-9) * step, math.ceil(hi / step - 1e-9) * step
    if scale == "log1p":
        return 0.0, max(math.ceil(hi), 1.0)
    lo, hi = math.floor(lo), math.ceil(hi)
    return (lo, hi) if hi > lo else (lo - 1, hi + 1)


def _ticks(lo: float, hi: float, scale: Scale) -> list[float]:
    """Tick positions in data units."""
    if scale == "linear":
        step = _nice_step(hi - lo)
        n = round((hi - lo) / step)
        return [lo + k * step for k in range(n + 1)]
    every = max(1, math.ceil((hi - lo) / 8))  # at most about 8 ticks
    exps = range(int(lo), int(hi) + 1, every)
    if scale == "log1p":
        return [0.0, *(10.0**e for e in range(0, int(hi) + 1, every))]
    base = 10.0 if scale == "log" else 2.0
    return [base**e for e in exps]


def fmt_number(v: float) -> str:
    """A tick label: short, exact for round numbers (1k, 0.01, 1e-05)."""
    if v == 0:
        return "0"
    a = abs(v)
    if a >= 1e6 or a < 1e-3:
        return f"{v:.0e}".replace("e+0", "e").replace("e-0", "e-")
    if a >= 1e3:
        return f"{v / 1e3:g}k"
    return f"{v:.3g}"


def fmt_power_of_two(v: float) -> str:
    e = math.log2(v) if v > 0 else 0.0
    return f"2{str(round(e)).translate(SUPERSCRIPT)}" if abs(e - round(e)) < 1e-9 else fmt_number(v)


def _fit(text: str, width: float, scale: float = 1.0) -> str:
    """``text`` shortened with an ellipsis to about ``width`` pixels (the full text stays in the SVG's title)."""
    fits = max(8, int(width / (CHAR_W * scale)))
    return text if len(text) <= fits else text[: fits - 1] + "…"


def _legend(lines: Sequence[Line], x0: float, width: float) -> tuple[list[str], float]:
    """Legend entries laid out in rows from (x0, 0) within ``width`` (a name too long for it shortened, in
    full in its tooltip); the SVG and its height."""
    out: list[str] = []
    x, row = x0, 0
    entries = [(ln.name, ln.colour, ln.dashed, ln.markers) for ln in lines if ln.name]
    seen: set[str] = set()
    for name, colour, dashed, markers in entries:
        if name in seen:
            continue
        seen.add(name)
        shown = _fit(name, width - 26)
        w = 26 + CHAR_W * len(shown)
        if x + w > x0 + width and x > x0:
            x, row = x0, row + 1
        y = 8 + row * 16
        dash = ' stroke-dasharray="5 3"' if dashed else ""
        out.append(f'<line x1="{x:.1f}" y1="{y}" x2="{x + 18:.1f}" y2="{y}" stroke="{colour}" stroke-width="2"{dash}/>')
        if markers:
            out.append(f'<circle cx="{x + 9:.1f}" cy="{y}" r="3" fill="{colour}"/>')
        tip = f"<title>{esc(name)}</title>" if shown != name else ""
        out.append(f'<text x="{x + 22:.1f}" y="{y + 4}">{esc(shown)}{tip}</text>')
        x += w + 10
    return out, (row + 1) * 16 if entries else 0.0


def plot(
    title: str,
    lines: Sequence[Line],
    xlabel: str,
    ylabel: str,
    *,
    xscale: Scale = "linear",
    yscale: Scale | Literal["auto"] = "linear",
    references: Sequence[Reference] = (),
    width: int = 380,
    height: int = 250,
    xfmt: Callable[[float], str] | None = None,
    yfmt: Callable[[float], str] | None = None,
    y_floor: float = 0.0,
) -> str:
    """One panel as an SVG element. ``yscale="auto"``: logarithmic when the positive values (those below
    ``y_floor`` counted as ``y_floor``) span more than two decades, else linear. A log scale starts no lower
    than ``y_floor``; values below its bottom edge, zero included, sit on it (their tooltip gives the value)."""
    xs = [x for ln in lines for x, y in ln.points if y is not None and math.isfinite(y) and math.isfinite(x)]
    ys = [y for ln in lines for x, y in ln.points if y is not None and math.isfinite(y) and math.isfinite(x)]
    if yscale == "auto":
        pos = [max(y, y_floor) for y in ys if y > 0 or y_floor > 0]
        yscale = "log" if pos and max(pos) / min(pos) > 100 else "linear"
    if yscale in ("log", "log2") and y_floor > 0:
        ys = [max(y, y_floor) for y in ys]
    left, right, bottom = 58, 14, 42
    legend, legend_h = _legend(lines, left, width - left - right)
    top = 24 + legend_h + 6
    plot_h = height - top - bottom
    if plot_h < 60:
        height = round(top + bottom + 60)
        plot_h = height - top - bottom
    x_lo, x_hi = _limits(xs, xscale)
    y_lo, y_hi = _limits(ys, yscale, [r.y for r in references])
    ax = _Axis(xscale, x_lo, x_hi, left, width - right)
    ay = _Axis(yscale, y_lo, y_hi, top + plot_h, top)
    xf = xfmt or (fmt_power_of_two if xscale == "log2" else fmt_number)
    yf = yfmt or (fmt_power_of_two if yscale == "log2" else fmt_number)
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="plot" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img" aria-label="{esc(title)}" font-family="system-ui, sans-serif" '
        'font-size="11">',
        f"<title>{esc(title)}</title>",
        f'<rect width="{width}" height="{height}" fill="#fff"/>',
        f'<text class="title" x="8" y="15" font-weight="bold">{esc(_fit(title, width - 16, 1.1))}</text>',
        f'<g transform="translate(0,{24})">{"".join(legend)}</g>',
    ]
    for v in _ticks(y_lo, y_hi, yscale):
        y = ay.px(v)
        out.append(f'<line x1="{left}" y1="{y:.1f}" x2="{width - right}" y2="{y:.1f}" stroke="#eaeef2"/>')
        out.append(f'<text x="{left - 5}" y="{y + 4:.1f}" text-anchor="end">{esc(yf(v))}</text>')
    for v in _ticks(x_lo, x_hi, xscale):
        x = ax.px(v)
        label = xf(v)
        # a label at either end is aligned to stay inside the panel
        half = CHAR_W * len(label) / 2
        anchor = "start" if x - half < 2 else "end" if x + half > width - 2 else "middle"
        out.append(f'<line x1="{x:.1f}" y1="{top}" x2="{x:.1f}" y2="{top + plot_h}" stroke="#eaeef2"/>')
        out.append(f'<text x="{x:.1f}" y="{top + plot_h + 15}" text-anchor="{anchor}">{esc(label)}</text>')
    out.append(
        f'<rect x="{left}" y="{top}" width="{width - left - right}" height="{plot_h}" fill="none" stroke="#8c959f"/>'
    )
    scale_note = {"log": " (log scale)", "log2": " (log scale)", "log1p": " (log scale, from 0)"}
    out.append(
        f'<text x="{(left + width - right) / 2:.1f}" y="{height - 6}" text-anchor="middle">'
        f"{esc(xlabel + scale_note.get(xscale, ''))}</text>"
    )
    out.append(
        f'<text transform="translate(13,{top + plot_h / 2:.1f}) rotate(-90)" text-anchor="middle">'
        f"{esc(ylabel + scale_note.get(yscale, ''))}</text>"
    )
    for r in references:
        if not math.isfinite(_transform(r.y, yscale)):
            continue
        y = ay.px(r.y)
        out.append(
            f'<line x1="{left}" y1="{y:.1f}" x2="{width - right}" y2="{y:.1f}" stroke="#57606a" '
            'stroke-dasharray="6 4"/>'
        )
        if r.label:
            out.append(
                f'<text x="{width - right - 3}" y="{y - 3:.1f}" text-anchor="end" fill="#57606a">{esc(r.label)}</text>'
            )
    for ln in lines:
        out += _series(ln, ax, ay)
    out.append("</svg>")
    return "".join(out)


def _series(ln: Line, ax: _Axis, ay: _Axis) -> list[str]:
    out: list[str] = []
    segments: list[list[tuple[float, float]]] = [[]]
    marks: list[tuple[float, float, str]] = []
    for i, (x, y) in enumerate(ln.points):
        if y is None or not (math.isfinite(y) and math.isfinite(x)):
            segments.append([])
            continue
        px, py = ax.px(x), ay.px(y)
        segments[-1].append((px, py))
        tip = ln.tips[i] if ln.tips is not None else f"{ln.name}: ({fmt_number(x)}, {y:.4g})"
        marks.append((px, py, tip))
    dash = ' stroke-dasharray="5 3"' if ln.dashed else ""
    if ln.joined:
        for seg in segments:
            if len(seg) > 1:
                pts = " ".join(f"{x:.1f},{y:.1f}" for x, y in seg)
                out.append(f'<polyline points="{pts}" fill="none" stroke="{ln.colour}" stroke-width="1.6"{dash}/>')
    for x, y, tip in marks:
        if ln.markers:
            out.append(
                f'<circle cx="{x:.1f}" cy="{y:.1f}" r="3.2" fill="{ln.colour}"><title>{esc(tip)}</title></circle>'
            )
    return out

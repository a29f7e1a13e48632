"""The performance section of report.html and the dashboard's performance pages, from a perf.json.

Per behaviour: plots across sizes (fraction of the ceiling that bounds each operation and, with more than
one adapter, speed relative to torch eager; one colour per adapter, forward solid, forward+backward dashed)
and a table with the adapters side by side — median time and its spread, the achieved bandwidth or FLOP
rate, the fraction of the measured ceiling, and the ratio to torch eager. docs/performance.md says how to
read them. Adapter names and everything else from the file are escaped.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

from transformer_conformance.reports.html_page import esc, page
from transformer_conformance.reports.svg_plot import PALETTE, Line, Reference, plot

BEHAVIOURS = ("rms_norm", "layer_norm", "rope", "swiglu_mlp", "cross_entropy", "z_loss")
PASSES = ("forward", "forward+backward")
DTYPES = ("bfloat16", "float16", "float32")
BASELINE = "torch"


def number(v: Any) -> float | None:
    """``v`` as a finite float, or None (missing, not a number, NaN or infinite)."""
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


def fmt_time(s: float | None) -> str:
    if s is None:
        return "—"
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("µs", 1e-6)):
        if s >= scale:
            return f"{s / scale:.3g} {unit}"
    return f"{s / 1e-9:.3g} ns"


def fmt_rate(v: float | None, unit: str) -> str:
    if v is None:
        return "—"
    for prefix, scale in (("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if v >= scale:
            return f"{v / scale:.3g} {prefix}{unit}"
    return f"{v:.3g} {unit}"


def fmt_bytes(n: float) -> str:
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale:
            return f"{n / scale:.3g} {unit}"
    return f"{n:.0f} B"


def pct(v: float | None) -> str:
    if v is None:
        return "—"
    return f"{v * 100:.0f}%" if v >= 1 else f"{v * 100:.3g}%"


def _ordered(values: Sequence[str], order: Sequence[str]) -> list[str]:
    seen = list(dict.fromkeys(values))
    return [v for v in order if v in seen] + [v for v in seen if v not in order]


def adapters_of(results: Sequence[Mapping[str, Any]]) -> list[str]:
    names = list(dict.fromkeys(str(r["adapter"]) for r in results))
    return sorted(names, key=lambda n: (n != BASELINE, names.index(n)))


def _forward_bytes(rows: Sequence[Mapping[str, Any]]) -> dict[tuple[str, str], float]:
    """Bytes the forward pass moves at each (size, dtype): the x coordinate of the plots (a size run only
    forward+backward takes the fewest bytes of its results)."""
    out: dict[tuple[str, str], float] = {}
    for r in sorted(rows, key=lambda r: r["pass"] != PASSES[0]):
        b = number(r.get("bytes"))
        key = (str(r["size"]), str(r["dtype"]))
        if b is not None and (key not in out or (r["pass"] != PASSES[0] and b < out[key])):
            out[key] = b
    return out


def _plots(op: str, rows: Sequence[Mapping[str, Any]], adapters: list[str]) -> list[str]:
    """Per dtype: fraction of the ceiling across sizes and, with several adapters, speed relative to torch."""
    xs = _forward_bytes(rows)
    colours = {a: PALETTE[i % len(PALETTE)] for i, a in enumerate(adapters)}
    ceiling = next((str(r.get("ceiling")) for r in rows if r.get("ceiling")), "ceiling")
    out = []
    for dtype in _ordered([str(r["dtype"]) for r in rows], DTYPES):
        metrics = [("fraction", f"% of {ceiling}", Reference(1.0, "100%"))]
        if len(adapters) > 1:
            metrics.append(("vs_torch", "× torch eager speed", Reference(1.0, "torch eager")))
        for metric, ylabel, ref in metrics:
            lines = []
            for a in adapters:
                for p in PASSES:
                    sel = [r for r in rows if r["adapter"] == a and r["pass"] == p and r["dtype"] == dtype]
                    sel.sort(key=lambda r: xs.get((str(r["size"]), dtype), 0.0))
                    if not sel:
                        continue
                    pts = [(xs.get((str(r["size"]), dtype), 0.0), number(r.get(metric))) for r in sel]
                    tips = [
                        f"{a}, {p}, {r['size']}: {pct(number(r.get('fraction')))} of {ceiling}, "
                        f"{fmt_time(number(r['time_s'].get('median')))}"
                        + (f", ×{v:.2f} torch" if (v := number(r.get("vs_torch"))) is not None else "")
                        for r in sel
                    ]
                    lines.append(Line(f"{a} {p}", pts, colours[a], dashed=p != PASSES[0], tips=tips))
            title = f"{op} {dtype}: " + ("of the roof" if metric == "fraction" else "vs torch eager")
            out.append(
                plot(
                    title,
                    lines,
                    "bytes the forward moves",
                    ylabel,
                    xscale="log2",
                    references=[ref],
                    width=360,
                    height=260,
                    xfmt=fmt_bytes,
                    yfmt=(lambda v: f"{v * 100:.3g}%") if metric == "fraction" else None,
                )
            )
    return out


def _cells(r: Mapping[str, Any] | None) -> str:
    if r is None:
        return '<td class="num muted" colspan="4">not run</td>'
    t = r.get("time_s") or {}
    median, iqr = number(t.get("median")), number(t.get("iqr"))
    spread = f" <small>IQR {pct(iqr / median)}</small>" if median and iqr is not None else ""
    rate = fmt_rate(number(r.get("flop_rate")), "FLOP/s") if r.get("bound") == "compute" else None
    rate = rate or fmt_rate(number(r.get("bandwidth")), "B/s")
    ratio = number(r.get("vs_torch"))
    return (
        f'<td class="num">{esc(fmt_time(median))}{spread}</td><td class="num">{esc(rate)}</td>'
        f'<td class="num">{esc(pct(number(r.get("fraction"))))}</td>'
        f'<td class="num">{esc("—" if ratio is None else f"×{ratio:.2f}")}</td>'
    )


def _table(rows: Sequence[Mapping[str, Any]], adapters: list[str]) -> str:
    by: dict[tuple[str, str, str, str], dict[str, Mapping[str, Any]]] = defaultdict(dict)
    for r in rows:
        by[(str(r["op"]), str(r["size"]), str(r["dtype"]), str(r["pass"]))][str(r["adapter"])] = r
    xs = _forward_bytes(rows)
    ops = list(dict.fromkeys(str(r["op"]) for r in rows))
    dtypes = _ordered([str(r["dtype"]) for r in rows], DTYPES)
    passes = _ordered([str(r["pass"]) for r in rows], PASSES)
    keys = sorted(by, key=lambda k: (ops.index(k[0]), dtypes.index(k[2]), passes.index(k[3]), xs.get(k[1:3], 0), k[1]))
    head = "".join(f'<th colspan="4">{esc(a)}</th>' for a in adapters)
    sub = "<th>median time</th><th>achieved</th><th>of the roof</th><th>× torch</th>" * len(adapters)
    body = "".join(
        f"<tr><td><code>{esc(k[0])}</code></td><td>{esc(k[1])}</td><td>{esc(k[2])}</td><td>{esc(k[3])}</td>"
        + "".join(_cells(by[k].get(a)) for a in adapters)
        + "</tr>"
        for k in keys
    )
    return (
        '<table class="perf"><thead><tr><th rowspan="2">operation</th><th rowspan="2">size</th>'
        f'<th rowspan="2">dtype</th><th rowspan="2">pass</th>{head}</tr><tr>{sub}</tr></thead>'
        f"<tbody>{body}</tbody></table>"
    )


def _ceilings(run: Mapping[str, Any]) -> str:
    rows = []
    for c in run.get("ceilings") or []:
        if not isinstance(c, Mapping):
            continue
        copy = c.get("kind") == "copy"
        unit = "B/s" if copy else "FLOP/s"
        size = fmt_bytes(number(c.get("size")) or 0) if copy else f"n = {esc(c.get('size'))}"
        rows.append(
            f"<tr><td>{'copy bandwidth (read + write)' if copy else 'matmul rate'}</td>"
            f"<td>{esc(c.get('dtype') or '—')}</td><td>{esc(size)}</td>"
            f'<td class="num">{esc(fmt_rate(number(c.get("rate")), unit))}</td>'
            f'<td class="num">{esc(fmt_rate(number(c.get("median_rate")), unit))}</td></tr>'
        )
    if not rows:
        return ""
    return (
        "<h3>Ceilings measured in this run</h3><table><thead><tr><th>ceiling</th><th>dtype</th><th>size</th>"
        f"<th>roof (fastest)</th><th>at the median</th></tr></thead><tbody>{''.join(rows)}</tbody></table>"
    )


def _comparison(run: Mapping[str, Any]) -> str:
    cmp = run.get("comparison")
    if not isinstance(cmp, Mapping):
        return ""
    return (
        f"<p>Against the baseline of {esc(cmp.get('baseline_created', '?'))}: "
        f"<strong>{esc(cmp.get('regressions', 0))} regression(s)</strong>, "
        f"{esc(cmp.get('improvements', 0))} improvement(s) (perf.md lists them).</p>"
    )


def _intro(run: Mapping[str, Any]) -> str:
    env = run.get("environment") or {}
    adapters = [
        f"<code>{esc(a.get('name'))}</code>"
        + (f" ({esc(', '.join(f'{k} {v}' for k, v in (a.get('environment') or {}).items()))})")
        for a in run.get("adapters") or []
        if isinstance(a, Mapping)
    ]
    excluded = run.get("excluded") or {}
    results = run.get("results") or []
    return (
        f"<p>{'Quick' if run.get('mode') == 'quick' else 'Full'} set on <code>{esc(run.get('device', '?'))}</code>"
        + (f" ({esc(env['gpu'])})" if isinstance(env, Mapping) and env.get("gpu") else "")
        + f"; {esc(run.get('created', '?'))}; {len(results)} results"
        + (f"; from <code>{esc(run['source'])}</code>" if run.get("source") else "")
        + ".</p>"
        + (f"<p>Adapters: {', '.join(adapters)}.</p>" if adapters else "")
        + (
            "<p>Not benchmarked: "
            + "; ".join(f"<code>{esc(n)}</code> ({esc(why)})" for n, why in excluded.items())
            + ".</p>"
            if isinstance(excluded, Mapping) and excluded
            else ""
        )
        + '<p class="muted">A benchmark, never part of the conformance verdict. Times are per call (median over '
        "the rounds, with the interquartile range); <em>achieved</em> is the minimum bytes the pass must move "
        "over the median time (the FLOP rate for the SwiGLU MLP); <em>of the roof</em> is that as a fraction of "
        "the ceiling measured in the same run (copy bandwidth, or matmul rate in the dtype); × torch is torch "
        "eager's median time over the adapter's (above 1: faster). In the plots, one colour per adapter, "
        "forward solid and forward+backward dashed; the dashed grey line is 100 % of the roof, or torch's "
        "speed. docs/performance.md tells how to read them.</p>"
    )


def perf_body(run: Mapping[str, Any], heading: str = "h2") -> str:
    """The run's ceilings, then per behaviour its plots and side-by-side table."""
    results = [r for r in run.get("results") or [] if isinstance(r, Mapping)]
    adapters = adapters_of(results)
    sub = "h3" if heading == "h2" else "h2"
    out = [_intro(run), _ceilings(run), _comparison(run)]
    behaviours = _ordered([str(r["behaviour"]) for r in results], BEHAVIOURS)
    for b in behaviours:
        rows = [r for r in results if r["behaviour"] == b]
        out.append(f'<{sub} id="perf-{esc(b)}">{esc(b)}</{sub}><div class="plots">')
        for op in dict.fromkeys(str(r["op"]) for r in rows):
            out += _plots(op, [r for r in rows if r["op"] == op], adapters)
        out.append("</div>" + _table(rows, adapters))
    if not results:
        out.append("<p>No results in this run.</p>")
    return "".join(out)


def perf_section(run: Mapping[str, Any]) -> str:
    """The performance section of report.html."""
    return f'<section id="performance"><h2>Performance</h2>{perf_body(run)}</section>'


def perf_page(run: Mapping[str, Any], back: str = "") -> str:
    """A page of its own for one performance run (the dashboard's)."""
    title = f"Performance: {', '.join(adapters_of([r for r in run.get('results') or [] if isinstance(r, Mapping)]))}"
    nav = f'<nav><a href="{esc(back)}">← all runs</a></nav>' if back else ""
    return page(title, f"{nav}<h1>{esc(title)}</h1>{perf_body(run, heading='h1')}")

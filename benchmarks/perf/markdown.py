"""``perf.md``: the run's ceilings, the seeds' shapes at a glance, and per behaviour a side-by-side table of
every adapter that ran with its plot."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

from benchmarks.perf.accounting import BEHAVIOURS, OPS, PASSES

DTYPE_ORDER = ("bfloat16", "float16", "float32")


def fmt_time(s: float) -> str:
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("µs", 1e-6)):
        if s >= scale:
            return f"{s / scale:.3g} {unit}"
    return f"{s / 1e-9:.3g} ns"


def fmt_rate(v: float, unit: str) -> str:
    for prefix, scale in (("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if v >= scale:
            return f"{v / scale:.3g} {prefix}{unit}"
    return f"{v:.3g} {unit}"


def fmt_bytes(n: int) -> str:
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale:
            return f"{n / scale:.3g} {unit}"
    return f"{n} B"


def pct(v: float | None) -> str:
    if v is None:
        return "—"
    return f"{v * 100:.0f}%" if v >= 1 else f"{v * 100:.3g}%"


def signed_pct(v: float) -> str:
    return f"{v * 100:+.0f}%" if abs(v) >= 0.1 else f"{v * 100:+.2g}%"


def _ratio(v: float | None) -> str:
    return "" if v is None else f" · ×{v:.2f}"


def _spread(t: Mapping[str, float]) -> str:
    return f"IQR {pct(t['iqr'] / t['median'])}" if t["median"] else ""


def cell(r: Mapping[str, Any]) -> str:
    """median time (spread) · fraction of the ceiling that bounds it · speed relative to torch eager"""
    t = r["time_s"]
    return f"{fmt_time(t['median'])} ({_spread(t)}) · {pct(r['fraction'])}{_ratio(r.get('vs_torch'))}"


def adapters_of(results: Sequence[Mapping[str, Any]]) -> list[str]:
    names: list[str] = []
    for r in results:
        if r["adapter"] not in names:
            names.append(r["adapter"])
    return sorted(names, key=lambda n: (n != "torch", names.index(n)))


def dtypes_of(results: Sequence[Mapping[str, Any]]) -> list[str]:
    present = {r["dtype"] for r in results}
    return [d for d in DTYPE_ORDER if d in present] + sorted(present - set(DTYPE_ORDER))


def sizes_of(results: Sequence[Mapping[str, Any]]) -> list[str]:
    """Sizes in increasing order of bytes moved."""
    order: dict[str, int] = {}
    for r in results:
        order[r["size"]] = min(order.get(r["size"], r["bytes"]), r["bytes"])
    return sorted(order, key=lambda s: (order[s], s))


def _ceilings(run: Mapping[str, Any]) -> list[str]:
    lines = [
        "## Ceilings measured in this run",
        "",
        "| ceiling | dtype | size | min | median | IQR | rounds | roof (at the min) | at the median |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    copy = None
    for c in run.get("ceilings", []):
        t = c["time_s"]
        if c["kind"] == "copy":
            copy = c
            what, size, unit = "copy bandwidth (read + write)", fmt_bytes(c["size"]), "B/s"
        else:
            what, size, unit = "matmul rate", f"n = {c['size']}", "FLOP/s"
        lines.append(
            f"| {what} | {c['dtype'] or '—'} | {size} | {fmt_time(t['min'])} | {fmt_time(t['median'])} | "
            f"{fmt_time(t['iqr'])} | {t['rounds']} | {fmt_rate(c['rate'], unit)} | {fmt_rate(c['median_rate'], unit)} |"
        )
    if copy is not None:
        ridges = [
            f"{c['dtype']} {c['rate'] / copy['rate']:.3g}" for c in run.get("ceilings", []) if c["kind"] == "matmul"
        ]
        if ridges:
            lines += [
                "",
                "Ridge point (matmul rate / copy bandwidth, FLOP per byte): " + ", ".join(ridges) + ". An operation "
                "doing fewer FLOPs per byte than this cannot be compute-bound here.",
            ]
    return lines


def _headline(results: Sequence[Mapping[str, Any]], adapters: list[str], quick: bool) -> list[str]:
    lines = [
        "## At the largest sizes of the quick set" if quick else "## At the seeds' shapes",
        "",
        "Fraction of the ceiling that bounds each operation (copy bandwidth, or matmul rate for the SwiGLU MLP), "
        "at the largest size run; median time in brackets.",
        "",
        "| operation | size | dtype | pass | " + " | ".join(adapters) + " |",
        "|---|---|---|---|" + "---|" * len(adapters),
    ]
    table: dict[tuple[str, str, str, str], dict[str, Mapping[str, Any]]] = defaultdict(dict)
    for r in results:
        table[(r["op"], r["size"], r["dtype"], r["pass"])][r["adapter"]] = r
    for op in OPS:
        rows = [r for r in results if r["op"] == op]
        if not rows:
            continue
        size = sizes_of(rows)[-1]
        for dtype in dtypes_of(rows):
            for p in PASSES:
                cells = table.get((op, size, dtype, p))
                if not cells:
                    continue
                row = [
                    f"{pct(cells[a]['fraction'])} ({fmt_time(cells[a]['time_s']['median'])})" if a in cells else ""
                    for a in adapters
                ]
                lines.append(f"| {op} | {size} | {dtype} | {p} | " + " | ".join(row) + " |")
    return lines


def _behaviour(
    behaviour: str, results: Sequence[Mapping[str, Any]], adapters: list[str], plot: str | None
) -> list[str]:
    lines = [f"## {behaviour}", ""]
    ops = [op for op in OPS.values() if op.behaviour == behaviour and any(r["op"] == op.name for r in results)]
    for op in ops:
        ceiling = "copy bandwidth" if op.bound == "memory" else "matmul rate"
        lines.append(f"* `{op.name}`: {op.summary}; bounded by the {ceiling}.")
    if plot:
        lines += ["", f"![{behaviour}: speed relative to torch eager and fraction of the ceiling]({plot})"]
    lines += [
        "",
        "Each cell: median time per call (interquartile range as % of the median) · fraction of the ceiling · "
        "×speed relative to torch eager (above 1: faster).",
        "",
        "| operation | size | dtype | pass | " + " | ".join(adapters) + " |",
        "|---|---|---|---|" + "---|" * len(adapters),
    ]
    table: dict[tuple[str, str, str, str], dict[str, Mapping[str, Any]]] = defaultdict(dict)
    for r in results:
        table[(r["op"], r["size"], r["dtype"], r["pass"])][r["adapter"]] = r
    for op in ops:
        rows = [r for r in results if r["op"] == op.name]
        for dtype in dtypes_of(rows):
            for p in PASSES:
                for size in sizes_of(rows):
                    cells = table.get((op.name, size, dtype, p))
                    if cells:
                        row = [cell(cells[a]) if a in cells else "" for a in adapters]
                        lines.append(f"| {op.name} | {size} | {dtype} | {p} | " + " | ".join(row) + " |")
    return lines


def _comparison(cmp: Mapping[str, Any]) -> list[str]:
    lines = [
        "## Against the baseline",
        "",
        f"Baseline of {cmp.get('baseline_created')}: **{cmp['regressions']} regression(s)**, "
        f"{cmp['improvements']} improvement(s), {len(cmp['rows']) - cmp['regressions'] - cmp['improvements']} "
        f"unchanged. A change counts when the median moved by more than the larger of the two runs' IQRs and "
        f"{cmp['min_relative'] * 100:.3g}% of the baseline median.",
    ]
    lines += [f"* Note: {n} — the comparison may not be meaningful." for n in cmp.get("notes", [])]
    changed = [r for r in cmp["rows"] if r["verdict"] != "unchanged"]
    if changed:
        lines += [
            "",
            "| verdict | operation | size | dtype | pass | adapter | baseline | now | change | threshold |",
            "|---|---|---|---|---|---|---|---|---|---|",
        ]
        for r in sorted(changed, key=lambda r: (r["verdict"] != "regression", -abs(r["relative_change"]))):
            mark = "**regression**" if r["verdict"] == "regression" else "improvement"
            lines.append(
                f"| {mark} | {r['op']} | {r['size']} | {r['dtype']} | {r['pass']} | {r['adapter']} | "
                f"{fmt_time(r['baseline_median_s'])} | {fmt_time(r['median_s'])} | "
                f"{signed_pct(r['relative_change'])} | {fmt_time(r['threshold_s'])} |"
            )
    if cmp.get("only_in_baseline"):
        lines += ["", f"{len(cmp['only_in_baseline'])} case(s) of the baseline did not run this time."]
    return lines


def _adapter(a: Mapping[str, Any]) -> str:
    return f"`{a['name']}` (" + ", ".join(f"{k} {v}" for k, v in a["environment"].items()) + ")"


def _verified(results: Sequence[Mapping[str, Any]]) -> list[str]:
    """How far the timed answers were verified (benchmarks/perf/verify.py); a case that failed is not a result."""
    if not results:
        return []
    full = sum(1 for r in results if r.get("verified") == "values and delivery")
    why: dict[str, int] = defaultdict(int)
    for r in results:
        v = str(r.get("verified") or "not verified: a run of an older version")
        if v != "values and delivery":
            why[v.removeprefix("delivery only: ")] += 1
    line = (
        f"The answer of each case's last timed call was verified as the timer stopped: {full} of {len(results)} "
        "held to the oracle within the conformance checks' budget and for delivery (settled, fresh)"
    )
    rest = "; ".join(f"{n} for delivery only ({reason})" for reason, n in sorted(why.items()))
    return [line + (f"; {rest}." if rest else "."), ""]


def render(run: Mapping[str, Any], plots: Mapping[str, str]) -> str:
    results = run["results"]
    adapters = adapters_of(results)
    env = run.get("environment", {})
    lines = [
        "# Performance report",
        "",
        f"{'Quick' if run['mode'] == 'quick' else 'Full'} set on `{run['device']}`"
        + (f" ({env['gpu']})" if env.get("gpu") else "")
        + f"; {run['created']}; {run['duration_s']:.0f} s; {len(results)} results. "
        + ", ".join(f"{k} {v}" for k, v in env.items() if k not in ("gpu",)),
        "",
        "Adapters: " + ", ".join(_adapter(a) for a in run["adapters"]) + ".",
    ]
    if run.get("excluded"):
        lines += ["", "Not benchmarked: " + "; ".join(f"`{n}` ({why})" for n, why in run["excluded"].items()) + "."]
    lines += [
        "",
        "Times are per call, the spread over the rounds run (docs/performance.md tells how to read this report). "
        "Bandwidth counts the minimum bytes an operation must move — inputs read once, outputs written once — "
        "and a memory-bound operation's position is that bandwidth as a fraction of the copy bandwidth measured "
        "below; the SwiGLU MLP's is its FLOP rate as a fraction of the matmul rate in its dtype. "
        "Results are benchmarks, never part of a conformance verdict.",
        "",
    ]
    lines += _verified(results)
    lines += _ceilings(run)
    if results:
        lines += ["", *_headline(results, adapters, run["mode"] == "quick")]
    if run.get("comparison"):
        lines += ["", *_comparison(run["comparison"])]
    for b in BEHAVIOURS:
        rows = [r for r in results if r["behaviour"] == b]
        if rows:
            lines += ["", *_behaviour(b, rows, adapters, plots.get(b))]
    if run.get("not_run"):
        lines += [
            "",
            "## Not run",
            "",
            "| adapter | operation | size | dtype | pass | why |",
            "|---|---|---|---|---|---|",
        ]
        for n in run["not_run"]:
            why = str(n["reason"]).replace("|", "\\|").replace("\n", " ")
            lines.append(f"| {n['adapter']} | {n['op']} | {n['size']} | {n['dtype']} | {n['pass']} | {why} |")
    return "\n".join(lines) + "\n"

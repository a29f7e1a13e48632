"""Writing a performance run: ``perf.json``, ``perf.csv``, ``perf.md`` and ``perf_<behaviour>.svg``.

Also a command line to redraw a saved run and compare it with a baseline, without running anything:

    python -m benchmarks.perf.report reports/out/bench/perf.json --compare baseline.json [--out DIR]

Exit status 1 when ``--fail-on-regression`` is given and some case regressed.
"""

from __future__ import annotations

import argparse
import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from benchmarks.perf.accounting import BEHAVIOURS, OPS, PASSES
from benchmarks.perf.compare import MIN_RELATIVE, compare
from benchmarks.perf.markdown import adapters_of, dtypes_of, render, sizes_of
from benchmarks.perf.results import BASELINE_ADAPTER, SCHEMA, to_csv
from benchmarks.perf.svg import Panel, chart
from transformer_conformance.reports.writer import atomic_write

SHORT = {"forward": "forward", "forward+backward": "fwd+bwd"}


def _json_safe(v: Any) -> Any:
    if isinstance(v, float) and not math.isfinite(v):
        return str(v)
    if isinstance(v, Mapping):
        return {k: _json_safe(x) for k, x in v.items()}
    if isinstance(v, list | tuple):
        return [_json_safe(x) for x in v]
    return v


def _get(by: Mapping[tuple[str, str, str], Mapping[str, Any]], key: tuple[str, str, str], metric: str) -> Any:
    return by[key].get(metric) if key in by else None


def plot(behaviour: str, results: Sequence[Mapping[str, Any]]) -> str | None:
    """Per operation and dtype of the behaviour: speed relative to torch eager and fraction of the ceiling,
    forward and forward+backward, across sizes; one line per adapter."""
    rows = [r for r in results if r["behaviour"] == behaviour]
    if not rows:
        return None
    adapters = adapters_of(rows)
    panels = []
    for op in (o for o in OPS.values() if o.behaviour == behaviour):
        op_rows = [r for r in rows if r["op"] == op.name]
        sizes = sizes_of(op_rows)
        for dtype in dtypes_of(op_rows):
            by = {(r["adapter"], r["size"], r["pass"]): r for r in op_rows if r["dtype"] == dtype}
            ceiling = "copy bandwidth" if op.bound == "memory" else "matmul rate"
            for metric in ("vs_torch", "fraction"):
                for p in PASSES:
                    series = {a: [_get(by, (a, s, p), metric) for s in sizes] for a in adapters}
                    if metric == "vs_torch":
                        title, ylabel = f"{op.name} {dtype} {SHORT[p]}: vs {BASELINE_ADAPTER}", "× torch eager speed"
                    else:
                        title, ylabel = f"{op.name} {dtype} {SHORT[p]}: of roof", f"% of {ceiling}"
                    panels.append(
                        Panel(
                            title,
                            sizes,
                            series,
                            ylabel,
                            reference=1.0,
                            percent=metric == "fraction",
                        )
                    )
    return chart(f"{behaviour}: adapters side by side across sizes", panels, columns=4)


def write(run: dict[str, Any], out_dir: Path) -> dict[str, Path]:
    """Write the run's files to ``out_dir``; return their paths by kind."""
    out_dir.mkdir(parents=True, exist_ok=True)
    paths: dict[str, Path] = {}
    plots: dict[str, str] = {}
    for b in BEHAVIOURS:
        svg = plot(b, run["results"])
        if svg is not None:
            name = f"perf_{b}.svg"
            atomic_write(out_dir / name, svg)
            plots[b] = name
            paths[f"svg:{b}"] = out_dir / name
    paths["json"] = out_dir / "perf.json"
    atomic_write(paths["json"], json.dumps(_json_safe(run), indent=1) + "\n")
    paths["csv"] = out_dir / "perf.csv"
    atomic_write(paths["csv"], to_csv(run["results"]))
    paths["md"] = out_dir / "perf.md"
    atomic_write(paths["md"], render(run, plots))
    return paths


def load(path: Path) -> dict[str, Any]:
    data = json.loads(Path(path).read_text())
    if data.get("schema") != SCHEMA:
        raise ValueError(f"{path} is not a performance run (schema {data.get('schema')!r}, expected {SCHEMA!r})")
    return dict(data)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("run", type=Path, help="a perf.json")
    ap.add_argument("--compare", type=Path, metavar="BASELINE.json", help="a saved perf.json to compare with")
    ap.add_argument("--min-relative", type=float, default=MIN_RELATIVE, help="smallest relative change flagged")
    ap.add_argument("--out", type=Path, help="where to write the report (default: the run's directory)")
    ap.add_argument("--fail-on-regression", action="store_true")
    args = ap.parse_args(argv)
    run = load(args.run)
    if args.compare:
        run["comparison"] = compare(run, load(args.compare), args.min_relative)
    paths = write(run, args.out or args.run.parent)
    print(f"performance report: {paths['md']}")
    cmp = run.get("comparison")
    if cmp:
        print(f"against {args.compare}: {cmp['regressions']} regression(s), {cmp['improvements']} improvement(s)")
        if args.fail_on_regression and cmp["regressions"]:
            return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

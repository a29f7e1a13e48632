"""Merge any number of report.json files into a static site: ``python -m reports.dashboard REPORT.json ...``.

The site (default ``reports/site/``) holds ``index.html`` — the runs, a comparison matrix (checks ×
adapters, one column per adapter and environment, from its latest run) and the history of each adapter
(passed checks and worst ulp error over runs, as inline SVG) — and one page per run (its report.html).
perf.json files of performance runs (``nox -s bench``) given among the files get a section of the index
and a page each with their tables and plots (reports/html_perf.py).
A file that is not a report this suite reads (malformed JSON, foreign JSON, another schema version) gets
one line on stderr naming it; the others are still merged. Exit status: 0 all merged, 1 some files
rejected (the site is built from the rest), 2 nothing to build from.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from transformer_conformance.reports import perf_run
from transformer_conformance.reports.badge import PASSED, colour, known, level
from transformer_conformance.reports.html_page import STATUS_MARK, STATUS_WORD, esc, fmt_ulp, kind, legend, page
from transformer_conformance.reports.html_perf import adapters_of, number, perf_page
from transformer_conformance.reports.html_report import render_html
from transformer_conformance.reports.schema import problem, validate
from transformer_conformance.reports.writer import atomic_write

DEFAULT_OUT = Path("reports/site")
#: a merged cell shows its worst status (an expectation file's verdicts rank between a failure and a pass)
WORSE = (
    "error",
    "failed",
    "unexpectedly_passed",
    "known_failure",
    "expected_skip",
    "skipped",
    "unsupported",
    "passed",
)


@dataclass
class Run:
    source: str
    report: dict[str, Any]
    page: str = ""

    @property
    def created(self) -> str:
        return str(self.report.get("created", ""))


def _reject_reason(doc: Any) -> str | None:
    reason = problem(doc)
    if reason is not None:
        return reason
    try:
        errors = validate(doc)
    except ImportError:  # without jsonschema the structural check above is all there is
        errors = []
    if errors:
        more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
        return f"does not match reports/report.schema.json: {errors[0]}{more}"
    return None


def load(paths: list[str], perf: list[dict[str, Any]] | None = None) -> tuple[list[Run], list[str]]:
    """The reports that can be merged, in time order, and one error line per file that cannot. With
    ``perf``, the performance runs among the files (perf.json) go there, in time order, instead of being
    rejected."""
    runs, errors = [], []
    for p in paths:
        try:
            doc = json.loads(Path(p).read_text(encoding="utf-8"))
        except OSError as exc:
            errors.append(f"{p}: cannot read: {exc.strerror or exc}")
            continue
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            errors.append(f"{p}: not JSON: {str(exc).splitlines()[0]}")
            continue
        if perf is not None and perf_run.is_perf(doc):
            why = perf_run.problem(doc)
            if why is None:
                try:
                    perf_page(doc)
                except Exception as exc:  # noqa: BLE001 - one bad file must not stop the others
                    why = f"cannot be shown: {type(exc).__name__}: {exc}"
            if why is not None:
                errors.append(f"{p}: {why}")
            else:
                perf.append(dict(doc, source=p))
            continue
        reason = _reject_reason(doc)
        if reason is None:
            try:
                render_html(doc)
            except Exception as exc:  # noqa: BLE001 - one bad file must not stop the others
                reason = f"cannot be shown: {type(exc).__name__}: {exc}"
        if reason is not None:
            errors.append(f"{p}: {reason}")
            continue
        runs.append(Run(p, doc))
    runs.sort(key=lambda r: r.created)
    if perf is not None:
        perf.sort(key=lambda d: str(d.get("created", "")))
    return runs, errors


def _signature(run: Run, adapter: str) -> str:
    """An adapter as run in one environment: its name with the library versions and device it reported."""
    for a in run.report["adapters"]:
        if a["name"] == adapter:
            env = ", ".join(f"{k} {v}" for k, v in sorted(a.get("environment", {}).items()))
            return f"{adapter} ({env}; {run.report['environment'].get('machine', '?')})"
    return adapter


def _adapters(run: Run) -> list[str]:
    names = [a["name"] for a in run.report["adapters"]]
    return names + sorted({c["adapter"] for c in run.report["checks"]} - set(names))


def _checks_of(run: Run, adapter: str, check_id: str) -> list[dict[str, Any]]:
    return [c for c in run.report["checks"] if c["adapter"] == adapter and c["check"] == check_id]


def _merged_cell(checks: list[dict[str, Any]], link: str) -> str:
    if not checks:
        return '<td class="cell s-none">·</td>'
    worst = min((kind(c) for c in checks), key=WORSE.index)
    declared = [c for c in checks if c["status"] != "unsupported"]
    passed = sum(c["status"] in PASSED for c in declared)
    tip = "; ".join(
        f"{c['dtype'] or '—'}: {STATUS_WORD[kind(c)]}"
        + (f" ({c['expectation']['reason']})" if c.get("expectation") else "")
        for c in checks
    )
    text = f"{STATUS_MARK[worst]} {passed}/{len(declared)}" if declared else f"{STATUS_MARK[worst]}"
    return f'<td class="cell s-{worst}" title="{esc(tip)}"><a href="{esc(link)}">{esc(text)}</a></td>'


def comparison(runs: list[Run]) -> str:
    latest: dict[str, tuple[Run, str]] = {}
    for run in runs:  # time order: later runs replace earlier ones
        for name in _adapters(run):
            latest[_signature(run, name)] = (run, name)
    cols = sorted(latest)
    rows: dict[str, set[str]] = defaultdict(set)
    for run, name in latest.values():
        for c in run.report["checks"]:
            if c["adapter"] == name:
                rows[c["behaviour"]].add(c["check"])
    head = "".join(
        f'<th title="{esc(sig)}"><a href="{esc(latest[sig][0].page)}">{esc(latest[sig][1])}</a>'
        f'<small class="muted"><br>{esc(sig.partition(" (")[2].rstrip(")"))}'
        f"<br>{esc(latest[sig][0].created)}</small></th>"
        for sig in cols
    )
    body = []
    for behaviour in sorted(rows):
        ids = sorted(rows[behaviour])
        for n, check_id in enumerate(ids):
            lead = f'<th rowspan="{len(ids)}">{esc(behaviour)}</th>' if n == 0 else ""
            cells = "".join(_merged_cell(_checks_of(*latest[s], check_id), latest[s][0].page) for s in cols)
            body.append(f"<tr>{lead}<td><code>{esc(check_id)}</code></td>{cells}</tr>")
    return (
        '<section id="matrix"><h2>Comparison</h2>'
        '<p class="muted">One column per adapter and environment (library versions, device, machine), from its '
        "latest run; a cell merges the check's dtypes: its worst status and passed / declared. A known failure "
        "or a check skipped by an expectation file ranks between a failure and a pass; the tooltip gives the "
        "reason.</p>"
        + legend()
        + f'<table class="matrix"><thead><tr><th>behaviour</th><th>check</th>{head}</tr></thead>'
        f"<tbody>{''.join(body)}</tbody></table></section>"
    )


def chart(title: str, points: list[tuple[str, float | None]], log: bool = False, unit: str = "") -> str:
    """A small line chart as inline SVG: one point per run, its label and value in the point's tooltip."""
    w, h, pad = 360, 140, 34
    vals = [v for _, v in points if v is not None]
    if not vals:
        return f'<svg width="{w}" height="{h}" role="img"><text x="10" y="20">{esc(title)}: no data</text></svg>'
    tr = [math.log10(max(v, 1e-3)) if log else v for v in vals]
    lo, hi = min(tr), max(tr)
    if hi - lo < 1e-9:
        lo, hi = lo - 1, hi + 1

    def xy(i: int, v: float) -> tuple[float, float]:
        t = math.log10(max(v, 1e-3)) if log else v
        x = pad + (w - 2 * pad) * (i / max(len(points) - 1, 1))
        return x, h - pad + (t - lo) / (hi - lo) * (2 * pad - h)

    coords = [(xy(i, v), label, v) for i, (label, v) in enumerate(points) if v is not None]
    line = " ".join(f"{x:.1f},{y:.1f}" for (x, y), _, _ in coords)
    polyline = f'<polyline points="{line}" fill="none" stroke="#0969da" stroke-width="2"/>' if len(coords) > 1 else ""
    dots = "".join(
        f'<circle cx="{x:.1f}" cy="{y:.1f}" r="3.5" fill="#0969da"><title>{esc(label)}: {esc(fmt_ulp(v))}{unit}'
        "</title></circle>"
        for (x, y), label, v in coords
    )
    top = 10**hi if log else hi
    bottom = 10**lo if log else lo
    return (
        f'<svg width="{w}" height="{h}" viewBox="0 0 {w} {h}" role="img" aria-label="{esc(title)}">'
        f'<text x="{pad}" y="14">{esc(title)}{" (log scale)" if log else ""}</text>'
        f'<line x1="{pad}" y1="{h - pad}" x2="{w - pad}" y2="{h - pad}" stroke="#8c959f"/>'
        f'<line x1="{pad}" y1="{pad}" x2="{pad}" y2="{h - pad}" stroke="#8c959f"/>'
        f'<text x="2" y="{pad + 4}">{esc(fmt_ulp(top))}</text><text x="2" y="{h - pad}">{esc(fmt_ulp(bottom))}</text>'
        f'<text x="{pad}" y="{h - 8}">{esc(points[0][0][:10])}</text>'
        f'<text x="{w - pad}" y="{h - 8}" text-anchor="end">{esc(points[-1][0][:10])}</text>'
        f"{polyline}{dots}</svg>"
    )


def history(runs: list[Run]) -> str:
    series: dict[str, list[tuple[str, float | None, float | None]]] = defaultdict(list)
    for run in runs:
        for name in _adapters(run):
            checks = [c for c in run.report["checks"] if c["adapter"] == name]
            passed = sum(c["status"] in PASSED for c in checks)
            ulps = [u for u in (number(c.get("max_ulp")) for c in checks) if u is not None]
            series[name].append((run.created, float(passed), max(ulps) if ulps else None))
    out = [
        '<section id="history"><h2>History</h2><p class="muted">Per adapter, over its runs in time order: the '
        "number of checks passed, and the worst error seen in any check (ulps of the dtype).</p>"
    ]
    for name in sorted(series):
        pts = series[name]
        out.append(
            f'<h3>{esc(name)}</h3><div class="history">'
            + chart("checks passed", [(t, p) for t, p, _ in pts])
            + chart("worst error", [(t, u) for t, _, u in pts], log=True, unit=" ulp")
            + "</div>"
        )
    out.append("</section>")
    return "".join(out)


def runs_table(runs: list[Run]) -> str:
    rows = []
    for run in reversed(runs):
        r = run.report
        passed, total = level(r)
        rows.append(
            f'<tr><td><a href="{esc(run.page)}">{esc(run.created)}</a></td>'
            f"<td>{esc(', '.join(_adapters(run)))}</td>"
            f'<td><span class="verdict v-{esc(r["verdict"])}">{esc(r["verdict"])}</span></td>'
            f'<td style="color:{colour(r)};font-weight:700">{passed}/{total}'
            + (f'<small class="muted"><br>{known(r)} known</small>' if known(r) else "")
            + "</td>"
            f"<td>{esc(r['hypothesis'].get('profile'))}</td><td>{esc(r['environment'].get('platform', ''))}</td>"
            f"<td><code>{esc(run.source)}</code></td></tr>"
        )
    return (
        '<section id="runs"><h2>Runs</h2><table><thead><tr><th>created</th><th>adapters</th><th>verdict</th>'
        "<th>passed / declared</th><th>profile</th><th>platform</th><th>source</th></tr></thead>"
        f"<tbody>{''.join(rows)}</tbody></table></section>"
    )


def performance(perfs: list[dict[str, Any]], pages: list[str]) -> str:
    rows = []
    for doc, link in reversed(list(zip(perfs, pages, strict=True))):
        results = [r for r in doc.get("results") or [] if isinstance(r, dict)]
        behaviours = ", ".join(dict.fromkeys(str(r["behaviour"]) for r in results))
        rows.append(
            f'<tr><td><a href="{esc(link)}">{esc(doc.get("created", "?"))}</a></td>'
            f"<td>{esc(', '.join(adapters_of(results)))}</td><td>{esc(doc.get('device', '?'))}</td>"
            f"<td>{esc(doc.get('mode', '?'))}</td><td>{esc(behaviours)}</td><td>{len(results)}</td>"
            f"<td><code>{esc(doc.get('source', ''))}</code></td></tr>"
        )
    return (
        '<section id="performance"><h2>Performance</h2><p class="muted">The performance runs given (perf.json of '
        "<code>nox -s bench</code>), newest first; each page has the tables and plots per behaviour. A "
        "benchmark, never part of a verdict.</p><table><thead><tr><th>created</th><th>adapters</th>"
        "<th>device</th><th>set</th><th>behaviours</th><th>results</th><th>source</th></tr></thead>"
        f"<tbody>{''.join(rows)}</tbody></table></section>"
    )


def build_site(
    runs: list[Run], out: Path, errors: list[str] | None = None, perfs: list[dict[str, Any]] | None = None
) -> list[Path]:
    """Write index.html, one page per run and one per performance run under ``out``; return the files
    written."""
    written = []
    for i, run in enumerate(runs):
        run.page = f"run-{i + 1:03d}.html"
    for run in runs:
        path = out / run.page
        atomic_write(path, render_html(run.report, back="index.html"))
        written.append(path)
    perfs = perfs or []
    perf_pages = [f"perf-{i + 1:03d}.html" for i in range(len(perfs))]
    for doc, name in zip(perfs, perf_pages, strict=True):
        atomic_write(out / name, perf_page(doc, back="index.html"))
        written.append(out / name)
    rejected = ""
    if errors:
        rejected = (
            '<section id="rejected"><h2>Files not merged</h2><ul>'
            + "".join(f"<li><code>{esc(e)}</code></li>" for e in errors)
            + "</ul></section>"
        )
    body = (
        '<nav><a href="#runs">Runs</a><a href="#matrix">Comparison</a><a href="#history">History</a>'
        + ('<a href="#performance">Performance</a>' if perfs else "")
        + "</nav>"
        f"<h1>Conformance dashboard</h1><p>{len(runs)} run{'s' if len(runs) != 1 else ''} merged"
        + (f", {len(perfs)} performance run{'s' if len(perfs) != 1 else ''}" if perfs else "")
        + ".</p>"
        + (runs_table(runs) + comparison(runs) + history(runs) if runs else "")
        + (performance(perfs, perf_pages) if perfs else "")
        + rejected
    )
    atomic_write(out / "index.html", page("Conformance dashboard", body))
    written.append(out / "index.html")
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m reports.dashboard", description=__doc__.splitlines()[0])
    parser.add_argument(
        "reports",
        nargs="+",
        metavar="REPORT.json",
        help="report.json files of any runs, and perf.json files of performance runs (nox -s bench)",
    )
    parser.add_argument("-o", "--out", type=Path, default=DEFAULT_OUT, help=f"site directory (default: {DEFAULT_OUT})")
    args = parser.parse_args(argv)
    perfs: list[dict[str, Any]] = []
    runs, errors = load(args.reports, perfs)
    for e in errors:
        print(f"error: {e}", file=sys.stderr)
    if not runs and not perfs:
        print("error: no report to build the site from", file=sys.stderr)
        return 2
    build_site(runs, args.out, errors, perfs)
    print(
        f"{args.out / 'index.html'}: {len(runs)} run{'s' if len(runs) != 1 else ''} merged"
        + (f", {len(perfs)} performance run{'s' if len(perfs) != 1 else ''}" if perfs else "")
    )
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())

"""``report.html``: the run for people to read and publish, in one self-contained file.

Sections: the verdict and summary; the status matrix (checks grouped by behaviour × dtypes, one column
group per adapter); the precision view (worst ulp error per behaviour and dtype, coloured by how much of
its error budget it used); each failure with the property in words, the message, the shrunk
counterexample and a standalone reproduction script; a performance run given with the report (perf.json,
reports/html_perf.py); the checks and the seed statements they enforce; each adapter's declared
conventions; the environment.
"""

from __future__ import annotations

import json
from collections import defaultdict
from typing import Any

from transformer_conformance.reports import reached
from transformer_conformance.reports.html_page import (
    DTYPE_ORDER,
    STATUS_MARK,
    STATUS_WORD,
    data_url,
    esc,
    fmt_share,
    fmt_ulp,
    kind,
    legend,
    not_declared,
    page,
    safe_filename,
    severity,
    share,
)
from transformer_conformance.reports.html_perf import perf_section
from transformer_conformance.reports.html_plots import precision_plots
from transformer_conformance.reports.repro_script import repro_script

NONE = "—"  # the dtype column of checks that take no dtype


def _dtypes(checks: list[dict[str, Any]]) -> list[str]:
    present = {c["dtype"] or NONE for c in checks}
    return (
        [d for d in DTYPE_ORDER if d in present]
        + sorted(present - set(DTYPE_ORDER) - {NONE})
        + ([NONE] if NONE in present else [])
    )


def _num(v: Any) -> float | None:
    try:
        return float(v) if v is not None else None
    except (TypeError, ValueError):
        return None


FAILURES = ("failed", "error", "known_failure")


def _failure_ids(checks: list[dict[str, Any]]) -> dict[int, str]:
    return {id(c): f"f{i}" for i, c in enumerate(c for c in checks if c["status"] in FAILURES)}


def _expected(c: dict[str, Any]) -> str:
    """The expectation entry that decided a check, in words, or ''."""
    e = c.get("expectation")
    return f"{e['file']} entry {e['entry']} ({e['status']}): {e['reason']}" if e else ""


def _cell(c: dict[str, Any] | None, anchors: dict[int, str]) -> str:
    if c is None:
        return '<td class="cell s-none" title="not run">·</td>'
    status, k = c["status"], kind(c)
    tip = f"{c['adapter']} · {c['check']} · {c['dtype'] or NONE}: {STATUS_WORD[k]}"
    ulp = fmt_ulp(c.get("max_ulp"))
    if ulp:
        tip += f"; worst {ulp} ulp"
        if share(c) is not None:
            tip += f", {fmt_share(share(c))} of its budget beyond the final rounding"
    if not_declared(c):
        tip += f"; ran without {not_declared(c)}"
    if _expected(c):
        tip += f"\nexpected by {_expected(c)}"
    if c.get("message") and k != "expected_skip":
        tip += f"\n{c['message'].splitlines()[0][:300]}"
    used = f" · {fmt_share(share(c))}" if ulp and share(c) is not None else ""
    inner = f"{STATUS_MARK[k]} {STATUS_WORD[k]}" + (f"<small>{esc(ulp)} ulp{esc(used)}</small>" if ulp else "")
    if c.get("expectation"):
        inner += f'<small class="reason">{esc(c["expectation"]["reason"][:80])}</small>'
    if id(c) in anchors:
        inner = f'<a href="#{anchors[id(c)]}">{inner}</a>'
    return f'<td class="cell s-{k}" title="{esc(tip)}" data-status="{status}">{inner}</td>'


def _header(adapters: list[str], dtypes: dict[str, list[str]], first: list[str]) -> str:
    lead = "".join(f'<th rowspan="2">{esc(h)}</th>' for h in first)
    top = "".join(f'<th colspan="{len(dtypes[a])}">{esc(a)}</th>' for a in adapters)
    sub = "".join(f"<th>{esc(d)}</th>" for a in adapters for d in dtypes[a])
    return f"<thead><tr>{lead}{top}</tr><tr>{sub}</tr></thead>"


def matrix(report: dict[str, Any]) -> str:
    checks = report["checks"]
    anchors = _failure_ids(checks)
    by_adapter: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for c in checks:
        by_adapter[c["adapter"]].append(c)
    adapters = list(by_adapter)
    dtypes = {a: _dtypes(rows) for a, rows in by_adapter.items()}
    cells: dict[tuple[str, str, str, str], dict[str, Any]] = {}
    behaviours: dict[str, list[str]] = defaultdict(list)
    for c in checks:
        cells[(c["behaviour"], c["check"], c["adapter"], c["dtype"] or NONE)] = c
        if c["check"] not in behaviours[c["behaviour"]]:
            behaviours[c["behaviour"]].append(c["check"])
    rows = []
    for behaviour in sorted(behaviours):
        ids = sorted(behaviours[behaviour])
        for n, check_id in enumerate(ids):
            lead = f'<th rowspan="{len(ids)}">{esc(behaviour)}</th>' if n == 0 else ""
            row = "".join(_cell(cells.get((behaviour, check_id, a, d)), anchors) for a in adapters for d in dtypes[a])
            rows.append(f"<tr>{lead}<td><code>{esc(check_id)}</code></td>{row}</tr>")
    return (
        '<section id="matrix"><h2>Matrix</h2>'
        '<p class="muted">One row per check, grouped by behaviour; one column per dtype'
        + (", grouped by adapter" if len(adapters) > 1 else "")
        + ". A cell shows the status and the worst error seen, in ulps of the dtype against the float64 oracle; "
        "a failed cell links to its failure. Cells an expectation file decided (docs/expectations.md) show "
        "its reason.</p>"
        + legend()
        + f'<table class="matrix">{_header(adapters, dtypes, ["behaviour", "check"])}<tbody>{"".join(rows)}'
        + "</tbody></table></section>"
    )


def _precision_colour(used: float | None, failed: bool) -> str:
    """Background by share of the error budget used: green (little) through yellow to red (over)."""
    if failed or (used is not None and used > 1.0):
        return "#f8b4b4"
    if used is None:
        return "#f6f8fa"
    hue = 130 - 80 * max(0.0, min(used, 1.0))  # 130 green .. 50 yellow
    return f"hsl({hue:.0f}, 70%, 85%)"


def precision(report: dict[str, Any]) -> str:
    checks = [c for c in report["checks"] if _num(c.get("max_ulp")) is not None]
    if not checks:
        return '<section id="precision"><h2>Precision</h2><p>No error measurements in this run.</p></section>'
    by_adapter: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for c in checks:
        by_adapter[c["adapter"]].append(c)
    adapters = list(by_adapter)
    dtypes = {a: _dtypes(rows) for a, rows in by_adapter.items()}
    groups: dict[tuple[str, str, str], list[dict[str, Any]]] = defaultdict(list)
    for c in checks:
        groups[(c["behaviour"], c["adapter"], c["dtype"] or NONE)].append(c)
    rows = []
    for behaviour in sorted({c["behaviour"] for c in checks}):
        tds = []
        for a in adapters:
            for d in dtypes[a]:
                group = groups.get((behaviour, a, d))
                if not group:
                    tds.append('<td class="cell s-none">·</td>')
                    continue
                worst = max(group, key=lambda c: _num(c["max_ulp"]) or 0.0)
                used = max((_num(share(c)) or 0.0) for c in group)
                failed = any(c["status"] in ("failed", "error") for c in group)
                tip = (
                    f"worst {fmt_ulp(worst['max_ulp'])} ulp in {worst['check']}"
                    + (f" ({worst['worst']})" if worst.get("worst") else "")
                    + f"; largest share of an error budget used beyond the final rounding: {fmt_share(used)}"
                )
                tds.append(
                    f'<td class="cell" style="background:{_precision_colour(used, failed)}" title="{esc(tip)}">'
                    f"{esc(fmt_ulp(worst['max_ulp']))}<small>{esc(fmt_share(used))} of budget</small></td>"
                )
        rows.append(f"<tr><th>{esc(behaviour)}</th>{''.join(tds)}</tr>")
    return (
        '<section id="precision"><h2>Precision</h2>'
        '<p class="muted">Worst error per behaviour and dtype, in ulps of the dtype at the element\'s condition '
        "scale (docs/tolerance.md), over all checks of the behaviour; the colour is the largest share of an "
        "element's derived error budget used beyond the output's own final rounding (a correctly rounded result "
        "uses none): green little, yellow close to it, red over it.</p>"
        f'<table class="precision">{_header(adapters, dtypes, ["behaviour"])}<tbody>{"".join(rows)}</tbody></table>'
        + precision_plots(report)
        + "</section>"
    )


def _repro_block(c: dict[str, Any], anchor: str, worst: bool = False) -> str:
    script = repro_script(c, worst=worst)
    if script is None:
        payload = (c.get("extra") or {}).get("repro") or {}
        why = payload.get("omitted") or "this check keeps no standalone call"
        return (
            f'<p class="muted">No reproduction script: {esc(why)}. The <code>@reproduce_failure</code> line of the '
            "counterexample replays it within the suite.</p>"
        )
    name = safe_filename(f"repro-{c['adapter']}-{c['check']}-{c['dtype'] or 'none'}{'-worst' if worst else ''}") + ".py"
    return (
        '<div class="repro"><h4>Reproduction script</h4>'
        '<p class="muted">Plain Python: needs only NumPy, ml_dtypes and the candidate\'s library; run it where the '
        "adapter imports (the directory the suite ran in). It prints the candidate's values next to the float64 "
        "oracle's.</p>"
        f'<p class="actions"><button type="button" data-copy="{anchor}-script">Copy</button>'
        f'<a download="{esc(name)}" href="{data_url(script)}">Download {esc(name)}</a></p>'
        f'<pre id="{anchor}-script" class="script">{esc(script)}</pre></div>'
    )


def failures(report: dict[str, Any], known: bool = False) -> str:
    """The failures section (new failures and errors), or with ``known`` the known failures section."""
    checks = report["checks"]
    anchors = _failure_ids(checks)
    bad = sorted((c for c in checks if id(c) in anchors and (c["status"] == "known_failure") == known), key=severity)
    section, title = ("known-failures", "Known failures") if known else ("failures", "Failures")
    if not bad:
        if known:
            return ""
        return f'<section id="{section}"><h2>{title}</h2><p>None: every check that ran passed.</p></section>'
    out = [f'<section id="{section}"><h2>{title}</h2>']
    if known:
        out.append(
            '<p class="muted">Failures an expectation file lists (docs/expectations.md): they do not fail the run, '
            "and are kept here in full.</p>"
        )
    for c in bad:
        a = anchors[id(c)]
        style = {"failed": "failed", "error": "error", "known_failure": "failed known"}[c["status"]]
        lead = (
            "The check could not run (an error of the suite or its environment, not a verdict)"
            if c["status"] == "error"
            else "The candidate broke the property"
        )
        out.append(
            f'<article class="failure {style}" id="{a}">'
            f"<h3>{esc(c['adapter'])} · <code>{esc(c['check'])}</code> · {esc(c['dtype'] or NONE)} — "
            f"{STATUS_WORD[c['status']]}</h3>"
            f"<p>{lead}: <strong>{esc(c['property'])}</strong>.</p>"
            + (f'<p class="reason">Expected by {esc(_expected(c))}</p>' if c.get("expectation") else "")
            + f'<p class="muted">Seed statement: {esc(c["cites"])}</p>'
            f'<pre class="message">{esc(c.get("message", ""))}</pre>'
        )
        worst = (c.get("extra") or {}).get("worst")
        if c.get("counterexample"):
            out.append(
                "<details><summary>Shrunk counterexample</summary>"
                f'<pre class="counterexample">{esc(c["counterexample"])}</pre></details>'
            )
        out.append(_repro_block(c, a))
        if worst and worst.get("message") != c.get("message"):
            out.append(
                f"<h4>Furthest over its budget ({esc(fmt_share(worst['share']))}), before shrinking</h4>"
                f'<pre class="message">{esc(worst["message"])}</pre>' + _repro_block(c, f"{a}-worst", worst=True)
            )
        out.append("</article>")
    out.append("</section>")
    return "".join(out)


def unexpected_passes(report: dict[str, Any]) -> str:
    """A notice at the top of the page: known failures that passed, whose entries may be stale."""
    passed = [c for c in report["checks"] if c["status"] == "unexpectedly_passed"]
    if not passed:
        return ""
    items = "".join(
        f"<li>{esc(c['adapter'])} · <code>{esc(c['check'])}</code> · {esc(c['dtype'] or NONE)} — expected by "
        f"{esc(_expected(c))}</li>"
        for c in passed
    )
    return (
        f'<div class="notice" id="unexpected"><strong>{len(passed)} check{"s" if len(passed) != 1 else ""} '
        "unexpectedly passed</strong> (a warning, not a failure): an expectation file lists "
        f"{'them' if len(passed) != 1 else 'it'} as a known failure. If the defect is fixed, remove the entry."
        f"<ul>{items}</ul></div>"
    )


def expectations_section(report: dict[str, Any]) -> str:
    """The expectation files of the run: each entry, its reason and how many checks it matched."""
    exp = report.get("expectations") or {}
    entries = exp.get("entries") or []
    if not entries:
        return ""
    rows = "".join(
        ('<tr class="unmatched">' if e["matched"] == 0 else "<tr>") + f"<td><code>{esc(e['file'])}</code></td>"
        f"<td>{esc(e['entry'])}</td><td><code>{esc(e['check'])}</code></td>"
        f"<td>{esc(', '.join(e['dtype']) if e['dtype'] else 'every')}</td><td>{esc(e['adapter'] or 'every')}</td>"
        f"<td>{esc(e['status'])}"
        + (f", failures matching <code>{esc(e['match'])}</code>" if e.get("match") else "")
        + f"</td><td>{esc(e['reason'])}</td>"
        f"<td>{esc(e['matched']) if e['matched'] else '<strong>none</strong>'}</td></tr>"
        for e in entries
    )
    unmatched = sum(e["matched"] == 0 for e in entries)
    return (
        '<section id="expectations"><h2>Expectations</h2>'
        '<p class="muted">Entries of the expectation files (docs/expectations.md): "fail" — a known failure, which '
        'does not fail the run; "skip" — the check is not run. Matched: the checks of this run the entry covers.'
        + (
            f" <strong>{unmatched} entr{'ies' if unmatched != 1 else 'y'} matched no check in this run</strong>."
            if unmatched
            else ""
        )
        + "</p><table><thead><tr><th>file</th><th>entry</th><th>check</th><th>dtype</th><th>adapter</th>"
        f"<th>status</th><th>reason</th><th>matched</th></tr></thead><tbody>{rows}</tbody></table></section>"
    )


def checks_table(report: dict[str, Any]) -> str:
    seen: dict[str, dict[str, Any]] = {}
    for c in report["checks"]:
        seen.setdefault(c["check"], c)
    rows = "".join(
        f"<tr><td><code>{esc(k)}</code></td><td>{esc(c['behaviour'])}</td><td>{esc(c['property'])}</td>"
        f"<td>{esc(c['cites'])}</td></tr>"
        for k, c in sorted(seen.items())
    )
    return (
        '<section id="checks"><h2>Checks and the seed statements they enforce</h2>'
        "<table><thead><tr><th>check</th><th>behaviour</th><th>property</th><th>cites</th></tr></thead>"
        f"<tbody>{rows}</tbody></table></section>"
    )


def _kv(d: dict[str, Any]) -> str:
    rows = "".join(
        f"<tr><th>{esc(k)}</th><td>{esc(v if isinstance(v, str) else json.dumps(v, ensure_ascii=False))}</td></tr>"
        for k, v in d.items()
    )
    return f"<table>{rows}</table>"


def adapters_section(report: dict[str, Any]) -> str:
    out = ['<section id="adapters"><h2>Adapters and their declared conventions</h2>']
    for a in report["adapters"]:
        caps = {
            op: f"{', '.join(c['dtypes'])}{'; gradients' if c['grad'] else '; no gradients'}"
            + "".join(f"; {key} {', '.join(v)} only" for key, v in c.get("values", {}).items())
            for op, c in a.get("capabilities", {}).items()
        }
        out.append(
            f"<h3>{esc(a['name'])}</h3>"
            + (f"<p>Loaded from <code>{esc(a['spec'])}</code></p>" if a.get("spec") else "")
            + "<h4>Conventions</h4>"
            + _kv(a.get("conventions", {}))
            + "<h4>Capabilities</h4>"
            + _kv(caps)
            + "<h4>Environment</h4>"
            + _kv(a.get("environment", {}))
        )
    out.append("</section>")
    return "".join(out)


def environment_section(report: dict[str, Any]) -> str:
    env = report.get("environment", {})
    hyp = report.get("hypothesis", {})
    devices = sorted({str(a.get("environment", {}).get("device")) for a in report["adapters"]} - {"None"})
    info = {
        "suite version": report.get("suite_version"),
        "suite commit": (report.get("suite_commit", "—") + (" (modified)" if report.get("suite_modified") else "")),
        "created": report.get("created"),
        "duration (s)": report.get("duration_s"),
        "exit status": report.get("exit_status"),
        "Hypothesis profile": hyp.get("profile"),
        "Hypothesis seed": _seed(report),
        "Hypothesis version": hyp.get("version"),
        "Python": env.get("python"),
        "platform": env.get("platform"),
        "machine": env.get("machine"),
        "devices": ", ".join(devices) or "—",
        "dtypes": ", ".join(sorted({c["dtype"] for c in report["checks"] if c["dtype"]})) or "—",
    }
    return (
        '<section id="environment"><h2>Environment</h2>'
        + _kv({k: v for k, v in info.items() if v is not None})
        + "<h4>Libraries</h4>"
        + _kv(env.get("libraries", {}))
        + "</section>"
    )


def _seed(report: dict[str, Any]) -> str:
    seed = report.get("hypothesis", {}).get("seed")
    return "none (derandomised)" if seed is None else str(seed)


def summary_line(report: dict[str, Any]) -> str:
    s = report["summary"]
    parts = ", ".join(f"{n} {k.replace('_', ' ')}" for k, n in s.items() if n)
    return (
        f'<p><span class="verdict v-{esc(report["verdict"])}" id="verdict">{esc(report["verdict"])}</span> '
        f"{esc(parts)}</p>"
    )


def render_html(report: dict[str, Any], back: str = "", perf: dict[str, Any] | None = None) -> str:
    """The whole page for one report; ``back``: a link target shown at the top (the dashboard's index);
    ``perf``: a performance run (perf.json, reports/perf_run.py) to show in a section of its own."""
    names = ", ".join(a["name"] for a in report["adapters"])
    nav = (
        (f'<a href="{esc(back)}">← all runs</a>' if back else "")
        + '<a href="#matrix">Matrix</a><a href="#precision">Precision</a><a href="#failures">Failures</a>'
        + ('<a href="#performance">Performance</a>' if perf is not None else "")
        + ('<a href="#expectations">Expectations</a>' if (report.get("expectations") or {}).get("entries") else "")
        + '<a href="#checks">Checks</a>'
        + ('<a href="#reached">Reached</a>' if report.get("reached") else "")
        + '<a href="#adapters">Adapters</a><a href="#environment">Environment</a>'
    )
    body = (
        f"<nav>{nav}</nav><h1>Conformance report: {esc(names)}</h1>"
        + summary_line(report)
        + unexpected_passes(report)
        + f'<p class="muted">{esc(report.get("created", ""))} · Hypothesis profile '
        f"<code>{esc(report['hypothesis'].get('profile'))}</code>, seed "
        f"<code>{esc(_seed(report))}</code> · schema {esc(report.get('schema_version'))}</p>"
        + matrix(report)
        + precision(report)
        + failures(report)
        + failures(report, known=True)
        + expectations_section(report)
        + (perf_section(perf) if perf is not None else "")
        + checks_table(report)
        + reached.html_section(report)
        + adapters_section(report)
        + environment_section(report)
    )
    return page(f"Conformance report: {names}", body)

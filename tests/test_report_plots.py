"""The precision plots and the performance section of report.html, from a real run of the RoPE and RMSNorm
forwards on the built-in adapters with a made-up perf.json; older reports and the dashboard's perf pages."""

from __future__ import annotations

import html
import itertools
import json
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

from tests.conformance_run import ROOT, Run
from tests.conftest import PERF_ADAPTER
from transformer_conformance.conformance.harness.series import MAX_POINTS
from transformer_conformance.conformance.runner.plugin import _perf_run
from transformer_conformance.reports.dashboard import build_site, load
from transformer_conformance.reports.html_report import render_html
from transformer_conformance.reports.schema import validate


def _html(run: Run) -> str:
    return (run.report_dir / "report.html").read_text(encoding="utf-8")


def _section(page: str, start: str, end: str) -> str:
    return page[page.index(f'id="{start}"') : page.index(f'id="{end}"')]


def _svgs(fragment: str) -> list[ET.Element]:
    """Every inline SVG of the fragment, each parsed as XML on its own."""
    return [ET.fromstring(s) for s in re.findall(r"<svg\b.*?</svg>", fragment, re.S)]


def test_series_in_report_json(precision_run: Run) -> None:
    """The forwards of RoPE and RMSNorm keep a series, bounded, in order, valid against the schema; on a
    conformant run no point is above its budget."""
    report = precision_run.report
    assert validate(report) == []
    kept = [c for c in report["checks"] if c.get("series")]
    assert {(c["check"], c["adapter"], c["dtype"]) for c in kept} == {
        (check, adapter, dtype)
        for check in ("rope/forward", "rms_norm/forward")
        for adapter in ("numpy", "torch")
        for dtype in ("float32", "bfloat16")
    }
    for c in kept:
        (s,) = c["series"]
        assert s["x"] == ("position" if c["behaviour"] == "rope" else "row RMS")
        assert s["output"] == f"{c['behaviour']} output"
        pts = s["points"]
        assert 3 <= len(pts) <= MAX_POINTS
        assert all(lo < hi for lo, hi, _, _ in pts) and all(a[1] <= b[0] for a, b in itertools.pairwise(pts))
        assert all(err <= budget for _, _, err, budget in pts), c["check"]
        assert max(err for _, _, err, _ in pts) == pytest.approx(c["max_ulp"], rel=1e-3)


def test_report_html_has_the_plots(precision_run: Run) -> None:
    """One panel per check × adapter, each a valid SVG with a line per dtype and the budget's dashed line."""
    page = _html(precision_run)
    plots = _section(page, "precision-plots", "failures")
    assert "Error against position: rope" in plots and "Error against input magnitude: rms_norm" in plots
    svgs = _svgs(plots)
    assert len(svgs) == 4
    ns = "{http://www.w3.org/2000/svg}"
    titles = sorted(svg.findtext(f"{ns}title") or "" for svg in svgs)
    assert titles == [
        "numpy · rms_norm/forward · rms_norm output",
        "numpy · rope/forward · rope output",
        "torch · rms_norm/forward · rms_norm output",
        "torch · rope/forward · rope output",
    ]
    for svg in svgs:
        legend = {"".join(t.itertext()) for t in svg.iter(f"{ns}text")}
        assert {"float32 error", "float32 budget", "bfloat16 error", "bfloat16 budget"} <= legend
        assert len(svg.findall(f"{ns}polyline")) == 4
        assert any("position" in t or "RMS" in t for t in legend)


def test_report_html_has_the_performance_section(precision_run: Run) -> None:
    """--perf-json puts the performance run in report.html: ceilings, per behaviour the plots and the side by
    side table; the adapter name's markup is text."""
    page = _html(precision_run)
    perf = _section(page, "performance", "checks")
    assert 'href="#performance"' in page
    assert "Ceilings measured in this run" in perf and "copy bandwidth" in perf
    assert 'id="perf-rms_norm"' in perf and 'id="perf-swiglu_mlp"' in perf
    assert perf.count('<table class="perf">') == 2
    assert "×2.00" in perf and "×1.00" in perf  # the made-up adapter is twice as fast as torch
    for svg in _svgs(perf):
        assert svg.tag.endswith("svg")
    assert len(_svgs(perf)) == 4  # rms_norm and swiglu_mlp, bfloat16: of the roof and vs torch
    assert html.escape(PERF_ADAPTER) in perf and PERF_ADAPTER not in page
    assert page.count("<script") == 1


def _strip(obj: Any, keys: tuple[str, ...]) -> Any:
    if isinstance(obj, dict):
        return {k: _strip(v, keys) for k, v in obj.items() if k not in keys}
    if isinstance(obj, list):
        return [_strip(v, keys) for v in obj]
    return obj


def test_an_older_report_without_series_renders(precision_run: Run, tmp_path: Path) -> None:
    """A report written before the series existed is still valid and renders, with its table and no plots;
    the dashboard merges it."""
    old = _strip(precision_run.report, ("series", "first_failure"))
    assert validate(old) == []
    page = render_html(old)
    assert 'id="precision"' in page and 'class="precision"' in page
    assert "precision-plots" not in page and "<svg" not in page and 'id="performance"' not in page
    path = tmp_path / "old.json"
    path.write_text(json.dumps(old))
    runs, errors = load([str(path)])
    assert not errors and len(runs) == 1


def test_perf_json_is_found_beside_the_report(tmp_path: Path) -> None:
    """Without --perf-json, REPORT_DIR/bench/perf.json is shown when it is a performance run; an unreadable
    one is passed over with a note, and an unreadable --perf-json is a usage error."""
    from tests.test_perf_report import fake_run

    assert _perf_run(None, tmp_path) == (None, "")
    bench = tmp_path / "bench"
    bench.mkdir()
    (bench / "perf.json").write_text(json.dumps(fake_run()))
    run, note = _perf_run(None, tmp_path)
    assert run is not None and run["source"] == str(bench / "perf.json") and "shown" in note
    (bench / "perf.json").write_text('{"schema": "transformer-conformance/report"}')
    run, note = _perf_run(None, tmp_path)
    assert run is None and "not a performance run" in note
    with pytest.raises(pytest.UsageError, match=r"--perf-json: .*not JSON"):
        (bench / "perf.json").write_text("{")
        _perf_run(str(bench / "perf.json"), tmp_path)


def test_dashboard_with_perf_json(precision_run: Run, tmp_path: Path) -> None:
    """perf.json files given to the dashboard get a section of the index and a page each; a malformed one
    is named on stderr and the rest is still built."""
    from tests.test_perf_report import fake_run

    perf = tmp_path / "perf.json"
    perf.write_text(json.dumps(fake_run()))
    bad = tmp_path / "bad-perf.json"
    bad.write_text(json.dumps({"schema": "transformer-conformance/perf", "schema_version": 1, "results": [{}]}))
    out = tmp_path / "site"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "transformer_conformance.reports.dashboard",
            "-o",
            str(out),
            str(precision_run.report_dir / "report.json"),
            str(perf),
            str(bad),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 1, proc.stderr
    assert "bad-perf.json: malformed performance run" in proc.stderr
    assert "1 run merged, 1 performance run" in proc.stdout
    index = (out / "index.html").read_text()
    assert 'id="performance"' in index and 'href="perf-001.html"' in index
    page = (out / "perf-001.html").read_text()
    assert 'id="perf-rms_norm"' in page and page.count('<table class="perf">') == 2 and len(_svgs(page)) == 4
    perfs: list[dict[str, Any]] = []
    runs, errors = load([str(perf)], perfs)
    assert not runs and not errors and len(perfs) == 1
    build_site(runs, tmp_path / "perf-only", [], perfs)
    assert (tmp_path / "perf-only" / "perf-001.html").exists()


def test_report_json_writes_series_points_on_one_line(precision_run: Run) -> None:
    """report.json stays small: a point (and any short list of numbers) is one line; texts are untouched."""
    from transformer_conformance.reports.writer import to_json

    text = (precision_run.report_dir / "report.json").read_text()
    assert re.search(r'"points": \[\n +\[[-\d.e]+, [-\d.e]+, [-\d.e]+, [-\d.e]+\],\n', text)
    doc = {"m": "got [ 1,  2 ] and [1,\n 2]", "v": [1, "inf", None], "long": list(range(9))}
    out = to_json(doc)
    assert json.loads(out) == doc and '"v": [1, "inf", null]' in out and '"long": [\n' in out

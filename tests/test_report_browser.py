"""report.html and the dashboard as a browser shows them (headless Chromium; skipped where it is absent)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.conformance_run import Run

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed")

FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
)


def _chromium(page: Path, tmp_path: Path, *args: str) -> str:
    proc = subprocess.run(
        [str(CHROMIUM), *FLAGS, f"--user-data-dir={tmp_path / 'profile'}", *args, page.as_uri()],
        capture_output=True,
        text=True,
        timeout=1800,  # only against a browser that never exits: far above any load's slowdown
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout


def _dom(page: Path, tmp_path: Path) -> str:
    return _chromium(page, tmp_path, "--dump-dom")


def _screenshot(page: Path, tmp_path: Path, name: str, height: int = 2000) -> Path:
    """A screenshot in the test's tmp dir (also copied to $SCREENSHOT_DIR when that is set, to look at)."""
    shot = tmp_path / name
    _chromium(page, tmp_path, f"--window-size=1400,{height}", f"--screenshot={shot}")
    assert shot.stat().st_size > 10_000
    if os.environ.get("SCREENSHOT_DIR"):
        Path(os.environ["SCREENSHOT_DIR"]).mkdir(parents=True, exist_ok=True)
        shutil.copy(shot, Path(os.environ["SCREENSHOT_DIR"]) / name)
    return shot


def test_report_renders(defect_run: Run, tmp_path: Path) -> None:
    """The page's own script runs (its hash passes the page's policy); the matrix and failures render; the
    candidate's markup is text in the DOM, not an element. The screenshot stays in the test's tmp dir."""
    dom = _dom(defect_run.report_dir / "report.html", tmp_path)
    assert 'data-js="ready"' in dom
    assert '<table class="matrix">' in dom and 'data-status="failed"' in dom
    assert dom.count('<article class="failure') == len(defect_run.checks(status="failed")) > 0
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in dom
    assert "<script>alert(1)" not in dom
    _screenshot(defect_run.report_dir / "report.html", tmp_path, "report.png")


def test_dashboard_renders(defect_run: Run, builtin_run: Run, tmp_path: Path) -> None:
    from transformer_conformance.reports.dashboard import build_site, load

    runs, errors = load([str(builtin_run.report_dir / "report.json"), str(defect_run.report_dir / "report.json")])
    assert not errors
    build_site(runs, tmp_path / "site")
    dom = _dom(tmp_path / "site" / "index.html", tmp_path)
    assert 'data-js="ready"' in dom and '<table class="matrix">' in dom and "<polyline" not in dom
    assert dom.count("<svg") == 8
    defect_page = next(r.page for r in runs if r.source.startswith(str(defect_run.report_dir)))
    run_dom = _dom(tmp_path / "site" / defect_page, tmp_path)
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in run_dom and "<script>alert(1)" not in run_dom
    _screenshot(tmp_path / "site" / "index.html", tmp_path, "dashboard.png")


def test_plots_render(precision_run: Run, tmp_path: Path) -> None:
    """The precision plots and the performance section are SVG in the browser's DOM, within the first 4000
    pixels of the page (the screenshot shows them); the perf adapter's markup stays text."""
    from tests.conftest import PERF_ADAPTER

    page = precision_run.report_dir / "report.html"
    dom = _dom(page, tmp_path)
    assert 'data-js="ready"' in dom and 'id="precision-plots"' in dom and 'id="performance"' in dom
    plots = dom[dom.index('id="precision-plots"') : dom.index('id="failures"')]
    perf = dom[dom.index('id="performance"') : dom.index('id="checks"')]
    assert plots.count('<svg xmlns="http://www.w3.org/2000/svg" class="plot"') == 4
    assert perf.count('<svg xmlns="http://www.w3.org/2000/svg" class="plot"') == 4
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in perf and PERF_ADAPTER not in dom
    _screenshot(page, tmp_path, "report-plots.png", height=4000)

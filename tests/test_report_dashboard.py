"""The dashboard: report.json files of several runs merged into a static site (python -m reports.dashboard)."""

from __future__ import annotations

import html
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conformance_run import ROOT, Run


@pytest.fixture(scope="module")
def site(defect_run: Run, builtin_run: Run, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, list[str]]:
    """The numpy + torch run, the planted-defect run, a later rerun of it, and three files that are no report."""
    d = tmp_path_factory.mktemp("inputs")
    later = json.loads((defect_run.report_dir / "report.json").read_text())
    later["created"] = "2999-01-01T00:00:00+00:00"
    (d / "later.json").write_text(json.dumps(later))
    (d / "truncated.json").write_text('{"schema": "transformer-conformance/rep')
    (d / "foreign.json").write_text('{"name": "some other tool", "results": []}')
    old = json.loads((builtin_run.report_dir / "report.json").read_text())
    old["schema_version"] = 0
    (d / "old.json").write_text(json.dumps(old))
    out = tmp_path_factory.mktemp("site")
    files = [
        str(builtin_run.report_dir / "report.json"),
        str(d / "truncated.json"),
        str(defect_run.report_dir / "report.json"),
        str(d / "foreign.json"),
        str(d / "old.json"),
        str(d / "later.json"),
    ]
    proc = subprocess.run(
        [sys.executable, "-m", "transformer_conformance.reports.dashboard", "-o", str(out), *files],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr  # built, but some files were rejected
    return out, proc.stderr, files


def test_bad_files_named_one_line_each(site: tuple[Path, str, list[str]]) -> None:
    _, stderr, files = site
    lines = stderr.strip().splitlines()
    assert len(lines) == 3, stderr
    assert lines[0].startswith(f"error: {files[1]}: not JSON")
    assert lines[1].startswith(f"error: {files[3]}: not a conformance report")
    assert lines[2].startswith(f"error: {files[4]}: report schema version 0 is older")


def test_index_compares_adapters(site: tuple[Path, str, list[str]]) -> None:
    """One comparison column per adapter (numpy, torch and the defective ones), the failing cells marked."""
    out, _, _ = site
    index = (out / "index.html").read_text()
    matrix = index[index.index('id="matrix"') : index.index('id="history"')]
    for name in ("numpy", "torch", "z-loss-linear", "raises"):
        assert f">{name}</a>" in matrix
    assert matrix.count('class="cell s-failed"') >= 2 and 'class="cell s-passed"' in matrix
    assert "3 runs merged" in index
    assert index.count('<tr><td><a href="run-') == 3


def test_history_and_run_pages(site: tuple[Path, str, list[str]]) -> None:
    """History is drawn as inline SVG per adapter; each run has its own page linking back to the index."""
    out, _, _ = site
    index = (out / "index.html").read_text()
    history = index[index.index('id="history"') :]
    assert history.count("<svg") == 2 * 4  # two charts for each of the four adapters
    assert "<polyline" in history  # the planted adapter ran twice: a line
    pages = sorted(p.name for p in out.glob("run-*.html"))
    assert pages == ["run-001.html", "run-002.html", "run-003.html"]
    for p in pages:
        text = (out / p).read_text()
        assert 'href="index.html"' in text and 'id="matrix"' in text


def test_injected_markup_stays_text(site: tuple[Path, str, list[str]]) -> None:
    out, _, _ = site
    for page in [out / "index.html", *out.glob("run-*.html")]:
        text = page.read_text()
        assert "<script>alert(1)" not in text
        assert text.count("<script") == 1
    assert any(html.escape("<script>alert(1)</script>") in p.read_text() for p in out.glob("run-*.html"))
    assert not re.search(r"""(?:src|href)\s*=\s*["']?(?:https?:|//)""", (out / "index.html").read_text())


def test_nothing_to_merge(tmp_path: Path) -> None:
    bad = tmp_path / "x.json"
    bad.write_text("[]")
    proc = subprocess.run(
        [sys.executable, "-m", "transformer_conformance.reports.dashboard", "-o", str(tmp_path / "site"), str(bad)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 2
    assert proc.stderr.splitlines() == [
        f"error: {bad}: not a conformance report: the document is a JSON list, not an object",
        "error: no report to build the site from",
    ]
    assert not (tmp_path / "site").exists()

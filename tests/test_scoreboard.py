"""The scoreboard (reports/scoreboard.py, ``nox -s scoreboard``, .github/workflows/scoreboard.yml): one shard
per built-in adapter, merged into the site and the README's matrix, which is generated, never typed."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.conformance_run import Run
from tests.test_report_browser import CHROMIUM, _dom
from transformer_conformance.adapters.registry import BUILTIN
from transformer_conformance.reports import scoreboard

ROOT = Path(__file__).resolve().parent.parent
WORKFLOW = ROOT / ".github" / "workflows" / "scoreboard.yml"

#: the first major version of each action that runs on Node 24
NODE24 = {
    "actions/checkout": 5,
    "actions/setup-python": 6,
    "actions/upload-artifact": 6,
    "actions/download-artifact": 7,
    "actions/deploy-pages": 5,
}


def _readme_block() -> str:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert text.count(scoreboard.BEGIN) == 1 and text.count(scoreboard.END) == 1
    return text.split(scoreboard.BEGIN, 1)[1].split(scoreboard.END, 1)[0]


def test_the_shards_are_the_builtin_adapters() -> None:
    """The noxfile's shards and the workflow's matrix are BUILTIN of adapters/registry.py, in its order."""
    yaml = pytest.importorskip("yaml")
    pytest.importorskip("nox")
    # imported once per process (as tests/test_example_adapter.py does), not re-run: running the noxfile again
    # would register its sessions a second time, which nox warns will become an error
    names = pytest.importorskip("noxfile").builtin_adapters()
    assert names == list(BUILTIN)
    workflow = yaml.safe_load(WORKFLOW.read_text(encoding="utf-8"))
    assert workflow["jobs"]["shard"]["strategy"]["matrix"]["adapter"] == names
    assert workflow["permissions"] == {"contents": "read"}
    assert workflow["jobs"]["publish"]["permissions"] == {"pages": "write", "id-token": "write"}
    steps = [s for job in workflow["jobs"].values() for s in job["steps"]]
    used = {s["uses"].split("@")[0]: int(s["uses"].split("@v")[1]) for s in steps if "uses" in s}
    assert used.keys() == NODE24.keys() and all(used[a] >= v for a, v in NODE24.items()), used
    runs = [s.get("run", "") for s in steps]
    assert "nox -s scoreboard-shard -- ${{ matrix.adapter }}" in runs and "nox -s scoreboard-merge" in runs


def test_the_readme_matrix_is_the_generated_one() -> None:
    """Between its markers the README holds what ``block`` writes: the matrix, then one row per adapter with
    its verdict and versions, each a built-in adapter; every adapter with a known failure has its findings in
    docs/adapters.md."""
    block = _readme_block()
    assert block.startswith("\n\n| adapter | ")
    assert "| adapter | verdict | run on | profile | run time | versions |" in block
    rows = re.findall(r"^\| `([^`]+)` \|(.*)$", block, flags=re.M)
    assert rows and {name for name, _ in rows} <= set(BUILTIN)
    adapters_doc = (ROOT / "docs" / "adapters.md").read_text(encoding="utf-8")
    for name, cells in rows:
        if "known" in cells or "✗" in cells:
            assert f"`{name}`" in adapters_doc, name


def test_update_readme_replaces_only_the_block() -> None:
    text = f"intro\n{scoreboard.BEGIN}\nold\n{scoreboard.END}\noutro\n"
    assert scoreboard.update_readme(text, "NEW") == "intro\nNEW\noutro\n"
    with pytest.raises(ValueError, match="one pair of marker lines"):
        scoreboard.update_readme("no markers", "NEW")
    with pytest.raises(ValueError, match="one pair of marker lines"):
        scoreboard.update_readme(f"{scoreboard.END}\n{scoreboard.BEGIN}", "NEW")


@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed")
def test_merged_shards_make_the_site_and_the_readme(defect_run: Run, builtin_run: Run, tmp_path: Path) -> None:
    """Two shards (a conformant run and a failing one) merge into a site that opens in headless Chromium, a
    scoreboard.md, and a README block naming each adapter with its verdict and library versions."""
    readme = tmp_path / "README.md"
    readme.write_text(f"# x\n\n{scoreboard.BEGIN}\nstale\n{scoreboard.END}\n\nafter\n", encoding="utf-8")
    shards = [builtin_run.report_dir / "report.json", defect_run.report_dir / "report.json"]
    assert scoreboard.merge(shards, tmp_path / "site", readme) == []
    text = readme.read_text(encoding="utf-8")
    assert "stale" not in text and text.endswith(f"{scoreboard.END}\n\nafter\n")
    assert "| `numpy` | conformant | " in text and "| `torch` | conformant | " in text and "torch 2." in text
    assert "non-conformant" in text and "✗" in text
    assert (tmp_path / "site" / "scoreboard.md").read_text(encoding="utf-8").startswith("# Scoreboard\n\n| adapter |")
    dom = _dom(tmp_path / "site" / "index.html", tmp_path)
    assert 'data-js="ready"' in dom and '<table class="matrix">' in dom


def test_a_bad_shard_is_named_and_left_out(builtin_run: Run, tmp_path: Path) -> None:
    bad = tmp_path / "bad" / "report.json"
    bad.parent.mkdir()
    bad.write_text("{", encoding="utf-8")
    errors = scoreboard.merge([builtin_run.report_dir / "report.json", bad], tmp_path / "site")
    assert len(errors) == 1 and errors[0].startswith(f"{bad}: not JSON")
    assert "`numpy`" in (tmp_path / "site" / "scoreboard.md").read_text(encoding="utf-8")

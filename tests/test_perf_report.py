"""The performance report writer on a tiny made-up run: its files, the side-by-side ratios, and the
baseline comparison's regression flags. No timing is measured or asserted."""

from __future__ import annotations

import csv
import json
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

from benchmarks.perf.accounting import OPS
from benchmarks.perf.compare import compare
from benchmarks.perf.report import main, write
from benchmarks.perf.results import SCHEMA, SCHEMA_VERSION, add_ratios, make_result
from benchmarks.perf.timing import Stats

SIZES = ({"batch": 1, "seq": 128, "d": 4096}, {"batch": 1, "seq": 512, "d": 4096})
COPY, MATMUL = 10e9, 100e9


def fake_run(scale: float = 1.0, noise: float = 0.01) -> dict[str, Any]:
    """torch and a 'fused' adapter twice as fast, on RMSNorm and the SwiGLU MLP, forward and backward."""
    results = []
    for adapter, speed in (("torch", 1.0), ("fused", 2.0)):
        for op_name, dims_list in (
            ("rms_norm", SIZES),
            ("swiglu_mlp", ({"batch": 1, "seq": 16, "d": 64, "hidden": 192},)),
        ):
            for dims in dims_list:
                for grad in (False, True):
                    base = scale * 1e-3 * (1 + dims["seq"] / 128) * (3 if grad else 1) / speed
                    samples = [base * (1 + noise * k) for k in (-2, -1, 0, 1, 2)]
                    results.append(
                        make_result(
                            OPS[op_name], dims, "bfloat16", grad, adapter, "cpu", Stats.of(samples), COPY, MATMUL
                        )
                    )
    add_ratios(results)
    return {
        "schema": SCHEMA,
        "schema_version": SCHEMA_VERSION,
        "created": "2026-01-01T00:00:00+00:00",
        "duration_s": 1.0,
        "mode": "quick",
        "device": "cpu",
        "environment": {"python": "3.11", "torch": "2.x"},
        "ceilings": [
            {
                "kind": "copy",
                "device": "cpu",
                "dtype": None,
                "size": 2**28,
                "work": 2**29,
                "unit": "B/s",
                "rate": COPY,
                "median_rate": COPY,
                "time_s": Stats.of([0.05] * 5).to_dict(),
            }
        ],
        "adapters": [{"name": "torch", "environment": {"torch": "2.x"}}, {"name": "fused", "environment": {}}],
        "excluded": {"numpy": "no native() hook"},
        "results": results,
        "not_run": [
            {
                "op": "rope",
                "adapter": "fused",
                "dtype": "bfloat16",
                "size": "1×8×128×128",
                "pass": "forward",
                "reason": "x",
            }
        ],
    }


def test_writes_json_csv_markdown_and_one_plot_per_behaviour(tmp_path: Path) -> None:
    run = fake_run()
    paths = write(run, tmp_path)
    assert {p.name for p in tmp_path.iterdir()} == {
        "perf.json",
        "perf.csv",
        "perf.md",
        "perf_rms_norm.svg",
        "perf_swiglu_mlp.svg",
    }
    saved = json.loads(paths["json"].read_text())
    assert saved["schema"] == SCHEMA and len(saved["results"]) == len(run["results"]) == 12
    rows = list(csv.DictReader(paths["csv"].open()))
    assert len(rows) == 12 and {r["adapter"] for r in rows} == {"torch", "fused"}
    md = paths["md"].read_text()
    for text in ("## rms_norm", "## swiglu_mlp", "copy bandwidth", "×2.00", "![rms_norm", "## Not run", "`numpy`"):
        assert text in md, text
    svg = ET.fromstring((tmp_path / "perf_rms_norm.svg").read_text())
    assert len(svg.findall(".//{http://www.w3.org/2000/svg}polyline")) == 2 * 4  # two adapters × four panels


def test_ratios_to_torch_and_fractions_of_the_ceilings() -> None:
    run = fake_run()
    fused = [r for r in run["results"] if r["adapter"] == "fused"]
    assert all(abs(r["vs_torch"] - 2.0) < 1e-9 for r in fused)
    r = next(r for r in fused if r["op"] == "rms_norm" and r["pass"] == "forward" and r["size"] == "1×128×4096")
    assert r["ceiling"] == "copy bandwidth"
    assert abs(r["fraction"] - r["bytes"] / r["time_s"]["median"] / COPY) < 1e-12
    mlp = next(r for r in fused if r["op"] == "swiglu_mlp")
    assert mlp["ceiling"] == "matmul rate" and abs(mlp["fraction"] - mlp["flop_rate"] / MATMUL) < 1e-12


def test_compare_flags_changes_beyond_the_noise_only() -> None:
    base = fake_run()
    same = compare(fake_run(scale=1.02), base)  # 2 % slower: inside the 5 % floor
    assert same["regressions"] == same["improvements"] == 0 and len(same["rows"]) == 12
    slower = compare(fake_run(scale=1.5), base)
    assert slower["regressions"] == 12
    faster = compare(fake_run(scale=0.5), base)
    assert faster["improvements"] == 12 and faster["regressions"] == 0
    noisy = compare(fake_run(scale=1.5, noise=0.5), base)  # a change within this run's own spread is not flagged
    assert noisy["regressions"] == 0


def test_command_line_compares_a_saved_run_and_fails_on_regression(tmp_path: Path) -> None:
    (tmp_path / "base").mkdir()
    (tmp_path / "new").mkdir()
    write(fake_run(), tmp_path / "base")
    write(fake_run(scale=2.0), tmp_path / "new")
    argv = [str(tmp_path / "new" / "perf.json"), "--compare", str(tmp_path / "base" / "perf.json")]
    assert main(argv) == 0
    assert "**12 regression(s)**" in (tmp_path / "new" / "perf.md").read_text()
    assert main([*argv, "--fail-on-regression"]) == 1

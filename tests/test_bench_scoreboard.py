"""The scoreboard benchmark's table (benchmarks/bench_scoreboard.py): what it counts from a shard's report.json —
checks that ran, examples, calls, planned calls and programs built — and its before/after comparison."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from benchmarks.bench_scoreboard import figures, load, main, table


def _report(duration: float, examples: list[int], compiles: dict[str, int] | None = None) -> dict[str, Any]:
    statuses = ["passed", "known_failure", "unsupported", "skipped", "failed"]
    checks = [{"status": s, "examples": n} for s, n in zip(statuses, examples, strict=False)]
    op: dict[str, Any] = {"calls": 40, "planned_calls": 30, "shapes": {"float32": 3}}
    if compiles is not None:
        op["compiles"] = compiles
    return {
        "verdict": "known-failures",
        "duration_s": duration,
        "checks": checks,
        "reached": {"cand": {"rms_norm": op, "rope": {"calls": 2}}},
    }


def test_a_shard_counts_the_checks_that_ran_and_what_they_drew() -> None:
    s = figures("cand", _report(12.5, [10, 7, 0, 0, 3], {"float32": 4, "bfloat16": 2}), None)
    assert (s.checks, s.examples, s.calls, s.planned_calls, s.programs) == (3, 20, 42, 30, 6)
    assert s.wall_s is None and s.duration_s == 12.5


def test_timed_shards_show_wall_time_and_the_baseline_sits_beside(tmp_path: Path) -> None:
    now, before = tmp_path / "now", tmp_path / "before"
    for folder, duration in ((now, 20.0), (before, 300.0)):
        (folder / "jax").mkdir(parents=True)
        (folder / "jax" / "report.json").write_text(json.dumps(_report(duration, [5, 5])))
    (now / "bench.json").write_text(json.dumps({"jax": {"wall_s": 31.0, "cold": True}}))
    lines = table(load(now), load(before))
    assert lines[0].startswith("| shard | time before | time after | checks run before | checks run after |")
    assert lines[2].startswith("| `jax` | 300 s | 31 s cold (20 s in checks) | 2 | 2 | 10 | 10 |"), lines[2]
    out = tmp_path / "bench.md"
    main([str(now), "--baseline", str(before), "--out", str(out)])
    assert out.read_text().splitlines() == lines

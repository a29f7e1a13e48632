"""How long each scoreboard shard takes, and how much it checked (a benchmark, never a test).

Reads each shard's report.json under a scoreboard folder (default reports/scoreboard/) and, where
``nox -s scoreboard-bench`` timed the shards, that folder's bench.json; prints one Markdown row per shard: the
wall time of its run (cold or warm compilation caches), the run's own duration, the checks run (unsupported and
skipped ones left out), the examples drawn, the candidate's calls, how many of them a shape plan chose, and the
programs the candidate reported building. ``--baseline DIR`` adds the same figures from the shards under another
folder (an earlier tree's), so a change's cost and its loss of power, if any, read side by side:

    nox -s scoreboard-bench -- --adapter jax,flax
    python benchmarks/bench_scoreboard.py reports/scoreboard --baseline old/scoreboard --out bench.md

Only the standard library: it reads JSON and imports nothing of the suite.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: statuses of a check that ran examples (unsupported and skipped checks did not)
RAN = frozenset({"passed", "failed", "error", "known_failure", "unexpectedly_passed"})


@dataclass(frozen=True)
class Shard:
    name: str
    verdict: str
    duration_s: float
    checks: int
    examples: int
    calls: int
    planned_calls: int
    programs: int
    wall_s: float | None = None
    cold: bool | None = None


def figures(name: str, report: dict[str, Any], timed: dict[str, Any] | None) -> Shard:
    """One shard's figures from its report.json (and its entry of bench.json, if it was timed)."""
    ops = [op for per_adapter in (report.get("reached") or {}).values() for op in per_adapter.values()]
    return Shard(
        name=name,
        verdict=str(report.get("verdict", "")),
        duration_s=float(report.get("duration_s") or 0.0),
        checks=sum(c["status"] in RAN for c in report["checks"]),
        examples=sum(int(c.get("examples") or 0) for c in report["checks"]),
        calls=sum(int(op.get("calls") or 0) for op in ops),
        planned_calls=sum(int(op.get("planned_calls") or 0) for op in ops),
        programs=sum(sum((op.get("compiles") or {}).values()) for op in ops),
        wall_s=None if timed is None else float(timed["wall_s"]),
        cold=None if timed is None else bool(timed["cold"]),
    )


def load(folder: Path) -> dict[str, Shard]:
    """The shards under ``folder`` (``folder/NAME/report.json``), with bench.json's wall times where present."""
    bench_file = folder / "bench.json"
    timed: dict[str, Any] = json.loads(bench_file.read_text()) if bench_file.exists() else {}
    out = {}
    for path in sorted(folder.glob("*/report.json")):
        name = path.parent.name
        out[name] = figures(name, json.loads(path.read_text()), timed.get(name))
    return out


def _time(s: Shard | None) -> str:
    if s is None:
        return "–"
    run = f"{s.duration_s:.0f} s"
    if s.wall_s is None:
        return run
    return f"{s.wall_s:.0f} s {'cold' if s.cold else 'warm'} ({run} in checks)"


def _count(s: Shard | None, field: str) -> str:
    return "–" if s is None else f"{getattr(s, field):,}"


def table(now: dict[str, Shard], before: dict[str, Shard] | None = None) -> list[str]:
    """The Markdown table: one row per shard of ``now`` (and of ``before`` where only it has the shard)."""
    fields = [("checks", "checks run"), ("examples", "examples"), ("calls", "calls"), ("planned_calls", "planned")]
    fields.append(("programs", "programs built"))
    if before is None:
        head = ["shard", "verdict", "time", *(label for _, label in fields)]
        rows = [[f"`{s.name}`", s.verdict, _time(s), *(_count(s, f) for f, _ in fields)] for s in now.values()]
    else:
        head = ["shard", "time before", "time after"]
        for _, label in fields:
            head += [f"{label} before", f"{label} after"]
        rows = []
        for name in sorted(set(now) | set(before), key=lambda n: (n not in now, n)):
            a, b = before.get(name), now.get(name)
            row = [f"`{name}`", _time(a), _time(b)]
            for f, _ in fields:
                row += [_count(a, f), _count(b, f)]
            rows.append(row)
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    total = sum(s.wall_s if s.wall_s is not None else s.duration_s for s in now.values())
    lines += ["", f"{len(now)} shards, {total / 60:.1f} min in all (wall time where timed, else the runs' own)."]
    return lines


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("folder", nargs="?", default="reports/scoreboard", type=Path)
    parser.add_argument("--baseline", type=Path, help="a scoreboard folder of an earlier run, to compare with")
    parser.add_argument("--out", type=Path, help="also write the table to this Markdown file")
    args = parser.parse_args(argv)
    now = load(args.folder)
    if not now:
        parser.error(f"no shard report under {args.folder}/ (run nox -s scoreboard-shard -- NAME first)")
    lines = table(now, load(args.baseline) if args.baseline else None)
    text = "\n".join(lines) + "\n"
    print(text, end="")
    if args.out:
        args.out.write_text(text)


if __name__ == "__main__":
    main()

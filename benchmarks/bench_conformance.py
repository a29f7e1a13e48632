"""How long the CI-profile conformance run takes (a benchmark, never a test).

Runs ``python -m transformer_conformance.conformance`` in a subprocess for each adapter given (default: torch),
``--repeat`` times, and prints wall time (median and spread), the per-behaviour check time from the run's
report, and the sizes of report.md, of the job summary made of it and of the terminal output. A passing and
a fully failing candidate of the same size compare how much a regression slows the gate:

    python benchmarks/bench_conformance.py --adapter torch --repeat 3 --workers 2
    python benchmarks/bench_conformance.py --adapter numpy --adapter tests.faulty:OnePercentOff --workers 2
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

from transformer_conformance.reports.writer import step_summary

ROOT = Path(__file__).resolve().parent.parent


def run_once(adapter: str, workers: str, profile: str) -> tuple[float, dict[str, float], int, dict[str, int]]:
    with tempfile.TemporaryDirectory() as tmp:
        start = time.perf_counter()
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "transformer_conformance.conformance",
                "-q",
                f"--adapter={adapter}",
                f"--hypothesis-profile={profile}",
                "--report-dir",
                tmp,
                "-n",
                workers,
            ],
            cwd=ROOT,
            capture_output=True,
            text=True,
        )
        wall = time.perf_counter() - start
        report = json.loads((Path(tmp) / "report.json").read_text())
        md = (Path(tmp) / "report.md").read_text()
    per: dict[str, float] = defaultdict(float)
    for c in report["checks"]:
        per[c["behaviour"]] += c["duration_s"]
    sizes = {
        "report.md": len(md.encode()),
        "step summary": len(step_summary(md).encode()),
        "terminal": len(proc.stdout.encode()) + len(proc.stderr.encode()),
    }
    return wall, dict(per), proc.returncode, sizes


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--adapter", action="append", default=[], help="adapter(s) to time (default: torch)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--workers", default="auto", help="pytest-xdist workers: a number, auto, or 0 for none")
    ap.add_argument("--profile", default="ci")
    args = ap.parse_args()
    for adapter in args.adapter or ["torch"]:
        walls, pers = [], []
        for i in range(args.repeat):
            wall, per, rc, sizes = run_once(adapter, args.workers, args.profile)
            walls.append(wall)
            pers.append(per)
            sized = ", ".join(f"{k} {v / 1024:.0f} KiB" for k, v in sizes.items())
            print(f"{adapter} run {i + 1}/{args.repeat}: {wall:.1f} s (exit {rc}; {sized})", flush=True)
        print(
            f"\n{adapter}, profile {args.profile}, workers {args.workers}: median {statistics.median(walls):.1f} s, "
            f"min {min(walls):.1f} s, max {max(walls):.1f} s over {len(walls)} runs"
        )
        print("check time per behaviour (median, summed over workers):")
        for b in sorted(pers[0]):
            print(f"  {b:15s} {statistics.median(p.get(b, 0.0) for p in pers):6.1f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

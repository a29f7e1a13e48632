"""No false alarms: the correct built-in adapters pass under many different Hypothesis seeds.

    python mutants/seeds.py --seeds 20 [--first 0] [--workers 2] [--adapter NAME] [--behaviour NAME]
                            [--out reports/out/false-alarms]

For each seed K runs the whole conformance suite against every built-in adapter with
``--hypothesis-profile=ci-random --hypothesis-seed=K`` (the default profile's size, but random, not
derandomised: each seed draws other examples), prints one line per seed and writes ``false-alarms.json``
into ``--out``. A correct adapter failing any check under any seed is a false alarm of the suite; exits 1
if there was one.

The built-in expectation files (``expectations/*.toml``) that name an adapter of the run are passed with
``--expectations``: a documented defect of a library (docs/adapters.md) is a known failure, not a false
alarm, while any failure no entry lists still is (``--no-expectations`` counts every failure).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from transformer_conformance.adapters.registry import BUILTIN, expand  # noqa: E402
from transformer_conformance.conformance.runner.expectations import load  # noqa: E402
from transformer_conformance.reports.writer import atomic_write  # noqa: E402

EXPECTATIONS = ROOT / "expectations"


def expectation_files(adapters: list[str]) -> list[Path]:
    """The built-in expectation files with an entry for one of ``adapters`` (each a name or a comma-separated list;
    a group, ``hf-families``, stands for its members)."""
    names = set(expand(adapters))
    return [p for p in sorted(EXPECTATIONS.glob("*.toml")) if any(e.adapter in names for e in load(p))]


def run_seed(
    seed: int,
    adapters: list[str],
    out: Path,
    workers: str,
    profile: str,
    expect: list[Path] | None = None,
    behaviours: list[str] | None = None,
) -> dict[str, Any]:
    report_dir = out / "runs" / f"seed-{seed}"
    cmd = [
        sys.executable,
        "-m",
        "transformer_conformance.conformance",
        "-q",
        f"--adapter={','.join(adapters)}",
        f"--hypothesis-profile={profile}",
        f"--hypothesis-seed={seed}",
        "--report-dir",
        str(report_dir),
        "-n",
        workers,
        *(f"--expectations={p}" for p in expect or []),
        *([f"--behaviour={','.join(behaviours)}"] if behaviours else []),
    ]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    wall = round(time.perf_counter() - t0, 1)
    path = report_dir / "report.json"
    if not path.exists():
        return {
            "seed": seed,
            "exit_status": proc.returncode,
            "verdict": "no report",
            "duration_s": wall,
            "alarms": [],
            "output_tail": (proc.stdout + proc.stderr)[-2000:],
        }
    report = json.loads(path.read_text())
    alarms = [
        {k: c.get(k) for k in ("adapter", "check", "dtype", "status", "message", "counterexample")}
        for c in report["checks"]
        if c["status"] in ("failed", "error")
    ]
    return {
        "seed": seed,
        "exit_status": proc.returncode,
        "verdict": report["verdict"],
        "summary": report["summary"],
        "duration_s": wall,
        "alarms": alarms,
        "known_failures": [
            {k: c.get(k) for k in ("adapter", "check", "dtype")}
            for c in report["checks"]
            if c["status"] == "known_failure"
        ],
        "unexpectedly_passed": [
            {k: c.get(k) for k in ("adapter", "check", "dtype")}
            for c in report["checks"]
            if c["status"] == "unexpectedly_passed"
        ],
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, default=20, help="how many seeds (default 20)")
    ap.add_argument("--first", type=int, default=0, help="the first seed (default 0)")
    ap.add_argument(
        "--adapter", action="append", default=[], help="adapters, repeated or comma-separated (default: every built-in)"
    )
    ap.add_argument(
        "--behaviour", action="append", default=[], help="only these behaviours' checks (default: every behaviour)"
    )
    ap.add_argument("--workers", default="2", help="pytest-xdist workers: a number, auto, or 0 for none")
    ap.add_argument(
        "--profile", default="ci-random", help="Hypothesis profile (default: ci-random, the ci profile randomised)"
    )
    ap.add_argument("--out", type=Path, default=ROOT / "reports" / "out" / "false-alarms")
    ap.add_argument(
        "--no-expectations", action="store_true", help="do not pass expectations/*.toml: every failure counts"
    )
    args = ap.parse_args(argv)
    adapters = args.adapter or sorted(BUILTIN)
    args.out.mkdir(parents=True, exist_ok=True)
    expect = [] if args.no_expectations else expectation_files(adapters)

    runs = []
    for seed in range(args.first, args.first + args.seeds):
        r = run_seed(seed, adapters, args.out, args.workers, args.profile, expect, args.behaviour)
        runs.append(r)
        passed = r.get("summary", {}).get("passed", 0)
        where = "; ".join(f"{a['adapter']} {a['check']} [{a['dtype']}] {a['status']}" for a in r["alarms"][:5])
        print(
            f"seed {seed}: {r['verdict']} (exit {r['exit_status']}), {passed} passed, "
            f"{len(r['alarms'])} false alarm(s), {len(r.get('known_failures', []))} known failure(s), "
            f"{r['duration_s']:.0f} s{': ' + where if where else ''}",
            flush=True,
        )
    clean = all(r["verdict"] in ("conformant", "known-failures") and r["exit_status"] == 0 for r in runs)
    result = {
        "schema": "transformer-conformance/false-alarms",
        "schema_version": 1,
        "adapters": adapters,
        "profile": args.profile,
        "behaviours": args.behaviour or "all",
        "expectations": [str(p.relative_to(ROOT)) for p in expect],
        "seeds": [r["seed"] for r in runs],
        "clean": clean,
        "runs": runs,
    }
    atomic_write(args.out / "false-alarms.json", json.dumps(result, indent=2) + "\n")
    print(f"{'no false alarm' if clean else 'FALSE ALARMS'} over {len(runs)} seed(s); {args.out / 'false-alarms.json'}")
    return 0 if clean else 1


if __name__ == "__main__":
    raise SystemExit(main())

"""Run the conformance suite against every mutant of the catalogue and report which ones it kills.

    python mutants/run.py [--out reports/out/mutants] [--workers 2] [--only NAME ...] [--seeds N [--first K]]

One pytest process per behaviour: its module of checks (``--behaviour`` selects that behaviour's checks
only), every mutant of that behaviour as an ``--adapter``, the ``ci`` Hypothesis profile's examples
(``ci-noshrink``: the same derandomised examples and verdicts, without minimising each counterexample,
which would take most of the time; ``--profile ci`` shrinks). Writes
``mutants.json`` and ``mutants.md`` into ``--out``; each mutant is *killed* (some check of its behaviour
failed: the check(s), the dtype, and how many examples Hypothesis needed to find the first failure) or
*survived*. Exits 1 if any mutant survived or a check errored, 0 when all are killed.

``--seeds N`` asks whether the kills are robust rather than lucky: the whole run is repeated under N random
samples of the same size (``ci-random-noshrink`` with ``--hypothesis-seed`` K, K+1, …; ``--first K``,
default 0), and a mutant counts as killed only if every seed kills it. The table then says, per mutant, how
many seeds killed it and the most examples any seed needed.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from mutants.catalogue import BEHAVIOURS, CATALOGUE, Mutant  # noqa: E402
from transformer_conformance.reports.writer import atomic_write  # noqa: E402

SCHEMA = "transformer-conformance/mutants"
SCHEMA_VERSION = 1


def run_behaviour(
    behaviour: str, mutants: list[Mutant], out: Path, workers: str, profile: str, seed: int | None = None
) -> dict[str, Any]:
    """One pytest process: the behaviour's checks against all of its mutants. Returns its report.json."""
    report_dir = out / "runs" / (behaviour if seed is None else f"seed-{seed}-{behaviour}")
    cmd = [
        sys.executable,
        "-m",
        "transformer_conformance.conformance",
        BEHAVIOURS[behaviour],
        "-q",
        f"--behaviour={behaviour}",
        f"--adapter={','.join(m.spec for m in mutants)}",
        f"--hypothesis-profile={profile}",
        *([] if seed is None else [f"--hypothesis-seed={seed}"]),
        "--report-dir",
        str(report_dir),
        "-n",
        workers,
    ]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    path = report_dir / "report.json"
    if proc.returncode not in (0, 1) or not path.exists():
        sys.stderr.write(proc.stdout[-4000:] + proc.stderr[-4000:])
        raise SystemExit(f"the run for {behaviour} did not complete (exit {proc.returncode}): {' '.join(cmd)}")
    report: dict[str, Any] = json.loads(path.read_text())
    return report


def verdict(m: Mutant, checks: list[dict[str, Any]]) -> dict[str, Any]:
    """What happened to one mutant: the checks that failed, and how fast the first one failed."""
    mine = [c for c in checks if c["adapter"] == m.name]
    failed = [c for c in mine if c["status"] == "failed"]
    errors = [c for c in mine if c["status"] == "error"]
    killed_by = [
        {
            "check": c["check"],
            "dtype": c["dtype"],
            # the 1-based index of the first failing example; checks outside Hypothesis run one example
            "examples_to_failure": c.get("first_failure", c.get("examples")),
            "message": (c.get("message") or "").splitlines()[0][:300],
        }
        for c in sorted(failed, key=lambda c: (c["check"], c["dtype"] or ""))
    ]
    counts = [k["examples_to_failure"] for k in killed_by if k["examples_to_failure"] is not None]
    status = "killed" if failed else ("error" if errors else "survived")
    return {
        "name": m.name,
        "adapter": m.spec,
        "behaviour": m.behaviour,
        "defect": m.defect,
        "caught_by": m.caught_by,
        "status": status,
        "caught_as_expected": any(k["check"] == m.caught_by for k in killed_by),
        "checks_run": len(mine),
        "killed_by": killed_by,
        "examples_to_kill": min(counts) if counts else None,
        "errors": [{"check": c["check"], "dtype": c["dtype"], "message": c.get("message", "")} for c in errors],
    }


def _checks_cell(r: dict[str, Any]) -> str:
    by_check: dict[str, list[str]] = {}
    for k in r["killed_by"]:
        by_check.setdefault(k["check"], []).append(f"{k['dtype'] or '—'} ({k['examples_to_failure']})")
    return "; ".join(f"`{c}` {', '.join(d)}" for c, d in by_check.items()) or "—"


def _seeds_cells(r: dict[str, Any]) -> str:
    s = r["seeds"]
    spared = f" (not {', '.join(map(str, s['survived']))})" if s["survived"] else ""
    most = s["max_examples_to_kill"]
    return f" {len(s['killed'])}/{len(s['run'])}{spared} | {most if most is not None else '—'} |"


def render_markdown(result: dict[str, Any]) -> str:
    s = result["summary"]
    lines = [
        "# Mutant run",
        "",
        f"**{s['killed']} of {s['total']} mutants killed**, {s['survived']} survived, {s['error']} with errors; "
        f"median examples to kill {s['median_examples_to_kill']}. Hypothesis profile `{result['profile']}`, "
        f"{result['duration_s']:.0f} s wall time ({result['workers']} workers).",
        "",
        *(
            [
                f"Under {len(result['seeds'])} random seeds ({', '.join(map(str, result['seeds']))}): a mutant is "
                "killed only if every seed killed it; *seeds* says how many did, *most examples* the most "
                "examples one of them needed. The checks listed are the first seed's.",
                "",
            ]
            if result.get("seeds")
            else []
        ),
        "Examples to kill: the index of the first failing example of the quickest check (Hypothesis's "
        "generation order; a check outside Hypothesis counts 1). Each killing check is listed with its dtypes "
        "and, in brackets, the examples it needed.",
        "",
        "| mutant | behaviour | defect | verdict | examples to kill | killed by |"
        + (" seeds | most examples |" if result.get("seeds") else ""),
        "|---|---|---|---|---|---|" + ("---|---|" if result.get("seeds") else ""),
    ]
    for r in result["mutants"]:
        verdict_cell = r["status"] if r["status"] != "killed" else "killed"
        if r["status"] == "killed" and not r["caught_as_expected"]:
            verdict_cell += f" (not by `{r['caught_by']}`)"
        if r["status"] != "killed":
            verdict_cell = f"**{verdict_cell.upper()}**"
        lines.append(
            f"| `{r['name']}` | {r['behaviour']} | {r['defect'].replace('|', '∣')} | {verdict_cell} | "
            f"{r['examples_to_kill'] if r['examples_to_kill'] is not None else '—'} | {_checks_cell(r)} |"
            + (_seeds_cells(r) if "seeds" in r else "")
        )
    idle = s.get("checks_that_caught_none", [])
    if idle:
        lines += [
            "",
            f"Checks that ran and failed no mutant ({len(idle)} of {s['checks_run']}): not yet shown to catch a "
            "planted defect. " + ", ".join(f"`{c}`" for c in idle) + ".",
        ]
    lines += ["", "Wall time per behaviour:", ""]
    lines += [f"* {b}: {t:.0f} s" for b, t in result["per_behaviour_s"].items()]
    return "\n".join(lines) + "\n"


def combine_seeds(per_seed: dict[int, list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """One verdict per mutant over several seeds: killed only if every seed killed it. The first seed's
    killing checks are kept; ``seeds`` says which seeds killed it and the most examples one needed."""
    seeds = sorted(per_seed)
    combined = []
    for i, first in enumerate(per_seed[seeds[0]]):
        runs = {k: per_seed[k][i] for k in seeds}
        killed = [k for k in seeds if runs[k]["status"] == "killed"]
        spared = [k for k in seeds if runs[k]["status"] != "killed"]
        needed = [runs[k]["examples_to_kill"] for k in killed if runs[k]["examples_to_kill"] is not None]
        r = dict(first)
        r["status"] = "killed" if not spared else ("error" if any(runs[k]["errors"] for k in spared) else "survived")
        r["errors"] = [e | {"seed": k} for k in seeds for e in runs[k]["errors"]]
        r["seeds"] = {
            "run": seeds,
            "killed": killed,
            "survived": spared,
            "max_examples_to_kill": max(needed) if needed else None,
        }
        combined.append(r)
    return combined


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=ROOT / "reports" / "out" / "mutants")
    ap.add_argument("--workers", default="2", help="pytest-xdist workers per run: a number, auto, or 0 for none")
    ap.add_argument(
        "--profile",
        default=None,
        help="Hypothesis profile (default: ci-noshrink, the ci profile's examples without shrinking; ci shrinks; "
        "with --seeds, ci-random-noshrink)",
    )
    ap.add_argument("--only", action="append", default=[], metavar="NAME", help="run only these mutants")
    ap.add_argument(
        "--seeds", type=int, default=0, help="repeat the run under N random seeds; killed means killed under each"
    )
    ap.add_argument("--first", type=int, default=0, help="the first seed of --seeds (default 0)")
    args = ap.parse_args(argv)
    if args.profile is None:
        args.profile = "ci-random-noshrink" if args.seeds else "ci-noshrink"

    chosen = [m for m in CATALOGUE if not args.only or m.name in args.only or m.attribute in args.only]
    unknown = set(args.only) - {m.name for m in chosen} - {m.attribute for m in chosen}
    if unknown:
        ap.error(f"unknown mutant(s): {', '.join(sorted(unknown))}")
    args.out.mkdir(parents=True, exist_ok=True)

    started = time.perf_counter()
    per_behaviour: dict[str, float] = {}
    seeds: list[int | None] = list(range(args.first, args.first + args.seeds)) if args.seeds else [None]
    per_seed: dict[int, list[dict[str, Any]]] = {}
    results: list[dict[str, Any]] = []
    ran: set[str] = set()  # the checks that ran against some mutant
    for seed in seeds:
        checks: list[dict[str, Any]] = []
        for behaviour in BEHAVIOURS:
            group = [m for m in chosen if m.behaviour == behaviour]
            if not group:
                continue
            t0 = time.perf_counter()
            checks += run_behaviour(behaviour, group, args.out, args.workers, args.profile, seed)["checks"]
            took = time.perf_counter() - t0
            per_behaviour[behaviour] = round(per_behaviour.get(behaviour, 0.0) + took, 1)
            label = "" if seed is None else f"seed {seed}, "
            print(f"{label}{behaviour}: {len(group)} mutants, {took:.0f} s", flush=True)
        results = [verdict(m, checks) for m in chosen]
        known_checks = {c["check"] for c in checks}
        ran.update(c["check"] for c in checks if c["status"] in ("passed", "failed"))
        for r in results:
            if r["caught_by"] not in known_checks:
                r["errors"].append({"check": r["caught_by"], "dtype": None, "message": "no such check ran"})
        if seed is not None:
            per_seed[seed] = results
            spared = [r["name"] for r in results if r["status"] != "killed"]
            print(f"seed {seed}: {len(results) - len(spared)}/{len(results)} killed"
                  + (f"; not killed: {', '.join(spared)}" if spared else ""), flush=True)
    if per_seed:
        results = combine_seeds(per_seed)
    counts = [r["examples_to_kill"] for r in results if r["examples_to_kill"] is not None]
    summary = {
        "total": len(results),
        "killed": sum(r["status"] == "killed" for r in results),
        "survived": sum(r["status"] == "survived" for r in results),
        "error": sum(r["status"] == "error" for r in results),
        "median_examples_to_kill": statistics.median(counts) if counts else None,
        "not_caught_by_expected_check": [
            r["name"] for r in results if r["status"] == "killed" and not r["caught_as_expected"]
        ],
        # a check that ran and failed no mutant is not yet shown to catch anything (docs/mutants.md)
        "checks_run": len(ran),
        "checks_that_caught_none": sorted(ran - {k["check"] for r in results for k in r["killed_by"]}),
    }
    result = {
        "schema": SCHEMA,
        "schema_version": SCHEMA_VERSION,
        "profile": args.profile,
        "seeds": [k for k in seeds if k is not None],
        "workers": args.workers,
        "duration_s": round(time.perf_counter() - started, 1),
        "per_behaviour_s": per_behaviour,
        "summary": summary,
        "mutants": results,
    }
    atomic_write(args.out / "mutants.json", json.dumps(result, indent=2) + "\n")
    atomic_write(args.out / "mutants.md", render_markdown(result))
    print(
        f"{summary['killed']}/{summary['total']} killed, {summary['survived']} survived, {summary['error']} errors; "
        f"median examples to kill {summary['median_examples_to_kill']}; {result['duration_s']:.0f} s"
        + (f" ({len(per_seed)} seeds, killed means killed under each)" if per_seed else "")
    )
    for r in results:
        if r["status"] != "killed":
            under = f" (spared by seed(s) {', '.join(map(str, r['seeds']['survived']))})" if "seeds" in r else ""
            print(f"  {r['status'].upper()}: {r['name']} ({r['behaviour']}): {r['defect']}{under}")
    print(f"  {args.out / 'mutants.md'}")
    return 0 if summary["killed"] == summary["total"] else 1


if __name__ == "__main__":
    raise SystemExit(main())

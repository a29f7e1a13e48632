"""Run the conformance suite against every mutant of the catalogue and report which ones it kills.

    python mutants/run.py [--out reports/out/mutants] [--workers 2] [--only NAME ...]

One pytest process per behaviour: its module of checks (``--behaviour`` selects that behaviour's checks
only), every mutant of that behaviour as an ``--adapter``, the ``ci`` Hypothesis profile's examples
(``ci-noshrink``: the same derandomised examples and verdicts, without minimising each counterexample,
which would take most of the time; ``--profile ci`` shrinks). Writes
``mutants.json`` and ``mutants.md`` into ``--out``; each mutant is *killed* (some check of its behaviour
failed: the check(s), the dtype, and how many examples Hypothesis needed to find the first failure) or
*survived*. Exits 1 if any mutant survived or a check errored, 0 when all are killed.
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


def run_behaviour(behaviour: str, mutants: list[Mutant], out: Path, workers: str, profile: str) -> dict[str, Any]:
    """One pytest process: the behaviour's checks against all of its mutants. Returns its report.json."""
    report_dir = out / "runs" / behaviour
    cmd = [
        sys.executable,
        "-m",
        "transformer_conformance.conformance",
        BEHAVIOURS[behaviour],
        "-q",
        f"--behaviour={behaviour}",
        f"--adapter={','.join(m.spec for m in mutants)}",
        f"--hypothesis-profile={profile}",
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


def render_markdown(result: dict[str, Any]) -> str:
    s = result["summary"]
    lines = [
        "# Mutant run",
        "",
        f"**{s['killed']} of {s['total']} mutants killed**, {s['survived']} survived, {s['error']} with errors; "
        f"median examples to kill {s['median_examples_to_kill']}. Hypothesis profile `{result['profile']}`, "
        f"{result['duration_s']:.0f} s wall time ({result['workers']} workers).",
        "",
        "Examples to kill: the index of the first failing example of the quickest check (Hypothesis's "
        "generation order; a check outside Hypothesis counts 1). Each killing check is listed with its dtypes "
        "and, in brackets, the examples it needed.",
        "",
        "| mutant | behaviour | defect | verdict | examples to kill | killed by |",
        "|---|---|---|---|---|---|",
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
        )
    lines += ["", "Wall time per behaviour:", ""]
    lines += [f"* {b}: {t:.0f} s" for b, t in result["per_behaviour_s"].items()]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=ROOT / "reports" / "out" / "mutants")
    ap.add_argument("--workers", default="2", help="pytest-xdist workers per run: a number, auto, or 0 for none")
    ap.add_argument(
        "--profile",
        default="ci-noshrink",
        help="Hypothesis profile (default: ci-noshrink, the ci profile's examples without shrinking; ci shrinks)",
    )
    ap.add_argument("--only", action="append", default=[], metavar="NAME", help="run only these mutants")
    args = ap.parse_args(argv)

    chosen = [m for m in CATALOGUE if not args.only or m.name in args.only or m.attribute in args.only]
    unknown = set(args.only) - {m.name for m in chosen} - {m.attribute for m in chosen}
    if unknown:
        ap.error(f"unknown mutant(s): {', '.join(sorted(unknown))}")
    args.out.mkdir(parents=True, exist_ok=True)

    started = time.perf_counter()
    per_behaviour: dict[str, float] = {}
    checks: list[dict[str, Any]] = []
    for behaviour in BEHAVIOURS:
        group = [m for m in chosen if m.behaviour == behaviour]
        if not group:
            continue
        t0 = time.perf_counter()
        checks += run_behaviour(behaviour, group, args.out, args.workers, args.profile)["checks"]
        per_behaviour[behaviour] = round(time.perf_counter() - t0, 1)
        print(f"{behaviour}: {len(group)} mutants, {per_behaviour[behaviour]:.0f} s", flush=True)

    results = [verdict(m, checks) for m in chosen]
    known_checks = {c["check"] for c in checks}
    for r in results:
        if r["caught_by"] not in known_checks:
            r["errors"].append({"check": r["caught_by"], "dtype": None, "message": "no such check ran"})
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
    }
    result = {
        "schema": SCHEMA,
        "schema_version": SCHEMA_VERSION,
        "profile": args.profile,
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
    )
    for r in results:
        if r["status"] != "killed":
            print(f"  {r['status'].upper()}: {r['name']} ({r['behaviour']}): {r['defect']}")
    print(f"  {args.out / 'mutants.md'}")
    return 0 if summary["killed"] == summary["total"] else 1


if __name__ == "__main__":
    raise SystemExit(main())

"""The release matrix's table: per library release and adapter, the verdict of its conformance run.

``nox -s release-matrix`` runs each entry of adapters/releases.py in its own environment and writes, under
``reports/releases/``, one folder per release (``RELEASE/ADAPTER/report.json``) and ``runs.json`` (each run's
exit status, wall time and, where the adapter refused before checking anything, its one-line reason). This module
reads them and writes ``releases.md``:

    python -m transformer_conformance.reports.releases reports/releases --out reports/releases/releases.md

Only the standard library: it reads JSON and imports nothing else of the suite.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: the report's summary counts, in the table's order, with their column headings
COUNTS = (
    ("passed", "passed"),
    ("known_failure", "known failures"),
    ("unexpectedly_passed", "unexpectedly passed"),
    ("failed", "failed"),
    ("error", "errors"),
    ("unsupported", "unsupported"),
)


@dataclass(frozen=True)
class Run:
    release: str  # the matrix entry: "liger-kernel-0.4.0"
    adapter: str
    exit_status: int | None
    wall_s: float | None
    verdict: str  # the report's verdict; "refused" when the adapter refused before checking; else "no report"
    counts: dict[str, int]
    libraries: dict[str, str]
    reason: str = ""  # the refusal's line


def load(folder: Path) -> list[Run]:
    """Every run under ``folder``: those with a report.json, and those runs.json records without one."""
    runs_file = folder / "runs.json"
    recorded: dict[str, dict[str, Any]] = json.loads(runs_file.read_text()) if runs_file.exists() else {}
    out: list[Run] = []
    seen: set[tuple[str, str]] = set()
    for path in sorted(folder.glob("*/*/report.json")):
        release, adapter = path.parent.parent.name, path.parent.name
        report = json.loads(path.read_text())
        rec = recorded.get(release, {}).get(adapter, {})
        out.append(
            Run(
                release=release,
                adapter=adapter,
                exit_status=rec.get("exit", report.get("exit_status")),
                wall_s=rec.get("wall_s"),
                verdict=str(report.get("verdict", "")),
                counts={k: int(report.get("summary", {}).get(k, 0)) for k, _ in COUNTS},
                libraries=dict(report.get("environment", {}).get("libraries", {})),
            )
        )
        seen.add((release, adapter))
    for release, adapters in sorted(recorded.items()):
        for adapter, rec in sorted(adapters.items()):
            if (release, adapter) not in seen:
                reason = rec.get("reason", "")
                verdict = "refused" if reason else f"no report (exit {rec.get('exit')})"
                out.append(Run(release, adapter, rec.get("exit"), rec.get("wall_s"), verdict, {}, {}, reason))
    return sorted(out, key=lambda r: (r.release, r.adapter))


def _libraries(run: Run) -> str:
    """The installed releases the run names, less the suite's own tools."""
    skip = {"numpy", "ml_dtypes", "pytest", "pytest-xdist", "hypothesis"}
    return ", ".join(f"{k} {v}" for k, v in run.libraries.items() if k not in skip)


def table(runs: list[Run]) -> str:
    """The Markdown table, one row per run."""
    head = ["release", "adapter", "verdict", *(h for _, h in COUNTS), "time", "installed"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in runs:
        counts = [str(r.counts[k]) if r.counts else "–" for k, _ in COUNTS]
        time = "–" if r.wall_s is None else f"{r.wall_s:.0f} s"
        verdict = r.verdict if not r.reason else f"{r.verdict}: {r.reason}"
        cells = [r.release, f"`{r.adapter}`", verdict, *counts, time, _libraries(r)]
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", type=Path, help="the release matrix's reports (reports/releases)")
    parser.add_argument("--out", type=Path, help="write the table here (default: print it)")
    args = parser.parse_args(argv)
    runs = load(args.folder)
    if not runs:
        parser.error(f"no run under {args.folder}: run nox -s release-matrix first")
    text = "# Release matrix\n\n" + table(runs)
    if args.out:
        args.out.write_text(text, encoding="utf-8")
        print(f"wrote {args.out} ({len(runs)} runs)")
    else:
        print(text, end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""The conformance matrix of several adapters in Markdown: one row per adapter, one column per behaviour.

    python -m reports.matrix RUN/report.json [RUN/report.json ...] > matrix.md

Each cell counts that adapter's checks of that behaviour over every dtype: ``12 ✓`` all passed, ``10 ✓ 2 ✗``
two failed, ``2 known`` failures listed in an expectation file, ``–`` nothing declared. A report may hold
several adapters; an adapter found in several reports is taken from the last one given. The README's
matrix of the built-in adapters is this output.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

#: what a cell counts, in the order it shows them
PARTS = (
    ("passed", "✓"),
    ("unexpectedly_passed", "✓ unexpectedly"),
    ("failed", "✗"),
    ("error", "error"),
    ("known_failure", "known"),
    ("skipped", "skipped"),
)


def tally(reports: list[dict[str, Any]]) -> dict[str, dict[str, Counter[str]]]:
    """adapter -> behaviour -> status -> count (the specification's own checks, without an adapter, left out)."""
    table: dict[str, dict[str, Counter[str]]] = {}
    for report in reports:
        seen: dict[str, dict[str, Counter[str]]] = defaultdict(lambda: defaultdict(Counter))
        for c in report.get("checks", []):
            if c.get("adapter") in (None, "", "spec"):
                continue
            seen[c["adapter"]][c["behaviour"]][c["status"]] += 1
        table.update({a: dict(b) for a, b in seen.items()})
    return table


def cell(counts: Counter[str] | None) -> str:
    if not counts or all(s == "unsupported" for s in counts):
        return "–"
    return " ".join(f"{counts[s]} {mark}" for s, mark in PARTS if counts[s])


def render(table: dict[str, dict[str, Counter[str]]]) -> str:
    behaviours = sorted({b for per in table.values() for b in per})
    lines = [
        "| adapter | " + " | ".join(behaviours) + " |",
        "|---|" + "---|" * len(behaviours),
    ]
    for adapter, per in table.items():
        lines.append(f"| `{adapter}` | " + " | ".join(cell(per.get(b)) for b in behaviours) + " |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("reports", nargs="+", type=Path, help="report.json files")
    args = ap.parse_args(argv)
    docs = []
    for path in args.reports:
        try:
            docs.append(json.loads(path.read_text()))
        except (OSError, ValueError) as exc:
            print(f"error: {path}: {exc}", file=sys.stderr)
            return 2
    sys.stdout.write(render(tally(docs)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

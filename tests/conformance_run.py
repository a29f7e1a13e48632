"""Running the conformance suite as a user does (a separate pytest process) and reading its report."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from transformer_conformance.conformance.runner.cli import has_n

ROOT = Path(__file__).resolve().parent.parent


@dataclass
class Run:
    returncode: int
    stdout: str
    stderr: str
    report_dir: Path

    @property
    def report(self) -> dict[str, Any]:
        return json.loads((self.report_dir / "report.json").read_text())

    def checks(self, **match: Any) -> list[dict[str, Any]]:
        return [c for c in self.report["checks"] if all(c.get(k) == v for k, v in match.items())]


def run_suite(report_dir: Path, *args: str) -> Run:
    """``transformer-conformance -n 0 -q --report-dir REPORT_DIR ARGS`` from the repository (so that
    ``tests.planted:...`` imports), as a subprocess; check modules named in ARGS (``test_rmsnorm.py``) narrow
    the run to them."""
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "transformer_conformance.conformance",
            *([] if has_n(list(args)) else ["-n", "0"]),
            "-q",
            "--report-dir",
            str(report_dir),
            *args,
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    return Run(proc.returncode, proc.stdout, proc.stderr, report_dir)

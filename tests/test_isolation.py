"""The verdict depends only on the candidate: run from a repository with its own pytest configuration,
conftest files and Hypothesis profile, whatever the spelling of the options, the suite runs as it does
anywhere (its checks, its profile, its plugins), and the report records the settings in force."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

HOSTILE_CONFTEST = """
from hypothesis import settings
settings.register_profile("tiny", max_examples=2)
settings.load_profile("tiny")
"""
#: a conftest that ends any run that loads it
CRASHING_CONFTEST = "raise SystemExit('a conftest of the calling repository was loaded')\n"


def _repository(root: Path) -> Path:
    """A caller's repository: its own conftest with a Hypothesis profile, pytest configuration that would
    break the run, and directories for the report and the expectations that hold conftests of their own."""
    root.mkdir()
    (root / "conftest.py").write_text(HOSTILE_CONFTEST)
    (root / "pytest.ini").write_text("[pytest]\naddopts = --hypothesis-profile=tiny -p no:xdist --no-such-option\n")
    (root / "pyproject.toml").write_text('[tool.pytest.ini_options]\naddopts = "--no-such-option"\n')
    for sub in ("r1", "expect"):
        (root / sub).mkdir()
        (root / sub / "conftest.py").write_text(CRASHING_CONFTEST)
    (root / "expect" / "numpy.toml").write_text("")
    return root


@pytest.mark.parametrize("spelling", ["space", "equals"])
def test_a_hostile_repository_changes_nothing(tmp_path: Path, spelling: str) -> None:
    repo = _repository(tmp_path / "repo")
    options = {"--report-dir": "r1", "--expectations": "expect/numpy.toml"}
    args = [
        part
        for name, value in options.items()
        for part in ([name, value] if spelling == "space" else [f"{name}={value}"])
    ]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "GITHUB_STEP_SUMMARY"))}
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "transformer_conformance.conformance",
            "--adapter",
            "numpy",
            "--behaviour",
            "rms_norm",
            "--dtype",
            "float32",
            "-n",
            "2",
            *args,
        ],
        cwd=repo,
        env=dict(env, OMP_NUM_THREADS="1"),
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    report = json.loads((repo / "r1" / "report.json").read_text())
    h = report["hypothesis"]
    assert (h["profile"], h["max_examples"], h["derandomize"]) == ("ci", 40, True), h
    assert "shrink" in h["phases"]
    forward = [c for c in report["checks"] if c["check"] == "rms_norm/forward"]
    assert [c["examples"] for c in forward] == [40], forward
    assert report["verdict"] == "conformant" and report["summary"]["passed"] == len(report["checks"]) >= 3
    assert report["expectations"]["files"] == ["expect/numpy.toml"]


def test_a_stray_path_is_a_usage_error(tmp_path: Path) -> None:
    """A positional argument that is not one of the suite's check modules would make pytest collect it: the
    run refuses it with one line rather than check something else."""
    repo = _repository(tmp_path / "repo")
    (repo / "test_mine.py").write_text("def test_x():\n    pass\n")
    proc = subprocess.run(
        [sys.executable, "-m", "transformer_conformance.conformance", "--adapter", "numpy", "-n", "0", "test_mine.py"],
        cwd=repo,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 4, proc.stdout[-2000:] + proc.stderr[-2000:]
    errors = [line for line in proc.stderr.splitlines() if line.startswith("ERROR:")]
    assert len(errors) == 1 and "test_mine.py" in errors[0] and "--behaviour" in errors[0], proc.stderr

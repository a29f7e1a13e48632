"""``--behaviour`` runs only the checks of the behaviours named."""

from __future__ import annotations

from pathlib import Path

from tests.conformance_run import run_suite


def test_behaviour_selects_its_checks(tmp_path: Path) -> None:
    run = run_suite(
        tmp_path, "test_losses.py", "--adapter", "numpy", "--dtype", "float32", "--behaviour", "z_loss"
    )
    assert run.returncode == 0, run.stdout[-2000:]
    behaviours = {c["behaviour"] for c in run.report["checks"]}
    assert behaviours == {"z_loss"}
    assert "deselected" in run.stdout

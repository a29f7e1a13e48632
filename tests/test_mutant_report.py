"""``mutants/run.py``'s report names the checks that ran and failed no mutant: checks not yet shown to catch a
planted defect (docs/mutants.md)."""

from __future__ import annotations

from typing import Any

from mutants.run import render_markdown
from tests.test_mutant_seeds import _verdict


def _result(idle: list[str]) -> dict[str, Any]:
    return {
        "profile": "ci-noshrink",
        "seeds": [],
        "workers": "2",
        "duration_s": 1.0,
        "per_behaviour_s": {"rms_norm": 1.0},
        "summary": {
            "total": 1,
            "killed": 1,
            "survived": 0,
            "error": 0,
            "median_examples_to_kill": 1,
            "checks_run": 3,
            "checks_that_caught_none": idle,
        },
        "mutants": [_verdict("caught", "killed", 1)],
    }


def test_the_checks_that_caught_nothing_are_named() -> None:
    md = render_markdown(_result(["rms_norm/regime-forward", "rms_norm/scale-invariance"]))
    assert (
        "Checks that ran and failed no mutant (2 of 3): not yet shown to catch a planted defect. "
        "`rms_norm/regime-forward`, `rms_norm/scale-invariance`." in md
    ), md


def test_no_line_when_every_check_caught_something() -> None:
    assert "failed no mutant" not in render_markdown(_result([]))

"""``mutants/run.py --seeds N``: a mutant counts as killed only if every seed killed it (docs/mutants.md)."""

from __future__ import annotations

from typing import Any

from mutants.run import combine_seeds, render_markdown


def _verdict(name: str, status: str, examples: int | None) -> dict[str, Any]:
    return {
        "name": name,
        "adapter": f"mutants.catalogue:{name}",
        "behaviour": "rms_norm",
        "defect": "a defect",
        "caught_by": "rms_norm/forward",
        "status": status,
        "caught_as_expected": status == "killed",
        "checks_run": 3,
        "killed_by": [{"check": "rms_norm/forward", "dtype": "float32", "examples_to_failure": examples}]
        if status == "killed"
        else [],
        "examples_to_kill": examples,
        "errors": [],
    }


def test_a_mutant_one_seed_spares_is_not_killed() -> None:
    per_seed = {
        3: [_verdict("always", "killed", 1), _verdict("lucky", "killed", 2)],
        4: [_verdict("always", "killed", 7), _verdict("lucky", "survived", None)],
    }
    always, lucky = combine_seeds(per_seed)
    assert always["status"] == "killed", always
    assert always["seeds"] == {"run": [3, 4], "killed": [3, 4], "survived": [], "max_examples_to_kill": 7}
    assert lucky["status"] == "survived", lucky
    assert lucky["seeds"]["survived"] == [4]


def test_the_table_says_how_many_seeds_killed_each() -> None:
    per_seed = {0: [_verdict("lucky", "killed", 2)], 1: [_verdict("lucky", "survived", None)]}
    result = {
        "profile": "ci-random-noshrink",
        "seeds": [0, 1],
        "workers": "2",
        "duration_s": 1.0,
        "per_behaviour_s": {"rms_norm": 1.0},
        "summary": {"total": 1, "killed": 0, "survived": 1, "error": 0, "median_examples_to_kill": 2},
        "mutants": combine_seeds(per_seed),
    }
    md = render_markdown(result)
    assert "| seeds | most examples |" in md
    assert "**SURVIVED** | 2 | `rms_norm/forward` float32 (2) | 1/2 (not 1) | 2 |" in md, md

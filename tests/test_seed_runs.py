"""``mutants/seeds.py`` (the no-false-alarm run): it passes the built-in expectation files that name an adapter of
the run, a group standing for its members (docs/seeds.md)."""

from __future__ import annotations

from mutants.seeds import expectation_files
from transformer_conformance.adapters.registry import expand


def test_the_files_naming_an_adapter_are_passed() -> None:
    assert [p.name for p in expectation_files(["mlx"])] == ["mlx.toml"]
    assert expectation_files(["numpy"]) == []


def test_a_group_stands_for_its_members() -> None:
    """hf-families names no entry itself; its members' known failures are in hf.toml."""
    assert [p.name for p in expectation_files(["hf-families"])] == ["hf.toml"]


def test_a_comma_separated_adapter_list_is_split() -> None:
    """``--adapter mlx,numpy`` names two adapters, as the suite's own option does: mlx's file is passed."""
    assert expand(["mlx,numpy", " torch "]) == ["mlx", "numpy", "torch"]
    assert [p.name for p in expectation_files(["numpy,mlx"])] == ["mlx.toml"]

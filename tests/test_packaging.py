"""What an installed user gets: the built-in expectation files the README tells them to pass, readable by name
from the installed package, and the license."""

from __future__ import annotations

from importlib.metadata import files
from pathlib import Path

import pytest

from transformer_conformance.conformance.runner.expectations import ExpectationError, load, resolve
from transformer_conformance.expectations import files as builtin_files

ROOT = Path(__file__).resolve().parent.parent


def test_the_expectation_files_are_installed() -> None:
    shipped = builtin_files()
    assert set(shipped) == {p.stem for p in (ROOT / "expectations").glob("*.toml")} >= {"jax", "hf", "liger", "flax"}
    for name, path in shipped.items():
        assert path.read_text() == (ROOT / "expectations" / f"{name}.toml").read_text()


def test_builtin_names_resolve() -> None:
    ((path, shown),) = resolve("builtin:jax", Path("/nowhere"), ["numpy"])
    assert shown == "builtin:jax" and load(path)
    chosen = resolve("builtin", Path("/nowhere"), ["hf-llama", "liger-none"])
    assert sorted(shown for _, shown in chosen) == ["builtin:hf", "builtin:liger"]
    assert resolve("builtin", Path("/nowhere"), ["numpy"]) == []
    assert resolve("mine.toml", Path("/repo"), ["numpy"]) == [(Path("/repo/mine.toml"), "mine.toml")]
    with pytest.raises(ExpectationError, match="no built-in expectation file 'nope'; the suite has flax, hf"):
        resolve("builtin:nope", Path("/"), [])


def test_the_license_is_installed() -> None:
    names = [str(f) for f in files("transformer-conformance") or []]
    assert any(n.endswith("LICENSE") for n in names), names
    assert (ROOT / "LICENSE").read_text().lstrip().startswith("Apache License")

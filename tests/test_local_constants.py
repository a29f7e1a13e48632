"""The sample depends on the candidate only: Hypothesis's draws leave out the constants of the caller's modules
(conformance/runner/profiles.py, ``no_local_constants``), which it would otherwise mix in from every loaded module
outside site-packages — a candidate in the caller's repository, kernels a compiler generates and loads."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.internal.conjecture import providers

from transformer_conformance.conformance.runner import profiles

CONSTANT = 987_654_321


def _draws() -> list[int]:
    seen: list[int] = []

    @settings(max_examples=2000, derandomize=True, database=None)
    @given(st.integers(0, 10**12))
    def draw(n: int) -> None:
        seen.append(n)

    draw()
    return seen


def _import_caller_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A module of the caller's, loaded for the test (and out of sys.modules after it)."""
    folder = tmp_path / "callers_repo"
    folder.mkdir()
    (folder / "caller_kernel.py").write_text(f"BLOCK = {CONSTANT}\n")
    monkeypatch.syspath_prepend(str(folder))
    module = importlib.import_module("caller_kernel")
    sys.modules.pop("caller_kernel")
    monkeypatch.setitem(sys.modules, "caller_kernel", module)


def test_the_callers_constants_are_not_drawn(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    profiles.no_local_constants()
    _import_caller_module(tmp_path, monkeypatch)
    assert "caller_kernel" in sys.modules
    assert not providers._get_local_constants().set_for_type(int)
    assert CONSTANT not in _draws()


def test_a_local_constant_would_be_drawn(monkeypatch: pytest.MonkeyPatch) -> None:
    """The draw above reaches a constant the pool holds: what the suite switches off is what would move it."""
    monkeypatch.setattr(providers, "_get_local_constants", lambda: providers.Constants(integers={CONSTANT}))
    providers.CONSTANTS_CACHE.cache.clear()
    try:
        assert CONSTANT in _draws()
    finally:
        providers.CONSTANTS_CACHE.cache.clear()

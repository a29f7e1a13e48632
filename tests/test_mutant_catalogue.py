"""The mutant catalogue is well-formed: enough mutants, every behaviour covered, each loads as an adapter."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from mutants.catalogue import BEHAVIOURS, BITS_PER_CALL_OPS, CATALOGUE, Mutant
from transformer_conformance.adapters.contract import Adapter
from transformer_conformance.adapters.registry import load_adapter
from transformer_conformance.adapters.torch.adapter import TorchAdapter, llama_hidden_dim
from transformer_conformance.adapters.torch.blocks import ffn_hidden_dim
from transformer_conformance.adapters.torch.positions import llama_param_count
from transformer_conformance.conformance.checks import test_integrity as integrity_checks
from transformer_conformance.conformance.harness import marks

ROOT = Path(__file__).resolve().parent.parent
#: configurations a parameter count is compared on: grouped KV heads or not, tied or not, layers or none
COUNTED = [
    {"vocab": 50, "hidden": 8, "intermediate": 12, "layers": layers, "heads": 4, "kv_heads": kv, "tied": tied}
    for layers in (0, 2)
    for kv in (None, 2)
    for tied in (False, True)
]


def _check_ids() -> dict[str, str]:
    """Every check id declared in the conformance modules -> its behaviour."""
    ids = {}
    for path in (ROOT / "conformance" / "checks").glob("test_*.py"):
        text = path.read_text()
        for m in re.finditer(r'check\(\s*"([\w/-]+)",\s*"(\w+)"', text):
            ids[m.group(1)] = m.group(2)
    # the integrity checks are made per operation (conformance/checks/test_integrity.py)
    ids |= {f"integrity/{op}{g}": "integrity" for op in integrity_checks.CASES for g in ("", "-gradient")}
    return ids


def test_catalogue_size_and_coverage() -> None:
    assert len(CATALOGUE) >= 40
    assert {m.behaviour for m in CATALOGUE} == set(BEHAVIOURS)
    missing = set(marks.BEHAVIOURS) - set(BEHAVIOURS)
    assert not missing, f"behaviours without a mutant: {sorted(missing)}, should be none (each check shown to fail)"
    for path in set(BEHAVIOURS.values()):
        assert (ROOT / "conformance" / "checks" / path).is_file(), path


def test_every_operations_integrity_checks_have_a_mutant() -> None:
    """Each operation's integrity checks are shown to fail: a mutant whose answers differ between identical calls."""
    assert sorted(BITS_PER_CALL_OPS) == sorted(integrity_checks.CASES)


def test_names_unique() -> None:
    names = [m.name for m in CATALOGUE]
    assert len(names) == len(set(names))


def test_each_names_its_defect_and_the_check_that_must_catch_it() -> None:
    ids = _check_ids()
    assert ids, "no check ids found in conformance/"
    for m in CATALOGUE:
        assert m.defect.strip() and "\n" not in m.defect, m.name
        assert ids.get(m.caught_by) == m.behaviour, f"{m.name}: {m.caught_by} is not a check of {m.behaviour}"


@pytest.mark.parametrize("m", CATALOGUE, ids=[m.name for m in CATALOGUE])
def test_loads_as_an_adapter(m: Mutant) -> None:
    adapter = load_adapter(m.spec)
    assert isinstance(adapter, Adapter)
    assert adapter.name == m.name


def test_each_is_one_change_from_the_correct_adapter() -> None:
    """A mutant changes exactly one thing: one operation, a hidden-width rule, the parameter count, or the declared
    conventions."""
    correct = TorchAdapter()
    for m in CATALOGUE:
        a = m()
        changes = [op for op in correct.impl if a.impl[op].__code__ is not correct.impl[op].__code__]
        if a.conventions != correct.conventions:
            changes.append("conventions")
        if any(a.hidden_dim(d, k) != llama_hidden_dim(d, k) for d in range(1, 300) for k in (1, 64, 128, 256)):
            changes.append("swiglu_hidden_dim")
        widths = [(d, r, g, k) for d in range(1, 300, 7) for r in (1, 2.5, 4) for g in (True, False) for k in (1, 64)]
        if any(a.ffn_width(*w) != ffn_hidden_dim(*w) for w in widths):
            changes.append("ffn_hidden_dim")
        if any(a.param_count(**c) != llama_param_count(**c) for c in COUNTED):
            changes.append("param_count")
        assert len(changes) == 1, f"{m.name}: {changes}"


def test_the_docs_state_the_catalogue_size() -> None:
    """README.md and docs/mutants.md say how many mutants the catalogue holds: the number they say is its size."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    mutants_md = (ROOT / "docs" / "mutants.md").read_text(encoding="utf-8")
    said = re.findall(r"mutants/\s+(\d+) defective", readme) + re.findall(r"holds (\d+) defective", mutants_md)
    assert said == [str(len(CATALOGUE))] * 2, f"got {said}, should be {len(CATALOGUE)} in both files"

"""An operation declared ``interpreted`` (its kernels run in Triton's or Pallas's interpreter) runs each size regime
once, in the narrowest dtype it declares; its other checks run in every dtype (adapters/contract.py,
``regime_dtype``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conformance_run import run_suite
from transformer_conformance.adapters.contract import Capability, interpreted, regime_dtype
from transformer_conformance.adapters.numpy.adapter import NumpyAdapter
from transformer_conformance.conformance.harness.marks import is_regime


def test_the_narrowest_declared_dtype() -> None:
    assert regime_dtype(Capability()) is None  # not interpreted: every declared dtype
    assert regime_dtype(Capability(interpreted=True)) == "bfloat16"
    assert regime_dtype(Capability(dtypes=frozenset({"float32", "float16"}), interpreted=True)) == "float16"
    assert regime_dtype(Capability(dtypes=frozenset({"float32"}), interpreted=True)) == "float32"
    assert all(c.interpreted for c in interpreted({"rms_norm": Capability(), "rope": Capability()}).values())


def test_regime_checks_are_told_by_their_id() -> None:
    assert is_regime("rms_norm/regime-forward") and is_regime("sliding-window/regime-gradient")
    assert not is_regime("rms_norm/forward") and not is_regime("rope_scaled/bands")


class Interpreted(NumpyAdapter):
    """The oracle, declaring its RMSNorm interpreted in float32 and float16."""

    name = "interpreted"

    def __init__(self) -> None:
        super().__init__()
        self.capabilities = {"rms_norm": Capability(dtypes=frozenset({"float32", "float16"}), interpreted=True)}


@pytest.mark.slow  # a conformance run (the regimes of 32,768 rows)
def test_regimes_run_once_in_the_narrowest_dtype(tmp_path: Path) -> None:
    run = run_suite(tmp_path, "--adapter=tests.test_interpreted_regimes:Interpreted", "--behaviour=rms_norm")
    assert run.returncode == 0, run.stdout[-3000:]
    regimes = {(c["check"], c["dtype"]): c for c in run.checks() if is_regime(c["check"])}
    assert {k: c["status"] for k, c in regimes.items()} == {
        ("rms_norm/regime-forward", "float16"): "passed",
        ("rms_norm/regime-gradient", "float16"): "passed",
        ("rms_norm/regime-forward", "float32"): "skipped",
        ("rms_norm/regime-gradient", "float32"): "skipped",
        ("rms_norm/regime-forward", "bfloat16"): "unsupported",
        ("rms_norm/regime-gradient", "bfloat16"): "unsupported",
    }
    skipped = regimes[("rms_norm/regime-forward", "float32")]["message"]
    assert skipped == "interpreted runs rms_norm in an interpreter: its size regimes in float16", skipped
    others = [c for c in run.checks(dtype="float32") if not is_regime(c["check"])]
    assert others and all(c["status"] == "passed" for c in others)
    assert run.report["adapters"][0]["capabilities"]["rms_norm"]["interpreted"] is True

"""The HF transformers built-in adapters load, pass a smoke subset, and are held to what they declare."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

pytest.importorskip("transformers")

from tests.adapter_smoke import outside_hypothesis, smoke
from transformer_conformance.adapters.registry import load_adapter
from transformer_conformance.conformance.harness.compare import CheckFailure, Record, check_forward
from transformer_conformance.conformance.strategies.common import Case, fill
from transformer_conformance.reference.formats import fmt


@pytest.mark.parametrize("name", ["hf-llama", "hf-gemma", "hf-t5"])
def test_smoke(name: str) -> None:
    adapter = load_adapter(name)
    assert adapter.name == name
    assert smoke(adapter)


def _norm_case(dtype_name: str, seed: int = 7, n: int = 256) -> Case:
    dtype = fmt(dtype_name)
    return Case(
        {"x": fill(dtype, (4, n), 1.0, seed), "weight": fill(dtype, (n,), 1.0, seed + 1, offset=1.0)}, {"eps": 1e-6}
    )


@pytest.mark.parametrize("name", ["hf-llama", "hf-t5"])
def test_cast_before_weight_is_enforced(name: str) -> None:
    """An HF-style norm (cast to bfloat16, then times the weight) that declared a single rounding is
    caught in bfloat16; declared as it is, it passes."""
    adapter = load_adapter(name)
    dtype, case = fmt("bfloat16"), _norm_case("bfloat16")
    with outside_hypothesis():
        check_forward(adapter, "rms_norm", case, dtype, Record("rms", "rms_norm", "", ""))
    adapter.conventions = replace(adapter.conventions, norm_rounding="single")
    with outside_hypothesis(), pytest.raises(CheckFailure, match="should be"):
        check_forward(adapter, "rms_norm", case, dtype, Record("rms", "rms_norm", "", ""))


def test_gemma_weight_offset() -> None:
    """GemmaRMSNorm computes norm(x)·(1 + w): the adapter passes w = γ − 1. Passing γ itself (a converter
    that forgets the offset) is caught."""
    from transformer_conformance.adapters.hf.adapter import HFGemmaAdapter

    adapter = load_adapter("hf-gemma")
    case = _norm_case("float32")
    with outside_hypothesis():
        check_forward(adapter, "rms_norm", case, fmt("float32"), Record("rms", "rms_norm", "", ""))

    class Forgets(HFGemmaAdapter):
        name = "gemma-no-offset"

        def norm_weight(self, weight):  # type: ignore[no-untyped-def]
            return weight

    with outside_hypothesis(), pytest.raises(CheckFailure, match="should be"):
        check_forward(Forgets(), "rms_norm", case, fmt("float32"), Record("rms", "rms_norm", "", ""))


def test_gemma_offset_budget_counts_the_stored_weight() -> None:
    """In bfloat16, γ − 1 is not always representable: the declared offset charges that rounding."""
    from transformer_conformance.adapters.contract import Conventions
    from transformer_conformance.conformance.budgets import registry as budgets

    dtype = fmt("bfloat16")
    w = np.array([-3.03125, 1.5], dtype=dtype.np_dtype)  # −4.03125 needs 9 bits; 0.5 is exact
    inputs = {"x": np.ones((1, 2), dtype=dtype.np_dtype), "weight": w}
    plain = budgets.FORWARD["rms_norm"](inputs, {"eps": 1e-6}, Conventions(), dtype)
    offset = budgets.FORWARD["rms_norm"](inputs, {"eps": 1e-6}, Conventions(norm_weight_offset=1.0), dtype)
    assert offset.e[0, 0] - plain.e[0, 0] >= dtype.unit_roundoff * 4.03125 * 0.99


def test_hf_names_the_three_norm_families() -> None:
    """`--adapter hf` runs every HF adapter, and nox installs their extra for it."""
    from transformer_conformance.adapters.extras import EXTRAS
    from transformer_conformance.adapters.registry import BUILTIN, expand

    assert expand(["numpy", "hf"]) == ["numpy", "hf-llama", "hf-gemma", "hf-t5"]
    assert all(name in BUILTIN and EXTRAS[name] == "hf" for name in expand(["hf"]))
    assert EXTRAS["hf"] == "hf"


def test_rope_scaling_rules_hf_offers() -> None:
    """hf-llama declares rope_scaled with the rope types HF offers that the contract defines: no static NTK (and
    HF's "proportional", a partial rotary with its exponents over the whole head, is not a contract rule)."""
    cap = load_adapter("hf-llama").capabilities["rope_scaled"]
    assert cap.values == {"scaling.type": {"linear", "dynamic", "yarn", "llama3", "longrope"}}


def test_dynamic_ntk_keeps_state() -> None:
    """The finding listed in expectations/hf.toml: HF's dynamic NTK keeps the longest length its module has
    seen, so the same call answers differently after a longer one. If this fails, HF no longer does: remove
    the rope_scaled/dynamic-* entries of expectations/hf.toml."""
    adapter = load_adapter("hf-llama")
    dtype = fmt("float32")
    x = fill(dtype, (1, 1, 8), 1.0, 3)
    rule = {"type": "dynamic", "factor": 3.0, "original_max_position_embeddings": 16}
    params = {"base": 10000.0, "rotary_dim": None, "scaling": rule}

    def call(position: int) -> np.ndarray:
        return adapter.forward("rope_scaled", {"x": x, "positions": np.array([position])}, params)

    before = call(100)
    call(5000)
    assert not np.array_equal(call(100), before)  # n = 101 now rotates with the base for n = 5001
    assert np.array_equal(call(14), call(14))  # below the trained length it resets to plain RoPE


def test_dynamic_ntk_resets_below_the_trained_length_only() -> None:
    """The two dynamic-NTK checks at and below the trained length, on HF: right after a longer call, a call
    shorter than L is plain RoPE again (rope_scaled/dynamic-below-trained-length, not listed in
    expectations/hf.toml, so a release that stops resetting fails the run), while a call of exactly L keeps
    the longer call's base, HF's design (rope_scaled/dynamic-at-trained-length, listed)."""
    adapter = load_adapter("hf-llama")
    dtype = fmt("float32")
    x = fill(dtype, (1, 1, 8), 1.0, 3)
    rule = {"type": "dynamic", "factor": 3.0, "original_max_position_embeddings": 16}

    def call(position: int, scaling: dict | None = rule) -> np.ndarray:
        params = {"base": 10000.0, "rotary_dim": None, "scaling": scaling}
        return adapter.forward("rope_scaled", {"x": x, "positions": np.array([position])}, params)

    call(5000)
    assert np.array_equal(call(14), call(14, None))  # n = 15 < L: reset to plain RoPE
    call(5000)
    assert not np.array_equal(call(15), call(15, None))  # n = L: the base for n = 5001 kept

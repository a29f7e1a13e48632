"""The HF model-family adapters (adapters/hf/families) load, pass a smoke subset of what they declare, and
declare what their modeling files do: the pair layout, partial rotary, the norm's rounding, the block."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

pytest.importorskip("transformers")

from tests.adapter_smoke import case, outside_hypothesis, smoke
from transformer_conformance.adapters.registry import EXTRAS, GROUPS, load_adapter
from transformer_conformance.conformance.harness.compare import CheckFailure, Record, check_forward
from transformer_conformance.reference.formats import fmt
from transformer_conformance.reference.rope import rope

FAMILIES = ["hf-gpt-neox", "hf-cohere", "hf-phi3", "hf-gemma2", "hf-olmo2", "hf-qwen3", "hf-mistral"]
#: the block placement each family's decoder layer has (None: its block is not the contract's)
BLOCKS = {"hf-phi3": "pre", "hf-mistral": "pre", "hf-gemma2": "double"}


@pytest.mark.parametrize("name", FAMILIES)
def test_smoke(name: str) -> None:
    adapter = load_adapter(name)
    assert adapter.name == name and EXTRAS[name] == "hf" and name in GROUPS["hf-families"]
    assert smoke(adapter, ("float32",))


@pytest.mark.parametrize("name", FAMILIES)
def test_block_declares_the_decoder_layer_placement(name: str) -> None:
    cap = load_adapter(name).capabilities.get("block")
    placement = BLOCKS.get(name)
    assert (cap is None) == (placement is None)
    if cap is not None:
        assert cap.values["placement"] == {placement}


def _rope_forward(name: str, layout: str | None = None, rotary_dim: int = 8) -> None:
    adapter = load_adapter(name)
    if layout is not None:
        adapter.conventions = replace(adapter.conventions, rope_layout=layout)  # type: ignore[misc]
    c = case("rope", fmt("float32"))
    c.params["rotary_dim"] = rotary_dim
    with outside_hypothesis():
        check_forward(adapter, "rope", c, fmt("float32"), Record("rope", "rope", "", ""))


def test_cohere_pairs_are_interleaved() -> None:
    """Cohere's rotary embedding repeats each frequency (repeat_interleave) and rotates pairs (2i, 2i+1):
    declared interleaved it passes; declared as Llama's halves it is caught."""
    _rope_forward("hf-cohere")
    with pytest.raises(CheckFailure, match="should be"):
        _rope_forward("hf-cohere", layout="half")


@pytest.mark.parametrize("name", ["hf-gpt-neox", "hf-phi3"])
def test_partial_rotary_by_the_family(name: str) -> None:
    """GPT-NeoX and Phi-3 rotate x[..., :rotary_dim] themselves (partial_rotary_factor): the rest passes."""
    _rope_forward(name, rotary_dim=4)


def test_partial_rotary_factor_truncates() -> None:
    """docs/adapters.md: HF sizes the rotated part as int(head_dim · partial_rotary_factor). For head_dim 44
    and 30 rotated dims the factor 30/44 gives int(29.999…) = 29, so the frequencies are base^(−2i/29), not
    base^(−2i/30). The contract's draws (d ≤ 16 or a power of two) never reach such a head."""
    adapter = load_adapter("hf-gpt-neox")
    x = np.random.default_rng(0).standard_normal((1, 3, 44)).astype(np.float32)
    pos = np.arange(3, dtype=np.int64)
    got = adapter.forward("rope", {"x": x, "positions": pos}, {"base": 10000.0, "rotary_dim": 30})
    want = rope(x.astype(np.float64), pos, 10000.0, rotary_dim=30, layout="half")
    assert np.abs(got - want).max() > 1e-2  # a defect of the library: this test fails once it is fixed


def test_olmo2_rounds_once() -> None:
    """Olmo2RMSNorm multiplies by the weight in float32 and rounds once (Llama casts first): declared single, it
    passes in bfloat16."""
    adapter = load_adapter("hf-olmo2")
    assert adapter.conventions.norm_rounding == "single"
    assert load_adapter("hf-qwen3").conventions.norm_rounding == "before_weight"
    with outside_hypothesis():
        check_forward(adapter, "rms_norm", case("rms_norm", fmt("bfloat16")), fmt("bfloat16"), Record("n", "n", "", ""))

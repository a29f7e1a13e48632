"""The HF model-family adapters (adapters/hf/families) load, pass a smoke subset of what they declare, and
declare what their modeling files do: the pair layout, partial rotary, the norm's rounding, the block, and the local
attention of their models (Mistral's and Gemma 2's sliding window, gpt-oss's sinks, Llama 4's chunks)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

pytest.importorskip("transformers")

from tests.adapter_smoke import case, outside_hypothesis, smoke
from transformer_conformance.adapters.registry import EXTRAS, GROUPS, load_adapter
from transformer_conformance.conformance.harness.compare import CheckFailure, Record, check_forward, check_vjp
from transformer_conformance.conformance.strategies.common import Case, fill
from transformer_conformance.reference.formats import fmt
from transformer_conformance.reference.rope import rope

FAMILIES = [
    "hf-gpt-neox",
    "hf-cohere",
    "hf-phi3",
    "hf-gemma2",
    "hf-olmo2",
    "hf-qwen3",
    "hf-mistral",
    "hf-gpt-oss",
    "hf-llama4",
]
#: the block placement each family's decoder layer has (None: its block is not the contract's)
BLOCKS = {"hf-phi3": "pre", "hf-mistral": "pre", "hf-gemma2": "double"}
LOCAL = ("sliding_window_attention", "chunked_attention", "sink_attention")
#: the local attention each family's model has (the others declare none)
LOCAL_OPS = {
    "hf-mistral": {"sliding_window_attention"},
    "hf-gemma2": {"sliding_window_attention"},
    "hf-gpt-oss": {"sink_attention"},
    "hf-llama4": {"chunked_attention"},
}


@pytest.mark.parametrize("name", FAMILIES)
def test_smoke(name: str) -> None:
    adapter = load_adapter(name)
    assert adapter.name == name and EXTRAS[name] == "hf" and name in GROUPS["hf-families"]
    assert smoke(adapter, ("float32",))


def test_new_families_declare_their_models_operations() -> None:
    """gpt-oss: its RMSNorm (one rounding), RoPE (halves) and sink attention, nothing of its MoE; Llama 4: its norm
    (Llama's rounding), complex RoPE (interleaved pairs), MLP, attention and chunks; the sliding windows of Mistral
    and Gemma 2 count the query's own token (masking_utils: kv_idx > q_idx − W)."""
    oss, l4 = load_adapter("hf-gpt-oss"), load_adapter("hf-llama4")
    assert set(oss.capabilities) == {"rms_norm", "rope", "sink_attention"}
    assert (oss.conventions.rope_layout, oss.conventions.norm_rounding) == ("half", "single")
    assert set(l4.capabilities) == {"rms_norm", "rope", "swiglu_mlp", "glu_mlp", "attention", "chunked_attention"}
    assert (l4.conventions.rope_layout, l4.conventions.norm_rounding) == ("interleaved", "before_weight")
    for name in FAMILIES:
        adapter = load_adapter(name)
        assert {op for op in adapter.capabilities if op in LOCAL} == LOCAL_OPS.get(name, set()), name
        assert adapter.conventions.sliding_window == "inclusive"
    for name in ("hf-mistral", "hf-llama4"):  # no soft-cap in their eager attention
        caps = load_adapter(name).capabilities
        assert all(
            caps[op].values["softcap"] == {"none"} for op in ("attention", "sliding_window_attention") if op in caps
        )
    assert "softcap" not in load_adapter("hf-gemma2").capabilities["sliding_window_attention"].values


def _local_case(op: str, window: int | None = 2, causal: bool = True, softcap: float | None = None) -> Case:
    """Grouped heads (4 query heads on 2 KV heads), 3 queries against 6 keys (bottom-right: tokens 3…5)."""
    dtype = fmt("float32")
    inputs = {
        "q": fill(dtype, (1, 4, 3, 8), 1.0, 0),
        "k": fill(dtype, (1, 2, 6, 8), 1.0, 1),
        "v": fill(dtype, (1, 2, 6, 4), 1.0, 2),
    }
    if op == "sliding_window_attention":
        return Case(inputs, {"window": window, "softcap": softcap, "scale": None})
    if op == "chunked_attention":
        return Case(inputs, {"chunk": window, "scale": 0.3})
    inputs["sinks"] = fill(dtype, (4,), 2.0, 3)
    return Case(inputs, {"causal": causal, "window": window, "scale": None})


LOCAL_CASES = [
    ("hf-mistral", _local_case("sliding_window_attention")),
    ("hf-mistral", _local_case("sliding_window_attention", window=1)),
    ("hf-gemma2", _local_case("sliding_window_attention", window=3, softcap=5.0)),
    ("hf-gpt-oss", _local_case("sink_attention")),
    ("hf-gpt-oss", _local_case("sink_attention", window=None)),
    ("hf-gpt-oss", _local_case("sink_attention", window=None, causal=False)),
    ("hf-llama4", _local_case("chunked_attention", window=4)),
]


@pytest.mark.parametrize(("name", "c"), LOCAL_CASES, ids=[f"{n}-{c.params}" for n, c in LOCAL_CASES])
def test_local_attention_forward(name: str, c: Case) -> None:
    """The new behaviours' operations through each family's mask and eager attention agree with the oracle, forward
    and gradient (sinks' too), in float32, with fewer queries than keys."""
    adapter = load_adapter(name)
    op = next(iter(LOCAL_OPS[name]))
    dtype = fmt("float32")
    with outside_hypothesis():
        out = check_forward(adapter, op, c, dtype, Record(op, op, "", ""))
        check_vjp(adapter, op, c, fill(dtype, out.shape, 1.0, 9), dtype, Record(op, op, "", ""))


def test_window_counts_the_querys_own_token() -> None:
    """Declared exclusive (W keys before the query's own), Mistral's window of 2 is caught: it sees one key fewer."""
    adapter = load_adapter("hf-mistral")
    adapter.conventions = replace(adapter.conventions, sliding_window="exclusive")  # type: ignore[misc]
    c = _local_case("sliding_window_attention")
    with outside_hypothesis(), pytest.raises(CheckFailure, match="should be"):
        check_forward(adapter, "sliding_window_attention", c, fmt("float32"), Record("w", "w", "", ""))


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

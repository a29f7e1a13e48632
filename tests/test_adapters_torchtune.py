"""The torchtune built-in adapter loads, declares what torchtune's modules do, passes a smoke subset, and is
held to its declarations: interleaved RoPE pairs, a float32 rope cache, the KV cache's bottom-right rows."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

pytest.importorskip("torchtune")

import torch

from tests.adapter_smoke import case, outside_hypothesis, smoke
from transformer_conformance.adapters.registry import load_adapter
from transformer_conformance.conformance.harness.compare import CheckFailure, Record, check_forward
from transformer_conformance.conformance.strategies.common import Case, fill
from transformer_conformance.reference.formats import fmt


def test_smoke() -> None:
    adapter = load_adapter("torchtune")
    assert adapter.name == "torchtune"
    checked = smoke(adapter, ("float32", "bfloat16"))
    assert "rope_scaled[bfloat16][llama3]" in checked and "attention[float32][tanh]" in checked


def test_declarations() -> None:
    adapter = load_adapter("torchtune")
    conv = adapter.conventions
    assert conv.rope_layout == "interleaved" and conv.rope_angle_dtype == "float32"
    assert conv.norm_rounding == "single" and conv.causal_alignment == "bottom_right"
    assert conv.eps_defaults == {"rms_norm": 1e-6, "layer_norm": 1e-5}
    assert conv.unfused == {"swiglu_mlp", "attention"}
    caps = adapter.capabilities
    assert "cross_entropy" not in caps and "cross_entropy_mean" in caps  # no per-token loss in torchtune
    assert caps["rope_scaled"].values == {"scaling.type": {"llama3"}}
    env = adapter.environment()
    assert env["torchtune"].startswith("0.6.") and env["torchao"]


@pytest.mark.parametrize("found", ["0.5.0", "0.7.0", "1.0.0", "nightly"])
def test_other_versions_refused(found: str) -> None:
    from transformer_conformance.adapters.torchtune.adapter import check_version

    with pytest.raises(RuntimeError, match=f"supports torchtune 0.6.x .* not {found}$"):
        check_version(found)
    check_version("0.6.1")
    check_version("0.6.0+cpu")


def test_rope_layout_is_interleaved() -> None:
    """Declared half-split instead, the same module fails rope/forward: the pairs are (2i, 2i + 1)."""
    adapter = load_adapter("torchtune")
    dtype = fmt("float32")
    c = case("rope", dtype)
    with outside_hypothesis():
        check_forward(adapter, "rope", c, dtype, Record("rope", "rope", "", ""))
        adapter.conventions = replace(adapter.conventions, rope_layout="half")  # type: ignore[misc]
        with pytest.raises(CheckFailure):
            check_forward(adapter, "rope", c, dtype, Record("rope", "rope", "", ""))


def test_rope_cache_stays_float32_under_a_low_precision_default() -> None:
    """Built as the recipes build a model, under a bfloat16 default dtype, the cos/sin cache is float32."""
    from torchtune.models.llama3_1 import Llama3ScaledRoPE
    from torchtune.modules import RotaryPositionalEmbeddings
    from torchtune.training import set_default_dtype

    with set_default_dtype(torch.bfloat16):
        plain, scaled = RotaryPositionalEmbeddings(8, max_seq_len=16), Llama3ScaledRoPE(8, max_seq_len=16)
    assert plain.cache.dtype == torch.float32 and scaled.cache.dtype == torch.float32


def test_kv_cache_decoding_matches_the_full_causal_forward() -> None:
    """Queries after a prefill through torchtune's KVCache equal the same rows of the full causal call."""
    adapter = load_adapter("torchtune")
    dtype = fmt("float32")
    q, k, v = fill(dtype, (1, 4, 5, 8), 1.0, 1), fill(dtype, (1, 2, 5, 8), 1.0, 2), fill(dtype, (1, 2, 5, 3), 1.0, 3)
    params = {"causal": True, "softcap": None, "scale": None}
    full = adapter.forward("attention", {"q": q, "k": k, "v": v}, params)
    tail = adapter.forward("attention", {"q": q[:, :, 3:], "k": k, "v": v}, params)
    np.testing.assert_allclose(tail, full[:, :, 3:], rtol=1e-6, atol=1e-6)
    capped = dict(params, softcap=5.0)  # Gemma2Attention, the same way
    full = adapter.forward("attention", {"q": q, "k": k, "v": v}, capped)
    tail = adapter.forward("attention", {"q": q[:, :, 3:], "k": k, "v": v}, capped)
    np.testing.assert_allclose(tail, full[:, :, 3:], rtol=1e-6, atol=1e-6)


def test_chunked_loss_is_the_mean_over_kept_tokens() -> None:
    adapter = load_adapter("torchtune")
    dtype = fmt("float32")
    c = Case({"logits": fill(dtype, (11, 7), 2.0, 4), "targets": np.array([1, -100] * 5 + [6])}, {"ignore_index": -100})
    with outside_hypothesis():
        check_forward(adapter, "cross_entropy_mean", c, dtype, Record("ce", "cross_entropy_mean", "", ""))


LLAMA3 = (
    ("factor", 8.0),
    ("high_freq_factor", 4.0),
    ("low_freq_factor", 1.0),
    ("original_max_position_embeddings", 8192),
    ("type", "llama3"),
)


@pytest.mark.parametrize("scaling", [(), LLAMA3])
def test_far_positions_use_the_whole_cache_s_rows(scaling: tuple) -> None:
    """Past 2^20 positions the module's cache holds only the rows asked for: each is bit for bit the row the
    whole cache holds (here over 70,000 positions, where the whole cache is cheap)."""
    from transformer_conformance.adapters.torchtune.adapter import _new_rope_module, far_rows

    whole = _new_rope_module(64, 500000.0, 70_000, scaling)
    positions = torch.tensor([69_999, 3, 65_537, 3, 12_345])
    far, rows = far_rows(_new_rope_module(64, 500000.0, 1, scaling), positions)
    assert far.cache.shape[0] == 4  # the distinct positions only
    assert torch.equal(far.cache[rows], whole.cache[positions])


@pytest.mark.parametrize("scale", [0.125, 1.0])
def test_an_explicit_scale_runs_through_gemma2_attention(scale: float) -> None:
    """A scale other than 1/√head_dim is Gemma2Attention's query_pre_attn_scalar (the scale s given as s⁻²),
    checked against the oracle."""
    adapter = load_adapter("torchtune")
    dtype = fmt("float32")
    c = case("attention", dtype)
    with outside_hypothesis():
        check_forward(
            adapter,
            "attention",
            Case(c.inputs, dict(c.params, scale=scale), c.about),
            dtype,
            Record("a", "attention", "", ""),
        )

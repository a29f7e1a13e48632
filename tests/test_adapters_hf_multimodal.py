"""hf-qwen2-vl and hf-qwen3-vl (M-RoPE through the VL text models' rotary embeddings) and hf-llama4's attention
temperature (a NoPE layer of ``Llama4TextAttention``): each loads, declares what its model code has, agrees with the
oracle on a small case and refuses, in one line, what the code cannot take."""

from __future__ import annotations

import numpy as np
import pytest

from transformer_conformance.adapters.extras import EXTRAS
from transformer_conformance.adapters.registry import GROUPS, load_adapter
from transformer_conformance.reference import attention_temperature as temp
from transformer_conformance.reference import mrope

pytest.importorskip("transformers")

IMAGE = np.stack([np.full(6, 4), 4 + np.arange(6) // 3, 4 + np.arange(6) % 3]).astype(np.int64)


@pytest.mark.parametrize(("name", "streams"), [("hf-qwen2-vl", "sections"), ("hf-qwen3-vl", "interleaved")])
def test_mrope_families(name: str, streams: str) -> None:
    adapter = load_adapter(name)
    assert EXTRAS[name] == "hf" and name in GROUPS["hf-families"]
    assert set(adapter.capabilities) == {"mrope"}
    assert adapter.capabilities["mrope"].declared("streams", mrope.STREAMS) == (streams,)
    x = np.random.default_rng(0).standard_normal((2, 6, 16)).astype(np.float32)
    params = {"base": 1_000_000.0, "sections": (2, 3, 3), "streams": streams}
    got = adapter.forward("mrope", {"x": x, "positions": IMAGE}, params)
    want = mrope.mrope(x.astype(np.float64), IMAGE, (2, 3, 3), 1_000_000.0, streams, "half")  # type: ignore[arg-type]
    np.testing.assert_allclose(got, want, rtol=0, atol=2e-6)
    other = "interleaved" if streams == "sections" else "sections"
    with pytest.raises(NotImplementedError, match=f"has {streams} streams"):
        adapter.forward("mrope", {"x": x, "positions": IMAGE}, dict(params, streams=other))


def test_llama4_attention_temperature() -> None:
    adapter = load_adapter("hf-llama4")
    assert "attention_temperature" in adapter.capabilities
    q = np.random.default_rng(1).standard_normal((3, 5, 8)).astype(np.float32)
    pos = np.arange(1021, 1026)  # the step at p + 1 = 1024
    params = {"floor_scale": 1024, "attn_scale": 0.5}
    got = adapter.forward("attention_temperature", {"q": q, "positions": pos}, params)
    want = temp.attention_temperature(q.astype(np.float64), pos, 1024, 0.5)
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=0)
    grad = adapter.vjp("attention_temperature", {"q": q, "positions": pos}, params, np.ones_like(q))["q"]
    np.testing.assert_allclose(
        grad, np.broadcast_to(temp.temperature_scales(pos, 1024, 0.5)[:, None], q.shape), rtol=1e-6
    )
    with pytest.raises(NotImplementedError, match="consecutive positions"):
        adapter.forward("attention_temperature", {"q": q, "positions": pos * 2}, params)


def test_qwen2_vl_refuses_a_cos_layout_it_does_not_know() -> None:
    """hf-qwen2-vl picks its rotation by the cos layout the release's rotary embedding returns: merged (B, T, D) or
    per stream (3, B, T, D); any other layout is refused, not rotated by a guess."""
    torch = pytest.importorskip("torch")
    adapter = load_adapter("hf-qwen2-vl")
    q = torch.zeros(1, 1, 2, 4)
    odd = torch.ones(2, 1, 2, 4)  # two streams: neither layout
    with pytest.raises(NotImplementedError, match="neither merged nor per stream"):
        adapter.rotate(q, odd, odd, (1, 1, 0))  # type: ignore[attr-defined]

"""The float64 oracle of sliding-window, chunked and sink attention (reference/local_attention.py): each hand-written
VJP against central finite differences (``tests/finite_diff.py``), and each mask and the sink against small
independent computations — the window counts of the libraries that differ, Llama 4's chunks, gpt-oss's sink as a
logit with no value."""

from __future__ import annotations

import numpy as np
import pytest
from numpy.typing import NDArray

from tests.finite_diff import assert_vjp
from transformer_conformance.reference import local_attention as loc
from transformer_conformance.reference.attention import attention

F64 = NDArray[np.float64]
SHAPES = [(4, 2, 3, 6, 3), (3, 1, 5, 5, 2)]  # H_q, H_kv, L_q, L_k, D (GQA with fewer queries; MQA, prefill)


def _qkv(seed: int, shape: tuple[int, ...]) -> tuple[F64, F64, F64, F64, np.random.Generator]:
    hq, hkv, lq, lk, d = shape
    rng = np.random.default_rng(seed)
    q, k, v = (rng.standard_normal((2, h, n, d)) for h, n in ((hq, lq), (hkv, lk), (hkv, lk)))
    return q, k, v, rng.standard_normal((2, hq, lq, d)), rng


@pytest.mark.parametrize("counts", loc.WINDOW_COUNTS)
@pytest.mark.parametrize("window", [1, 2, 9])
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_sliding_window_vjp_matches_finite_differences(shape: tuple[int, ...], window: int, counts: str) -> None:
    q, k, v, g, rng = _qkv(window, shape)
    kw = {"window": window, "counts": counts, "softcap": 3.0}
    dq, dk, dv = loc.sliding_window_attention_vjp(q, k, v, g, **kw)  # type: ignore[arg-type]
    assert_vjp(lambda a: g * loc.sliding_window_attention(a, k, v, **kw), q, dq, rng)  # type: ignore[arg-type]
    assert_vjp(lambda a: g * loc.sliding_window_attention(q, a, v, **kw), k, dk, rng)  # type: ignore[arg-type]
    assert_vjp(lambda a: g * loc.sliding_window_attention(q, k, a, **kw), v, dv, rng)  # type: ignore[arg-type]


@pytest.mark.parametrize("chunk", [1, 2, 4])
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_chunked_vjp_matches_finite_differences(shape: tuple[int, ...], chunk: int) -> None:
    q, k, v, g, rng = _qkv(chunk, shape)
    dq, dk, dv = loc.chunked_attention_vjp(q, k, v, g, chunk, scale=0.7)
    assert_vjp(lambda a: g * loc.chunked_attention(a, k, v, chunk, scale=0.7), q, dq, rng)
    assert_vjp(lambda a: g * loc.chunked_attention(q, a, v, chunk, scale=0.7), k, dk, rng)
    assert_vjp(lambda a: g * loc.chunked_attention(q, k, a, chunk, scale=0.7), v, dv, rng)


@pytest.mark.parametrize("causal, window", [(False, None), (True, None), (True, 2)])
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_sink_vjp_matches_finite_differences(shape: tuple[int, ...], causal: bool, window: int | None) -> None:
    q, k, v, g, rng = _qkv(3, shape)
    sinks = rng.standard_normal(shape[0]) * 2.0
    kw = {"causal": causal, "window": window}
    dq, dk, dv, ds = loc.sink_attention_vjp(q, k, v, sinks, g, **kw)  # type: ignore[arg-type]
    assert_vjp(lambda a: g * loc.sink_attention(a, k, v, sinks, **kw), q, dq, rng)  # type: ignore[arg-type]
    assert_vjp(lambda a: g * loc.sink_attention(q, a, v, sinks, **kw), k, dk, rng)  # type: ignore[arg-type]
    assert_vjp(lambda a: g * loc.sink_attention(q, k, a, sinks, **kw), v, dv, rng)  # type: ignore[arg-type]
    assert_vjp(lambda a: g * loc.sink_attention(q, k, v, a, **kw), sinks, ds, rng)  # type: ignore[arg-type]


def test_window_counts() -> None:
    """Inclusive: W keys, the query's own among them (HF's sliding_window); exclusive: W before it, W + 1 in all."""
    inclusive = loc.window_mask(1, 6, 3, counts="inclusive")[0]
    exclusive = loc.window_mask(1, 6, 3, counts="exclusive")[0]
    assert inclusive.tolist() == [False, False, False, True, True, True]
    assert exclusive.tolist() == [False, False, True, True, True, True]
    top_left = loc.window_mask(2, 6, 2, alignment="top_left")
    assert top_left.tolist() == [[True] + [False] * 5, [True, True] + [False] * 4]


def test_chunks_follow_token_positions() -> None:
    """Llama 4: query token p sees key j iff j ≤ p and ⌊j/C⌋ = ⌊p/C⌋; with L_q < L_k the queries are the last tokens."""
    full = loc.chunk_mask(6, 6, 4)
    assert full[5].tolist() == [False] * 4 + [True, True] and full[3].tolist() == [True] * 4 + [False] * 2
    assert np.array_equal(loc.chunk_mask(2, 6, 4), full[4:])


@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_long_spans_and_minus_infinity_sinks_are_causal_attention(shape: tuple[int, ...]) -> None:
    q, k, v, _, _ = _qkv(5, shape)
    causal = attention(q, k, v, causal=True)
    lk = shape[3]
    for counts in loc.WINDOW_COUNTS:
        np.testing.assert_allclose(loc.sliding_window_attention(q, k, v, lk, counts=counts), causal, rtol=1e-13)  # type: ignore[arg-type]
    np.testing.assert_allclose(loc.chunked_attention(q, k, v, lk), causal, rtol=1e-13)
    np.testing.assert_allclose(loc.sink_attention(q, k, v, np.full(shape[0], -np.inf)), causal, rtol=1e-13)


def test_a_sink_is_a_key_with_no_value() -> None:
    """Σ_j e^{s_j} v_j / (Σ_j e^{s_j} + e^σ): one more key whose logit is σ for every query and whose value is 0."""
    q, k, v, _, rng = _qkv(7, (2, 2, 3, 3, 2))
    sinks = rng.standard_normal(2)
    out = loc.sink_attention(q, k, v, sinks, causal=False)
    logits = np.einsum("bhqd,bhkd->bhqk", q, k) / np.sqrt(2.0)
    e = np.exp(logits)
    want = np.einsum("bhqk,bhkd->bhqd", e, v) / (e.sum(-1, keepdims=True) + np.exp(sinks)[None, :, None, None])
    np.testing.assert_allclose(out, want, rtol=1e-13)

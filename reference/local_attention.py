"""Attention over a local span of keys, and attention with sinks: sliding-window, chunked and sink attention with
their hand-derived VJPs, on the masked-attention core of ``reference/attention.py``.

* Sliding window — Beltagy, Peters & Cohan 2020, *Longformer* §3.1; Jiang et al. 2023, *Mistral 7B* §2 (position i
  of a layer attends to the previous layer's positions from i − W to i); Gemma Team 2024, *Gemma 2* §2 (local layers
  of window 4096 alternating with global ones).
* Chunked — Meta 2025, *Llama 4* model card and reference code (local layers: a key is visible iff it is in the
  query's chunk of 8192 tokens, causally).
* Sinks — Xiao et al. 2024, *Efficient Streaming Language Models with Attention Sinks* (a learnable sink token);
  OpenAI 2025, *gpt-oss-120b & gpt-oss-20b Model Card* (a learned bias per head in the
  softmax's denominator; banded sliding-window layers of 128 tokens alternating with dense ones).

Positions: key j is token j; query i is token i + L_k − L_q (``bottom_right``, as in decoding with a KV cache) or
token i (``top_left``), the declared causal alignment of ``reference/attention.py``. Every mask here is causal.

What "window W" counts differs between correct libraries, so it is a declared convention, ``sliding_window``:
``inclusive`` — the W keys include the query's own token, p − j < W (HF transformers' ``sliding_window``, mlx-lm,
Gemma's and Mistral's model code); ``exclusive`` — W keys before the query's own, p − j ≤ W, W + 1 in all
(flash-attention's ``window_size=(W, 0)``, ``jax.nn.dot_product_attention``'s ``local_window_size``, the Mistral
paper's i − W … i).
"""

from __future__ import annotations

from typing import Literal

import numpy as np
from numpy.typing import NDArray

from transformer_conformance.reference.attention import Alignment, masked_attention, masked_attention_vjp

F64 = NDArray[np.float64]
WindowCount = Literal["inclusive", "exclusive"]
WINDOW_COUNTS: tuple[WindowCount, ...] = ("inclusive", "exclusive")


def query_positions(lq: int, lk: int, alignment: Alignment = "bottom_right") -> NDArray[np.intp]:
    """The token position of each query: i + L_k − L_q bottom-right, i top-left."""
    if alignment not in ("bottom_right", "top_left"):
        raise ValueError(f"unknown causal alignment {alignment!r}; expected 'bottom_right' or 'top_left'")
    return np.arange(lq) + (lk - lq if alignment == "bottom_right" else 0)


def window_reach(window: int, counts: WindowCount = "inclusive") -> int:
    """How far back a query sees: p − j ≤ W − 1 (inclusive) or ≤ W (exclusive)."""
    if counts not in WINDOW_COUNTS:
        raise ValueError(f"unknown sliding-window count {counts!r}; expected 'inclusive' or 'exclusive'")
    if window < 1:
        raise ValueError(f"a sliding window is at least 1 token, not {window}")
    return window - 1 if counts == "inclusive" else window


def window_mask(
    lq: int, lk: int, window: int | None, alignment: Alignment = "bottom_right", counts: WindowCount = "inclusive"
) -> NDArray[np.bool_]:
    """True where query i (token p) may see key j: j ≤ p and, with a window, p − j within its reach."""
    p = query_positions(lq, lk, alignment)[:, None]
    j = np.arange(lk)[None, :]
    mask = j <= p
    if window is not None:
        mask &= p - j <= window_reach(window, counts)
    return mask


def chunk_mask(lq: int, lk: int, chunk: int, alignment: Alignment = "bottom_right") -> NDArray[np.bool_]:
    """True where query i (token p) may see key j: j ≤ p and ⌊j / C⌋ = ⌊p / C⌋ (Llama 4's chunked attention)."""
    if chunk < 1:
        raise ValueError(f"an attention chunk is at least 1 token, not {chunk}")
    p = query_positions(lq, lk, alignment)[:, None]
    j = np.arange(lk)[None, :]
    return (j <= p) & (j // chunk == p // chunk)


def sliding_window_attention(
    q: F64,
    k: F64,
    v: F64,
    window: int,
    alignment: Alignment = "bottom_right",
    counts: WindowCount = "inclusive",
    softcap: float | None = None,
    scale: float | None = None,
) -> F64:
    """Causal attention in which each query sees only the keys of its window (GQA and soft-capping as attention)."""
    mask = window_mask(q.shape[2], k.shape[2], window, alignment, counts)
    return masked_attention(q, k, v, mask, softcap, scale)


def sliding_window_attention_vjp(
    q: F64,
    k: F64,
    v: F64,
    g: F64,
    window: int,
    alignment: Alignment = "bottom_right",
    counts: WindowCount = "inclusive",
    softcap: float | None = None,
    scale: float | None = None,
) -> tuple[F64, F64, F64]:
    """(∂q, ∂k, ∂v) of :func:`sliding_window_attention`: the masked-attention VJP with the window's mask."""
    mask = window_mask(q.shape[2], k.shape[2], window, alignment, counts)
    dq, dk, dv, _ = masked_attention_vjp(q, k, v, g, mask, softcap, scale)
    return dq, dk, dv


def chunked_attention(
    q: F64, k: F64, v: F64, chunk: int, alignment: Alignment = "bottom_right", scale: float | None = None
) -> F64:
    """Causal attention in which each query sees only the keys of its own chunk."""
    return masked_attention(q, k, v, chunk_mask(q.shape[2], k.shape[2], chunk, alignment), None, scale)


def chunked_attention_vjp(
    q: F64, k: F64, v: F64, g: F64, chunk: int, alignment: Alignment = "bottom_right", scale: float | None = None
) -> tuple[F64, F64, F64]:
    """(∂q, ∂k, ∂v) of :func:`chunked_attention`."""
    dq, dk, dv, _ = masked_attention_vjp(q, k, v, g, chunk_mask(q.shape[2], k.shape[2], chunk, alignment), None, scale)
    return dq, dk, dv


def _sink_mask(
    lq: int, lk: int, causal: bool, window: int | None, alignment: Alignment, counts: WindowCount
) -> NDArray[np.bool_] | None:
    if window is not None:
        return window_mask(lq, lk, window, alignment, counts)  # a window is causal
    return window_mask(lq, lk, None, alignment) if causal else None


def sink_attention(
    q: F64,
    k: F64,
    v: F64,
    sinks: F64,
    causal: bool = True,
    window: int | None = None,
    alignment: Alignment = "bottom_right",
    counts: WindowCount = "inclusive",
    scale: float | None = None,
) -> F64:
    """Attention whose softmax has one more logit per query head, the head's sink σ_h, dropped after it:
    O = Σ_j e^{s_j} v_j / (Σ_j e^{s_j} + e^{σ_h}). ``window``: causal and sliding (gpt-oss's local layers)."""
    mask = _sink_mask(q.shape[2], k.shape[2], causal, window, alignment, counts)
    return masked_attention(q, k, v, mask, None, scale, sinks)


def sink_attention_vjp(
    q: F64,
    k: F64,
    v: F64,
    sinks: F64,
    g: F64,
    causal: bool = True,
    window: int | None = None,
    alignment: Alignment = "bottom_right",
    counts: WindowCount = "inclusive",
    scale: float | None = None,
) -> tuple[F64, F64, F64, F64]:
    """(∂q, ∂k, ∂v, ∂sinks) of :func:`sink_attention`: ∂σ_h = −Σ_{b,i} P_sink·Σ_j ∂P_j P_j."""
    mask = _sink_mask(q.shape[2], k.shape[2], causal, window, alignment, counts)
    dq, dk, dv, ds = masked_attention_vjp(q, k, v, g, mask, None, scale, sinks)
    assert ds is not None
    return dq, dk, dv, ds

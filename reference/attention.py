"""Scaled dot-product attention: causal masking and its alignment, GQA/MQA, soft-capping, QK-norm, RoPE on Q
and K, with hand-derived VJPs.

seed-002 §3.1.1 (multi-head scaled dot-product attention), §3.2.2 (QK-norm, logit soft-capping), §3.4.2 ("RoPE
applies only to Q and K, not V"); seed-000 §Rotary position embeddings (KV cache), §A modern decoder block
(grouped-query attention); seed-004 §Attention is permutation-blind.

Shapes: q (B, H_q, L_q, D), k (B, H_kv, L_k, D), v (B, H_kv, L_k, D_v), H_q a multiple of H_kv. Query head h
reads KV head h // (H_q / H_kv) (GQA; MQA when H_kv = 1, MHA when H_kv = H_q).

Causal alignment when L_q < L_k: ``bottom_right`` — query i is the (L_k − L_q + i)-th token and sees keys
j ≤ i + L_k − L_q, as in decoding with a KV cache and chunked prefill; ``top_left`` — query i sees keys j ≤ i,
as ``is_causal`` in PyTorch's and JAX's fused attention. Both agree when L_q = L_k.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
from numpy.typing import NDArray

from transformer_conformance.reference.norms import rms_norm, rms_norm_vjp
from transformer_conformance.reference.rope import Layout, rope, rope_vjp

F64 = NDArray[np.float64]
Alignment = Literal["bottom_right", "top_left"]


def causal_mask(lq: int, lk: int, alignment: Alignment = "bottom_right") -> NDArray[np.bool_]:
    """True where query i may attend to key j: j ≤ i + (L_k − L_q) bottom-right, j ≤ i top-left."""
    if alignment not in ("bottom_right", "top_left"):
        raise ValueError(f"unknown causal alignment {alignment!r}; expected 'bottom_right' or 'top_left'")
    offset = lk - lq if alignment == "bottom_right" else 0
    return np.arange(lk)[None, :] <= np.arange(lq)[:, None] + offset


def kv_head_index(h_q: int, h_kv: int) -> NDArray[np.intp]:
    """The KV head each query head reads: h // (H_q / H_kv) (consecutive query heads share a KV head)."""
    if h_q % h_kv:
        raise ValueError(f"{h_q} query heads are not a multiple of {h_kv} KV heads")
    return np.arange(h_q) // (h_q // h_kv)


def _expand(kv: F64, h_q: int) -> F64:
    """KV heads repeated per group to one per query head: (B, H_kv, L, ·) -> (B, H_q, L, ·)."""
    return kv[:, kv_head_index(h_q, kv.shape[1])]


def _reduce(dkv: F64, h_kv: int) -> F64:
    """The adjoint of :func:`_expand`: sum each group's gradients back onto its KV head."""
    b, h_q, length, width = dkv.shape
    return dkv.reshape(b, h_kv, h_q // h_kv, length, width).sum(axis=2)


def _scale(d: int, scale: float | None) -> float:
    return 1.0 / np.sqrt(d) if scale is None else float(scale)


def _probs(
    q: F64, k: F64, mask: NDArray[np.bool_] | None, softcap: float | None, scale: float | None, sinks: F64 | None = None
) -> tuple[F64, F64]:
    """(P, raw logits l = QKᵀ·scale): P = softmax(cap(l) masked) over the keys, with one more column, last, for
    each head's sink logit when ``sinks`` (H_q,) is given (the sink joins the denominator and has no value)."""
    ke = _expand(k, q.shape[1])
    raw = np.einsum("bhqd,bhkd->bhqk", q, ke) * _scale(q.shape[-1], scale)
    s = softcap * np.tanh(raw / softcap) if softcap else raw
    if mask is not None:
        s = np.where(mask, s, -np.inf)
    if sinks is not None:
        column = np.broadcast_to(np.asarray(sinks, dtype=np.float64)[None, :, None, None], (*s.shape[:-1], 1))
        s = np.concatenate([s, column], axis=-1)
    s = s - np.max(s, axis=-1, keepdims=True)
    e = np.exp(s)
    return e / np.sum(e, axis=-1, keepdims=True), raw


def masked_attention(
    q: F64,
    k: F64,
    v: F64,
    mask: NDArray[np.bool_] | None,
    softcap: float | None = None,
    scale: float | None = None,
    sinks: F64 | None = None,
) -> F64:
    """softmax(cap(QKᵀ·scale) masked to ``mask`` (L_q, L_k), with the heads' ``sinks`` in the denominator)·V."""
    p, _ = _probs(q, k, mask, softcap, scale, sinks)
    return np.einsum("bhqk,bhkd->bhqd", p[..., : k.shape[2]], _expand(v, q.shape[1]))


def masked_attention_vjp(
    q: F64,
    k: F64,
    v: F64,
    g: F64,
    mask: NDArray[np.bool_] | None,
    softcap: float | None = None,
    scale: float | None = None,
    sinks: F64 | None = None,
) -> tuple[F64, F64, F64, F64 | None]:
    """VJP of :func:`masked_attention`: (∂L/∂Q, ∂L/∂K, ∂L/∂V, ∂L/∂sinks or None).

    With O = P·V: ∂V = Pᵀ·g, ∂P = g·Vᵀ, ∂S = P ⊙ (∂P − rowsum(∂P ⊙ P)) (the softmax Jacobian; a sink column has
    ∂P = 0, so its ∂S is −P_sink·rowsum(∂P ⊙ P), summed over batch and queries into ∂sink_h),
    ∂l = ∂S ⊙ (1 − tanh²(l/c)) under soft-capping, ∂Q = ∂l·K·scale, ∂K = ∂lᵀ·Q·scale; KV gradients summed
    over the query heads of their group.
    """
    h_q, h_kv, lk = q.shape[1], k.shape[1], k.shape[2]
    sc = _scale(q.shape[-1], scale)
    p_all, raw = _probs(q, k, mask, softcap, scale, sinks)
    p = p_all[..., :lk]
    ke, ve = _expand(k, h_q), _expand(v, h_q)
    dv = np.einsum("bhqk,bhqd->bhkd", p, g)
    dp = np.einsum("bhqd,bhkd->bhqk", g, ve)
    row = np.sum(dp * p, axis=-1, keepdims=True)
    ds = p * (dp - row)
    dsinks = None if sinks is None else -np.sum(p_all[..., lk:] * row, axis=(0, 2, 3))
    if softcap:
        ds = ds * (1.0 - np.tanh(raw / softcap) ** 2)
    dq = np.einsum("bhqk,bhkd->bhqd", ds, ke) * sc
    dk = np.einsum("bhqk,bhqd->bhkd", ds, q) * sc
    return dq, _reduce(dk, h_kv), _reduce(dv, h_kv), dsinks


def attention(
    q: F64,
    k: F64,
    v: F64,
    causal: bool = False,
    alignment: Alignment = "bottom_right",
    softcap: float | None = None,
    scale: float | None = None,
) -> F64:
    """softmax(cap(QKᵀ/√d_k) + mask)·V per query head, head h reading KV head h // (H_q/H_kv)."""
    mask = causal_mask(q.shape[2], k.shape[2], alignment) if causal else None
    return masked_attention(q, k, v, mask, softcap, scale)


def attention_vjp(
    q: F64,
    k: F64,
    v: F64,
    g: F64,
    causal: bool = False,
    alignment: Alignment = "bottom_right",
    softcap: float | None = None,
    scale: float | None = None,
) -> tuple[F64, F64, F64]:
    """VJP of :func:`attention`: (∂L/∂Q, ∂L/∂K, ∂L/∂V), as :func:`masked_attention_vjp` with the causal mask."""
    mask = causal_mask(q.shape[2], k.shape[2], alignment) if causal else None
    dq, dk, dv, _ = masked_attention_vjp(q, k, v, g, mask, softcap, scale)
    return dq, dk, dv


def qk_norm_attention(
    q: F64,
    k: F64,
    v: F64,
    q_weight: F64,
    k_weight: F64,
    eps: float,
    causal: bool = False,
    alignment: Alignment = "bottom_right",
    softcap: float | None = None,
) -> F64:
    """Attention on RMSNorm(q)·γ_q and RMSNorm(k)·γ_k over the head dimension (seed-002 §3.2.2: "apply a
    normalization layer - typically RMSNorm - to the query and key tensors independently")."""
    return attention(rms_norm(q, q_weight, eps), rms_norm(k, k_weight, eps), v, causal, alignment, softcap)


def qk_norm_attention_vjp(
    q: F64,
    k: F64,
    v: F64,
    q_weight: F64,
    k_weight: F64,
    eps: float,
    g: F64,
    causal: bool = False,
    alignment: Alignment = "bottom_right",
    softcap: float | None = None,
) -> tuple[F64, F64, F64, F64, F64]:
    """VJP of :func:`qk_norm_attention`: (∂q, ∂k, ∂v, ∂γ_q, ∂γ_k), the attention VJP chained through RMSNorm."""
    qn, kn = rms_norm(q, q_weight, eps), rms_norm(k, k_weight, eps)
    dqn, dkn, dv = attention_vjp(qn, kn, v, g, causal, alignment, softcap)
    dq, dqw = rms_norm_vjp(q, q_weight, eps, dqn)
    dk, dkw = rms_norm_vjp(k, k_weight, eps, dkn)
    return dq, dk, dv, dqw, dkw


def rope_attention(
    q: F64,
    k: F64,
    v: F64,
    q_positions: NDArray[np.int64],
    k_positions: NDArray[np.int64],
    causal: bool = False,
    alignment: Alignment = "bottom_right",
    softcap: float | None = None,
    base: float = 10000.0,
    layout: Layout = "interleaved",
) -> F64:
    """Attention on R·q and R·k, V untouched (seed-002 §3.4.2: "RoPE applies only to Q and K, not V")."""
    rq = rope(q, q_positions, base, layout=layout)
    rk = rope(k, k_positions, base, layout=layout)
    return attention(rq, rk, v, causal, alignment, softcap)


def rope_attention_vjp(
    q: F64,
    k: F64,
    v: F64,
    q_positions: NDArray[np.int64],
    k_positions: NDArray[np.int64],
    g: F64,
    causal: bool = False,
    alignment: Alignment = "bottom_right",
    softcap: float | None = None,
    base: float = 10000.0,
    layout: Layout = "interleaved",
) -> tuple[F64, F64, F64]:
    """VJP of :func:`rope_attention`: the attention VJP with ∂q, ∂k rotated back by R_mᵀ; ∂v as it is."""
    rq = rope(q, q_positions, base, layout=layout)
    rk = rope(k, k_positions, base, layout=layout)
    drq, drk, dv = attention_vjp(rq, rk, v, g, causal, alignment, softcap)
    return rope_vjp(q, q_positions, drq, base, layout=layout), rope_vjp(k, k_positions, drk, base, layout=layout), dv

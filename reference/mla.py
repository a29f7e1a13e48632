"""Multi-head latent attention (MLA): keys and values decompressed per head from one shared latent, a decoupled
RoPE slice shared by every head, and the weight-absorbed form inference engines run, which equals the naive one.

ref: DeepSeek-V2 (arXiv:2405.04434 §2.1.2 "Low-Rank Key-Value Joint Compression", §2.1.3 "Decoupled Rotary
Position Embedding"); DeepSeek-V3 (arXiv:2412.19437 §2.1.1); YaRN (arXiv:2309.00071 §3.4) for the softmax scale's
mscale as DeepSeek's code applies it.

With the latent c_j (D_c) of key j after its norm, the per-head up-projections W_UK[h] (D_c, D_n) and W_UV[h]
(D_c, D_v), the query's two parts q^C (D_n) and q^R (D_r) and the shared rope key k^R_j (D_r):

* naive: k_{h,j} = [c_j·W_UK[h], RoPE(k^R_j)], v_{h,j} = c_j·W_UV[h], q_h = [q^C_h, RoPE(q^R_h)], then softmax
  attention with scale σ;
* absorbed: q̃_h = q^C_h·W_UK[h]ᵀ (D_c), scores σ·(q̃_h·c_j + RoPE(q^R_h)·RoPE(k^R_j)), o_h = (P·c)·W_UV[h] — the
  same numbers in exact arithmetic, with no key or value ever formed per head.

σ = mscale² / √(D_n + D_r), mscale = 0.1·m·ln s + 1 for a YaRN factor s > 1 and DeepSeek's ``mscale_all_dim`` m
(1 without YaRN).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, Literal

import numpy as np
from numpy.typing import NDArray

from transformer_conformance.reference.attention import Alignment, causal_mask, masked_attention, masked_attention_vjp
from transformer_conformance.reference.rope import Layout, rope, rope_vjp

F64 = NDArray[np.float64]
I64 = NDArray[np.int64]
Form = Literal["naive", "absorbed"]

FORMS = ("naive", "absorbed")


def yarn_mscale(factor: float, mscale_all_dim: float) -> float:
    """DeepSeek's yarn_get_mscale: 0.1·m·ln s + 1 for s > 1, else 1."""
    return 1.0 if factor <= 1 else 0.1 * mscale_all_dim * math.log(factor) + 1.0


def mla_scale(d_nope: int, d_rope: int, mscale: Mapping[str, Any] | None = None) -> float:
    """σ = mscale² / √(D_n + D_r); ``mscale`` None or {"factor": s, "mscale_all_dim": m}."""
    m = 1.0 if not mscale else yarn_mscale(float(mscale["factor"]), float(mscale["mscale_all_dim"]))
    return m * m / math.sqrt(d_nope + d_rope)


def _naive_qkv(
    q_nope: F64, q_rope: F64, c: F64, k_rope: F64, w_uk: F64, w_uv: F64, pq: I64, pk: I64, base: float, layout: Layout
) -> tuple[F64, F64, F64]:
    """The per-head q, k, v of the naive form: (B, H, L_q, D_n + D_r), (B, H, L_k, D_n + D_r), (B, H, L_k, D_v)."""
    k_nope = np.einsum("blc,hcd->bhld", c, w_uk)
    rk = np.broadcast_to(rope(k_rope, pk, base, layout=layout)[:, None], (*k_nope.shape[:3], k_rope.shape[-1]))
    q = np.concatenate([q_nope, rope(q_rope, pq, base, layout=layout)], axis=-1)
    k = np.concatenate([k_nope, rk], axis=-1)
    v = np.einsum("blc,hcd->bhld", c, w_uv)
    return q, k, v


def mla_attention(
    q_nope: F64,
    q_rope: F64,
    c: F64,
    k_rope: F64,
    w_uk: F64,
    w_uv: F64,
    q_positions: I64,
    k_positions: I64,
    causal: bool = True,
    alignment: Alignment = "bottom_right",
    base: float = 10000.0,
    layout: Layout = "interleaved",
    mscale: Mapping[str, Any] | None = None,
    form: Form = "naive",
) -> F64:
    """MLA's output (B, H, L_q, D_v): q_nope (B, H, L_q, D_n), q_rope (B, H, L_q, D_r), c (B, L_k, D_c), k_rope
    (B, L_k, D_r), w_uk (H, D_c, D_n), w_uv (H, D_c, D_v); RoPE on q_rope and k_rope at their positions."""
    scale = mla_scale(q_nope.shape[-1], q_rope.shape[-1], mscale)
    mask = causal_mask(q_nope.shape[2], c.shape[1], alignment) if causal else None
    if form == "naive":
        q, k, v = _naive_qkv(q_nope, q_rope, c, k_rope, w_uk, w_uv, q_positions, k_positions, base, layout)
        return masked_attention(q, k, v, mask, None, scale)
    if form != "absorbed":
        raise ValueError(f"unknown MLA form {form!r}; expected one of {', '.join(FORMS)}")
    q_lat = np.einsum("bhqd,hcd->bhqc", q_nope, w_uk)
    q = np.concatenate([q_lat, rope(q_rope, q_positions, base, layout=layout)], axis=-1)
    k = np.concatenate([c, rope(k_rope, k_positions, base, layout=layout)], axis=-1)[:, None]
    o_lat = masked_attention(q, k, c[:, None], mask, None, scale)
    return np.einsum("bhqc,hcd->bhqd", o_lat, w_uv)


def mla_attention_vjp(
    q_nope: F64,
    q_rope: F64,
    c: F64,
    k_rope: F64,
    w_uk: F64,
    w_uv: F64,
    q_positions: I64,
    k_positions: I64,
    g: F64,
    causal: bool = True,
    alignment: Alignment = "bottom_right",
    base: float = 10000.0,
    layout: Layout = "interleaved",
    mscale: Mapping[str, Any] | None = None,
) -> tuple[F64, F64, F64, F64, F64, F64]:
    """(∂q_nope, ∂q_rope, ∂c, ∂k_rope, ∂w_uk, ∂w_uv), through the naive form (both forms have the same VJP):
    attention's VJP on the per-head q, k, v, then each projection and rotation transposed, the shared parts
    (c, k_rope) summed over heads."""
    d_n = q_nope.shape[-1]
    scale = mla_scale(d_n, q_rope.shape[-1], mscale)
    mask = causal_mask(q_nope.shape[2], c.shape[1], alignment) if causal else None
    q, k, v = _naive_qkv(q_nope, q_rope, c, k_rope, w_uk, w_uv, q_positions, k_positions, base, layout)
    dq, dk, dv, _ = masked_attention_vjp(q, k, v, g, mask, None, scale)
    dk_nope = dk[..., :d_n]
    dc = np.einsum("bhld,hcd->blc", dk_nope, w_uk) + np.einsum("bhld,hcd->blc", dv, w_uv)
    dw_uk = np.einsum("blc,bhld->hcd", c, dk_nope)
    dw_uv = np.einsum("blc,bhld->hcd", c, dv)
    dq_rope = rope_vjp(q_rope, q_positions, dq[..., d_n:], base, layout=layout)
    dk_rope = rope_vjp(k_rope, k_positions, dk[..., d_n:].sum(axis=1), base, layout=layout)
    return dq[..., :d_n], dq_rope, dc, dk_rope, dw_uk, dw_uv

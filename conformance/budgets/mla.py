"""Budgets of multi-head latent attention, forward and backward, in each form (reference/mla.py).

Each form is budgeted as it computes. Naive: the per-head keys and values as products with the latent (D_c terms),
RoPE on the shared slice, then attention on the (D_n + D_r)-wide heads. Absorbed: the query folded into the latent
space (D_n terms), attention whose keys are [latent, RoPE(k_rope)] and whose values are the latent (one KV head for
all), then the value up-projection (D_c terms). The backward follows autodiff of the same steps. A gradient that
sums over heads is bounded as one accumulation over every head's terms at once (a fused up-projection: D_c's
gradient through HF's kv_b_proj sums H·(D_n + D_v) products), which also covers summing head by head.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from transformer_conformance.adapters.contract import Conventions
from transformer_conformance.conformance.budgets import error_model as em
from transformer_conformance.conformance.budgets.attention import (
    _columns,
    _split,
    attention_t,
    masked_attention_vjp_t,
)
from transformer_conformance.conformance.budgets.error_model import Rounding, Tracked
from transformer_conformance.conformance.budgets.rope import rope_trig, rotate
from transformer_conformance.conformance.budgets.rounding import F64, Inputs, rounding
from transformer_conformance.reference.formats import Format
from transformer_conformance.reference.mla import mla_scale

NAMES = ("q_nope", "q_rope", "latent", "k_rope", "w_uk", "w_uv")


def _map(t: Tracked, f: Callable[[F64], F64]) -> Tracked:
    return Tracked(f(t.v), f(t.e), f(t.m))


def _rot(
    r: Rounding, x: Tracked, positions: np.ndarray, params: Mapping[str, Any], conv: Conventions, t: bool
) -> Tracked:
    cos, sin, rd = rope_trig({"base": params.get("base", 10000.0)}, positions, x.v.shape[-1], conv, r)
    return rotate(r, x, cos, sin, rd, conv.rope_layout, transpose=t)


def _setup(
    inputs: Inputs, params: Mapping[str, Any], conv: Conventions, r: Rounding
) -> tuple[dict[str, Tracked], Tracked, Tracked, float, bool]:
    x = {n: em.exact(inputs[n]) for n in NAMES}
    rq = _rot(r, x["q_rope"], inputs["q_positions"], params, conv, False)
    rk = _rot(r, x["k_rope"], inputs["k_positions"], params, conv, False)
    scale = mla_scale(inputs["q_nope"].shape[-1], inputs["q_rope"].shape[-1], params.get("mscale"))
    return x, rq, rk, scale, bool(params.get("causal", True))


def _naive_qkv(r: Rounding, x: dict[str, Tracked], rq: Tracked, rk: Tracked) -> tuple[Tracked, Tracked, Tracked]:
    c = _map(x["latent"], lambda a: a[:, None])  # (B, 1, L_k, D_c)
    k_nope = em.matmul(r, c, _map(x["w_uk"], lambda a: a[None]))  # (B, H, L_k, D_n)
    v = em.matmul(r, c, _map(x["w_uv"], lambda a: a[None]))
    shape = (*k_nope.v.shape[:3], rk.v.shape[-1])
    rk_h = _map(rk, lambda a: np.broadcast_to(a[:, None], shape))
    return _columns(x["q_nope"], rq), _columns(k_nope, rk_h), v


def _absorbed_qk(r: Rounding, x: dict[str, Tracked], rq: Tracked, rk: Tracked) -> tuple[Tracked, Tracked]:
    q_lat = em.matmul(r, x["q_nope"], _map(x["w_uk"], lambda a: np.swapaxes(a, -1, -2)[None]))  # (B, H, L_q, D_c)
    return _columns(q_lat, rq), _map(_columns(x["latent"], rk), lambda a: a[:, None])


def mla_attention(inputs: Inputs, params: Mapping[str, Any], conv: Conventions, dtype: Format) -> Tracked:
    r = rounding("mla_attention", dtype, conv)
    x, rq, rk, scale, causal = _setup(inputs, params, conv, r)
    if params.get("form", "naive") == "naive":
        q, k, v = _naive_qkv(r, x, rq, rk)
        return attention_t(r, q, k, v, causal, conv.causal_alignment, None, scale, r.u_work)
    q, k = _absorbed_qk(r, x, rq, rk)
    o_lat = attention_t(r, q, k, _map(x["latent"], lambda a: a[:, None]), causal, conv.causal_alignment, None, scale)
    return em.matmul(r, o_lat, _map(x["w_uv"], lambda a: a[None]), unit=r.u_work)


def _per_head_rows(t: Tracked) -> Tracked:
    """(B, H, L, D) → (H, B·L, D): each head's rows over the batch, for a weight gradient summed over B and L."""
    b, h, length, d = t.v.shape
    return _map(t, lambda a: np.ascontiguousarray(np.swapaxes(a, 0, 1)).reshape(h, b * length, d))


def _weight_grad(r: Rounding, left: Tracked, right: Tracked, unit: float) -> Tracked:
    """Σ_{b,l} left[b,h,l]ᵀ ⊗ right[b,h,l] for each head: (H, D_left, D_right); left may have one head for all."""
    lh, rh = _per_head_rows(left), _per_head_rows(right)
    return em.matmul(r, _map(lh, lambda a: np.swapaxes(a, -1, -2)), rh, unit=unit)


def _naive_vjp(
    r: Rounding,
    inputs: Inputs,
    x: dict[str, Tracked],
    rq: Tracked,
    rk: Tracked,
    g: Tracked,
    scale: float,
    causal: bool,
    conv: Conventions,
    params: Mapping[str, Any],
) -> dict[str, Tracked]:
    d_n = inputs["q_nope"].shape[-1]
    h = inputs["w_uk"].shape[0]
    q, k, v = _naive_qkv(r, x, rq, rk)
    dq, dk, dv, _ = masked_attention_vjp_t(r, q, k, v, g, causal, conv.causal_alignment, None, scale)
    dq_nope, dq_r = _split(dq, d_n)
    dk_nope, dk_r = _split(dk, d_n)
    # ∂latent: one accumulation over every head's [∂k_nope, ∂v] against [w_uk, w_uv] (H·(D_n + D_v) terms)
    dkv = _columns(dk_nope, dv)  # (B, H, L_k, D_n + D_v)
    b, _, lk, width = dkv.v.shape
    flat = _map(dkv, lambda a: np.ascontiguousarray(np.swapaxes(a, 1, 2)).reshape(b, lk, h * width))
    w = _columns(x["w_uk"], x["w_uv"])  # (H, D_c, D_n + D_v)
    w_flat = _map(w, lambda a: np.ascontiguousarray(np.swapaxes(a, 1, 2)).reshape(h * width, -1))
    dc = em.matmul(r, flat, w_flat, unit=r.u_work)
    c = _map(x["latent"], lambda a: a[:, None])
    # ∂k_rope: summed over heads, then rotated back
    dk_r_sum = _map(em.total(r, _map(dk_r, lambda a: np.moveaxis(a, 1, -1))), lambda a: a[..., 0])  # (B, L_k, D_r)
    return {
        "q_nope": dq_nope,
        "q_rope": _rot(r, dq_r, inputs["q_positions"], params, conv, True),
        "latent": dc,
        "k_rope": _rot(r, dk_r_sum, inputs["k_positions"], params, conv, True),
        "w_uk": _weight_grad(r, c, dk_nope, r.u_work),
        "w_uv": _weight_grad(r, c, dv, r.u_work),
    }


def _absorbed_vjp(
    r: Rounding,
    inputs: Inputs,
    x: dict[str, Tracked],
    rq: Tracked,
    rk: Tracked,
    g: Tracked,
    scale: float,
    causal: bool,
    conv: Conventions,
    params: Mapping[str, Any],
) -> dict[str, Tracked]:
    d_c = inputs["latent"].shape[-1]
    q, k = _absorbed_qk(r, x, rq, rk)
    c = _map(x["latent"], lambda a: a[:, None])
    o_lat = attention_t(r, q, k, c, causal, conv.causal_alignment, None, scale)
    d_olat = em.matmul(r, g, _map(x["w_uv"], lambda a: np.swapaxes(a, -1, -2)[None]))  # (B, H, L_q, D_c)
    dq, dk, dv, _ = masked_attention_vjp_t(r, q, k, c, d_olat, causal, conv.causal_alignment, None, scale)
    dq_lat, dq_r = _split(dq, d_c)
    dk_c, dk_r = _split(dk, d_c)  # (B, 1, L_k, ·): summed over the heads already
    dc = em.add(r, dk_c, dv, unit=r.u_work)
    return {
        "q_nope": em.matmul(r, dq_lat, _map(x["w_uk"], lambda a: a[None]), unit=r.u_work),
        "q_rope": _rot(r, dq_r, inputs["q_positions"], params, conv, True),
        "latent": _map(dc, lambda a: a[:, 0]),
        "k_rope": _rot(r, _map(dk_r, lambda a: a[:, 0]), inputs["k_positions"], params, conv, True),
        "w_uk": _weight_grad(r, dq_lat, x["q_nope"], r.u_work),
        "w_uv": _weight_grad(r, o_lat, g, r.u_work),
    }


def mla_attention_vjp(
    inputs: Inputs, params: Mapping[str, Any], conv: Conventions, dtype: Format, g64: F64
) -> dict[str, Tracked]:
    r = rounding("mla_attention", dtype, conv, grad=True)
    x, rq, rk, scale, causal = _setup(inputs, params, conv, r)
    how = _naive_vjp if params.get("form", "naive") == "naive" else _absorbed_vjp
    return how(r, inputs, x, rq, rk, em.exact(g64), scale, causal, conv, params)


FORWARD = {"mla_attention": mla_attention}
VJP = {"mla_attention": mla_attention_vjp}

"""Error budgets of attention: scaled dot-product attention with its mask, GQA, soft-capping, QK-norm and RoPE,
restated in tracked arithmetic (conformance/budgets/error_model.py), forward and VJP.

The softmax is written as a max-shifted implementation computes it: e_j = exp(s_j − max), P = e / Σ e. The
shift cancels in the ratio, so only each logit's own error and the roundings of the subtraction, exp, sum
and division enter. Masked entries are exact zeros.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from transformer_conformance.adapters.contract import Conventions
from transformer_conformance.conformance.budgets import error_model as em
from transformer_conformance.conformance.budgets.error_model import Rounding, Tracked
from transformer_conformance.conformance.budgets.norms import norm_stats
from transformer_conformance.conformance.budgets.rope import rope_trig, rotate
from transformer_conformance.conformance.budgets.rounding import rounding
from transformer_conformance.reference.attention import causal_mask, kv_head_index
from transformer_conformance.reference.formats import Format

F64 = NDArray[np.float64]
Inputs = Mapping[str, np.ndarray]


def swap(a: Tracked) -> Tracked:
    """Transpose of the last two axes."""
    return Tracked(*(np.swapaxes(t, -1, -2) for t in (a.v, a.e, a.m)))


def heads(a: Tracked, index: np.ndarray) -> Tracked:
    """Select heads (axis 1): KV heads repeated to one per query head."""
    return Tracked(a.v[:, index], a.e[:, index], a.m[:, index])


def reduce_heads(r: Rounding, a: Tracked, h_kv: int, unit: float | None = None) -> Tracked:
    """Sum each group of query heads' gradients onto its KV head (an n-term sum per element)."""
    b, h_q, length, width = a.v.shape
    n = h_q // h_kv

    def grouped(t: F64) -> F64:
        return t.reshape(b, h_kv, n, length, width)

    v = grouped(a.v).sum(axis=2)
    e = grouped(a.e).sum(axis=2) + r.gamma(n) * np.abs(grouped(a.v)).sum(axis=2) + n * r.eta_sum
    return Tracked(v, e + em._store(r, v, unit), grouped(a.m).sum(axis=2))


def scale_by(r: Rounding, a: Tracked, c: float) -> Tracked:
    return em.mul(r, a, em.const(r, c))


def rms_norm_t(r: Rounding, x: Tracked, w: Tracked, eps: float, unit: float | None = None) -> Tracked:
    """RMSNorm of a tracked input (errors carried), as budgets.rms_norm with exact inputs."""
    _, rinv = norm_stats(r, x, eps, centred=False)
    return em.mul(r, em.mul(r, x, rinv), w, unit=unit)


def rms_norm_vjp_t(r: Rounding, x: Tracked, w: Tracked, eps: float, g: Tracked) -> tuple[Tracked, Tracked]:
    """(∂x, ∂γ) of RMSNorm with tracked input and upstream gradient, as budgets.rms_norm_vjp."""
    _, rinv = norm_stats(r, x, eps, centred=False)
    xhat = em.mul(r, x, rinv)
    gw = em.mul(r, g, w)
    c = em.mean(r, em.mul(r, gw, xhat))
    dx = em.mul(r, rinv, em.sub(r, gw, em.mul(r, xhat, c)))
    return dx, em.sum_rows(r, em.mul(r, g, xhat))


def _dtanh(v: F64) -> F64:
    return 1.0 - np.tanh(v) ** 2


@dataclass(frozen=True)
class Probs:
    """The forward's intermediates: probabilities P, logits before capping (scaled), tanh(l/c), the mask, and the
    sinks' own probabilities (B, H, L_q, 1) when the softmax has them."""

    p: Tracked
    raw: Tracked
    tanh: Tracked | None
    mask: NDArray[np.bool_] | None
    sink: Tracked | None = None


def _columns(a: Tracked, b: Tracked) -> Tracked:
    """``a`` with ``b``'s columns appended (the last axis)."""
    shape = (*a.v.shape[:-1], a.v.shape[-1] + b.v.shape[-1])
    return Tracked(
        *(
            np.concatenate([np.broadcast_to(x, a.v.shape), np.broadcast_to(y, b.v.shape)], axis=-1).reshape(shape)
            for x, y in ((a.v, b.v), (a.e, b.e), (a.m, b.m))
        )
    )


def _split(a: Tracked, n: int) -> tuple[Tracked, Tracked]:
    """The first ``n`` columns of ``a`` and the rest."""
    return Tracked(a.v[..., :n], a.e[..., :n], a.m[..., :n]), Tracked(a.v[..., n:], a.e[..., n:], a.m[..., n:])


def probs(
    r: Rounding,
    q: Tracked,
    k: Tracked,
    causal: bool,
    alignment: str,
    softcap: float | None,
    scale: float | None,
    mask: NDArray[np.bool_] | None = None,
    sinks: Tracked | None = None,
) -> Probs:
    """``mask`` (L_q, L_k): the visible keys, in place of the causal mask; ``sinks`` (H_q,): a logit per head that
    joins the softmax as one more column (exact: an input), its probability returned apart."""
    ke = heads(k, kv_head_index(q.v.shape[1], k.v.shape[1]))
    sc = 1.0 / np.sqrt(q.v.shape[-1]) if scale is None else float(scale)
    # the scale applied to the scores, or to q before the product (mlx-lm's and others' (q·s)·kᵀ): q·s stored
    # where intermediates are is a rounding of each of q's elements, which a cancelling dot product amplifies
    raw = em.widest(scale_by(r, em.matmul(r, q, swap(ke)), sc), em.matmul(r, scale_by(r, q, sc), swap(ke)))
    t = None
    s = raw
    if softcap:
        # secant, not first order: a score off by more than the cap's scale moves tanh off its saturation
        t = em.func(r, scale_by(r, raw, 1.0 / softcap), np.tanh, _dtanh, spread=em.secant(np.tanh, _dtanh))
        s = scale_by(r, t, softcap)
    if mask is None and causal:
        mask = causal_mask(q.v.shape[2], k.v.shape[2], alignment)  # type: ignore[arg-type]
    lk = k.v.shape[2]
    keys_mask = mask
    if sinks is not None:
        # a sink of −∞ takes no part (exactly 0, as a masked key): the column's mask says where one does
        finite = np.isfinite(sinks.v)
        col = (*s.v.shape[:-1], 1)
        parts = (np.where(finite, sinks.v, 0.0), sinks.e, np.where(finite, sinks.m, 0.0))
        s = _columns(s, Tracked(*(np.broadcast_to(a[None, :, None, None], col) for a in parts)))
        visible = np.ones((q.v.shape[2], lk), dtype=bool) if mask is None else mask
        mask = np.concatenate(
            [np.broadcast_to(visible, (*s.v.shape[:-1], lk)), np.broadcast_to(finite[None, :, None, None], col)],
            axis=-1,
        )
    masked_v = s.v if mask is None else np.where(mask, s.v, -np.inf)
    mx = np.max(masked_v, axis=-1, keepdims=True)
    shifted = em.sub(r, Tracked(np.where(np.isfinite(masked_v), s.v, mx), s.e, s.m), em.exact(mx))
    with np.errstate(over="ignore", invalid="ignore"):
        ex = em.exp(r, shifted)
        if mask is not None:
            ex = Tracked(*(np.where(mask, a, 0.0) for a in (ex.v, ex.e, ex.m)))
        p = em.div(r, ex, em.total(r, ex))
    # a probability and its approximation both lie in [0, 1]: where the logits' error is so large that the first-order
    # bound exceeds 1 (or overflows), 1 is the bound (e.g. logits of 10⁴ rotated by float32 angles at position 10⁵)
    e = np.where(np.isfinite(p.e), np.minimum(p.e, 1.0), 1.0)
    p = Tracked(p.v, e, p.m)
    if sinks is None:
        return Probs(p, raw, t, keys_mask)
    keys, sink = _split(p, lk)
    return Probs(keys, raw, t, keys_mask, sink)


def attention_t(
    r: Rounding,
    q: Tracked,
    k: Tracked,
    v: Tracked,
    causal: bool,
    alignment: str,
    softcap: float | None,
    scale: float | None = None,
    unit: float | None = None,
    mask: NDArray[np.bool_] | None = None,
    sinks: Tracked | None = None,
) -> Tracked:
    pr = probs(r, q, k, causal, alignment, softcap, scale, mask, sinks)
    return em.matmul(r, pr.p, heads(v, kv_head_index(q.v.shape[1], v.v.shape[1])), unit=unit)


def attention_vjp_t(
    r: Rounding,
    q: Tracked,
    k: Tracked,
    v: Tracked,
    g: Tracked,
    causal: bool,
    alignment: str,
    softcap: float | None,
    scale: float | None = None,
    unit: float | None = None,
) -> tuple[Tracked, Tracked, Tracked]:
    """(∂Q, ∂K, ∂V) following reference.attention.attention_vjp step by step."""
    dq, dk, dv, _ = masked_attention_vjp_t(r, q, k, v, g, causal, alignment, softcap, scale, unit)
    return dq, dk, dv


def masked_attention_vjp_t(
    r: Rounding,
    q: Tracked,
    k: Tracked,
    v: Tracked,
    g: Tracked,
    causal: bool,
    alignment: str,
    softcap: float | None,
    scale: float | None = None,
    unit: float | None = None,
    mask: NDArray[np.bool_] | None = None,
    sinks: Tracked | None = None,
) -> tuple[Tracked, Tracked, Tracked, Tracked | None]:
    """(∂Q, ∂K, ∂V, ∂sinks or None) following reference.attention.masked_attention_vjp step by step."""
    h_q, h_kv = q.v.shape[1], k.v.shape[1]
    idx = kv_head_index(h_q, h_kv)
    sc = 1.0 / np.sqrt(q.v.shape[-1]) if scale is None else float(scale)
    pr = probs(r, q, k, causal, alignment, softcap, scale, mask, sinks)
    p = pr.p
    dv = em.matmul(r, swap(p), g)
    dp = em.matmul(r, g, swap(heads(v, idx)))
    row = em.total(r, em.mul(r, dp, p))
    ds = em.mul(r, p, em.sub(r, dp, row))
    dsinks = None
    if pr.sink is not None:
        # the sink's column: ∂P = 0, so ∂S = P_sink·(0 − rowsum(∂P ⊙ P)), summed over batch and queries per head
        per_query = em.neg(em.mul(r, pr.sink, row))
        by_head = Tracked(*(np.moveaxis(a[..., 0], 1, -1) for a in (per_query.v, per_query.e, per_query.m)))
        dsinks = em.sum_rows(r, by_head, unit)
    if pr.tanh is not None:
        one = em.exact(np.ones_like(pr.tanh.v))
        sech2 = em.sub(r, one, em.mul(r, pr.tanh, pr.tanh))
        # c·tanh(l/c) transposed op by op (autodiff of the unfused forward): ·c, ·(1 − t²), ·(1/c)
        c = float(softcap or 1.0)  # a tanh is there only with a cap
        transposed = scale_by(r, em.mul(r, scale_by(r, ds, c), sech2), 1.0 / c)
        ds = em.widest(em.mul(r, ds, sech2), transposed)
    # the scale applied after the products (q·kᵀ·s with s on the result's transpose last) or, as autodiff of
    # (q·kᵀ)·s does, to ∂S first: each stored in between, which near zero costs a subnormal step per term
    ds_scaled = scale_by(r, ds, sc)
    dq = em.widest(scale_by(r, em.matmul(r, ds, heads(k, idx)), sc), em.matmul(r, ds_scaled, heads(k, idx)))
    dk = em.widest(scale_by(r, em.matmul(r, swap(ds), q), sc), em.matmul(r, swap(ds_scaled), q))
    return (
        Tracked(dq.v, dq.e + em._store(r, dq.v, unit), dq.m),
        reduce_heads(r, dk, h_kv, unit),
        reduce_heads(r, dv, h_kv, unit),
        dsinks,
    )


def _alignment(conv: Conventions) -> str:
    return conv.causal_alignment


def attention(inputs: Inputs, params: Mapping[str, Any], conv: Conventions, dtype: Format) -> Tracked:
    r = rounding("attention", dtype, conv)
    q, k, v = (em.exact(inputs[n]) for n in ("q", "k", "v"))
    return attention_t(
        r, q, k, v, bool(params.get("causal")), _alignment(conv), params.get("softcap"), params.get("scale"), r.u_work
    )


def attention_vjp(
    inputs: Inputs, params: Mapping[str, Any], conv: Conventions, dtype: Format, g64: F64
) -> dict[str, Tracked]:
    r = rounding("attention", dtype, conv, grad=True)
    q, k, v = (em.exact(inputs[n]) for n in ("q", "k", "v"))
    dq, dk, dv = attention_vjp_t(
        r,
        q,
        k,
        v,
        em.exact(g64),
        bool(params.get("causal")),
        _alignment(conv),
        params.get("softcap"),
        params.get("scale"),
        r.u_work,
    )
    return {"q": dq, "k": dk, "v": dv}


def qk_norm_attention(inputs: Inputs, params: Mapping[str, Any], conv: Conventions, dtype: Format) -> Tracked:
    r = rounding("qk_norm_attention", dtype, conv)
    q, k, v, wq, wk = (em.exact(inputs[n]) for n in ("q", "k", "v", "q_weight", "k_weight"))
    eps = float(params["eps"])
    qn, kn = rms_norm_t(r, q, wq, eps), rms_norm_t(r, k, wk, eps)
    return attention_t(
        r, qn, kn, v, bool(params.get("causal")), _alignment(conv), params.get("softcap"), None, r.u_work
    )


def qk_norm_attention_vjp(
    inputs: Inputs, params: Mapping[str, Any], conv: Conventions, dtype: Format, g64: F64
) -> dict[str, Tracked]:
    r = rounding("qk_norm_attention", dtype, conv, grad=True)
    q, k, v, wq, wk = (em.exact(inputs[n]) for n in ("q", "k", "v", "q_weight", "k_weight"))
    eps = float(params["eps"])
    qn, kn = rms_norm_t(r, q, wq, eps), rms_norm_t(r, k, wk, eps)
    causal, softcap = bool(params.get("causal")), params.get("softcap")
    dqn, dkn, dv = attention_vjp_t(r, qn, kn, v, em.exact(g64), causal, _alignment(conv), softcap)
    dq, dwq = rms_norm_vjp_t(r, q, wq, eps, dqn)
    dk, dwk = rms_norm_vjp_t(r, k, wk, eps, dkn)
    return {"q": dq, "k": dk, "v": dv, "q_weight": dwq, "k_weight": dwk}


def _rope_pair(
    r: Rounding, x: Tracked, positions: np.ndarray, base: float, conv: Conventions, transpose: bool
) -> Tracked:
    cos, sin, rd = rope_trig({"base": base}, positions, x.v.shape[-1], conv, r)
    return rotate(r, x, cos, sin, rd, conv.rope_layout, transpose=transpose)


def rope_attention(inputs: Inputs, params: Mapping[str, Any], conv: Conventions, dtype: Format) -> Tracked:
    r = rounding("rope_attention", dtype, conv)
    q, k, v = (em.exact(inputs[n]) for n in ("q", "k", "v"))
    base = params.get("base", 10000.0)
    rq = _rope_pair(r, q, inputs["q_positions"], base, conv, False)
    rk = _rope_pair(r, k, inputs["k_positions"], base, conv, False)
    return attention_t(
        r, rq, rk, v, bool(params.get("causal")), _alignment(conv), params.get("softcap"), None, r.u_work
    )


def rope_attention_vjp(
    inputs: Inputs, params: Mapping[str, Any], conv: Conventions, dtype: Format, g64: F64
) -> dict[str, Tracked]:
    r = rounding("rope_attention", dtype, conv, grad=True)
    q, k, v = (em.exact(inputs[n]) for n in ("q", "k", "v"))
    base = params.get("base", 10000.0)
    rq = _rope_pair(r, q, inputs["q_positions"], base, conv, False)
    rk = _rope_pair(r, k, inputs["k_positions"], base, conv, False)
    causal, softcap = bool(params.get("causal")), params.get("softcap")
    drq, drk, dv = attention_vjp_t(r, rq, rk, v, em.exact(g64), causal, _alignment(conv), softcap)
    dq = _rope_pair(r, drq, inputs["q_positions"], base, conv, True)
    dk = _rope_pair(r, drk, inputs["k_positions"], base, conv, True)
    return {"q": dq, "k": dk, "v": dv}

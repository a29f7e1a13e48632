"""Error budgets of MoE routing and its load-balancing loss (reference/moe.py) in tracked arithmetic.

The selection is exact: the strategies draw logits whose selected and unselected experts are far apart against
any rounding of the scores (conformance/strategies/moe.py), so a correct candidate selects what the oracle selects
and every weight it leaves out is exactly 0. What remains is the scores' arithmetic — the softmax as a max-shifted
division (or the exponential of a log-softmax), the sigmoid as one elementary function — the renormalising sum and
division, and the routed scaling factor on either side of it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from transformer_conformance.adapters.contract import Conventions
from transformer_conformance.conformance.budgets import error_model as em
from transformer_conformance.conformance.budgets.error_model import Rounding, Tracked
from transformer_conformance.conformance.budgets.losses import log_softmax, z_loss_t, z_loss_vjp_t
from transformer_conformance.conformance.budgets.rounding import F64, Inputs, rounding
from transformer_conformance.reference import moe
from transformer_conformance.reference.formats import Format
from transformer_conformance.reference.oracle import router_kw


def _where(mask: np.ndarray, t: Tracked) -> Tracked:
    """``t`` where ``mask``, an exact 0 elsewhere."""
    return Tracked(*(np.where(mask, a, 0.0) for a in (t.v, t.e, t.m)))


def _dsigmoid(v: F64) -> F64:
    s = moe.sigmoid(v)
    return s * (1.0 - s)


def softmax_t(r: Rounding, logits: F64) -> Tracked:
    """softmax over the last axis: e^{u − max} / Σ e^{u − max}, or exp(log_softmax(u))."""
    shifted = em.sub(r, em.exact(logits), em.exact(np.max(logits, axis=-1, keepdims=True)))
    e = em.exp(r, shifted)
    return em.widest(em.div(r, e, em.total(r, e)), em.exp(r, log_softmax(r, logits)))


def scores_t(r: Rounding, logits: F64, score: str) -> Tracked:
    if score == "softmax":
        return softmax_t(r, logits)
    return em.func(r, em.exact(logits), moe.sigmoid, _dsigmoid)


def moe_router(inputs: Inputs, params: Mapping[str, Any], conv: Conventions, dtype: Format) -> Tracked:
    r = rounding("moe_router", dtype, conv)
    kw = router_kw(params)
    logits = inputs["logits"]
    sel = moe.selection(logits, inputs["bias"], kw["k"], kw["score"], kw["n_group"], kw["topk_group"])
    w = _where(sel, scores_t(r, logits, kw["score"]))
    c = em.const(r, kw["scaling"])
    if kw["norm"] == "topk":
        z = em.total(r, w)
        # the scaling factor after the division (DeepSeek-V3's code) or before it
        w = em.widest(em.mul(r, em.div(r, w, z), c), em.div(r, em.mul(r, w, c), z))
    else:
        w = em.mul(r, w, c)
    return _where(sel, w)


def moe_router_vjp(
    inputs: Inputs, params: Mapping[str, Any], conv: Conventions, dtype: Format, g64: F64
) -> dict[str, Tracked]:
    r = rounding("moe_router", dtype, conv, grad=True)
    kw = router_kw(params)
    logits, bias = inputs["logits"], inputs["bias"]
    sel = moe.selection(logits, bias, kw["k"], kw["score"], kw["n_group"], kw["topk_group"])
    s = scores_t(r, logits, kw["score"])
    kept = _where(sel, s)
    gs = _where(sel, em.mul(r, em.exact(g64), em.const(r, kw["scaling"])))
    if kw["norm"] == "topk":
        z = em.total(r, kept)
        t = em.total(r, em.mul(r, gs, kept))
        # (g − Σ g s / Z) / Z, or autograd's g/Z − (Σ g s)/Z² of the division
        ds = em.widest(
            em.div(r, em.sub(r, gs, em.div(r, t, z)), z),
            em.sub(r, em.div(r, gs, z), em.div(r, t, em.mul(r, z, z))),
        )
        ds = _where(sel, ds)
    else:
        ds = gs
    if kw["score"] == "softmax":
        du = em.mul(r, s, em.sub(r, ds, em.total(r, em.mul(r, ds, s))))
    else:
        one = em.exact(np.ones_like(s.v))
        du = em.mul(r, ds, em.mul(r, s, em.sub(r, one, s)))
    return {"logits": du, "bias": em.exact(np.zeros_like(bias))}


def _fraction_scale(k: int, conv: Conventions) -> float:
    return 1.0 / k if conv.aux_loss_fraction == "per_assignment" else 1.0


def moe_aux_loss(inputs: Inputs, params: Mapping[str, Any], conv: Conventions, dtype: Format) -> Tracked:
    r = rounding("moe_aux_loss", dtype, conv)
    logits = inputs["logits"]
    n, e = logits.shape
    k = int(params["k"])
    p = softmax_t(r, logits)
    counts = moe.top_k_mask(p.v, k).sum(axis=0).astype(np.float64)  # tokens per expert: exact integers
    mean_p = em.mean(r, em.transpose(p))  # (E, 1): P_e
    f = em.mul(r, em.exact(counts[:, None]), em.const(r, _fraction_scale(k, conv) / n))
    total = em.total(r, em.transpose(em.mul(r, f, mean_p)))  # (1, 1)
    out = em.mul(r, total, em.const(r, float(e)))
    return Tracked(out.v.reshape(()), out.e.reshape(()), out.m.reshape(()))


def moe_aux_loss_vjp(
    inputs: Inputs, params: Mapping[str, Any], conv: Conventions, dtype: Format, g64: F64
) -> dict[str, Tracked]:
    r = rounding("moe_aux_loss", dtype, conv, grad=True)
    logits = inputs["logits"]
    n, e = logits.shape
    k = int(params["k"])
    p = softmax_t(r, logits)
    counts = moe.top_k_mask(p.v, k).sum(axis=0).astype(np.float64)
    # ∂L/∂p_te = g·E·f_e/N: the cotangent times exact counts and one rounded constant
    coef = em.mul(r, em.exact(np.broadcast_to(np.asarray(g64, dtype=np.float64), (1, 1))), em.const(r, e / n))
    dp = em.mul(r, em.mul(r, coef, em.exact(counts[None, :])), em.const(r, _fraction_scale(k, conv) / n))
    dp = Tracked(*(np.broadcast_to(a, p.v.shape) for a in (dp.v, dp.e, dp.m)))
    du = em.mul(r, p, em.sub(r, dp, em.total(r, em.mul(r, dp, p))))
    return {"logits": du}


#: the router z-loss has no coefficient of its own: α = 1 in the z-loss's budget
_UNIT_ALPHA = {"alpha": 1.0}


def moe_z_loss(inputs: Inputs, params: Mapping[str, Any], conv: Conventions, dtype: Format) -> Tracked:
    """z² per token (budgets/losses.py's z-loss at α = 1, stored where intermediates are), summed over the tokens in
    working precision and divided by N."""
    r = rounding("moe_z_loss", dtype, conv)
    logits = inputs["logits"]
    per = em.store(r, z_loss_t(r, logits, _UNIT_ALPHA), r.u_mid)
    row = Tracked(*(a.reshape(1, -1) for a in (per.v, per.e, per.m)))
    mean = em.mul(r, em.total(r, row), em.const(r, 1.0 / max(len(logits), 1)), unit=r.u_work)
    return Tracked(mean.v.reshape(()), mean.e.reshape(()), mean.m.reshape(()))


def moe_z_loss_vjp(
    inputs: Inputs, params: Mapping[str, Any], conv: Conventions, dtype: Format, g64: F64
) -> dict[str, Tracked]:
    """(g/N)·2·z·softmax(u) row by row: the z-loss's gradient for the per-token cotangent g/N, whose rounding (where
    intermediates are stored) is one more relative error."""
    r = rounding("moe_z_loss", dtype, conv, grad=True)
    logits = inputs["logits"]
    coef = np.full(len(logits), float(np.asarray(g64)) / max(len(logits), 1))
    return {"logits": em.store(r, z_loss_vjp_t(r, logits, _UNIT_ALPHA, coef), r.u_mid)}


FORWARD: dict[str, Any] = {"moe_router": moe_router, "moe_aux_loss": moe_aux_loss, "moe_z_loss": moe_z_loss}
VJP: dict[str, Any] = {"moe_router": moe_router_vjp, "moe_aux_loss": moe_aux_loss_vjp, "moe_z_loss": moe_z_loss_vjp}

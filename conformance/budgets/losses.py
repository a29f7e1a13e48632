"""Error budgets of the losses: per-token cross-entropy and z-loss, the mean cross-entropy over valid tokens,
the z-loss of soft-capped logits.

``reference.losses`` restated in tracked arithmetic (conformance/budgets/error_model.py); registered in
conformance/budgets/registry.py.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

import transformer_conformance.reference as ref
from transformer_conformance.adapters.contract import Conventions
from transformer_conformance.conformance.budgets import error_model as em
from transformer_conformance.conformance.budgets.error_model import Rounding, Tracked
from transformer_conformance.conformance.budgets.rounding import F64, Inputs, rounding
from transformer_conformance.reference.formats import Format


def _log_softmax_parts(r: Rounding, logits: F64) -> tuple[Tracked, Tracked, Tracked]:
    """(u − max, log Σ exp(u − max), max) as a max-shifted implementation computes them (each stored
    where the candidate keeps intermediates)."""
    mx = np.max(logits, axis=-1, keepdims=True)
    shifted = em.sub(r, em.exact(logits), em.exact(mx))
    log_s = em.func(r, em.total(r, em.exp(r, shifted)), np.log, lambda v: 1.0 / v)
    return shifted, log_s, em.exact(mx)


def _pick(t: Tracked, targets: np.ndarray) -> Tracked:
    idx = targets[..., None]
    return Tracked(*(np.take_along_axis(a, idx, axis=-1) for a in (t.v, t.e, t.m)))


def _squeeze(t: Tracked) -> Tracked:
    return Tracked(t.v[..., 0], t.e[..., 0], t.m[..., 0])


def _lse(r: Rounding, logits: F64) -> Tracked:
    """logsumexp = max + log Σ exp(u − max), as the candidate stores it."""
    _, log_s, mx = _log_softmax_parts(r, logits)
    return em.add(r, mx, log_s)


def token_loss(r: Rounding, logits: F64, targets: np.ndarray, unit: float | None = None) -> Tracked:
    """z − u_target (..., 1) in either order a candidate takes: through the logsumexp (max + log Σ, less the
    target logit) or through the log-softmax (log Σ less the shifted target logit u_t − max, itself rounded:
    ``jax.nn.log_softmax`` then the pick). ``unit``: where the difference is stored."""
    shifted, log_s, mx = _log_softmax_parts(r, logits)
    via_lse = em.sub(r, em.add(r, mx, log_s), _pick(em.exact(logits), targets), unit=unit)
    via_log_softmax = em.sub(r, log_s, _pick(shifted, targets), unit=unit)
    return em.widest(via_lse, via_log_softmax)


def log_softmax(r: Rounding, logits: F64) -> Tracked:
    """log p = u − z in either order: u less the logsumexp, or the shifted u − max less log Σ."""
    shifted, log_s, mx = _log_softmax_parts(r, logits)
    return em.widest(em.sub(r, em.exact(logits), em.add(r, mx, log_s)), em.sub(r, shifted, log_s))


def cross_entropy(inputs: Inputs, params: Mapping[str, Any], conv: Conventions, dtype: Format) -> Tracked:
    r = rounding("cross_entropy", dtype, conv)
    return _squeeze(token_loss(r, inputs["logits"], inputs["targets"], unit=r.u_work))


def cross_entropy_vjp(
    inputs: Inputs, params: Mapping[str, Any], conv: Conventions, dtype: Format, g64: F64
) -> dict[str, Tracked]:
    r = rounding("cross_entropy", dtype, conv, grad=True)
    log_p = log_softmax(r, inputs["logits"])  # the saved log-softmax
    p = em.exp(r, log_p, unit=r.u_work)
    onehot = np.zeros_like(p.v)
    np.put_along_axis(onehot, inputs["targets"][..., None], 1.0, axis=-1)
    q = em.sub(r, p, em.exact(onehot), unit=r.u_work)
    if "cross_entropy" in conv.grad_in_forward:  # ∂loss/∂u for a unit cotangent, kept in the input dtype
        q = em.store(r, q, dtype.unit_roundoff)
    return {"logits": em.mul(r, q, em.exact(np.asarray(g64)[..., None]), unit=r.u_work)}


def z_loss_t(r: Rounding, logits: F64, params: Mapping[str, Any]) -> Tracked:
    """α·z² per token, (N,)."""
    z = _lse(r, logits)
    alpha = em.const(r, params.get("alpha", ref.losses.Z_LOSS_ALPHA))
    return _squeeze(em.mul(r, alpha, em.mul(r, z, z), unit=r.u_work))


def z_loss(inputs: Inputs, params: Mapping[str, Any], conv: Conventions, dtype: Format) -> Tracked:
    return z_loss_t(rounding("z_loss", dtype, conv), inputs["logits"], params)


def z_loss_vjp_t(r: Rounding, logits: F64, params: Mapping[str, Any], g64: F64) -> Tracked:
    """g·2α·z·softmax(u) for the per-token cotangent g."""
    z = _lse(r, logits)
    alpha = em.const(r, params.get("alpha", ref.losses.Z_LOSS_ALPHA))
    two_z = em.Tracked(2.0 * z.v, 2.0 * z.e, 2.0 * z.m)  # doubling is exact
    coef = em.mul(r, em.mul(r, em.exact(np.asarray(g64)[..., None]), alpha), two_z)  # (g·α)·2z, as autograd orders it
    p = em.exp(r, em.sub(r, em.exact(logits), z))  # u − z and its exp, each stored
    return em.mul(r, coef, p, unit=r.u_work)


def z_loss_vjp(
    inputs: Inputs, params: Mapping[str, Any], conv: Conventions, dtype: Format, g64: F64
) -> dict[str, Tracked]:
    return {"logits": z_loss_vjp_t(rounding("z_loss", dtype, conv, grad=True), inputs["logits"], params, g64)}


def _valid(inputs: Inputs, params: Mapping[str, Any]) -> tuple[np.ndarray, np.ndarray]:
    """(mask of valid tokens, targets with ignored ones replaced by class 0)."""
    targets = np.asarray(inputs["targets"])
    valid = ref.losses.valid_tokens(targets, params.get("ignore_index", ref.losses.IGNORE_INDEX))
    return valid, np.where(valid, targets, 0)


def cross_entropy_mean(inputs: Inputs, params: Mapping[str, Any], conv: Conventions, dtype: Format) -> Tracked:
    """Per-token z − u_target (as budgets.cross_entropy), summed over the valid tokens, divided by their count."""
    r = rounding("cross_entropy_mean", dtype, conv)
    valid, safe = _valid(inputs, params)
    logits = np.asarray(inputs["logits"], dtype=np.float64)[valid]
    per = token_loss(r, logits, safe[valid])
    row = Tracked(per.v.reshape(1, -1), per.e.reshape(1, -1), per.m.reshape(1, -1))
    mean = em.mul(r, em.total(r, row), em.const(r, 1.0 / max(int(valid.sum()), 1)), unit=r.u_work)
    return Tracked(mean.v.reshape(()), mean.e.reshape(()), mean.m.reshape(()))


def cross_entropy_mean_vjp(
    inputs: Inputs, params: Mapping[str, Any], conv: Conventions, dtype: Format, g64: F64
) -> dict[str, Tracked]:
    """(g/#valid)·(softmax(u) − onehot) on valid rows; ignored rows are exactly zero."""
    r = rounding("cross_entropy_mean", dtype, conv, grad=True)
    valid, safe = _valid(inputs, params)
    logits = np.asarray(inputs["logits"], dtype=np.float64)
    p = em.exp(r, log_softmax(r, logits), unit=r.u_work)
    onehot = np.zeros_like(p.v)
    np.put_along_axis(onehot, safe[..., None], 1.0, axis=-1)
    q = em.sub(r, p, em.exact(onehot), unit=r.u_work)
    n = max(int(valid.sum()), 1)
    g = em.exact(np.full((logits.shape[0], 1), float(np.asarray(g64))))
    rows = valid[:, None]
    if "cross_entropy_mean" in conv.grad_in_forward:
        # the forward keeps (softmax − onehot)/#valid in the input dtype; the backward scales it by g
        unit_cot = em.store(r, em.mul(r, q, em.const(r, 1.0 / n), unit=r.u_work), dtype.unit_roundoff)
        unit_cot = Tracked(*(np.where(rows, a, 0.0) for a in (unit_cot.v, unit_cot.e, unit_cot.m)))
        return {"logits": em.mul(r, unit_cot, g, unit=r.u_work)}
    coef = em.mul(r, g, em.const(r, 1.0 / n))
    coef = Tracked(*(np.where(rows, a, 0.0) for a in (coef.v, coef.e, coef.m)))
    return {"logits": em.mul(r, q, coef, unit=r.u_work)}


def _lse_of(r: Rounding, t: Tracked) -> Tracked:
    """logsumexp of already-computed (tracked) values: max-shifted, as budgets._lse."""
    i = np.argmax(t.v, axis=-1)[..., None]
    mx = Tracked(*(np.take_along_axis(a, i, axis=-1) for a in (t.v, t.e, t.m)))
    log_s = em.func(r, em.total(r, em.exp(r, em.sub(r, t, mx))), np.log, lambda v: 1.0 / v)
    return em.add(r, mx, log_s)


def _capped(r: Rounding, logits: np.ndarray, cap: float) -> tuple[Tracked, Tracked]:
    """(tanh(u/c), c·tanh(u/c)) with u/c, tanh and the product each stored."""
    t = em.func(r, em.mul(r, em.exact(logits), em.const(r, 1.0 / cap)), np.tanh, lambda v: 1.0 - np.tanh(v) ** 2)
    return t, em.mul(r, t, em.const(r, cap))


def softcap_z_loss(inputs: Inputs, params: Mapping[str, Any], conv: Conventions, dtype: Format) -> Tracked:
    r = rounding("softcap_z_loss", dtype, conv)
    _, capped = _capped(r, np.asarray(inputs["logits"], dtype=np.float64), float(params["cap"]))
    z = _lse_of(r, capped)
    alpha = em.const(r, params.get("alpha", ref.losses.Z_LOSS_ALPHA))
    out = em.mul(r, alpha, em.mul(r, z, z), unit=r.u_work)
    return Tracked(out.v[..., 0], out.e[..., 0], out.m[..., 0])


def softcap_z_loss_vjp(
    inputs: Inputs, params: Mapping[str, Any], conv: Conventions, dtype: Format, g64: F64
) -> dict[str, Tracked]:
    """g·2α·z·softmax(ũ)·(1 − tanh²(u/c)), each factor as autograd forms it."""
    r = rounding("softcap_z_loss", dtype, conv, grad=True)
    t, capped = _capped(r, np.asarray(inputs["logits"], dtype=np.float64), float(params["cap"]))
    z = _lse_of(r, capped)
    alpha = em.const(r, params.get("alpha", ref.losses.Z_LOSS_ALPHA))
    two_z = Tracked(2.0 * z.v, 2.0 * z.e, 2.0 * z.m)
    coef = em.mul(r, em.mul(r, em.exact(np.asarray(g64)[..., None]), alpha), two_z)
    p = em.exp(r, em.sub(r, capped, z))
    one = em.exact(np.ones_like(t.v))
    dtanh = em.sub(r, one, em.mul(r, t, t))
    return {"logits": em.mul(r, em.mul(r, coef, p), dtanh, unit=r.u_work)}

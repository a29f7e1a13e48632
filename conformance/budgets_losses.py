"""Error budgets of the loss reductions: mean cross-entropy over valid tokens, z-loss of soft-capped logits.

``reference.losses`` restated in tracked arithmetic (conformance/error_model.py); registered in
conformance/budgets.py's ``FORWARD`` and ``VJP`` tables.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
from numpy.typing import NDArray

import reference as ref
from adapters.contract import Conventions
from conformance import error_model as em
from conformance.budgets import Inputs, log_softmax, rounding, token_loss
from conformance.dtypes import Format
from conformance.error_model import Rounding, Tracked

F64 = NDArray[np.float64]


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


FORWARD: dict[str, Any] = {"cross_entropy_mean": cross_entropy_mean, "softcap_z_loss": softcap_z_loss}
VJP: dict[str, Any] = {"cross_entropy_mean": cross_entropy_mean_vjp, "softcap_z_loss": softcap_z_loss_vjp}

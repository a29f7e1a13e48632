"""Error budgets of the fused LM-head loss (the logits x·Wᵀ + b and their cross-entropy, per token or averaged
over valid tokens) and of the z-loss averaged over valid tokens.

``reference.linear_losses`` restated in tracked arithmetic (conformance/budgets/error_model.py, docs/tolerance.md
"The matmul + logsumexp chain"): the logits carry the projection's accumulation error (and, where the candidate
stores them, their rounding to the input dtype) into the logsumexp, whose sensitivity to them is the softmax
(Σ_v p_v·e(u_v) ≤ max_v e(u_v)); the backward projects ∂L/∂u back through W and x. Registered in
conformance/budgets/registry.py.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

import transformer_conformance.reference as ref
from transformer_conformance.adapters.contract import Conventions
from transformer_conformance.conformance.budgets import error_model as em
from transformer_conformance.conformance.budgets import losses
from transformer_conformance.conformance.budgets.error_model import Rounding, Tracked
from transformer_conformance.conformance.budgets.rounding import F64, Inputs, rounding
from transformer_conformance.reference.formats import Format

OP = "linear_cross_entropy"


def _rows_where(t: Tracked, rows: np.ndarray) -> Tracked:
    """Rows outside ``rows`` exactly zero (ignored tokens)."""
    m = rows.reshape(rows.shape + (1,) * (t.v.ndim - 1))
    return Tracked(*(np.where(m, a, 0.0) for a in (t.v, t.e, t.m)))


def _pick(t: Tracked, idx: np.ndarray) -> Tracked:
    return Tracked(*(np.take_along_axis(a, idx[..., None], axis=-1) for a in (t.v, t.e, t.m)))


def _scalar(t: Tracked) -> Tracked:
    return Tracked(t.v.reshape(()), t.e.reshape(()), t.m.reshape(()))


def _valid(inputs: Inputs, params: Mapping[str, Any]) -> tuple[np.ndarray, np.ndarray]:
    targets = np.asarray(inputs["targets"])
    valid = ref.losses.valid_tokens(targets, params.get("ignore_index", ref.losses.IGNORE_INDEX))
    return valid, np.where(valid, targets, 0)


def logits_t(r: Rounding, inputs: Inputs) -> Tracked:
    """u = x·Wᵀ + b: the product accumulated in working precision and stored where the candidate keeps
    intermediates, then the bias added and stored there too (a kernel that stores the product before adding
    the bias rounds twice; one that adds it in the accumulator, once: within this)."""
    x, w, b = (em.exact(inputs[k]) for k in ("x", "weight", "bias"))
    return em.add(r, em.matmul(r, x, em.transpose(w)), b)


def _parts(r: Rounding, u: Tracked) -> tuple[Tracked, Tracked, Tracked]:
    """(u − max, log Σ exp(u − max), max) of computed logits, max-shifted as an implementation does."""
    mx = _pick(u, np.argmax(u.v, axis=-1))
    shifted = em.sub(r, u, mx)
    log_s = em.func(r, em.total(r, em.exp(r, shifted)), np.log, lambda v: 1.0 / v)
    return shifted, log_s, mx


def token_loss_t(r: Rounding, u: Tracked, targets: np.ndarray) -> Tracked:
    """z − u_target (N,) of computed logits, in either order (through the logsumexp, or through the
    log-softmax); budgets/losses.py's token_loss with the logits' own error carried."""
    shifted, log_s, mx = _parts(r, u)
    via_lse = em.sub(r, em.add(r, mx, log_s), _pick(u, targets), unit=r.u_work)
    via_log_softmax = em.sub(r, log_s, _pick(shifted, targets), unit=r.u_work)
    t = em.widest(via_lse, via_log_softmax)
    return Tracked(t.v[..., 0], t.e[..., 0], t.m[..., 0])


def _mean_over(r: Rounding, per: Tracked, valid: np.ndarray) -> Tracked:
    """Σ over the valid tokens / #valid, accumulated in working precision."""
    row = Tracked(*(a[valid].reshape(1, -1) for a in (per.v, per.e, per.m)))
    mean = em.mul(r, em.total(r, row), em.const(r, 1.0 / max(int(valid.sum()), 1)), unit=r.u_work)
    return _scalar(mean)


def _token_blocks(inputs: Inputs) -> list[slice]:
    """The tokens a block at a time (em.row_blocks): a block's logits about em.BLOCK_ELEMENTS, and at least 16
    tokens (each block's share of ∂W is a product as large as W)."""
    return em.row_blocks(len(inputs["x"]), min(len(inputs["weight"]), em.BLOCK_ELEMENTS // 16))


def _block(inputs: Inputs, tokens: slice) -> Inputs:
    return {"x": inputs["x"][tokens], "weight": inputs["weight"], "bias": inputs["bias"]}


def linear_cross_entropy(inputs: Inputs, params: Mapping[str, Any], conv: Conventions, dtype: Format) -> Tracked:
    r = rounding(OP, dtype, conv)
    valid, safe = _valid(inputs, params)
    losses = [token_loss_t(r, logits_t(r, _block(inputs, t)), safe[t]) for t in _token_blocks(inputs)]
    per = _rows_where(em.concat_rows(losses, valid.shape), valid)
    if params.get("reduction", "mean") == "none":
        return per
    return _mean_over(r, per, valid)


def _unit_softmax_grad(r: Rounding, inputs: Inputs, safe: np.ndarray) -> Tracked:
    """softmax(u) − onehot(target) of the computed logits u of ``inputs``' tokens."""
    u = logits_t(r, inputs)
    shifted, log_s, mx = _parts(r, u)
    log_p = em.widest(em.sub(r, u, em.add(r, mx, log_s)), em.sub(r, shifted, log_s))
    p = em.exp(r, log_p, unit=r.u_work)
    onehot = np.zeros_like(p.v)
    np.put_along_axis(onehot, safe[..., None], 1.0, axis=-1)
    return em.sub(r, p, em.exact(onehot), unit=r.u_work)


def linear_cross_entropy_vjp(
    inputs: Inputs, params: Mapping[str, Any], conv: Conventions, dtype: Format, g64: F64
) -> dict[str, Tracked]:
    """D = c_t·(softmax(u) − onehot) on valid rows (c_t = g_t, or g/#valid), then ∂x = D·W, ∂W = Dᵀ·x, ∂b = Σ_t D_t.
    A candidate that keeps the gradient for a unit cotangent from its forward (``grad_in_forward``) stores
    D/g, and each of ∂x, ∂W, ∂b for it, in the input dtype before multiplying by g. Evaluated a block of tokens
    at a time, ∂W and ∂b summed over all of them once."""
    r = rounding(OP, dtype, conv, grad=True)
    valid, safe = _valid(inputs, params)
    n = max(int(valid.sum()), 1)
    per_token = params.get("reduction", "mean") == "none"
    g = np.asarray(g64, dtype=np.float64)
    w = em.exact(inputs["weight"])
    in_forward = OP in conv.grad_in_forward
    # where the projections round: to the input dtype, a unit cotangent's gradient kept from the forward
    unit = dtype.unit_roundoff if in_forward else r.u_work
    dx: list[Tracked] = []
    dw: em.ProductSums | None = None
    db: em.RowSums | None = None
    for tokens in _token_blocks(inputs):
        q = _unit_softmax_grad(r, _block(inputs, tokens), safe[tokens])
        if in_forward and per_token:
            # the unit gradient stored in the input dtype and the cotangent folded in before the projection, a
            # product rounded to the input dtype again (Liger 0.8.5's grad_logits_chunk * token_grad_output: a
            # small probability stored as a subnormal, then scaled)
            stored = em.store(r, q, dtype.unit_roundoff)
            d = em.mul(r, stored, em.exact(g[tokens, None]), unit=dtype.unit_roundoff)
        elif in_forward:  # the forward's gradient for a unit cotangent (1/#valid), stored in the input dtype
            d = em.store(r, em.mul(r, q, em.const(r, 1.0 / n), unit=r.u_work), dtype.unit_roundoff)
        elif per_token:
            d = em.mul(r, q, em.exact(g[tokens, None]))  # ∂L/∂u, stored where intermediates are
        else:
            coef = em.mul(r, em.exact(np.full((q.v.shape[0], 1), float(g))), em.const(r, 1.0 / n))
            d = em.mul(r, q, coef)
        d = _rows_where(d, valid[tokens])
        dx.append(em.matmul(r, d, w, unit=unit))
        block_dw = em.product_sums(em.transpose(d), em.exact(inputs["x"][tokens]))
        dw = block_dw if dw is None else dw + block_dw
        db = em.row_sums(d) if db is None else db + em.row_sums(d)
    assert dw is not None and db is not None  # at least one block, if of no tokens
    grads = {
        "x": em.concat_rows(dx, inputs["x"].shape),
        "weight": em.product(r, dw, unit=unit),
        "bias": em.summed(r, db, unit=unit),
    }
    if not in_forward or per_token:
        return grads
    scale = em.exact(np.asarray(float(g)))
    return {k: em.mul(r, t, scale, unit=r.u_work) for k, t in grads.items()}


def z_loss_mean(inputs: Inputs, params: Mapping[str, Any], conv: Conventions, dtype: Format) -> Tracked:
    """α·z² per token (budgets/losses.py's z_loss, stored where intermediates are), summed over the valid
    tokens, divided by their count."""
    r = rounding("z_loss_mean", dtype, conv)
    valid, _ = _valid(inputs, params)
    per = em.store(r, losses.z_loss_t(r, inputs["logits"], params), r.u_mid)
    return _mean_over(r, per, valid)


def z_loss_mean_vjp(
    inputs: Inputs, params: Mapping[str, Any], conv: Conventions, dtype: Format, g64: F64
) -> dict[str, Tracked]:
    """(g/#valid)·2α·z·softmax(u) on valid rows: z_loss's gradient for the per-token cotangent g/#valid, whose
    rounding (where intermediates are stored) is one more relative error."""
    r = rounding("z_loss_mean", dtype, conv, grad=True)
    valid, _ = _valid(inputs, params)
    coef = np.where(valid, float(np.asarray(g64)) / max(int(valid.sum()), 1), 0.0)
    t = losses.z_loss_vjp_t(r, inputs["logits"], params, coef)
    return {"logits": _rows_where(em.store(r, t, r.u_mid), valid)}

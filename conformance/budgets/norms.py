"""Budgets of RMSNorm and LayerNorm, forward and backward (seed-000 §2.2, §2.3)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from transformer_conformance.adapters.contract import Conventions
from transformer_conformance.conformance.budgets import error_model as em
from transformer_conformance.conformance.budgets.error_model import Rounding, Tracked
from transformer_conformance.conformance.budgets.rounding import F64, Inputs, rounding
from transformer_conformance.reference.formats import Format
from transformer_conformance.reference.oracle import resolve_eps


def _rsqrt(r: Rounding, a: Tracked) -> Tracked:
    return em.func(r, a, lambda v: 1.0 / np.sqrt(v), lambda v: -0.5 * v**-1.5)


def norm_stats(
    r: Rounding, x: Tracked, eps: float, centred: bool, variance: str = "two_pass"
) -> tuple[Tracked, Tracked]:
    """(x − μ, r): the centred input (x itself for RMSNorm) and 1/√(stat + ε), stat = mean(x²) or the
    biased variance.

    ``variance="one_pass"`` computes the variance as mean(x²) − μ² (clamped at 0, which only moves a
    negative result towards the true, non-negative one): the subtraction cancels, so its error is of the
    order of u_work·mean(x²), not u_work·σ² — the tracked magnitudes carry that.
    """
    if not centred:
        return x, _rsqrt(r, em.add(r, em.mean(r, em.mul(r, x, x)), em.const(r, eps)))
    mu = em.mean(r, x)
    xc = em.sub(r, x, mu)
    if variance == "one_pass":
        var = em.sub(r, em.mean(r, em.mul(r, x, x)), em.mul(r, mu, mu))
    else:
        var = em.mean(r, em.mul(r, xc, xc))
    return xc, _rsqrt(r, em.add(r, var, em.const(r, eps)))


def _norm_weight(r: Rounding, w: np.ndarray, conv: Conventions, dtype: Format) -> Tracked:
    """γ as the candidate holds it: exact, or, stored zero-centred (``norm_weight_offset``), as
    w = γ − offset rounded to the dtype under test and then offset + w in working precision."""
    t = em.exact(w)
    if conv.norm_weight_offset == 0.0:
        return t
    stored = dtype.unit_roundoff * np.abs(t.v - conv.norm_weight_offset) + r.eta(dtype.unit_roundoff)
    return Tracked(t.v, stored + r.u_work * np.abs(t.v), t.m)


def rms_norm(inputs: Inputs, params: Mapping[str, Any], conv: Conventions, dtype: Format) -> Tracked:
    r = rounding("rms_norm", dtype, conv)
    x, w = em.exact(inputs["x"]), _norm_weight(r, inputs["weight"], conv, dtype)
    eps = resolve_eps("rms_norm", params.get("eps"), dtype, conv)
    _, rinv = norm_stats(r, x, eps, centred=False)
    # "before_weight": x̂ is cast to the output dtype before the weight multiply (a second rounding)
    xhat = em.mul(r, x, rinv, unit=dtype.unit_roundoff if conv.norm_rounding == "before_weight" else None)
    return em.mul(r, xhat, w, unit=r.u_work)


def layer_norm(inputs: Inputs, params: Mapping[str, Any], conv: Conventions, dtype: Format) -> Tracked:
    r = rounding("layer_norm", dtype, conv)
    x, w, b = em.exact(inputs["x"]), _norm_weight(r, inputs["weight"], conv, dtype), em.exact(inputs["bias"])
    eps = resolve_eps("layer_norm", params.get("eps"), dtype, conv)
    xc, rinv = norm_stats(r, x, eps, centred=True, variance=conv.variance)
    xhat = em.mul(r, xc, rinv, unit=dtype.unit_roundoff if conv.norm_rounding == "before_weight" else None)
    return em.add(r, em.mul(r, xhat, w), b, unit=r.u_work)


def _before_weight_unit(conv: Conventions, dtype: Format) -> float | None:
    """Where a "before_weight" norm rounds in its backward: g·γ and the saved x̂ are products in the dtype."""
    return dtype.unit_roundoff if conv.norm_rounding == "before_weight" else None


def _weight_grad(
    r: Rounding, conv: Conventions, dtype: Format, g: Tracked, xhat_at: Callable[[Rounding, float | None], Tracked]
) -> Tracked:
    """∂L/∂γ = Σ over rows of g ⊙ x̂, x̂ as the backward holds it (``xhat_at(rounding, unit)``).

    The terms' roundings in the input dtype (x̂ stored, the products rounded where declared unfused or
    "before_weight") are each a rounding of one element: their sum over many rows is bounded by the
    probabilistic root-sum-square (``em.sum_rows``). What the terms carry at working precision (the
    statistics, shared by a row's features) is the same terms' error with nothing stored in the input
    dtype, and is summed as a worst case.
    """
    terms = em.mul(r, g, xhat_at(r, _before_weight_unit(conv, dtype)))
    if terms.v.size <= em.LAMBDA**2 * terms.v.shape[-1]:
        return em.sum_rows(r, terms, unit=r.u_work)  # at most λ² rows: the worst case is the smaller bound
    fused = dataclasses.replace(r, u_mid=r.u_work)
    shared = em.mul(fused, g, xhat_at(fused, None)).e
    return em.sum_rows(r, terms, unit=r.u_work, shared=shared)


def rms_norm_vjp(
    inputs: Inputs, params: Mapping[str, Any], conv: Conventions, dtype: Format, g64: F64
) -> dict[str, Tracked]:
    r = rounding("rms_norm", dtype, conv, grad=True)
    x, w, g = em.exact(inputs["x"]), _norm_weight(r, inputs["weight"], conv, dtype), em.exact(g64)
    eps = resolve_eps("rms_norm", params.get("eps"), dtype, conv)
    _, rinv = norm_stats(r, x, eps, centred=False)

    def rinv_at(q: Rounding) -> Tracked:
        return rinv if q == r else norm_stats(q, x, eps, centred=False)[1]

    xhat = em.mul(r, x, rinv)
    lowp = _before_weight_unit(conv, dtype)  # the weight multiply and its backward run in the dtype
    gw = em.mul(r, g, w, unit=lowp)
    c = em.mean(r, em.mul(r, gw, xhat))
    # two paths reach x (directly, and through mean(x²)); autodiff rounds each partial gradient where it
    # stores intermediates, after the factor r, and then sums them
    dx = em.sub(r, em.mul(r, rinv, gw), em.mul(r, rinv, em.mul(r, xhat, c)), unit=r.u_work)
    return {"x": dx, "weight": _weight_grad(r, conv, dtype, g, lambda q, unit: em.mul(q, x, rinv_at(q), unit=unit))}


def layer_norm_vjp(
    inputs: Inputs, params: Mapping[str, Any], conv: Conventions, dtype: Format, g64: F64
) -> dict[str, Tracked]:
    r = rounding("layer_norm", dtype, conv, grad=True)
    x, w, g = em.exact(inputs["x"]), _norm_weight(r, inputs["weight"], conv, dtype), em.exact(g64)
    eps = resolve_eps("layer_norm", params.get("eps"), dtype, conv)
    xc, rinv = norm_stats(r, x, eps, centred=True, variance=conv.variance)
    xhat = em.mul(r, xc, rinv)
    lowp = _before_weight_unit(conv, dtype)
    gw = em.mul(r, g, w, unit=lowp)
    # three paths reach x (directly, through μ and through σ²), each partial rounded after the factor r
    direct = em.mul(r, rinv, gw)
    via_mean = em.mul(r, rinv, em.mean(r, gw))
    via_var = em.mul(r, rinv, em.mul(r, xhat, em.mean(r, em.mul(r, gw, xhat))))

    def xhat_at(q: Rounding, unit: float | None) -> Tracked:
        c, ri = (xc, rinv) if q == r else norm_stats(q, x, eps, centred=True, variance=conv.variance)
        return em.mul(q, c, ri, unit=unit)

    return {
        "x": em.sub(r, em.sub(r, direct, via_mean), via_var, unit=r.u_work),
        "weight": _weight_grad(r, conv, dtype, g, xhat_at),
        "bias": em.sum_rows(r, g, unit=r.u_work),
    }

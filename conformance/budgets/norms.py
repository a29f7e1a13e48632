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


def _by_rows(x: np.ndarray, block: Callable[[slice], Tracked]) -> Tracked:
    """A row-wise result over all of x's rows, ``block(rows)`` evaluating one block of them (em.row_blocks)."""
    x2 = em.as_rows(x)
    return em.concat_rows([block(rows) for rows in em.row_blocks(x2.shape[0], x2.shape[-1])], x.shape)


def rms_norm(inputs: Inputs, params: Mapping[str, Any], conv: Conventions, dtype: Format) -> Tracked:
    r = rounding("rms_norm", dtype, conv)
    w = _norm_weight(r, inputs["weight"], conv, dtype)
    eps = resolve_eps("rms_norm", params.get("eps"), dtype, conv)
    x2 = em.as_rows(inputs["x"])

    def block(rows: slice) -> Tracked:
        x = em.exact(x2[rows])
        _, rinv = norm_stats(r, x, eps, centred=False)
        # "before_weight": x̂ is cast to the output dtype before the weight multiply (a second rounding)
        xhat = em.mul(r, x, rinv, unit=dtype.unit_roundoff if conv.norm_rounding == "before_weight" else None)
        return em.mul(r, xhat, w, unit=r.u_work)

    return _by_rows(inputs["x"], block)


def layer_norm(inputs: Inputs, params: Mapping[str, Any], conv: Conventions, dtype: Format) -> Tracked:
    r = rounding("layer_norm", dtype, conv)
    w, b = _norm_weight(r, inputs["weight"], conv, dtype), em.exact(inputs["bias"])
    eps = resolve_eps("layer_norm", params.get("eps"), dtype, conv)
    x2 = em.as_rows(inputs["x"])

    def block(rows: slice) -> Tracked:
        x = em.exact(x2[rows])
        xc, rinv = norm_stats(r, x, eps, centred=True, variance=conv.variance)
        xhat = em.mul(r, xc, rinv, unit=dtype.unit_roundoff if conv.norm_rounding == "before_weight" else None)
        return em.add(r, em.mul(r, xhat, w), b, unit=r.u_work)

    return _by_rows(inputs["x"], block)


def _before_weight_unit(conv: Conventions, dtype: Format) -> float | None:
    """Where a "before_weight" norm rounds in its backward: g·γ and the saved x̂ are products in the dtype."""
    return dtype.unit_roundoff if conv.norm_rounding == "before_weight" else None


def _weight_terms(
    r: Rounding,
    conv: Conventions,
    dtype: Format,
    g: Tracked,
    xhat_at: Callable[[Rounding, float | None], Tracked],
    many: bool,
) -> em.RowSums:
    """The terms of ∂L/∂γ = Σ over rows of g ⊙ x̂ over a block of rows, x̂ as the backward holds it
    (``xhat_at(rounding, unit)``); ``many``: the whole sum has more than λ² rows.

    The terms' roundings in the input dtype (x̂ stored, the products rounded where declared unfused or
    "before_weight") are each a rounding of one element: their sum over many rows is bounded by the
    probabilistic root-sum-square (``em.sum_rows``). What the terms carry at working precision (the
    statistics, shared by a row's features) is the same terms' error with nothing stored in the input
    dtype, and is summed as a worst case. For at most λ² rows the worst case is the smaller bound anyway.
    """
    terms = em.mul(r, g, xhat_at(r, _before_weight_unit(conv, dtype)))
    if not many:
        return em.row_sums(terms)
    fused = dataclasses.replace(r, u_mid=r.u_work)
    return em.row_sums(terms, shared=em.mul(fused, g, xhat_at(fused, None)).e)


def _vjp_by_rows(
    r: Rounding,
    x: np.ndarray,
    g64: F64,
    block: Callable[[Tracked, Tracked, bool], tuple[Tracked, dict[str, em.RowSums]]],
) -> dict[str, Tracked]:
    """∂L/∂x row block by row block (``block(x, g, many)``: a block's ∂L/∂x and the row sums of the parameters'
    gradients), the parameters' gradients summed over all rows once."""
    x2, g2 = em.as_rows(x), em.as_rows(np.asarray(g64).reshape(x.shape))
    many = x2.shape[0] > em.LAMBDA**2
    dx: list[Tracked] = []
    sums: dict[str, em.RowSums] = {}
    for rows in em.row_blocks(x2.shape[0], x2.shape[-1]):
        part, block_sums = block(em.exact(x2[rows]), em.exact(g2[rows]), many)
        dx.append(part)
        sums = {k: sums[k] + t if k in sums else t for k, t in block_sums.items()}
    return {"x": em.concat_rows(dx, x.shape)} | {k: em.summed(r, t, unit=r.u_work) for k, t in sums.items()}


def rms_norm_vjp(
    inputs: Inputs, params: Mapping[str, Any], conv: Conventions, dtype: Format, g64: F64
) -> dict[str, Tracked]:
    r = rounding("rms_norm", dtype, conv, grad=True)
    w = _norm_weight(r, inputs["weight"], conv, dtype)
    eps = resolve_eps("rms_norm", params.get("eps"), dtype, conv)
    lowp = _before_weight_unit(conv, dtype)  # the weight multiply and its backward run in the dtype

    def block(x: Tracked, g: Tracked, many: bool) -> tuple[Tracked, dict[str, em.RowSums]]:
        _, rinv = norm_stats(r, x, eps, centred=False)

        def rinv_at(q: Rounding) -> Tracked:
            return rinv if q == r else norm_stats(q, x, eps, centred=False)[1]

        xhat = em.mul(r, x, rinv)
        gw = em.mul(r, g, w, unit=lowp)
        c = em.mean(r, em.mul(r, gw, xhat))
        # two paths reach x (directly, and through mean(x²)); autodiff rounds each partial gradient where it
        # stores intermediates, after the factor r, and then sums them
        dx = em.sub(r, em.mul(r, rinv, gw), em.mul(r, rinv, em.mul(r, xhat, c)), unit=r.u_work)
        weight = _weight_terms(r, conv, dtype, g, lambda q, unit: em.mul(q, x, rinv_at(q), unit=unit), many)
        return dx, {"weight": weight}

    return _vjp_by_rows(r, inputs["x"], g64, block)


def layer_norm_vjp(
    inputs: Inputs, params: Mapping[str, Any], conv: Conventions, dtype: Format, g64: F64
) -> dict[str, Tracked]:
    r = rounding("layer_norm", dtype, conv, grad=True)
    w = _norm_weight(r, inputs["weight"], conv, dtype)
    eps = resolve_eps("layer_norm", params.get("eps"), dtype, conv)
    lowp = _before_weight_unit(conv, dtype)

    def block(x: Tracked, g: Tracked, many: bool) -> tuple[Tracked, dict[str, em.RowSums]]:
        xc, rinv = norm_stats(r, x, eps, centred=True, variance=conv.variance)
        xhat = em.mul(r, xc, rinv)
        gw = em.mul(r, g, w, unit=lowp)
        # three paths reach x (directly, through μ and through σ²), each partial rounded after the factor r
        direct = em.mul(r, rinv, gw)
        via_mean = em.mul(r, rinv, em.mean(r, gw))
        via_var = em.mul(r, rinv, em.mul(r, xhat, em.mean(r, em.mul(r, gw, xhat))))

        def xhat_at(q: Rounding, unit: float | None) -> Tracked:
            c, ri = (xc, rinv) if q == r else norm_stats(q, x, eps, centred=True, variance=conv.variance)
            return em.mul(q, c, ri, unit=unit)

        dx = em.sub(r, em.sub(r, direct, via_mean), via_var, unit=r.u_work)
        return dx, {"weight": _weight_terms(r, conv, dtype, g, xhat_at, many), "bias": em.row_sums(g)}

    return _vjp_by_rows(r, inputs["x"], g64, block)

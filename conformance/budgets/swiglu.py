"""Budget of the SwiGLU MLP, forward and backward (seed-002 §3.3)."""

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


def _silu_parts(r: Rounding, a: Tracked) -> tuple[Tracked, Tracked]:
    """(σ(a), SiLU(a) = a·σ(a)), σ stored where intermediates are.

    σ is the elementary function (it may lose results below the smallest normal number); SiLU is the
    product, as a chain of framework ops computes it.
    """
    sigma = ref.swiglu.sigmoid

    def dsigma(v: F64) -> F64:
        return sigma(v) * (1.0 - sigma(v))

    sig = em.func(r, a, sigma, dsigma, spread=em.secant(sigma, dsigma))
    return sig, em.mul(r, a, sig)


def _silu_vjp(r: Rounding, a: Tracked, sig: Tracked, ds: Tracked) -> Tracked:
    """∂L/∂a = ds·σ + (ds·a)·(σ·(1 − σ)): the product rule on a·σ(a), as autodiff evaluates it.

    σ's absolute error reaches the result multiplied by about |ds|·|1 + a|, as it does in real kernels; a
    fused kernel computes the same terms with fewer roundings, well within this.
    """
    one = em.exact(np.ones_like(a.v))
    dsig = em.mul(r, sig, em.sub(r, one, sig))
    return em.add(r, em.mul(r, ds, sig), em.mul(r, em.mul(r, ds, a), dsig))


def swiglu_mlp(inputs: Inputs, params: Mapping[str, Any], conv: Conventions, dtype: Format) -> Tracked:
    r = rounding("swiglu_mlp", dtype, conv)
    x, w1, w3, w2 = (em.exact(inputs[k]) for k in ("x", "w1", "w3", "w2"))
    _, silu = _silu_parts(r, em.matmul(r, x, w1))
    h = em.mul(r, silu, em.matmul(r, x, w3))
    return em.matmul(r, h, w2, unit=r.u_work)


def swiglu_mlp_vjp(
    inputs: Inputs, params: Mapping[str, Any], conv: Conventions, dtype: Format, g64: F64
) -> dict[str, Tracked]:
    r = rounding("swiglu_mlp", dtype, conv, grad=True)
    shape = inputs["x"].shape
    x, g = em.rows(em.exact(inputs["x"])), em.rows(em.exact(g64))
    w1, w3, w2 = (em.exact(inputs[k]) for k in ("w1", "w3", "w2"))
    a, b = em.matmul(r, x, w1), em.matmul(r, x, w3)
    sig, silu = _silu_parts(r, a)
    h = em.mul(r, silu, b)
    dh = em.matmul(r, g, em.transpose(w2))
    da = _silu_vjp(r, a, sig, em.mul(r, dh, b))
    db = em.mul(r, dh, silu)
    dx = em.add(r, em.matmul(r, da, em.transpose(w1)), em.matmul(r, db, em.transpose(w3)), unit=r.u_work)
    xt = em.transpose(x)
    return {
        "x": Tracked(dx.v.reshape(shape), dx.e.reshape(shape), dx.m.reshape(shape)),
        "w1": em.matmul(r, xt, da, unit=r.u_work),
        "w3": em.matmul(r, xt, db, unit=r.u_work),
        "w2": em.matmul(r, em.transpose(h), g, unit=r.u_work),
    }

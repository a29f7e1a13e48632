"""Error budgets of the MLP family (ReLU, three GELU forms, squared ReLU; SwiGLU, GeGLU, ReGLU) in tracked
arithmetic, forward and VJP.

Each activation f is charged as an elementary function of its argument a: the argument's error carried by
|f'(a)| (first order; ReLU's by its Lipschitz constant 1), plus K units of working precision at the *condition
scale* M(a) of the formula — the magnitude of the terms a correct implementation combines. M is what matters
where terms cancel: ½a(1 + erf(a/√2)) at a = −6 is a tiny difference of ½|a|-sized terms, so a float32 GELU is
good to ~u·|a| there, not u·|GELU(a)|. K counts the elementary function (TRANSCENDENTAL_ULPS) and the
roundings of the arithmetic around it. The derivatives f' are charged the same way, with |f''| carrying the
argument's error; ReLU's derivative is a step, so where |a| does not exceed its error it may be either 0 or 1.

x·σ(1.702x) is not one function where a candidate declares the MLP ``unfused``: frameworks run it as three ops
(transformers' ``quick_gelu``), so c·x, σ and the product are each stored in the input dtype, and autograd's
backward stores each of its partial gradients too. Those roundings are charged one by one in tracked arithmetic
(:func:`sigmoid_product`, :func:`sigmoid_product_vjp`) — including their absolute losses in the subnormal range,
which the product with x and the weights that follow carry — and the budget is the wider of the two models.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
from numpy.typing import NDArray

from transformer_conformance.adapters.contract import Conventions
from transformer_conformance.conformance.budgets import error_model as em
from transformer_conformance.conformance.budgets.error_model import TRANSCENDENTAL_ULPS as T
from transformer_conformance.conformance.budgets.error_model import Rounding, Tracked
from transformer_conformance.conformance.budgets.rounding import rounding
from transformer_conformance.reference.formats import Format
from transformer_conformance.reference.mlp import ACTIVATIONS, GELU_SIGMOID_SLOPE, GELU_TANH_CUBIC, _erf
from transformer_conformance.reference.swiglu import sigmoid

F64 = NDArray[np.float64]
Inputs = Mapping[str, np.ndarray]
_K = math.sqrt(2.0 / math.pi)


def _tanh_inner(a: F64) -> tuple[F64, F64]:
    """(tanh of the tanh-GELU's inner argument, that argument's magnitude)."""
    inner = _K * (a + GELU_TANH_CUBIC * a**3)
    return np.tanh(inner), _K * (np.abs(a) + GELU_TANH_CUBIC * np.abs(a) ** 3)


def _scale_value(name: str, a: F64) -> tuple[float, F64]:
    """(K, M(a)) of the activation's value."""
    f = ACTIVATIONS[name][0]
    if name == "gelu_erf":
        return T + 3, np.abs(a)
    if name == "gelu_tanh":
        t, inner = _tanh_inner(a)
        return T + 6, np.abs(a) + 0.5 * np.abs(a) * (1 - t * t) * inner
    if name in ("gelu_sigmoid", "silu"):
        c = GELU_SIGMOID_SLOPE if name == "gelu_sigmoid" else 1.0
        s = sigmoid(c * a)
        return T + 3, np.abs(f(a)) + np.abs(a) * s * (1 - s) * c * np.abs(a)
    if name == "relu":
        return 0.0, np.abs(f(a))
    if name == "relu_squared":
        return 1.0, np.abs(f(a))
    raise KeyError(name)


def _scale_derivative(name: str, a: F64) -> tuple[float, F64]:
    """(K, M(a)) of the activation's derivative."""
    df = ACTIVATIONS[name][1]
    if name == "gelu_erf":
        phi = np.exp(-0.5 * a * a) / math.sqrt(2 * math.pi)
        return 2 * T + 4, 0.5 * (1 + np.abs(_erf(a / math.sqrt(2)))) + np.abs(a) * phi
    if name == "gelu_tanh":
        t, inner = _tanh_inner(a)
        slope = _K * (1 + 3 * GELU_TANH_CUBIC * a * a)
        d_inner = np.abs(0.5 * (1 - t * t)) + np.abs(a * t * (1 - t * t) * slope)
        # t's own absolute error reaches f' = ½(1 + t) + ½a(1 − t²)·slope through ½ + |a·t|·slope
        d_t = 0.5 + np.abs(a * t) * slope
        return T + 8, 0.5 * (1 + np.abs(t)) + 0.5 * np.abs(a) * (1 - t * t) * slope + d_inner * inner + d_t
    if name in ("gelu_sigmoid", "silu"):
        c = GELU_SIGMOID_SLOPE if name == "gelu_sigmoid" else 1.0
        z = c * a
        s = sigmoid(z)
        return T + 4, s + np.abs(z) * s * (1 - s) * (1 + np.abs(2 + z * (1 - 2 * s)))
    if name in ("relu", "relu_squared"):
        return 1.0, np.abs(df(a))
    raise KeyError(name)


def _second(df: Callable[[F64], F64], a: F64) -> F64:
    """|f''(a)| by a central difference of f' in float64 (f' is smooth for the GELU forms and SiLU)."""
    h = 1e-5 * np.maximum(1.0, np.abs(a))
    return np.abs(df(a + h) - df(a - h)) / (2 * h)


def _underflow(r: Rounding, name: str, a: F64) -> F64:
    """The elementary function's absolute loss of a subnormal result (σ(z) or φ(a) flushed to 0, error_model.tiny)
    as it reaches f and f': through coefficients of at most 1 + c·|a| (a·σ(c·a); σ + z·σ(1 − σ); Φ + a·φ)."""
    c = GELU_SIGMOID_SLOPE if name == "gelu_sigmoid" else 1.0
    return em.tiny(r.u_work) * (1.0 + c * np.abs(a))


def _composite(r: Rounding, name: str) -> bool:
    """Whether the activation runs as separate ops, each stored: x·σ(cx) with intermediates in the input dtype."""
    return name == "gelu_sigmoid" and r.u_mid != r.u_work


def _d_sigmoid(z: F64) -> F64:
    s = sigmoid(z)
    return s * (1 - s)


def _sigmoid(r: Rounding, z: Tracked) -> Tracked:
    """σ(z) in working precision, stored: the argument's error carried by the secant (σ decays exponentially)."""
    return em.func(r, z, sigmoid, _d_sigmoid, spread=em.secant(sigmoid, _d_sigmoid))


def sigmoid_product(r: Rounding, a: Tracked, unit: float | None = None) -> Tracked:
    """x·σ(c·x) as three ops: c·x stored, σ of it stored, the product stored at ``unit``."""
    z = em.mul(r, em.const(r, GELU_SIGMOID_SLOPE), a)
    return em.mul(r, a, _sigmoid(r, z), unit=unit)


def sigmoid_product_vjp(r: Rounding, a: Tracked, gh: Tracked) -> Tracked:
    """∂L/∂x of x·σ(c·x) for the upstream ``gh`` as autograd computes it from the forward's stored σ: gh·σ and
    gh·x stored; σ's backward (gh·x)·σ(1 − σ) in working precision, stored; times c, stored; the two partial
    gradients added and stored."""
    s = _sigmoid(r, em.mul(r, em.const(r, GELU_SIGMOID_SLOPE), a))
    ds = em.func(r, s, lambda v: v * (1 - v), lambda v: 1 - 2 * v, unit=r.u_work, ulps=2.0)
    dz = em.mul(r, em.mul(r, gh, a), ds)
    return em.add(r, em.mul(r, gh, s), em.mul(r, dz, em.const(r, GELU_SIGMOID_SLOPE)))


def activation(r: Rounding, a: Tracked, name: str, unit: float | None = None) -> Tracked:
    fused = _activation(r, a, name, unit)
    return em.widest(fused, sigmoid_product(r, a, unit)) if _composite(r, name) else fused


def activation_vjp(r: Rounding, a: Tracked, gh: Tracked, name: str) -> Tracked:
    """∂L/∂a = gh·f'(a) for the activation's upstream gradient ``gh``."""
    fused = em.mul(r, gh, activation_derivative(r, a, name))
    return em.widest(fused, sigmoid_product_vjp(r, a, gh)) if _composite(r, name) else fused


def _activation(r: Rounding, a: Tracked, name: str, unit: float | None = None) -> Tracked:
    f, df = ACTIVATIONS[name]
    k, scale = _scale_value(name, a.v)
    v = f(a.v)
    if name == "relu":
        carried = a.e  # 1-Lipschitz
    elif name == "relu_squared":
        carried = 2 * np.abs(np.maximum(a.v, 0)) * a.e + a.e * a.e
    else:
        carried = em.secant(f, df)(a.v, a.e)
    e = carried + k * r.u_work * scale + _underflow(r, name, a.v) + em._store(r, v, unit)
    return Tracked(v, e, np.maximum(np.abs(v), scale))


def activation_derivative(r: Rounding, a: Tracked, name: str, unit: float | None = None) -> Tracked:
    df = ACTIVATIONS[name][1]
    k, scale = _scale_derivative(name, a.v)
    v = df(a.v)
    if name == "relu":
        carried = (np.abs(a.v) <= a.e).astype(np.float64)  # the step may land on either side
    elif name == "relu_squared":
        carried = 2 * a.e
    else:
        carried = em.secant(df, lambda v: _second(df, v))(a.v, a.e)
    e = carried + k * r.u_work * scale + _underflow(r, name, a.v) + em._store(r, v, unit)
    return Tracked(v, e, np.maximum(np.abs(v), scale))


def _reshape(t: Tracked, shape: tuple[int, ...]) -> Tracked:
    return Tracked(t.v.reshape(shape), t.e.reshape(shape), t.m.reshape(shape))


def mlp(inputs: Inputs, params: Mapping[str, Any], conv: Conventions, dtype: Format) -> Tracked:
    r = rounding("mlp", dtype, conv)
    x, w_in, w_out = (em.exact(inputs[k]) for k in ("x", "w_in", "w_out"))
    h = activation(r, em.matmul(r, x, w_in), params["activation"])
    return em.matmul(r, h, w_out, unit=r.u_work)


def mlp_vjp(
    inputs: Inputs, params: Mapping[str, Any], conv: Conventions, dtype: Format, g64: F64
) -> dict[str, Tracked]:
    r = rounding("mlp", dtype, conv, grad=True)
    name = params["activation"]
    shape = inputs["x"].shape
    x, g = em.rows(em.exact(inputs["x"])), em.rows(em.exact(g64))
    w_in, w_out = em.exact(inputs["w_in"]), em.exact(inputs["w_out"])
    a = em.matmul(r, x, w_in)
    h = activation(r, a, name)
    da = activation_vjp(r, a, em.matmul(r, g, em.transpose(w_out)), name)
    return {
        "x": _reshape(em.matmul(r, da, em.transpose(w_in), unit=r.u_work), shape),
        "w_in": em.matmul(r, em.transpose(x), da, unit=r.u_work),
        "w_out": em.matmul(r, em.transpose(h), g, unit=r.u_work),
    }


def glu_mlp(inputs: Inputs, params: Mapping[str, Any], conv: Conventions, dtype: Format) -> Tracked:
    r = rounding("glu_mlp", dtype, conv)
    x, w1, w3, w2 = (em.exact(inputs[k]) for k in ("x", "w1", "w3", "w2"))
    return glu_t(r, x, w1, w3, w2, params["activation"], unit=r.u_work)


def glu_t(r: Rounding, x: Tracked, w1: Tracked, w3: Tracked, w2: Tracked, name: str, unit: float | None) -> Tracked:
    s = activation(r, em.matmul(r, x, w1), name)
    return em.matmul(r, em.mul(r, s, em.matmul(r, x, w3)), w2, unit=unit)


def glu_vjp_t(
    r: Rounding, x: Tracked, w1: Tracked, w3: Tracked, w2: Tracked, name: str, g: Tracked, unit: float | None = None
) -> tuple[Tracked, Tracked, Tracked, Tracked]:
    """(∂x, ∂W₁, ∂W₃, ∂W₂) of the GLU MLP on rows x (N, d) and g (N, d), as reference.mlp.glu_mlp_vjp."""
    a, b = em.matmul(r, x, w1), em.matmul(r, x, w3)
    s = activation(r, a, name)
    dh = em.matmul(r, g, em.transpose(w2))
    da = activation_vjp(r, a, em.mul(r, dh, b), name)
    db = em.mul(r, dh, s)
    dx = em.add(r, em.matmul(r, da, em.transpose(w1)), em.matmul(r, db, em.transpose(w3)), unit=unit)
    xt = em.transpose(x)
    h = em.mul(r, s, b)
    return (
        dx,
        em.matmul(r, xt, da, unit=unit),
        em.matmul(r, xt, db, unit=unit),
        em.matmul(r, em.transpose(h), g, unit=unit),
    )


def glu_mlp_vjp(
    inputs: Inputs, params: Mapping[str, Any], conv: Conventions, dtype: Format, g64: F64
) -> dict[str, Tracked]:
    r = rounding("glu_mlp", dtype, conv, grad=True)
    shape = inputs["x"].shape
    x, g = em.rows(em.exact(inputs["x"])), em.rows(em.exact(g64))
    w1, w3, w2 = (em.exact(inputs[k]) for k in ("w1", "w3", "w2"))
    dx, d1, d3, d2 = glu_vjp_t(r, x, w1, w3, w2, params["activation"], g, unit=r.u_work)
    return {"x": _reshape(dx, shape), "w1": d1, "w3": d3, "w2": d2}

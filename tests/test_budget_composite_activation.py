"""x·σ(1.702x) run as three ops (transformers' quick_gelu under an ``unfused`` MLP): the budget covers each op's
rounding to the input dtype, forward and autograd's backward, subnormal results included — and the one-function
model alone does not (docs/tolerance.md, "activations")."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from transformer_conformance.conformance.budgets import error_model as em
from transformer_conformance.conformance.budgets import mlp
from transformer_conformance.reference.formats import fmt
from transformer_conformance.reference.mlp import ACTIVATIONS

C = np.float32(1.702)


def _sigmoid32(z: np.ndarray) -> np.ndarray:
    return (1.0 / (1.0 + np.exp(-z.astype(np.float64)))).astype(np.float32)


def _three_ops(
    a: np.ndarray, gh: np.ndarray, r: Callable[[np.ndarray], np.ndarray]
) -> tuple[np.ndarray, np.ndarray]:
    """The forward and autograd's ∂a as torch runs them on a low-precision tensor: each op in float32, its
    result rounded to the dtype (``r``)."""
    a32, gh32 = a.astype(np.float32), gh.astype(np.float32)
    z = r(C * a32)
    s = r(_sigmoid32(z))
    y = r(a32 * s)
    t1, t2 = r(gh32 * s), r(gh32 * a32)
    dz = r(t2 * (np.float32(1) - s) * s)
    da = r(r(dz * C) + t1)
    return y.astype(np.float64), da.astype(np.float64)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_three_op_quick_gelu_within_its_budget(dtype: str) -> None:
    f = fmt(dtype)

    def rnd(v: np.ndarray) -> np.ndarray:
        return f.round(v.astype(np.float64)).astype(np.float32)

    rng = np.random.default_rng(0)
    # arguments from subnormal σ(1.702a) (a ≈ −9 … −60 in float16) to large ones, upstream gradients of any sign
    a = f.round(rng.choice([-1, 1], 20000) * 2.0 ** rng.uniform(-12, 6, 20000)).astype(np.float64)
    gh = f.round(rng.standard_normal(20000) * 2.0 ** rng.integers(-6, 6, 20000)).astype(np.float64)
    y, da = _three_ops(a, gh, rnd)
    f_exact, df_exact = ACTIVATIONS["gelu_sigmoid"]
    r = em.Rounding(u_work=2.0**-24, u_mid=f.unit_roundoff)  # unfused: intermediates stored in the dtype
    ta, tg = em.exact(a), em.exact(gh)
    fwd = mlp.activation(r, ta, "gelu_sigmoid")
    bwd = mlp.activation_vjp(r, ta, tg, "gelu_sigmoid")
    err_y, err_da = np.abs(y - f_exact(a)), np.abs(da - gh * df_exact(a))
    assert np.all(err_y <= fwd.e), f"forward: {np.max(err_y / fwd.e):.3g} of its budget"
    assert np.all(err_da <= bwd.e), f"∂a: {np.max(err_da / bwd.e):.3g} of its budget"
    # the activation charged as one function rounded once does not cover the three ops
    one_y = mlp._activation(r, ta, "gelu_sigmoid")
    one_da = em.mul(r, tg, mlp.activation_derivative(r, ta, "gelu_sigmoid"))
    assert np.any(err_y > one_y.e) or np.any(err_da > one_da.e)


def test_fused_declaration_keeps_the_one_function_budget() -> None:
    """Without ``unfused`` (intermediates in working precision) the budget is the one-function model's."""
    r = em.Rounding(u_work=2.0**-24, u_mid=2.0**-24)
    a = em.exact(np.linspace(-40.0, 40.0, 101))
    assert np.array_equal(mlp.activation(r, a, "gelu_sigmoid").e, mlp._activation(r, a, "gelu_sigmoid").e)

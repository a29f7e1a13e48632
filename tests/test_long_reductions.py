"""Budgets of long reductions: ∂γ summed over 32,768 rows separates float32 from input-dtype accumulation
(docs/tolerance.md, "Long reductions")."""

from __future__ import annotations

import numpy as np
import pytest

from transformer_conformance.adapters.contract import Conventions
from transformer_conformance.conformance.budgets import error_model as em
from transformer_conformance.conformance.budgets import registry
from transformer_conformance.conformance.budgets.error_model import Rounding, Tracked, allowed_error
from transformer_conformance.reference import oracle
from transformer_conformance.reference.formats import fmt

F16 = fmt("float16")
#: Liger-Kernel's RMSNorm as its adapter declares it: x̂ rounded to the input dtype before the weight and
#: the backward's products g·x̂ formed in the input dtype
LIGER = Conventions(norm_rounding="before_weight", unfused=frozenset({"rms_norm.vjp"}), eps_defaults={"rms_norm": 1e-6})
ROWS, N = 32_768, 64


@pytest.fixture(scope="module")
def case() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(1)
    x = F16.round(rng.standard_normal((ROWS, N)))
    w = F16.round(1.0 + 0.5 * rng.standard_normal(N))
    g = F16.round(rng.standard_normal((ROWS, N)))
    return {"x": x, "weight": w, "g": g}


def _products(c: dict[str, np.ndarray]) -> np.ndarray:
    """g·x̂ as the declared kernel forms them: 1/RMS in float32, x̂ and the product rounded to float16."""
    x32 = c["x"].astype(np.float32)
    rstd = np.float32(1) / np.sqrt(np.mean(x32 * x32, axis=1, dtype=np.float32) + np.float32(1e-6))
    xhat = (x32 * rstd[:, None]).astype(np.float16)
    return (c["g"] * xhat).astype(np.float16)


def test_weight_gradient_separates_float32_from_float16_accumulation(case: dict[str, np.ndarray]) -> None:
    values = {"x": case["x"].astype(np.float64), "weight": case["weight"].astype(np.float64)}
    g = case["g"].astype(np.float64)
    params = {"eps": 1e-6}
    exact = oracle.vjp("rms_norm", values, params, LIGER, F16, g)["weight"]
    allowed = allowed_error(registry.VJP["rms_norm"](values, params, LIGER, F16, g)["weight"], F16)
    products = _products(case)
    in_float32 = products.astype(np.float32).sum(axis=0, dtype=np.float32).astype(np.float16)
    in_float16 = np.zeros(N, dtype=np.float16)
    for row in products:  # an accumulator of the input dtype, one row after another
        in_float16 = (in_float16 + row).astype(np.float16)
    used32 = np.max(np.abs(in_float32.astype(np.float64) - exact) / allowed)
    used16 = np.max(np.abs(in_float16.astype(np.float64) - exact) / allowed)
    assert used32 < 0.2, used32  # float32 accumulation of the declared products: well inside
    assert used16 > 2.0, used16  # float16 accumulation: over the budget
    # the products' roundings charged as a worst case Σ|eᵢ| gave ±48 here (±17 % of values of a few hundred),
    # which the float16 accumulation (an error of about 16) stayed well inside
    assert np.max(allowed) < 8.0
    assert np.max(np.abs(in_float16.astype(np.float64) - exact)) < 48.0


def test_few_rows_keep_the_worst_case() -> None:
    """At most λ² = 64 rows the root-sum-square bound is never the smaller: small cases are judged as before."""
    r = Rounding(u_work=2.0**-24, u_mid=2.0**-11)
    rng = np.random.default_rng(0)
    for rows in (1, 4, 64):
        v = rng.standard_normal((rows, 8))
        a = Tracked(v, np.abs(v) * 2.0**-11, np.abs(v))
        shared = np.zeros_like(v)
        assert np.allclose(em.sum_rows(r, a, shared=shared).e, em.sum_rows(r, a).e)


def test_shared_errors_stay_worst_case() -> None:
    """Errors common to the terms (``shared``) add up linearly whatever the row count."""
    r = Rounding(u_work=2.0**-24, u_mid=2.0**-24)
    v = np.ones((10_000, 2))
    a = Tracked(v, np.full_like(v, 1e-3), v)
    assert np.all(em.sum_rows(r, a, shared=a.e).e >= 10.0)
    assert np.all(em.sum_rows(r, a, shared=np.zeros_like(v)).e < 2.0)

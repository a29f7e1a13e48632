"""The budgets of the fused LM-head loss and of the z-loss mean carry the oracle's own values (the tracked
arithmetic restates the formula), with finite, non-negative error bounds, ignored rows exactly zero."""

from __future__ import annotations

import numpy as np
import pytest

from transformer_conformance.adapters.contract import Conventions
from transformer_conformance.conformance.budgets import registry as budgets
from transformer_conformance.reference import oracle
from transformer_conformance.reference.formats import fmt

TORCH_LIKE = Conventions(unfused=frozenset({"linear_cross_entropy", "z_loss_mean"}))
LIGER_LIKE = Conventions(
    unfused=frozenset({"linear_cross_entropy"}),
    low_precision_sums=frozenset({"linear_cross_entropy.vjp"}),
    grad_in_forward=frozenset({"linear_cross_entropy"}),
)


def _inputs(dtype_name: str) -> dict[str, np.ndarray]:
    dtype, rng = fmt(dtype_name), np.random.default_rng(0)
    return {
        "x": dtype.round(rng.standard_normal((5, 8))).astype(np.float64),
        "weight": dtype.round(rng.standard_normal((33, 8))).astype(np.float64),
        "bias": dtype.round(rng.standard_normal(33) + 30.0).astype(np.float64),
        "targets": np.array([3, -100, 0, 32, -100], dtype=np.int64),
    }


@pytest.mark.parametrize("conv", [Conventions(), TORCH_LIKE, LIGER_LIKE], ids=["fused", "unfused", "liger"])
@pytest.mark.parametrize("reduction", ["mean", "none"])
@pytest.mark.parametrize("dtype_name", ["float32", "bfloat16"])
def test_linear_cross_entropy_budget_carries_the_oracle(dtype_name: str, reduction: str, conv: Conventions) -> None:
    dtype, x = fmt(dtype_name), _inputs(dtype_name)
    params = {"ignore_index": -100, "reduction": reduction}
    out = budgets.FORWARD["linear_cross_entropy"](x, params, conv, dtype)
    np.testing.assert_allclose(out.v, oracle.forward("linear_cross_entropy", x, params, conv, dtype), rtol=1e-12)
    assert np.all(np.isfinite(out.e)) and np.all(out.e >= 0)
    g = np.linspace(-2.0, 3.0, 5) if reduction == "none" else np.asarray(0.37)
    grads = budgets.VJP["linear_cross_entropy"](x, params, conv, dtype, g)
    want = oracle.vjp("linear_cross_entropy", x, params, conv, dtype, g)
    for k in ("x", "weight", "bias"):
        np.testing.assert_allclose(grads[k].v, want[k], rtol=1e-9, atol=1e-300)
        assert np.all(np.isfinite(grads[k].e)) and np.all(grads[k].e >= 0)
    assert not grads["x"].v[[1, 4]].any() and grads["x"].e[[1, 4]].max() < 1e-30  # underflow allowance only


def test_z_loss_mean_budget_carries_the_oracle() -> None:
    dtype, x = fmt("float16"), _inputs("float16")
    z = {"logits": x["x"] @ x["weight"].T, "targets": x["targets"]}
    params = {"alpha": 1e-3, "ignore_index": -100}
    out = budgets.FORWARD["z_loss_mean"](z, params, TORCH_LIKE, dtype)
    np.testing.assert_allclose(out.v, oracle.forward("z_loss_mean", z, params, TORCH_LIKE, dtype), rtol=1e-12)
    grad = budgets.VJP["z_loss_mean"](z, params, TORCH_LIKE, dtype, np.asarray(2.0))["logits"]
    np.testing.assert_allclose(
        grad.v, oracle.vjp("z_loss_mean", z, params, TORCH_LIKE, dtype, np.asarray(2.0))["logits"]
    )
    assert not grad.e[[1, 4]].any()

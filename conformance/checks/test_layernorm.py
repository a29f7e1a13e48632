"""LayerNorm: γ ⊙ (x − μ)/√(σ² + ε) + β, σ² biased (seed-000 §Normalization; seed-002 §3.2.1)."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from transformer_conformance.adapters.contract import Adapter
from transformer_conformance.conformance.harness import size_regimes
from transformer_conformance.conformance.harness.compare import CheckFailure, Record, check_forward, check_vjp
from transformer_conformance.conformance.harness.marks import check
from transformer_conformance.conformance.harness.properties import check_invariance, run
from transformer_conformance.conformance.harness.series import Along
from transformer_conformance.conformance.strategies import common as cst
from transformer_conformance.conformance.strategies import sizes
from transformer_conformance.reference.formats import Format

CITE = "seed-000 §Normalization: LN(x) = γ ⊙ (x − μ)/√(σ² + ε) + β; seed-002 §3.2.1: σ² = (1/d) Σ (x_j − μ)²"


@check("layer_norm/forward", "layer_norm", "agrees with the oracle", CITE, op="layer_norm")
@given(data=st.data())
def test_forward(adapter: Adapter, dtype: Format, record: Record, data: st.DataObject) -> None:
    case = data.draw(cst.norm_case(dtype, with_bias=True), label="case")
    check_forward(adapter, "layer_norm", case, dtype, record, Along.row_rms(case.inputs["x"]))


@check("layer_norm/gradient", "layer_norm", "VJP agrees with the oracle", CITE, op="layer_norm", grad=True)
@given(data=st.data())
def test_gradient(adapter: Adapter, dtype: Format, record: Record, data: st.DataObject) -> None:
    case = data.draw(cst.norm_case(dtype, with_bias=True), label="case")
    cot = data.draw(cst.cotangent(dtype, case.inputs["x"].shape), label="cotangent")
    check_vjp(adapter, "layer_norm", case, cot, dtype, record)


@check(
    "layer_norm/shift-invariance",
    "layer_norm",
    "LN(x + c) = LN(x) for a constant shift c",
    "seed-000 §Normalization: LayerNorm normalizes each token's vector to zero mean",
    op="layer_norm",
)
@given(data=st.data())
def test_shift_invariance(adapter: Adapter, dtype: Format, record: Record, data: st.DataObject) -> None:
    case = data.draw(cst.norm_case(dtype, with_bias=True), label="case")
    x = case.values()["x"]
    # a shift by a multiple of the largest element's ulp keeps x + c exact in the dtype
    step = float(dtype.ulp(np.max(np.abs(x)) * 4 + dtype.ulp(0.0)))
    c = data.draw(st.integers(-64, 64), label="shift in steps") * step
    shifted = x + c
    if not np.array_equal(dtype.round(shifted).astype(np.float64), shifted):
        return
    check_invariance(
        adapter, "layer_norm", case, dict(case.inputs, x=dtype.round(shifted)), dtype, record, f"shift c = {c:.4g}"
    )


@check(
    "layer_norm/standardises",
    "layer_norm",
    "with γ = 1, β = 0 the output has zero mean and unit biased variance (σ²/(σ² + ε) exactly)",
    CITE,
    op="layer_norm",
)
@given(data=st.data())
def test_standardises(adapter: Adapter, dtype: Format, record: Record, data: st.DataObject) -> None:
    case = data.draw(cst.norm_case(dtype, with_bias=True), label="case")
    x = case.values()["x"]
    n = x.shape[-1]
    if n < 2:
        return
    inputs = dict(case.inputs, weight=dtype.round(np.ones(n)), bias=dtype.round(np.zeros(n)))
    y, allowed, call = run(adapter, "layer_norm", inputs, case.params, dtype, x.shape)
    from transformer_conformance.reference.oracle import resolve_eps

    eps = resolve_eps("layer_norm", case.params.get("eps"), dtype, adapter.conventions)
    var = np.var(x, axis=-1)
    want_var = var / (var + eps)
    mean_err = np.abs(np.mean(y, axis=-1))
    var_err = np.abs(np.mean(y * y, axis=-1) - want_var)
    mean_tol = np.mean(allowed, axis=-1)
    var_tol = np.mean(allowed * (2 * np.abs(y) + allowed), axis=-1)
    record.examples += 1
    used = max(float(np.max(mean_err / mean_tol)), float(np.max(var_err / var_tol)))
    record.observe(used, used, "row mean and variance")
    row = int(np.argmax(np.maximum(mean_err / mean_tol, var_err / var_tol)))
    if mean_err[row] > mean_tol[row]:
        raise CheckFailure(f"mean of row {row}: got {np.mean(y[row]):.6g}, should be 0 ± {mean_tol[row]:.3g} [{call}]")
    if var_err[row] > var_tol[row]:
        raise CheckFailure(
            f"biased variance of row {row}: got {np.mean(y[row] ** 2):.8g}, should be "
            f"{want_var[row]:.8g} ± {var_tol[row]:.3g} [{call}]"
        )


REGIMES = "32,768 rows × 64 (block kernels, ∂γ and ∂β summed over many rows) and 2 × 8192 (long rows)"


@check(
    "layer_norm/regime-forward",
    "layer_norm",
    f"agrees with the oracle in the size regimes kernels dispatch on: {REGIMES}",
    CITE,
    op="layer_norm",
    autocast=False,
)
@sizes.REGIME_SETTINGS
@given(data=st.data())
def test_regime_forward(adapter: Adapter, dtype: Format, record: Record, data: st.DataObject) -> None:
    size_regimes.forward(
        adapter, "layer_norm", data.draw(sizes.norm_cases(dtype, with_bias=True), label="cases"), dtype, record
    )


@check(
    "layer_norm/regime-gradient",
    "layer_norm",
    f"VJP agrees with the oracle in the size regimes kernels dispatch on: {REGIMES}",
    CITE,
    op="layer_norm",
    autocast=False,
    grad=True,
)
@sizes.REGIME_SETTINGS
@given(data=st.data())
def test_regime_gradient(adapter: Adapter, dtype: Format, record: Record, data: st.DataObject) -> None:
    size_regimes.gradient(
        adapter, "layer_norm", data.draw(sizes.norm_cases(dtype, with_bias=True), label="cases"), dtype, record
    )

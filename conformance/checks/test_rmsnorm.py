"""RMSNorm: γ ⊙ x / √(mean(x²) + ε), no shift (seed-000 §Normalization; seed-002 §3.2.1)."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from transformer_conformance.adapters.contract import Adapter
from transformer_conformance.conformance.harness import size_regimes
from transformer_conformance.conformance.harness.compare import Record, check_forward, check_vjp
from transformer_conformance.conformance.harness.marks import check
from transformer_conformance.conformance.harness.properties import check_invariance
from transformer_conformance.conformance.harness.series import Along
from transformer_conformance.conformance.strategies import common as cst
from transformer_conformance.conformance.strategies import sizes
from transformer_conformance.reference.formats import Format

CITE = "seed-000 §Normalization: RMSNorm(x) = γ ⊙ x / √(mean(x²) + ε); seed-002 §3.2.1"


@check("rms_norm/forward", "rms_norm", "agrees with the oracle", CITE, op="rms_norm")
@given(data=st.data())
def test_forward(adapter: Adapter, dtype: Format, record: Record, data: st.DataObject) -> None:
    case = data.draw(cst.norm_case(dtype, with_bias=False), label="case")
    check_forward(adapter, "rms_norm", case, dtype, record, Along.row_rms(case.inputs["x"]))


@check("rms_norm/gradient", "rms_norm", "VJP agrees with the oracle", CITE, op="rms_norm", grad=True)
@given(data=st.data())
def test_gradient(adapter: Adapter, dtype: Format, record: Record, data: st.DataObject) -> None:
    case = data.draw(cst.norm_case(dtype, with_bias=False), label="case")
    cot = data.draw(cst.cotangent(dtype, case.inputs["x"].shape), label="cotangent")
    check_vjp(adapter, "rms_norm", case, cot, dtype, record)


@check(
    "rms_norm/scale-invariance",
    "rms_norm",
    "RMSNorm(c·x) = RMSNorm(x) for c > 0",
    "seed-000 §Normalization: RMSNorm scales by the root-mean-square",
    op="rms_norm",
)
@given(data=st.data())
def test_scale_invariance(adapter: Adapter, dtype: Format, record: Record, data: st.DataObject) -> None:
    case = data.draw(cst.norm_case(dtype, with_bias=False), label="case")
    power = data.draw(st.integers(-6, 8), label="log2 c")  # a power of two: c·x is exact in the dtype
    scaled = dict(case.inputs, x=dtype.round(case.values()["x"] * 2.0**power))
    if not np.array_equal(scaled["x"].astype(np.float64), case.values()["x"] * 2.0**power):
        return  # c·x left the dtype's normal range: the statement is about exact rescaling
    check_invariance(adapter, "rms_norm", case, scaled, dtype, record, f"c = 2^{power}")


REGIMES = "32,768 rows × 64 (block kernels, ∂γ summed over many rows) and 2 × 8192 (long rows)"


@check(
    "rms_norm/regime-forward",
    "rms_norm",
    f"agrees with the oracle in the size regimes kernels dispatch on: {REGIMES}",
    CITE,
    op="rms_norm",
    autocast=False,
)
@sizes.REGIME_SETTINGS
@given(data=st.data())
def test_regime_forward(adapter: Adapter, dtype: Format, record: Record, data: st.DataObject) -> None:
    size_regimes.forward(
        adapter, "rms_norm", data.draw(sizes.norm_cases(dtype, with_bias=False), label="cases"), dtype, record
    )


@check(
    "rms_norm/regime-gradient",
    "rms_norm",
    f"VJP agrees with the oracle in the size regimes kernels dispatch on: {REGIMES}",
    CITE,
    op="rms_norm",
    autocast=False,
    grad=True,
)
@sizes.REGIME_SETTINGS
@given(data=st.data())
def test_regime_gradient(adapter: Adapter, dtype: Format, record: Record, data: st.DataObject) -> None:
    size_regimes.gradient(
        adapter, "rms_norm", data.draw(sizes.norm_cases(dtype, with_bias=False), label="cases"), dtype, record
    )

"""SwiGLU MLP: W₂·(SiLU(W₁x) ⊙ W₃x), no biases, hidden width ⌊8d/3⌋ rounded up (seed-000 §The MLP block;
seed-002 §3.1.1, §3.3.1)."""

from __future__ import annotations

from typing import Any

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from transformer_conformance.adapters.contract import Adapter
from transformer_conformance.conformance.harness import size_regimes
from transformer_conformance.conformance.harness.compare import CheckFailure, Record, check_forward, check_vjp
from transformer_conformance.conformance.harness.marks import check
from transformer_conformance.conformance.strategies import common as cst
from transformer_conformance.conformance.strategies import sizes
from transformer_conformance.conformance.strategies.choices import sampled_from
from transformer_conformance.reference.formats import Format
from transformer_conformance.reference.swiglu import mlp_param_count, swiglu_hidden_dim

CITE = "seed-000 §The MLP block: SwiGLU(x) = W₂·(SiLU(W₁x) ⊙ (W₃x)); seed-002 §3.3.1"
SIZING = (
    "seed-002 §3.3.1: d_ff = ⌊8d/3⌋ rounded to a hardware multiple keeps parameters near 8d², "
    "as a 4× MLP (d = 4096 → 11008; d = 8192 → 21888 with multiple 128)"
)


@check("swiglu/forward", "swiglu", "agrees with the oracle", CITE, op="swiglu_mlp")
@given(data=st.data())
def test_forward(adapter: Adapter, dtype: Format, record: Record, data: st.DataObject) -> None:
    check_forward(adapter, "swiglu_mlp", data.draw(cst.swiglu_case(dtype), label="case"), dtype, record)


@check("swiglu/gradient", "swiglu", "VJP agrees with the oracle", CITE, op="swiglu_mlp", grad=True)
@given(data=st.data())
def test_gradient(adapter: Adapter, dtype: Format, record: Record, data: st.DataObject) -> None:
    case = data.draw(cst.swiglu_case(dtype), label="case")
    cot = data.draw(cst.cotangent(dtype, case.inputs["x"].shape), label="cotangent")
    check_vjp(adapter, "swiglu_mlp", case, cot, dtype, record)


@check(
    "swiglu/hidden-width", "swiglu", "hidden width is ⌊8d/3⌋ rounded up to the multiple", SIZING, op="swiglu_hidden_dim"
)
@given(
    d=st.one_of(st.integers(1, 20000), sampled_from([4096, 8192])),
    multiple=sampled_from([1, 64, 128, 256]),
    multiplier=sampled_from([None, None, None, 1.3, 0.5]),
)
def test_hidden_width(adapter: Adapter, record: Record, d: int, multiple: int, multiplier: float | None) -> None:
    from transformer_conformance.conformance.harness.compare import _invoke

    params: dict[str, Any] = {"d": d, "multiple_of": multiple}
    if multiplier is not None:  # LLaMA-2 70B's ffn_dim_multiplier (1.3) scales ⌊8d/3⌋ before the rounding
        params["ffn_dim_multiplier"] = multiplier
    call = f"{adapter.name}.swiglu_hidden_dim({', '.join(f'{k}={v}' for k, v in params.items())})"
    got = _invoke(call, adapter.forward, "swiglu_hidden_dim", {}, params)
    want = swiglu_hidden_dim(d, multiple, multiplier)
    record.examples += 1
    if int(np.asarray(got)) != want:
        scaled = f" × {multiplier} (floored)" if multiplier is not None else ""
        raise CheckFailure(
            f"hidden width: got {int(np.asarray(got))}, should be {want} (⌊8·{d}/3⌋{scaled} rounded up to "
            f"a multiple of {multiple}) [{call}]"
        )


@check(
    "swiglu/parameter-parity",
    "swiglu",
    "three matrices at the rounded width match a two-matrix 4d MLP's parameter count within the rounding",
    SIZING,
    op="swiglu_hidden_dim",
)
@given(d=st.integers(1, 20000), multiple=sampled_from([1, 64, 128, 256]))
def test_parameter_parity(adapter: Adapter, record: Record, d: int, multiple: int) -> None:
    from transformer_conformance.conformance.harness.compare import _invoke

    call = f"{adapter.name}.swiglu_hidden_dim(d={d}, multiple_of={multiple})"
    h = int(np.asarray(_invoke(call, adapter.forward, "swiglu_hidden_dim", {}, {"d": d, "multiple_of": multiple})))
    gated, dense = mlp_param_count(d, h, gated=True), mlp_param_count(d, 4 * d, gated=False)
    # ⌊8d/3⌋ is within 1 of 8d/3 and rounding up adds < multiple: 3·d·h − 8d² lies in (−3d, 3d·multiple)
    record.examples += 1
    if not -3 * d < gated - dense < 3 * d * multiple:
        raise CheckFailure(
            f"parameters: got 3·d·h = {gated:,} at h = {h}, should be within (−3d, 3d·{multiple}) of "
            f"2·d·4d = {dense:,} [{call}]"
        )


REGIMES = "d = 8192 and h = 8192 (long reductions into and out of the hidden layer)"


@check(
    "swiglu/regime-forward",
    "swiglu",
    f"agrees with the oracle in the size regimes kernels dispatch on: {REGIMES}",
    CITE,
    op="swiglu_mlp",
)
@sizes.REGIME_SETTINGS
@given(data=st.data())
def test_regime_forward(adapter: Adapter, dtype: Format, record: Record, data: st.DataObject) -> None:
    size_regimes.forward(adapter, "swiglu_mlp", data.draw(sizes.swiglu_cases(dtype), label="cases"), dtype, record)


@check(
    "swiglu/regime-gradient",
    "swiglu",
    f"VJP agrees with the oracle in the size regimes kernels dispatch on: {REGIMES}",
    CITE,
    op="swiglu_mlp",
    grad=True,
)
@sizes.REGIME_SETTINGS
@given(data=st.data())
def test_regime_gradient(adapter: Adapter, dtype: Format, record: Record, data: st.DataObject) -> None:
    size_regimes.gradient(adapter, "swiglu_mlp", data.draw(sizes.swiglu_cases(dtype), label="cases"), dtype, record)

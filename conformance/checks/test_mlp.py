"""The MLP family: ReLU, GELU in its erf, tanh and x·σ(1.702x) forms, squared ReLU; SwiGLU, GeGLU, ReGLU; all
bias-free; the hidden width derived from parameter matching for any base ratio (seed-002 §3.3.1, §3.3.2;
seed-000 §The MLP block)."""

from __future__ import annotations

import numpy as np
from hypothesis import example, given
from hypothesis import strategies as st

from transformer_conformance.adapters.contract import Adapter
from transformer_conformance.conformance.harness import size_regimes
from transformer_conformance.conformance.harness.compare import (
    CheckFailure,
    Record,
    _invoke,
    check_forward,
    check_vjp,
    describe_call,
)
from transformer_conformance.conformance.harness.marks import check, declared
from transformer_conformance.conformance.strategies import blocks as sb
from transformer_conformance.conformance.strategies import common as cst
from transformer_conformance.conformance.strategies import sizes
from transformer_conformance.conformance.strategies.choices import sampled_from
from transformer_conformance.conformance.strategies.common import Case
from transformer_conformance.reference.formats import Format
from transformer_conformance.reference.mlp import GLU_ACTIVATIONS, MLP_ACTIVATIONS, ffn_hidden_dim, mlp_weight_count

MLP = (
    'seed-002 §3.3.1: ReLU(x) = max(0, x); GeLU x·Φ(x), "in code approximated as x·σ(1.702x)"; seed-002 §3.3.2: '
    "squared ReLU max(0, x)²"
)
GLU = (
    "seed-002 §3.3.1: SwiGLU W₂(Swish(xW₁) ⊙ xV), GeGLU substitutes GeLU for Swish; seed-002 §3.3.2: ReGLU "
    "(ReLU gate); seed-000 §The MLP block"
)
BIAS_FREE = 'seed-002 §3.3.1: "Drop bias terms everywhere. Modern LLMs omit biases in W₁, V, and W₂"'
SIZING = (
    'seed-002 §3.3.2: "The 8/3 factor only applies to the 4× baseline ... Always derive from parameter matching" '
    "(Gemma 2 8×, T5-11B 64×); LLaMA-2 70B d = 8192 → d_ff = 28672"
)


#: the activations a check draws (only those the adapter declares: ``declared``)
PLAIN = {"activation": MLP_ACTIVATIONS}
GATED = {"activation": GLU_ACTIVATIONS}


def _case(adapter: Adapter, dtype: Format, gated: bool) -> st.SearchStrategy[Case]:
    return sb.mlp_case(dtype, gated, declared(adapter, "glu_mlp" if gated else "mlp", "activation"))


@check(
    "mlp/forward",
    "mlp",
    "act(x·W_in)·W_out agrees with the oracle for every named activation",
    MLP,
    op="mlp",
    choices=PLAIN,
)
@given(data=st.data())
def test_mlp_forward(adapter: Adapter, dtype: Format, record: Record, data: st.DataObject) -> None:
    check_forward(adapter, "mlp", data.draw(_case(adapter, dtype, gated=False), label="case"), dtype, record)


@check("mlp/gradient", "mlp", "VJP agrees with the oracle", MLP, op="mlp", grad=True, choices=PLAIN)
@given(data=st.data())
def test_mlp_gradient(adapter: Adapter, dtype: Format, record: Record, data: st.DataObject) -> None:
    case = data.draw(_case(adapter, dtype, gated=False), label="case")
    cot = data.draw(cst.cotangent(dtype, case.inputs["x"].shape), label="cotangent")
    check_vjp(adapter, "mlp", case, cot, dtype, record)


@check(
    "glu/forward",
    "mlp",
    "(act(xW₁) ⊙ xW₃)·W₂ agrees with the oracle: SwiGLU, GeGLU, ReGLU",
    GLU,
    op="glu_mlp",
    choices=GATED,
)
@given(data=st.data())
def test_glu_forward(adapter: Adapter, dtype: Format, record: Record, data: st.DataObject) -> None:
    check_forward(adapter, "glu_mlp", data.draw(_case(adapter, dtype, gated=True), label="case"), dtype, record)


@check("glu/gradient", "mlp", "VJP agrees with the oracle", GLU, op="glu_mlp", grad=True, choices=GATED)
@given(data=st.data())
def test_glu_gradient(adapter: Adapter, dtype: Format, record: Record, data: st.DataObject) -> None:
    case = data.draw(_case(adapter, dtype, gated=True), label="case")
    cot = data.draw(cst.cotangent(dtype, case.inputs["x"].shape), label="cotangent")
    check_vjp(adapter, "glu_mlp", case, cot, dtype, record)


#: what the MLP family's regime checks cover
REGIMES = "d = 8192 (a long reduction into the hidden layer) and h = 8192 (a long one out of it)"


@check(
    "mlp/regime-forward",
    "mlp",
    f"agrees with the oracle in the size regimes kernels dispatch on: {REGIMES}",
    MLP,
    op="mlp",
    choices=PLAIN,
)
@sizes.REGIME_SETTINGS
@given(data=st.data())
def test_mlp_regime_forward(adapter: Adapter, dtype: Format, record: Record, data: st.DataObject) -> None:
    cases = data.draw(sizes.ffn_cases(dtype, False, declared(adapter, "mlp", "activation")), label="cases")
    size_regimes.forward(adapter, "mlp", cases, dtype, record)


@check(
    "mlp/regime-gradient",
    "mlp",
    f"VJP agrees with the oracle in the size regimes kernels dispatch on: {REGIMES}",
    MLP,
    op="mlp",
    grad=True,
    choices=PLAIN,
)
@sizes.REGIME_SETTINGS
@given(data=st.data())
def test_mlp_regime_gradient(adapter: Adapter, dtype: Format, record: Record, data: st.DataObject) -> None:
    cases = data.draw(sizes.ffn_cases(dtype, False, declared(adapter, "mlp", "activation")), label="cases")
    size_regimes.gradient(adapter, "mlp", cases, dtype, record)


@check(
    "glu/regime-forward",
    "mlp",
    f"agrees with the oracle in the size regimes kernels dispatch on: {REGIMES}",
    GLU,
    op="glu_mlp",
    choices=GATED,
)
@sizes.REGIME_SETTINGS
@given(data=st.data())
def test_glu_regime_forward(adapter: Adapter, dtype: Format, record: Record, data: st.DataObject) -> None:
    cases = data.draw(sizes.ffn_cases(dtype, True, declared(adapter, "glu_mlp", "activation")), label="cases")
    size_regimes.forward(adapter, "glu_mlp", cases, dtype, record)


@check(
    "glu/regime-gradient",
    "mlp",
    f"VJP agrees with the oracle in the size regimes kernels dispatch on: {REGIMES}",
    GLU,
    op="glu_mlp",
    grad=True,
    choices=GATED,
)
@sizes.REGIME_SETTINGS
@given(data=st.data())
def test_glu_regime_gradient(adapter: Adapter, dtype: Format, record: Record, data: st.DataObject) -> None:
    cases = data.draw(sizes.ffn_cases(dtype, True, declared(adapter, "glu_mlp", "activation")), label="cases")
    size_regimes.gradient(adapter, "glu_mlp", cases, dtype, record)


def _zero_maps_to_zero(adapter: Adapter, dtype: Format, record: Record, data: st.DataObject, gated: bool) -> None:
    op = "glu_mlp" if gated else "mlp"
    case = data.draw(_case(adapter, dtype, gated), label="case")
    inputs = dict(case.inputs, x=np.zeros_like(case.inputs["x"]))
    call = describe_call(adapter, op, inputs, case.params)
    out = np.asarray(_invoke(call, adapter.forward, op, inputs, case.params), dtype=np.float64)
    record.examples += 1
    if out.shape != inputs["x"].shape or np.any(out != 0):
        i = tuple(int(j) for j in np.argwhere(out != 0)[0]) if out.shape == inputs["x"].shape else ()
        got = f"{out[i]:.6g} at {i}" if i else f"shape {list(out.shape)}"
        raise CheckFailure(f"{op}(0): got {got}, should be 0 (an MLP without biases maps 0 to 0) [{call}]")


@check(
    "mlp/bias-free",
    "mlp",
    "the zero token maps to exactly zero for every activation: there is no bias to add",
    BIAS_FREE,
    op="mlp",
    choices=PLAIN,
)
@given(data=st.data())
def test_bias_free(adapter: Adapter, dtype: Format, record: Record, data: st.DataObject) -> None:
    _zero_maps_to_zero(adapter, dtype, record, data, gated=False)


@check(
    "glu/bias-free",
    "mlp",
    "the zero token maps to exactly zero for every gated product: there is no bias to add",
    BIAS_FREE,
    op="glu_mlp",
    choices=GATED,
)
@given(data=st.data())
def test_glu_bias_free(adapter: Adapter, dtype: Format, record: Record, data: st.DataObject) -> None:
    _zero_maps_to_zero(adapter, dtype, record, data, gated=True)


RATIOS = sampled_from([1, 2, 2.5, 3, 4, 8, 64])


def _width(adapter: Adapter, params: dict) -> tuple[int, str]:
    call = f"{adapter.name}.ffn_hidden_dim({', '.join(f'{k}={v!r}' for k, v in params.items())})"
    return int(np.asarray(_invoke(call, adapter.forward, "ffn_hidden_dim", {}, params))), call


@check(
    "ffn/hidden-width",
    "mlp",
    "d_ff = ⌊2rd/3⌋ gated (⌊rd⌋ otherwise), × ffn_dim_multiplier, rounded up to multiple_of, for any base ratio r",
    SIZING,
    op="ffn_hidden_dim",
)
@given(
    d=st.one_of(st.integers(1, 20000), sampled_from([1024, 3072, 4096, 8192])),
    ratio=RATIOS,
    gated=st.booleans(),
    multiple=sampled_from([1, 64, 128, 256, 4096]),
    multiplier=sampled_from([None, None, 1.3, 1.5, 0.5]),
)
@example(d=8192, ratio=4, gated=True, multiple=4096, multiplier=1.3)  # LLaMA-2 70B → 28672
def test_hidden_width(
    adapter: Adapter, record: Record, d: int, ratio: float, gated: bool, multiple: int, multiplier: float | None
) -> None:
    params = {"d": d, "base_ratio": ratio, "gated": gated, "multiple_of": multiple, "ffn_dim_multiplier": multiplier}
    got, call = _width(adapter, params)
    want = ffn_hidden_dim(d, ratio, gated, multiple, multiplier)
    record.examples += 1
    if got != want:
        rule = f"⌊2·{ratio}·{d}/3⌋" if gated else f"⌊{ratio}·{d}⌋"
        raise CheckFailure(
            f"hidden width: got {got}, should be {want} ({rule}{f' × {multiplier}' if multiplier else ''} rounded up "
            f"to a multiple of {multiple}) [{call}]"
        )


@check(
    "ffn/parameter-parity",
    "mlp",
    "a gated MLP at the derived width holds the weights of the two-matrix r·d MLP, within the rounding",
    SIZING,
    op="ffn_hidden_dim",
)
@given(d=st.integers(1, 20000), ratio=RATIOS, multiple=sampled_from([1, 64, 128, 256]))
def test_parameter_parity(adapter: Adapter, record: Record, d: int, ratio: float, multiple: int) -> None:
    params = {"d": d, "base_ratio": ratio, "gated": True, "multiple_of": multiple, "ffn_dim_multiplier": None}
    h, call = _width(adapter, params)
    gated = mlp_weight_count(d, h, gated=True)
    dense = 2 * d * ratio * d
    # ⌊2rd/3⌋ is within 1 of 2rd/3 and rounding up adds < multiple: 3dh − 2rd² lies in (−3d, 3d·multiple)
    record.examples += 1
    if not -3 * d < gated - dense < 3 * d * multiple:
        raise CheckFailure(
            f"weights: got 3·d·h = {gated:,} at h = {h}, should be within (−3d, 3d·{multiple}) of 2·d·{ratio}d = "
            f"{dense:,.0f} [{call}]"
        )

"""Cross-entropy and z-loss: z = logsumexp(u), loss = z − u_target, z-loss = α·z² (seed-002 §3.2.2)."""

from __future__ import annotations

import numpy as np
from hypothesis import given
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
from transformer_conformance.conformance.harness.marks import check
from transformer_conformance.conformance.harness.properties import check_invariance
from transformer_conformance.conformance.strategies import common as cst
from transformer_conformance.conformance.strategies import sizes
from transformer_conformance.reference.formats import Format

ZCITE = "seed-002 §3.2.2: z-loss adds α·[z(x)]², z = log Σ exp(u_v); PaLM's α = 10⁻⁴"
CECITE = "seed-002 §3.2.2: the output softmax over the vocabulary, z its log-normaliser"


@check(
    "cross_entropy/forward",
    "cross_entropy",
    "per-token loss z − u_target agrees with the oracle",
    CECITE,
    op="cross_entropy",
)
@given(data=st.data())
def test_ce_forward(adapter: Adapter, dtype: Format, record: Record, data: st.DataObject) -> None:
    check_forward(
        adapter, "cross_entropy", data.draw(cst.logits_case(dtype, with_targets=True), label="case"), dtype, record
    )


@check(
    "cross_entropy/gradient",
    "cross_entropy",
    "gradient g·(softmax(u) − onehot) agrees with the oracle, "
    "confident predictions and non-uniform upstream gradients included",
    CECITE,
    op="cross_entropy",
    grad=True,
)
@given(data=st.data())
def test_ce_gradient(adapter: Adapter, dtype: Format, record: Record, data: st.DataObject) -> None:
    case = data.draw(cst.logits_case(dtype, with_targets=True), label="case")
    cot = data.draw(cst.cotangent(dtype, case.inputs["targets"].shape), label="cotangent")
    check_vjp(adapter, "cross_entropy", case, cot, dtype, record)


@check(
    "cross_entropy/shift-invariance",
    "cross_entropy",
    "adding a constant to every logit leaves the loss unchanged (softmax is shift-invariant)",
    CECITE,
    op="cross_entropy",
)
@given(data=st.data())
def test_ce_shift_invariance(adapter: Adapter, dtype: Format, record: Record, data: st.DataObject) -> None:
    case = data.draw(cst.logits_case(dtype, with_targets=True), label="case")
    u = case.values()["logits"]
    step = float(dtype.ulp(np.max(np.abs(u)) * 4 + 1.0))
    c = data.draw(st.integers(-256, 256), label="shift in steps") * step
    if not np.array_equal(dtype.round(u + c).astype(np.float64), u + c):
        return
    check_invariance(
        adapter,
        "cross_entropy",
        case,
        dict(case.inputs, logits=dtype.round(u + c)),
        dtype,
        record,
        f"shift c = {c:.4g}",
    )


@check("z_loss/value", "z_loss", "z-loss equals α·z²", ZCITE, op="z_loss")
@given(data=st.data())
def test_z_loss_value(adapter: Adapter, dtype: Format, record: Record, data: st.DataObject) -> None:
    check_forward(adapter, "z_loss", data.draw(cst.logits_case(dtype, with_targets=False), label="case"), dtype, record)


@check(
    "z_loss/gradient",
    "z_loss",
    "gradient equals 2α·z·softmax(u) times the upstream gradient",
    ZCITE,
    op="z_loss",
    grad=True,
)
@given(data=st.data())
def test_z_loss_gradient(adapter: Adapter, dtype: Format, record: Record, data: st.DataObject) -> None:
    case = data.draw(cst.logits_case(dtype, with_targets=False), label="case")
    cot = data.draw(cst.cotangent(dtype, case.inputs["logits"].shape[:-1]), label="cotangent")
    check_vjp(adapter, "z_loss", case, cot, dtype, record)


@check("z_loss/default-alpha", "z_loss", "α defaults to 10⁻⁴ when the caller gives none", ZCITE, op="z_loss")
@given(data=st.data())
def test_z_loss_default_alpha(adapter: Adapter, dtype: Format, record: Record, data: st.DataObject) -> None:
    case = data.draw(cst.logits_case(dtype, with_targets=False), label="case")
    call = describe_call(adapter, "z_loss", case.inputs, {})
    got = _invoke(call, adapter.forward, "z_loss", case.inputs, {})
    explicit = _invoke(call, adapter.forward, "z_loss", case.inputs, {"alpha": 1e-4})
    record.examples += 1
    if not np.array_equal(np.asarray(got), np.asarray(explicit)):
        raise CheckFailure(
            f"z-loss without α: got {np.asarray(got).astype(np.float64).tolist()}, should be "
            f"{np.asarray(explicit).astype(np.float64).tolist()} (α = 1e-4) [{call}]"
        )


REGIMES = "a vocabulary of 131,072 (chunked and online-softmax losses)"

@check(
    "z_loss/regime-forward",
    "z_loss",
    f"agrees with the oracle in the size regimes kernels dispatch on: {REGIMES}",
    ZCITE,
    op="z_loss",
)
@sizes.REGIME_SETTINGS
@given(data=st.data())
def test_z_loss_regime_forward(adapter: Adapter, dtype: Format, record: Record, data: st.DataObject) -> None:
    size_regimes.forward(adapter, "z_loss", data.draw(sizes.z_loss_cases(dtype), label="cases"), dtype, record)


@check(
    "z_loss/regime-gradient",
    "z_loss",
    f"VJP agrees with the oracle in the size regimes kernels dispatch on: {REGIMES}",
    ZCITE,
    op="z_loss",
    grad=True,
)
@sizes.REGIME_SETTINGS
@given(data=st.data())
def test_z_loss_regime_gradient(adapter: Adapter, dtype: Format, record: Record, data: st.DataObject) -> None:
    size_regimes.gradient(adapter, "z_loss", data.draw(sizes.z_loss_cases(dtype), label="cases"), dtype, record)


@check(
    "cross_entropy/regime-forward",
    "cross_entropy",
    f"agrees with the oracle in the size regimes kernels dispatch on: {REGIMES}",
    CECITE,
    op="cross_entropy",
)
@sizes.REGIME_SETTINGS
@given(data=st.data())
def test_regime_forward(adapter: Adapter, dtype: Format, record: Record, data: st.DataObject) -> None:
    size_regimes.forward(adapter, "cross_entropy", data.draw(sizes.logits_cases(dtype), label="cases"), dtype, record)


@check(
    "cross_entropy/regime-gradient",
    "cross_entropy",
    f"VJP agrees with the oracle in the size regimes kernels dispatch on: {REGIMES}",
    CECITE,
    op="cross_entropy",
    grad=True,
)
@sizes.REGIME_SETTINGS
@given(data=st.data())
def test_regime_gradient(adapter: Adapter, dtype: Format, record: Record, data: st.DataObject) -> None:
    size_regimes.gradient(adapter, "cross_entropy", data.draw(sizes.logits_cases(dtype), label="cases"), dtype, record)

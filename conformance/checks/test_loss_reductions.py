"""Loss reductions: mean cross-entropy over the valid (non-ignored) tokens only, and z-loss of soft-capped
logits (seed-002 §3.2.2 "QK-Norm and Stability Interventions")."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from transformer_conformance.adapters.contract import Adapter
from transformer_conformance.conformance.harness import size_regimes
from transformer_conformance.conformance.harness.compare import CheckFailure, Record, check_forward, check_vjp
from transformer_conformance.conformance.harness.marks import check
from transformer_conformance.conformance.harness.properties import run
from transformer_conformance.conformance.strategies import losses as lst
from transformer_conformance.conformance.strategies import sizes
from transformer_conformance.conformance.strategies.choices import sampled_from
from transformer_conformance.conformance.strategies.common import Case
from transformer_conformance.reference.formats import Format
from transformer_conformance.reference.losses import valid_tokens

MEAN = (
    "seed-002 §3.2.2: the output softmax over the vocabulary, z its log-normaliser; the training loss is the mean "
    "cross-entropy of the tokens that carry a target"
)
CAP = (
    "seed-002 §3.2.2: soft-capping c·tanh(l/c) clamps extreme logits softly while preserving gradients near zero; "
    "z-loss adds α·[z(x)]²"
)


@check(
    "cross_entropy_mean/forward",
    "cross_entropy_mean",
    "the mean over valid tokens agrees with the oracle (ignored tokens neither summed nor counted)",
    MEAN,
    op="cross_entropy_mean",
)
@given(data=st.data())
def test_ce_mean_forward(adapter: Adapter, dtype: Format, record: Record, data: st.DataObject) -> None:
    check_forward(adapter, "cross_entropy_mean", data.draw(lst.ignored_case(dtype), label="case"), dtype, record)


@check(
    "cross_entropy_mean/gradient",
    "cross_entropy_mean",
    "gradient (g/#valid)·(softmax − onehot) on valid rows, zero on ignored rows; confident predictions included",
    MEAN,
    op="cross_entropy_mean",
    grad=True,
)
@given(data=st.data())
def test_ce_mean_gradient(adapter: Adapter, dtype: Format, record: Record, data: st.DataObject) -> None:
    case = data.draw(lst.ignored_case(dtype), label="case")
    g = dtype.round(np.asarray(data.draw(sampled_from([1.0, 0.37, -2.5, 64.0]), label="g")))
    check_vjp(adapter, "cross_entropy_mean", case, g, dtype, record)


@check(
    "cross_entropy_mean/valid-subset",
    "cross_entropy_mean",
    "the loss equals the same call on the valid tokens alone: ignored tokens change nothing",
    MEAN,
    op="cross_entropy_mean",
)
@given(data=st.data())
def test_ce_mean_valid_subset(adapter: Adapter, dtype: Format, record: Record, data: st.DataObject) -> None:
    case: Case = data.draw(lst.ignored_case(dtype), label="case")
    valid = valid_tokens(case.inputs["targets"], case.params.get("ignore_index", -100))
    sub = {"logits": case.inputs["logits"][valid], "targets": case.inputs["targets"][valid]}
    y_all, a_all, call = run(adapter, "cross_entropy_mean", case.inputs, case.params, dtype, ())
    y_sub, a_sub, _ = run(adapter, "cross_entropy_mean", sub, case.params, dtype, ())
    gap, tol = float(abs(y_all - y_sub)), float(a_all + a_sub)
    record.examples += 1
    record.observe(
        gap / float(dtype.ulp(float(abs(y_sub)))), gap / tol, f"{int((~valid).sum())} of {valid.size} ignored"
    )
    if gap > tol:
        raise CheckFailure(
            f"with {int((~valid).sum())} of {valid.size} tokens ignored: got {float(y_all):.8g}, should be "
            f"{float(y_sub):.8g} ± {tol:.3g}, the loss of the {int(valid.sum())} valid tokens alone [{call}]"
        )


@check(
    "cross_entropy_mean/regime-forward",
    "cross_entropy_mean",
    f"agrees with the oracle in the size regimes kernels dispatch on: {sizes.TOKEN_MEAN_REGIMES}",
    MEAN,
    op="cross_entropy_mean",
)
@sizes.REGIME_SETTINGS
@given(data=st.data())
def test_ce_mean_regime_forward(adapter: Adapter, dtype: Format, record: Record, data: st.DataObject) -> None:
    cases = data.draw(sizes.token_mean_cases(dtype, "cross_entropy_mean"), label="cases")
    size_regimes.forward(adapter, "cross_entropy_mean", cases, dtype, record)


@check(
    "cross_entropy_mean/regime-gradient",
    "cross_entropy_mean",
    f"VJP agrees with the oracle in the size regimes kernels dispatch on: {sizes.TOKEN_MEAN_REGIMES}",
    MEAN,
    op="cross_entropy_mean",
    grad=True,
)
@sizes.REGIME_SETTINGS
@given(data=st.data())
def test_ce_mean_regime_gradient(adapter: Adapter, dtype: Format, record: Record, data: st.DataObject) -> None:
    cases = data.draw(sizes.token_mean_cases(dtype, "cross_entropy_mean"), label="cases")
    size_regimes.gradient(adapter, "cross_entropy_mean", cases, dtype, record)


#: what the soft-capped z-loss regime checks cover
CAP_REGIMES = "a vocabulary of 131,072 (chunked log-sum-exp), logits across the cap's knee"


@check("softcap_z_loss/value", "softcap_z_loss", "α·z(c·tanh(u/c))² agrees with the oracle", CAP, op="softcap_z_loss")
@given(data=st.data())
def test_softcap_value(adapter: Adapter, dtype: Format, record: Record, data: st.DataObject) -> None:
    check_forward(adapter, "softcap_z_loss", data.draw(lst.softcap_case(dtype), label="case"), dtype, record)


@check(
    "softcap_z_loss/gradient",
    "softcap_z_loss",
    "gradient g·2α·z·softmax(ũ)·(1 − tanh²(u/c)) agrees with the oracle, non-uniform upstream gradients",
    CAP,
    op="softcap_z_loss",
    grad=True,
)
@given(data=st.data())
def test_softcap_gradient(adapter: Adapter, dtype: Format, record: Record, data: st.DataObject) -> None:
    from transformer_conformance.conformance.strategies import common as cst

    case = data.draw(lst.softcap_case(dtype), label="case")
    cot = data.draw(cst.cotangent(dtype, case.inputs["logits"].shape[:-1]), label="cotangent")
    check_vjp(adapter, "softcap_z_loss", case, cot, dtype, record)


@check(
    "softcap_z_loss/regime-forward",
    "softcap_z_loss",
    f"agrees with the oracle in the size regimes kernels dispatch on: {CAP_REGIMES}",
    CAP,
    op="softcap_z_loss",
)
@sizes.REGIME_SETTINGS
@given(data=st.data())
def test_softcap_regime_forward(adapter: Adapter, dtype: Format, record: Record, data: st.DataObject) -> None:
    cases = data.draw(sizes.softcap_z_loss_cases(dtype), label="cases")
    size_regimes.forward(adapter, "softcap_z_loss", cases, dtype, record)


@check(
    "softcap_z_loss/regime-gradient",
    "softcap_z_loss",
    f"VJP agrees with the oracle in the size regimes kernels dispatch on: {CAP_REGIMES}",
    CAP,
    op="softcap_z_loss",
    grad=True,
)
@sizes.REGIME_SETTINGS
@given(data=st.data())
def test_softcap_regime_gradient(adapter: Adapter, dtype: Format, record: Record, data: st.DataObject) -> None:
    cases = data.draw(sizes.softcap_z_loss_cases(dtype), label="cases")
    size_regimes.gradient(adapter, "softcap_z_loss", cases, dtype, record)

@check(
    "softcap_z_loss/bounded",
    "softcap_z_loss",
    "capped logits lie in [−c, c], so z ≤ c + ln V and the loss ≤ α·(c + ln V)² whatever the raw logits",
    CAP,
    op="softcap_z_loss",
)
@given(data=st.data())
def test_softcap_bounded(adapter: Adapter, dtype: Format, record: Record, data: st.DataObject) -> None:
    case: Case = data.draw(lst.softcap_case(dtype), label="case")
    raw = case.values()["logits"] * data.draw(sampled_from([10.0, 100.0, 1000.0]), label="× raw")
    # as large as the dtype holds, never infinite: an infinite logit has no error budget (its bound is NaN)
    huge = dtype.round(np.clip(raw, -dtype.max_finite, dtype.max_finite))
    inputs = {"logits": huge}
    y, allowed, call = run(adapter, "softcap_z_loss", inputs, case.params, dtype, huge.shape[:-1])
    cap, alpha, v = case.params["cap"], case.params["alpha"], huge.shape[-1]
    bound = alpha * (cap + np.log(v)) ** 2 + allowed
    record.examples += 1
    i = int(np.argmax(y - bound))
    record.observe(0.0, float(y[i] / bound[i]), f"token {i}")
    if y[i] > bound[i]:
        raise CheckFailure(
            f"loss of token {i} with logits up to {float(np.abs(huge).max()):.4g}: got {y[i]:.6g}, should be at most "
            f"α·(c + ln V)² = {bound[i]:.6g} [{call}]"
        )

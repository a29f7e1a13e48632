"""The training losses from the last hidden state: the LM head's projection fused with its cross-entropy
(loss of x·Wᵀ + b per token or averaged over the tokens that carry a target), and the z-loss term α·z²
averaged over those tokens (seed-000 "The residual stream"; seed-002 §3.2.2)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from transformer_conformance.adapters.contract import Adapter
from transformer_conformance.conformance.budgets import registry as budgets
from transformer_conformance.conformance.budgets.error_model import allowed_error
from transformer_conformance.conformance.harness import size_regimes
from transformer_conformance.conformance.harness.compare import (
    CheckFailure,
    Record,
    _validate,
    call_op,
    check_forward,
    check_vjp,
    describe_call,
)
from transformer_conformance.conformance.harness.marks import check, declared
from transformer_conformance.conformance.harness.properties import run
from transformer_conformance.conformance.strategies import common as cst
from transformer_conformance.conformance.strategies import linear_losses as lls
from transformer_conformance.conformance.strategies import sizes
from transformer_conformance.conformance.strategies.choices import sampled_from
from transformer_conformance.conformance.strategies.common import Case
from transformer_conformance.reference import oracle
from transformer_conformance.reference.linear_losses import REDUCTIONS
from transformer_conformance.reference.losses import valid_tokens

HEAD = (
    "seed-000 The residual stream: a final normalization and the LM head turn the stream into next-token logits; "
    "seed-002 §3.2.2: the output softmax over the vocabulary, z its log-normaliser; the training loss is the mean "
    "cross-entropy of the tokens that carry a target"
)
ZMEAN = (
    "seed-002 §3.2.2: z-loss adds α·[z(x)]² to the training objective, z = log Σ exp(u_v); as a term of the "
    "objective it is averaged over the tokens that carry a target, as the cross-entropy is"
)
OP = "linear_cross_entropy"
#: examples of the checks whose property needs few draws to be exercised (every token ignored: a fixed answer)
#: or that call the candidate's backward twice an example; a quarter and a half of the profile's
_FEW = max(5, (settings.default.max_examples if settings.default else 40) // 4)
_HALF = max(5, (settings.default.max_examples if settings.default else 40) // 2)
CHOICES = {"reduction": REDUCTIONS}


def _case(adapter: Adapter, dtype: Any, exact: bool = False) -> st.SearchStrategy[Case]:
    return lls.linear_ce_case(dtype, declared(adapter, OP, "reduction"), exact=exact)


def _cotangent(data: st.DataObject, case: Case, dtype: Any) -> np.ndarray:
    """A scalar upstream gradient for the mean; a non-uniform per-token one for reduction "none"."""
    if case.params["reduction"] == "none":
        return np.asarray(data.draw(cst.cotangent(dtype, case.inputs["targets"].shape), label="cotangent"))
    return np.asarray(dtype.round(np.asarray(data.draw(sampled_from([1.0, 0.37, -2.5, 64.0]), label="g"))))


def _grads(
    adapter: Adapter, op: str, inputs: Mapping[str, np.ndarray], params: Mapping[str, Any], cot: np.ndarray, dtype: Any
) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray], str]:
    """The candidate's gradients as float64 and the allowed error of each element."""
    call = describe_call(adapter, op, inputs, params, kind="vjp")
    got = call_op(adapter, op, inputs, params, call, cot)
    values = {k: v if v.dtype.kind in "iu" else v.astype(np.float64) for k, v in inputs.items()}
    budget = budgets.VJP[op](values, params, adapter.conventions, dtype, cot.astype(np.float64))
    out, allowed = {}, {}
    for k in oracle.INPUTS[op]:
        if not isinstance(got, Mapping) or k not in got:
            raise CheckFailure(f"vjp: no gradient for {k} [{call}]")
        out[k] = _validate(got[k], inputs[k].shape, dtype, f"d{k}", call).astype(np.float64)
        allowed[k] = allowed_error(budget[k], dtype)
    return out, allowed, call


@check(
    "linear_cross_entropy/forward",
    "linear_cross_entropy",
    "the loss of x·Wᵀ + b agrees with the oracle",
    HEAD,
    op=OP,
    choices=CHOICES,
)
@given(data=st.data())
def test_forward(adapter: Adapter, dtype: Any, record: Record, data: st.DataObject) -> None:
    check_forward(adapter, OP, data.draw(_case(adapter, dtype), label="case"), dtype, record)


@check(
    "linear_cross_entropy/gradient",
    "linear_cross_entropy",
    "∂x = D·W, ∂W = Dᵀ·x, ∂b = Σ_t D_t with D = c_t·(softmax − onehot) agree with the oracle; each token scaled "
    "by its own upstream gradient (non-uniform per token for reduction none)",
    HEAD,
    op=OP,
    grad=True,
    choices=CHOICES,
)
@given(data=st.data())
def test_gradient(adapter: Adapter, dtype: Any, record: Record, data: st.DataObject) -> None:
    case = data.draw(_case(adapter, dtype), label="case")
    check_vjp(adapter, OP, case, _cotangent(data, case, dtype), dtype, record)


REGIMES = (
    "2048 tokens through a head of 1024 classes over hidden 64, a quarter ignored (fused kernels walk the tokens in "
    "chunks, ∂W and ∂b summed over them); a vocabulary of 131,072"
)


@check(
    "linear_cross_entropy/regime-forward",
    "linear_cross_entropy",
    f"agrees with the oracle in the size regimes kernels dispatch on: {REGIMES}",
    HEAD,
    op=OP,
    choices=CHOICES,
)
@sizes.REGIME_SETTINGS
@given(data=st.data())
def test_regime_forward(adapter: Adapter, dtype: Any, record: Record, data: st.DataObject) -> None:
    cases = data.draw(sizes.linear_ce_cases(dtype, declared(adapter, OP, "reduction")), label="cases")
    size_regimes.forward(adapter, OP, cases, dtype, record)


@check(
    "linear_cross_entropy/regime-gradient",
    "linear_cross_entropy",
    f"VJP agrees with the oracle in the size regimes kernels dispatch on: {REGIMES}; a per-token upstream "
    "gradient for reduction none",
    HEAD,
    op=OP,
    grad=True,
    choices=CHOICES,
)
@sizes.REGIME_SETTINGS
@given(data=st.data())
def test_regime_gradient(adapter: Adapter, dtype: Any, record: Record, data: st.DataObject) -> None:
    cases = data.draw(sizes.linear_ce_cases(dtype, declared(adapter, OP, "reduction")), label="cases")
    size_regimes.gradient(adapter, OP, cases, dtype, record)


@check(
    "linear_cross_entropy/equals-unfused",
    "linear_cross_entropy",
    "the fused loss equals the candidate's own cross-entropy of the logits x·Wᵀ + b (exact in the dtype here)",
    HEAD,
    op=OP,
    choices=CHOICES,
)
@given(data=st.data())
def test_equals_unfused(adapter: Adapter, dtype: Any, record: Record, data: st.DataObject) -> None:
    case: Case = data.draw(_case(adapter, dtype, exact=True), label="case")
    x, w, b = (case.inputs[k].astype(np.float64) for k in ("x", "weight", "bias"))
    u64 = x @ w.T + b
    logits = dtype.round(u64)
    assert np.array_equal(logits.astype(np.float64), u64), "the exact case's logits are not exact"
    per_token = case.params["reduction"] == "none"
    y, a, call = run(adapter, OP, dict(case.inputs), dict(case.params), dtype, () if not per_token else u64.shape[:1])
    valid = valid_tokens(case.inputs["targets"], case.params["ignore_index"])
    unfused = "cross_entropy" if per_token else "cross_entropy_mean"
    if unfused in adapter.capabilities and dtype.name in adapter.capabilities[unfused].dtypes:
        targets = np.where(valid, case.inputs["targets"], 0) if per_token else case.inputs["targets"]
        params = {} if per_token else {"ignore_index": case.params["ignore_index"]}
        want, a2, _ = run(adapter, unfused, {"logits": logits, "targets": targets}, params, dtype, y.shape)
        if per_token:
            want, a2 = np.where(valid, want, 0.0), np.where(valid, a2, 0.0)
        whose = f"its own {unfused}"
    else:  # the oracle's per-token cross-entropy, averaged here over the valid tokens for the mean
        want = oracle.forward(
            "cross_entropy",
            {"logits": u64, "targets": np.where(valid, case.inputs["targets"], 0)},
            {},
            adapter.conventions,
            dtype,
        )
        want = np.where(valid, want, 0.0) if per_token else np.asarray(float(np.mean(want[valid])))
        a2 = np.zeros_like(a)
        whose = "the oracle's cross-entropy"
    gap, tol = np.abs(y - want), a + a2
    record.examples += 1
    i = int(np.argmax(gap - tol)) if gap.ndim else 0
    g_i, t_i = float(np.ravel(gap)[i]), float(np.ravel(tol)[i])
    record.observe(g_i / float(dtype.ulp(abs(float(np.ravel(want)[i])))), g_i / t_i if t_i else 0.0, f"token {i}")
    if g_i > t_i:
        raise CheckFailure(
            f"fused loss {'of token ' + str(i) if per_token else '(mean)'}: got {float(np.ravel(y)[i]):.8g}, should be "
            f"{float(np.ravel(want)[i]):.8g} ± {t_i:.3g}, {whose} of the logits x·Wᵀ + b [{call}]"
        )


@check(
    "linear_cross_entropy/ignored-tokens",
    "linear_cross_entropy",
    "ignored tokens get ∂x = 0 exactly and change neither ∂W nor ∂b (their hidden states replaced, the weight and "
    "bias gradients agree), whatever their upstream gradient",
    HEAD,
    op=OP,
    grad=True,
    choices=CHOICES,
)
@settings(max_examples=_HALF)
@given(data=st.data())
def test_ignored_tokens(adapter: Adapter, dtype: Any, record: Record, data: st.DataObject) -> None:
    case: Case = data.draw(_case(adapter, dtype), label="case")
    valid = valid_tokens(case.inputs["targets"], case.params["ignore_index"])
    if valid.all() and valid.size > 1:  # one ignored token at least, one valid token kept
        valid[-1] = False
        case.inputs["targets"] = np.where(valid, case.inputs["targets"], case.params["ignore_index"])
    cot = _cotangent(data, case, dtype)
    grads, allowed, call = _grads(adapter, OP, case.inputs, case.params, cot, dtype)
    record.examples += 1
    rows = np.flatnonzero(~valid)
    if rows.size and np.any(grads["x"][rows] != 0.0):
        t = int(rows[np.argmax(np.abs(grads["x"][rows]).max(axis=1))])
        raise CheckFailure(
            f"∂L/∂x of ignored token {t} (target {int(case.inputs['targets'][t])} = ignore_index): got "
            f"{grads['x'][t].tolist()[:8]}, should be 0 [{call}]"
        )
    other = dict(case.inputs)
    x = case.inputs["x"].astype(np.float64)
    other["x"] = dtype.round(np.where(valid[:, None], x, 2.0 * x[::-1] + 1.0))
    grads2, allowed2, _ = _grads(adapter, OP, other, case.params, cot, dtype)
    for k in ("weight", "bias"):
        gap, tol = np.abs(grads[k] - grads2[k]), allowed[k] + allowed2[k]
        j = np.unravel_index(int(np.argmax(gap - tol)), gap.shape)
        record.observe(0.0, float(gap[j] / tol[j]) if tol[j] else 0.0, f"∂{k}{list(j)}")
        if gap[j] > tol[j]:
            raise CheckFailure(
                f"∂L/∂{k}{list(map(int, j))} moved from {grads[k][j]:.8g} to {grads2[k][j]:.8g} (± {tol[j]:.3g}) when "
                f"the hidden states of the {rows.size} ignored token(s) changed: ignored tokens enter ∂{k} [{call}]"
            )


def _all_ignored_case(case: Case) -> Case:
    inputs = dict(case.inputs)
    inputs["targets"] = np.full_like(case.inputs["targets"], case.params["ignore_index"])
    return Case(inputs, dict(case.params), dict(case.about))


def _expect_all_ignored(adapter: Adapter, op: str, got: np.ndarray, shape: tuple[int, ...], call: str) -> None:
    """The declared value of a mean over no token (NaN or 0), or 0 per token."""
    zero = op in adapter.conventions.zero_when_all_ignored or shape != ()
    y = np.asarray(got, dtype=np.float64)
    ok = bool(np.all(y == 0.0)) if zero else bool(np.all(np.isnan(y)))
    if not ok:
        want = "0" if zero else "NaN (0/0; declare zero_when_all_ignored for 0)"
        raise CheckFailure(f"every token ignored: got {y.tolist()}, should be {want} [{call}]")


@check(
    "linear_cross_entropy/all-ignored",
    "linear_cross_entropy",
    "with every token ignored the mean is the declared value (NaN, 0/0, or 0 under zero_when_all_ignored), the "
    "per-token losses 0, and every gradient exactly 0 (where the gradient is declared)",
    HEAD,
    op=OP,
    choices=CHOICES,
)
@settings(max_examples=_FEW)
@given(data=st.data())
def test_all_ignored(adapter: Adapter, dtype: Any, record: Record, data: st.DataObject) -> None:
    case = _all_ignored_case(data.draw(_case(adapter, dtype), label="case"))
    call = describe_call(adapter, OP, case.inputs, case.params)
    shape = case.inputs["targets"].shape if case.params["reduction"] == "none" else ()
    out = _validate(call_op(adapter, OP, case.inputs, case.params, call), shape, dtype, f"{OP} output", call)
    record.examples += 1
    _expect_all_ignored(adapter, OP, out, shape, call)
    if not adapter.capabilities[OP].grad:
        return
    cot = _cotangent(data, case, dtype)
    vcall = describe_call(adapter, OP, case.inputs, case.params, kind="vjp")
    got = call_op(adapter, OP, case.inputs, case.params, vcall, cot)
    for k in oracle.INPUTS[OP]:
        g = _validate(got[k], case.inputs[k].shape, dtype, f"d{k}", vcall).astype(np.float64)
        if not np.all(g == 0.0):
            raise CheckFailure(
                f"every token ignored: ∂L/∂{k} has {int(np.sum(g != 0.0))} non-zero elements, should be all 0 [{vcall}]"
            )


# ---------------------------------------------------------------------------------------------- z_loss_mean

ZOP = "z_loss_mean"


@check("z_loss_mean/forward", "z_loss_mean", "the mean of α·z² over valid tokens agrees with the oracle", ZMEAN, op=ZOP)
@given(data=st.data())
def test_z_mean_forward(adapter: Adapter, dtype: Any, record: Record, data: st.DataObject) -> None:
    check_forward(adapter, ZOP, data.draw(lls.z_loss_mean_case(dtype), label="case"), dtype, record)


@check(
    "z_loss_mean/gradient",
    "z_loss_mean",
    "gradient (g/#valid)·2α·z·softmax(u) on valid rows, zero on ignored rows, agrees with the oracle",
    ZMEAN,
    op=ZOP,
    grad=True,
)
@given(data=st.data())
def test_z_mean_gradient(adapter: Adapter, dtype: Any, record: Record, data: st.DataObject) -> None:
    case = data.draw(lls.z_loss_mean_case(dtype), label="case")
    g = dtype.round(np.asarray(data.draw(sampled_from([1.0, 0.37, -2.5, 64.0]), label="g")))
    check_vjp(adapter, ZOP, case, g, dtype, record)


@check(
    "z_loss_mean/regime-forward",
    "z_loss_mean",
    f"agrees with the oracle in the size regimes kernels dispatch on: {sizes.TOKEN_MEAN_REGIMES}",
    ZMEAN,
    op=ZOP,
)
@sizes.REGIME_SETTINGS
@given(data=st.data())
def test_z_mean_regime_forward(adapter: Adapter, dtype: Any, record: Record, data: st.DataObject) -> None:
    size_regimes.forward(adapter, ZOP, data.draw(sizes.token_mean_cases(dtype, ZOP), label="cases"), dtype, record)


@check(
    "z_loss_mean/regime-gradient",
    "z_loss_mean",
    f"VJP agrees with the oracle in the size regimes kernels dispatch on: {sizes.TOKEN_MEAN_REGIMES}",
    ZMEAN,
    op=ZOP,
    grad=True,
)
@sizes.REGIME_SETTINGS
@given(data=st.data())
def test_z_mean_regime_gradient(adapter: Adapter, dtype: Any, record: Record, data: st.DataObject) -> None:
    size_regimes.gradient(adapter, ZOP, data.draw(sizes.token_mean_cases(dtype, ZOP), label="cases"), dtype, record)


@check(
    "z_loss_mean/valid-subset",
    "z_loss_mean",
    "the term equals the same call on the valid tokens alone: ignored tokens are neither summed nor counted",
    ZMEAN,
    op=ZOP,
)
@given(data=st.data())
def test_z_mean_valid_subset(adapter: Adapter, dtype: Any, record: Record, data: st.DataObject) -> None:
    case: Case = data.draw(lls.z_loss_mean_case(dtype), label="case")
    valid = valid_tokens(case.inputs["targets"], case.params["ignore_index"])
    sub = {"logits": case.inputs["logits"][valid], "targets": case.inputs["targets"][valid]}
    y_all, a_all, call = run(adapter, ZOP, dict(case.inputs), dict(case.params), dtype, ())
    y_sub, a_sub, _ = run(adapter, ZOP, sub, dict(case.params), dtype, ())
    gap, tol = float(abs(y_all - y_sub)), float(a_all + a_sub)
    record.examples += 1
    record.observe(
        gap / float(dtype.ulp(float(abs(y_sub)))), gap / tol, f"{int((~valid).sum())} of {valid.size} ignored"
    )
    if gap > tol:
        raise CheckFailure(
            f"with {int((~valid).sum())} of {valid.size} tokens ignored: got {float(y_all):.8g}, should be "
            f"{float(y_sub):.8g} ± {tol:.3g}, the term of the {int(valid.sum())} valid tokens alone [{call}]"
        )


@check(
    "z_loss_mean/all-ignored",
    "z_loss_mean",
    "with every token ignored the term is the declared value: NaN (0/0), or 0 under zero_when_all_ignored",
    ZMEAN,
    op=ZOP,
)
@settings(max_examples=_FEW)
@given(data=st.data())
def test_z_mean_all_ignored(adapter: Adapter, dtype: Any, record: Record, data: st.DataObject) -> None:
    case = _all_ignored_case(data.draw(lls.z_loss_mean_case(dtype), label="case"))
    call = describe_call(adapter, ZOP, case.inputs, case.params)
    out = _validate(call_op(adapter, ZOP, case.inputs, case.params, call), (), dtype, f"{ZOP} output", call)
    record.examples += 1
    _expect_all_ignored(adapter, ZOP, out, (), call)

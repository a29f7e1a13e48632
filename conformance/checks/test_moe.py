"""MoE routing, its load-balancing loss and its z-loss: agreement with the oracle (forward, gradients, size regimes)
and the properties routers promise — each token selects exactly its top k (within its best groups), the weights are
an equivariant function of the logits, renormalised weights sum to the scaling factor, the bias moves the selection
only; the load-balancing loss is k (or 1) at uniform routing; the router z-loss is a mean over the tokens, blind to
their order and the experts' (reference/moe.py cites the papers)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from transformer_conformance.adapters.contract import Adapter
from transformer_conformance.conformance.harness import size_regimes
from transformer_conformance.conformance.harness.agreement import agree
from transformer_conformance.conformance.harness.compare import CheckFailure, Record, check_forward, check_vjp
from transformer_conformance.conformance.harness.marks import check, declared
from transformer_conformance.conformance.harness.properties import run
from transformer_conformance.conformance.strategies import common as cst
from transformer_conformance.conformance.strategies import moe as sm
from transformer_conformance.conformance.strategies import sizes
from transformer_conformance.conformance.strategies.common import Case
from transformer_conformance.reference import moe, oracle
from transformer_conformance.reference.formats import Format

ROUTER = (
    "ref: Mixtral of Experts §2.1 (softmax over the top-k logits); Qwen-MoE and OLMoE (top-k softmax weights, "
    "renormalised or not); DeepSeek-V3 §2.1.2 (sigmoid affinities, a selection-only bias, group-limited routing, "
    "weights normalised among the selected, a routed scaling factor)"
)
AUX = (
    "ref: Switch Transformers §2.2: the auxiliary load-balancing loss E·Σ f_e·P_e (what f counts with k > 1 as "
    "declared: aux_loss_fraction)"
)
Z = (
    "ref: ST-MoE (Zoph et al. 2022) §3.3, equation 5: the router z-loss (1/N)·Σ_i (log Σ_e exp u_ie)², whose "
    "gradient is 2·z_i·softmax(u_i)/N"
)
OP, AUX_OP, Z_OP = "moe_router", "moe_aux_loss", "moe_z_loss"
ROUTER_CHOICES = {
    "score": moe.SCORES,
    "norm": moe.NORMS,
    "selection": sm.SELECTIONS,
    "routed_scaling": sm.ROUTED_SCALING,
}


def _router(adapter: Adapter, dtype: Format, **only: tuple[str, ...]) -> st.SearchStrategy[Case]:
    """A router case among what the adapter declares (``only``: and among these values of a choice)."""
    picks = {key: declared(adapter, OP, key, only.get(key, values)) for key, values in ROUTER_CHOICES.items()}
    return sm.router_case(dtype, picks["score"], picks["norm"], picks["selection"], picks["routed_scaling"])


def _shape(adapter: Adapter, op: str, case: Case, dtype: Format) -> tuple[int, ...]:
    return oracle.forward(op, case.values(), case.params, adapter.conventions, dtype).shape


@check("moe-router/forward", "moe_routing", "agrees with the oracle", ROUTER, op=OP, choices=ROUTER_CHOICES)
@given(data=st.data())
def test_router_forward(adapter: Adapter, dtype: Format, record: Record, data: st.DataObject) -> None:
    check_forward(adapter, OP, data.draw(_router(adapter, dtype), label="case"), dtype, record)


@check(
    "moe-router/gradient",
    "moe_routing",
    "VJP agrees with the oracle (the selection-only bias has gradient 0)",
    ROUTER,
    op=OP,
    grad=True,
    choices=ROUTER_CHOICES,
)
@given(data=st.data())
def test_router_gradient(adapter: Adapter, dtype: Format, record: Record, data: st.DataObject) -> None:
    case = data.draw(_router(adapter, dtype), label="case")
    cot = data.draw(cst.cotangent(dtype, _shape(adapter, OP, case, dtype)), label="cotangent")
    check_vjp(adapter, OP, case, cot, dtype, record)


@check(
    "moe-router/top-k-set",
    "moe_routing",
    "each token gives a non-zero weight to exactly k experts: the top k of score + bias within its best groups",
    ROUTER,
    op=OP,
    choices=ROUTER_CHOICES,
)
@given(data=st.data())
def test_router_top_k_set(adapter: Adapter, dtype: Format, record: Record, data: st.DataObject) -> None:
    case = data.draw(_router(adapter, dtype), label="case")
    x, kw = case.values(), oracle.router_kw(case.params)
    want = moe.selection(x["logits"], x["bias"], kw["k"], kw["score"], kw["n_group"], kw["topk_group"])
    y, a, call = run(adapter, OP, case.inputs, case.params, dtype, want.shape)
    weight = oracle.forward(OP, x, case.params, adapter.conventions, dtype)
    may_vanish = np.abs(weight) <= a  # a selected weight that rounds (or underflows) to 0 in the dtype
    record.examples += 1
    record.observe(0.0, 0.0, "selected experts")
    for t in range(want.shape[0]):
        chosen = y[t] != 0
        if np.any(chosen & ~want[t]) or np.any(~chosen & want[t] & ~may_vanish[t]):
            raise CheckFailure(
                f"token {t} routed to experts {np.flatnonzero(chosen).tolist()}, should be "
                f"{np.flatnonzero(want[t]).tolist()} (k = {kw['k']}) [{call}]"
            )


def _expert_permutation(case: Case, rng: np.random.Generator) -> np.ndarray:
    """A permutation of the experts that keeps groups whole: the groups permuted, then the experts in each."""
    e, groups = case.inputs["logits"].shape[1], case.params["n_group"] or 1
    size = e // groups
    return np.concatenate([g * size + rng.permutation(size) for g in rng.permutation(groups)])


@check(
    "moe-router/permutation-equivariance",
    "moe_routing",
    "permuting the tokens permutes the weights' rows; permuting the experts (groups kept whole) their columns",
    ROUTER,
    op=OP,
    choices=ROUTER_CHOICES,
)
@given(data=st.data())
def test_router_permutation(adapter: Adapter, dtype: Format, record: Record, data: st.DataObject) -> None:
    case = data.draw(_router(adapter, dtype), label="case")
    rng = np.random.default_rng(data.draw(cst.seeds, label="permutation seed"))
    pt = rng.permutation(case.inputs["logits"].shape[0])
    pe = _expert_permutation(case, rng)
    permuted = {"logits": case.inputs["logits"][pt][:, pe], "bias": case.inputs["bias"][pe]}
    shape = _shape(adapter, OP, case, dtype)
    y, a, call = run(adapter, OP, case.inputs, case.params, dtype, shape)
    yp, ap, _ = run(adapter, OP, permuted, case.params, dtype, shape)
    agree(yp, ap, y[pt][:, pe], a[pt][:, pe], dtype, record, "weights of permuted tokens and experts", call)


@check(
    "moe-router/renormalized-sum",
    "moe_routing",
    "with norm 'topk' each token's weights sum to the routed scaling factor",
    ROUTER,
    op=OP,
    choices={**ROUTER_CHOICES, "norm": ("topk",)},
)
@given(data=st.data())
def test_router_renormalized_sum(adapter: Adapter, dtype: Format, record: Record, data: st.DataObject) -> None:
    case = data.draw(_router(adapter, dtype, norm=("topk",)), label="case")
    y, a, call = run(adapter, OP, case.inputs, case.params, dtype, _shape(adapter, OP, case, dtype))
    c = float(case.params["routed_scaling_factor"])
    # each weight is within its budget of the exact one, and the exact weights sum to c: the exactly summed
    # output (math.fsum: no rounding of our own) is within the sum of the budgets of c
    total = np.array([math.fsum(row) for row in y.reshape(-1, y.shape[-1])]).reshape(y.shape[:-1])
    allowed = a.sum(axis=-1)
    record.examples += 1
    used = np.abs(total - c) / np.maximum(allowed, np.finfo(np.float64).tiny)
    t = int(np.argmax(used))
    record.observe(float(np.max(np.abs(total - c) / dtype.ulp(np.asarray(c)))), float(used[t]), f"token {t}'s sum")
    if used[t] > 1.0:
        raise CheckFailure(f"token {t}'s weights sum to {total[t]:.8g}, should be {c:g} ± {allowed[t]:.3g} [{call}]")


@check(
    "moe-router/bias-selects-only",
    "moe_routing",
    "adding a constant to every expert's bias changes nothing: the bias orders the choice, it never weighs",
    ROUTER,
    op=OP,
    choices={**ROUTER_CHOICES, "selection": ("bias", "groups")},
)
@given(data=st.data())
def test_router_bias_selects_only(adapter: Adapter, dtype: Format, record: Record, data: st.DataObject) -> None:
    case = data.draw(_router(adapter, dtype, selection=("bias", "groups")), label="case")
    c = data.draw(st.sampled_from([0.25, 0.5, -0.5, 1.0]), label="added to the bias")
    shifted = dict(case.inputs, bias=dtype.round(case.inputs["bias"].astype(np.float64) + c))
    if not np.array_equal(shifted["bias"].astype(np.float64), case.inputs["bias"].astype(np.float64) + c):
        return  # the shift is not exact in this dtype: the statement is about the same order
    shape = _shape(adapter, OP, case, dtype)
    y, a, call = run(adapter, OP, case.inputs, case.params, dtype, shape)
    y2, a2, _ = run(adapter, OP, shifted, case.params, dtype, shape)
    agree(y2, a2, y, a, dtype, record, f"weights with {c:+g} on every bias", call)


# ------------------------------------------------------------------------------------------ load-balancing loss


@check("moe-aux-loss/forward", "moe_aux_loss", "agrees with the oracle", AUX, op=AUX_OP)
@given(data=st.data())
def test_aux_loss_forward(adapter: Adapter, dtype: Format, record: Record, data: st.DataObject) -> None:
    check_forward(adapter, AUX_OP, data.draw(sm.aux_loss_case(dtype), label="case"), dtype, record)


@check("moe-aux-loss/gradient", "moe_aux_loss", "VJP agrees with the oracle", AUX, op=AUX_OP, grad=True)
@given(data=st.data())
def test_aux_loss_gradient(adapter: Adapter, dtype: Format, record: Record, data: st.DataObject) -> None:
    case = data.draw(sm.aux_loss_case(dtype), label="case")
    cot = data.draw(cst.cotangent(dtype, ()), label="cotangent")
    check_vjp(adapter, AUX_OP, case, cot, dtype, record)


@check(
    "moe-aux-loss/uniform-routing",
    "moe_aux_loss",
    "with every expert equally likely the loss is k (per_token) or 1 (per_assignment), however ties are broken",
    AUX,
    op=AUX_OP,
)
@given(data=st.data())
def test_aux_loss_uniform(adapter: Adapter, dtype: Format, record: Record, data: st.DataObject) -> None:
    case = data.draw(sm.aux_loss_case(dtype), label="case")
    level = data.draw(st.sampled_from([0.0, -3.0, 5.0]), label="common logit")
    uniform = np.full_like(case.inputs["logits"], level)
    check_forward(adapter, AUX_OP, Case({"logits": uniform}, case.params, case.about), dtype, record)


# ------------------------------------------------------------------------------------------------ router z-loss


@check("moe-z-loss/forward", "moe_z_loss", "agrees with the oracle", Z, op=Z_OP)
@given(data=st.data())
def test_z_loss_forward(adapter: Adapter, dtype: Format, record: Record, data: st.DataObject) -> None:
    check_forward(adapter, Z_OP, data.draw(sm.z_loss_case(dtype), label="case"), dtype, record)


@check("moe-z-loss/gradient", "moe_z_loss", "VJP agrees with the oracle: g·2·z_i·softmax(u_i)/N", Z, op=Z_OP, grad=True)
@given(data=st.data())
def test_z_loss_gradient(adapter: Adapter, dtype: Format, record: Record, data: st.DataObject) -> None:
    case = data.draw(sm.z_loss_case(dtype), label="case")
    cot = data.draw(cst.cotangent(dtype, ()), label="cotangent")
    check_vjp(adapter, Z_OP, case, cot, dtype, record)


@check(
    "moe-z-loss/permutation-invariance",
    "moe_z_loss",
    "permuting the tokens and the experts leaves the loss unchanged",
    Z,
    op=Z_OP,
)
@given(data=st.data())
def test_z_loss_permutation(adapter: Adapter, dtype: Format, record: Record, data: st.DataObject) -> None:
    case = data.draw(sm.z_loss_case(dtype, extreme=False), label="case")
    rng = np.random.default_rng(data.draw(cst.seeds, label="permutation seed"))
    u = case.inputs["logits"]
    permuted = {"logits": u[rng.permutation(u.shape[0])][:, rng.permutation(u.shape[1])]}
    y, a, call = run(adapter, Z_OP, case.inputs, case.params, dtype, ())
    yp, ap, _ = run(adapter, Z_OP, permuted, case.params, dtype, ())
    agree(yp, ap, y, a, dtype, record, "loss of the permuted tokens and experts", call)


@check(
    "moe-z-loss/token-mean",
    "moe_z_loss",
    "the loss of N tokens is the mean of the losses of any split of them, each weighted by its tokens",
    Z,
    op=Z_OP,
)
@given(data=st.data())
def test_z_loss_token_mean(adapter: Adapter, dtype: Format, record: Record, data: st.DataObject) -> None:
    case = data.draw(sm.z_loss_case(dtype, extreme=False), label="case")
    u = case.inputs["logits"]
    n = u.shape[0]
    if n < 2:
        return  # one token has no split
    cut = data.draw(st.integers(1, n - 1), label="split")
    y, a, call = run(adapter, Z_OP, case.inputs, case.params, dtype, ())
    y1, a1, _ = run(adapter, Z_OP, {"logits": u[:cut]}, case.params, dtype, ())
    y2, a2, _ = run(adapter, Z_OP, {"logits": u[cut:]}, case.params, dtype, ())
    w1, w2 = cut / n, (n - cut) / n
    x = case.values()
    exact = oracle.forward(Z_OP, x, case.params, adapter.conventions, dtype)
    parts = [
        oracle.forward(Z_OP, {"logits": part}, case.params, adapter.conventions, dtype)
        for part in (x["logits"][:cut], x["logits"][cut:])
    ]
    gap = exact - (w1 * parts[0] + w2 * parts[1])  # the float64 mean's own rounding: the oracle's difference
    agree(
        y,
        a,
        w1 * y1 + w2 * y2,
        w1 * a1 + w2 * a2,
        dtype,
        record,
        f"loss against its split after {cut} tokens",
        call,
        gap,
    )


# --------------------------------------------------------------------------------------------------- size regimes

REGIMES = (
    f"{sm.REGIME_TOKENS} tokens over {sm.MANY_EXPERTS[0]} experts (k {sm.MANY_EXPERTS[1]}, {sm.MANY_EXPERTS[2]} "
    f"groups, {sm.MANY_EXPERTS[3]} kept) and {sm.WIDE_K[0]} experts with k {sm.WIDE_K[1]}"
)


def _regime_choices(adapter: Adapter) -> dict[str, Any]:
    return {key: declared(adapter, OP, key, values) for key, values in ROUTER_CHOICES.items()}


@check(
    "moe-router/regime-forward",
    "moe_routing",
    f"agrees with the oracle in the sizes routing kernels dispatch on: {REGIMES}",
    ROUTER,
    op=OP,
    choices=ROUTER_CHOICES,
)
@sizes.REGIME_SETTINGS
@given(data=st.data())
def test_router_regime_forward(adapter: Adapter, dtype: Format, record: Record, data: st.DataObject) -> None:
    cases = data.draw(sm.router_cases(dtype, _regime_choices(adapter)), label="cases")
    size_regimes.forward(adapter, OP, cases, dtype, record)


@check(
    "moe-router/regime-gradient",
    "moe_routing",
    f"VJP agrees with the oracle in the sizes routing kernels dispatch on: {REGIMES}",
    ROUTER,
    op=OP,
    grad=True,
    choices=ROUTER_CHOICES,
)
@sizes.REGIME_SETTINGS
@given(data=st.data())
def test_router_regime_gradient(adapter: Adapter, dtype: Format, record: Record, data: st.DataObject) -> None:
    cases = data.draw(sm.router_cases(dtype, _regime_choices(adapter)), label="cases")
    size_regimes.gradient(adapter, OP, cases, dtype, record)


@check(
    "moe-aux-loss/regime-forward",
    "moe_aux_loss",
    f"agrees with the oracle over {sm.AUX_TOKENS[0]} tokens of {sm.AUX_TOKENS[1]} experts, k {sm.AUX_TOKENS[2]}",
    AUX,
    op=AUX_OP,
)
@sizes.REGIME_SETTINGS
@given(data=st.data())
def test_aux_loss_regime_forward(adapter: Adapter, dtype: Format, record: Record, data: st.DataObject) -> None:
    size_regimes.forward(adapter, AUX_OP, data.draw(sm.aux_loss_cases(dtype), label="cases"), dtype, record)


@check(
    "moe-aux-loss/regime-gradient",
    "moe_aux_loss",
    f"VJP agrees with the oracle over {sm.AUX_TOKENS[0]} tokens of {sm.AUX_TOKENS[1]} experts, k {sm.AUX_TOKENS[2]}",
    AUX,
    op=AUX_OP,
    grad=True,
)
@sizes.REGIME_SETTINGS
@given(data=st.data())
def test_aux_loss_regime_gradient(adapter: Adapter, dtype: Format, record: Record, data: st.DataObject) -> None:
    size_regimes.gradient(adapter, AUX_OP, data.draw(sm.aux_loss_cases(dtype), label="cases"), dtype, record)


@check(
    "moe-z-loss/regime-forward",
    "moe_z_loss",
    f"agrees with the oracle over {sm.Z_TOKENS[0]} tokens of {sm.Z_TOKENS[1]} experts",
    Z,
    op=Z_OP,
)
@sizes.REGIME_SETTINGS
@given(data=st.data())
def test_z_loss_regime_forward(adapter: Adapter, dtype: Format, record: Record, data: st.DataObject) -> None:
    size_regimes.forward(adapter, Z_OP, data.draw(sm.z_loss_cases(dtype), label="cases"), dtype, record)


@check(
    "moe-z-loss/regime-gradient",
    "moe_z_loss",
    f"VJP agrees with the oracle over {sm.Z_TOKENS[0]} tokens of {sm.Z_TOKENS[1]} experts",
    Z,
    op=Z_OP,
    grad=True,
)
@sizes.REGIME_SETTINGS
@given(data=st.data())
def test_z_loss_regime_gradient(adapter: Adapter, dtype: Format, record: Record, data: st.DataObject) -> None:
    size_regimes.gradient(adapter, Z_OP, data.draw(sm.z_loss_cases(dtype), label="cases"), dtype, record)

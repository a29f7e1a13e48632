"""Decoder blocks and the residual stream: pre-norm x + f(Norm(x)), post-norm Norm(x + f(x)), double-norm,
parallel attention + MLP; the final norm and LM head; the identity path and gradient flow with depth
(seed-000 §Pre-norm vs. post-norm, §The residual-stream view; seed-002 §3.1.1, §3.1.2; docs/gradient-flow.md)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from transformer_conformance.adapters.contract import Adapter
from transformer_conformance.conformance.budgets import registry as budgets
from transformer_conformance.conformance.budgets.error_model import allowed_error
from transformer_conformance.conformance.harness import size_regimes
from transformer_conformance.conformance.harness.agreement import agree
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
from transformer_conformance.conformance.strategies import blocks as sb
from transformer_conformance.conformance.strategies import common as cst
from transformer_conformance.conformance.strategies import sizes
from transformer_conformance.conformance.strategies.choices import sampled_from
from transformer_conformance.conformance.strategies.common import Case
from transformer_conformance.reference import oracle
from transformer_conformance.reference.blocks import PLACEMENTS
from transformer_conformance.reference.formats import Format

CITE = (
    "seed-000 §Pre-norm vs. post-norm: post-norm x = Norm(x + Sublayer(x)), pre-norm x = x + Sublayer(Norm(x)); "
    "seed-002 §3.1.1 (parallel: both sub-blocks read the same normalized input, outputs summed), §3.1.2 (double-norm)"
)
IDENTITY = (
    'seed-002 §3.1.1: "a model with zero-initialized sub-block outputs is a pure identity"; seed-000: in pre-norm '
    "the residual stream is an identity path from input to output"
)
NO_BIAS = 'seed-002 §3.1.1: "Bias terms. Drop them everywhere in attention and MLP"'
RADIAL = (
    'seed-002 §3.1.2: "The normalization sits only on the branch and does not obstruct the residual gradient '
    'path"; docs/gradient-flow.md'
)
DEPTH = (
    'seed-002 §3.1.1: "with the skip, there is always a direct gradient path of approximately ones from the top to '
    'every earlier layer" (stacks of 32 layers)'
)
LM_HEAD = (
    'seed-000 §Pre-norm vs. post-norm: "A final normalization before the output head is required, because the stream '
    'itself is never normalized"; §The residual-stream view: Final norm → LM head'
)
IDENTITY_PLACEMENTS = ("pre", "double", "parallel")
#: the placements a check draws (adapters.CHOICES: an adapter may declare part of them)
ALL = {"placement": PLACEMENTS}
IDENTITY_ONLY = {"placement": IDENTITY_PLACEMENTS}


def _zero_outputs(case: Case) -> Case:
    inputs = dict(case.inputs, wo=np.zeros_like(case.inputs["wo"]), w2=np.zeros_like(case.inputs["w2"]))
    return Case(inputs, case.params, case.about)


def _vjp(adapter: Adapter, op: str, inputs: dict, params: dict, g: np.ndarray, dtype: Format) -> tuple[dict, str]:
    call = describe_call(adapter, op, inputs, params, kind="vjp")
    got = call_op(adapter, op, inputs, params, call, g)  # g itself: a write into it fails (compare.call_op)
    if not hasattr(got, "get") or got.get("x") is None:
        raise CheckFailure(f"vjp: got {type(got).__name__}, should be a mapping with a gradient for x [{call}]")
    _validate(got["x"], inputs["x"].shape, dtype, "dx", call)
    return got, call


@check("blocks/forward", "blocks", "agrees with the oracle in every placement", CITE, op="block", choices=ALL)
@given(data=st.data())
def test_forward(adapter: Adapter, dtype: Format, record: Record, data: st.DataObject) -> None:
    check_forward(
        adapter,
        "block",
        data.draw(sb.block_case(dtype, placements=declared(adapter, "block", "placement")), label="case"),
        dtype,
        record,
    )


@check(
    "blocks/gradient",
    "blocks",
    "VJP (stream and every weight) agrees with the oracle",
    CITE,
    op="block",
    grad=True,
    choices=ALL,
)
@given(data=st.data())
def test_gradient(adapter: Adapter, dtype: Format, record: Record, data: st.DataObject) -> None:
    case = data.draw(sb.block_case(dtype, placements=declared(adapter, "block", "placement")), label="case")
    cot = data.draw(cst.cotangent(dtype, case.inputs["x"].shape), label="cotangent")
    check_vjp(adapter, "block", case, cot, dtype, record)


@check(
    "blocks/identity-path",
    "blocks",
    "with zero output projections a pre-norm (double-norm, parallel) block is the identity, forward and backward, "
    "bit for bit",
    IDENTITY,
    op="block",
    choices=IDENTITY_ONLY,
    grad=True,
)
@given(data=st.data())
def test_identity_path(adapter: Adapter, dtype: Format, record: Record, data: st.DataObject) -> None:
    placement = data.draw(
        sampled_from(declared(adapter, "block", "placement", IDENTITY_PLACEMENTS)), label="placement"
    )
    case = _zero_outputs(data.draw(sb.block_case(dtype, placement=placement), label="case"))
    x = case.inputs["x"]
    y, _, call = run(adapter, "block", case.inputs, case.params, dtype, x.shape)
    record.examples += 1
    if not np.array_equal(y, x.astype(np.float64)):
        i = tuple(int(j) for j in np.argwhere(y != x.astype(np.float64))[0])
        raise CheckFailure(
            f"{placement}-norm block with wo = w2 = 0: got {y[i]:.8g} at {i}, should be {float(x[i]):.8g} "
            f"(x unchanged: nothing is added to the stream) [{call}]"
        )
    g = data.draw(cst.cotangent(dtype, x.shape), label="cotangent")
    grads, vcall = _vjp(adapter, "block", case.inputs, case.params, g, dtype)
    if not np.array_equal(grads["x"], g):
        i = tuple(int(j) for j in np.argwhere(grads["x"] != g)[0])
        raise CheckFailure(
            f"∂L/∂x of a {placement}-norm block with wo = w2 = 0: got {float(grads['x'][i]):.8g} at {i}, should be "
            f"{float(g[i]):.8g} (the upstream gradient, through the identity path) [{vcall}]"
        )


@check(
    "blocks/no-bias",
    "blocks",
    "the zero stream maps to exactly zero in every placement: no projection or norm adds a bias",
    NO_BIAS,
    op="block",
    choices=ALL,
)
@given(data=st.data())
def test_no_bias(adapter: Adapter, dtype: Format, record: Record, data: st.DataObject) -> None:
    case = data.draw(sb.block_case(dtype, placements=declared(adapter, "block", "placement")), label="case")
    inputs = dict(case.inputs, x=np.zeros_like(case.inputs["x"]))
    y, _, call = run(adapter, "block", inputs, case.params, dtype, inputs["x"].shape)
    record.examples += 1
    if np.any(y != 0):
        i = tuple(int(j) for j in np.argwhere(y != 0)[0])
        raise CheckFailure(
            f"{case.params['placement']}-norm block on x = 0: got {y[i]:.6g} at {i}, should be 0 (RMSNorm(0) = 0 and "
            f"every projection is bias-free) [{call}]"
        )


@check(
    "blocks/radial-gradient",
    "blocks",
    "ε = 0, MLP output zeroed: ⟨∂L/∂x − g, x⟩ = 0 — the branch, read through a norm, adds no gradient along x; the "
    "residual path carries that component unchanged",
    RADIAL,
    op="block",
    choices=IDENTITY_ONLY,
    grad=True,
)
@given(data=st.data())
def test_radial_gradient(adapter: Adapter, dtype: Format, record: Record, data: st.DataObject) -> None:
    placement = data.draw(
        sampled_from(declared(adapter, "block", "placement", IDENTITY_PLACEMENTS)), label="placement"
    )
    case = data.draw(sb.block_case(dtype, placement=placement), label="case")
    # a serial block's second sub-block reads h, not x: zero its output (for double-norm through the post-norm's
    # weight, since RMSNorm of an exactly zero output is undefined at ε = 0)
    zeroed = {"pre": "w2", "double": "mlp_post_norm"}.get(placement)
    if zeroed:
        case = Case(dict(case.inputs, **{zeroed: np.zeros_like(case.inputs[zeroed])}), case.params, case.about)
    case = Case(case.inputs, dict(case.params, eps=0.0), case.about)
    x = case.values()["x"]
    if not np.all(np.any(x != 0, axis=-1)):
        return  # RMSNorm with ε = 0 is undefined at a zero token
    g = data.draw(cst.cotangent(dtype, x.shape), label="cotangent")
    grads, call = _vjp(adapter, "block", case.inputs, case.params, g, dtype)
    dx = np.asarray(grads["x"], dtype=np.float64)
    if not np.all(np.isfinite(dx)):
        i = tuple(int(j) for j in np.argwhere(~np.isfinite(dx))[0])
        raise CheckFailure(f"∂L/∂x: got {dx[i]} at {i}, should be finite [{call}]")
    budget = budgets.VJP["block"](case.values(), case.params, adapter.conventions, dtype, g.astype(np.float64))["x"]
    allowed = allowed_error(budget, dtype)
    branch = dx - g.astype(np.float64)
    radial = np.sum(branch * x, axis=-1).ravel()  # one inner product per token
    tol = (
        np.sum(np.abs(x) * allowed, axis=-1) + 64 * np.finfo(np.float64).eps * np.sum(np.abs(branch * x), axis=-1)
    ).ravel()
    record.examples += 1
    used = np.abs(radial) / np.where(tol > 0, tol, np.finfo(np.float64).tiny)
    t = int(np.argmax(used))
    record.observe(float(used[t]), float(used[t]), f"token {t}")
    if used[t] > 1:
        raise CheckFailure(
            f"⟨∂L/∂x − g, x⟩ at token {t} of a {placement}-norm block (ε = 0): got {radial[t]:.6g}, should be 0 ± "
            f"{tol[t]:.3g} (the norm's Jacobian annihilates x, so the branch adds nothing along it) [{call}]"
        )


#: a quarter of the profile's examples (each runs up to 32 blocks forward and backward), at least 5
_DEPTH_EXAMPLES = max(5, (settings.default.max_examples if settings.default else 40) // 4)


def _another_layer(case: Case, dtype: Format, seed: int) -> Case:
    """Fresh weights of the same shapes (norm weights near 1, projections at N(0, 1/fan_in), outputs zero)."""
    inputs = dict(case.inputs)
    for k, (name, arr) in enumerate(case.inputs.items()):
        if name in ("x", "positions"):
            continue
        if name in ("wo", "w2"):
            inputs[name] = np.zeros_like(arr)
        elif arr.ndim == 1:
            inputs[name] = cst.fill(dtype, arr.shape, 0.2, seed + k, offset=1.0)
        else:
            inputs[name] = cst.fill(dtype, arr.shape, arr.shape[0] ** -0.5, seed + k)
    return Case(inputs, case.params, case.about)


@check(
    "blocks/depth-identity-path",
    "blocks",
    "a stack of up to 32 pre-norm blocks with zero output projections passes the stream and every layer's gradient "
    "through unchanged, bit for bit",
    DEPTH,
    op="block",
    choices=IDENTITY_ONLY,
    grad=True,
)
@settings(max_examples=_DEPTH_EXAMPLES)
@given(data=st.data())
def test_depth_identity_path(adapter: Adapter, dtype: Format, record: Record, data: st.DataObject) -> None:
    placement = data.draw(
        sampled_from(declared(adapter, "block", "placement", IDENTITY_PLACEMENTS)), label="placement"
    )
    depth = data.draw(sampled_from([2, 8, 32]), label="layers")
    first = _zero_outputs(data.draw(sb.block_case(dtype, placement=placement), label="layer 0"))
    seed = data.draw(cst.seeds, label="weights seed")
    layers = [first] + [_another_layer(first, dtype, seed + 16 * i) for i in range(1, depth)]
    x = first.inputs["x"]
    g = data.draw(cst.cotangent(dtype, x.shape), label="cotangent")
    for i, layer in enumerate(layers):
        call = describe_call(adapter, "block", layer.inputs, layer.params)
        y = _validate(call_op(adapter, "block", layer.inputs, layer.params, call), x.shape, dtype, "y", call)
        grads, vcall = _vjp(adapter, "block", layer.inputs, layer.params, g, dtype)
        if not np.array_equal(y, x):
            j = tuple(int(k) for k in np.argwhere(y != x)[0])
            raise CheckFailure(
                f"stream after layer {i} of {depth}: got {float(y[j]):.8g} at {j}, should be {float(x[j]):.8g} "
                f"(zero output projections add nothing) [{call}]"
            )
        if not np.array_equal(grads["x"], g):
            j = tuple(int(k) for k in np.argwhere(grads["x"] != g)[0])
            raise CheckFailure(
                f"∂L/∂x at layer {i} of {depth}: got {float(grads['x'][j]):.8g} at {j}, should be {float(g[j]):.8g} "
                f"(the gradient at the top, through the identity path) [{vcall}]"
            )
    record.examples += 1


#: what the block's regime checks cover
BLOCK_REGIMES = "192 tokens (past a 128-key attention tile) through a layer of d = 16, 4 query heads over 2 KV heads"


@check(
    "blocks/regime-forward",
    "blocks",
    f"agrees with the oracle in every placement over a long sequence: {BLOCK_REGIMES}",
    CITE,
    op="block",
    choices=ALL,
)
@sizes.REGIME_SETTINGS
@given(data=st.data())
def test_regime_forward(adapter: Adapter, dtype: Format, record: Record, data: st.DataObject) -> None:
    cases = data.draw(sizes.block_cases(dtype, declared(adapter, "block", "placement")), label="cases")
    size_regimes.forward(adapter, "block", cases, dtype, record)


@check(
    "blocks/regime-gradient",
    "blocks",
    f"VJP agrees with the oracle in every placement over a long sequence: {BLOCK_REGIMES}",
    CITE,
    op="block",
    grad=True,
    choices=ALL,
)
@sizes.REGIME_SETTINGS
@given(data=st.data())
def test_regime_gradient(adapter: Adapter, dtype: Format, record: Record, data: st.DataObject) -> None:
    cases = data.draw(sizes.block_cases(dtype, declared(adapter, "block", "placement")), label="cases")
    size_regimes.gradient(adapter, "block", cases, dtype, record)


#: what the LM head regime checks cover
LM_HEAD_REGIMES = "d = 8192 (a long row normalised, then a long reduction) and a head of 131,072 classes"


@check("lm-head/forward", "blocks", "final RMSNorm then W_head agrees with the oracle", LM_HEAD, op="lm_head")
@given(data=st.data())
def test_lm_head_forward(adapter: Adapter, dtype: Format, record: Record, data: st.DataObject) -> None:
    check_forward(adapter, "lm_head", data.draw(sb.lm_head_case(dtype), label="case"), dtype, record)


@check("lm-head/gradient", "blocks", "VJP agrees with the oracle", LM_HEAD, op="lm_head", grad=True)
@given(data=st.data())
def test_lm_head_gradient(adapter: Adapter, dtype: Format, record: Record, data: st.DataObject) -> None:
    case = data.draw(sb.lm_head_case(dtype), label="case")
    shape = oracle.forward("lm_head", case.values(), case.params, adapter.conventions, dtype).shape
    cot = data.draw(cst.cotangent(dtype, shape), label="cotangent")
    check_vjp(adapter, "lm_head", case, cot, dtype, record)

@check(
    "lm-head/regime-forward",
    "blocks",
    f"agrees with the oracle in the size regimes kernels dispatch on: {LM_HEAD_REGIMES}",
    LM_HEAD,
    op="lm_head",
)
@sizes.REGIME_SETTINGS
@given(data=st.data())
def test_lm_head_regime_forward(adapter: Adapter, dtype: Format, record: Record, data: st.DataObject) -> None:
    cases = data.draw(sizes.lm_head_cases(dtype), label="cases")
    size_regimes.forward(adapter, "lm_head", cases, dtype, record)


@check(
    "lm-head/regime-gradient",
    "blocks",
    f"VJP agrees with the oracle in the size regimes kernels dispatch on: {LM_HEAD_REGIMES}",
    LM_HEAD,
    op="lm_head",
    grad=True,
)
@sizes.REGIME_SETTINGS
@given(data=st.data())
def test_lm_head_regime_gradient(adapter: Adapter, dtype: Format, record: Record, data: st.DataObject) -> None:
    cases = data.draw(sizes.lm_head_cases(dtype), label="cases")
    size_regimes.gradient(adapter, "lm_head", cases, dtype, record)


@check(
    "lm-head/stream-scale",
    "blocks",
    "the logits do not depend on the scale of the (never normalised) stream: LM head(c·x) = LM head(x) up to ε",
    LM_HEAD,
    op="lm_head",
)
@given(data=st.data())
def test_lm_head_stream_scale(adapter: Adapter, dtype: Format, record: Record, data: st.DataObject) -> None:
    case = data.draw(sb.lm_head_case(dtype), label="case")
    values = case.values()
    c = 2.0 ** data.draw(st.integers(-4, 6), label="log2 c")
    scaled = dict(case.inputs, x=dtype.round(values["x"] * c))
    if not np.array_equal(scaled["x"].astype(np.float64), values["x"] * c):
        return
    shape = oracle.forward("lm_head", values, case.params, adapter.conventions, dtype).shape
    y, a, call = run(adapter, "lm_head", case.inputs, case.params, dtype, shape)
    y2, a2, _ = run(adapter, "lm_head", scaled, case.params, dtype, shape)
    scaled64 = dict(values, x=values["x"] * c)
    gap = oracle.forward("lm_head", scaled64, case.params, adapter.conventions, dtype) - oracle.forward(
        "lm_head", values, case.params, adapter.conventions, dtype
    )
    agree(y2, a2, y, a, dtype, record, f"logits of the stream scaled by {c:g}", call, exact_gap=gap)

"""Sliding-window, chunked and sink attention: agreement with the oracle (forward, gradients, size regimes) and the
properties the masks and sinks promise — keys outside the span never matter, a span as long as the sequence is
causal attention, decoding against a rolling cache of the window equals the full computation, a sink of −∞ is
plain attention and a larger sink only shrinks the output (reference/local_attention.py cites the papers)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from transformer_conformance.adapters.contract import SOFTCAPS, Adapter
from transformer_conformance.conformance.harness import size_regimes
from transformer_conformance.conformance.harness.agreement import agree
from transformer_conformance.conformance.harness.compare import CheckFailure, Record, check_forward, check_vjp
from transformer_conformance.conformance.harness.marks import UNSUPPORTED, check, declared
from transformer_conformance.conformance.harness.properties import run
from transformer_conformance.conformance.strategies import common as cst
from transformer_conformance.conformance.strategies import local_attention as sl
from transformer_conformance.conformance.strategies import sizes
from transformer_conformance.conformance.strategies.common import Case
from transformer_conformance.reference import local_attention as loc
from transformer_conformance.reference import oracle
from transformer_conformance.reference.formats import Format

SLIDING = (
    "ref: Mistral 7B §2 and Gemma 2 §2: sliding-window attention, each token attends to the last W positions (what W "
    "counts, its own token or not, as declared: sliding_window); Longformer §3.1"
)
CHUNKED = "ref: Llama 4 model card and reference code: chunked attention, a key is visible iff in the query's chunk"
SINKS = (
    "ref: gpt-oss model card: a learned sink logit per head in the softmax's denominator, no value; Xiao et al. "
    "2024, StreamingLLM (a learnable sink token)"
)
ROLLING_CACHE = (
    "ref: Mistral 7B §2 (rolling buffer cache: the last W keys are all a query sees): decoding against that cache "
    "equals the full computation"
)
OUTSIDE = "keys outside a query's window or chunk (or after it) take no part: changing them changes nothing"

SOFTCAP_CHOICE = {"softcap": SOFTCAPS}
SWA, CHUNKED_OP, SINK = "sliding_window_attention", "chunked_attention", "sink_attention"


def _shape(adapter: Adapter, op: str, case: Case, dtype: Format) -> tuple[int, ...]:
    return oracle.forward(op, case.values(), case.params, adapter.conventions, dtype).shape


def _window_case(adapter: Adapter, dtype: Format, long: bool = False) -> st.SearchStrategy[Case]:
    return sl.sliding_window_case(dtype, declared(adapter, SWA, "softcap"), long=long)


def _visible(adapter: Adapter, op: str, case: Case) -> np.ndarray:
    """The keys each query sees under the adapter's declared alignment and window count."""
    lq, lk = case.inputs["q"].shape[2], case.inputs["k"].shape[2]
    conv = adapter.conventions
    if op == CHUNKED_OP:
        return loc.chunk_mask(lq, lk, int(case.params["chunk"]), conv.causal_alignment)
    return loc.window_mask(lq, lk, case.params.get("window"), conv.causal_alignment, conv.sliding_window)


def _needs_bottom_right(adapter: Adapter, what: str) -> None:
    if adapter.conventions.causal_alignment != "bottom_right":
        pytest.skip(
            f"{UNSUPPORTED}{adapter.name} declares {adapter.conventions.causal_alignment} causal alignment; {what} "
            "needs bottom-right"
        )


def _outside_keys_unused(adapter: Adapter, op: str, case: Case, dtype: Format, record: Record, seed: int) -> None:
    """Replace, for one query, every key and value it must not see; its output must not move."""
    visible = _visible(adapter, op, case)
    k, v = case.inputs["k"], case.inputs["v"]
    lq = visible.shape[0]
    shape = _shape(adapter, op, case, dtype)
    y, a, call = run(adapter, op, case.inputs, case.params, dtype, shape)
    for i in range(lq):
        hidden = ~visible[i]
        if not hidden.any():
            continue
        changed = dict(case.inputs)
        for n, (name, arr) in enumerate((("k", k), ("v", v))):
            new = arr.copy()
            new[:, :, hidden] = cst.fill(dtype, new[:, :, hidden].shape, 4.0, seed + n)
            changed[name] = new
        y2, a2, _ = run(adapter, op, changed, case.params, dtype, shape)
        keys = ", ".join(str(j) for j in np.flatnonzero(hidden))
        what = f"query {i}'s output with the keys it must not see ({keys}) changed"
        agree(y2[:, :, i], a2[:, :, i], y[:, :, i], a[:, :, i], dtype, record, what, call)


def _span_is_causal(adapter: Adapter, op: str, case: Case, dtype: Format, record: Record) -> None:
    """A window or chunk at least as long as the keys: the candidate's own causal attention, where it declares it."""
    cap = adapter.capabilities.get("attention")
    if (
        cap is None
        or dtype.name not in cap.dtypes
        or (case.params.get("softcap") and "tanh" not in declared(adapter, "attention", "softcap"))
    ):
        pytest.skip(f"{UNSUPPORTED}{adapter.name} does not declare causal attention in {dtype.name} to compare with")
    shape = _shape(adapter, op, case, dtype)
    y, a, call = run(adapter, op, case.inputs, case.params, dtype, shape)
    plain = {"causal": True, "softcap": case.params.get("softcap"), "scale": case.params.get("scale")}
    y2, a2, _ = run(adapter, "attention", case.inputs, plain, dtype, shape)
    span = f"window {case.params['window']}" if "window" in case.params else f"chunk {case.params['chunk']}"
    agree(y, a, y2, a2, dtype, record, f"{op} with a {span} ≥ L_k vs causal attention", call)


def _rolling_cache(adapter: Adapter, case: Case, dtype: Format, record: Record) -> None:
    """Each query of the full sequence decoded alone against only the keys its window holds (a rolling buffer)
    equals its row of the full forward (under a plan, the queries its planned shape states)."""
    q, k, v = (case.inputs[n] for n in ("q", "k", "v"))
    lk = k.shape[2]
    full = dict(case.inputs, q=cst.fill(dtype, (*q.shape[:2], lk, q.shape[3]), 2.0, 11))
    full["q"][:, :, lk - q.shape[2] :] = q
    shape = (q.shape[0], q.shape[1], lk, v.shape[3])
    y, a, call = run(adapter, SWA, full, case.params, dtype, shape)
    reach = loc.window_reach(int(case.params["window"]), adapter.conventions.sliding_window)
    for t in sl.decoded_tokens(case):
        start = max(0, t - reach)
        step = {"q": full["q"][:, :, t : t + 1], "k": k[:, :, start : t + 1], "v": v[:, :, start : t + 1]}
        ys, as_, _ = run(adapter, SWA, step, case.params, dtype, (*shape[:2], 1, shape[3]))
        what = f"token {t} decoded against the cache of keys {start}…{t} vs the full forward"
        agree(ys, as_, y[:, :, t : t + 1], a[:, :, t : t + 1], dtype, record, what, call)


# ------------------------------------------------------------------------------------------------- sliding window


@check("sliding-window/forward", "sliding_window", "agrees with the oracle", SLIDING, op=SWA, choices=SOFTCAP_CHOICE)
@given(data=st.data())
def test_sliding_window_forward(adapter: Adapter, dtype: Format, record: Record, data: st.DataObject) -> None:
    check_forward(adapter, SWA, data.draw(_window_case(adapter, dtype), label="case"), dtype, record)


@check(
    "sliding-window/gradient",
    "sliding_window",
    "VJP agrees with the oracle",
    SLIDING,
    op=SWA,
    grad=True,
    choices=SOFTCAP_CHOICE,
)
@given(data=st.data())
def test_sliding_window_gradient(adapter: Adapter, dtype: Format, record: Record, data: st.DataObject) -> None:
    case = data.draw(_window_case(adapter, dtype), label="case")
    cot = data.draw(cst.cotangent(dtype, _shape(adapter, SWA, case, dtype)), label="cotangent")
    check_vjp(adapter, SWA, case, cot, dtype, record)


@check("sliding-window/outside-keys", "sliding_window", OUTSIDE, SLIDING, op=SWA, choices=SOFTCAP_CHOICE)
@given(data=st.data())
def test_sliding_window_outside_keys(adapter: Adapter, dtype: Format, record: Record, data: st.DataObject) -> None:
    case = data.draw(_window_case(adapter, dtype), label="case")
    _outside_keys_unused(adapter, SWA, case, dtype, record, data.draw(cst.seeds, label="new keys' seed"))


@check(
    "sliding-window/long-window-is-causal",
    "sliding_window",
    "a window at least as long as the keys is causal attention (the candidate's own)",
    SLIDING,
    op=SWA,
    choices=SOFTCAP_CHOICE,
)
@given(data=st.data())
def test_sliding_window_long(adapter: Adapter, dtype: Format, record: Record, data: st.DataObject) -> None:
    _span_is_causal(adapter, SWA, data.draw(_window_case(adapter, dtype, long=True), label="case"), dtype, record)


@check(
    "sliding-window/rolling-cache",
    "sliding_window",
    "decoding token by token against a rolling cache of the window's keys equals the full forward",
    ROLLING_CACHE,
    op=SWA,
    choices=SOFTCAP_CHOICE,
)
@given(data=st.data())
def test_sliding_window_rolling_cache(adapter: Adapter, dtype: Format, record: Record, data: st.DataObject) -> None:
    _needs_bottom_right(adapter, "decoding against a rolling cache")
    _rolling_cache(adapter, data.draw(_window_case(adapter, dtype), label="case"), dtype, record)


# -------------------------------------------------------------------------------------------------------- chunked


@check("chunked/forward", "chunked_attention", "agrees with the oracle", CHUNKED, op=CHUNKED_OP)
@given(data=st.data())
def test_chunked_forward(adapter: Adapter, dtype: Format, record: Record, data: st.DataObject) -> None:
    check_forward(adapter, CHUNKED_OP, data.draw(sl.chunked_case(dtype), label="case"), dtype, record)


@check("chunked/gradient", "chunked_attention", "VJP agrees with the oracle", CHUNKED, op=CHUNKED_OP, grad=True)
@given(data=st.data())
def test_chunked_gradient(adapter: Adapter, dtype: Format, record: Record, data: st.DataObject) -> None:
    case = data.draw(sl.chunked_case(dtype), label="case")
    cot = data.draw(cst.cotangent(dtype, _shape(adapter, CHUNKED_OP, case, dtype)), label="cotangent")
    check_vjp(adapter, CHUNKED_OP, case, cot, dtype, record)


@check("chunked/outside-keys", "chunked_attention", OUTSIDE, CHUNKED, op=CHUNKED_OP)
@given(data=st.data())
def test_chunked_outside_keys(adapter: Adapter, dtype: Format, record: Record, data: st.DataObject) -> None:
    case = data.draw(sl.chunked_case(dtype), label="case")
    _outside_keys_unused(adapter, CHUNKED_OP, case, dtype, record, data.draw(cst.seeds, label="new keys' seed"))


@check(
    "chunked/long-chunk-is-causal",
    "chunked_attention",
    "a chunk at least as long as the keys is causal attention (the candidate's own)",
    CHUNKED,
    op=CHUNKED_OP,
)
@given(data=st.data())
def test_chunked_long(adapter: Adapter, dtype: Format, record: Record, data: st.DataObject) -> None:
    _span_is_causal(adapter, CHUNKED_OP, data.draw(sl.chunked_case(dtype, long=True), label="case"), dtype, record)


# ---------------------------------------------------------------------------------------------------------- sinks


@check("sinks/forward", "attention_sinks", "agrees with the oracle", SINKS, op=SINK)
@given(data=st.data())
def test_sinks_forward(adapter: Adapter, dtype: Format, record: Record, data: st.DataObject) -> None:
    check_forward(adapter, SINK, data.draw(sl.sink_case(dtype), label="case"), dtype, record)


@check(
    "sinks/gradient",
    "attention_sinks",
    "VJP agrees with the oracle (the sinks' gradient too)",
    SINKS,
    op=SINK,
    grad=True,
)
@given(data=st.data())
def test_sinks_gradient(adapter: Adapter, dtype: Format, record: Record, data: st.DataObject) -> None:
    case = data.draw(sl.sink_case(dtype), label="case")
    cot = data.draw(cst.cotangent(dtype, _shape(adapter, SINK, case, dtype)), label="cotangent")
    check_vjp(adapter, SINK, case, cot, dtype, record)


@check(
    "sinks/minus-infinity-is-plain",
    "attention_sinks",
    "sinks of −∞ take no weight: plain (causal, windowed) attention, finite everywhere",
    SINKS,
    op=SINK,
)
@given(data=st.data())
def test_sinks_minus_infinity(adapter: Adapter, dtype: Format, record: Record, data: st.DataObject) -> None:
    case = data.draw(sl.sink_case(dtype), label="case")
    sinks = np.full_like(case.inputs["sinks"], -np.inf)
    check_forward(adapter, SINK, Case(dict(case.inputs, sinks=sinks), case.params, case.about), dtype, record)


@check(
    "sinks/larger-sink-shrinks",
    "attention_sinks",
    "raising a head's sink scales each of its outputs by a factor in (0, 1]: no element grows or changes sign",
    SINKS,
    op=SINK,
)
@given(data=st.data())
def test_sinks_larger_shrinks(adapter: Adapter, dtype: Format, record: Record, data: st.DataObject) -> None:
    case = data.draw(sl.sink_case(dtype), label="case")
    sinks = case.inputs["sinks"]
    raised = dtype.round(sinks.astype(np.float64) + data.draw(cst.magnitudes(-2, 3), label="raised by"))
    shape = _shape(adapter, SINK, case, dtype)
    y, a, call = run(adapter, SINK, case.inputs, case.params, dtype, shape)
    y2, a2, _ = run(adapter, SINK, dict(case.inputs, sinks=raised), case.params, dtype, shape)
    record.examples += 1
    grown = (np.abs(y2) - a2) - (np.abs(y) + a)
    flipped = (y * y2 < 0) & (np.abs(y) > a) & (np.abs(y2) > a2)
    growth = np.maximum(np.abs(y2) - np.abs(y), 0.0)  # by how much an element grew: at most both budgets
    used = growth / np.maximum(a + a2, np.finfo(np.float64).tiny)
    ulps = growth / dtype.ulp(np.maximum(np.abs(y), np.abs(y2)))
    record.observe(float(np.max(ulps, initial=0.0)), float(np.max(used, initial=0.0)), "growth with the sinks raised")
    bad = np.argwhere((grown > 0) | flipped)
    if bad.size:
        i = tuple(int(j) for j in bad[0])
        raise CheckFailure(
            f"output at {i} with head {i[1]}'s sink raised from {float(sinks[i[1]]):.6g} to {float(raised[i[1]]):.6g}: "
            f"got {y2[i]:.8g}, should lie between 0 and {y[i]:.8g} (± {a[i] + a2[i]:.3g}) [{call}]"
        )


# --------------------------------------------------------------------------------------------------- size regimes

REGIMES = (
    f"a prefill of {sl.PREFILL[3]} tokens and {sl.DECODE[3]} queries against {sl.DECODE[4]} keys with grouped KV "
    f"heads, spans of {', '.join(str(s) for s in sl.SPANS)} across the kernels' tiles of keys"
)


@check(
    "sliding-window/regime-forward",
    "sliding_window",
    f"agrees with the oracle in the size regimes kernels dispatch on: {REGIMES}",
    SLIDING,
    op=SWA,
)
@sizes.REGIME_SETTINGS
@given(data=st.data())
def test_sliding_window_regime_forward(adapter: Adapter, dtype: Format, record: Record, data: st.DataObject) -> None:
    size_regimes.forward(adapter, SWA, data.draw(sl.sliding_window_cases(dtype), label="cases"), dtype, record)


@check(
    "sliding-window/regime-gradient",
    "sliding_window",
    f"VJP agrees with the oracle in the size regimes kernels dispatch on: {REGIMES}",
    SLIDING,
    op=SWA,
    grad=True,
)
@sizes.REGIME_SETTINGS
@given(data=st.data())
def test_sliding_window_regime_gradient(adapter: Adapter, dtype: Format, record: Record, data: st.DataObject) -> None:
    size_regimes.gradient(adapter, SWA, data.draw(sl.sliding_window_cases(dtype), label="cases"), dtype, record)


@check(
    "chunked/regime-forward",
    "chunked_attention",
    f"agrees with the oracle in the size regimes kernels dispatch on: {REGIMES}",
    CHUNKED,
    op=CHUNKED_OP,
)
@sizes.REGIME_SETTINGS
@given(data=st.data())
def test_chunked_regime_forward(adapter: Adapter, dtype: Format, record: Record, data: st.DataObject) -> None:
    size_regimes.forward(adapter, CHUNKED_OP, data.draw(sl.chunked_cases(dtype), label="cases"), dtype, record)


@check(
    "chunked/regime-gradient",
    "chunked_attention",
    f"VJP agrees with the oracle in the size regimes kernels dispatch on: {REGIMES}",
    CHUNKED,
    op=CHUNKED_OP,
    grad=True,
)
@sizes.REGIME_SETTINGS
@given(data=st.data())
def test_chunked_regime_gradient(adapter: Adapter, dtype: Format, record: Record, data: st.DataObject) -> None:
    size_regimes.gradient(adapter, CHUNKED_OP, data.draw(sl.chunked_cases(dtype), label="cases"), dtype, record)


@check(
    "sinks/regime-forward",
    "attention_sinks",
    f"agrees with the oracle in the size regimes kernels dispatch on: {REGIMES}",
    SINKS,
    op=SINK,
)
@sizes.REGIME_SETTINGS
@given(data=st.data())
def test_sinks_regime_forward(adapter: Adapter, dtype: Format, record: Record, data: st.DataObject) -> None:
    size_regimes.forward(adapter, SINK, data.draw(sl.sink_cases(dtype), label="cases"), dtype, record)


@check(
    "sinks/regime-gradient",
    "attention_sinks",
    f"VJP agrees with the oracle in the size regimes kernels dispatch on: {REGIMES}",
    SINKS,
    op=SINK,
    grad=True,
)
@sizes.REGIME_SETTINGS
@given(data=st.data())
def test_sinks_regime_gradient(adapter: Adapter, dtype: Format, record: Record, data: st.DataObject) -> None:
    size_regimes.gradient(adapter, SINK, data.draw(sl.sink_cases(dtype), label="cases"), dtype, record)

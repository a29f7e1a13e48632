"""RoPE context extension: position interpolation, NTK-aware and dynamic NTK scaling, YaRN, Llama-3's band
scaling and LongRoPE's per-pair factors, as the ``scaling`` rule of ``rope_scaled`` (seed-000 §Extending
context with RoPE; seed-002 §3.4.2 "What You Actually Decide in Practice"). A rule the adapter does not
declare (``Capability.values``) is never drawn."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from transformer_conformance.adapters.contract import Adapter
from transformer_conformance.conformance.harness import size_regimes
from transformer_conformance.conformance.harness.compare import (
    CheckFailure,
    Record,
    check_forward,
    check_vjp,
    several_cases,
)
from transformer_conformance.conformance.harness.marks import check, declared
from transformer_conformance.conformance.harness.properties import run
from transformer_conformance.conformance.strategies import common as cst
from transformer_conformance.conformance.strategies import positions as pst
from transformer_conformance.conformance.strategies import sizes
from transformer_conformance.conformance.strategies.choices import sampled_from
from transformer_conformance.conformance.strategies.common import Case
from transformer_conformance.reference import rope_scaling as rs
from transformer_conformance.reference.formats import Format
from transformer_conformance.reference.rope import rope_pair_indices
from transformer_conformance.reference.rope_scaling import SCALING_TYPES

EXTEND = (
    "seed-000 §Extending context with RoPE: position interpolation, NTK-aware scaling, YaRN; seed-002 §3.4.2: "
    "they all adjust how positions map to rotation angles"
)
PI = "seed-002 §3.4.2: position interpolation divides all positions by s = L_new/L_train before applying RoPE"
NTK = "seed-002 §3.4.2: NTK-aware scaling replaces 10000 with 10000·s^(d/(d−2))"
YARN = (
    "seed-002 §3.4.2 YaRN: high-frequency pairs unchanged, low-frequency pairs interpolated, with a temperature "
    "adjustment; seed-000 §Extending context: bands interpolated differently"
)
DYNAMIC = "seed-000 §Extending context with RoPE: NTK-aware scaling, applied to the running length (dynamic NTK)"
LONGROPE = (
    "seed-000 §Extending context with RoPE: bands interpolated differently; LongRoPE (Phi-3) divides each pair's "
    "frequency by its own factor, the short list within the trained length L and the long list beyond"
)


def _agree(
    adapter: Adapter,
    dtype: Format,
    record: Record,
    first: tuple[dict[str, np.ndarray], dict[str, Any]],
    second: tuple[dict[str, np.ndarray], dict[str, Any]],
    how: str,
    mask: np.ndarray | None = None,
) -> None:
    """Two calls of rope_scaled whose exact outputs are equal (on ``mask``) agree within their two budgets."""
    shape = first[0]["x"].shape
    y1, a1, call1 = run(adapter, "rope_scaled", *first, dtype, shape)
    y2, a2, call2 = run(adapter, "rope_scaled", *second, dtype, shape)
    keep = np.ones(shape, dtype=bool) if mask is None else np.broadcast_to(mask, shape)
    gap, tol = np.where(keep, np.abs(y1 - y2), 0.0), a1 + a2
    record.examples += 1
    i = tuple(int(j) for j in np.unravel_index(np.argmax(gap / tol), shape))
    record.observe(float(np.max(gap / dtype.ulp(np.abs(y1)))), float(gap[i] / tol[i]), f"output at {i} under {how}")
    if gap[i] > tol[i]:
        raise CheckFailure(
            f"{how}: got {y2[i]:.8g} at {i}, should be {y1[i]:.8g} ± {tol[i]:.3g} [{call2}] vs [{call1}]"
        )


RULE = "scaling.type"
#: the rules whose angles depend on the call's parameters alone; dynamic NTK reads the call's length, so its
#: checks make a longer call first (a candidate that keeps state from one call to the next shows it there)
STATELESS = tuple(k for k in SCALING_TYPES if k != "dynamic")
#: the rules a check draws (only those the adapter declares: ``declared``)
ALL = {RULE: STATELESS}


def _case(adapter: Adapter, dtype: Format, kinds: tuple[str, ...] = STATELESS) -> st.SearchStrategy[Case]:
    return pst.rope_scaled_case(dtype, declared(adapter, "rope_scaled", RULE, kinds))


@check("rope_scaled/forward", "rope_scaling", "each rule agrees with the oracle", EXTEND, op="rope_scaled", choices=ALL)
@given(data=st.data())
def test_forward(adapter: Adapter, dtype: Format, record: Record, data: st.DataObject) -> None:
    check_forward(adapter, "rope_scaled", data.draw(_case(adapter, dtype), label="case"), dtype, record)


@check(
    "rope_scaled/gradient",
    "rope_scaling",
    "VJP agrees with the oracle",
    EXTEND,
    op="rope_scaled",
    grad=True,
    choices=ALL,
)
@given(data=st.data())
def test_gradient(adapter: Adapter, dtype: Format, record: Record, data: st.DataObject) -> None:
    case = data.draw(_case(adapter, dtype), label="case")
    cot = data.draw(cst.cotangent(dtype, case.inputs["x"].shape), label="cotangent")
    check_vjp(adapter, "rope_scaled", case, cot, dtype, record)


#: what the rope_scaled regime checks cover
REGIMES = (
    "32 heads × 300 positions × 128 features, from 0, 4090, 30,000 or 131,000 (past every trained length); 4 heads "
    "across position 131,072"
)


@check(
    "rope_scaled/regime-forward",
    "rope_scaling",
    f"agrees with the oracle in the size regimes kernels dispatch on: {REGIMES}",
    EXTEND,
    op="rope_scaled",
    autocast=False,
    choices=ALL,
)
@sizes.REGIME_SETTINGS
@given(data=st.data())
def test_regime_forward(adapter: Adapter, dtype: Format, record: Record, data: st.DataObject) -> None:
    cases = data.draw(sizes.rope_scaled_cases(dtype, declared(adapter, "rope_scaled", RULE, STATELESS)), label="cases")
    size_regimes.forward(adapter, "rope_scaled", cases, dtype, record)


@check(
    "rope_scaled/regime-gradient",
    "rope_scaling",
    f"VJP agrees with the oracle in the size regimes kernels dispatch on: {REGIMES}",
    EXTEND,
    op="rope_scaled",
    autocast=False,
    grad=True,
    choices=ALL,
)
@sizes.REGIME_SETTINGS
@given(data=st.data())
def test_regime_gradient(adapter: Adapter, dtype: Format, record: Record, data: st.DataObject) -> None:
    cases = data.draw(sizes.rope_scaled_cases(dtype, declared(adapter, "rope_scaled", RULE, STATELESS)), label="cases")
    size_regimes.gradient(adapter, "rope_scaled", cases, dtype, record)


@contextmanager
def _after_longer_call(adapter: Adapter, dtype: Format, case: Case, data: st.DataObject) -> Iterator[None]:
    """Call rope_scaled once at positions beyond the case's (a longer sequence than the one checked inside
    the block); a failure inside says so."""
    beyond = data.draw(sampled_from([1, 17, 4096, 50_000]), label="longer call beyond by")
    longer = case.inputs["positions"] + beyond
    run(adapter, "rope_scaled", dict(case.inputs, positions=longer), case.params, dtype, case.inputs["x"].shape)
    try:
        yield
    except CheckFailure as e:
        raise CheckFailure(f"{e} (right after the same call at positions up to {int(longer.max())})") from None


@check(
    "rope_scaled/dynamic-forward",
    "rope_scaling",
    "dynamic NTK agrees with the oracle at this call's length n (base·(s·n/L − (s − 1))^(d/(d−2)) for n > L, "
    "plain RoPE otherwise), also right after a longer call",
    DYNAMIC,
    op="rope_scaled",
    choices={RULE: ("dynamic",)},
)
@given(data=st.data())
def test_dynamic_forward(adapter: Adapter, dtype: Format, record: Record, data: st.DataObject) -> None:
    case = data.draw(_case(adapter, dtype, ("dynamic",)), label="case")
    with _after_longer_call(adapter, dtype, case, data):
        check_forward(adapter, "rope_scaled", case, dtype, record)


@check(
    "rope_scaled/dynamic-gradient",
    "rope_scaling",
    "the VJP of dynamic NTK agrees with the oracle at this call's length, also right after a longer call",
    DYNAMIC,
    op="rope_scaled",
    grad=True,
    choices={RULE: ("dynamic",)},
)
@given(data=st.data())
def test_dynamic_gradient(adapter: Adapter, dtype: Format, record: Record, data: st.DataObject) -> None:
    case = data.draw(_case(adapter, dtype, ("dynamic",)), label="case")
    cot = data.draw(cst.cotangent(dtype, case.inputs["x"].shape), label="cotangent")
    with _after_longer_call(adapter, dtype, case, data):
        check_vjp(adapter, "rope_scaled", case, cot, dtype, record)


@check(
    "rope_scaled/linear-is-interpolation",
    "rope_scaling",
    "linear s at positions s·m equals plain RoPE at m: positions × L_train/L_target",
    PI,
    op="rope_scaled",
    choices={RULE: ("linear",)},
)
@given(data=st.data())
def test_linear_is_interpolation(adapter: Adapter, dtype: Format, record: Record, data: st.DataObject) -> None:
    case: Case = data.draw(_case(adapter, dtype, ("linear",)), label="case")
    s = data.draw(sampled_from([2, 4, 8, 16]), label="s")
    params = dict(case.params, scaling={"type": "linear", "factor": float(s)})
    plain = dict(case.params, scaling=None)
    pos = case.inputs["positions"]
    _agree(adapter, dtype, record, (case.inputs, plain), (dict(case.inputs, positions=pos * s), params), f"linear {s}")


@check(
    "rope_scaled/ntk-base",
    "rope_scaling",
    "NTK-aware s equals plain RoPE with base·s^(d/(d−2))",
    NTK,
    op="rope_scaled",
    choices={RULE: ("ntk",)},
)
@given(data=st.data())
def test_ntk_base(adapter: Adapter, dtype: Format, record: Record, data: st.DataObject) -> None:
    case: Case = data.draw(_case(adapter, dtype, ("ntk",)), label="case")
    rd = case.params["rotary_dim"] or case.inputs["x"].shape[-1]
    s = case.params["scaling"]["factor"]
    plain = dict(case.params, base=rs.ntk_base(case.params["base"], s, rd), scaling=None)
    _agree(adapter, dtype, record, (case.inputs, plain), (case.inputs, case.params), f"NTK s = {s}")


def _dynamic_plain_after_longer(
    adapter: Adapter, dtype: Format, record: Record, data: st.DataObject, at_trained_length: bool
) -> None:
    """A dynamic-NTK call of length n ≤ L is plain RoPE, also right after a longer call, and answers as it did
    before that call. ``at_trained_length``: its last position is L − 1 (n = L); otherwise every position is
    below L − 1 (n < L)."""
    case: Case = data.draw(_case(adapter, dtype, ("dynamic",)), label="case")
    original = case.params["scaling"]["original_max_position_embeddings"]
    t = case.inputs["x"].shape[-2]
    rng = np.random.default_rng(case.about["seed"])
    short = np.sort(rng.integers(0, original - 1, size=t)).astype(np.int64)  # n = max + 1 ≤ L − 1
    if at_trained_length:
        short[-1] = original - 1  # n = L: the last length that is still plain RoPE
    long = short + data.draw(sampled_from([original, 3 * original, 50_000]), label="beyond by")
    plain = dict(case.params, scaling=None)
    inputs = dict(case.inputs, positions=short)
    n = f"n = {int(short.max()) + 1}, L = {original}"
    first, _, call = run(adapter, "rope_scaled", inputs, case.params, dtype, case.inputs["x"].shape)
    run(adapter, "rope_scaled", dict(case.inputs, positions=long), case.params, dtype, case.inputs["x"].shape)
    _agree(adapter, dtype, record, (inputs, plain), (inputs, case.params), f"dynamic NTK at {n} after a longer call")
    again, _, _ = run(adapter, "rope_scaled", inputs, case.params, dtype, case.inputs["x"].shape)
    if not np.array_equal(first, again):
        i = tuple(int(j) for j in np.argwhere(first != again)[0])
        raise CheckFailure(
            f"the same call ({n}) before and after a call at positions up to {int(long.max())}: got {again[i]:.8g} "
            f"at {i}, should be {first[i]:.8g} (the first answer) [{call}]"
        )


@check(
    "rope_scaled/dynamic-below-trained-length",
    "rope_scaling",
    "dynamic NTK is plain RoPE for a call shorter than the trained length (n < L), also right after a longer "
    "call (no state carried from one call to the next)",
    DYNAMIC,
    op="rope_scaled",
    choices={RULE: ("dynamic",)},
)
@given(data=st.data())
def test_dynamic_below_trained_length(adapter: Adapter, dtype: Format, record: Record, data: st.DataObject) -> None:
    _dynamic_plain_after_longer(adapter, dtype, record, data, at_trained_length=False)


@check(
    "rope_scaled/dynamic-at-trained-length",
    "rope_scaling",
    "dynamic NTK is plain RoPE for a call ending at position L − 1 (n = L: s·n/L − (s − 1) = 1), also right "
    "after a longer call (no state carried from one call to the next)",
    DYNAMIC,
    op="rope_scaled",
    choices={RULE: ("dynamic",)},
)
@given(data=st.data())
def test_dynamic_at_trained_length(adapter: Adapter, dtype: Format, record: Record, data: st.DataObject) -> None:
    _dynamic_plain_after_longer(adapter, dtype, record, data, at_trained_length=True)


#: the rules with frequency bands
BANDED = ("yarn", "llama3")


@check(
    "rope_scaled/longrope-boundary",
    "rope_scaling",
    "LongRoPE uses the short factors for a call ending at position L − 1 (n = L) and the long ones for a call "
    "ending at L, with √(1 + ln s/ln L) either way",
    LONGROPE,
    op="rope_scaled",
    choices={RULE: ("longrope",)},
)
@given(data=st.data())
def test_longrope_boundary(adapter: Adapter, dtype: Format, record: Record, data: st.DataObject) -> None:
    case = data.draw(_case(adapter, dtype, ("longrope",)), label="case")
    t = case.inputs["x"].shape[-2]
    # both sides of the boundary in every example: n = L (short factors), then n = L + 1 (long ones)
    for last in (case.params["scaling"]["original_max_position_embeddings"] + k for k in (-1, 0)):
        positions = np.arange(last - t + 1, last + 1, dtype=np.int64)
        with several_cases(f"last position {last}"):
            check_forward(
                adapter, "rope_scaled", Case(dict(case.inputs, positions=positions), case.params), dtype, record
            )


def _pair_mask(rd: int, d: int, layout: str, pairs: np.ndarray) -> np.ndarray:
    mask = np.zeros(d, dtype=bool)
    ia, ib = rope_pair_indices(rd, layout)  # type: ignore[arg-type]
    mask[ia[pairs]] = mask[ib[pairs]] = True
    return mask


@check(
    "rope_scaled/bands",
    "rope_scaling",
    "YaRN and Llama-3: high-frequency pairs rotate as plain RoPE, low-frequency pairs as position interpolation "
    "(YaRN's rotated coordinates also scaled by 0.1·ln(s) + 1)",
    YARN,
    op="rope_scaled",
    choices={RULE: BANDED},
)
@given(data=st.data())
def test_bands(adapter: Adapter, dtype: Format, record: Record, data: st.DataObject) -> None:
    kind = data.draw(sampled_from(declared(adapter, "rope_scaled", RULE, BANDED)), label="rule")
    case: Case = data.draw(_case(adapter, dtype, (kind,)), label="case")
    d = case.inputs["x"].shape[-1]
    rd = case.params["rotary_dim"] or d
    rule, base = case.params["scaling"], case.params["base"]
    s = rule["factor"]
    theta = base ** (-np.arange(0, rd, 2) / rd)
    if kind == "yarn":
        ramp = rs.yarn_ramp(rd, base, rule["original_max_position_embeddings"], 32, 1)
        if "beta_fast" in rule:
            ramp = rs.yarn_ramp(
                rd, base, rule["original_max_position_embeddings"], rule["beta_fast"], rule["beta_slow"]
            )
        high, low = ramp == 0.0, ramp == 1.0
        factor = rs.yarn_attention_factor(s)
    else:
        wavelen = 2 * np.pi / theta
        original = rule["original_max_position_embeddings"]
        high, low = wavelen < original / rule["high_freq_factor"], wavelen > original / rule["low_freq_factor"]
        factor = 1.0
    layout = adapter.conventions.rope_layout
    x = case.inputs["x"]
    # the plain and the interpolated references, scaled by the attention factor: x·factor is rounded, so the
    # comparison runs on inputs whose scaled copies are exact (factor = 1) or on the unscaled output ratio
    # the low band's reference is the candidate's own linear rule: a candidate without one (torchtune has only
    # Llama-3's) is held to the high band here, and to the oracle for every pair by rope_scaled/forward
    has_linear = "linear" in declared(adapter, "rope_scaled", RULE)
    for band, ref_scaling, name in ((high, None, "high-frequency"), (low, {"type": "linear", "factor": s}, "low")):
        if not band.any() or (ref_scaling is not None and not has_linear):
            continue
        mask = _pair_mask(rd, d, layout, np.flatnonzero(band))
        if factor == 1.0:
            _agree(
                adapter,
                dtype,
                record,
                (case.inputs, dict(case.params, scaling=ref_scaling)),
                (case.inputs, case.params),
                f"{kind}, {name} pairs",
                mask,
            )
        else:
            y, a, call = run(adapter, "rope_scaled", case.inputs, case.params, dtype, x.shape)
            yr, ar, _ = run(adapter, "rope_scaled", case.inputs, dict(case.params, scaling=ref_scaling), dtype, x.shape)
            gap, tol = np.where(mask, np.abs(y - factor * yr), 0.0), a + factor * ar
            record.examples += 1
            i = tuple(int(j) for j in np.unravel_index(np.argmax(gap / tol), x.shape))
            record.observe(float(np.max(gap / dtype.ulp(np.abs(y)))), float(gap[i] / tol[i]), f"{kind} {name} {i}")
            if gap[i] > tol[i]:
                raise CheckFailure(
                    f"{kind}, {name} pairs: got {y[i]:.8g} at {i}, should be {factor:.6g} × {yr[i]:.8g} "
                    f"± {tol[i]:.3g} [{call}]"
                )

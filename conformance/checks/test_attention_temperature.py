"""Attention temperature tuning of NoPE layers: the query at position p scaled by log(1 + ⌊(p + 1)/F⌋)·α + 1
(reference/attention_temperature.py cites Llama 4) — agreement with the oracle, no scaling before the first step,
one scale within each step."""

from __future__ import annotations

import numpy as np
from hypothesis import assume, given
from hypothesis import strategies as st

from transformer_conformance.adapters.contract import Adapter
from transformer_conformance.conformance.harness.compare import CheckFailure, Record, check_forward, check_vjp
from transformer_conformance.conformance.harness.marks import check
from transformer_conformance.conformance.harness.properties import run
from transformer_conformance.conformance.harness.series import Along
from transformer_conformance.conformance.strategies import common as cst
from transformer_conformance.conformance.strategies import mrope as sm
from transformer_conformance.reference.formats import Format

OP = "attention_temperature"
CITE = (
    "ref: Llama 4 (attention temperature tuning on its NoPE layers: q·(log(⌊(p + 1)/floor_scale⌋ + 1)·attn_scale "
    "+ 1), floor_scale 8192, attn_scale 0.1)"
)


@check("temperature/forward", "attention_temperature", "agrees with the oracle", CITE, op=OP)
@given(data=st.data())
def test_forward(adapter: Adapter, dtype: Format, record: Record, data: st.DataObject) -> None:
    case = data.draw(sm.temperature_case(dtype), label="case")
    check_forward(adapter, OP, case, dtype, record, Along.positions(case.inputs["positions"]))


@check("temperature/gradient", "attention_temperature", "VJP agrees with the oracle (g·τ)", CITE, op=OP, grad=True)
@given(data=st.data())
def test_gradient(adapter: Adapter, dtype: Format, record: Record, data: st.DataObject) -> None:
    case = data.draw(sm.temperature_case(dtype), label="case")
    cot = data.draw(cst.cotangent(dtype, case.inputs["q"].shape), label="cotangent")
    check_vjp(adapter, OP, case, cot, dtype, record, {"q": Along.positions(case.inputs["positions"])})


@check(
    "temperature/identity-before-first-step",
    "attention_temperature",
    "τ = 1 while p + 1 < floor_scale: those queries come back unchanged, bit for bit",
    CITE,
    op=OP,
)
@given(data=st.data())
def test_identity_before_first_step(adapter: Adapter, dtype: Format, record: Record, data: st.DataObject) -> None:
    case = data.draw(sm.temperature_case(dtype), label="case")
    floor_scale = case.params["floor_scale"]
    q = case.inputs["q"]
    t = q.shape[-2]
    last = int(floor_scale) - 2  # the last position with ⌊(p + 1)/F⌋ = 0
    assume(last >= 0)  # a floor scale of 1 has no position before its first step
    pos = np.arange(max(0, last - t + 1), max(0, last - t + 1) + t, dtype=np.int64)
    if pos[-1] > last:  # fewer positions before the first step than tokens
        q, pos = q[..., : last + 1, :], pos[: last + 1]
    y, _, call = run(adapter, OP, {"q": q, "positions": pos}, case.params, dtype, q.shape)
    want = q.astype(np.float64)
    record.examples += 1
    if not np.array_equal(y, want):
        i = tuple(int(j) for j in np.argwhere(y != want)[0])
        raise CheckFailure(
            f"at position {pos[i[-2]]} (before the first step, p + 1 < {floor_scale:g}): got {y[i]:.8g} at {i}, "
            f"should be {want[i]:.8g} (unchanged) [{call}]"
        )


@check(
    "temperature/one-scale-per-step",
    "attention_temperature",
    "positions of one step (the same ⌊(p + 1)/F⌋) scale the same query identically, bit for bit",
    CITE,
    op=OP,
)
@given(data=st.data())
def test_one_scale_per_step(adapter: Adapter, dtype: Format, record: Record, data: st.DataObject) -> None:
    case = data.draw(sm.temperature_case(dtype), label="case")
    floor_scale = case.params["floor_scale"]
    assume(floor_scale > 1)  # a step of one position has no second position to compare
    step = data.draw(st.integers(1, 15), label="step")
    first = int(step * floor_scale) - 1  # the first position of the step: p + 1 = n·F
    q = case.inputs["q"][..., :1, :]
    record.examples += 1
    y0, _, call = run(adapter, OP, {"q": q, "positions": np.array([first])}, case.params, dtype, q.shape)
    for p in sorted({first + (int(floor_scale) - 1) // 2, first + int(floor_scale) - 1} - {first}):
        y, _, _ = run(adapter, OP, {"q": q, "positions": np.array([p])}, case.params, dtype, q.shape)
        if not np.array_equal(y, y0):
            i = tuple(int(v) for v in np.argwhere(y != y0)[0])
            raise CheckFailure(
                f"the same query at positions {first} and {p} (both in step {step} of floor_scale "
                f"{floor_scale:g}): got {y[i]:.8g} at {p}, should be {y0[i]:.8g}, as at {first} [{call}]"
            )

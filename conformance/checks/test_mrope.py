"""Multimodal RoPE: pair i rotated by the position of its stream (temporal, height, width), in sections or
interleaved (reference/mrope.py cites Qwen2-VL and Qwen3-VL) — agreement with the oracle, a text token's M-RoPE is
1-D RoPE, each stream keeps RoPE's relative property, position 0 is the identity."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from transformer_conformance.adapters.contract import Adapter
from transformer_conformance.conformance.harness import size_regimes
from transformer_conformance.conformance.harness.agreement import agree
from transformer_conformance.conformance.harness.compare import CheckFailure, Record, check_forward, check_vjp
from transformer_conformance.conformance.harness.marks import UNSUPPORTED, check, declared
from transformer_conformance.conformance.harness.properties import run
from transformer_conformance.conformance.harness.series import Along
from transformer_conformance.conformance.strategies import common as cst
from transformer_conformance.conformance.strategies import mrope as sm
from transformer_conformance.conformance.strategies import sizes
from transformer_conformance.conformance.strategies.common import Case
from transformer_conformance.reference.formats import Format
from transformer_conformance.reference.mrope import STREAMS

OP = "mrope"
CITE = (
    "ref: Qwen2-VL §2.1 (M-RoPE: the rotary frequencies split into temporal, height and width sections, each "
    "rotated by its own position); Qwen3-VL (the three streams interleaved across the frequencies)"
)
TEXT = "ref: Qwen2-VL §2.1: for text the three position ids are equal, and M-RoPE is 1-D RoPE"
RELATIVE = "ref: Qwen2-VL §2.1 with seed-000 §RoPE: each stream's score depends only on its offset"
CHOICES = {"streams": STREAMS}


def _case(adapter: Adapter, dtype: Format, kind: str | None = None) -> st.SearchStrategy[Case]:
    return sm.mrope_case(dtype, declared(adapter, OP, "streams"), kind)


def _along(case: Case) -> Along:
    return Along.positions(case.inputs["positions"][0])


@check(
    "mrope/forward",
    "mrope",
    "agrees with the oracle in the declared pair layout and streams",
    CITE,
    op=OP,
    choices=CHOICES,
)
@given(data=st.data())
def test_forward(adapter: Adapter, dtype: Format, record: Record, data: st.DataObject) -> None:
    case = data.draw(_case(adapter, dtype), label="case")
    check_forward(adapter, OP, case, dtype, record, _along(case))


@check(
    "mrope/gradient",
    "mrope",
    "VJP agrees with the oracle (each pair's transposed rotation)",
    CITE,
    op=OP,
    grad=True,
    choices=CHOICES,
)
@given(data=st.data())
def test_gradient(adapter: Adapter, dtype: Format, record: Record, data: st.DataObject) -> None:
    case = data.draw(_case(adapter, dtype), label="case")
    cot = data.draw(cst.cotangent(dtype, case.inputs["x"].shape), label="cotangent")
    check_vjp(adapter, OP, case, cot, dtype, record, {"x": _along(case)})


@check(
    "mrope/text-is-rope",
    "mrope",
    "with t = h = w the output is the candidate's own 1-D RoPE",
    TEXT,
    op=OP,
    choices=CHOICES,
)
@given(data=st.data())
def test_text_is_rope(adapter: Adapter, dtype: Format, record: Record, data: st.DataObject) -> None:
    cap = adapter.capabilities.get("rope")
    if cap is None or dtype.name not in cap.dtypes:
        pytest.skip(f"{UNSUPPORTED}{adapter.name} does not declare rope in {dtype.name} to compare with")
    case = data.draw(_case(adapter, dtype, kind="text"), label="case")
    shape = case.inputs["x"].shape
    y, a, call = run(adapter, OP, case.inputs, case.params, dtype, shape)
    plain = {"x": case.inputs["x"], "positions": case.inputs["positions"][0]}
    y2, a2, _ = run(adapter, "rope", plain, {"base": case.params["base"], "rotary_dim": None}, dtype, shape)
    agree(y, a, y2, a2, dtype, record, "M-RoPE with t = h = w vs RoPE", call)


@check(
    "mrope/relative",
    "mrope",
    "scores depend only on each stream's offset: shifting t, h and w of both tokens leaves ⟨q', k'⟩ unchanged",
    RELATIVE,
    op=OP,
    choices=CHOICES,
)
@given(data=st.data())
def test_relative(adapter: Adapter, dtype: Format, record: Record, data: st.DataObject) -> None:
    case = data.draw(_case(adapter, dtype), label="case")
    x = case.inputs["x"]
    q, k = x[0, 0], x[-1, -1]
    pq = np.array([data.draw(st.integers(0, 100_000), label=f"q's {s}") for s in "thw"])
    pk = np.array([data.draw(st.integers(0, 100_000), label=f"k's {s}") for s in "thw"])
    shift = np.array([data.draw(st.integers(0, 100_000), label=f"shift of {s}") for s in "thw"])
    scores, errs = [], []
    for pos_q, pos_k in ((pq, pk), (pq + shift, pk + shift)):
        both = np.stack([q, k])[None]  # (1, 2, d): q at token 0, k at token 1
        pos = np.stack([pos_q, pos_k], axis=1).astype(np.int64)
        y, a, call = run(adapter, OP, {"x": both, "positions": pos}, case.params, dtype, both.shape)
        scores.append(float(np.sum(y[0, 0] * y[0, 1])))
        errs.append(float(np.sum(np.abs(y[0, 0]) * a[0, 1] + np.abs(y[0, 1]) * a[0, 0] + a[0, 0] * a[0, 1])))
    gap, tol = abs(scores[1] - scores[0]), errs[0] + errs[1]
    record.examples += 1
    record.observe(float(gap / dtype.ulp(max(abs(scores[0]), 1e-30))), float(gap / tol), f"shift {shift.tolist()}")
    if gap > tol:
        raise CheckFailure(
            f"score with (t, h, w) shifted by {shift.tolist()}: got {scores[1]:.8g}, should be {scores[0]:.8g} "
            f"± {tol:.3g}, the score at q {pq.tolist()}, k {pk.tolist()} [{call}]"
        )


@check(
    "mrope/identity-at-zero",
    "mrope",
    "t = h = w = 0 leaves x unchanged, bit for bit",
    CITE,
    op=OP,
    choices=CHOICES,
)
@given(data=st.data())
def test_identity_at_zero(adapter: Adapter, dtype: Format, record: Record, data: st.DataObject) -> None:
    case = data.draw(_case(adapter, dtype), label="case")
    x = case.inputs["x"]
    inputs = dict(case.inputs, positions=np.zeros((3, x.shape[-2]), dtype=np.int64))
    y, _, call = run(adapter, OP, inputs, case.params, dtype, x.shape)
    want = x.astype(np.float64)
    record.examples += 1
    if not np.array_equal(y, want):
        i = tuple(int(j) for j in np.argwhere(y != want)[0])
        raise CheckFailure(f"at t = h = w = 0: got {y[i]:.8g} at {i}, should be {want[i]:.8g} (unchanged) [{call}]")


REGIMES = f"Qwen2-VL's {sm.MROPE_REGIME[0]} heads × {sm.MROPE_REGIME[1]} image tokens × {sm.MROPE_REGIME[2]} features"


@check(
    "mrope/regime-forward",
    "mrope",
    f"agrees with the oracle in the size regimes: {REGIMES}",
    CITE,
    op=OP,
    choices=CHOICES,
    autocast=False,
)
@sizes.REGIME_SETTINGS
@given(data=st.data())
def test_regime_forward(adapter: Adapter, dtype: Format, record: Record, data: st.DataObject) -> None:
    cases = data.draw(sm.mrope_cases(dtype, declared(adapter, OP, "streams")), label="cases")
    size_regimes.forward(adapter, OP, cases, dtype, record)


@check(
    "mrope/regime-gradient",
    "mrope",
    f"VJP agrees with the oracle in the size regimes: {REGIMES}",
    CITE,
    op=OP,
    grad=True,
    choices=CHOICES,
    autocast=False,
)
@sizes.REGIME_SETTINGS
@given(data=st.data())
def test_regime_gradient(adapter: Adapter, dtype: Format, record: Record, data: st.DataObject) -> None:
    cases = data.draw(sm.mrope_cases(dtype, declared(adapter, OP, "streams")), label="cases")
    size_regimes.gradient(adapter, OP, cases, dtype, record)

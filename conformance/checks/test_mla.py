"""Multi-head latent attention (reference/mla.py cites DeepSeek-V2 and -V3): agreement with the oracle in each form the
candidate declares (forward, gradients, DeepSeek-V3's dimensions), the absorbed form equal to the naive one, and the
decoupled RoPE slice's relative positions."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from transformer_conformance.adapters.contract import Adapter
from transformer_conformance.conformance.harness import size_regimes
from transformer_conformance.conformance.harness.agreement import agree
from transformer_conformance.conformance.harness.compare import Record, check_forward, check_vjp
from transformer_conformance.conformance.harness.marks import UNSUPPORTED, check, declared
from transformer_conformance.conformance.harness.properties import run
from transformer_conformance.conformance.strategies import common as cst
from transformer_conformance.conformance.strategies import mla as sm
from transformer_conformance.conformance.strategies import sizes
from transformer_conformance.conformance.strategies.common import Case
from transformer_conformance.reference import oracle
from transformer_conformance.reference.formats import Format
from transformer_conformance.reference.mla import FORMS

OP = "mla_attention"
CITE = (
    "ref: DeepSeek-V2 §2.1.2–2.1.3 (keys and values up-projected from a shared latent, a decoupled RoPE key shared "
    "by the heads) and §2.1.2's absorbed form (W_UK into the query, W_UV after the attention); DeepSeek-V3 §2.1.1; "
    "the softmax scale mscale²/√(D_n + D_r) of DeepSeek's YaRN"
)
ABSORBED = "ref: DeepSeek-V2 §2.1.2: W_UK absorbed into W_Q and W_UV into W_O compute the same attention"
RELATIVE = "ref: DeepSeek-V2 §2.1.3 with seed-000 §RoPE: the decoupled slice makes scores depend on offsets only"
CHOICES = {"form": FORMS}


def _case(adapter: Adapter, dtype: Format, forms: tuple[str, ...] | None = None) -> st.SearchStrategy[Case]:
    return sm.mla_case(dtype, declared(adapter, OP, "form", forms))


def _shape(case: Case) -> tuple[int, ...]:
    q, w = case.inputs["q_nope"], case.inputs["w_uv"]
    return (*q.shape[:3], w.shape[-1])


@check("mla/forward", "mla", "agrees with the oracle in each declared form", CITE, op=OP, choices=CHOICES)
@given(data=st.data())
def test_forward(adapter: Adapter, dtype: Format, record: Record, data: st.DataObject) -> None:
    check_forward(adapter, OP, data.draw(_case(adapter, dtype), label="case"), dtype, record)


@check(
    "mla/gradient",
    "mla",
    "VJP agrees with the oracle (every input, the weights included)",
    CITE,
    op=OP,
    grad=True,
    choices=CHOICES,
)
@given(data=st.data())
def test_gradient(adapter: Adapter, dtype: Format, record: Record, data: st.DataObject) -> None:
    case = data.draw(_case(adapter, dtype), label="case")
    cot = data.draw(cst.cotangent(dtype, _shape(case)), label="cotangent")
    check_vjp(adapter, OP, case, cot, dtype, record)


@check(
    "mla/absorbed-equals-naive",
    "mla",
    "the absorbed form's output equals the naive form's (the candidate's own)",
    ABSORBED,
    op=OP,
    choices=CHOICES,
)
@given(data=st.data())
def test_absorbed_equals_naive(adapter: Adapter, dtype: Format, record: Record, data: st.DataObject) -> None:
    if declared(adapter, OP, "form") != FORMS:
        pytest.skip(f"{UNSUPPORTED}{adapter.name} does not declare both MLA forms to compare")
    case = data.draw(_case(adapter, dtype, ("naive",)), label="case")
    shape = _shape(case)
    naive, a1, call = run(adapter, OP, case.inputs, case.params, dtype, shape)
    absorbed, a2, _ = run(adapter, OP, case.inputs, dict(case.params, form="absorbed"), dtype, shape)
    values = case.values()
    gap = oracle.forward(OP, values, dict(case.params, form="absorbed"), adapter.conventions, dtype) - oracle.forward(
        OP, values, case.params, adapter.conventions, dtype
    )
    agree(absorbed, a2, naive, a1, dtype, record, "absorbed MLA vs naive MLA", call, exact_gap=gap)


@check(
    "mla/relative-positions",
    "mla",
    "shifting every query's and key's position by the same offset leaves the output unchanged",
    RELATIVE,
    op=OP,
    choices=CHOICES,
)
@given(data=st.data())
def test_relative_positions(adapter: Adapter, dtype: Format, record: Record, data: st.DataObject) -> None:
    case = data.draw(_case(adapter, dtype), label="case")
    shift = data.draw(st.one_of(st.integers(1, 64), st.integers(1, 200_000)), label="shift")
    shape = _shape(case)
    y, a, call = run(adapter, OP, case.inputs, case.params, dtype, shape)
    moved = dict(
        case.inputs, q_positions=case.inputs["q_positions"] + shift, k_positions=case.inputs["k_positions"] + shift
    )
    y2, a2, _ = run(adapter, OP, moved, case.params, dtype, shape)
    values, values2 = case.values(), {**case.values(), **{k: moved[k] for k in ("q_positions", "k_positions")}}
    gap = oracle.forward(OP, values2, case.params, adapter.conventions, dtype) - oracle.forward(
        OP, values, case.params, adapter.conventions, dtype
    )
    agree(y2, a2, y, a, dtype, record, f"output with every position shifted by {shift}", call, exact_gap=gap)


REGIMES = "DeepSeek-V3's head (D_n 128, D_r 64, D_v 128, latent 512), 3 queries over 520 keys"


@check(
    "mla/regime-forward",
    "mla",
    f"agrees with the oracle in the size regimes: {REGIMES}",
    CITE,
    op=OP,
    choices=CHOICES,
    autocast=False,
)
@sizes.REGIME_SETTINGS
@given(data=st.data())
def test_regime_forward(adapter: Adapter, dtype: Format, record: Record, data: st.DataObject) -> None:
    cases = data.draw(sm.mla_cases(dtype, declared(adapter, OP, "form")), label="cases")
    size_regimes.forward(adapter, OP, cases, dtype, record)


@check(
    "mla/regime-gradient",
    "mla",
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
    cases = data.draw(sm.mla_cases(dtype, declared(adapter, OP, "form")), label="cases")
    size_regimes.gradient(adapter, OP, cases, dtype, record)

"""Absolute positions and ALiBi: the sinusoidal encoding and its relative-offset map, a learned table that
refuses positions it never declared, ALiBi's head slopes and linear distance penalty (seed-000 §Absolute
positions, §ALiBi; seed-002 §3.4.1)."""

from __future__ import annotations

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
    describe_call,
)
from transformer_conformance.conformance.harness.marks import check
from transformer_conformance.conformance.harness.properties import check_invariance, run
from transformer_conformance.conformance.strategies import common as cst
from transformer_conformance.conformance.strategies import positions as pst
from transformer_conformance.conformance.strategies import sizes
from transformer_conformance.conformance.strategies.choices import sampled_from
from transformer_conformance.conformance.strategies.plan import Dims, shapes
from transformer_conformance.reference.formats import Format
from transformer_conformance.reference.positions import alibi_slopes, sinusoidal_shift

SINE = "seed-000 §Absolute positions: PE(pos, 2i) = sin(pos / 10000^(2i/d)), PE(pos, 2i+1) = cos(…)"
SHIFT = "seed-002 §3.4.1: a fixed rotation matrix M_δ maps PE(i) to PE(i + δ) for any offset δ"
LEARNED = (
    "seed-002 §3.4.1: positions {0, …, L − 1} are declared at initialization; any position beyond L − 1 is "
    "undefined — a hard failure, no graceful degradation"
)
ALIBI = "seed-000 §ALiBi: a fixed, head-specific linear penalty −slope_h·|i − j| added to attention scores"
#: what the regime checks cover
SINE_REGIMES = "300 positions × 4096 features, from position 0, 4090 or 30,000"
LEARNED_REGIMES = "a table of 32,768 rows × 64 read at 4096 positions, a quarter of them repeats"
ALIBI_REGIMES = "64 heads, 8 queries over 520 keys (kernels fill the biases a tile of keys at a time)"
SLOPES = ALIBI + "; slopes 2^(−8h/H), h = 1 … H, for H a power of two (Press et al., 2022)"


# ---- sinusoidal -------------------------------------------------------------------------------------------------


@check("sinusoidal/forward", "sinusoidal", "x + PE(pos) agrees with the oracle", SINE, op="sinusoidal_positions")
@given(data=st.data())
def test_sinusoidal_forward(adapter: Adapter, dtype: Format, record: Record, data: st.DataObject) -> None:
    check_forward(adapter, "sinusoidal_positions", data.draw(pst.sinusoidal_case(dtype), label="case"), dtype, record)


@check(
    "sinusoidal/gradient",
    "sinusoidal",
    "the encoding is added: ∂L/∂x is the upstream gradient",
    SINE,
    op="sinusoidal_positions",
    grad=True,
)
@given(data=st.data())
def test_sinusoidal_gradient(adapter: Adapter, dtype: Format, record: Record, data: st.DataObject) -> None:
    case = data.draw(pst.sinusoidal_case(dtype), label="case")
    cot = data.draw(cst.cotangent(dtype, case.inputs["x"].shape), label="cotangent")
    check_vjp(adapter, "sinusoidal_positions", case, cot, dtype, record)


def _pe(
    adapter: Adapter, dtype: Format, positions: np.ndarray, d: int, base: float
) -> tuple[np.ndarray, np.ndarray, str]:
    """The candidate's PE at ``positions`` (x = 0), its per-element budget and the call."""
    x = np.zeros((1, positions.size, d), dtype=dtype.np_dtype)
    y, allowed, call = run(
        adapter, "sinusoidal_positions", {"x": x, "positions": positions}, {"base": base}, dtype, x.shape
    )
    return y[0], allowed[0], call


@check(
    "sinusoidal/relative-offset",
    "sinusoidal",
    "PE(i + δ) = M_δ·PE(i): the block rotation by δ·ω_k maps each position's encoding to the shifted one",
    SHIFT,
    op="sinusoidal_positions",
)
@given(data=st.data())
def test_sinusoidal_relative_offset(adapter: Adapter, dtype: Format, record: Record, data: st.DataObject) -> None:
    d = 2 * Dims(data.draw, shapes(("d/2",), (3,), (32,)))("d/2", st.one_of(st.integers(1, 8), sampled_from([32, 64])))
    base = data.draw(sampled_from([10000.0, 100.0]), label="base")
    i = data.draw(st.one_of(st.integers(0, 64), st.integers(0, 100_000)), label="i")
    delta = data.draw(st.one_of(st.integers(1, 16), st.integers(1, 50_000)), label="δ")
    pe, allowed, call = _pe(adapter, dtype, np.array([i, i + delta], dtype=np.int64), d, base)
    mapped = sinusoidal_shift(delta, d, base) @ pe[0]
    # M_δ rotates each (sin, cos) pair: it carries PE(i)'s error over with the pair's length unchanged
    pair = np.repeat(np.hypot(allowed[0, 0::2], allowed[0, 1::2]), 2)
    tol = allowed[1] + pair + 4 * np.finfo(np.float64).eps
    gap = np.abs(pe[1] - mapped)
    record.examples += 1
    k = int(np.argmax(gap / tol))
    record.observe(float(np.max(gap / dtype.ulp(1.0))), float(gap[k] / tol[k]), f"PE({i}+{delta})[{k}]")
    if gap[k] > tol[k]:
        raise CheckFailure(
            f"PE({i + delta})[{k}]: got {pe[1, k]:.8g}, should be {mapped[k]:.8g} ± {tol[k]:.3g}, "
            f"(M_{delta}·PE({i}))[{k}] [{call}]"
        )


@check(
    "sinusoidal/worked-example",
    "sinusoidal",
    "d = 4: PE(0) = [0, 1, 0, 1] and PE(1) = [sin 1, cos 1, sin 0.01, cos 0.01] (pairs of frequency 1 and 0.01)",
    "seed-002 §3.4.1 A Worked Example",
    op="sinusoidal_positions",
)
def test_sinusoidal_worked_example(adapter: Adapter, dtype: Format, record: Record) -> None:
    pe, allowed, call = _pe(adapter, dtype, np.array([0, 1], dtype=np.int64), 4, 10000.0)
    want = np.array([[0.0, 1.0, 0.0, 1.0], [np.sin(1.0), np.cos(1.0), np.sin(0.01), np.cos(0.01)]])
    record.examples += 1
    bad = np.abs(pe - want) > allowed
    if bad.any():
        i = tuple(int(j) for j in np.argwhere(bad)[0])
        raise CheckFailure(f"PE{list(i)}: got {pe[i]:.6g}, should be {want[i]:.6g} [{call}]")


@check(
    "sinusoidal/regime-forward",
    "sinusoidal",
    f"agrees with the oracle in the size regimes kernels dispatch on: {SINE_REGIMES}",
    SINE,
    op="sinusoidal_positions",
    autocast=False,
)
@sizes.REGIME_SETTINGS
@given(data=st.data())
def test_sinusoidal_regime_forward(adapter: Adapter, dtype: Format, record: Record, data: st.DataObject) -> None:
    cases = data.draw(sizes.sinusoidal_cases(dtype), label="cases")
    size_regimes.forward(adapter, "sinusoidal_positions", cases, dtype, record)


@check(
    "sinusoidal/regime-gradient",
    "sinusoidal",
    f"VJP agrees with the oracle in the size regimes kernels dispatch on: {SINE_REGIMES}",
    SINE,
    op="sinusoidal_positions",
    autocast=False,
    grad=True,
)
@sizes.REGIME_SETTINGS
@given(data=st.data())
def test_sinusoidal_regime_gradient(adapter: Adapter, dtype: Format, record: Record, data: st.DataObject) -> None:
    cases = data.draw(sizes.sinusoidal_cases(dtype), label="cases")
    size_regimes.gradient(adapter, "sinusoidal_positions", cases, dtype, record)


# ---- learned ----------------------------------------------------------------------------------------------------


@check("learned/lookup", "learned", "returns the table's rows at the positions", LEARNED, op="learned_positions")
@given(data=st.data())
def test_learned_lookup(adapter: Adapter, dtype: Format, record: Record, data: st.DataObject) -> None:
    check_forward(adapter, "learned_positions", data.draw(pst.learned_case(dtype), label="case"), dtype, record)


@check(
    "learned/gradient",
    "learned",
    "∂L/∂table: each row sums the gradients of every position that read it (repeats add up)",
    LEARNED,
    op="learned_positions",
    grad=True,
)
@given(data=st.data())
def test_learned_gradient(adapter: Adapter, dtype: Format, record: Record, data: st.DataObject) -> None:
    case = data.draw(pst.learned_case(dtype), label="case")
    cot = data.draw(cst.cotangent(dtype, (case.inputs["positions"].size, case.inputs["table"].shape[1])), label="g")
    check_vjp(adapter, "learned_positions", case, cot, dtype, record)


@check(
    "learned/beyond-table",
    "learned",
    "a position ≥ L (or < 0) is refused with an error, never wrapped, clamped or read past the table",
    LEARNED,
    op="learned_positions",
)
@given(data=st.data())
def test_learned_beyond_table(adapter: Adapter, dtype: Format, record: Record, data: st.DataObject) -> None:
    case = data.draw(pst.learned_case(dtype), label="case")
    n = case.inputs["table"].shape[0]
    bad = data.draw(sampled_from([n, n + 1, 2 * n, 2 * n + 1, -1, -n, 10 * n + 3]), label="undeclared position")
    pos = case.inputs["positions"].copy()
    pos[data.draw(st.integers(0, pos.size - 1), label="where")] = bad
    inputs = dict(case.inputs, positions=pos)
    call = describe_call(adapter, "learned_positions", inputs, {})
    record.examples += 1
    try:
        out = adapter.forward("learned_positions", {k: v.copy() for k, v in inputs.items()}, {})
    except Exception:  # noqa: BLE001 - refusing is the required behaviour, whatever the exception
        return
    shown = np.asarray(out).astype(np.float64).ravel()[:4].tolist() if isinstance(out, np.ndarray) else type(out)
    raise CheckFailure(f"position {bad} of a table of L = {n}: got an output ({shown} …), should be an error [{call}]")


@check(
    "learned/regime-forward",
    "learned",
    f"agrees with the oracle in the size regimes kernels dispatch on: {LEARNED_REGIMES}",
    LEARNED,
    op="learned_positions",
)
@sizes.REGIME_SETTINGS
@given(data=st.data())
def test_learned_regime_forward(adapter: Adapter, dtype: Format, record: Record, data: st.DataObject) -> None:
    cases = data.draw(sizes.learned_cases(dtype), label="cases")
    size_regimes.forward(adapter, "learned_positions", cases, dtype, record)


@check(
    "learned/regime-gradient",
    "learned",
    f"VJP agrees with the oracle in the size regimes kernels dispatch on: {LEARNED_REGIMES}",
    LEARNED,
    op="learned_positions",
    grad=True,
)
@sizes.REGIME_SETTINGS
@given(data=st.data())
def test_learned_regime_gradient(adapter: Adapter, dtype: Format, record: Record, data: st.DataObject) -> None:
    cases = data.draw(sizes.learned_cases(dtype), label="cases")
    size_regimes.gradient(adapter, "learned_positions", cases, dtype, record)


# ---- ALiBi ------------------------------------------------------------------------------------------------------


@check("alibi/forward", "alibi", "scores − m_h·|i − j| agrees with the oracle", ALIBI, op="alibi")
@given(data=st.data())
def test_alibi_forward(adapter: Adapter, dtype: Format, record: Record, data: st.DataObject) -> None:
    check_forward(adapter, "alibi", data.draw(pst.alibi_case(dtype), label="case"), dtype, record)


@check(
    "alibi/gradient", "alibi", "the bias is constant: ∂L/∂scores is the upstream gradient", ALIBI, op="alibi", grad=True
)
@given(data=st.data())
def test_alibi_gradient(adapter: Adapter, dtype: Format, record: Record, data: st.DataObject) -> None:
    case = data.draw(pst.alibi_case(dtype), label="case")
    check_vjp(adapter, "alibi", case, data.draw(cst.cotangent(dtype, case.inputs["scores"].shape)), dtype, record)


@check(
    "alibi/slopes",
    "alibi",
    "head h's penalty per unit distance is 2^(−8h/H) (H a power of two); other H: the H' = 2^⌊log₂H⌋ slopes, "
    "then every other slope of 2H' heads",
    SLOPES,
    op="alibi",
)
@given(h=pst.alibi_heads())
def test_alibi_slopes(adapter: Adapter, dtype: Format, record: Record, h: int) -> None:
    scores = np.zeros((1, h, 1, 2), dtype=dtype.np_dtype)
    inputs = {"scores": scores, "q_positions": np.array([1]), "k_positions": np.array([0, 1])}
    y, allowed, call = run(adapter, "alibi", inputs, {}, dtype, scores.shape)
    got, want = -y[0, :, 0, 0], alibi_slopes(h)
    record.examples += 1
    used = np.abs(got - want) / allowed[0, :, 0, 0]
    k = int(np.argmax(used))
    record.observe(float(np.max(np.abs(got - want) / dtype.ulp(want))), float(used[k]), f"slope of head {k}")
    if used[k] > 1 or y[0, :, 0, 1].any():
        raise CheckFailure(
            f"slope of head {k + 1} of {h}: got {got[k]:.6g}, should be {want[k]:.6g} "
            f"(distance 0 penalised {(-y[0, :, 0, 1]).tolist()}) [{call}]"
        )


@check(
    "alibi/translation-invariant",
    "alibi",
    "shifting every query and key position by the same t leaves the biased scores unchanged (a function of i − j)",
    ALIBI,
    op="alibi",
)
@given(data=st.data())
def test_alibi_translation(adapter: Adapter, dtype: Format, record: Record, data: st.DataObject) -> None:
    case = data.draw(pst.alibi_case(dtype), label="case")
    t = data.draw(sampled_from([1, 17, 4096, 65536]), label="t")
    changed = dict(case.inputs, q_positions=case.inputs["q_positions"] + t, k_positions=case.inputs["k_positions"] + t)
    check_invariance(adapter, "alibi", case, changed, dtype, record, f"positions + {t}")


@check(
    "alibi/regime-forward",
    "alibi",
    f"agrees with the oracle in the size regimes kernels dispatch on: {ALIBI_REGIMES}",
    ALIBI,
    op="alibi",
)
@sizes.REGIME_SETTINGS
@given(data=st.data())
def test_alibi_regime_forward(adapter: Adapter, dtype: Format, record: Record, data: st.DataObject) -> None:
    size_regimes.forward(adapter, "alibi", data.draw(sizes.alibi_cases(dtype), label="cases"), dtype, record)


@check(
    "alibi/regime-gradient",
    "alibi",
    f"VJP agrees with the oracle in the size regimes kernels dispatch on: {ALIBI_REGIMES}",
    ALIBI,
    op="alibi",
    grad=True,
)
@sizes.REGIME_SETTINGS
@given(data=st.data())
def test_alibi_regime_gradient(adapter: Adapter, dtype: Format, record: Record, data: st.DataObject) -> None:
    size_regimes.gradient(adapter, "alibi", data.draw(sizes.alibi_cases(dtype), label="cases"), dtype, record)

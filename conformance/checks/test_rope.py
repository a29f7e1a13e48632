"""RoPE: pair i at position m rotated by m·θ_i, θ_i = base^(−2i/d) (seed-000 §Rotary position embeddings;
seed-002 §3.4.2; seed-004 §Rotary position embeddings)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from transformer_conformance.adapters.contract import Adapter
from transformer_conformance.conformance.harness import size_regimes
from transformer_conformance.conformance.harness.compare import CheckFailure, Record, check_forward, check_vjp
from transformer_conformance.conformance.harness.marks import check
from transformer_conformance.conformance.harness.properties import run
from transformer_conformance.conformance.harness.series import Along
from transformer_conformance.conformance.strategies import common as cst
from transformer_conformance.conformance.strategies import sizes
from transformer_conformance.conformance.strategies.common import Case
from transformer_conformance.reference.formats import Format
from transformer_conformance.reference.rope import rope_pair_indices

CITE = "seed-000 §Rotary position embeddings: rotate pair i by m·θ_i, θ_i = base^(−2i/d_k)"
RELATIVE = "seed-000 §RoPE: ⟨R_m q, R_n k⟩ = ⟨q, R_{n−m} k⟩ — the score depends only on the offset"


@check("rope/forward", "rope", "agrees with the oracle in the declared pair layout", CITE, op="rope")
@given(data=st.data())
def test_forward(adapter: Adapter, dtype: Format, record: Record, data: st.DataObject) -> None:
    case = data.draw(cst.rope_case(dtype), label="case")
    check_forward(adapter, "rope", case, dtype, record, Along.positions(case.inputs["positions"]))


@check("rope/gradient", "rope", "VJP agrees with the oracle (the transposed rotation)", CITE, op="rope", grad=True)
@given(data=st.data())
def test_gradient(adapter: Adapter, dtype: Format, record: Record, data: st.DataObject) -> None:
    case = data.draw(cst.rope_case(dtype), label="case")
    cot = data.draw(cst.cotangent(dtype, case.inputs["x"].shape), label="cotangent")
    check_vjp(adapter, "rope", case, cot, dtype, record, {"x": Along.positions(case.inputs["positions"])})


def _scores(
    adapter: Adapter, dtype: Format, q: np.ndarray, k: np.ndarray, pos_q: np.ndarray, pos_k: np.ndarray, params: dict
) -> tuple[np.ndarray, np.ndarray, str]:
    """Scores ⟨R_{pos_q[t]} q, R_{pos_k[t]} k⟩ for each t, and a bound on their rounding error."""
    t = len(pos_q)
    xq = dtype.round(np.broadcast_to(q, (1, t, q.size)))
    xk = dtype.round(np.broadcast_to(k, (1, t, k.size)))
    rq, aq, call = run(adapter, "rope", {"x": xq, "positions": pos_q}, params, dtype, xq.shape)
    rk, ak, _ = run(adapter, "rope", {"x": xk, "positions": pos_k}, params, dtype, xk.shape)
    scores = np.sum(rq * rk, axis=-1)[0]
    err = np.sum(np.abs(rq) * ak + np.abs(rk) * aq + aq * ak, axis=-1)[0]
    return scores, err, call


@check(
    "rope/relative",
    "rope",
    "scores depend only on the offset: ⟨R_m q, R_n k⟩ = ⟨R_{m+t} q, R_{n+t} k⟩",
    RELATIVE,
    op="rope",
)
@given(data=st.data())
def test_relative(adapter: Adapter, dtype: Format, record: Record, data: st.DataObject) -> None:
    case: Case = data.draw(cst.rope_case(dtype), label="case")
    x = case.values()["x"]
    q, k = x[0, 0], x[-1, -1]
    m = data.draw(st.integers(0, 100_000), label="m")
    n = data.draw(st.integers(0, 100_000), label="n")
    shift = data.draw(st.one_of(st.integers(0, 64), st.integers(0, 100_000)), label="t")
    pos_q, pos_k = np.array([m, m + shift]), np.array([n, n + shift])
    s, err, call = _scores(adapter, dtype, q, k, pos_q, pos_k, case.params)
    gap, tol = abs(s[1] - s[0]), err[0] + err[1]
    record.examples += 1
    record.observe(float(gap / dtype.ulp(max(abs(s[0]), 1e-30))), float(gap / tol), f"score at m={m}, n={n}, t={shift}")
    if gap > tol:
        raise CheckFailure(
            f"score at (m+t, n+t) = ({m + shift}, {n + shift}): got {s[1]:.8g}, should be {s[0]:.8g} "
            f"± {tol:.3g}, the score at (m, n) = ({m}, {n}) [{call}]"
        )


@check(
    "rope/norm-preserving",
    "rope",
    "‖R_m x‖ = ‖x‖: a rotation keeps every head vector's length",
    "seed-000 §RoPE: rotating query and key vectors",
    op="rope",
)
@given(data=st.data())
def test_norm_preserving(adapter: Adapter, dtype: Format, record: Record, data: st.DataObject) -> None:
    case: Case = data.draw(cst.rope_case(dtype), label="case")
    x = case.values()["x"]
    y, allowed, call = run(adapter, "rope", case.inputs, case.params, dtype, x.shape)
    n_in, n_out = np.linalg.norm(x, axis=-1), np.linalg.norm(y, axis=-1)
    tol = np.sqrt(np.sum(allowed * allowed, axis=-1)) + 2 * np.finfo(np.float64).eps * n_in
    gap = np.abs(n_out - n_in)
    record.examples += 1
    used = gap / np.where(tol > 0, tol, 1e-300)
    i = tuple(int(j) for j in np.unravel_index(np.argmax(used), used.shape))
    record.observe(float(gap[i] / dtype.ulp(max(n_in[i], 1e-30))), float(used[i]), f"head vector {i}")
    if gap[i] > tol[i]:
        raise CheckFailure(
            f"norm of head vector {i}: got {n_out[i]:.8g}, should be {n_in[i]:.8g} ± {tol[i]:.3g} [{call}]"
        )


@check(
    "rope/identity-at-zero",
    "rope",
    "R_0 is the identity: position 0 leaves x unchanged, bit for bit",
    "seed-000 §RoPE: rotate pair i by angle m·θ_i (m = 0: angle 0)",
    op="rope",
)
@given(data=st.data())
def test_identity_at_zero(adapter: Adapter, dtype: Format, record: Record, data: st.DataObject) -> None:
    case: Case = data.draw(cst.rope_case(dtype), label="case")
    t = case.inputs["x"].shape[-2]
    inputs = dict(case.inputs, positions=np.zeros(t, dtype=np.int64))
    y, _, call = run(adapter, "rope", inputs, case.params, dtype, case.inputs["x"].shape)
    x = case.values()["x"]
    record.examples += 1
    if not np.array_equal(y, x):
        i = tuple(int(j) for j in np.argwhere(y != x)[0])
        raise CheckFailure(f"at position 0: got {y[i]:.8g} at {i}, should be {x[i]:.8g} (unchanged) [{call}]")


SEED_Q, SEED_K = np.array([1.0, 0.0, 0.0, 1.0]), np.array([0.0, 1.0, 1.0, 0.0])
SEED_R3Q = np.array([-0.990, 0.141, -0.030, 1.000])  # the seed's rounded figures, interleaved layout
SEED_R5K = np.array([0.959, 0.284, 0.999, 0.050])


def _to_layout(v: np.ndarray, layout: str) -> np.ndarray:
    """The seed's interleaved vector with its pairs moved to where ``layout`` keeps them."""
    out = np.empty_like(v)
    ia, ib = rope_pair_indices(v.size, layout)  # type: ignore[arg-type]
    out[ia], out[ib] = v[0::2], v[1::2]
    return out


@check(
    "rope/worked-example",
    "rope",
    "d = 4: q = [1,0,0,1] at 3 and k = [0,1,1,0] at 5 rotate to the seed's figures and score as at positions 0 and 2",
    "seed-002 §3.4.2 A Worked Example",
    op="rope",
)
@pytest.mark.parametrize("positions", [(3, 5, 0, 2)], ids=["(3,5) vs (0,2)"])
def test_worked_example(adapter: Adapter, dtype: Format, record: Record, positions: tuple[int, ...]) -> None:
    layout = adapter.conventions.rope_layout
    q, k = _to_layout(SEED_Q, layout), _to_layout(SEED_K, layout)
    params = {"base": 10000.0, "rotary_dim": None}
    s, err, call = _scores(adapter, dtype, q, k, np.array(positions[0::2]), np.array(positions[1::2]), params)
    rq, aq, _ = run(
        adapter, "rope", {"x": dtype.round(q[None, None]), "positions": np.array([3])}, params, dtype, (1, 1, 4)
    )
    rk, ak, _ = run(
        adapter, "rope", {"x": dtype.round(k[None, None]), "positions": np.array([5])}, params, dtype, (1, 1, 4)
    )
    record.examples += 1
    for name, got, want, allowed in (
        ("R_3 q", rq[0, 0], _to_layout(SEED_R3Q, layout), aq[0, 0]),
        ("R_5 k", rk[0, 0], _to_layout(SEED_R5K, layout), ak[0, 0]),
    ):
        # the seed prints three decimals: ±0.0005, plus the candidate's own rounding
        if np.any(np.abs(got - want) > 0.0005 + allowed):
            raise CheckFailure(
                f"{name}: got {np.round(got, 4).tolist()}, should be {want.tolist()} (seed, {layout} layout) [{call}]"
            )
    if abs(s[0] - s[1]) > err[0] + err[1]:
        raise CheckFailure(f"score at (0, 2): got {s[1]:.6g}, should be {s[0]:.6g}, the score at (3, 5) [{call}]")


REGIMES = "32 heads × 300 positions × 128 features"


@check(
    "rope/regime-forward",
    "rope",
    f"agrees with the oracle in the size regimes kernels dispatch on: {REGIMES}",
    CITE,
    op="rope",
    autocast=False,
)
@sizes.REGIME_SETTINGS
@given(data=st.data())
def test_regime_forward(adapter: Adapter, dtype: Format, record: Record, data: st.DataObject) -> None:
    size_regimes.forward(adapter, "rope", data.draw(sizes.rope_cases(dtype), label="cases"), dtype, record)


@check(
    "rope/regime-gradient",
    "rope",
    f"VJP agrees with the oracle in the size regimes kernels dispatch on: {REGIMES}",
    CITE,
    op="rope",
    autocast=False,
    grad=True,
)
@sizes.REGIME_SETTINGS
@given(data=st.data())
def test_regime_gradient(adapter: Adapter, dtype: Format, record: Record, data: st.DataObject) -> None:
    size_regimes.gradient(adapter, "rope", data.draw(sizes.rope_cases(dtype), label="cases"), dtype, record)

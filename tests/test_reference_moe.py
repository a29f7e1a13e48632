"""The float64 oracle of MoE routing and its load-balancing loss (reference/moe.py): the hand-written VJPs against
central finite differences (``tests/finite_diff.py``), and the rules against small independent computations —
Mixtral's softmax of the top-k logits, DeepSeek-V3's groups and selection-only bias, the loss's two fractions."""

from __future__ import annotations

import numpy as np
import pytest

from tests.finite_diff import assert_vjp
from transformer_conformance.reference import moe


@pytest.mark.parametrize("groups", [(None, None), (4, 2)])
@pytest.mark.parametrize("norm", moe.NORMS)
@pytest.mark.parametrize("score", moe.SCORES)
def test_router_vjp_matches_finite_differences(score: str, norm: str, groups: tuple[int | None, int | None]) -> None:
    rng = np.random.default_rng(0)
    u, b, g = rng.standard_normal((3, 8)), rng.standard_normal(8) * 0.1, rng.standard_normal((3, 8))
    kw = {"k": 3, "score": score, "norm": norm, "scaling": 2.5, "n_group": groups[0], "topk_group": groups[1]}
    du, db = moe.moe_router_vjp(u, b, g, **kw)  # type: ignore[arg-type]
    assert_vjp(lambda a: g * moe.moe_router(a, b, **kw), u, du, rng)  # type: ignore[arg-type]
    assert not db.any()  # the bias only selects


@pytest.mark.parametrize("fraction", moe.FRACTIONS)
def test_aux_loss_vjp_matches_finite_differences(fraction: str) -> None:
    rng = np.random.default_rng(1)
    u = rng.standard_normal((5, 6))
    du = moe.moe_aux_loss_vjp(u, np.asarray(1.5), 2, fraction)  # type: ignore[arg-type]
    assert_vjp(lambda a: 1.5 * moe.moe_aux_loss(a, 2, fraction), u, du, rng)  # type: ignore[arg-type]


def test_z_loss_vjp_matches_finite_differences() -> None:
    rng = np.random.default_rng(5)
    u = rng.standard_normal((4, 6)) * 3.0
    du = moe.moe_z_loss_vjp(u, np.asarray(0.75))
    assert_vjp(lambda a: 0.75 * moe.moe_z_loss(a), u, du, rng)


def test_z_loss_is_st_moes() -> None:
    """(1/N)·Σ_i (log Σ_e exp u_ie)²: 0 where every token's z is 0, (ln E)² at all-zero logits."""
    assert moe.moe_z_loss(np.log(np.full((3, 4), 0.25))) == pytest.approx(0.0, abs=1e-30)
    assert moe.moe_z_loss(np.zeros((7, 8))) == pytest.approx(np.log(8.0) ** 2)
    assert moe.moe_z_loss(np.array([[0.0, 0.0], [3.0, 3.0]])) == pytest.approx(
        (np.log(2) ** 2 + (3 + np.log(2)) ** 2) / 2
    )


def test_renormalised_softmax_is_the_softmax_of_the_top_k_logits() -> None:
    """Mixtral: softmax over the selected logits equals the top-k softmax weights divided by their sum."""
    u = np.array([[0.3, -1.0, 2.0, 0.7, 1.5]])
    w = moe.moe_router(u, np.zeros(5), 2, norm="topk")
    top = np.array([2.0, 1.5])
    assert np.allclose(w[0, [2, 4]], np.exp(top) / np.exp(top).sum()) and np.count_nonzero(w) == 2


def test_groups_and_bias_select_only() -> None:
    """DeepSeek-V3: the bias reorders the choice (expert 1 over expert 0) but the weight is the score itself; groups
    of two scored by their two highest choice scores keep one group, whatever the best single expert elsewhere."""
    u = np.array([[1.0, 0.9, 3.0, -3.0]])  # group 0: experts 0, 1; group 1: experts 2, 3
    bias = np.array([0.0, 0.1, 0.0, 0.0])
    w = moe.moe_router(u, bias, 1, score="sigmoid", n_group=2, topk_group=1)
    # group sums: σ(1)+σ(.9)+.1 ≈ 1.53 > σ(3)+σ(−3) = 1: group 0 kept; in it σ(.9)+.1 > σ(1): expert 1, weight σ(.9)
    assert np.flatnonzero(w[0]).tolist() == [1] and np.isclose(w[0, 1], moe.sigmoid(np.array(0.9)))


def test_aux_loss_fractions_at_uniform_routing() -> None:
    """E·Σ f·P with P = 1/E: Σ f = k per token (HF), 1 per assignment (Megatron-Core), however ties fall."""
    u = np.zeros((7, 8))
    assert np.isclose(moe.moe_aux_loss(u, 3), 3.0)
    assert np.isclose(moe.moe_aux_loss(u, 3, "per_assignment"), 1.0)


def test_aux_loss_is_switchs_for_one_expert() -> None:
    """k = 1: f_e the fraction of tokens dispatched to e (Switch Transformers' N·Σ f_i·P_i), both fractions alike."""
    u = np.array([[2.0, 0.0, 0.0], [0.0, 1.0, 0.0], [3.0, 0.0, 1.0]])
    p = np.exp(u) / np.exp(u).sum(1, keepdims=True)
    want = 3 * np.sum(np.array([2 / 3, 1 / 3, 0.0]) * p.mean(0))
    assert np.isclose(moe.moe_aux_loss(u, 1), want) and np.isclose(moe.moe_aux_loss(u, 1, "per_assignment"), want)

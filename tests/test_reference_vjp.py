"""The float64 oracle's own tests: every hand-written VJP in ``reference/`` against central finite differences,
and each forward formula against small independent hand computations.

Seed ids: seed-000 "Positions, normalization and the residual stream"; seed-002 "Chapter 3 Transformer
Architecture Interview Essentials". Finite-difference tolerances are derived in ``tests/finite_diff.py``.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from numpy.typing import NDArray

from tests.finite_diff import EPS, H_REL, ROUND_C, assert_vjp
from transformer_conformance.reference import linear_losses as lin
from transformer_conformance.reference.losses import (
    cross_entropy,
    cross_entropy_vjp,
    logsumexp,
    softmax,
    z_loss,
    z_loss_vjp,
)
from transformer_conformance.reference.norms import layer_norm, layer_norm_vjp, rms_norm, rms_norm_vjp
from transformer_conformance.reference.rope import Layout, rope, rope_vjp
from transformer_conformance.reference.swiglu import swiglu_hidden_dim, swiglu_mlp, swiglu_mlp_vjp

F64 = NDArray[np.float64]
I64 = NDArray[np.int64]

SEEDS = [0, 1, 2]
LAYOUTS: list[Layout] = ["interleaved", "half"]


def _upstream(rng: np.random.Generator, shape: tuple[int, ...]) -> F64:
    """A non-uniform upstream gradient: a uniform g would hide errors that only show up as Σ-weighting bugs."""
    return rng.standard_normal(shape) * rng.uniform(0.5, 2.0, size=shape)


# --------------------------------------------------------------------------------------------------------------
# Normalization: VJPs
# --------------------------------------------------------------------------------------------------------------

NORM_SHAPES = [(8,), (4, 8), (2, 3, 16)]


@pytest.mark.parametrize("eps", [0.0, 1e-5])
@pytest.mark.parametrize("shape", NORM_SHAPES, ids=str)
@pytest.mark.parametrize("seed", SEEDS)
def test_rms_norm_vjp_matches_finite_differences(seed: int, shape: tuple[int, ...], eps: float) -> None:
    """rms_norm_vjp's ∂L/∂x and ∂L/∂γ equal central differences (seed-000 §Normalization, RMSNorm)."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape)
    w = 1.0 + 0.3 * rng.standard_normal(shape[-1])
    g = _upstream(rng, shape)
    dx, dw = rms_norm_vjp(x, w, eps, g)
    assert_vjp(lambda a: g * rms_norm(a, w, eps), x, dx, rng)
    assert_vjp(lambda a: g * rms_norm(x, a, eps), w, dw, rng)


@pytest.mark.parametrize("eps", [0.0, 1e-5])
@pytest.mark.parametrize("shape", NORM_SHAPES, ids=str)
@pytest.mark.parametrize("seed", SEEDS)
def test_layer_norm_vjp_matches_finite_differences(seed: int, shape: tuple[int, ...], eps: float) -> None:
    """layer_norm_vjp's ∂L/∂x, ∂L/∂γ, ∂L/∂β equal central differences (seed-000 §Normalization, LayerNorm)."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape) + rng.standard_normal((*shape[:-1], 1))  # per-row offsets: μ ≠ 0
    w = 1.0 + 0.3 * rng.standard_normal(shape[-1])
    b = 0.5 * rng.standard_normal(shape[-1])
    g = _upstream(rng, shape)
    dx, dw, db = layer_norm_vjp(x, w, b, eps, g)
    assert_vjp(lambda a: g * layer_norm(a, w, b, eps), x, dx, rng)
    assert_vjp(lambda a: g * layer_norm(x, a, b, eps), w, dw, rng)
    assert_vjp(lambda a: g * layer_norm(x, w, a, eps), b, db, rng)


# --------------------------------------------------------------------------------------------------------------
# Normalization: forward formulas
# --------------------------------------------------------------------------------------------------------------


def test_layer_norm_hand_example_uses_biased_variance() -> None:
    """LN([1, 3]) = [−1, 1]: μ = 2, σ² = 1 with the biased 1/d (seed-002 §3.2.1: "σ² = (1/d) Σ (x_j − μ)²")."""
    out = layer_norm(np.array([1.0, 3.0]), np.ones(2), np.zeros(2), 0.0)
    np.testing.assert_allclose(out, [-1.0, 1.0], rtol=0, atol=1e-15)  # unbiased 1/(d−1) would give ±1/√2


@pytest.mark.parametrize("seed", SEEDS)
def test_layer_norm_output_has_zero_mean_unit_biased_variance(seed: int) -> None:
    """With γ = 1, β = 0 and ε ≈ 0, each row of LN(x) has mean 0 and biased variance 1 (seed-000 §Normalization)."""
    rng = np.random.default_rng(seed)
    x = 3.0 * rng.standard_normal((6, 16)) + 5.0
    eps = 1e-300  # "0-ish": changes σ² + ε by nothing representable, but keeps the formula's shape
    out = layer_norm(x, np.ones(16), np.zeros(16), eps)
    np.testing.assert_allclose(out.mean(axis=-1), 0.0, rtol=0, atol=1e-14)
    np.testing.assert_allclose(out.var(axis=-1, ddof=0), 1.0, rtol=1e-13, atol=0)


def test_rms_norm_hand_example() -> None:
    """RMSNorm([3, 4]) = [3, 4]/√12.5 ≈ [0.8485, 1.1314], no centering (seed-000 §Normalization, RMSNorm)."""
    out = rms_norm(np.array([3.0, 4.0]), np.ones(2), 0.0)
    np.testing.assert_allclose(out, [3.0 / math.sqrt(12.5), 4.0 / math.sqrt(12.5)], rtol=1e-15)
    np.testing.assert_allclose(out, [0.848528137, 1.131370850], rtol=0, atol=1e-9)


@pytest.mark.parametrize("c", [1e-3, 0.5, 7.0, 1e3])
@pytest.mark.parametrize("seed", SEEDS)
def test_rms_norm_is_scale_invariant(seed: int, c: float) -> None:
    """RMSNorm(c·x) = RMSNorm(x) for c > 0 when ε = 0 (seed-000 §Normalization: it rescales by the RMS)."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((4, 8))
    w = 1.0 + 0.3 * rng.standard_normal(8)
    np.testing.assert_allclose(rms_norm(c * x, w, 0.0), rms_norm(x, w, 0.0), rtol=1e-14, atol=1e-15)


# --------------------------------------------------------------------------------------------------------------
# RoPE: VJP
# --------------------------------------------------------------------------------------------------------------

ROPE_POSITIONS = np.array([0, 1, 5, 4096, 99990], dtype=np.int64)


@pytest.mark.parametrize("rotary_dim", [None, 4])
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("lead", [(), (3,)], ids=["2d", "3d"])
@pytest.mark.parametrize("seed", SEEDS)
def test_rope_vjp_matches_finite_differences(
    seed: int, lead: tuple[int, ...], layout: Layout, rotary_dim: int | None
) -> None:
    """rope_vjp = R_mᵀ g equals central differences, incl. position 99990 and partial rotary (seed-000 §RoPE)."""
    rng = np.random.default_rng(seed)
    positions = ROPE_POSITIONS.copy()
    positions[2] = rng.integers(2, 100_000)
    shape = (*lead, positions.size, 8)
    x = rng.standard_normal(shape)
    g = _upstream(rng, shape)
    dx = rope_vjp(x, positions, g, rotary_dim=rotary_dim, layout=layout)
    assert_vjp(lambda a: g * rope(a, positions, rotary_dim=rotary_dim, layout=layout), x, dx, rng)


@pytest.mark.parametrize("rotary_dim", [None, 4])
@pytest.mark.parametrize("layout", LAYOUTS)
def test_rope_vjp_is_rotation_by_minus_m(layout: Layout, rotary_dim: int | None) -> None:
    """R_mᵀ = R_{−m}: rope_vjp(g) equals rope(g) at negated positions (seed-000 §RoPE, the 2×2 rotation)."""
    rng = np.random.default_rng(7)
    x, g = rng.standard_normal((2, 5, 8)), rng.standard_normal((2, 5, 8))
    dx = rope_vjp(x, ROPE_POSITIONS, g, rotary_dim=rotary_dim, layout=layout)
    inv = rope(g, -ROPE_POSITIONS, rotary_dim=rotary_dim, layout=layout)
    np.testing.assert_allclose(dx, inv, rtol=0, atol=4 * EPS * float(np.max(np.abs(g))))


# --------------------------------------------------------------------------------------------------------------
# RoPE: forward formulas
# --------------------------------------------------------------------------------------------------------------


def test_rope_seed_worked_example() -> None:
    """Seed worked example, d = 4, base 10⁴, R₃q and R₅k to 3 decimals (seed-002 §3.4.2 "A Worked Example")."""
    q = np.array([[1.0, 0.0, 0.0, 1.0]])
    k = np.array([[0.0, 1.0, 1.0, 0.0]])
    rq = rope(q, np.array([3]), layout="interleaved")[0]
    rk = rope(k, np.array([5]), layout="interleaved")[0]
    np.testing.assert_allclose(rq, [-0.990, 0.141, -0.030, 1.000], rtol=0, atol=5e-4)
    np.testing.assert_allclose(rk, [0.959, 0.284, 0.999, 0.050], rtol=0, atol=5e-4)
    # the same by hand: θ₀ = 1, θ₁ = 10000^(−2/4) = 0.01
    np.testing.assert_allclose(rq, [math.cos(3), math.sin(3), -math.sin(0.03), math.cos(0.03)], rtol=0, atol=1e-15)
    np.testing.assert_allclose(rk, [-math.sin(5), math.cos(5), math.cos(0.05), math.sin(0.05)], rtol=0, atol=1e-15)


def test_rope_seed_worked_example_relative_score() -> None:
    """⟨R₃q, R₅k⟩ = ⟨R₀q, R₂k⟩ to 1e-12: the score depends only on the offset (seed-000 §RoPE; seed-002 §3.4.2)."""
    q = np.array([[1.0, 0.0, 0.0, 1.0]])
    k = np.array([[0.0, 1.0, 1.0, 0.0]])
    s35 = float(rope(q, np.array([3]))[0] @ rope(k, np.array([5]))[0])
    s02 = float(rope(q, np.array([0]))[0] @ rope(k, np.array([2]))[0])
    assert abs(s35 - s02) <= 1e-12, (s35, s02)


@pytest.mark.parametrize("rotary_dim", [None, 4])
@pytest.mark.parametrize("layout", LAYOUTS)
def test_rope_position_zero_is_identity(layout: Layout, rotary_dim: int | None) -> None:
    """At m = 0 every angle m·θ_i is 0, so RoPE is the identity (seed-000 §RoPE: rotate pair i by m·θ_i)."""
    x = np.random.default_rng(3).standard_normal((2, 4, 8))
    np.testing.assert_array_equal(rope(x, np.zeros(4, dtype=np.int64), rotary_dim=rotary_dim, layout=layout), x)


@pytest.mark.parametrize("rotary_dim", [None, 4, 6])
@pytest.mark.parametrize("seed", SEEDS)
def test_rope_half_layout_is_permuted_interleaved(seed: int, rotary_dim: int | None) -> None:
    """'half' pairs (i, i + d/2) equal 'interleaved' pairs (2i, 2i + 1) after permuting coordinates (seed-000 §RoPE)."""
    rng = np.random.default_rng(seed)
    d = 8
    rd = d if rotary_dim is None else rotary_dim
    half = rd // 2
    perm = np.arange(d)  # interleaved slot 2i ← half-layout coordinate i, slot 2i+1 ← coordinate i + rd/2
    perm[0:rd:2] = np.arange(half)
    perm[1:rd:2] = np.arange(half, rd)
    x = rng.standard_normal((3, 5, d))
    positions = rng.integers(0, 100_000, size=5)
    out_half = rope(x, positions, rotary_dim=rotary_dim, layout="half")
    out_inter = rope(x[..., perm], positions, rotary_dim=rotary_dim, layout="interleaved")
    np.testing.assert_array_equal(out_half[..., perm], out_inter)


# --------------------------------------------------------------------------------------------------------------
# SwiGLU: VJP and width rule
# --------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("lead", "d", "hidden"), [((), 4, 6), ((2, 3), 4, 6), ((2, 5), 8, 12)], ids=str)
@pytest.mark.parametrize("seed", SEEDS)
def test_swiglu_mlp_vjp_matches_finite_differences(seed: int, lead: tuple[int, ...], d: int, hidden: int) -> None:
    """swiglu_mlp_vjp's ∂x, ∂W₁, ∂W₃, ∂W₂ equal central differences (seed-000 §The MLP block; seed-002 §3.3.1)."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((*lead, d))
    w1 = rng.standard_normal((d, hidden)) / math.sqrt(d)
    w3 = rng.standard_normal((d, hidden)) / math.sqrt(d)
    w2 = rng.standard_normal((hidden, d)) / math.sqrt(hidden)
    g = _upstream(rng, (*lead, d))
    dx, dw1, dw3, dw2 = swiglu_mlp_vjp(x, w1, w3, w2, g)
    assert_vjp(lambda a: g * swiglu_mlp(a, w1, w3, w2), x, dx, rng)
    assert_vjp(lambda a: g * swiglu_mlp(x, a, w3, w2), w1, dw1, rng)
    assert_vjp(lambda a: g * swiglu_mlp(x, w1, a, w2), w3, dw3, rng)
    assert_vjp(lambda a: g * swiglu_mlp(x, w1, w3, a), w2, dw2, rng)


@pytest.mark.parametrize(
    ("d", "multiple_of", "multiplier", "expected"),
    [(4096, 256, None, 11008), (8192, 128, None, 21888), (8192, 4096, 1.3, 28672)],
)
def test_swiglu_hidden_dim(d: int, multiple_of: int, multiplier: float | None, expected: int) -> None:
    """⌊8d/3⌋ (× multiplier) rounded up to a multiple: 4096 → 11008, 8192/128 → 21888 (seed-002 §3.1.1, §3.3.1)."""
    assert swiglu_hidden_dim(d, multiple_of=multiple_of, ffn_dim_multiplier=multiplier) == expected


# --------------------------------------------------------------------------------------------------------------
# Cross-entropy and z-loss: VJPs
# --------------------------------------------------------------------------------------------------------------


def _confident_logits(rng: np.random.Generator, shape: tuple[int, ...], margin: float) -> tuple[F64, I64]:
    """Unit-scale logits plus ``margin`` on a random target per token."""
    targets = rng.integers(0, shape[-1], size=shape[:-1])
    logits = rng.standard_normal(shape)
    np.put_along_axis(logits, targets[..., None], np.take_along_axis(logits, targets[..., None], -1) + margin, -1)
    return logits, targets


def _logit_grad_floor(logits: F64, targets: I64, g: F64) -> F64:
    """Absolute accuracy floor of a logit gradient, per element.

    softmax(u)_v = exp(u_v − z) with u_v − z known only to ~ε·max|u|: a non-target entry g·p_v is relatively
    accurate (inside RTOL), but the target entry g·(p_t − 1) is a difference of O(|g|) numbers and cannot be
    better than ROUND_C·ε·|g|·max(1, max|u|) in absolute terms, however small 1 − p_t is.
    """
    mag = np.maximum(1.0, np.max(np.abs(logits), axis=-1))
    floor = np.zeros_like(logits)
    np.put_along_axis(floor, targets[..., None], (ROUND_C * EPS * np.abs(g) * mag)[..., None], -1)
    return floor


@pytest.mark.parametrize("margin", [0.0, 3.0, 8.0])
@pytest.mark.parametrize("shape", [(5, 7), (2, 3, 7)], ids=str)
@pytest.mark.parametrize("seed", SEEDS)
def test_cross_entropy_vjp_matches_finite_differences(seed: int, shape: tuple[int, ...], margin: float) -> None:
    """cross_entropy_vjp = g·(softmax − onehot) equals central differences of z − u_target (seed-002 §3.2.2)."""
    rng = np.random.default_rng(seed)
    logits, targets = _confident_logits(rng, shape, margin)
    logits *= 2.0
    g = _upstream(rng, shape[:-1])
    grad = cross_entropy_vjp(logits, targets, g)
    # L's intermediates z and u_target are ~max|u| even when z − u_target is tiny: that is the cancellation scale.
    round_scale = float(np.sum(np.abs(g))) * max(1.0, float(np.max(np.abs(logits))))
    assert_vjp(
        lambda a: g * cross_entropy(a, targets),
        logits,
        grad,
        rng,
        round_scale=round_scale,
        grad_floor=_logit_grad_floor(logits, targets, g),
    )


def _cross_entropy_log1p(logits: F64, targets: I64) -> F64:
    """An independent, cancellation-free CE for confident logits: log1p(Σ_{v≠t} exp(u_v − u_t))."""
    ut = np.take_along_axis(logits, targets[..., None], -1)
    e = np.exp(logits - ut)
    np.put_along_axis(e, targets[..., None], 0.0, -1)
    return np.log1p(e.sum(axis=-1))


@pytest.mark.parametrize("margin", [12.0, 20.0])
@pytest.mark.parametrize("seed", SEEDS)
def test_cross_entropy_vjp_confident_logits(seed: int, margin: float) -> None:
    """At a large target margin the VJP's tiny entries (≈ e^−margin) match log1p-form differences (seed-002 §3.2.2)."""
    rng = np.random.default_rng(seed)
    logits, targets = _confident_logits(rng, (5, 7), margin)
    g = _upstream(rng, (5,))
    # the reference forward's z − u_t cancels: it is only good to ~ε·max|u| absolute
    ce_atol = ROUND_C * EPS * float(np.max(np.abs(logits)))
    np.testing.assert_allclose(_cross_entropy_log1p(logits, targets), cross_entropy(logits, targets), atol=ce_atol)
    grad = cross_entropy_vjp(logits, targets, g)
    # Differencing z − u_t directly would lose everything to cancellation (ε·margin/h ≫ e^−margin); the log1p
    # form has no cancellation, so the default round_scale Σ|g ⊙ f| applies and RTOL checks the tiny entries.
    floor = _logit_grad_floor(logits, targets, g)
    assert_vjp(lambda a: g * _cross_entropy_log1p(a, targets), logits, grad, rng, grad_floor=floor)


def test_cross_entropy_vjp_extreme_margin_is_finite() -> None:
    """At margin 1000 the VJP stays finite and ≈ 0 (e^−1000 underflows), no NaN or overflow (seed-002 §3.2.2)."""
    rng = np.random.default_rng(0)
    logits, targets = _confident_logits(rng, (4, 7), 1000.0)
    g = _upstream(rng, (4,))
    grad = cross_entropy_vjp(logits, targets, g)
    assert np.all(np.isfinite(grad))
    assert np.all(np.abs(grad) <= _logit_grad_floor(logits, targets, g)), grad
    ce = cross_entropy(logits, targets)
    assert np.all((ce >= 0.0) & (ce <= ROUND_C * EPS * float(np.max(np.abs(logits))))), ce


@pytest.mark.parametrize("offset", [0.0, 1000.0])
@pytest.mark.parametrize("alpha", [1e-4, 1e-2, 1.0])
@pytest.mark.parametrize("seed", SEEDS)
def test_z_loss_vjp_matches_finite_differences(seed: int, alpha: float, offset: float) -> None:
    """z_loss_vjp = g·2α·z·softmax(u) equals central differences of α·z² (seed-002 §3.2.2: "adds α·[z(x)]²")."""
    rng = np.random.default_rng(seed)
    logits = 2.0 * rng.standard_normal((5, 7)) + offset
    g = _upstream(rng, (5,))
    grad = z_loss_vjp(logits, g, alpha)
    # f varies on the logits' O(1) spread, not their offset: an offset-scaled h = 1e-3 would cost (1e-3)²/6 ≈ 2e-7
    # in truncation, so the step is scaled by the spread, balancing truncation against cancellation in α·z².
    h = H_REL * max(1.0, float(np.ptp(logits)))
    assert_vjp(lambda a: g * z_loss(a, alpha), logits, grad, rng, h=h)
    if offset:
        # At z ≈ 1000 differencing α·z² cancels ~ε·α·z² per token (~1e-6 of the gradient). The same loss up to an
        # a-independent constant, α·((z − c)² + 2c·(z − c)) with z − c = logsumexp(u − c), has no such cancellation
        # (u − c is exact by Sterbenz), so the tight RTOL then applies in full.
        c = offset

        def shifted(a: F64) -> F64:
            zs = logsumexp(a - c)
            return g * alpha * (zs * zs + 2.0 * c * zs)

        assert_vjp(shifted, logits, grad, rng, h=h)


# --------------------------------------------------------------------------------------------------------------
# Cross-entropy and z-loss: forward formulas
# --------------------------------------------------------------------------------------------------------------


def test_cross_entropy_hand_examples() -> None:
    """CE = −log softmax[t]: 4 equal logits → log 4; [1, 2, 3], t = 2 → −log(e³/(e + e² + e³)) (seed-002 §3.2.2)."""
    ce = cross_entropy(np.zeros((1, 4)), np.array([2]))
    np.testing.assert_allclose(ce, [math.log(4.0)], rtol=1e-15)
    e = math.e
    ce = cross_entropy(np.array([[1.0, 2.0, 3.0]]), np.array([2]))
    np.testing.assert_allclose(ce, [-math.log(e**3 / (e + e**2 + e**3))], rtol=1e-14)


@pytest.mark.parametrize("seed", SEEDS)
def test_cross_entropy_is_minus_log_softmax(seed: int) -> None:
    """CE(u, t) = −log(exp(u_t) / Σ_v exp(u_v)), computed naively for moderate logits (seed-002 §3.2.2)."""
    rng = np.random.default_rng(seed)
    logits = 3.0 * rng.standard_normal((6, 9))
    targets = rng.integers(0, 9, size=6)
    p = np.exp(logits) / np.exp(logits).sum(axis=-1, keepdims=True)
    naive = -np.log(p[np.arange(6), targets])
    np.testing.assert_allclose(cross_entropy(logits, targets), naive, rtol=1e-13)
    np.testing.assert_allclose(softmax(logits), p, rtol=1e-13)


@pytest.mark.parametrize("alpha", [1e-4, 1e-2, 1.0])
@pytest.mark.parametrize("seed", SEEDS)
def test_z_loss_is_alpha_logsumexp_squared(seed: int, alpha: float) -> None:
    """z-loss = α·z², z = log Σ_v exp(u_v), by a naive sum for moderate logits (seed-002 §3.2.2: "adds α·[z(x)]²")."""
    rng = np.random.default_rng(seed)
    logits = 3.0 * rng.standard_normal((6, 9))
    z = np.log(np.exp(logits).sum(axis=-1))
    np.testing.assert_allclose(logsumexp(logits), z, rtol=1e-14)
    np.testing.assert_allclose(z_loss(logits, alpha), alpha * z**2, rtol=1e-13)


def test_logsumexp_does_not_overflow_near_1000() -> None:
    """logsumexp of four logits equal to 1000 is 1000 + log 4 although e^1000 overflows (seed-002 §3.2.2, z-loss)."""
    logits = np.full((2, 4), 1000.0)
    logits[1] += np.array([0.0, -1.0, -2.0, 0.5])
    with np.errstate(over="ignore"):
        assert np.isinf(np.log(np.exp(logits).sum(axis=-1))).all()  # the naive form really does overflow
    z = logsumexp(logits)
    expected_row1 = 1000.5 + math.log1p(math.exp(-0.5) + math.exp(-1.5) + math.exp(-2.5))
    np.testing.assert_allclose(z, [1000.0 + math.log(4.0), expected_row1], rtol=1e-15)
    np.testing.assert_allclose(z_loss(logits), 1e-4 * z**2, rtol=1e-15)
    assert np.all(np.isfinite(z_loss(logits)))


# --------------------------------------------------------------------------------------------------------------
# The fused LM-head loss and the token-reduced z-loss
# --------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("reduction", ["mean", "none"])
@pytest.mark.parametrize("ignore_index", [-100, 0])
@pytest.mark.parametrize("seed", SEEDS)
def test_linear_cross_entropy_vjp(seed: int, ignore_index: int, reduction: lin.Reduction) -> None:
    """∂x = D·W, ∂W = Dᵀ·x, ∂b = Σ_t D_t of the cross-entropy of x·Wᵀ + b equal central differences, each token
    scaled by its own upstream gradient, ignored tokens contributing nothing (seed-000 The residual stream;
    seed-002 §3.2.2)."""
    rng = np.random.default_rng(seed)
    n, h, v = 6, 4, 7
    x, w, b = rng.standard_normal((n, h)), rng.standard_normal((v, h)), rng.standard_normal(v)
    targets = rng.integers(1, v, size=n)
    targets[[1, 4]] = ignore_index
    g = _upstream(rng, (n,)) if reduction == "none" else np.asarray(rng.uniform(0.5, 2.0))
    dx, dw, db = lin.linear_cross_entropy_vjp(x, w, b, targets, g, ignore_index, reduction)

    def loss(xx: F64, ww: F64, bb: F64) -> F64:
        return g * lin.linear_cross_entropy(xx, ww, bb, targets, ignore_index, reduction)

    assert_vjp(lambda a: loss(a, w, b), x, dx, rng)
    assert_vjp(lambda a: loss(x, a, b), w, dw, rng)
    assert_vjp(lambda a: loss(x, w, a), b, db, rng)
    assert not dx[[1, 4]].any()
    valid = targets != ignore_index
    logits = x @ w.T + b
    per_token = cross_entropy(logits, np.where(valid, targets, 0))
    want = np.where(valid, per_token, 0.0) if reduction == "none" else per_token[valid].mean()
    np.testing.assert_allclose(lin.linear_cross_entropy(x, w, b, targets, ignore_index, reduction), want, rtol=1e-15)


def test_linear_cross_entropy_all_ignored() -> None:
    """With every token ignored the mean is NaN (0/0) or 0 as declared, the per-token losses and all
    gradients 0."""
    rng = np.random.default_rng(0)
    x, w, b = rng.standard_normal((3, 4)), rng.standard_normal((5, 4)), rng.standard_normal(5)
    targets = np.full(3, -100)
    assert np.isnan(lin.linear_cross_entropy(x, w, b, targets))
    assert lin.linear_cross_entropy(x, w, b, targets, all_ignored="zero") == 0.0
    assert not lin.linear_cross_entropy(x, w, b, targets, reduction="none").any()
    for grad in lin.linear_cross_entropy_vjp(x, w, b, targets, np.asarray(1.0)):
        assert not grad.any()
    assert np.isnan(lin.z_loss_mean(x, targets)) and lin.z_loss_mean(x, targets, all_ignored="zero") == 0.0


@pytest.mark.parametrize("ignore_index", [-100, 6])
@pytest.mark.parametrize("seed", SEEDS)
def test_z_loss_mean_vjp(seed: int, ignore_index: int) -> None:
    """Σ_valid α·z²/#valid and its gradient (g/#valid)·2α·z·softmax on valid rows, 0 on ignored rows
    (seed-002 §3.2.2)."""
    rng = np.random.default_rng(seed)
    logits = 3.0 * rng.standard_normal((6, 7)) + 5.0
    targets = rng.integers(0, 6, size=6)
    targets[[0, 3]] = ignore_index
    g = np.asarray(rng.uniform(0.5, 2.0))
    grad = lin.z_loss_mean_vjp(logits, targets, g, 1e-2, ignore_index)
    assert_vjp(lambda a: g * lin.z_loss_mean(a, targets, 1e-2, ignore_index), logits, grad, rng)
    assert not grad[[0, 3]].any()
    valid = targets != ignore_index
    np.testing.assert_allclose(
        lin.z_loss_mean(logits, targets, 1e-2, ignore_index), z_loss(logits[valid], 1e-2).mean(), rtol=1e-15
    )

"""The float64 oracle of attention, the MLP family and decoder blocks: every hand-written VJP against central
finite differences (tolerances derived in ``tests/finite_diff.py``), each forward formula against small
independent computations, and the exact statements of ``docs/gradient-flow.md`` on stacks up to 32 layers.

Seed ids: seed-000 "Positions, normalization and the residual stream"; seed-002 "Chapter 3 Transformer
Architecture Interview Essentials"; seed-004 the article on positional encoding and the residual stream.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from numpy.typing import NDArray

from tests.finite_diff import EPS, assert_vjp
from transformer_conformance.reference.attention import (
    attention,
    attention_vjp,
    causal_mask,
    kv_head_index,
    qk_norm_attention,
    qk_norm_attention_vjp,
    rope_attention,
    rope_attention_vjp,
)
from transformer_conformance.reference.blocks import (
    BLOCK_INPUTS,
    PLACEMENTS,
    AttentionShape,
    Placement,
    block,
    block_vjp,
    lm_head,
    lm_head_vjp,
    stack_gradients,
)
from transformer_conformance.reference.gradient_flow import init_layers
from transformer_conformance.reference.mlp import (
    GLU_ACTIVATIONS,
    MLP_ACTIVATIONS,
    ffn_hidden_dim,
    gelu_erf,
    gelu_sigmoid,
    gelu_tanh,
    glu_mlp,
    glu_mlp_vjp,
    mlp,
    mlp_vjp,
    mlp_weight_count,
)
from transformer_conformance.reference.swiglu import swiglu_hidden_dim, swiglu_mlp

F64 = NDArray[np.float64]
SEEDS = [0, 1]


def _upstream(rng: np.random.Generator, shape: tuple[int, ...]) -> F64:
    return rng.standard_normal(shape) * rng.uniform(0.5, 2.0, size=shape)


# --------------------------------------------------------------------------------------------------------------
# Attention
# --------------------------------------------------------------------------------------------------------------

ATTN_CASES = [  # (H_q, H_kv, L_q, L_k, D, causal, softcap)
    (2, 2, 3, 3, 4, False, None),
    (4, 2, 2, 5, 3, True, None),  # GQA, bottom-right with L_q < L_k
    (3, 1, 4, 4, 2, True, 2.0),  # MQA, soft-capped
]


@pytest.mark.parametrize("alignment", ["bottom_right", "top_left"])
@pytest.mark.parametrize("case", ATTN_CASES, ids=str)
@pytest.mark.parametrize("seed", SEEDS)
def test_attention_vjp_matches_finite_differences(seed: int, case: tuple, alignment: str) -> None:
    """attention_vjp's ∂Q, ∂K, ∂V equal central differences, GQA/MQA and soft-capping included (seed-002 §3.1.1)."""
    hq, hkv, lq, lk, d, causal, cap = case
    rng = np.random.default_rng(seed)
    q, k, v = (
        rng.standard_normal((1, hq, lq, d)),
        rng.standard_normal((1, hkv, lk, d)),
        rng.standard_normal((1, hkv, lk, 3)),
    )
    g = _upstream(rng, (1, hq, lq, 3))
    kw = dict(causal=causal, alignment=alignment, softcap=cap)
    dq, dk, dv = attention_vjp(q, k, v, g, **kw)  # type: ignore[arg-type]
    assert_vjp(lambda a: g * attention(a, k, v, **kw), q, dq, rng)  # type: ignore[arg-type]
    assert_vjp(lambda a: g * attention(q, a, v, **kw), k, dk, rng)  # type: ignore[arg-type]
    assert_vjp(lambda a: g * attention(q, k, a, **kw), v, dv, rng)  # type: ignore[arg-type]


@pytest.mark.parametrize("seed", SEEDS)
def test_qk_norm_attention_vjp_matches_finite_differences(seed: int) -> None:
    """qk_norm_attention_vjp (attention through RMSNorm on q and k) equals central differences (seed-002 §3.2.2)."""
    rng = np.random.default_rng(seed)
    q, k, v = rng.standard_normal((1, 2, 3, 4)), rng.standard_normal((1, 1, 3, 4)), rng.standard_normal((1, 1, 3, 2))
    wq, wk = 1 + 0.3 * rng.standard_normal(4), 1 + 0.3 * rng.standard_normal(4)
    g = _upstream(rng, (1, 2, 3, 2))
    grads = qk_norm_attention_vjp(q, k, v, wq, wk, 1e-6, g, causal=True)
    args = [q, k, v, wq, wk]
    for i, grad in enumerate(grads):

        def f(a: F64, i: int = i) -> F64:
            b = list(args)
            b[i] = a
            return g * qk_norm_attention(*b, 1e-6, causal=True)  # type: ignore[misc]

        assert_vjp(f, args[i], grad, rng)


@pytest.mark.parametrize("layout", ["interleaved", "half"])
@pytest.mark.parametrize("seed", SEEDS)
def test_rope_attention_vjp_matches_finite_differences(seed: int, layout: str) -> None:
    """rope_attention_vjp equals central differences; q, k rotated, v not (seed-002 §3.4.2)."""
    rng = np.random.default_rng(seed)
    q, k, v = rng.standard_normal((1, 2, 2, 4)), rng.standard_normal((1, 2, 3, 4)), rng.standard_normal((1, 2, 3, 4))
    pq, pk = np.array([7, 8]), np.array([6, 7, 8])
    g = _upstream(rng, (1, 2, 2, 4))
    kw = dict(causal=True, layout=layout)
    dq, dk, dv = rope_attention_vjp(q, k, v, pq, pk, g, **kw)  # type: ignore[arg-type]
    assert_vjp(lambda a: g * rope_attention(a, k, v, pq, pk, **kw), q, dq, rng)  # type: ignore[arg-type]
    assert_vjp(lambda a: g * rope_attention(q, a, v, pq, pk, **kw), k, dk, rng)  # type: ignore[arg-type]
    assert_vjp(lambda a: g * rope_attention(q, k, a, pq, pk, **kw), v, dv, rng)  # type: ignore[arg-type]


def test_causal_mask_alignments() -> None:
    """L_q = 2, L_k = 4: bottom-right lets query i see keys ≤ i + 2 (KV-cache decoding); top-left keys ≤ i."""
    br = causal_mask(2, 4, "bottom_right")
    tl = causal_mask(2, 4, "top_left")
    np.testing.assert_array_equal(br, [[1, 1, 1, 0], [1, 1, 1, 1]])
    np.testing.assert_array_equal(tl, [[1, 0, 0, 0], [1, 1, 0, 0]])
    np.testing.assert_array_equal(causal_mask(3, 3, "bottom_right"), causal_mask(3, 3, "top_left"))


def test_gqa_head_mapping() -> None:
    """Query head h reads KV head h // (H_q/H_kv): 8 query heads on 2 KV heads -> 0,0,0,0,1,1,1,1 (not 0,1,0,1,…)."""
    np.testing.assert_array_equal(kv_head_index(8, 2), [0, 0, 0, 0, 1, 1, 1, 1])
    np.testing.assert_array_equal(kv_head_index(3, 1), [0, 0, 0])
    np.testing.assert_array_equal(kv_head_index(4, 4), [0, 1, 2, 3])


def test_attention_by_hand() -> None:
    """Two keys, logits 0 and ln 3 after scaling: weights 1/4, 3/4 (softmax(QKᵀ/√d_k)·V, seed-002 §3.1.1)."""
    d = 4
    q = np.zeros((1, 1, 1, d))
    q[..., 0] = 1.0
    k = np.zeros((1, 1, 2, d))
    k[0, 0, 1, 0] = math.log(3.0) * math.sqrt(d)
    v = np.array([[[[1.0], [5.0]]]])
    np.testing.assert_allclose(attention(q, k, v), [[[[0.25 * 1 + 0.75 * 5]]]], rtol=1e-15)
    # soft-capping at c: the logit l becomes c·tanh(l/c)
    c = 0.5
    w = np.exp(c * np.tanh(math.log(3.0) / c))
    np.testing.assert_allclose(attention(q, k, v, softcap=c), [[[[(1 + 5 * w) / (1 + w)]]]], rtol=1e-15)


def test_incremental_decoding_equals_full_forward() -> None:
    """Bottom-right: decoding token by token against the growing cache reproduces full causal attention (seed-000
    §RoPE: "compatible with the KV cache"); top-left does not."""
    rng = np.random.default_rng(3)
    q, k, v = (rng.standard_normal((1, 2, 5, 4)) for _ in range(3))
    full = attention(q, k, v, causal=True)
    steps = np.concatenate(
        [attention(q[:, :, t : t + 1], k[:, :, : t + 1], v[:, :, : t + 1], causal=True) for t in range(5)], 2
    )
    np.testing.assert_allclose(steps, full, rtol=1e-14, atol=1e-15)
    tl = attention(q[:, :, 4:], k, v, causal=True, alignment="top_left")
    assert not np.allclose(tl, full[:, :, 4:])


def test_permutation_equivariance() -> None:
    """Without positions or mask, permuting tokens permutes the outputs (seed-004 "Attention is permutation-blind")."""
    rng = np.random.default_rng(4)
    x = rng.standard_normal((1, 2, 6, 4))
    perm = rng.permutation(6)
    np.testing.assert_allclose(
        attention(x, x, x)[:, :, perm], attention(x[:, :, perm], x[:, :, perm], x[:, :, perm]), rtol=1e-13
    )


# --------------------------------------------------------------------------------------------------------------
# MLP family
# --------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("activation", MLP_ACTIVATIONS)
@pytest.mark.parametrize("seed", SEEDS)
def test_mlp_vjp_matches_finite_differences(seed: int, activation: str) -> None:
    """mlp_vjp equals central differences for every activation (seed-002 §3.3.1, §3.3.2)."""
    rng = np.random.default_rng(seed)
    x, w_in, w_out = rng.standard_normal((2, 3)), rng.standard_normal((3, 5)) / 2, rng.standard_normal((5, 3)) / 2
    x += 0.1 * np.sign(x)  # keep x·W_in away from ReLU's kink at the finite-difference step
    g = _upstream(rng, (2, 3))
    dx, di, do = mlp_vjp(x, w_in, w_out, activation, g)
    a = x @ w_in
    if np.min(np.abs(a)) < 1e-3:
        pytest.skip("pre-activation at the kink")
    assert_vjp(lambda b: g * mlp(b, w_in, w_out, activation), x, dx, rng)
    assert_vjp(lambda b: g * mlp(x, b, w_out, activation), w_in, di, rng)
    assert_vjp(lambda b: g * mlp(x, w_in, b, activation), w_out, do, rng)


@pytest.mark.parametrize("activation", GLU_ACTIVATIONS)
@pytest.mark.parametrize("seed", SEEDS)
def test_glu_mlp_vjp_matches_finite_differences(seed: int, activation: str) -> None:
    """glu_mlp_vjp equals central differences for SwiGLU, GeGLU (three GELU forms) and ReGLU (seed-002 §3.3.1)."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((2, 3))
    w1, w3, w2 = rng.standard_normal((3, 4)) / 2, rng.standard_normal((3, 4)) / 2, rng.standard_normal((4, 3)) / 2
    if np.min(np.abs(x @ w1)) < 1e-3:
        pytest.skip("pre-activation at the kink")
    g = _upstream(rng, (2, 3))
    grads = glu_mlp_vjp(x, w1, w3, w2, activation, g)
    args = [x, w1, w3, w2]
    for i, grad in enumerate(grads):

        def f(a: F64, i: int = i) -> F64:
            b = list(args)
            b[i] = a
            return g * glu_mlp(*b, activation)  # type: ignore[misc]

        assert_vjp(f, args[i], grad, rng)


def test_swiglu_is_the_silu_glu() -> None:
    """glu_mlp with the SiLU gate is the SwiGLU MLP (seed-000 §The MLP block)."""
    rng = np.random.default_rng(5)
    x, w1, w3, w2 = (
        rng.standard_normal((2, 3)),
        rng.standard_normal((3, 4)),
        rng.standard_normal((3, 4)),
        rng.standard_normal((4, 3)),
    )
    np.testing.assert_allclose(glu_mlp(x, w1, w3, w2, "silu"), swiglu_mlp(x, w1, w3, w2), rtol=1e-14)


def test_gelu_forms_are_distinct() -> None:
    """The erf GELU, its tanh form and x·σ(1.702x) are three functions: at x = 1.5 they differ by > 1e-4 relative.
    Φ(1) = 0.841344746…, so GELU_erf(1) = 0.841344746… (seed-002 §3.3.1)."""
    x = np.array([1.5])
    e, t, s = gelu_erf(x)[0], gelu_tanh(x)[0], gelu_sigmoid(x)[0]
    assert min(abs(e - t), abs(e - s), abs(t - s)) > 1e-4 * abs(e)
    np.testing.assert_allclose(gelu_erf(np.array([1.0])), [0.8413447460685429], rtol=1e-15)
    np.testing.assert_allclose(gelu_sigmoid(np.array([1.0])), [1.0 / (1.0 + math.exp(-1.702))], rtol=1e-15)


@pytest.mark.parametrize(
    ("d", "ratio", "multiple", "multiplier", "expected"),
    [
        (4096, 4, 256, None, 11008),  # LLaMA-2 7B, seed-002 §3.3.1
        (8192, 4, 128, None, 21888),  # seed-002 §3.3.1 interview answer
        (8192, 4, 4096, 1.3, 28672),  # LLaMA-2 70B
        (3072, 8, 1, None, 16384),  # 8× base (Gemma 2's ratio): ⌊16·3072/3⌋
        (1024, 64, 1, None, 43690),  # 64× base (T5-11B's ratio): ⌊128·1024/3⌋
    ],
)
def test_ffn_hidden_dim(d: int, ratio: int, multiple: int, multiplier: float | None, expected: int) -> None:
    """h = ⌊2rd/3⌋ (× multiplier), rounded up; r = 4 is the SwiGLU rule (seed-002 §3.3.1, §3.3.2)."""
    assert ffn_hidden_dim(d, ratio, True, multiple, multiplier) == expected
    if ratio == 4:
        assert swiglu_hidden_dim(d, multiple, multiplier) == expected


@pytest.mark.parametrize("ratio", [1, 2.5, 4, 8, 64])
def test_ffn_hidden_dim_matches_parameters(ratio: float) -> None:
    """3·d·h lies within 3d of 2·d·(r·d) before rounding to the multiple: parameter matching (seed-002 §3.3.2)."""
    for d in (1, 7, 512, 4096):
        h = ffn_hidden_dim(d, ratio, True)
        assert 0 <= mlp_weight_count(d, int(ratio * d), False) - mlp_weight_count(d, h, True) < 3 * d


# --------------------------------------------------------------------------------------------------------------
# Blocks and the residual stream
# --------------------------------------------------------------------------------------------------------------

SHAPE = AttentionShape(n_heads=2, n_kv_heads=1)


def _block_weights(rng: np.random.Generator, d: int = 4, t: int = 3, hidden: int = 5) -> dict[str, F64]:
    hd = 2 * (d // 2)
    return {
        "x": rng.standard_normal((1, t, d)),
        "attn_norm": 1 + 0.2 * rng.standard_normal(d),
        "wq": rng.standard_normal((d, 2 * hd)) / math.sqrt(d),
        "wk": rng.standard_normal((d, hd)) / math.sqrt(d),
        "wv": rng.standard_normal((d, hd)) / math.sqrt(d),
        "wo": rng.standard_normal((2 * hd, d)) / math.sqrt(2 * hd),
        "mlp_norm": 1 + 0.2 * rng.standard_normal(d),
        "w1": rng.standard_normal((d, hidden)) / math.sqrt(d),
        "w3": rng.standard_normal((d, hidden)) / math.sqrt(d),
        "w2": rng.standard_normal((hidden, d)) / math.sqrt(hidden),
        "attn_post_norm": 1 + 0.2 * rng.standard_normal(d),
        "mlp_post_norm": 1 + 0.2 * rng.standard_normal(d),
    }


@pytest.mark.parametrize("placement", PLACEMENTS)
@pytest.mark.parametrize("seed", SEEDS)
def test_block_vjp_matches_finite_differences(seed: int, placement: Placement) -> None:
    """block_vjp's gradients (stream and all twelve inputs) equal central differences (seed-002 §3.1.1, §3.1.2)."""
    rng = np.random.default_rng(seed)
    w = _block_weights(rng)
    pos = np.array([0, 1, 2])
    g = _upstream(rng, w["x"].shape)
    grads = block_vjp(w, pos, placement, SHAPE, 1e-6, g)
    for name in BLOCK_INPUTS:

        def f(a: F64, name: str = name) -> F64:
            return g * block({**w, name: a}, pos, placement, SHAPE, 1e-6)

        assert_vjp(f, w[name], grads[name], rng, n_directions=2)


def test_lm_head_vjp_matches_finite_differences() -> None:
    """lm_head_vjp (final RMSNorm then W_head) equals central differences (seed-000 §Pre-norm vs. post-norm)."""
    rng = np.random.default_rng(0)
    x, nw, wh = rng.standard_normal((2, 3, 4)), 1 + 0.2 * rng.standard_normal(4), rng.standard_normal((4, 6))
    g = _upstream(rng, (2, 3, 6))
    dx, dn, dh = lm_head_vjp(x, nw, wh, 1e-6, g)
    assert_vjp(lambda a: g * lm_head(a, nw, wh, 1e-6), x, dx, rng)
    assert_vjp(lambda a: g * lm_head(x, a, wh, 1e-6), nw, dn, rng)
    assert_vjp(lambda a: g * lm_head(x, nw, a, 1e-6), wh, dh, rng)


def test_block_by_hand_pre_vs_post() -> None:
    """Pre-norm is x + f(Norm(x)), post-norm Norm(x + f(x)) (seed-000 §Pre-norm vs. post-norm): with the MLP
    zeroed the pre-norm block is x + A(N(x)) and the post-norm one N_m(N_a(x + A(x)))."""
    rng = np.random.default_rng(6)
    w = _block_weights(rng)
    w["w2"] = np.zeros_like(w["w2"])
    pos = np.arange(3)
    from transformer_conformance.reference.blocks import _attn
    from transformer_conformance.reference.norms import rms_norm

    a_pre, _ = _attn(rms_norm(w["x"], w["attn_norm"], 1e-6), w, pos, SHAPE)
    np.testing.assert_allclose(block(w, pos, "pre", SHAPE, 1e-6), w["x"] + a_pre, rtol=1e-14)
    a_post, _ = _attn(w["x"], w, pos, SHAPE)
    want = rms_norm(rms_norm(w["x"] + a_post, w["attn_norm"], 1e-6), w["mlp_norm"], 1e-6)
    np.testing.assert_allclose(block(w, pos, "post", SHAPE, 1e-6), want, rtol=1e-14)


@pytest.mark.parametrize("placement", ["pre", "double", "parallel"])
def test_zero_output_projections_make_the_identity(placement: Placement) -> None:
    """wo = w2 = 0: a pre-norm (double, parallel) block is the identity exactly; a post-norm block is not
    (seed-002 §3.1.1: "a model with zero-initialized sub-block outputs is a pure identity")."""
    rng = np.random.default_rng(7)
    w = _block_weights(rng)
    w["wo"], w["w2"] = np.zeros_like(w["wo"]), np.zeros_like(w["w2"])
    pos = np.arange(3)
    np.testing.assert_array_equal(block(w, pos, placement, SHAPE, 1e-6), w["x"])
    g = rng.standard_normal(w["x"].shape)
    np.testing.assert_array_equal(block_vjp(w, pos, placement, SHAPE, 1e-6, g)["x"], g)
    assert not np.allclose(block(w, pos, "post", SHAPE, 1e-6), w["x"])


# --------------------------------------------------------------------------------------------------------------
# Gradient flow with depth: the exact statements of docs/gradient-flow.md
# --------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("depth", [1, 8, 32])
@pytest.mark.parametrize("placement", PLACEMENTS)
def test_gradient_flow_radial_statements(placement: Placement, depth: int) -> None:
    """ε = 0. Pre/double/parallel: every residual step's branch gradient is orthogonal to the step's input, so
    ⟨g_in, x⟩ = ⟨g_out, x⟩ — the residual path carries the radial component unchanged. Post-norm: the gradient at
    every normalised sum s is orthogonal to s — each layer removes it (seed-000, seed-002 §3.1.2)."""
    rng = np.random.default_rng(depth)
    layers = init_layers(rng, depth, d=8, heads=2, kv_heads=1, hidden=12)
    x = rng.standard_normal((1, 4, 8))
    g = rng.standard_normal(x.shape)
    steps = stack_gradients(layers, x, np.arange(4), placement, SHAPE, 0.0, g)
    assert len(steps) == depth * (1 if placement == "parallel" else 2)
    for s in steps:
        scale = np.linalg.norm(s.g_in) * np.linalg.norm(s.x) + np.linalg.norm(s.g_out) * np.linalg.norm(s.x)
        if placement == "post":
            assert abs(np.sum(s.g_s * s.s)) <= 1e3 * EPS * np.linalg.norm(s.g_s) * np.linalg.norm(s.s)
        else:
            assert abs(np.sum((s.g_in - s.g_out) * s.x)) <= 1e3 * EPS * scale


@pytest.mark.parametrize("placement", ["pre", "double", "parallel"])
def test_gradient_flow_identity_path_at_32_layers(placement: Placement) -> None:
    """With zero output projections every layer's gradient of a 32-layer pre-norm stack equals the upstream one,
    bit for bit (seed-002 §3.1.1: "a direct gradient path of approximately ones")."""
    rng = np.random.default_rng(11)
    layers = init_layers(rng, 32, d=8, heads=2, kv_heads=1, hidden=12, zero_outputs=True)
    x = rng.standard_normal((1, 4, 8))
    g = rng.standard_normal(x.shape)
    for s in stack_gradients(layers, x, np.arange(4), placement, SHAPE, 1e-6, g):
        np.testing.assert_array_equal(s.g_in, g)

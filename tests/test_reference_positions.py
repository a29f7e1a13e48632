"""The oracle's positions, context extension, loss reductions and accounting: VJPs against central finite
differences (tests/finite_diff.py), forward formulas against hand computations, and the frequency rules and
parameter counts against HF transformers where it is installed.

Seed ids: seed-000 "Positions, normalization and the residual stream"; seed-002 "Chapter 3 Transformer
Architecture Interview Essentials".
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

from tests.finite_diff import assert_vjp
from transformer_conformance.reference import accounting as acc
from transformer_conformance.reference import losses, positions, rope_scaling

SEEDS = [0, 1, 2]
RULES: list[dict[str, Any]] = [
    {"type": "linear", "factor": 4.0},
    {"type": "ntk", "factor": 8.0},
    {"type": "dynamic", "factor": 2.0, "original_max_position_embeddings": 16},
    {"type": "yarn", "factor": 16.0, "original_max_position_embeddings": 64},
    {"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 4096, "beta_fast": 16, "beta_slow": 2},
    {"type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
     "original_max_position_embeddings": 64},
]  # fmt: skip


def _upstream(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    return rng.standard_normal(shape) * rng.uniform(0.5, 2.0, size=shape)


# ---- VJPs vs finite differences ----------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", SEEDS)
def test_position_vjps(seed: int) -> None:
    """Sinusoidal (additive), learned (scatter-add, repeats accumulate) and ALiBi (additive) VJPs (seed-000, -002)."""
    rng = np.random.default_rng(seed)
    pos = np.array([0, 3, 3, 7, 1])
    x, g = rng.standard_normal((2, 5, 6)), _upstream(rng, (2, 5, 6))
    assert_vjp(
        lambda a: g * positions.sinusoidal_positions(a, pos), x, positions.sinusoidal_positions_vjp(x, pos, g), rng
    )
    table, gt = rng.standard_normal((8, 3)), _upstream(rng, (5, 3))
    assert_vjp(
        lambda a: gt * positions.learned_positions(a, pos), table, positions.learned_positions_vjp(table, pos, gt), rng
    )
    s, gs = rng.standard_normal((1, 3, 2, 4)), _upstream(rng, (1, 3, 2, 4))
    qp, kp = np.array([4, 9]), np.array([0, 2, 4, 6])
    assert_vjp(lambda a: gs * positions.alibi(a, qp, kp), s, positions.alibi_vjp(s, qp, kp, gs), rng)


@pytest.mark.parametrize("layout", ["interleaved", "half"])
@pytest.mark.parametrize("rule", RULES, ids=lambda r: r["type"])
def test_rope_scaled_vjp(rule: dict[str, Any], layout: str) -> None:
    """rope_scaled_vjp = factor·R(−angles)·g for every rule, partial rotary included (seed-002 §3.4.2)."""
    rng = np.random.default_rng(5)
    pos = np.array([0, 5, 40, 99])  # past the trained length of the dynamic rule
    x, g = rng.standard_normal((2, 4, 10)), _upstream(rng, (2, 4, 10))
    for rd in (None, 6):
        dx = rope_scaling.rope_scaled_vjp(x, pos, g, 10000.0, rd, rule, layout)  # type: ignore[arg-type]
        assert_vjp(lambda a, rd=rd: g * rope_scaling.rope_scaled(a, pos, 10000.0, rd, rule, layout), x, dx, rng)  # type: ignore[arg-type]


@pytest.mark.parametrize("ignore_index", [-100, 0, 6])
@pytest.mark.parametrize("seed", SEEDS)
def test_cross_entropy_mean_vjp(seed: int, ignore_index: int) -> None:
    """Mean over valid tokens and its gradient (ignored rows zero), confident rows included (seed-002 §3.2.2)."""
    rng = np.random.default_rng(seed)
    logits = 2.0 * rng.standard_normal((6, 7))
    targets = rng.integers(1, 6, size=6)
    targets[[1, 4]] = ignore_index
    logits[0, targets[0]] += 12.0  # p(target) ≈ 1
    g = np.asarray(rng.uniform(0.5, 2.0))
    grad = losses.cross_entropy_mean_vjp(logits, targets, g, ignore_index)
    assert_vjp(lambda a: g * losses.cross_entropy_mean(a, targets, ignore_index), logits, grad, rng)
    assert not grad[[1, 4]].any()
    valid = targets != ignore_index
    np.testing.assert_allclose(
        losses.cross_entropy_mean(logits, targets, ignore_index),
        losses.cross_entropy(logits[valid], targets[valid]).mean(),
        rtol=1e-15,
    )


@pytest.mark.parametrize("cap", [5.0, 30.0])
@pytest.mark.parametrize("seed", SEEDS)
def test_softcap_z_loss_vjp(seed: int, cap: float) -> None:
    """α·z(c·tanh(u/c))² and its gradient, logits through the tanh's knee (seed-002 §3.2.2)."""
    rng = np.random.default_rng(seed)
    logits = cap * rng.standard_normal((4, 9))
    g = _upstream(rng, (4,))
    grad = losses.softcap_z_loss_vjp(logits, g, 1e-2, cap)
    assert_vjp(lambda a: g * losses.softcap_z_loss(a, 1e-2, cap), logits, grad, rng)


# ---- forward formulas ----------------------------------------------------------------------------------------------


def test_sinusoidal_worked_example_and_shift() -> None:
    """d = 4: PE(0) = [0, 1, 0, 1], PE(1) = [sin 1, cos 1, sin .01, cos .01]; PE(i + δ) = M_δ PE(i)
    (seed-002 §3.4.1)."""
    pe = positions.sinusoidal_table(np.array([0, 1]), 4)
    np.testing.assert_allclose(
        pe, [[0, 1, 0, 1], [math.sin(1), math.cos(1), math.sin(0.01), math.cos(0.01)]], atol=1e-15
    )
    p = np.arange(0, 3000, 37)
    for delta in (1, 5, 1000):
        m = positions.sinusoidal_shift(delta, 8)
        np.testing.assert_allclose(
            positions.sinusoidal_table(p, 8) @ m.T, positions.sinusoidal_table(p + delta, 8), atol=1e-11
        )


def test_learned_refuses_undeclared_positions() -> None:
    """Positions L and −1 of an L-row table raise instead of wrapping (seed-002 §3.4.1: beyond L − 1 is undefined)."""
    table = np.arange(6.0).reshape(3, 2)
    for bad in (3, -1):
        with pytest.raises(IndexError):
            positions.learned_positions(table, np.array([0, bad]))


def test_alibi_bias_formula() -> None:
    """H = 8 slopes 2^−1 … 2^−8 and bias −m_h·|i − j| (seed-000 §ALiBi)."""
    b = positions.alibi_bias(8, np.array([0, 3]), np.array([0, 1, 2, 3]))
    np.testing.assert_array_equal(b[1, 1], -0.25 * np.array([3, 2, 1, 0]))
    np.testing.assert_array_equal(b[7, 0], -(2.0**-8) * np.arange(4))


def test_scaling_rules_by_hand() -> None:
    """Linear divides θ by s; NTK uses base·s^(d/(d−2)); dynamic is plain within the trained length; YaRN's
    attention factor is 0.1·ln s + 1 (seed-002 §3.4.2)."""
    theta = 10000.0 ** (-np.arange(0, 8, 2) / 8)
    inv, f = rope_scaling.scaled_inv_freq(8, 10000.0, {"type": "linear", "factor": 4.0})
    np.testing.assert_allclose(inv, theta / 4, rtol=1e-15)
    inv, _ = rope_scaling.scaled_inv_freq(8, 10000.0, {"type": "ntk", "factor": 4.0})
    np.testing.assert_allclose(inv, (10000.0 * 4 ** (8 / 6)) ** (-np.arange(0, 8, 2) / 8), rtol=1e-15)
    dyn = {"type": "dynamic", "factor": 4.0, "original_max_position_embeddings": 100}
    np.testing.assert_array_equal(rope_scaling.scaled_inv_freq(8, 10000.0, dyn, 100)[0], theta)
    assert rope_scaling.scaled_inv_freq(8, 10000.0, dyn, 101)[0][-1] < theta[-1]
    _, f = rope_scaling.scaled_inv_freq(
        8, 10000.0, {"type": "yarn", "factor": 16.0, "original_max_position_embeddings": 64}
    )
    assert f == pytest.approx(0.1 * math.log(16) + 1, rel=1e-15)


def test_accounting_seed_figures() -> None:
    """LLaMA-2 7B = 6,738,415,616 (tied 6,607,343,616), 70B shape = 68,976,648,192; per layer 4·4096² ≈ 67M and
    3·4096·11008 ≈ 135M; 6.7B × 2 bytes = 13.4 GB of bf16 weights (seed-002 §3.1.1)."""
    assert acc.param_count(acc.LLAMA2_7B) == 6_738_415_616
    assert acc.param_count(acc.ModelConfig(**{**acc.LLAMA2_7B.__dict__, "tied": True})) == 6_607_343_616
    assert acc.param_count(acc.LLAMA2_70B_SHAPE) == 68_976_648_192
    assert acc.attention_params(acc.LLAMA2_7B) == 4 * 4096**2 and round(4 * 4096**2 / 1e6) == 67
    assert acc.mlp_params(acc.LLAMA2_7B) == 3 * 4096 * 11008 and round(3 * 4096 * 11008 / 1e6) == 135
    assert acc.weight_bytes(6_700_000_000, "bfloat16") == 13_400_000_000
    # the exact count, rounded to the seed's 6.7B, gives its 13.4 GB within that rounding (±0.05B × 2 bytes)
    assert abs(acc.weight_bytes(acc.param_count(acc.LLAMA2_7B), "bfloat16") - 13.4e9) <= 0.1e9


# ---- against HF transformers ----------------------------------------------------------------------------------------


def _hf_config(dim: int, base: float, rule: dict[str, Any] | None, max_pos: int) -> Any:
    transformers = pytest.importorskip("transformers")
    params: dict[str, Any] = {"rope_type": "default", "rope_theta": base}
    if rule is not None:
        params = {"rope_theta": base, "rope_type": rule["type"]} | {k: v for k, v in rule.items() if k != "type"}
    return transformers.LlamaConfig(
        hidden_size=dim * 4,
        num_attention_heads=4,
        head_dim=dim,
        max_position_embeddings=max_pos,
        rope_parameters=params,
    )


@pytest.mark.parametrize("dim", [8, 64, 128])
@pytest.mark.parametrize("rule", [r for r in RULES if r["type"] != "ntk"], ids=lambda r: r["type"])
def test_scaled_frequencies_match_hf(rule: dict[str, Any], dim: int) -> None:
    """The oracle's θ'_i and attention factor equal transformers.modeling_rope_utils.ROPE_INIT_FUNCTIONS (float32)."""
    pytest.importorskip("torch")
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    original = rule.get("original_max_position_embeddings", 2048)
    for seq_len in {original, 3 * original + 1} if rule["type"] == "dynamic" else {original}:
        cfg = _hf_config(dim, 10000.0, rule, original)
        inv, factor = ROPE_INIT_FUNCTIONS[rule["type"]](cfg, "cpu", seq_len)
        want, want_factor = rope_scaling.scaled_inv_freq(dim, 10000.0, rule, seq_len)
        # HF computes in float32: θ to a few units of 2^−24 (budgets.rope_angle_ulps: ≤ 1.5·ln(base) + 2.5)
        np.testing.assert_allclose(inv.double().numpy(), want, rtol=(1.5 * math.log(10000.0) + 8) * 2.0**-24)
        assert float(factor) == pytest.approx(want_factor, rel=1e-12)


def test_ntk_base_matches_hf_dynamic_at_factor_one() -> None:
    """Static NTK with s = n/L equals HF's dynamic rule at factor 1 and length n: base·(n/L)^(d/(d−2))."""
    pytest.importorskip("torch")
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    cfg = _hf_config(64, 10000.0, {"type": "dynamic", "factor": 1.0}, 512)
    inv, _ = ROPE_INIT_FUNCTIONS["dynamic"](cfg, "cpu", 4096)
    want, _ = rope_scaling.scaled_inv_freq(64, 10000.0, {"type": "ntk", "factor": 8.0})
    np.testing.assert_allclose(inv.double().numpy(), want, rtol=(1.5 * math.log(1e6) + 8) * 2.0**-24)


@pytest.mark.parametrize(
    ("config", "tied"),
    [(acc.LLAMA2_7B, False), (acc.LLAMA2_7B, True), (acc.LLAMA2_70B_SHAPE, False)],
    ids=["7b", "7b-tied", "70b-shape"],
)
def test_param_count_matches_hf_meta_model(config: acc.ModelConfig, tied: bool) -> None:
    """The accounting equals HF's LlamaForCausalLM built on the meta device (no weights allocated)."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    cfg = transformers.LlamaConfig(
        vocab_size=config.vocab,
        hidden_size=config.hidden,
        intermediate_size=config.intermediate,
        num_hidden_layers=config.layers,
        num_attention_heads=config.heads,
        num_key_value_heads=config.n_kv,
        tie_word_embeddings=tied,
    )
    with torch.device("meta"):
        model = transformers.LlamaForCausalLM(cfg)
    hf = sum(p.numel() for p in model.parameters())
    assert hf == acc.param_count(acc.ModelConfig(**{**config.__dict__, "tied": tied}))


def _longrope(rd: int, original: int = 32, factor: float = 4.0) -> dict[str, Any]:
    rng = np.random.default_rng(rd)
    return {
        "type": "longrope",
        "factor": factor,
        "original_max_position_embeddings": original,
        "short_factor": [float(f) for f in rng.uniform(1.0, 1.25, rd // 2)],
        "long_factor": [float(f) for f in np.sort(rng.uniform(1.0, 2 * factor, rd // 2))],
    }


@pytest.mark.parametrize("layout", ["interleaved", "half"])
@pytest.mark.parametrize("last", [31, 99])  # n = L (short factors) and beyond (long factors)
def test_longrope_vjp(layout: str, last: int) -> None:
    """LongRoPE's VJP: factor·R(−angles)·g with the factor list of the call's length (seed-002 §3.4.2)."""
    rng = np.random.default_rng(6)
    pos = np.array([0, 5, 17, last])
    x, g = rng.standard_normal((2, 4, 10)), _upstream(rng, (2, 4, 10))
    for rd in (10, 6):
        rule = _longrope(rd)
        dx = rope_scaling.rope_scaled_vjp(x, pos, g, 10000.0, rd, rule, layout)  # type: ignore[arg-type]
        assert_vjp(
            lambda a, rd=rd, rule=rule: g * rope_scaling.rope_scaled(a, pos, 10000.0, rd, rule, layout), x, dx, rng
        )  # type: ignore[arg-type]


def test_longrope_switches_after_the_trained_length() -> None:
    """Short factors while n ≤ L, long ones beyond; the attention factor √(1 + ln s/ln L) either way."""
    rule = _longrope(8)
    short, f1 = rope_scaling.scaled_inv_freq(8, 10000.0, rule, 32)
    long, f2 = rope_scaling.scaled_inv_freq(8, 10000.0, rule, 33)
    theta = rope_scaling.rope_inv_freq(8, 10000.0)
    np.testing.assert_allclose(short, theta / np.array(rule["short_factor"]), rtol=1e-15)
    np.testing.assert_allclose(long, theta / np.array(rule["long_factor"]), rtol=1e-15)
    assert f1 == f2 == pytest.approx(math.sqrt(1 + math.log(4.0) / math.log(32)))
    with pytest.raises(ValueError, match="needs 4 factors"):
        rope_scaling.scaled_inv_freq(8, 10000.0, _longrope(6), 32)


@pytest.mark.parametrize("dim", [8, 64, 128])
def test_longrope_frequencies_match_hf(dim: int) -> None:
    """The oracle's LongRoPE θ'_i and attention factor equal HF's ``longrope`` initialisation (float32), below and
    beyond the trained length."""
    pytest.importorskip("torch")
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    rule = _longrope(dim)
    for seq_len in (32, 33):
        cfg = _hf_config(dim, 10000.0, rule, 4 * 32)
        inv, factor = ROPE_INIT_FUNCTIONS["longrope"](cfg, "cpu", seq_len)
        want, want_factor = rope_scaling.scaled_inv_freq(dim, 10000.0, rule, seq_len)
        np.testing.assert_allclose(inv.double().numpy(), want, rtol=(1.5 * math.log(10000.0) + 8) * 2.0**-24)
        assert float(factor) == pytest.approx(want_factor, rel=1e-12)

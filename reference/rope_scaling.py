"""RoPE context extension: the inverse frequencies (and attention factor) of each scaling rule.

seed-000 §Extending context with RoPE; seed-002 §3.4.2 "What You Actually Decide in Practice".
Every rule changes only how positions map to angles: angle(m, i) = m·θ'_i, and YaRN also multiplies the
rotated coordinates by an attention factor. ``scaling`` is a dict with a ``"type"`` and its parameters:

=========  ==================================================================================================
linear     ``factor`` s = L_target/L_train: positions × 1/s, i.e. θ'_i = θ_i/s (position interpolation)
ntk        ``factor`` s: base' = base·s^(d/(d−2)) (NTK-aware scaling)
dynamic    ``factor`` s, ``original_max_position_embeddings`` L: with n = max(positions) + 1 of *this call*,
           base' = base·(s·n/L − (s − 1))^(d/(d−2)) when n > L, plain RoPE otherwise (dynamic NTK)
yarn       ``factor`` s, ``original_max_position_embeddings`` L, ``beta_fast`` (32), ``beta_slow`` (1):
           per-band blend of θ_i and θ_i/s with a linear ramp over the correction dimensions, and the
           attention factor 0.1·ln(s) + 1
llama3     ``factor`` s, ``low_freq_factor`` (1), ``high_freq_factor`` (4), ``original_max_position_embeddings``
           L: wavelengths below L/high kept, above L/low divided by s, smooth interpolation between
longrope   ``factor`` s, ``original_max_position_embeddings`` L, ``short_factor`` and ``long_factor`` (one
           factor f_i per rotated pair): θ'_i = θ_i/f_i, the short factors while n = max(positions) + 1 of
           *this call* is at most L, the long ones beyond; attention factor √(1 + ln s/ln L) (LongRoPE, Phi-3)
=========  ==================================================================================================

The formulas are those of HF transformers' ``modeling_rope_utils`` (the project's tests compare them).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np
from numpy.typing import NDArray

from transformer_conformance.reference.rope import Layout, rope, rope_inv_freq

F64 = NDArray[np.float64]
I64 = NDArray[np.int64]

SCALING_TYPES = ("linear", "ntk", "dynamic", "yarn", "llama3", "longrope")


def ntk_base(base: float, factor: float, rotary_dim: int) -> float:
    """NTK-aware base: base·s^(d/(d−2)) (seed-002 §3.4.2: "replace 10000 with 10000·s^(d/(d−2))")."""
    return base * factor ** (rotary_dim / (rotary_dim - 2))


def dynamic_ntk_base(base: float, factor: float, rotary_dim: int, seq_len: int, original: int) -> float:
    """Dynamic NTK: the base for a sequence of ``seq_len`` positions; unchanged up to the trained length."""
    n = max(seq_len, original)
    return base * (factor * n / original - (factor - 1)) ** (rotary_dim / (rotary_dim - 2))


def yarn_attention_factor(factor: float) -> float:
    """YaRN's attention temperature: 0.1·ln(s) + 1 (1 for s ≤ 1)."""
    return 1.0 if factor <= 1 else 0.1 * math.log(factor) + 1.0


def longrope_attention_factor(factor: float, original: int) -> float:
    """LongRoPE's attention factor: √(1 + ln s/ln L) (1 for s ≤ 1)."""
    return 1.0 if factor <= 1 else math.sqrt(1 + math.log(factor) / math.log(original))


def longrope_factors(scaling: Mapping[str, Any], rotary_dim: int, seq_len: int) -> F64:
    """The per-pair factors LongRoPE divides θ_i by for a call of ``seq_len`` positions: short up to L, long beyond."""
    original = int(scaling["original_max_position_embeddings"])
    ext = np.asarray(scaling["long_factor" if seq_len > original else "short_factor"], dtype=np.float64)
    if ext.shape != (rotary_dim // 2,):
        raise ValueError(f"LongRoPE needs {rotary_dim // 2} factors (one per rotated pair), got {ext.shape[0]}")
    return ext


def yarn_correction_range(
    rotary_dim: int, base: float, original: int, beta_fast: float, beta_slow: float
) -> tuple[int, int]:
    """The pair indices [low, high] over which YaRN's ramp runs: the pair that turns ``beta`` times over
    the trained length, d·ln(L/(2π·beta))/(2·ln base), floored (fast) and ceiled (slow), clipped to 0 … d − 1."""

    def dim_of(rotations: float) -> float:
        return rotary_dim * math.log(original / (rotations * 2 * math.pi)) / (2 * math.log(base))

    return max(math.floor(dim_of(beta_fast)), 0), min(math.ceil(dim_of(beta_slow)), rotary_dim - 1)


def yarn_ramp(rotary_dim: int, base: float, original: int, beta_fast: float, beta_slow: float) -> F64:
    """γ_i = clamp((i − low)/(high − low), 0, 1) for pair i: 0 keeps θ_i (high frequency), 1 interpolates θ_i/s."""
    low, high = yarn_correction_range(rotary_dim, base, original, beta_fast, beta_slow)
    hi: float = high + 0.001 if low == high else high
    return np.clip((np.arange(rotary_dim // 2, dtype=np.float64) - low) / (hi - low), 0.0, 1.0)


def scaled_inv_freq(
    rotary_dim: int, base: float, scaling: Mapping[str, Any] | None, seq_len: int | None = None
) -> tuple[F64, float]:
    """(θ'_i, attention factor) for ``scaling`` (None: plain RoPE). ``seq_len`` is needed by "dynamic" and
    "longrope" only."""
    if scaling is None:
        return rope_inv_freq(rotary_dim, base), 1.0
    kind = scaling["type"]
    s = float(scaling["factor"])
    theta = rope_inv_freq(rotary_dim, base)
    if kind == "linear":
        return theta / s, 1.0
    if kind == "ntk":
        return rope_inv_freq(rotary_dim, ntk_base(base, s, rotary_dim)), 1.0
    if kind == "dynamic":
        if seq_len is None:
            raise ValueError("dynamic NTK scaling needs the sequence length")
        original = int(scaling["original_max_position_embeddings"])
        return rope_inv_freq(rotary_dim, dynamic_ntk_base(base, s, rotary_dim, seq_len, original)), 1.0
    if kind == "longrope":
        if seq_len is None:
            raise ValueError("LongRoPE scaling needs the sequence length")
        original = int(scaling["original_max_position_embeddings"])
        return theta / longrope_factors(scaling, rotary_dim, seq_len), longrope_attention_factor(s, original)
    if kind == "yarn":
        original = int(scaling["original_max_position_embeddings"])
        ramp = yarn_ramp(
            rotary_dim, base, original, float(scaling.get("beta_fast", 32)), float(scaling.get("beta_slow", 1))
        )
        return theta / s * ramp + theta * (1.0 - ramp), yarn_attention_factor(s)
    if kind == "llama3":
        trained = float(scaling["original_max_position_embeddings"])
        low, high = float(scaling.get("low_freq_factor", 1.0)), float(scaling.get("high_freq_factor", 4.0))
        wavelen = 2 * math.pi / theta
        smooth = np.clip((trained / wavelen - low) / (high - low), 0.0, 1.0)
        return (1.0 - smooth) * theta / s + smooth * theta, 1.0
    raise ValueError(f"unknown RoPE scaling type {kind!r}; expected one of {', '.join(SCALING_TYPES)}")


def scaled_angles(positions: I64, rotary_dim: int, base: float, scaling: Mapping[str, Any] | None) -> tuple[F64, float]:
    """Angles m·θ'_i (T, d/2) and the attention factor; "dynamic" and "longrope" read the length from the
    positions."""
    pos = np.asarray(positions)
    seq_len = int(pos.max()) + 1 if pos.size else 0
    inv, factor = scaled_inv_freq(rotary_dim, base, scaling, seq_len)
    return pos.astype(np.float64)[:, None] * inv[None, :], factor


def rope_scaled(
    x: F64,
    positions: I64,
    base: float = 10000.0,
    rotary_dim: int | None = None,
    scaling: Mapping[str, Any] | None = None,
    layout: Layout = "interleaved",
) -> F64:
    """RoPE with context extension: the rotation by the scaled angles, the rotated coordinates multiplied
    by the attention factor (HF transformers multiplies cos and sin by it); pass-through coordinates as is."""
    rd = x.shape[-1] if rotary_dim is None else rotary_dim
    ang, factor = scaled_angles(positions, rd, base, scaling)
    out = rope(x, positions, base, rd, layout, angles=ang)
    out[..., :rd] *= factor
    return out


def rope_scaled_vjp(
    x: F64,
    positions: I64,
    g: F64,
    base: float = 10000.0,
    rotary_dim: int | None = None,
    scaling: Mapping[str, Any] | None = None,
    layout: Layout = "interleaved",
) -> F64:
    """VJP of :func:`rope_scaled` w.r.t. x: factor·R(−angles)·g on the rotated part (Rᵀ = R(−angle)), g elsewhere."""
    del x
    rd = g.shape[-1] if rotary_dim is None else rotary_dim
    ang, factor = scaled_angles(positions, rd, base, scaling)
    out = rope(np.asarray(g, dtype=np.float64), positions, base, rd, layout, angles=-ang)
    out[..., :rd] *= factor
    return out

"""Absolute positions (sinusoidal, learned) and ALiBi, with their VJPs.

seed-000 §Absolute positions, §ALiBi; seed-002 §3.4.1 "Absolute, Relative, and Sinusoidal Encodings".
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import NDArray

F64 = NDArray[np.float64]
I64 = NDArray[np.int64]


def sinusoidal_frequencies(d: int, base: float = 10000.0) -> F64:
    """ω_i = base^(−2i/d) for pair i = 0 … d/2 − 1: wavelengths 2π … base·2π (seed-002 §3.4.1)."""
    return base ** (-np.arange(0, d, 2, dtype=np.float64) / d)


def sinusoidal_table(positions: I64 | F64, d: int, base: float = 10000.0) -> F64:
    """PE(pos, 2i) = sin(pos·ω_i), PE(pos, 2i+1) = cos(pos·ω_i), shape (T, d), d even.

    seed-000 §Absolute positions: "PE(pos, 2i) = sin(pos / 10000^(2i/d)) and PE(pos, 2i+1) = cos(…)".
    """
    if d % 2:
        raise ValueError(f"the sinusoidal encoding pairs sin and cos: d must be even, got {d}")
    ang = np.asarray(positions, dtype=np.float64)[:, None] * sinusoidal_frequencies(d, base)[None, :]
    pe = np.empty((ang.shape[0], d))
    pe[:, 0::2], pe[:, 1::2] = np.sin(ang), np.cos(ang)
    return pe


def sinusoidal_positions(x: F64, positions: I64, base: float = 10000.0) -> F64:
    """x + PE(positions): the encoding added to the token embeddings x (..., T, d)."""
    return x + sinusoidal_table(positions, x.shape[-1], base)


def sinusoidal_positions_vjp(x: F64, positions: I64, g: F64, base: float = 10000.0) -> F64:
    """VJP of :func:`sinusoidal_positions` w.r.t. x: the encoding is additive, so ∂L/∂x = g."""
    del x, positions, base
    return np.array(g, dtype=np.float64)


def sinusoidal_shift(delta: int | float, d: int, base: float = 10000.0) -> F64:
    """M_δ, the fixed linear map with PE(i + δ) = M_δ·PE(i) for every i (seed-002 §3.4.1: "a fixed rotation
    matrix M_δ maps PE(i) to PE(i + δ)").

    Block-diagonal; on pair (sin pω, cos pω) it is [[cos δω, sin δω], [−sin δω, cos δω]], by the
    angle-addition formulas.
    """
    m = np.zeros((d, d))
    for i, w in enumerate(sinusoidal_frequencies(d, base)):
        c, s = math.cos(delta * w), math.sin(delta * w)
        m[2 * i : 2 * i + 2, 2 * i : 2 * i + 2] = [[c, s], [-s, c]]
    return m


def learned_positions(table: F64, positions: I64) -> F64:
    """Rows ``table[positions]`` of a learned table (L, d); a position outside 0 … L − 1 is an error.

    seed-002 §3.4.1: "the vocabulary of positions {0, 1, ..., L − 1} must be declared at model
    initialization, and any position beyond L − 1 is simply undefined" — so it is refused (IndexError),
    never wrapped or clamped (NumPy's own negative indexing would wrap).
    """
    pos = np.asarray(positions)
    n = table.shape[0]
    bad = (pos < 0) | (pos >= n)
    if bad.any():
        raise IndexError(f"position {int(pos[bad][0])} outside the learned table's 0 … {n - 1}")
    return table[pos]


def learned_positions_vjp(table: F64, positions: I64, g: F64) -> F64:
    """VJP of :func:`learned_positions` w.r.t. the table: each row accumulates the gradients of every
    position that read it (a repeated position adds up, it does not overwrite)."""
    learned_positions(table, positions)  # the same refusal
    out = np.zeros_like(table, dtype=np.float64)
    np.add.at(out, np.asarray(positions), g)
    return out


def alibi_slopes(n_heads: int) -> F64:
    """ALiBi head slopes m_h, h = 0 … H − 1 (Press et al., 2022, and its reference code).

    H a power of two: the geometric sequence m_h = 2^(−8(h+1)/H) (H = 8: 1/2, 1/4, …, 1/256).
    Otherwise, with P the largest power of two below H: the P slopes of P heads, followed by the
    slopes of 2P heads at even index (2^(−8(2k+1)/(2P)) for k = 0 … H − P − 1) — the interpolation of
    the reference implementation, used by BLOOM and MPT.
    """
    if n_heads < 1:
        raise ValueError(f"need at least one head, got {n_heads}")
    p = 1 << (n_heads.bit_length() - 1)

    def geometric(n: int) -> F64:
        return 2.0 ** (-8.0 * np.arange(1, n + 1, dtype=np.float64) / n)

    if p == n_heads:
        return geometric(p)
    return np.concatenate([geometric(p), geometric(2 * p)[0::2][: n_heads - p]])


def alibi_bias(n_heads: int, q_positions: I64, k_positions: I64) -> F64:
    """The bias −m_h·|i − j| added to head h's score of query position i and key position j, shape
    (H, Tq, Tk) (seed-000 §ALiBi: "a fixed, head-specific linear penalty to attention scores, −slope_h·|i − j|")."""
    dist = np.abs(np.asarray(q_positions, dtype=np.float64)[:, None] - np.asarray(k_positions, dtype=np.float64))
    return -alibi_slopes(n_heads)[:, None, None] * dist[None]


def alibi(scores: F64, q_positions: I64, k_positions: I64) -> F64:
    """Attention scores (..., H, Tq, Tk) with the ALiBi bias added."""
    return scores + alibi_bias(scores.shape[-3], q_positions, k_positions)


def alibi_vjp(scores: F64, q_positions: I64, k_positions: I64, g: F64) -> F64:
    """VJP of :func:`alibi` w.r.t. the scores: the bias is constant, so ∂L/∂scores = g."""
    del scores, q_positions, k_positions
    return np.array(g, dtype=np.float64)

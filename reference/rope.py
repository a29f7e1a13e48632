"""Rotary position embeddings (RoPE), both pair layouts, partial rotary, and the VJP.

seed-000 §Rotary position embeddings (RoPE); seed-002 §3.4.2; seed-004 §Rotary position embeddings.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
from numpy.typing import NDArray

F64 = NDArray[np.float64]
Layout = Literal["interleaved", "half"]


def rope_inv_freq(rotary_dim: int, base: float = 10000.0) -> F64:
    """θ_i = base^(−2i/d) for i = 0 … d/2 − 1, d the rotated width (seed-000: "θ_i = base^(−2i/d_k)")."""
    return base ** (-np.arange(0, rotary_dim, 2, dtype=np.float64) / rotary_dim)


def rope_angles(positions: NDArray[np.float64] | NDArray[np.int64], rotary_dim: int, base: float = 10000.0) -> F64:
    """The angle m·θ_i of pair i at position m, shape (T, rotary_dim/2)."""
    return np.asarray(positions, dtype=np.float64)[:, None] * rope_inv_freq(rotary_dim, base)[None, :]


def rope_pair_indices(rotary_dim: int, layout: Layout) -> tuple[NDArray[np.intp], NDArray[np.intp]]:
    """Indices (a_i, b_i) of the two coordinates that pair i rotates.

    ``interleaved``: (2i, 2i+1), the seeds' form (GPT-J, Meta's original LLaMA code).
    ``half``: (i, i + d/2), the "rotate_half" form of HF transformers and Liger-Kernel.
    """
    half = rotary_dim // 2
    if layout == "interleaved":
        return np.arange(0, rotary_dim, 2), np.arange(1, rotary_dim, 2)
    if layout == "half":
        return np.arange(half), np.arange(half, rotary_dim)
    raise ValueError(f"unknown RoPE layout {layout!r}; expected 'interleaved' or 'half'")


def rope(
    x: F64,
    positions: NDArray[np.int64],
    base: float = 10000.0,
    rotary_dim: int | None = None,
    layout: Layout = "interleaved",
    angles: F64 | None = None,
) -> F64:
    """Rotate pair i of each head vector at position m by m·θ_i.

    x has shape (..., T, d) and ``positions`` shape (T,). Only the first ``rotary_dim`` coordinates
    rotate (partial rotary); the rest pass through. With a = x[a_i], b = x[b_i]:
    a' = a·cos(mθ_i) − b·sin(mθ_i),  b' = a·sin(mθ_i) + b·cos(mθ_i)   (seed-000, the 2×2 rotation).
    ``angles`` overrides m·θ_i (used to model angles computed in a working precision).
    """
    rd = x.shape[-1] if rotary_dim is None else rotary_dim
    ang = rope_angles(positions, rd, base) if angles is None else angles
    cos, sin = np.cos(ang), np.sin(ang)
    ia, ib = rope_pair_indices(rd, layout)
    a, b = x[..., ia], x[..., ib]
    out = x.copy()
    out[..., ia] = a * cos - b * sin
    out[..., ib] = a * sin + b * cos
    return out


def rope_vjp(
    x: F64,
    positions: NDArray[np.int64],
    g: F64,
    base: float = 10000.0,
    rotary_dim: int | None = None,
    layout: Layout = "interleaved",
    angles: F64 | None = None,
) -> F64:
    """VJP of :func:`rope` with respect to x: the transposed rotation R_mᵀ g (pass-through part: g)."""
    rd = x.shape[-1] if rotary_dim is None else rotary_dim
    ang = rope_angles(positions, rd, base) if angles is None else angles
    cos, sin = np.cos(ang), np.sin(ang)
    ia, ib = rope_pair_indices(rd, layout)
    ga, gb = g[..., ia], g[..., ib]
    dx = g.copy()
    dx[..., ia] = ga * cos + gb * sin
    dx[..., ib] = -ga * sin + gb * cos
    return dx

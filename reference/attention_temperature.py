"""Attention temperature tuning of NoPE layers: queries scaled up with the position, so that attention without
positional encoding stays sharp over long contexts.

ref: Llama 4 (the Llama 4 model card; "attn_temperature_tuning" of HF transformers' ``Llama4TextAttention``,
applied on the layers that use no RoPE). The query at position p is multiplied by

    τ(p) = log(1 + ⌊(p + 1)/F⌋)·α + 1,

F the floor scale (8192 in Llama 4) and α the attention scale (0.1): τ = 1 exactly for p < F − 1, and it grows
by steps at p + 1 = F, 2F, … .
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

F64 = NDArray[np.float64]
I64 = NDArray[np.int64]


def temperature_scales(positions: I64, floor_scale: float = 8192.0, attn_scale: float = 0.1) -> F64:
    """τ(p) for each position, shape (T,)."""
    p = np.asarray(positions, dtype=np.float64)
    return np.log1p(np.floor((p + 1.0) / floor_scale)) * attn_scale + 1.0


def attention_temperature(q: F64, positions: I64, floor_scale: float = 8192.0, attn_scale: float = 0.1) -> F64:
    """q (..., T, D) with the query at token t multiplied by τ(positions[t])."""
    return q * temperature_scales(positions, floor_scale, attn_scale)[:, None]


def attention_temperature_vjp(
    q: F64, positions: I64, g: F64, floor_scale: float = 8192.0, attn_scale: float = 0.1
) -> F64:
    """VJP with respect to q: g scaled by the same τ (the scale depends on the positions only)."""
    return g * temperature_scales(positions, floor_scale, attn_scale)[:, None]

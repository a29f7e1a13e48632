"""Gradient flow with depth: stacks of decoder blocks at initialisation and their per-layer gradient norms.

docs/gradient-flow.md states what must hold and why; seed-000 §Pre-norm vs. post-norm; seed-002 §3.1.1 ("a direct
gradient path of approximately ones"), §3.1.2.
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import NDArray

from transformer_conformance.reference.blocks import AttentionShape, Placement, stack_gradients

F64 = NDArray[np.float64]


def init_layers(
    rng: np.random.Generator,
    depth: int,
    d: int,
    heads: int,
    kv_heads: int,
    hidden: int,
    zero_outputs: bool = False,
) -> list[dict[str, F64]]:
    """Weights of ``depth`` blocks at initialisation: N(0, 1/fan_in) projections, output projections (wo, w2)
    further scaled by 1/√(2L) (seed-000: "scaled initialization of output projections (e.g. by 1/√(2L))") or
    zero, norm weights 1."""
    hd = d // heads
    out_scale = 0.0 if zero_outputs else 1.0 / math.sqrt(2 * depth)

    def normal(*shape: int, scale: float = 1.0) -> F64:
        return rng.standard_normal(shape) * scale / math.sqrt(shape[0])

    return [
        {
            "attn_norm": np.ones(d),
            "wq": normal(d, heads * hd),
            "wk": normal(d, kv_heads * hd),
            "wv": normal(d, kv_heads * hd),
            "wo": normal(heads * hd, d, scale=out_scale),
            "mlp_norm": np.ones(d),
            "w1": normal(d, hidden),
            "w3": normal(d, hidden),
            "w2": normal(hidden, d, scale=out_scale),
            "attn_post_norm": np.ones(d),
            "mlp_post_norm": np.ones(d),
        }
        for _ in range(depth)
    ]


def layer_gradient_norms(
    layers: list[dict[str, F64]],
    x: F64,
    positions: NDArray[np.int64],
    placement: Placement,
    shape: AttentionShape,
    eps: float,
    g: F64,
) -> F64:
    """‖∂L/∂x_ℓ‖ at the input of every layer ℓ = 0 … L − 1, then at the output (‖g‖), for L = Σ g ⊙ stack(x)."""
    steps = stack_gradients(layers, x, positions, placement, shape, eps, g)
    per_layer = len(steps) // len(layers)
    return np.array([np.linalg.norm(s.g_in) for s in steps[::per_layer]] + [np.linalg.norm(g)])

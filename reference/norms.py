"""RMSNorm and LayerNorm over the last axis, with their VJPs.

seed-000 §Normalization and seed-002 §3.2.1 "LayerNorm vs. RMSNorm".
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

F64 = NDArray[np.float64]


def _sum_leading(a: F64) -> F64:
    """Sum over every axis but the last (how a per-feature parameter's gradient accumulates)."""
    return a.reshape(-1, a.shape[-1]).sum(axis=0)


def rms_norm(x: F64, weight: F64, eps: float) -> F64:
    """RMSNorm(x) = γ ⊙ x / √(mean(x²) + ε), over the last axis; no shift parameter.

    seed-000 §Normalization: "RMSNorm drops the mean-centering and the bias".
    seed-002 §3.2.1: "Do not re-introduce β".
    """
    ms = np.mean(x * x, axis=-1, keepdims=True)
    return weight * x / np.sqrt(ms + eps)


def rms_norm_vjp(x: F64, weight: F64, eps: float, g: F64) -> tuple[F64, F64]:
    """VJP of :func:`rms_norm`: returns (∂L/∂x, ∂L/∂γ) for the upstream gradient ``g``.

    With r = (mean(x²) + ε)^(-1/2) and x̂ = x·r:
    ∂L/∂x = r·(g⊙γ − x̂·mean(g⊙γ⊙x̂)),  ∂L/∂γ = Σ_rows g⊙x̂.
    """
    r = 1.0 / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps)
    xhat = x * r
    gw = g * weight
    dx = r * (gw - xhat * np.mean(gw * xhat, axis=-1, keepdims=True))
    return dx, _sum_leading(g * xhat)


def layer_norm(x: F64, weight: F64, bias: F64, eps: float) -> F64:
    """LN(x) = γ ⊙ (x − μ)/√(σ² + ε) + β over the last axis, σ² the biased variance (divide by d).

    seed-000 §Normalization; seed-002 §3.2.1: "σ² = (1/d) Σ (x_j − μ)²".
    """
    mu = np.mean(x, axis=-1, keepdims=True)
    var = np.mean((x - mu) ** 2, axis=-1, keepdims=True)
    return weight * (x - mu) / np.sqrt(var + eps) + bias


def layer_norm_vjp(x: F64, weight: F64, bias: F64, eps: float, g: F64) -> tuple[F64, F64, F64]:
    """VJP of :func:`layer_norm`: returns (∂L/∂x, ∂L/∂γ, ∂L/∂β).

    With r = (σ² + ε)^(-1/2) and x̂ = (x − μ)·r:
    ∂L/∂x = r·(g⊙γ − mean(g⊙γ) − x̂·mean(g⊙γ⊙x̂)),  ∂L/∂γ = Σ_rows g⊙x̂,  ∂L/∂β = Σ_rows g.
    """
    del bias  # the output is affine in β: it does not enter the other gradients
    mu = np.mean(x, axis=-1, keepdims=True)
    r = 1.0 / np.sqrt(np.mean((x - mu) ** 2, axis=-1, keepdims=True) + eps)
    xhat = (x - mu) * r
    gw = g * weight
    dx = r * (gw - np.mean(gw, axis=-1, keepdims=True) - xhat * np.mean(gw * xhat, axis=-1, keepdims=True))
    return dx, _sum_leading(g * xhat), _sum_leading(g)

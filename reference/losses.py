"""Per-token cross-entropy and z-loss over the vocabulary axis, with their VJPs.

seed-002 §3.2.2 "QK-Norm and Stability Interventions" (z-loss, α = 1e-4 as in PaLM).
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

F64 = NDArray[np.float64]

Z_LOSS_ALPHA = 1e-4


def logsumexp(logits: F64) -> F64:
    """z = log Σ_v exp(u_v) over the last axis, shifted by the maximum so it never overflows."""
    m = np.max(logits, axis=-1, keepdims=True)
    return (m + np.log(np.sum(np.exp(logits - m), axis=-1, keepdims=True)))[..., 0]


def softmax(logits: F64) -> F64:
    """softmax(u)_v = exp(u_v − z)."""
    return np.exp(logits - logsumexp(logits)[..., None])


def cross_entropy(logits: F64, targets: NDArray[np.int64]) -> F64:
    """Per-token cross-entropy: z − u_target, shape logits.shape[:-1]."""
    picked = np.take_along_axis(logits, targets[..., None], axis=-1)[..., 0]
    return logsumexp(logits) - picked


def cross_entropy_vjp(logits: F64, targets: NDArray[np.int64], g: F64) -> F64:
    """VJP of :func:`cross_entropy` w.r.t. the logits: g·(softmax(u) − onehot(target))."""
    grad = softmax(logits)
    np.put_along_axis(grad, targets[..., None], np.take_along_axis(grad, targets[..., None], -1) - 1.0, -1)
    return g[..., None] * grad


def z_loss(logits: F64, alpha: float = Z_LOSS_ALPHA) -> F64:
    """Per-token z-loss α·z², z = logsumexp(logits) (seed-002 §3.2.2: "adds α·[z(x)]²")."""
    return alpha * logsumexp(logits) ** 2


def z_loss_vjp(logits: F64, g: F64, alpha: float = Z_LOSS_ALPHA) -> F64:
    """VJP of :func:`z_loss`: g·2α·z·softmax(u), since ∂z/∂u = softmax(u)."""
    return (g * 2.0 * alpha * logsumexp(logits))[..., None] * softmax(logits)

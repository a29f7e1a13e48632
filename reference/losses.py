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


IGNORE_INDEX = -100


def valid_tokens(targets: NDArray[np.int64], ignore_index: int = IGNORE_INDEX) -> NDArray[np.bool_]:
    """The tokens that count towards the loss: those whose target is not ``ignore_index``."""
    return np.asarray(targets) != ignore_index


def cross_entropy_mean(logits: F64, targets: NDArray[np.int64], ignore_index: int = IGNORE_INDEX) -> F64:
    """Mean cross-entropy over the valid tokens only: Σ_{t valid} (z_t − u_t,target) / #valid, a 0-d array.

    Ignored tokens (target == ignore_index, which may be any integer, a vocabulary id included) add nothing
    to the sum *and* nothing to the count. With no valid token the mean is undefined (NaN here).
    """
    valid = valid_tokens(targets, ignore_index)
    safe = np.where(valid, targets, 0)
    per_token = np.where(valid, cross_entropy(logits, safe), 0.0)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.asarray(per_token.sum() / valid.sum())


def cross_entropy_mean_vjp(logits: F64, targets: NDArray[np.int64], g: F64, ignore_index: int = IGNORE_INDEX) -> F64:
    """VJP of :func:`cross_entropy_mean`: (g/#valid)·(softmax(u) − onehot) on valid rows, 0 on ignored rows."""
    valid = valid_tokens(targets, ignore_index)
    safe = np.where(valid, targets, 0)
    coef = np.where(valid, float(np.asarray(g)) / max(int(valid.sum()), 1), 0.0)
    return cross_entropy_vjp(logits, safe, coef)


def softcap(logits: F64, cap: float) -> F64:
    """Logit soft-capping c·tanh(u/c) (seed-002 §3.2.2: "the tanh clamps extreme logits softly")."""
    return cap * np.tanh(logits / cap)


def softcap_z_loss(logits: F64, alpha: float = Z_LOSS_ALPHA, cap: float = 30.0) -> F64:
    """z-loss of soft-capped logits: α·z(c·tanh(u/c))², per token (soft-capping first, as Gemma 2's final
    logits and Liger-Kernel's fused loss do)."""
    return z_loss(softcap(logits, cap), alpha)


def softcap_z_loss_vjp(logits: F64, g: F64, alpha: float = Z_LOSS_ALPHA, cap: float = 30.0) -> F64:
    """VJP of :func:`softcap_z_loss`: g·2α·z·softmax(ũ)·(1 − tanh²(u/c)), ũ the capped logits."""
    t = np.tanh(logits / cap)
    return z_loss_vjp(cap * t, g, alpha) * (1.0 - t * t)

"""The training losses as trainers compute them from the last hidden state: the LM head's projection fused
with the cross-entropy (what fused-linear-cross-entropy kernels compute without storing the logits), and the
z-loss reduced over the tokens that carry a target. Each with its hand-written VJP.

seed-000 "The residual stream" (a final normalization and the LM head turn the stream into next-token
logits); seed-002 §3.2.2 "QK-Norm and Stability Interventions" (the output softmax, z its log-normaliser,
z-loss α·z²).
"""

from __future__ import annotations

from typing import Literal

import numpy as np
from numpy.typing import NDArray

from transformer_conformance.reference.losses import (
    IGNORE_INDEX,
    Z_LOSS_ALPHA,
    cross_entropy,
    cross_entropy_vjp,
    logsumexp,
    valid_tokens,
    z_loss_vjp,
)

F64 = NDArray[np.float64]
I64 = NDArray[np.int64]

Reduction = Literal["mean", "none"]
#: the mean over no valid token: NaN (0/0, as torch's F.cross_entropy) or 0 (as Liger-Kernel's kernels)
AllIgnored = Literal["nan", "zero"]
#: the reductions of linear_cross_entropy
REDUCTIONS: tuple[str, ...] = ("mean", "none")


def linear_logits(x: F64, weight: F64, bias: F64) -> F64:
    """The LM head's logits u = x·Wᵀ + b: x (N, H), weight (V, H) as a linear layer stores it, bias (V,)."""
    return x @ weight.T + bias


def _masked(targets: I64, ignore_index: int) -> tuple[NDArray[np.bool_], I64]:
    valid = valid_tokens(targets, ignore_index)
    return valid, np.where(valid, targets, 0)


def _mean(per_token: F64, valid: NDArray[np.bool_], all_ignored: AllIgnored) -> F64:
    n = int(valid.sum())
    if n == 0:
        return np.asarray(np.nan if all_ignored == "nan" else 0.0)
    return np.asarray(per_token.sum() / n)


def linear_cross_entropy(
    x: F64,
    weight: F64,
    bias: F64,
    targets: I64,
    ignore_index: int = IGNORE_INDEX,
    reduction: Reduction = "mean",
    all_ignored: AllIgnored = "nan",
) -> F64:
    """Cross-entropy z − u_target of the logits u = x·Wᵀ + b (seed-002 §3.2.2: the output softmax, z its
    log-normaliser). ``reduction`` "none": per token, (N,), 0 on ignored tokens; "mean": Σ over valid tokens
    / #valid, a 0-d array (with no valid token: NaN or 0, ``all_ignored``)."""
    valid, safe = _masked(targets, ignore_index)
    per_token = np.where(valid, cross_entropy(linear_logits(x, weight, bias), safe), 0.0)
    return per_token if reduction == "none" else _mean(per_token, valid, all_ignored)


def linear_cross_entropy_vjp(
    x: F64,
    weight: F64,
    bias: F64,
    targets: I64,
    g: F64,
    ignore_index: int = IGNORE_INDEX,
    reduction: Reduction = "mean",
) -> tuple[F64, F64, F64]:
    """(∂L/∂x, ∂L/∂W, ∂L/∂b) by the chain rule through u = x·Wᵀ + b: with D = ∂L/∂u = c_t·(softmax(u) − onehot)
    per row (c_t = g_t for "none", g/#valid for "mean"; 0 on ignored rows), ∂x = D·W, ∂W = Dᵀ·x, ∂b = Σ_t D_t.
    ∂W sums every valid token's own row of D: each scaled by its own c_t."""
    valid, safe = _masked(targets, ignore_index)
    n = max(int(valid.sum()), 1)
    coef = np.where(valid, g if reduction == "none" else float(np.asarray(g)) / n, 0.0)
    d = cross_entropy_vjp(linear_logits(x, weight, bias), safe, np.asarray(coef, dtype=np.float64))
    return d @ weight, d.T @ x, d.sum(axis=0)


def z_loss_mean(
    logits: F64,
    targets: I64,
    alpha: float = Z_LOSS_ALPHA,
    ignore_index: int = IGNORE_INDEX,
    all_ignored: AllIgnored = "nan",
) -> F64:
    """The z-loss term of a training objective: Σ over valid tokens of α·z² / #valid, a 0-d array
    (seed-002 §3.2.2: "adds α·[z(x)]²"; reduced as the cross-entropy it is added to: ignored tokens neither
    summed nor counted)."""
    valid = valid_tokens(targets, ignore_index)
    per_token = np.where(valid, alpha * logsumexp(logits) ** 2, 0.0)
    return _mean(per_token, valid, all_ignored)


def z_loss_mean_vjp(
    logits: F64, targets: I64, g: F64, alpha: float = Z_LOSS_ALPHA, ignore_index: int = IGNORE_INDEX
) -> F64:
    """VJP of :func:`z_loss_mean`: (g/#valid)·2α·z·softmax(u) on valid rows, 0 on ignored rows."""
    valid = valid_tokens(targets, ignore_index)
    coef = np.where(valid, float(np.asarray(g)) / max(int(valid.sum()), 1), 0.0)
    return z_loss_vjp(logits, coef, alpha)

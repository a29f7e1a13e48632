"""The SwiGLU MLP, its VJP, and the 8d/3 hidden-width rule.

seed-000 §The MLP block; seed-002 §3.1.1, §3.3.1, §3.3.2.
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import NDArray

F64 = NDArray[np.float64]


def sigmoid(a: F64) -> F64:
    """σ(a) = 1/(1 + e^(−a)), evaluated without overflow for large |a|."""
    e = np.exp(-np.abs(a))
    return np.where(a >= 0, 1.0 / (1.0 + e), e / (1.0 + e))


def silu(a: F64) -> F64:
    """SiLU (Swish) = a·σ(a) (seed-002 §3.3.1: "Swish(x) = x·σ(x)")."""
    return a * sigmoid(a)


def swiglu_mlp(x: F64, w1: F64, w3: F64, w2: F64) -> F64:
    """SwiGLU(x) = W₂·(SiLU(W₁x) ⊙ W₃x), no biases (seed-000 §The MLP block).

    Row-vector form: x (..., d), w1 and w3 (d, h), w2 (h, d): (SiLU(x@w1) ⊙ (x@w3)) @ w2.
    """
    return (silu(x @ w1) * (x @ w3)) @ w2


def swiglu_mlp_vjp(x: F64, w1: F64, w3: F64, w2: F64, g: F64) -> tuple[F64, F64, F64, F64]:
    """VJP of :func:`swiglu_mlp`: returns (∂L/∂x, ∂L/∂W₁, ∂L/∂W₃, ∂L/∂W₂).

    With a = x@W₁, b = x@W₃, s = SiLU(a), h = s⊙b and SiLU'(a) = σ(a)(1 + a(1 − σ(a))):
    ∂h = g@W₂ᵀ, ∂a = ∂h⊙b⊙SiLU'(a), ∂b = ∂h⊙s, ∂x = ∂a@W₁ᵀ + ∂b@W₃ᵀ,
    ∂W₁ = xᵀ∂a, ∂W₃ = xᵀ∂b, ∂W₂ = hᵀg (leading axes flattened).
    """
    a, b = x @ w1, x @ w3
    sig = sigmoid(a)
    s = a * sig
    h = s * b
    dh = g @ w2.T
    da = dh * b * sig * (1.0 + a * (1.0 - sig))
    db = dh * s
    dx = da @ w1.T + db @ w3.T
    x2 = x.reshape(-1, x.shape[-1])

    def outer(u: F64, v: F64) -> F64:
        return u.reshape(-1, u.shape[-1]).T @ v.reshape(-1, v.shape[-1])

    return dx, x2.T @ da.reshape(-1, da.shape[-1]), x2.T @ db.reshape(-1, db.shape[-1]), outer(h, g)


def swiglu_hidden_dim(d: int, multiple_of: int = 256, ffn_dim_multiplier: float | None = None) -> int:
    """Hidden width of a SwiGLU MLP parameter-matched to a 4d two-matrix MLP.

    h = ⌊2·4d/3⌋ = ⌊8d/3⌋, optionally scaled by ``ffn_dim_multiplier``, then rounded *up* to a
    multiple of ``multiple_of``. seed-002 §3.3.1: d = 4096 → 11008; §3.3.1 interview answer:
    d = 8192 → 21888 with multiple 128.
    """
    hidden = (8 * d) // 3
    if ffn_dim_multiplier is not None:
        hidden = int(ffn_dim_multiplier * hidden)
    return multiple_of * math.ceil(hidden / multiple_of)


def mlp_param_count(d: int, hidden: int, gated: bool) -> int:
    """Weights of a bias-free MLP: 3·d·h when gated (W₁, W₃, W₂), else 2·d·h (seed-002 §3.1.1)."""
    return (3 if gated else 2) * d * hidden

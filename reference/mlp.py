"""The MLP family: ReLU, GELU (erf, tanh and sigmoid forms), squared ReLU, and the gated variants SwiGLU, GeGLU
and ReGLU, all bias-free, with their VJPs; and the hidden width derived from parameter matching.

seed-002 §3.3.1 "ReLU, GeLU, and SwiGLU Families", §3.3.2 "Why GLU Variants Dominate Production Models";
seed-000 §The MLP block.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
from numpy.typing import NDArray

from transformer_conformance.reference.swiglu import sigmoid

F64 = NDArray[np.float64]

_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
GELU_TANH_CUBIC = 0.044715
#: seed-002 §3.3.1: "In code it is approximated as x·σ(1.702x)".
GELU_SIGMOID_SLOPE = 1.702

_erf = np.vectorize(math.erf, otypes=[np.float64])


def relu(a: F64) -> F64:
    """ReLU(x) = max(0, x) (seed-002 §3.3.1)."""
    return np.maximum(a, 0.0)


def gelu_erf(a: F64) -> F64:
    """GELU(x) = x·Φ(x) = ½x(1 + erf(x/√2)), Φ the standard normal CDF (seed-002 §3.3.1)."""
    return 0.5 * a * (1.0 + _erf(a / math.sqrt(2.0)))


def gelu_tanh(a: F64) -> F64:
    """The tanh form: ½x(1 + tanh(√(2/π)(x + 0.044715x³))) (GPT-2's "gelu_new", torch's approximate="tanh")."""
    return 0.5 * a * (1.0 + np.tanh(_SQRT_2_OVER_PI * (a + GELU_TANH_CUBIC * a**3)))


def gelu_sigmoid(a: F64) -> F64:
    """The seed's own form x·σ(1.702x) (seed-002 §3.3.1), a distinct function from both GELUs above."""
    return a * sigmoid(GELU_SIGMOID_SLOPE * a)


def relu_squared(a: F64) -> F64:
    """ReLU²(x) = max(0, x)² (seed-002 §3.3.2, Nemotron-4)."""
    return np.maximum(a, 0.0) ** 2


def silu(a: F64) -> F64:
    """Swish(x) = x·σ(x) (seed-002 §3.3.1)."""
    return a * sigmoid(a)


def _d_gelu_erf(a: F64) -> F64:
    return 0.5 * (1.0 + _erf(a / math.sqrt(2.0))) + a * np.exp(-0.5 * a * a) / math.sqrt(2.0 * math.pi)


def _d_gelu_tanh(a: F64) -> F64:
    t = np.tanh(_SQRT_2_OVER_PI * (a + GELU_TANH_CUBIC * a**3))
    return 0.5 * (1.0 + t) + 0.5 * a * (1.0 - t * t) * _SQRT_2_OVER_PI * (1.0 + 3.0 * GELU_TANH_CUBIC * a * a)


def _d_gelu_sigmoid(a: F64) -> F64:
    s = sigmoid(GELU_SIGMOID_SLOPE * a)
    return s + GELU_SIGMOID_SLOPE * a * s * (1.0 - s)


def _d_silu(a: F64) -> F64:
    s = sigmoid(a)
    return s * (1.0 + a * (1.0 - s))


#: activation name -> (f, f'). ReLU's derivative at 0 is taken as 0, as every framework does.
ACTIVATIONS: dict[str, tuple[Callable[[F64], F64], Callable[[F64], F64]]] = {
    "relu": (relu, lambda a: (a > 0).astype(np.float64)),
    "gelu_erf": (gelu_erf, _d_gelu_erf),
    "gelu_tanh": (gelu_tanh, _d_gelu_tanh),
    "gelu_sigmoid": (gelu_sigmoid, _d_gelu_sigmoid),
    "relu_squared": (relu_squared, lambda a: 2.0 * np.maximum(a, 0.0)),
    "silu": (silu, _d_silu),
}
#: Activations of the two-matrix MLP and gates of the three-matrix GLU MLP the suite checks.
MLP_ACTIVATIONS = ("relu", "gelu_erf", "gelu_tanh", "gelu_sigmoid", "relu_squared")
GLU_ACTIVATIONS = ("silu", "gelu_erf", "gelu_tanh", "gelu_sigmoid", "relu")  # SwiGLU, GeGLU (three forms), ReGLU


def _outer(u: F64, w: F64) -> F64:
    """uᵀ·w with the leading axes of both flattened: a weight's gradient summed over tokens."""
    return u.reshape(-1, u.shape[-1]).T @ w.reshape(-1, w.shape[-1])


def mlp(x: F64, w_in: F64, w_out: F64, activation: str) -> F64:
    """act(x·W_in)·W_out, no biases (seed-002 §3.3.1: "Drop bias terms everywhere")."""
    return ACTIVATIONS[activation][0](x @ w_in) @ w_out


def mlp_vjp(x: F64, w_in: F64, w_out: F64, activation: str, g: F64) -> tuple[F64, F64, F64]:
    """VJP of :func:`mlp`: with a = x·W_in, h = act(a): ∂a = (g·W_outᵀ) ⊙ act'(a); (∂x, ∂W_in, ∂W_out) =
    (∂a·W_inᵀ, xᵀ∂a, hᵀg)."""
    f, df = ACTIVATIONS[activation]
    a = x @ w_in
    da = (g @ w_out.T) * df(a)
    return da @ w_in.T, _outer(x, da), _outer(f(a), g)


def glu_mlp(x: F64, w1: F64, w3: F64, w2: F64, activation: str) -> F64:
    """(act(x·W₁) ⊙ x·W₃)·W₂, no biases: SwiGLU (silu), GeGLU (a GELU), ReGLU (relu) (seed-002 §3.3.1–3.3.2)."""
    return (ACTIVATIONS[activation][0](x @ w1) * (x @ w3)) @ w2


def glu_mlp_vjp(x: F64, w1: F64, w3: F64, w2: F64, activation: str, g: F64) -> tuple[F64, F64, F64, F64]:
    """VJP of :func:`glu_mlp`: with a = xW₁, b = xW₃, s = act(a): ∂h = gW₂ᵀ, ∂a = ∂h ⊙ b ⊙ act'(a),
    ∂b = ∂h ⊙ s; returns (∂x, ∂W₁, ∂W₃, ∂W₂)."""
    f, df = ACTIVATIONS[activation]
    a, b = x @ w1, x @ w3
    s = f(a)
    dh = g @ w2.T
    da, db = dh * b * df(a), dh * s
    return da @ w1.T + db @ w3.T, _outer(x, da), _outer(x, db), _outer(s * b, g)


def ffn_hidden_dim(
    d: int, base_ratio: float = 4, gated: bool = True, multiple_of: int = 1, ffn_dim_multiplier: float | None = None
) -> int:
    """The hidden width d_ff of an MLP sized against a two-matrix MLP of width base_ratio·d.

    Parameter matching (seed-002 §3.3.2: "Always derive from parameter matching, not from memorizing '8/3'"):
    three d×h matrices hold as many weights as two d×(r·d) ones when h = 2rd/3, so a gated MLP gets
    h = ⌊2·r·d/3⌋ (r = 4 gives ⌊8d/3⌋; r = 8 gives ⌊16d/3⌋), a two-matrix one h = ⌊r·d⌋. Then, as LLaMA's
    model code does, h = ⌊ffn_dim_multiplier·h⌋ and h is rounded *up* to a multiple of ``multiple_of``
    (LLaMA-2 70B: d = 8192, multiplier 1.3, multiple 4096 → 28672).
    """
    num = 2 * base_ratio * d if gated else base_ratio * d
    hidden = math.floor(num / 3) if gated else math.floor(num)
    if gated and float(num).is_integer():
        hidden = int(num) // 3  # exact for integer 2rd, where float division could land on the wrong side
    if ffn_dim_multiplier is not None:
        hidden = int(ffn_dim_multiplier * hidden)
    return multiple_of * -(-hidden // multiple_of)


def mlp_weight_count(d: int, hidden: int, gated: bool) -> int:
    """Weights of a bias-free MLP: 3·d·h gated, 2·d·h otherwise (seed-002 §3.1.1, §3.3.1)."""
    return (3 if gated else 2) * d * hidden

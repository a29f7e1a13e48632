"""The contract's operations written as MLX calls: ``mx.fast`` kernels where MLX has them, ``mlx.nn`` for the
activations and the cross-entropy, and ``mlx.core`` for what model code on MLX writes itself (z-loss, the MLP
matrix products, the mean over non-ignored tokens). Each function takes and returns ``mx.array``; the adapter
(adapters/mlx/adapter.py) converts NumPy arrays, and differentiates these functions with ``mx.vjp``.

The statements each operation implements are those of the seeds as the contract states them
(docs/adapter-contract.md, "Operations"; docs/seeds.md).
"""

from __future__ import annotations

import functools
import importlib.util
import math
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any, Literal

import mlx.core as mx
import mlx.nn as nn

#: The ε MLX's own norm modules default to (``mlx.nn.RMSNorm``, ``mlx.nn.LayerNorm``: 1e-5), used for eps=None:
#: the fast kernels take ε as a required argument.
EPS_DEFAULT = 1e-5

#: The contract's MLP activations as ``mlx.nn`` provides them.
ACTIVATIONS: dict[str, Callable[[mx.array], mx.array]] = {
    "relu": nn.relu,
    "gelu_erf": nn.gelu,
    "gelu_tanh": nn.gelu_approx,
    "gelu_sigmoid": nn.gelu_fast_approx,  # x·σ(1.702x)
    "relu_squared": nn.relu2,
    "silu": nn.silu,
}


class Unsupported(ValueError):
    """A parameter value MLX's kernel cannot express: refused, never approximated."""


def _eps(eps: float | None) -> float:
    return EPS_DEFAULT if eps is None else float(eps)


def rms_norm(x: mx.array, weight: mx.array, eps: float | None = None) -> mx.array:
    return mx.fast.rms_norm(x, weight, _eps(eps))


def layer_norm(x: mx.array, weight: mx.array, bias: mx.array, eps: float | None = None) -> mx.array:
    return mx.fast.layer_norm(x, weight, bias, _eps(eps))


def fast_rope(
    x: mx.array, positions: mx.array, base: float, rotary_dim: int | None, traditional: bool, scale: float = 1.0
) -> mx.array:
    """``mx.fast.rope`` at arbitrary positions: each position is one sequence of length 1 whose ``offset`` is
    that position (the kernel's per-sequence offset vector, as batched decoding uses it), so positions need not
    be contiguous. ``traditional`` rotates the pairs (2i, 2i+1), otherwise the pairs (i, i + d/2); ``scale``
    multiplies the positions (position interpolation); ``dims`` is the rotated width."""
    shape = x.shape
    t, d = shape[-2], shape[-1]
    rd = d if rotary_dim is None else int(rotary_dim)
    lead = math.prod(shape[:-2])
    # (..., T, d) -> (T, lead, 1, d): T sequences of one token each, offset = its position
    per_pos = x.reshape(lead, t, d).transpose(1, 0, 2).reshape(t, lead, 1, d)
    out = mx.fast.rope(
        per_pos, rd, traditional=traditional, base=float(base), scale=float(scale), offset=positions.astype(mx.int32)
    )
    return out.reshape(t, lead, d).transpose(1, 0, 2).reshape(shape)


def rope_op(traditional: bool) -> Callable[..., mx.array]:
    def rope(x: mx.array, positions: mx.array, base: float = 10000.0, rotary_dim: int | None = None) -> mx.array:
        return fast_rope(x, positions, base, rotary_dim, traditional)

    return rope


def rope_scaled_op(traditional: bool) -> Callable[..., mx.array]:
    def rope_scaled(
        x: mx.array,
        positions: mx.array,
        base: float = 10000.0,
        rotary_dim: int | None = None,
        scaling: dict[str, Any] | None = None,
    ) -> mx.array:
        if scaling is None:
            return fast_rope(x, positions, base, rotary_dim, traditional)
        if scaling.get("type") != "linear":
            raise Unsupported(f"mx.fast.rope has no {scaling.get('type')!r} scaling (only linear: its scale)")
        # position interpolation: MLX's scale multiplies the positions (mlx-lm's linear rope_scaling: 1/factor)
        return fast_rope(x, positions, base, rotary_dim, traditional, scale=1.0 / float(scaling["factor"]))

    return rope_scaled


def _sdpa(q: mx.array, k: mx.array, v: mx.array, causal: bool, scale: float) -> mx.array:
    """``mx.fast.scaled_dot_product_attention``: grouped KV heads read natively (not tiled), ``mask="causal"``
    aligned lower-right (the last query with the last key)."""
    return mx.fast.scaled_dot_product_attention(q, k, v, scale=scale, mask="causal" if causal else None)


def _softcapped(q: mx.array, k: mx.array, v: mx.array, causal: bool, scale: float, cap: float) -> mx.array:
    """Soft-capped attention as MLX model code writes it (mlx-lm's Gemma 2; the fast kernel has no cap), in the
    input dtype as the kernel's own CPU path is: scores (q·scale) kᵀ, c·tanh(scores / c), the causal mask
    lower-right, ``mx.softmax(precise=True)`` (float32 inside), the product with v; KV heads repeated for the
    query groups."""
    groups = q.shape[1] // k.shape[1]
    if groups > 1:
        k, v = mx.repeat(k, groups, axis=1), mx.repeat(v, groups, axis=1)
    scores = (q * scale) @ k.swapaxes(-1, -2)
    scores = mx.tanh(scores / cap) * cap
    if causal:
        lq, lk = q.shape[2], k.shape[2]
        keep = mx.arange(lk)[None, :] <= (mx.arange(lq)[:, None] + (lk - lq))
        scores = mx.where(keep, scores, mx.array(-math.inf, dtype=scores.dtype))
    return mx.softmax(scores, axis=-1, precise=True) @ v


def attention(
    q: mx.array,
    k: mx.array,
    v: mx.array,
    causal: bool = False,
    softcap: float | None = None,
    scale: float | None = None,
) -> mx.array:
    s = 1.0 / math.sqrt(q.shape[-1]) if scale is None else float(scale)
    if softcap:
        return _softcapped(q, k, v, bool(causal), s, float(softcap))
    return _sdpa(q, k, v, bool(causal), s)


#: the name mlx-lm's ``mlx_lm/models/base.py`` is loaded under (not ``mlx_lm``: see :func:`mlx_lm_base`)
MLX_LM_BASE = "transformer_conformance.adapters.mlx._mlx_lm_base"


@functools.cache
def mlx_lm_base() -> ModuleType:
    """mlx-lm's ``mlx_lm/models/base.py`` (``create_causal_mask``, the masks its models and KV caches hand
    ``mx.fast.scaled_dot_product_attention``), run from the installed file itself. The file imports only
    ``mlx``; importing it as ``mlx_lm.models.base`` would run ``mlx_lm/__init__.py``, which imports its
    generation and conversion code and through it transformers and torch (seconds, and another framework in
    the process), so it is loaded on its own under :data:`MLX_LM_BASE`."""
    spec = importlib.util.find_spec("mlx_lm")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("the mlx adapter's windowed masks are mlx-lm's: install mlx-lm (the project's mlx extra)")
    path = Path(next(iter(spec.submodule_search_locations))) / "models" / "base.py"
    file_spec = importlib.util.spec_from_file_location(MLX_LM_BASE, path)
    if file_spec is None or file_spec.loader is None:
        raise ImportError(f"mlx-lm's mask module {path} cannot be loaded")
    module = importlib.util.module_from_spec(file_spec)
    sys.modules[MLX_LM_BASE] = module  # dataclasses look their class's module up while it executes
    file_spec.loader.exec_module(module)
    return module


def window_mask(lq: int, lk: int, window: int) -> mx.array:
    """The boolean (L_q, L_k) mask of a causal sliding window of ``window`` tokens, as mlx-lm forms it:
    ``create_causal_mask(N=L_q, offset=L_k − L_q, window_size=W)``, what its KV caches' ``make_mask`` return
    for a windowed layer (gpt-oss's, Gemma's sliding layers). Query i is token i + L_k − L_q (bottom-right).
    Causal cases keep L_q ≤ L_k."""
    lq, lk = int(lq), int(lk)
    if lq > lk:
        raise Unsupported(f"a causal window needs L_q ≤ L_k (a KV cache's offset), not L_q {lq} > L_k {lk}")
    mask: mx.array = mlx_lm_base().create_causal_mask(lq, lk - lq, window_size=int(window))
    return mask


def window_counts() -> Literal["inclusive", "exclusive"]:
    """What mlx-lm's window counts, read off its mask: a query at token 1 with a window of 1 sees key 0 only if
    the window counts the keys before the query's own (p − j ≤ W, "exclusive"); with p − j < W ("inclusive",
    the query's own token among the W) it sees its own alone."""
    sees_previous = bool(mlx_lm_base().create_causal_mask(1, 1, window_size=1)[0, 0].item())
    return "exclusive" if sees_previous else "inclusive"


def sliding_window_attention(
    q: mx.array,
    k: mx.array,
    v: mx.array,
    window: int,
    softcap: float | None = None,
    scale: float | None = None,
) -> mx.array:
    """``mx.fast.scaled_dot_product_attention`` with mlx-lm's window mask (a boolean array: the kernel fills the
    masked scores with the dtype's lowest value). The kernel has no soft-cap: only softcap None is declared."""
    if softcap:
        raise Unsupported("mx.fast.scaled_dot_product_attention has no soft-cap; the mlx adapter declares none only")
    s = 1.0 / math.sqrt(q.shape[-1]) if scale is None else float(scale)
    mask = window_mask(q.shape[2], k.shape[2], window)
    return mx.fast.scaled_dot_product_attention(q, k, v, scale=s, mask=mask)


def sink_attention(
    q: mx.array,
    k: mx.array,
    v: mx.array,
    sinks: mx.array,
    causal: bool = True,
    window: int | None = None,
    scale: float | None = None,
) -> mx.array:
    """``mx.fast.scaled_dot_product_attention(..., sinks=)`` as mlx-lm's gpt-oss calls it: the sinks (H_q,) in the
    input dtype, prepended to each row of scores before the softmax and sliced off after it; ``mask="causal"``
    for causal attention, mlx-lm's window mask for a window (a window is causal), none otherwise."""
    s = 1.0 / math.sqrt(q.shape[-1]) if scale is None else float(scale)
    mask: mx.array | str | None = None
    if window is not None:
        mask = window_mask(q.shape[2], k.shape[2], window)
    elif causal:
        mask = "causal"
    return mx.fast.scaled_dot_product_attention(q, k, v, scale=s, mask=mask, sinks=sinks)


def has_sinks() -> bool:
    """Whether this MLX's ``mx.fast.scaled_dot_product_attention`` takes ``sinks`` (its signature, as its
    docstring states it: the binding has no Python signature)."""
    signature = (mx.fast.scaled_dot_product_attention.__doc__ or "").split("\n", 1)[0]
    return "sinks:" in signature


def swiglu_mlp(x: mx.array, w1: mx.array, w3: mx.array, w2: mx.array) -> mx.array:
    """mlx-lm's LLaMA MLP: ``down(silu(gate(x)) * up(x))`` with ``nn.silu``."""
    return (nn.silu(x @ w1) * (x @ w3)) @ w2


def mlp(x: mx.array, w_in: mx.array, w_out: mx.array, activation: str = "gelu_erf") -> mx.array:
    return ACTIVATIONS[activation](x @ w_in) @ w_out


def glu_mlp(x: mx.array, w1: mx.array, w3: mx.array, w2: mx.array, activation: str = "silu") -> mx.array:
    return (ACTIVATIONS[activation](x @ w1) * (x @ w3)) @ w2


def cross_entropy(logits: mx.array, targets: mx.array) -> mx.array:
    return nn.losses.cross_entropy(logits, targets, reduction="none")


def cross_entropy_mean(logits: mx.array, targets: mx.array, ignore_index: int = -100) -> mx.array:
    """mlx-lm's training loss: the per-token ``nn.losses.cross_entropy`` masked to the non-ignored tokens,
    summed and divided by their count (``nn.losses`` has no ignore_index). An ignored target is replaced by
    0 before the gather (any valid index: its loss is multiplied by 0)."""
    keep = targets != ignore_index
    ce = nn.losses.cross_entropy(logits, mx.where(keep, targets, 0), reduction="none")
    mask = keep.astype(ce.dtype)
    return (ce * mask).sum() / mask.sum()


def z_loss(logits: mx.array, alpha: float = 1e-4) -> mx.array:
    # in float32, as trainers write it: z² in float16 overflows once |z| > 256 (α·z² would not)
    return (alpha * mx.square(mx.logsumexp(logits.astype(mx.float32), axis=-1))).astype(logits.dtype)


def softcap_z_loss(logits: mx.array, alpha: float = 1e-4, cap: float = 30.0) -> mx.array:
    return z_loss(mx.tanh(logits / cap) * cap, alpha)

"""Pallas's FlashAttention kernel (``jax.experimental.pallas.ops.gpu.attention.mha``) under the interpreter, as
the contract's ``attention``: layout, grouped heads, head widths and block sizes adapted as a caller of the
kernel adapts them (the adapter's docstring says how); gradients by JAX's autodiff through that adaptation and
the kernel's custom VJP."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from functools import cache
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

#: the kernel's default block sizes (BlockSizes.get_default()): forward queries and keys, backward both
FORWARD_BLOCK = 128
BACKWARD_BLOCK = 32


def _divisor(n: int, cap: int) -> int:
    """The largest block of at most ``cap`` that splits ``n`` into whole blocks (``n`` itself when n ≤ cap, as
    the kernel's own ``min(block, n)``)."""
    return max(b for b in range(1, min(n, cap) + 1) if n % b == 0)


def blocks(lq: int, lk: int) -> tuple[int, int, int, int, int, int]:
    """Block sizes (block_q, block_k, block_q_dkv, block_kv_dkv, block_q_dq, block_kv_dq) for L_q queries and L_k
    keys: whole blocks everywhere, and as many query blocks as key blocks in the backward (the kernel requires
    it): the fewest common blocks that bring both under 32, or else gcd(L_q, L_k) of them. With L_q = L_k a
    multiple of 128 these are the kernel's defaults."""
    g = math.gcd(lq, lk)
    common = [c for c in range(1, g + 1) if g % c == 0]
    fits = [c for c in common if lq // c <= BACKWARD_BLOCK and lk // c <= BACKWARD_BLOCK]
    c = fits[0] if fits else common[-1]
    return _divisor(lq, FORWARD_BLOCK), _divisor(lk, FORWARD_BLOCK), lq // c, lk // c, lq // c, lk // c


@cache
def _fns(
    group: int, d: int, dv: int, lq: int, lk: int, scale: float, causal: bool
) -> tuple[Callable[..., Any], Callable[..., Any]]:
    """The jitted forward and VJP, on the contract's (B, H, L, D) arrays, of one configuration of ``mha`` (its
    options after the arrays: segment_ids, sm_scale, causal, block_sizes, backward_pass_impl, num_warps,
    num_stages, grid, interpret)."""
    from jax.experimental.pallas.ops.gpu import attention

    bq, bk, bq_dkv, bkv_dkv, bq_dq, bkv_dq = blocks(lq, lk)
    sizes = attention.BlockSizes(
        block_q=bq, block_k=bk, block_q_dkv=bq_dkv, block_kv_dkv=bkv_dkv, block_q_dq=bq_dq, block_kv_dq=bkv_dq
    )
    width = max(d, dv)

    def run(q: jax.Array, k: jax.Array, v: jax.Array) -> jax.Array:
        k, v = jnp.repeat(k, group, axis=1), jnp.repeat(v, group, axis=1)  # KV head h // group for query head h
        pad = [(0, 0)] * 3
        q, k = (jnp.pad(a, [*pad, (0, width - d)]) for a in (q, k))
        v = jnp.pad(v, [*pad, (0, width - dv)])
        q, k, v = (jnp.swapaxes(a, 1, 2) for a in (q, k, v))  # (B, L, H, D), the kernel's layout
        out = attention.mha(q, k, v, None, scale, causal, sizes, "triton", None, 2, None, True)
        return jnp.swapaxes(out, 1, 2)[..., :dv]

    def vjp(q: jax.Array, k: jax.Array, v: jax.Array, cot: jax.Array) -> tuple[jax.Array, ...]:
        return tuple(jax.vjp(run, q, k, v)[1](cot))

    return jax.jit(run), jax.jit(vjp)


def _configured(inputs: Mapping[str, np.ndarray], params: Mapping[str, Any]) -> tuple[Any, ...]:
    if params.get("softcap") is not None:
        raise ValueError("Pallas's mha kernel has no soft-capping (the adapter declares softcap 'none' only)")
    q, k, v = (jnp.asarray(inputs[n]) for n in ("q", "k", "v"))
    d, scale = q.shape[-1], params.get("scale")
    scale = 1.0 / math.sqrt(d) if scale is None else float(scale)
    fns = _fns(q.shape[1] // k.shape[1], d, v.shape[-1], q.shape[2], k.shape[2], scale, bool(params.get("causal")))
    return fns, (q, k, v)


def attention_forward(inputs: Mapping[str, np.ndarray], params: Mapping[str, Any]) -> np.ndarray:
    (fwd, _), arrays = _configured(inputs, params)
    return np.asarray(fwd(*arrays))


def attention_vjp(
    inputs: Mapping[str, np.ndarray], params: Mapping[str, Any], cotangent: np.ndarray
) -> dict[str, np.ndarray]:
    (_, vjp), arrays = _configured(inputs, params)
    dq, dk, dv = vjp(*arrays, jnp.asarray(cotangent))
    return {"q": np.asarray(dq), "k": np.asarray(dk), "v": np.asarray(dv)}

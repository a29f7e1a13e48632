"""JAX as a candidate: jax.nn and jax.numpy applied to arrays in the dtype under test, on the CPU.

Where JAX has the operation it is used as it is: ``jax.nn.standardize`` for both norms (RMSNorm as
standardize with the mean given as 0), ``jax.nn.silu``, ``jax.nn.log_softmax``, ``jax.nn.logsumexp``.
RoPE has no JAX function; it is written in jax.numpy as model code writes it (half-split layout, angles
and rotation in float32, one rounding). Sliding-window attention is ``jax.nn.dot_product_attention`` as a
JAX user calls it: ``is_causal=True`` with ``local_window_size=(W, 0)`` (``implementation="xla"``), grouped
KV heads passed as they are (jax.nn takes H_q a multiple of H_kv; query head h reads KV head h // G), in its
(B, L, H, D) layout, transposed in and out. Every function is jitted, and its gradient is ``jax.vjp`` of the
same function.

Declared, because measured on jax 0.10.2 / XLA CPU:

* elementwise bfloat16 and float16 operations round to the input dtype after *each* primitive, jitted
  or not (x·y + x rounds twice); reductions (``jnp.sum``, ``jnp.mean``) and matrix products accumulate
  in float32 and round once. So every operation built from several primitives stores its intermediates
  in the input dtype: ``unfused`` for all but RoPE;
* ``jax.nn.standardize`` computes the variance in one pass, mean(x²) − μ², clipped at 0 (its default
  ``algorithm="fast"``), and its ε defaults to 1e-5 — for RMSNorm too;
* a Python scalar (ε, α) meets a bfloat16 array as a weakly typed value: it is rounded to bfloat16;
* sums inside gradients (the transpose of a broadcast: the weight and bias gradients of the norms) are
  ``lax`` reductions that accumulate in the input dtype, unlike ``jnp.sum``, which upcasts;
* XLA on the CPU flushes subnormal results to zero;
* ``local_window_size=(W, 0)`` lets query i see keys i − W ≤ j ≤ i, W keys before its own (W = 1: two keys):
  ``sliding_window="exclusive"``; ``is_causal=True`` is ``jnp.tril`` of the (L_q, L_k) logits and the window
  compares the row and column indices, so with L_q < L_k query i is token i: ``causal_alignment="top_left"``
  (the only operation it governs here is ``sliding_window_attention``);
* ``jax.nn.dot_product_attention`` has no soft-cap (softcap ``none`` only) and takes one head width for q, k
  and v: the narrower is padded to the wider with zeros (exact: zero terms of the dot products, the padded
  columns sliced off), the default scale taken from q's own width. Jitted on the CPU it does not run in
  float16 (its explicit dot algorithm F16_F16_F32 fails to lower, past its eager try/except fallback), so
  float16 is not declared; in bfloat16 its 1-element products do not compile (expectations/jax.toml).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from functools import cache
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from transformer_conformance.adapters.contract import OPS, Capability, Conventions, per_shape
from transformer_conformance.adapters.jax.compiles import backend_compiles
from transformer_conformance.adapters.versions import SUPPORTED, describe, require

jax.config.update("jax_platforms", "cpu")


def jax_rope(x: jax.Array, positions: jax.Array, base: float, rotary_dim: int | None, layout: str) -> jax.Array:
    """RoPE in jax.numpy: angles in float32, rotation in float32, one rounding to x's dtype."""
    rd = x.shape[-1] if rotary_dim is None else rotary_dim
    inv_freq = 1.0 / (base ** (jnp.arange(0, rd, 2, dtype=jnp.float32) / rd))
    angles = positions.astype(jnp.float32)[:, None] * inv_freq[None, :]
    cos, sin = jnp.cos(angles), jnp.sin(angles)
    xf = x.astype(jnp.float32)
    rot, rest = xf[..., :rd], xf[..., rd:]
    if layout == "interleaved":
        a, b = rot[..., 0::2], rot[..., 1::2]
        out = jnp.stack((a * cos - b * sin, a * sin + b * cos), axis=-1).reshape(rot.shape)
    else:
        a, b = rot[..., : rd // 2], rot[..., rd // 2 :]
        out = jnp.concatenate((a * cos - b * sin, a * sin + b * cos), axis=-1)
    return jnp.concatenate((out, rest), axis=-1).astype(x.dtype)


def _rms_norm(x: jax.Array, weight: jax.Array, eps: float | None = None) -> jax.Array:
    kw = {} if eps is None else {"epsilon": eps}
    return jax.nn.standardize(x, axis=-1, mean=0.0, **kw) * weight


def _layer_norm(x: jax.Array, weight: jax.Array, bias: jax.Array, eps: float | None = None) -> jax.Array:
    kw = {} if eps is None else {"epsilon": eps}
    return jax.nn.standardize(x, axis=-1, **kw) * weight + bias


def _swiglu_mlp(x: jax.Array, w1: jax.Array, w3: jax.Array, w2: jax.Array) -> jax.Array:
    return (jax.nn.silu(x @ w1) * (x @ w3)) @ w2


def _cross_entropy(logits: jax.Array, targets: jax.Array) -> jax.Array:
    return -jnp.take_along_axis(jax.nn.log_softmax(logits, axis=-1), targets[:, None], axis=-1)[:, 0]


def _z_loss(logits: jax.Array, alpha: float = 1e-4) -> jax.Array:
    # in float32, as JAX trainers write it (T5X's log_z of float32 logits): z² in float16 overflows past |z| = 256
    return (alpha * jax.nn.logsumexp(logits.astype(jnp.float32), axis=-1) ** 2).astype(logits.dtype)


def _rope(x: jax.Array, positions: jax.Array, base: float = 10000.0, rotary_dim: int | None = None) -> jax.Array:
    return jax_rope(x, positions, base, rotary_dim, "half")


def _sliding_window_attention(
    q: jax.Array,
    k: jax.Array,
    v: jax.Array,
    window: int,
    softcap: float | None = None,
    scale: float | None = None,
) -> jax.Array:
    if softcap is not None:
        raise ValueError("jax.nn.dot_product_attention has no soft-cap; the jax adapter declares softcap none only")
    d, dv = q.shape[-1], v.shape[-1]
    width = max(d, dv)

    def blhd(a: jax.Array) -> jax.Array:  # (B, H, L, ·) → jax.nn's (B, L, H, width)
        return jnp.swapaxes(jnp.pad(a, [(0, 0)] * 3 + [(0, width - a.shape[-1])]), 1, 2)

    out = jax.nn.dot_product_attention(
        blhd(q),
        blhd(k),
        blhd(v),
        scale=1.0 / float(np.sqrt(d)) if scale is None else scale,
        is_causal=True,
        local_window_size=(int(window), 0),
        implementation="xla",
    )
    return jnp.swapaxes(out, 1, 2)[..., :dv]


IMPL: dict[str, Callable[..., jax.Array]] = {
    "rms_norm": _rms_norm,
    "layer_norm": _layer_norm,
    "rope": _rope,
    "swiglu_mlp": _swiglu_mlp,
    "cross_entropy": _cross_entropy,
    "z_loss": _z_loss,
    "sliding_window_attention": _sliding_window_attention,
}


def llama_hidden_dim(d: int, multiple_of: int = 256, ffn_dim_multiplier: float | None = None) -> int:
    """The hidden width as LLaMA-style model code computes it: 4d, two thirds of that, rounded up."""
    hidden = int(2 * (4 * d) / 3)
    if ffn_dim_multiplier is not None:
        hidden = int(ffn_dim_multiplier * hidden)
    return multiple_of * ((hidden + multiple_of - 1) // multiple_of)


def _split(op: str, inputs: Mapping[str, np.ndarray]) -> tuple[tuple[jax.Array, ...], dict[str, jax.Array]]:
    """The floating inputs in contract order (differentiable), and the integer ones as int32 (x64 is off)."""
    spec = OPS[op]
    floats = tuple(jnp.asarray(inputs[k]) for k in spec.inputs)
    ints = {k: jnp.asarray(inputs[k].astype(np.int32)) for k in spec.int_inputs}
    return floats, ints


@cache
def _forward_fn(op: str, params: tuple[tuple[str, Any], ...]) -> Callable[..., jax.Array]:
    fn, names, kw = IMPL[op], OPS[op].inputs, dict(params)
    return jax.jit(lambda floats, ints: fn(**dict(zip(names, floats, strict=True)), **ints, **kw))


@cache
def _vjp_fn(op: str, params: tuple[tuple[str, Any], ...]) -> Callable[..., tuple[jax.Array, ...]]:
    fwd = _forward_fn(op, params)

    def grads(floats: tuple[jax.Array, ...], ints: dict[str, jax.Array], cot: jax.Array) -> tuple[jax.Array, ...]:
        _, pullback = jax.vjp(lambda *f: fwd(f, ints), *floats)
        return tuple(pullback(cot))

    return jax.jit(grads)


class JaxAdapter:
    """The built-in ``jax`` adapter (CPU)."""

    name = "jax"
    #: the releases it supports (adapters/versions.py; docs/adapters.md)
    supported = SUPPORTED["jax"]

    def __init__(self, device: str = "cpu") -> None:
        require(self.name, self.supported)
        if device != "cpu":
            raise RuntimeError(f"the jax adapter runs on the CPU only, not {device!r}")
        self.conventions = Conventions(
            rope_layout="half",
            rope_angle_dtype="float32",
            compute_dtype="float32",
            # every primitive rounds to the input dtype (measured); the norms also round x̂ before the weight
            # multiply, which "unfused" already covers
            # jax.nn.dot_product_attention casts the float32 softmax to the input dtype before P·V (source)
            unfused=frozenset({"rms_norm", "layer_norm", "swiglu_mlp", "cross_entropy", "sliding_window_attention"}),
            # the weight and bias gradients are sums over rows of a broadcast's transpose, a lax reduction
            # that accumulates in the input dtype (jnp.sum upcasts; lax.reduce does not): measured
            low_precision_sums=frozenset({"rms_norm.vjp", "layer_norm.vjp"}),
            variance="one_pass",
            # XLA CPU flushes subnormal results to zero (FTZ/DAZ): exp(-88.5) is 0 in float32
            flush_subnormals=True,
            eps_defaults={"rms_norm": 1e-5, "layer_norm": 1e-5},
            # jax.nn.dot_product_attention(is_causal=True, local_window_size=(W, 0)): query i sees keys
            # i − W ≤ j ≤ i, W before its own, and query i is token i when L_q < L_k (tril of the logits): measured
            causal_alignment="top_left",
            sliding_window="exclusive",
        )
        # what it implements (operations added to the contract later are not declared until implemented)
        self.capabilities = {op: Capability() for op in (*IMPL, "swiglu_hidden_dim")}
        # float16: "F16_F16_F32 is not supported by dot_general on CPU" under jit, for every shape (measured);
        # a jax.nn without local_window_size has no sliding window (nor one without dot_product_attention, 0.4.31's:
        # jax 0.4.30): the operation is then not declared
        attention = getattr(jax.nn, "dot_product_attention", None)
        if attention is not None and "local_window_size" in inspect.signature(attention).parameters:
            self.capabilities["sliding_window_attention"] = Capability(
                dtypes=frozenset({"float32", "bfloat16"}), values={"softcap": frozenset({"none"})}
            )
        else:
            del self.capabilities["sliding_window_attention"]
        # jax.jit traces and compiles a program per shape: the checks draw shapes from the plan
        self.capabilities = per_shape(self.capabilities, skip=frozenset({"swiglu_hidden_dim"}))
        backend_compiles()  # start counting the programs XLA compiles

    def compiles(self) -> int:
        """The programs XLA has compiled in this process (adapters/jax/compiles.py): the report's count."""
        return backend_compiles()

    def environment(self) -> dict[str, str]:
        import jaxlib

        return {
            "jax": jax.__version__,
            "jaxlib": jaxlib.__version__,
            "numpy": np.__version__,
            "device": "cpu",
            "supports": describe(self.supported),
        }

    def forward(self, op: str, inputs: Mapping[str, np.ndarray], params: Mapping[str, Any]) -> np.ndarray:
        if op == "swiglu_hidden_dim":
            return np.asarray(llama_hidden_dim(**params))
        floats, ints = _split(op, inputs)
        return np.asarray(_forward_fn(op, tuple(sorted(params.items())))(floats, ints))

    def vjp(
        self, op: str, inputs: Mapping[str, np.ndarray], params: Mapping[str, Any], cotangent: np.ndarray
    ) -> dict[str, np.ndarray]:
        floats, ints = _split(op, inputs)
        grads = _vjp_fn(op, tuple(sorted(params.items())))(floats, ints, jnp.asarray(cotangent))
        return {k: np.asarray(g) for k, g in zip(OPS[op].inputs, grads, strict=True)}

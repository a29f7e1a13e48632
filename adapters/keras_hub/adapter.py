"""keras-hub on Keras 3 (JAX backend) as a candidate: the built-in ``keras-hub`` adapter.

Each operation runs through the layer keras-hub's model backbones build, with the dtype under test as the
layer's dtype policy, called by ``Layer.stateless_call`` with the suite's weights as its variables; every
gradient is ``jax.vjp`` of that call (adapters/keras_hub/ops.py). The call and its VJP are compiled with
``jax.jit`` per operation and parameter values, as Keras's ``fit``, ``evaluate`` and ``predict`` compile a model
on JAX (``jit_compile``): one XLA program per shape instead of one per primitive, and the same roundings (the
defects listed in expectations/keras-hub.toml reproduce jitted and eager alike):

* ``rms_norm`` — ``LlamaLayerNorm`` (the RMSNorm of keras-hub's Llama, Llama 3 and Mistral backbones): x cast
  to float32, x·rsqrt(mean(x²) + ε)·scale in float32, cast once; ε None is its default 1e-6;
* ``layer_norm`` — ``keras.layers.LayerNormalization`` (``keras.ops.layer_normalization``: float32, two-pass
  moments, cast once); ε None is Keras's default, 1e-3;
* ``rope`` — ``keras_hub.layers.RotaryEmbedding(max_wavelength=base)`` called with ``positions``: the
  half-split pairs (i, i + d/2), angles in float32, cos and sin cast to the layer's compute dtype and the
  rotation done in it; a partial ``rotary_dim`` rotates x[..., :rotary_dim] and passes the rest;
* ``rope_scaled`` — the same layer's ``rope_type`` (``linear`` with ``scaling_factor``, ``dynamic``, ``yarn``
  with ``beta_fast``, ``beta_slow``, ``original_max_position_embeddings``), and ``LlamaRotaryEmbedding``'s
  band rule for ``llama3`` (``frequency_adjustment_factor``, ``low_freq_factor``, ``high_freq_factor``,
  ``pretraining_sequence_length``), as keras-hub's Llama 3.1 backbone configures it;
* ``attention`` — ``CachedGemmaAttention._compute_attention`` (keras-hub's Gemma and Gemma 2 attention: grouped
  KV heads, ``logit_soft_cap``) on q, k, v laid out (batch, length, heads, width), with the causal mask the decoder
  block builds (``compute_causal_mask`` at the cache index Lk − Lq: bottom-right); its scale 1/√head_dim, a given
  scale s as the head width 1/s²;
* ``sliding_window_attention`` — the same layer built as Gemma 2's local layers
  (``use_sliding_window_attention=True, sliding_window_size=W``), its ``_compute_attention`` given the decoder
  block's causal mask and the cache index Lk − Lq, so that ``_mask_sliding_window`` narrows it to the band
  ``triu(−W + 1)·tril(W − 1)`` sliced at that index: p − j < W, the query's own token among the W
  (``sliding_window="inclusive"``, read off the layer's mask when the adapter is built); soft-cap and scale as
  ``attention``;
* ``cross_entropy`` — ``keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction=None)``;
  ``cross_entropy_mean`` — the same loss with ``ignore_class`` and its default reduction. A Keras loss
  computes in its own dtype (float32) whatever the logits' dtype; the loss comes back in the logits' dtype.

Keras runs on the JAX backend (adapters/keras_hub/backend.py: set before Keras is imported, or refused). The
adapter refuses releases outside those its conventions were measured on (adapters/versions.py).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from functools import lru_cache
from typing import Any

import numpy as np

from transformer_conformance.adapters.contract import OPS, Capability, Conventions, per_shape
from transformer_conformance.adapters.jax.compiles import backend_compiles
from transformer_conformance.adapters.keras_hub.backend import select_jax
from transformer_conformance.adapters.versions import SUPPORTED, describe, require

require("keras-hub", SUPPORTED["keras-hub"])  # before the libraries are imported: one line, not a traceback
select_jax()  # before Keras is imported: its backend is chosen then

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import keras  # noqa: E402
import keras_hub  # noqa: E402

from transformer_conformance.adapters.keras_hub import ops  # noqa: E402

jax.config.update("jax_platforms", "cpu")

ALL = frozenset({"float32", "bfloat16", "float16"})

IMPL: dict[str, Callable[..., jax.Array]] = {
    "rms_norm": ops.rms_norm,
    "layer_norm": ops.layer_norm,
    "rope": ops.rope,
    "rope_scaled": ops.rope_scaled,
    "cross_entropy": ops.cross_entropy,
    "cross_entropy_mean": ops.cross_entropy_mean,
    "attention": ops.attention,
    "sliding_window_attention": ops.sliding_window_attention,
}


def _refuse(op: str, inputs: Mapping[str, np.ndarray], params: Mapping[str, Any]) -> None:
    """Refuse, before tracing (a refusal raised under ``jax.jit`` carries JAX's traceback note), a parameter value
    the layer cannot honour."""
    if op == "sliding_window_attention":
        ops.check_window(inputs["q"].shape[2], inputs["k"].shape[2], params["window"])


def _to_jax(a: np.ndarray) -> jax.Array:
    """A NumPy array as a JAX array (integers as int32: JAX's x64 mode is off, as Keras runs it)."""
    if np.issubdtype(a.dtype, np.integer):
        return jnp.asarray(a.astype(np.int32))
    return jnp.asarray(a)


def _to_numpy(a: jax.Array, dtype: np.dtype[Any]) -> np.ndarray:
    out = np.asarray(a)
    if out.dtype != dtype:
        raise TypeError(f"keras-hub adapter: got {out.dtype}, should be {dtype}")
    return out


def _split(op: str, inputs: Mapping[str, np.ndarray]) -> tuple[tuple[jax.Array, ...], dict[str, jax.Array]]:
    """The floating inputs in contract order (differentiable) and the integer ones, as JAX arrays."""
    spec = OPS[op]
    return tuple(_to_jax(inputs[k]) for k in spec.inputs), {k: _to_jax(inputs[k]) for k in spec.int_inputs}


def _frozen(params: Mapping[str, Any]) -> tuple[tuple[str, Any], ...]:
    """The parameters as a hashable key: a mapping (the scaling rule) as its sorted items, a list as a tuple."""

    def value(v: Any) -> Any:
        return _frozen(v) if isinstance(v, Mapping) else tuple(v) if isinstance(v, list) else v

    return tuple(sorted((k, value(v)) for k, v in params.items()))


@lru_cache(maxsize=256)
def _compiled(op: str, params: tuple[tuple[str, Any], ...]) -> tuple[Callable[..., Any], Callable[..., Any]]:
    """The operation's forward and VJP for one parameter setting, each under ``jax.jit``: the layer's call traced
    and compiled whole, as Keras's trainers and ``predict`` run a model on JAX (``jit_compile``)."""
    if op not in IMPL:
        raise KeyError(f"keras-hub adapter: operation {op!r} is not declared")
    fn, names = IMPL[op], OPS[op].inputs
    kw = {k: dict(v) if k == "scaling" and v is not None else v for k, v in params}

    def run(floats: tuple[jax.Array, ...], ints: dict[str, jax.Array]) -> jax.Array:
        return fn(**dict(zip(names, floats, strict=True)), **ints, **kw)

    def vjp(floats: tuple[jax.Array, ...], ints: dict[str, jax.Array], cot: jax.Array) -> tuple[jax.Array, ...]:
        _, pullback = jax.vjp(lambda *f: run(f, ints), *floats)
        return tuple(pullback(cot))

    return jax.jit(run), jax.jit(vjp)


class KerasHubAdapter:
    """The built-in ``keras-hub`` adapter (Keras 3, JAX backend, CPU)."""

    name = "keras-hub"
    #: the releases it supports (adapters/versions.py; docs/adapters.md)
    supported = SUPPORTED["keras-hub"]

    def __init__(self, device: str = "cpu") -> None:
        require(self.name, self.supported)
        if device != "cpu":
            raise RuntimeError(f"the keras-hub adapter runs on the CPU only, not {device!r}")
        self.conventions = Conventions(
            rope_layout="half",
            rope_angle_dtype="float32",
            compute_dtype="float32",
            # RotaryEmbedding casts cos and sin to the compute dtype and rotates in it; Gemma's attention scales
            # q, forms the scores and soft-caps them in the compute dtype (the softmax in float32, cast back)
            unfused=frozenset({"rope", "rope_scaled", "attention", "sliding_window_attention"}),
            # compute_causal_mask with the cache index Lk − Lq, as the decoder blocks decode
            causal_alignment="bottom_right",
            # _mask_sliding_window's band keeps p − j < W (the query's own token among the W): read off the layer
            sliding_window=ops.window_counts(),
            # XLA on the CPU flushes subnormal results to zero
            flush_subnormals=True,
            eps_defaults={"rms_norm": ops.RMS_EPS, "layer_norm": ops.LN_EPS},
        )
        self.capabilities: dict[str, Capability] = {op: Capability(dtypes=ALL) for op in IMPL}
        self.capabilities["rope_scaled"] = Capability(
            dtypes=ALL, values={"scaling.type": frozenset({"linear", "dynamic", "yarn", "llama3"})}
        )
        # jax.jit traces and compiles a program per shape: the checks draw shapes from the plan
        self.capabilities = per_shape(self.capabilities)
        backend_compiles()  # start counting the programs XLA compiles

    def compiles(self) -> int:
        """The programs XLA has compiled in this process (adapters/jax/compiles.py): the report's count."""
        return backend_compiles()

    def environment(self) -> dict[str, str]:
        return {
            "keras-hub": keras_hub.__version__,
            "keras": keras.__version__,
            "jax": jax.__version__,
            "numpy": np.__version__,
            "backend": keras.backend.backend(),
            "device": "cpu",
            "supports": describe(self.supported),
        }

    def forward(self, op: str, inputs: Mapping[str, np.ndarray], params: Mapping[str, Any]) -> np.ndarray:
        _refuse(op, inputs, params)
        floats, ints = _split(op, inputs)
        out = _compiled(op, _frozen(params))[0](floats, ints)
        return _to_numpy(out, inputs[OPS[op].inputs[0]].dtype)

    def vjp(
        self, op: str, inputs: Mapping[str, np.ndarray], params: Mapping[str, Any], cotangent: np.ndarray
    ) -> dict[str, np.ndarray]:
        _refuse(op, inputs, params)
        floats, ints = _split(op, inputs)
        grads = _compiled(op, _frozen(params))[1](floats, ints, _to_jax(cotangent))
        names = OPS[op].inputs
        return {k: _to_numpy(g, inputs[k].dtype) for k, g in zip(names, grads, strict=True)}

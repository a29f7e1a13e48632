"""The contract's operations as keras-hub and Keras 3 layers compute them, on the JAX backend.

Each function takes and returns ``jax.Array``s; the layer is built with the dtype under test as its dtype
policy (variables and computation in it, as a model built with ``dtype="bfloat16"``) and run through
``Layer.stateless_call`` with the suite's weights as its variables, so ``jax.vjp`` differentiates the layer's
own call with respect to its inputs and weights (adapters/keras_hub/adapter.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import lru_cache
from typing import Any, Literal

from transformer_conformance.adapters.keras_hub.backend import select_jax

select_jax()  # before keras is imported

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import keras  # noqa: E402
import keras_hub  # noqa: E402
from keras_hub.src.layers.modeling.transformer_layer_utils import compute_causal_mask  # noqa: E402
from keras_hub.src.models.gemma.gemma_attention import CachedGemmaAttention  # noqa: E402
from keras_hub.src.models.llama.llama_layernorm import LlamaLayerNorm  # noqa: E402
from keras_hub.src.models.llama.llama_rotary_embedding import LlamaRotaryEmbedding  # noqa: E402

#: the ε of keras-hub's LlamaLayerNorm (the RMSNorm of its Llama, Llama 3 and Mistral backbones) and of
#: keras.layers.LayerNormalization, for eps=None
RMS_EPS = 1e-6
LN_EPS = 1e-3

#: the contract's scaling rules and keras-hub's ``RotaryEmbedding(rope_type=...)`` names for them; llama3 is
#: ``LlamaRotaryEmbedding``'s band rule
ROPE_TYPES = {"linear": "linear", "dynamic": "dynamic", "yarn": "yarn"}


class Unsupported(ValueError):
    """A parameter value keras-hub's layer cannot express: refused, never approximated."""


def _name(a: jax.Array) -> str:
    return str(jnp.dtype(a.dtype))


@lru_cache(maxsize=64)
def _rms_layer(dtype: str, n: int, eps: float) -> keras.layers.Layer:
    layer = LlamaLayerNorm(epsilon=eps, dtype=dtype)
    layer.build((None, n))
    return layer


@lru_cache(maxsize=64)
def _ln_layer(dtype: str, n: int, eps: float) -> keras.layers.Layer:
    layer = keras.layers.LayerNormalization(epsilon=eps, dtype=dtype)
    layer.build((None, n))
    return layer


def _stateless(layer: keras.layers.Layer, weights: list[jax.Array], *args: Any, **kwargs: Any) -> jax.Array:
    out, _ = layer.stateless_call(weights, [], *args, **kwargs)
    return out


def rms_norm(x: jax.Array, weight: jax.Array, eps: float | None = None) -> jax.Array:
    """keras-hub's ``LlamaLayerNorm`` (its weight is ``scale``)."""
    layer = _rms_layer(_name(x), x.shape[-1], RMS_EPS if eps is None else float(eps))
    return _stateless(layer, [weight], x)


def layer_norm(x: jax.Array, weight: jax.Array, bias: jax.Array, eps: float | None = None) -> jax.Array:
    """``keras.layers.LayerNormalization`` (``gamma``, ``beta``), as keras-hub's GPT-2, BERT and Phi backbones
    build it."""
    layer = _ln_layer(_name(x), x.shape[-1], LN_EPS if eps is None else float(eps))
    return _stateless(layer, [weight, bias], x)


@lru_cache(maxsize=64)
def _rope_layer(dtype: str, base: float, scaling: tuple[tuple[str, Any], ...]) -> keras.layers.Layer:
    """keras-hub's rotary layer for a scaling rule: ``keras_hub.layers.RotaryEmbedding`` (none, linear,
    dynamic, yarn) or ``LlamaRotaryEmbedding`` (llama3)."""
    rule: Mapping[str, Any] = dict(scaling)
    kind = rule.get("type")
    if kind is None:
        return keras_hub.layers.RotaryEmbedding(max_wavelength=base, dtype=dtype)
    if kind == "llama3":
        return LlamaRotaryEmbedding(
            max_wavelength=base,
            frequency_adjustment_factor=float(rule["factor"]),
            low_freq_factor=float(rule.get("low_freq_factor", 1.0)),
            high_freq_factor=float(rule.get("high_freq_factor", 4.0)),
            pretraining_sequence_length=int(rule["original_max_position_embeddings"]),
            dtype=dtype,
        )
    if kind not in ROPE_TYPES:
        raise Unsupported(f"keras-hub's RotaryEmbedding has no {kind!r} scaling (rope_type linear, dynamic, yarn)")
    extra: dict[str, Any] = {}
    if kind == "yarn":
        extra = {
            "beta_fast": float(rule.get("beta_fast", 32.0)),
            "beta_slow": float(rule.get("beta_slow", 1.0)),
            "original_max_position_embeddings": int(rule["original_max_position_embeddings"]),
        }
    return keras_hub.layers.RotaryEmbedding(
        max_wavelength=base, scaling_factor=float(rule["factor"]), rope_type=ROPE_TYPES[kind], dtype=dtype, **extra
    )


def _rotate(
    x: jax.Array, positions: jax.Array, base: float, rotary_dim: int | None, scaling: Mapping[str, Any] | None
) -> jax.Array:
    """x (..., T, d) through the rotary layer as (batch, T, d) with ``positions`` (T,); a partial rotary runs the
    layer on x[..., :rotary_dim] and passes the rest, as keras-hub's GPT-NeoX attention does."""
    shape = x.shape
    t, d = shape[-2], shape[-1]
    rd = d if rotary_dim is None else int(rotary_dim)
    layer = _rope_layer(_name(x), float(base), tuple(sorted((scaling or {}).items(), key=lambda kv: kv[0])))
    flat = x.reshape(-1, t, d)
    rotated = _stateless(layer, [], flat[..., :rd], positions=positions)
    return jnp.concatenate((rotated, flat[..., rd:]), axis=-1).reshape(shape)


def rope(x: jax.Array, positions: jax.Array, base: float = 10000.0, rotary_dim: int | None = None) -> jax.Array:
    return _rotate(x, positions, base, rotary_dim, None)


def rope_scaled(
    x: jax.Array,
    positions: jax.Array,
    base: float = 10000.0,
    rotary_dim: int | None = None,
    scaling: Mapping[str, Any] | None = None,
) -> jax.Array:
    return _rotate(x, positions, base, rotary_dim, scaling)


def cross_entropy(logits: jax.Array, targets: jax.Array) -> jax.Array:
    """``keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction=None)``: per token."""
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction=None)
    return loss(targets, logits).astype(logits.dtype)


def cross_entropy_mean(logits: jax.Array, targets: jax.Array, ignore_index: int = -100) -> jax.Array:
    """``keras.losses.SparseCategoricalCrossentropy(from_logits=True, ignore_class=ignore_index)`` with its
    default reduction (``sum_over_batch_size``: the mean over the tokens its mask keeps)."""
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True, ignore_class=int(ignore_index))
    return loss(targets, logits).astype(logits.dtype)


@lru_cache(maxsize=64)
def _attention_layer(
    dtype: str, hq: int, hkv: int, d: int, scale: float | None, softcap: float | None, window: int | None = None
) -> Any:
    """keras-hub's Gemma attention (``CachedGemmaAttention``: grouped KV heads, ``logit_soft_cap``), built as the
    Gemma backbones build it; its projections are not used (q, k and v arrive projected). Its scale is
    1/√head_dim (``query_head_dim_normalize``): a contract ``scale`` s is given as the head width 1/s² it
    normalises by. A ``window`` W builds it as Gemma 2's local layers (``use_sliding_window_attention``,
    ``sliding_window_size=W``): ``_compute_attention`` then narrows the mask it is given to the layer's band."""
    local = {} if window is None else {"use_sliding_window_attention": True, "sliding_window_size": window}
    layer = CachedGemmaAttention(
        head_dim=d, num_query_heads=hq, num_key_value_heads=hkv, logit_soft_cap=softcap, dtype=dtype, **local
    )
    layer.build((1, 1, hq * d))
    if scale is not None:
        layer.head_dim = 1.0 / (scale * scale)
    return layer


def _attend(layer: Any, q: jax.Array, k: jax.Array, v: jax.Array, mask: jax.Array | None, index: int) -> jax.Array:
    """``layer._compute_attention`` on q (B, Hq, Lq, D), k and v (B, Hkv, Lk, ·) transposed to the (batch, length,
    heads, width) it takes, at the cache index ``index``. The layer reshapes its output with q's head width, so
    the narrower of D and the value width is padded with zeros to the wider (exact: zero terms of the dot
    products; its scale is the head_dim it was built with) and the padded columns sliced off: one call, one
    softmax, as a model's forward makes."""
    d, dv = q.shape[-1], v.shape[-1]
    width = max(d, dv)

    def pad(a: jax.Array) -> jax.Array:
        return jnp.pad(a, ((0, 0), (0, 0), (0, 0), (0, width - a.shape[-1]))) if a.shape[-1] < width else a

    qt, kt, vt = (jnp.swapaxes(pad(a), 1, 2) for a in (q, k, v))
    out = layer._compute_attention(qt, kt, vt, mask, cache_update_index=index)
    return jnp.swapaxes(out, 1, 2)[..., :dv]


def attention(
    q: jax.Array,
    k: jax.Array,
    v: jax.Array,
    causal: bool = False,
    softcap: float | None = None,
    scale: float | None = None,
) -> jax.Array:
    """``CachedGemmaAttention._compute_attention`` on q (B, Lq, Hq, D), k and v (B, Lk, Hkv, ·), the layout the
    layer takes, with the causal mask its decoder block builds (``compute_causal_mask`` with the cache index
    Lk − Lq: bottom-right)."""
    b, hq, lq, d = q.shape
    hkv, lk = k.shape[1], k.shape[2]
    layer = _attention_layer(_name(q), hq, hkv, d, None if scale is None else float(scale), softcap or None)
    mask = compute_causal_mask(b, lk, lq, lk - lq) if causal else None
    return _attend(layer, q, k, v, mask, 0)


def check_window(lq: int, lk: int, window: int) -> None:
    """Refuse (one line) what ``_mask_sliding_window`` cannot slice: it takes rows from the cache index Lk − Lq of
    its (Lk, Lk) band with a clamped start, so more queries than keys would read the wrong rows."""
    if int(window) < 1:
        raise Unsupported(f"keras-hub's sliding_window_size must be at least 1, got {window}")
    if lq > lk:
        raise Unsupported(f"keras-hub's sliding window needs L_q ≤ L_k (a cache index ≥ 0), got {lq} > {lk}")


def sliding_window_attention(
    q: jax.Array,
    k: jax.Array,
    v: jax.Array,
    window: int,
    softcap: float | None = None,
    scale: float | None = None,
) -> jax.Array:
    """Gemma 2's local attention: ``CachedGemmaAttention(use_sliding_window_attention=True,
    sliding_window_size=W)._compute_attention`` with the decoder block's causal mask and the cache index Lk − Lq,
    as a decoding step calls it; the layer's ``_mask_sliding_window`` slices its (Lk, Lk) band at that index
    (``check_window`` refuses what it cannot slice)."""
    b, hq, lq, d = q.shape
    hkv, lk = k.shape[1], k.shape[2]
    check_window(lq, lk, window)
    layer = _attention_layer(
        _name(q), hq, hkv, d, None if scale is None else float(scale), softcap or None, int(window)
    )
    return _attend(layer, q, k, v, compute_causal_mask(b, lk, lq, lk - lq), lk - lq)


def window_counts() -> Literal["inclusive", "exclusive"]:
    """What keras-hub's window counts, read off the band ``_mask_sliding_window`` builds: with a window of 1, a
    query at token 1 sees key 0 only if the window counts the keys before the query's own (p − j ≤ W,
    "exclusive"); with p − j < W ("inclusive", the query's own token among the W) it sees its own alone."""
    layer = _attention_layer("float32", 1, 1, 1, None, None, 1)
    band = layer._mask_sliding_window(compute_causal_mask(1, 2, 1, 1), cache_update_index=1)
    return "exclusive" if bool(band[0, 0, 0]) else "inclusive"

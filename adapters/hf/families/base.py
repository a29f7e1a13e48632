"""Shared plumbing of the HF model-family adapters: each operation is run by the family's own classes, built
from a configuration of that family (no weights are downloaded), in the dtype under test.

A family is described by a :class:`Family`: its configuration class, its norm, its rotary embedding class and
``apply_rotary_pos_emb``, its MLP, its decoder layer, and its attention module with the eager attention function
of its modeling file. The suite's weights
enter the modules through ``torch.func.functional_call`` (transposed, and concatenated where the family fuses
projections, as Phi-3's ``qkv_proj`` and ``gate_up_proj``): exact operations, so autograd hands each of the
suite's weights its gradient directly.

Local attention (sliding-window, chunked, sinks) runs as the family's model runs it: the mask from
``masking_utils`` by the layer's type (``create_sliding_window_causal_mask``, ``create_chunked_causal_mask``,
``create_causal_mask``), sized by a ``DynamicCache`` holding the L_k − L_q earlier keys (query i is token
i + L_k − L_q, as in decoding), then the family's ``eager_attention_forward`` on an attention module built from the
configuration, with the module's own attributes (``scaling``, ``sliding_window``, ``attn_logit_softcapping``) and
the suite's ``sinks`` as its parameter.

Seeds: seed-000 §Pre-norm vs. post-norm and §A modern decoder block, seed-002 §3.1.1–3.1.2 (blocks); the RoPE
and norm statements the contract's operations cite (docs/coverage.md).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import cache
from typing import Any

import torch
from torch import nn
from torch.func import functional_call
from transformers.cache_utils import DynamicCache
from transformers.masking_utils import (
    create_bidirectional_mask,
    create_causal_mask,
    create_chunked_causal_mask,
    create_sliding_window_causal_mask,
)

from transformer_conformance.adapters.hf.adapter import _HFAdapter
from transformer_conformance.adapters.versions import SUPPORTED, require

#: the contract's MLP activations as HF's ``ACT2FN`` names (QuickGELU is x·σ(1.702x); ``relu2`` is ReLU²)
ACT2FN_NAMES = {
    "relu": "relu",
    "gelu_erf": "gelu",
    "gelu_tanh": "gelu_pytorch_tanh",
    "gelu_sigmoid": "quick_gelu",
    "relu_squared": "relu2",
    "silu": "silu",
}


@dataclass(frozen=True)
class Family:
    """One HF model family: the classes and functions of its modeling file the adapter runs."""

    config: type
    norm: type[nn.Module]
    rotary: type[nn.Module]
    apply_rotary: Callable[..., tuple[torch.Tensor, torch.Tensor]]
    mlp: type[nn.Module]
    layer: type[nn.Module] | None = None
    #: the family's rotary embedding rotates the first ``partial_rotary_factor``·head_dim dims itself, given as
    #: this configuration key, spelled as the family's checkpoints spell it (GPT-NeoX's ``rotary_pct``, Phi-3's
    #: top-level ``partial_rotary_factor``): transformers 5.0 reads only that spelling (5.0's GPT-NeoX
    #: configuration overwrites a ``rope_parameters`` factor with ``rotary_pct``'s default 0.25, and Phi-3's
    #: LongRoPE with the top-level default 1.0); later releases read both. None: the family has no partial rotary
    partial_rotary: str | None = None
    #: the configuration's name of the MLP activation
    act_key: str = "hidden_act"
    #: the norm's weight is stored as γ − offset (Gemma: 1)
    weight_offset: float = 0.0
    #: configuration keys every configuration of this family gets, as (key, value) pairs
    fixed: tuple[tuple[str, Any], ...] = ()
    #: the attention module and the modeling file's ``eager_attention_forward`` it calls (local attention)
    attention: type[nn.Module] | None = None
    eager: Callable[..., tuple[torch.Tensor, Any]] | None = None


#: the mask each layer type gets, as the families' models build them (masking_utils' functions)
MASKS: dict[str, Callable[..., Any]] = {
    "full_attention": create_causal_mask,
    "sliding_attention": create_sliding_window_causal_mask,
    "chunked_attention": create_chunked_causal_mask,
}


def _freeze(value: Any) -> Any:
    if isinstance(value, Mapping):
        return tuple(sorted((k, _freeze(v)) for k, v in value.items()))
    return tuple(value) if isinstance(value, list) else value


def _thaw(items: tuple[tuple[str, Any], ...]) -> dict[str, Any]:
    return {k: list(v) if isinstance(v, tuple) else v for k, v in items}


def make_config(family: Family, **kw: Any) -> Any:
    """A configuration of the family, eager attention, one layer."""
    config = family.config(**{"num_hidden_layers": 1, **_thaw(family.fixed), **kw})
    config._attn_implementation = "eager"
    return config


@cache
def rotary_module(family: Family, head_dim: int, rotary_dim: int, base: float, scaling: tuple[Any, ...] = ()) -> Any:
    """The family's rotary embedding for one head of ``head_dim`` (``rotary_dim`` of them rotated, through
    ``partial_rotary_factor`` where the family has it). One module per configuration, as a model holds one."""
    rule = _thaw(scaling)
    kind = rule.pop("type", "default")
    original = int(rule.get("original_max_position_embeddings", 2048))
    longest = int(original * rule.get("factor", 1.0)) + 1 if rule else original
    rope: dict[str, Any] = {"rope_type": kind, "rope_theta": base, **rule}
    dim = head_dim if family.partial_rotary else rotary_dim
    partial = {family.partial_rotary: rotary_dim / head_dim} if family.partial_rotary else {}
    config = make_config(
        family,
        hidden_size=dim,
        num_attention_heads=1,
        num_key_value_heads=1,
        head_dim=dim,
        max_position_embeddings=longest,
        rope_parameters=rope,
        **partial,
        # Phi-3's configuration overwrites the rule's trained length with its own field (4096 unless given)
        **({"original_max_position_embeddings": original} if "original_max_position_embeddings" in rule else {}),
    )
    return family.rotary(config)


class EagerCall(nn.Module):
    """The family's attention module handed to its eager attention function with what the module's forward passes:
    its ``scaling``, ``sliding_window``, soft-cap (Gemma 2's ``attn_logit_softcapping``) and sinks (gpt-oss's
    ``sinks``, also passed as ``s_aux``). Its parameters are the suite's through ``functional_call``."""

    def __init__(self, attn: nn.Module, eager: Callable[..., tuple[torch.Tensor, Any]]) -> None:
        super().__init__()
        self.attn = attn
        self.eager = eager

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
        attn = self.attn
        kwargs: dict[str, Any] = {"sliding_window": getattr(attn, "sliding_window", None)}
        if hasattr(attn, "attn_logit_softcapping"):
            kwargs["softcap"] = attn.attn_logit_softcapping
        if "sinks" in attn._parameters:
            kwargs["s_aux"] = attn.sinks
        out, _ = self.eager(attn, q, k, v, mask, dropout=0.0, scaling=attn.scaling, **kwargs)
        return out.transpose(1, 2)  # the eager functions return (B, L_q, H, D_v)


def keyword(fn: Callable[..., Any], what: str, *names: str) -> str:
    """The first of ``names`` that ``fn`` takes for its ``what`` argument: its name in this transformers release. A
    function that names none would take the argument into ``**kwargs`` and run without it (Llama 4's attention,
    given a cache): that is refused, not run."""
    takes = inspect.signature(fn).parameters
    for name in names:
        if name in takes:
            return name
    qualname = getattr(fn, "__qualname__", repr(fn))
    raise NotImplementedError(f"{qualname} takes no {what} argument in this transformers release")


def cache_keyword(fn: Callable[..., Any]) -> str:
    """The name ``fn`` takes its cache by: ``cache`` in later 5.x releases (a module's forward, masking_utils' mask
    functions), ``past_key_values`` before (5.13, say)."""
    return keyword(fn, "cache", "cache", "past_key_values")


def mask_arguments(
    make: Callable[..., Any], config: Any, embeds: torch.Tensor, positions: torch.Tensor, cache: Any
) -> dict[str, Any]:
    """The arguments of masking_utils' ``make`` (``create_causal_mask`` and its kin) for new tokens of embeddings
    ``embeds`` at ``positions`` (1, L_q) after what ``cache`` holds, as this release names them: 5.0 takes
    ``input_embeds`` and a required ``cache_position``, later releases ``inputs_embeds`` and no cache position;
    5.0's ``create_bidirectional_mask`` takes no cache and no positions."""
    takes = inspect.signature(make).parameters
    embeddings = keyword(make, "embeddings", "inputs_embeds", "input_embeds")
    given = {"config": config, embeddings: embeds, "attention_mask": None}
    if "position_ids" in takes:
        given["position_ids"] = positions
    if "cache_position" in takes:
        given["cache_position"] = positions[0]
    if make is not create_bidirectional_mask or {"cache", "past_key_values"} & set(takes):
        given[cache_keyword(make)] = cache
    return given


def layer_mask(
    config: Any, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor
) -> tuple[Any, torch.Tensor, torch.Tensor]:
    """(the mask, keys, values) of one attention layer as the model builds them in decoding: a ``DynamicCache``
    holding the L_k − L_q earlier keys, the mask of the layer's type (``config.layer_types[0]``; for a family without
    layer types, Mistral's rule: sliding when ``sliding_window`` is set) from masking_utils for the L_q new tokens,
    then the cache's ``update`` with the new keys, which returns all L_k of them."""
    past = k.shape[-2] - q.shape[-2]
    cache = DynamicCache()
    if past:
        cache.update(k[:, :, :past], v[:, :, :past], 0)
    types = getattr(config, "layer_types", None)
    kind = types[0] if types else ("sliding_attention" if getattr(config, "sliding_window", None) else "full_attention")
    b, lq = q.shape[0], q.shape[-2]
    embeds = torch.zeros(b, lq, config.hidden_size, dtype=q.dtype, device=q.device)  # only its shape and dtype count
    positions = torch.arange(past, past + lq, device=q.device)[None, :]
    make = MASKS[kind]
    if kind == "full_attention" and not getattr(config, "is_causal", True):
        # not causal: the bidirectional mask, which later 5.x releases' create_causal_mask hands such a
        # configuration to; 5.0's does not read is_causal (its encoders call create_bidirectional_mask themselves)
        make = create_bidirectional_mask
    mask = make(**mask_arguments(make, config, embeds, positions, cache))
    keys, values = cache.update(k[:, :, past:], v[:, :, past:], 0)
    return mask, keys, values


class FamilyAdapter(_HFAdapter):
    """An adapter running one family's classes; subclasses set ``family`` and declare what it has."""

    family: Family

    def __init__(self, device: str = "cpu") -> None:
        self.supported = SUPPORTED[self.name]
        require(self.name, self.supported)
        super().__init__(device)

    def norm_weight(self, weight: torch.Tensor) -> torch.Tensor:
        if not self.family.weight_offset:
            return weight
        return (weight.float() - self.family.weight_offset).to(weight.dtype)

    def rms_norm(self, x: torch.Tensor, weight: torch.Tensor, eps: float | None = None) -> torch.Tensor:
        default = self.conventions.eps_defaults["rms_norm"]
        module = self.family.norm(x.shape[-1], eps=float(default if eps is None else eps)).to(self.device, x.dtype)
        return functional_call(module, {"weight": self.norm_weight(weight)}, (x,))

    def rope(
        self,
        x: torch.Tensor,
        positions: torch.Tensor,
        base: float = 10000.0,
        rotary_dim: int | None = None,
        scaling: Mapping[str, Any] | None = None,
    ) -> torch.Tensor:
        """x (..., T, d) through the family's rotary embedding and ``apply_rotary_pos_emb``. A family with
        ``partial_rotary_factor`` gets the whole head and rotates its part itself; for the others the adapter
        rotates x[..., :rotary_dim] and passes the rest through, as hf-llama does."""
        t, d = x.shape[-2:]
        rd = d if rotary_dim is None else rotary_dim
        q = x.reshape(1, -1, t, d)  # (batch, heads, T, d), the layout apply_rotary_pos_emb expects
        module = rotary_module(self.family, d, rd, float(base), _freeze(scaling or {})).to(x.device)
        if self.family.partial_rotary:
            cos, sin = module(q, positions[None, :])
            out, _ = self.family.apply_rotary(q, q, cos, sin)
            return out.reshape(x.shape)
        q_rot, q_pass = q[..., :rd], q[..., rd:]
        cos, sin = module(q_rot, positions[None, :])
        q_embed, _ = self.family.apply_rotary(q_rot, q_rot, cos, sin)
        return torch.cat((q_embed, q_pass), dim=-1).reshape(x.shape)

    def glu_mlp(
        self, x: torch.Tensor, w1: torch.Tensor, w3: torch.Tensor, w2: torch.Tensor, activation: str = "silu"
    ) -> torch.Tensor:
        d, h = w1.shape
        config = make_config(self.family, **self.mlp_shape(d, h), **{self.family.act_key: ACT2FN_NAMES[activation]})
        module = self.family.mlp(config).to(self.device, x.dtype)
        return functional_call(module, self.glu_weights(w1, w3, w2), (x,))

    def swiglu_mlp(self, x: torch.Tensor, w1: torch.Tensor, w3: torch.Tensor, w2: torch.Tensor) -> torch.Tensor:
        return self.glu_mlp(x, w1, w3, w2, "silu")

    @staticmethod
    def mlp_shape(d: int, h: int) -> dict[str, int]:
        # heads unused by the MLP; the configuration's RoPE validation wants an even head size
        return {
            "hidden_size": d,
            "intermediate_size": h,
            "num_attention_heads": 1,
            "num_key_value_heads": 1,
            "head_dim": 2,
        }

    @staticmethod
    def glu_weights(w1: torch.Tensor, w3: torch.Tensor, w2: torch.Tensor) -> dict[str, torch.Tensor]:
        """The MLP's parameters (nn.Linear stores (out, in), the transpose of the suite's (in, out))."""
        return {"gate_proj.weight": w1.T, "up_proj.weight": w3.T, "down_proj.weight": w2.T}

    def attention_weights(self, w: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        return {
            "q_proj.weight": w["wq"].T,
            "k_proj.weight": w["wk"].T,
            "v_proj.weight": w["wv"].T,
            "o_proj.weight": w["wo"].T,
        }

    def layer_weights(self, placement: str, w: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """The decoder layer's parameters for the suite's block weights (pre-norm layout; families override)."""
        names = {"input_layernorm.weight": "attn_norm", "post_attention_layernorm.weight": "mlp_norm"}
        out = {k: self.norm_weight(w[v]) for k, v in names.items()}
        out |= {f"self_attn.{k}": v for k, v in self.attention_weights(w).items()}
        out |= {f"mlp.{k}": v for k, v in self.glu_weights(w["w1"], w["w3"], w["w2"]).items()}
        return out

    def block(
        self,
        x: torch.Tensor,
        positions: torch.Tensor,
        placement: str,
        n_heads: int,
        n_kv_heads: int,
        eps: float,
        base: float = 10000.0,
        **w: torch.Tensor,
    ) -> torch.Tensor:
        """The family's decoder layer on x (B, T, d): cos and sin from its rotary embedding, HF's additive causal
        mask (finfo.min above the diagonal), eager attention, no dropout."""
        if self.family.layer is None:
            raise NotImplementedError(f"{self.name} has no decoder layer for the contract's block")
        d, hd = x.shape[-1], w["wq"].shape[1] // n_heads
        config = make_config(
            self.family,
            **self.mlp_shape(d, w["w1"].shape[1]),
            **{
                self.family.act_key: "silu",
                "rms_norm_eps": eps,
                "rope_parameters": {"rope_type": "default", "rope_theta": float(base)},
            },
        )
        config.num_attention_heads, config.num_key_value_heads, config.head_dim = n_heads, n_kv_heads, hd
        self.adjust_block_config(config)
        layer = self.family.layer(config, layer_idx=0).to(self.device, x.dtype).eval()
        rotary = self.family.rotary(config).to(self.device)
        cos, sin = rotary(x, positions[None, :])
        t = x.shape[1]
        blocked = torch.ones(t, t, dtype=torch.bool, device=x.device).triu(1)
        mask = torch.zeros(1, 1, t, t, dtype=x.dtype, device=x.device).masked_fill(blocked, torch.finfo(x.dtype).min)
        kwargs = {"attention_mask": mask, "position_embeddings": (cos, sin), "position_ids": positions[None, :]}
        out = functional_call(layer, self.layer_weights(placement, w), (x,), kwargs)
        return out[0] if isinstance(out, tuple) else out

    def adjust_block_config(self, config: Any) -> None:
        """Family-specific settings of the block's configuration (Gemma 2's query scalar, say)."""

    def attention_config(self, scale: float | None, head_dim: int) -> dict[str, Any]:
        """Family-specific configuration keys of local attention (Gemma 2's query scalar, say)."""
        return {}

    def local_attention(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        scale: float | None,
        sinks: torch.Tensor | None = None,
        **config_keys: Any,
    ) -> torch.Tensor:
        """q (B, H_q, L_q, D), k, v (B, H_kv, L_k, ·) through the family's attention layer built from a configuration
        with ``config_keys`` (its layer type, window or chunk, soft-cap): :func:`layer_mask`, then the family's eager
        attention on its attention module (built on the meta device: its projections are not used). ``scale`` None is
        the module's own ``scaling`` (1/√D); a number replaces that attribute, as a model configured for it holds."""
        assert self.family.attention is not None and self.family.eager is not None  # declared only where it has them
        hq, hkv, d = q.shape[1], k.shape[1], q.shape[-1]
        config = make_config(
            self.family,
            hidden_size=hq * d,
            num_attention_heads=hq,
            num_key_value_heads=hkv,
            head_dim=d,
            **self.attention_config(scale, d),
            **config_keys,
        )
        with torch.device("meta"):
            attn = self.family.attention(config, layer_idx=0)
        attn.eval()
        if scale is not None:
            setattr(attn, "scaling", float(scale))  # noqa: B010 - a module attribute, not a parameter
        mask, keys, values = layer_mask(config, q, k, v)
        weights = {} if sinks is None else {"attn.sinks": sinks}
        return functional_call(EagerCall(attn, self.family.eager), weights, (q, keys, values, mask))

    def layer_attention(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        causal: bool = False,
        softcap: float | None = None,
        scale: float | None = None,
    ) -> torch.Tensor:
        """The contract's attention as the family's full-attention layer (``create_causal_mask``; not causal:
        ``is_causal`` False, masking_utils' bidirectional mask), for families whose eager attention has no soft-cap."""
        if softcap is not None:
            raise NotImplementedError(f"{self.name}'s attention has no soft-cap")
        return self.local_attention(q, k, v, scale, is_causal=bool(causal))

    def sliding_window_attention(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        window: int,
        softcap: float | None = None,
        scale: float | None = None,
    ) -> torch.Tensor:
        """A sliding layer: the configuration's ``sliding_window`` = W (and the soft-cap where the family has one)."""
        return self.local_attention(q, k, v, scale, **self.sliding_config(int(window), softcap))

    def sliding_config(self, window: int, softcap: float | None) -> dict[str, Any]:
        """The configuration keys of a sliding layer of window W (families override)."""
        if softcap is not None:
            raise NotImplementedError(f"{self.name}'s attention has no soft-cap")
        return {"sliding_window": window}

    def _impl(self, op: str) -> Callable[..., torch.Tensor]:
        impl: dict[str, Callable[..., torch.Tensor]] = {
            "rms_norm": self.rms_norm,
            "rope": self.rope,
            "rope_scaled": self.rope,
            "swiglu_mlp": self.swiglu_mlp,
            "glu_mlp": self.glu_mlp,
            "attention": self.attention,
            "block": self.block,
            "sliding_window_attention": self.sliding_window_attention,
        }
        return impl[op]

"""Shared plumbing of the HF model-family adapters: each operation is run by the family's own classes, built
from a configuration of that family (no weights are downloaded), in the dtype under test.

A family is described by a :class:`Family`: its configuration class, its norm, its rotary embedding class and
``apply_rotary_pos_emb``, its MLP, its eager attention function and its decoder layer. The suite's weights
enter the modules through ``torch.func.functional_call`` (transposed, and concatenated where the family fuses
projections, as Phi-3's ``qkv_proj`` and ``gate_up_proj``): exact operations, so autograd hands each of the
suite's weights its gradient directly.

Seeds: seed-000 §Pre-norm vs. post-norm and §A modern decoder block, seed-002 §3.1.1–3.1.2 (blocks); the RoPE
and norm statements the contract's operations cite (docs/coverage.md).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import cache
from typing import Any

import torch
from torch import nn
from torch.func import functional_call

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
    #: the family's rotary embedding rotates the first ``partial_rotary_factor``·head_dim dims itself
    partial_rotary: bool = False
    #: the configuration's name of the MLP activation
    act_key: str = "hidden_act"
    #: the norm's weight is stored as γ − offset (Gemma: 1)
    weight_offset: float = 0.0
    #: configuration keys every configuration of this family gets, as (key, value) pairs
    fixed: tuple[tuple[str, Any], ...] = ()


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
    if family.partial_rotary:
        rope["partial_rotary_factor"] = rotary_dim / head_dim
    config = make_config(
        family,
        hidden_size=dim,
        num_attention_heads=1,
        num_key_value_heads=1,
        head_dim=dim,
        max_position_embeddings=longest,
        rope_parameters=rope,
        # Phi-3's configuration overwrites the rule's trained length with its own field (4096 unless given)
        **({"original_max_position_embeddings": original} if "original_max_position_embeddings" in rule else {}),
    )
    return family.rotary(config)


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

    def _impl(self, op: str) -> Callable[..., torch.Tensor]:
        impl: dict[str, Callable[..., torch.Tensor]] = {
            "rms_norm": self.rms_norm,
            "rope": self.rope,
            "rope_scaled": self.rope,
            "swiglu_mlp": self.swiglu_mlp,
            "glu_mlp": self.glu_mlp,
            "attention": self.attention,
            "block": self.block,
        }
        return impl[op]

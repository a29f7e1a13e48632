"""One adapter per HF model family, each running its own modeling file's classes (``base.py``).

Supported: transformers 5.x (the ``rope_parameters`` configurations; measured on 5.24 with torch 2.13, CPU).
A release without one of these model files fails to load with the import error, in one line. Declared from the
source; what a family cannot express in the contract is not declared, and docs/adapters.md says why:

* ``hf-gpt-neox`` — ``nn.LayerNorm`` (layer_norm); ``GPTNeoXRotaryEmbedding`` with ``partial_rotary_factor``
  and GPT-NeoX's ``apply_rotary_pos_emb``, which rotates x[..., :rotary_dim] itself (half split, in x's dtype);
  ``GPTNeoXMLP`` (mlp, its biases zero). Its parallel block (two LayerNorms, a biased GELU MLP) is not the
  contract's RMSNorm/SwiGLU block: not declared.
* ``hf-cohere`` — ``CohereRotaryEmbedding`` (``repeat_interleave``: interleaved pairs) and Cohere's
  ``apply_rotary_pos_emb``, which rotates in float32 from cos and sin rounded to x's dtype; ``CohereMLP``.
  ``CohereLayerNorm`` has no bias (the contract's layer_norm has one) and its block uses it: not declared.
* ``hf-phi3`` — ``Phi3RMSNorm``; ``Phi3RotaryEmbedding`` (partial rotary, LongRoPE, the only scaling Phi-3's
  configuration accepts); ``Phi3MLP`` (fused ``gate_up_proj``); ``Phi3DecoderLayer`` (pre-norm, fused
  ``qkv_proj``) for the block.
* ``hf-gemma2`` — ``Gemma2RMSNorm`` (1 + w, one rounding); Gemma 2's rotary embedding; ``Gemma2MLP`` (GeGLU by
  default; the configuration's ``hidden_activation`` takes the contract's other gates); its eager attention
  with the logit soft-cap; ``Gemma2DecoderLayer`` (double norm) for the block, with ``hidden_activation``
  silu (the contract's block is SwiGLU), ``query_pre_attn_scalar`` = head_dim (scale 1/√D), no soft-cap.
* ``hf-olmo2`` — ``Olmo2RMSNorm``, which multiplies by the weight in float32 and rounds once (unlike Llama);
  OLMo 2's rotary embedding; ``Olmo2MLP``. Its block is x + N(A(x)) (neither the contract's post nor double
  norm) with QK-norm over all heads together (the contract's is per head): block and qk_norm_attention are
  not declared.
* ``hf-qwen3`` — ``Qwen3RMSNorm``; Qwen 3's rotary embedding; ``Qwen3MLP``. Its QK-norm sits in its attention,
  whose eager function has no soft-cap (the contract's qk_norm_attention draws one); its block has that
  QK-norm, which the contract's block has not: neither is declared.
* ``hf-mistral`` — ``MistralRMSNorm``; Mistral's rotary embedding; ``MistralMLP``; ``MistralDecoderLayer``
  (pre-norm, no sliding window) for the block.
"""

from __future__ import annotations

import inspect
from typing import Any

import torch
from torch import nn
from torch.func import functional_call
from transformers import (
    CohereConfig,
    Gemma2Config,
    GPTNeoXConfig,
    MistralConfig,
    Olmo2Config,
    Phi3Config,
    Qwen3Config,
)
from transformers.models.cohere import modeling_cohere as cohere
from transformers.models.gemma2 import modeling_gemma2 as gemma2
from transformers.models.gpt_neox import modeling_gpt_neox as neox
from transformers.models.mistral import modeling_mistral as mistral
from transformers.models.olmo2 import modeling_olmo2 as olmo2
from transformers.models.phi3 import modeling_phi3 as phi3
from transformers.models.qwen3 import modeling_qwen3 as qwen3

from transformer_conformance.adapters.contract import Capability, Conventions
from transformer_conformance.adapters.hf.families.base import ACT2FN_NAMES, Family, FamilyAdapter, make_config

#: what every family declares on the same grounds as hf-llama: float32 angles, HF's chain of ops for RoPE and
#: the MLP (each intermediate in the input dtype), eager attention bottom-right
ROPE_MLP_UNFUSED = frozenset({"rope", "rope_scaled", "swiglu_mlp", "glu_mlp", "mlp"})
#: the gated activations ACT2FN has for the contract's glu_mlp
GLU = frozenset({"silu", "gelu_erf", "gelu_tanh", "gelu_sigmoid", "relu"})


def _eps(cls: type) -> float:
    """The default ε of a norm class's constructor."""
    return float(inspect.signature(cls).parameters["eps"].default)


class HFGPTNeoXAdapter(FamilyAdapter):
    """``hf-gpt-neox``: nn.LayerNorm, partial rotary, GPTNeoXMLP."""

    name = "hf-gpt-neox"
    family = Family(
        GPTNeoXConfig,
        nn.LayerNorm,
        neox.GPTNeoXRotaryEmbedding,
        neox.apply_rotary_pos_emb,
        neox.GPTNeoXMLP,
        partial_rotary=True,
    )

    def __init__(self, device: str = "cpu") -> None:
        super().__init__(device)
        eps = GPTNeoXConfig().layer_norm_eps
        self.conventions = Conventions(
            rope_layout="half",
            unfused=ROPE_MLP_UNFUSED | {"layer_norm.vjp"},
            # the CPU layer_norm backward keeps partial sums in the input dtype (as the torch adapter declares)
            low_precision_sums=frozenset({"layer_norm.vjp"}),
            eps_defaults={"rms_norm": eps, "layer_norm": eps},
        )
        self.capabilities = {"layer_norm": Capability(), "rope": Capability(), "mlp": Capability()}

    def layer_norm(self, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float | None = None) -> Any:
        n = x.shape[-1]
        module = nn.LayerNorm(n, eps=float(self.conventions.eps_defaults["layer_norm"] if eps is None else eps))
        return functional_call(module.to(self.device, x.dtype), {"weight": weight, "bias": bias}, (x,))

    def mlp(self, x: torch.Tensor, w_in: torch.Tensor, w_out: torch.Tensor, activation: str) -> Any:
        d, h = w_in.shape
        config = make_config(
            self.family, hidden_size=d, intermediate_size=h, num_attention_heads=1, hidden_act=ACT2FN_NAMES[activation]
        )
        module = self.family.mlp(config).to(self.device, x.dtype)
        zeros = {"dense_h_to_4h.bias": x.new_zeros(h), "dense_4h_to_h.bias": x.new_zeros(d)}
        return functional_call(module, {"dense_h_to_4h.weight": w_in.T, "dense_4h_to_h.weight": w_out.T, **zeros}, (x,))

    def _impl(self, op: str) -> Any:
        return {"layer_norm": self.layer_norm, "mlp": self.mlp}.get(op) or super()._impl(op)


class HFCohereAdapter(FamilyAdapter):
    """``hf-cohere``: interleaved RoPE in float32, CohereMLP."""

    name = "hf-cohere"
    family = Family(
        CohereConfig,
        cohere.CohereLayerNorm,
        cohere.CohereRotaryEmbedding,
        cohere.apply_rotary_pos_emb,
        cohere.CohereMLP,
    )

    def __init__(self, device: str = "cpu") -> None:
        super().__init__(device)
        self.conventions = Conventions(
            rope_layout="interleaved",
            unfused=ROPE_MLP_UNFUSED,  # RoPE: cos and sin are rounded to x's dtype before the float32 rotation
            eps_defaults={"rms_norm": 1e-5, "layer_norm": _eps(cohere.CohereLayerNorm)},
        )
        self.capabilities = {
            "rope": Capability(),
            "swiglu_mlp": Capability(),
            "glu_mlp": Capability(values={"activation": GLU}),
        }


class HFPhi3Adapter(FamilyAdapter):
    """``hf-phi3``: Phi3RMSNorm, partial rotary and LongRoPE, fused projections, the pre-norm decoder layer."""

    name = "hf-phi3"
    family = Family(
        Phi3Config,
        phi3.Phi3RMSNorm,
        phi3.Phi3RotaryEmbedding,
        phi3.apply_rotary_pos_emb,
        phi3.Phi3MLP,
        phi3.Phi3DecoderLayer,
        partial_rotary=True,
    )

    def __init__(self, device: str = "cpu") -> None:
        super().__init__(device)
        eps = _eps(phi3.Phi3RMSNorm)
        self.conventions = Conventions(
            rope_layout="half",
            norm_rounding="before_weight",
            unfused=ROPE_MLP_UNFUSED | {"rms_norm.vjp", "block"},
            eps_defaults={"rms_norm": eps, "layer_norm": eps},
        )
        self.capabilities = {
            "rms_norm": Capability(),
            "rope": Capability(),
            "rope_scaled": Capability(values={"scaling.type": frozenset({"longrope"})}),
            "swiglu_mlp": Capability(),
            "glu_mlp": Capability(values={"activation": GLU}),
            "block": Capability(values={"placement": frozenset({"pre"})}),
        }

    @staticmethod
    def glu_weights(w1: torch.Tensor, w3: torch.Tensor, w2: torch.Tensor) -> dict[str, torch.Tensor]:
        # Phi3MLP chunks gate_up_proj's output: the gate first, then the up projection
        return {"gate_up_proj.weight": torch.cat((w1, w3), dim=1).T, "down_proj.weight": w2.T}

    def attention_weights(self, w: Any) -> dict[str, torch.Tensor]:
        return {"qkv_proj.weight": torch.cat((w["wq"], w["wk"], w["wv"]), dim=1).T, "o_proj.weight": w["wo"].T}


class HFGemma2Adapter(FamilyAdapter):
    """``hf-gemma2``: Gemma2RMSNorm (1 + w), soft-capped eager attention, the double-norm decoder layer."""

    name = "hf-gemma2"
    family = Family(
        Gemma2Config,
        gemma2.Gemma2RMSNorm,
        gemma2.Gemma2RotaryEmbedding,
        gemma2.apply_rotary_pos_emb,
        gemma2.Gemma2MLP,
        gemma2.Gemma2DecoderLayer,
        act_key="hidden_activation",
        weight_offset=1.0,
        fixed=(
            ("layer_types", ("full_attention",)),
            ("attn_logit_softcapping", None),
            ("final_logit_softcapping", None),
        ),
    )

    def __init__(self, device: str = "cpu") -> None:
        super().__init__(device)
        eps = _eps(gemma2.Gemma2RMSNorm)
        self.conventions = Conventions(
            rope_layout="half",
            norm_rounding="single",
            norm_weight_offset=1.0,
            unfused=ROPE_MLP_UNFUSED | {"attention", "block"},
            eps_defaults={"rms_norm": eps, "layer_norm": eps},
        )
        self.capabilities = {
            "rms_norm": Capability(),
            "rope": Capability(),
            "swiglu_mlp": Capability(),
            "glu_mlp": Capability(values={"activation": GLU}),
            "attention": Capability(),
            "block": Capability(values={"placement": frozenset({"double"})}),
        }

    def adjust_block_config(self, config: Any) -> None:
        config.query_pre_attn_scalar = config.head_dim  # scaling query_pre_attn_scalar^-½: the contract's 1/√D

    def layer_weights(self, placement: str, w: Any) -> dict[str, torch.Tensor]:
        out = super().layer_weights(placement, w)
        names = {
            "post_attention_layernorm.weight": "attn_post_norm",
            "pre_feedforward_layernorm.weight": "mlp_norm",
            "post_feedforward_layernorm.weight": "mlp_post_norm",
        }
        return out | {k: self.norm_weight(w[v]) for k, v in names.items()}


def _llama_like(cls_name: str, name: str, family: Family, rounding: str, block: str | None) -> type[FamilyAdapter]:
    """An adapter for a family laid out as Llama (RMSNorm, half-split RoPE, gate/up/down MLP)."""

    def __init__(self: FamilyAdapter, device: str = "cpu") -> None:
        FamilyAdapter.__init__(self, device)
        eps = _eps(family.norm)
        unfused = ROPE_MLP_UNFUSED | ({"rms_norm.vjp"} if rounding == "before_weight" else set())
        self.conventions = Conventions(
            rope_layout="half",
            norm_rounding="before_weight" if rounding == "before_weight" else "single",
            unfused=unfused | ({"block"} if block else set()),
            eps_defaults={"rms_norm": eps, "layer_norm": eps},
        )
        self.capabilities = {
            "rms_norm": Capability(),
            "rope": Capability(),
            "swiglu_mlp": Capability(),
            "glu_mlp": Capability(values={"activation": GLU}),
        }
        if block:
            self.capabilities["block"] = Capability(values={"placement": frozenset({block})})

    return type(
        cls_name,
        (FamilyAdapter,),
        {
            "name": name,
            "family": family,
            "__init__": __init__,
            "__doc__": f"``{name}``: {family.norm.__name__}, RoPE, MLP.",
        },
    )


HFOlmo2Adapter = _llama_like(
    "HFOlmo2Adapter",
    "hf-olmo2",
    Family(Olmo2Config, olmo2.Olmo2RMSNorm, olmo2.Olmo2RotaryEmbedding, olmo2.apply_rotary_pos_emb, olmo2.Olmo2MLP),
    "single",
    None,
)
HFQwen3Adapter = _llama_like(
    "HFQwen3Adapter",
    "hf-qwen3",
    Family(Qwen3Config, qwen3.Qwen3RMSNorm, qwen3.Qwen3RotaryEmbedding, qwen3.apply_rotary_pos_emb, qwen3.Qwen3MLP),
    "before_weight",
    None,
)
HFMistralAdapter = _llama_like(
    "HFMistralAdapter",
    "hf-mistral",
    Family(
        MistralConfig,
        mistral.MistralRMSNorm,
        mistral.MistralRotaryEmbedding,
        mistral.apply_rotary_pos_emb,
        mistral.MistralMLP,
        mistral.MistralDecoderLayer,
        fixed=(("sliding_window", None),),
    ),
    "before_weight",
    "pre",
)

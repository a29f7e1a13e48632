"""One adapter per HF model family, each running its own modeling file's classes (``base.py``).

Supported: transformers 5.x (the ``rope_parameters`` configurations; measured on 5.0.0 and 5.25.0 with torch 2.13,
CPU: adapters/releases.py).
A release without one of these model files fails to load with the import error, in one line. Declared from the
source; what a family cannot express in the contract is not declared, and docs/adapters.md says why:

* ``hf-gpt-neox`` — ``nn.LayerNorm`` (layer_norm); ``GPTNeoXRotaryEmbedding`` with ``rotary_pct`` (its checkpoints' key)
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
  (pre-norm, no sliding window) for the block; sliding_window_attention as a Mistral model with the configuration's
  ``sliding_window`` = W runs it: ``create_sliding_window_causal_mask`` (masking_utils: key j visible from token p iff
  j ≤ p and j > p − W, so W counts the query's own token: ``sliding_window="inclusive"``), then Mistral's
  ``eager_attention_forward`` on ``MistralAttention`` (no soft-cap: only ``softcap`` none is declared); attention
  the same way with ``sliding_window`` None (``create_causal_mask``; not causal: ``is_causal`` False).
* ``hf-gemma2`` also declares sliding_window_attention: a ``"sliding_attention"`` layer (``layer_types``) with
  ``sliding_window`` = W and ``attn_logit_softcapping`` = the cap, the same mask function, Gemma 2's eager attention
  on ``Gemma2Attention`` (``query_pre_attn_scalar`` = head_dim, as its block and attention: scale 1/√D).
* ``hf-gpt-oss`` — ``GptOssRMSNorm`` (the weight multiplies the float32 normalised value: one rounding); gpt-oss's
  rotary embedding and ``apply_rotary_pos_emb`` (halves, in x's dtype); sink_attention through its eager attention
  on ``GptOssAttention``, whose ``sinks`` parameter are the suite's: a ``"full_attention"`` layer
  (``create_causal_mask``), or a ``"sliding_attention"`` one with ``sliding_window`` = W for a window, or
  ``is_causal`` False (masking_utils' bidirectional mask) for attention that is not causal. Its softmax runs in the
  input dtype (``F.softmax(..., dtype=combined_logits.dtype)``): unfused. Its MoE MLP (clamped SwiGLU with
  α = 1.702, experts' biases) is not the contract's and its attention always has sinks: neither the MLPs, attention
  nor the block is declared.
* ``hf-llama4`` — Llama 4's text model: ``Llama4TextRMSNorm`` (normalised value cast to x's dtype, then the weight);
  ``Llama4TextRotaryEmbedding``'s complex ``freqs_cis`` and ``apply_rotary_emb`` (``view_as_complex``: interleaved
  pairs, rotated in float32 and rounded once); ``Llama4TextMLP``; chunked_attention as a ``"chunked_attention"``
  layer with ``attention_chunk_size`` = C: ``create_chunked_causal_mask``, then Llama 4's eager attention on
  ``Llama4TextAttention``, whose softmax runs in the input dtype (no float32 upcast): unfused; attention as its
  ``"full_attention"`` layer (no soft-cap). Its decoder layer
  (MoE or a dense MLP of ``intermediate_size_mlp``, QK L2-norm on RoPE layers) is not the contract's block.
"""

from __future__ import annotations

import inspect
from typing import Any

import torch
from torch import nn
from torch.func import functional_call
from transformers import (
    AttentionInterface,
    CohereConfig,
    Gemma2Config,
    GPTNeoXConfig,
    GptOssConfig,
    Llama4TextConfig,
    MistralConfig,
    Olmo2Config,
    Phi3Config,
    Qwen3Config,
)
from transformers.cache_utils import DynamicCache
from transformers.models.cohere import modeling_cohere as cohere
from transformers.models.gemma2 import modeling_gemma2 as gemma2
from transformers.models.gpt_neox import modeling_gpt_neox as neox
from transformers.models.gpt_oss import modeling_gpt_oss as gpt_oss
from transformers.models.llama4 import modeling_llama4 as llama4
from transformers.models.mistral import modeling_mistral as mistral
from transformers.models.olmo2 import modeling_olmo2 as olmo2
from transformers.models.phi3 import modeling_phi3 as phi3
from transformers.models.qwen3 import modeling_qwen3 as qwen3

from transformer_conformance.adapters.contract import Capability, Conventions
from transformer_conformance.adapters.hf.families.base import (
    ACT2FN_NAMES,
    Family,
    FamilyAdapter,
    cache_keyword,
    make_config,
    rotary_module,
)
from transformer_conformance.adapters.hf.families.moe import GptOssRouterMixin, Llama4RouterMixin

#: what every family declares on the same grounds as hf-llama: float32 angles, HF's chain of ops for RoPE and
#: the MLP (each intermediate in the input dtype), eager attention bottom-right
ROPE_MLP_UNFUSED = frozenset({"rope", "rope_scaled", "swiglu_mlp", "glu_mlp", "mlp"})
#: the gated activations ACT2FN has for the contract's glu_mlp
GLU = frozenset({"silu", "gelu_erf", "gelu_tanh", "gelu_sigmoid", "relu"})
#: eager attention as the families run it, q·kᵀ, the scale, the mask and ·V each in the input dtype
LAYER_ATTENTION = frozenset({"attention", "sliding_window_attention"})
#: an attention without a soft-cap
NO_SOFTCAP = Capability(values={"softcap": frozenset({"none"})})

#: the attention function (transformers' ``AttentionInterface``) that keeps the query an attention layer hands it, on
#: the module, and returns zeros: the layer's own computation up to its attention, with nothing after it
CAPTURE = "transformer-conformance-capture"


def _capture(
    module: nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, *args: Any, **kw: Any
) -> Any:
    module.__dict__["captured_query"] = query
    b, h, t, _ = query.shape
    return query.new_zeros(b, t, h, value.shape[-1]), None


AttentionInterface.register(CAPTURE, _capture)


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
        partial_rotary="rotary_pct",
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
        partial_rotary="partial_rotary_factor",
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
        attention=gemma2.Gemma2Attention,
        eager=gemma2.eager_attention_forward,
    )

    def __init__(self, device: str = "cpu") -> None:
        super().__init__(device)
        eps = _eps(gemma2.Gemma2RMSNorm)
        self.conventions = Conventions(
            rope_layout="half",
            norm_rounding="single",
            norm_weight_offset=1.0,
            unfused=ROPE_MLP_UNFUSED | {"attention", "block", "sliding_window_attention"},
            eps_defaults={"rms_norm": eps, "layer_norm": eps},
            sliding_window="inclusive",  # masking_utils' sliding_window_overlay: kv_idx > q_idx − W
        )
        self.capabilities = {
            "rms_norm": Capability(),
            "rope": Capability(),
            "swiglu_mlp": Capability(),
            "glu_mlp": Capability(values={"activation": GLU}),
            "attention": Capability(),
            "block": Capability(values={"placement": frozenset({"double"})}),
            "sliding_window_attention": Capability(),
        }

    def adjust_block_config(self, config: Any) -> None:
        config.query_pre_attn_scalar = config.head_dim  # scaling query_pre_attn_scalar^-½: the contract's 1/√D

    def attention_config(self, scale: float | None, head_dim: int) -> dict[str, Any]:
        return {"query_pre_attn_scalar": head_dim}  # the module's scaling 1/√D, as the block's

    def sliding_config(self, window: int, softcap: float | None) -> dict[str, Any]:
        # a sliding layer of Gemma 2's alternation, its logits soft-capped by the configuration's cap
        return {"layer_types": ["sliding_attention"], "sliding_window": window, "attn_logit_softcapping": softcap}

    def layer_weights(self, placement: str, w: Any) -> dict[str, torch.Tensor]:
        out = super().layer_weights(placement, w)
        names = {
            "post_attention_layernorm.weight": "attn_post_norm",
            "pre_feedforward_layernorm.weight": "mlp_norm",
            "post_feedforward_layernorm.weight": "mlp_post_norm",
        }
        return out | {k: self.norm_weight(w[v]) for k, v in names.items()}


def _llama_like(
    cls_name: str, name: str, family: Family, rounding: str, block: str | None, sliding: bool = False
) -> type[FamilyAdapter]:
    """An adapter for a family laid out as Llama (RMSNorm, half-split RoPE, gate/up/down MLP); ``sliding``: its
    eager attention in sliding layers (sliding_window_attention, inclusive, no soft-cap)."""

    def __init__(self: FamilyAdapter, device: str = "cpu") -> None:
        FamilyAdapter.__init__(self, device)
        eps = _eps(family.norm)
        unfused = ROPE_MLP_UNFUSED | ({"rms_norm.vjp"} if rounding == "before_weight" else set())
        self.conventions = Conventions(
            rope_layout="half",
            norm_rounding="before_weight" if rounding == "before_weight" else "single",
            unfused=unfused | ({"block"} if block else set()) | (LAYER_ATTENTION if sliding else set()),
            eps_defaults={"rms_norm": eps, "layer_norm": eps},
            sliding_window="inclusive",  # masking_utils' sliding_window_overlay: kv_idx > q_idx − W
        )
        self.capabilities = {
            "rms_norm": Capability(),
            "rope": Capability(),
            "swiglu_mlp": Capability(),
            "glu_mlp": Capability(values={"activation": GLU}),
        }
        if block:
            self.capabilities["block"] = Capability(values={"placement": frozenset({block})})
        if sliding:
            self.capabilities["attention"] = NO_SOFTCAP
            self.capabilities["sliding_window_attention"] = NO_SOFTCAP

    def _impl(self: FamilyAdapter, op: str) -> Any:
        if sliding and op == "attention":  # the family's own full-attention layer, not hf-llama's
            return self.layer_attention
        return FamilyAdapter._impl(self, op)

    return type(
        cls_name,
        (FamilyAdapter,),
        {
            "name": name,
            "family": family,
            "__init__": __init__,
            "_impl": _impl,
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
        attention=mistral.MistralAttention,
        eager=mistral.eager_attention_forward,
    ),
    "before_weight",
    "pre",
    sliding=True,
)


class HFGptOssAdapter(GptOssRouterMixin, FamilyAdapter):
    """``hf-gpt-oss``: GptOssRMSNorm, gpt-oss's RoPE, attention with sinks (and its sliding layers)."""

    name = "hf-gpt-oss"
    family = Family(
        GptOssConfig,
        gpt_oss.GptOssRMSNorm,
        gpt_oss.GptOssRotaryEmbedding,
        gpt_oss.apply_rotary_pos_emb,
        gpt_oss.GptOssMLP,
        fixed=(("layer_types", ("full_attention",)),),
        attention=gpt_oss.GptOssAttention,
        eager=gpt_oss.eager_attention_forward,
    )

    def __init__(self, device: str = "cpu") -> None:
        super().__init__(device)
        eps = _eps(gpt_oss.GptOssRMSNorm)
        self.conventions = Conventions(
            rope_layout="half",
            norm_rounding="single",
            unfused=frozenset({"rope", "sink_attention"}) | self.moe_router_unfused,
            eps_defaults={"rms_norm": eps, "layer_norm": eps},
            sliding_window="inclusive",  # masking_utils' sliding_window_overlay: kv_idx > q_idx − W
        )
        self.capabilities = {
            "rms_norm": Capability(),
            "rope": Capability(),
            "sink_attention": Capability(),
            "moe_router": self.moe_router_capability,
        }

    def sink_attention(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        sinks: torch.Tensor,
        causal: bool = True,
        window: int | None = None,
        scale: float | None = None,
    ) -> torch.Tensor:
        if window is not None:  # gpt-oss's banded layers
            keys: dict[str, Any] = {"layer_types": ["sliding_attention"], "sliding_window": int(window)}
        else:
            keys = {"layer_types": ["full_attention"], "is_causal": bool(causal)}
        return self.local_attention(q, k, v, scale, sinks=sinks, **keys)

    def _impl(self, op: str) -> Any:
        return {"sink_attention": self.sink_attention}.get(op) or super()._impl(op)


class HFLlama4Adapter(Llama4RouterMixin, FamilyAdapter):
    """``hf-llama4``: Llama4TextRMSNorm, Llama 4's complex RoPE, Llama4TextMLP, chunked attention."""

    name = "hf-llama4"
    family = Family(
        Llama4TextConfig,
        llama4.Llama4TextRMSNorm,
        llama4.Llama4TextRotaryEmbedding,
        llama4.apply_rotary_emb,
        llama4.Llama4TextMLP,
        # one layer: RoPE on (no_rope_layers [1]), so chunked where attention_chunk_size is set
        fixed=(("no_rope_layers", (1,)), ("layer_types", ("full_attention",))),
        attention=llama4.Llama4TextAttention,
        eager=llama4.eager_attention_forward,
    )

    def __init__(self, device: str = "cpu") -> None:
        super().__init__(device)
        eps = _eps(llama4.Llama4TextRMSNorm)
        self.conventions = Conventions(
            rope_layout="interleaved",
            norm_rounding="before_weight",
            unfused=frozenset({"rms_norm.vjp", "swiglu_mlp", "glu_mlp", "attention", "chunked_attention"}),
            eps_defaults={"rms_norm": eps, "layer_norm": eps},
        )
        self.capabilities = {
            "rms_norm": Capability(),
            "rope": Capability(),
            "swiglu_mlp": Capability(),
            "glu_mlp": Capability(values={"activation": GLU}),
            "attention": NO_SOFTCAP,
            "chunked_attention": Capability(),
            "attention_temperature": Capability(),
            "moe_router": self.moe_router_capability,
        }

    def rope(
        self,
        x: torch.Tensor,
        positions: torch.Tensor,
        base: float = 10000.0,
        rotary_dim: int | None = None,
        scaling: Any = None,
    ) -> torch.Tensor:
        """x (..., T, d) through Llama 4's ``freqs_cis`` and ``apply_rotary_emb``, which takes (B, T, H, D): the
        first ``rotary_dim`` dims rotated, the rest passed through."""
        t, d = x.shape[-2:]
        rd = d if rotary_dim is None else rotary_dim
        q = x.reshape(-1, t, d).transpose(0, 1)[None]  # (1, T, heads, d)
        module = rotary_module(self.family, d, rd, float(base)).to(x.device)
        freqs_cis = module(q, positions[None, :])
        q_rot, _ = self.family.apply_rotary(q[..., :rd], q[..., :rd], freqs_cis)
        return torch.cat((q_rot, q[..., rd:]), dim=-1)[0].transpose(0, 1).reshape(x.shape)

    def chunked_attention(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, chunk: int, scale: float | None = None
    ) -> torch.Tensor:
        keys: dict[str, Any] = {"layer_types": ["chunked_attention"], "attention_chunk_size": int(chunk)}
        return self.local_attention(q, k, v, scale, **keys)

    def attention_temperature(
        self, q: torch.Tensor, positions: torch.Tensor, floor_scale: float = 8192.0, attn_scale: float = 0.1
    ) -> torch.Tensor:
        """q (..., T, D) scaled as a NoPE layer of Llama 4 scales its queries: ``Llama4TextAttention`` of a layer
        without RoPE (``no_rope_layers`` [0]) with ``attn_temperature_tuning``, its ``q_proj`` the identity on the
        hidden states that hold q's heads, decoding T tokens after a ``DynamicCache`` of p₀ earlier ones (the layer
        takes its positions as p₀ + t from the cache's length: consecutive positions only). The query the layer hands
        its attention function (captured there, ``CAPTURE``) is the output."""
        t, d = q.shape[-2:]
        p0 = int(positions[0]) if t else 0
        if not torch.equal(positions.cpu(), torch.arange(p0, p0 + t)):
            raise NotImplementedError(f"{self.name}'s attention takes consecutive positions (p₀ + t) only")
        if floor_scale != int(floor_scale):
            raise NotImplementedError(f"{self.name}'s configuration holds an integer floor_scale, not {floor_scale}")
        heads = q.numel() // max(t * d, 1)
        hidden = q.reshape(heads, t, d).transpose(0, 1).reshape(1, t, heads * d)
        config = make_config(
            self.family,
            hidden_size=heads * d,
            num_attention_heads=heads,
            num_key_value_heads=1,
            head_dim=d,
            no_rope_layers=[0],
            attn_temperature_tuning=True,
            floor_scale=int(floor_scale),
            attn_scale=attn_scale,
        )
        config._attn_implementation = CAPTURE
        with torch.device("meta"):
            attn = llama4.Llama4TextAttention(config, layer_idx=0)
        eye = torch.eye(heads * d, dtype=q.dtype, device=q.device)
        none = torch.zeros(d, heads * d, dtype=q.dtype, device=q.device)
        weights = {"q_proj.weight": eye, "k_proj.weight": none, "v_proj.weight": none, "o_proj.weight": eye}
        cache = DynamicCache()
        if p0:  # p₀ earlier tokens' keys and values (zeros, one KV head; a view, no memory of their own)
            earlier = torch.zeros(1, 1, 1, d, dtype=q.dtype, device=q.device).expand(1, 1, p0, d)
            cache.update(earlier, earlier, 0)
        given: dict[str, Any] = {cache_keyword(attn.forward): cache}
        if "cache_position" in inspect.signature(attn.forward).parameters:  # 5.0: the positions come from here
            given["cache_position"] = torch.arange(p0, p0 + t, device=q.device)
        functional_call(attn, weights, (hidden, None, None), given)
        captured = attn.__dict__.pop("captured_query")  # (1, heads, T, D)
        return captured[0].reshape(q.shape)

    def _impl(self, op: str) -> Any:
        impl = {
            "rope": self.rope,
            "attention": self.layer_attention,
            "chunked_attention": self.chunked_attention,
            "attention_temperature": self.attention_temperature,
        }
        return impl.get(op) or super()._impl(op)

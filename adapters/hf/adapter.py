"""HF transformers' own modules as candidates, built from configurations (no weights are downloaded).

Three adapters, one per RMSNorm variant, because a model ships exactly one of them:

* ``hf-llama`` — ``LlamaRMSNorm``; RoPE as Llama applies it (``LlamaRotaryEmbedding`` for cos/sin,
  ``apply_rotary_pos_emb``); the MLP ``LlamaMLP``, down(act(gate(x)) * up(x)) without biases; eager
  attention with ``repeat_kv`` for grouped KV heads (Gemma-2's ``eager_attention_forward``, Llama's with
  the logit soft-cap);
* ``hf-gemma`` — ``GemmaRMSNorm``, whose weight is stored zero-centred: it computes norm(x)·(1 + w);
* ``hf-t5`` — ``T5LayerNorm`` (an RMSNorm: no mean, no bias).

Every module is built in the dtype under test (as in a bfloat16 model) and given the suite's parameters;
gradients come from autograd. The releases supported are transformers 4.45 to 5.x (adapters/versions.py); the
RoPE scaling is configured in each major's form, and what a release cannot set is refused
(adapters/hf/rope_config.py). Declared, from the source and measured on transformers 5.24 / torch 2.13
(CPU):

* ``LlamaRMSNorm`` and ``T5LayerNorm`` compute x·rsqrt(mean(x²) + ε) in float32, cast it to the input
  (weight) dtype and *then* multiply by the weight: ``norm_rounding="before_weight"``; their backward
  runs through the same bfloat16 product and cast, so its intermediates are stored in the input dtype
  (``unfused`` ``rms_norm.vjp``);
* ``GemmaRMSNorm`` computes in float32 and casts once, with (1 + w): ``norm_weight_offset=1.0``. The
  adapter stores w = γ − 1 in the dtype under test (γ − 1 is not always representable there; the budget
  charges that rounding);
* ``LlamaRotaryEmbedding`` computes the angles in float32 but returns cos and sin in x's dtype, and
  ``apply_rotary_pos_emb`` rotates in x's dtype, q·cos + rotate_half(q)·sin, one op at a time:
  ``unfused`` ``rope``. The layout is the half split. A partial rotary dimension is applied as HF's
  partial-rotary models do (GPT-NeoX, Phi): rotate x[..., :rotary_dim], pass the rest through;
* ``rope_scaled`` builds the same rotary embedding from a configuration with HF's ``rope_type`` linear,
  dynamic, yarn, llama3 or longrope (HF has no static NTK, so the capability declares those five). One
  module per configuration, as a model holds one: dynamic NTK's state carries from call to call;
* ``LlamaMLP`` runs its three ``nn.Linear`` layers and the SiLU as separate ops: ``unfused``
  ``swiglu_mlp``. HF takes the hidden width from the configuration (``intermediate_size``); it has no
  rule to compute it, so ``swiglu_hidden_dim`` is not declared;
* eager attention multiplies q·kᵀ by the scale, soft-caps, adds the mask and multiplies by V in the input
  dtype, one op at a time (only the softmax runs in float32): ``unfused`` ``attention`` (declared fused, 4
  of its bfloat16/float16 checks fail). The causal mask is HF's from cache positions, bottom-right.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from functools import cache
from types import SimpleNamespace
from typing import Any, cast

from transformer_conformance.adapters.versions import SUPPORTED, describe, require

# the releases the hf adapters support (adapters/versions.py), refused before transformers is imported: an
# older release fails on the imports below, or builds something else
require("hf", SUPPORTED["hf-llama"])

import numpy as np  # noqa: E402
import torch  # noqa: E402
import transformers  # noqa: E402
from torch import nn  # noqa: E402
from transformers import LlamaConfig  # noqa: E402
from transformers.models.gemma.modeling_gemma import GemmaRMSNorm  # noqa: E402
from transformers.models.llama.modeling_llama import (  # noqa: E402
    LlamaMLP,
    LlamaRMSNorm,
    LlamaRotaryEmbedding,
    apply_rotary_pos_emb,
)
from transformers.models.t5.modeling_t5 import T5LayerNorm  # noqa: E402

from transformer_conformance.adapters.contract import Capability, Conventions  # noqa: E402
from transformer_conformance.adapters.hf.rope_config import check_rotary, rotary_config, settable  # noqa: E402
from transformer_conformance.adapters.torch.adapter import with_autocast  # noqa: E402
from transformer_conformance.adapters.torch.modules import ModuleAdapter  # noqa: E402

try:
    from transformers.models.gemma2.modeling_gemma2 import eager_attention_forward as gemma2_eager_attention
except ImportError:  # before 4.48 eager attention is a method of Gemma2Attention: attention is not declared
    gemma2_eager_attention = None  # type: ignore[assignment]

#: eps of the three norms' constructors (LlamaConfig().rms_norm_eps is the same 1e-6)
DEFAULT_EPS = 1e-6


#: the contract's RoPE scaling rules HF's rotary embedding implements (its ``rope_type``; HF has no static NTK)
HF_SCALING_TYPES = frozenset({"linear", "dynamic", "yarn", "llama3", "longrope"})


@cache
def _rotary(rotary_dim: int, base: float, scaling: tuple[tuple[str, Any], ...] = ()) -> LlamaRotaryEmbedding:
    """Llama's rotary embedding for a head of ``rotary_dim`` and a scaling rule (the contract's dict, as
    sorted items; empty: plain RoPE). One module per configuration, as in a model: dynamic NTK keeps its
    state between calls."""
    rule: dict[str, Any] = {k: list(v) if isinstance(v, tuple) else v for k, v in scaling}  # LongRoPE's lists
    kind = rule.pop("type", "default")
    # by keyword: 4.x takes (dim, max_position_embeddings, ...) positionally, config= last
    return check_rotary(LlamaRotaryEmbedding(config=rotary_config(LlamaConfig, kind, rotary_dim, base, rule)), kind)


@cache
def _mlp_config(d: int, h: int) -> LlamaConfig:
    return LlamaConfig(
        hidden_size=d,
        intermediate_size=h,
        num_attention_heads=1,
        num_key_value_heads=1,
        head_dim=2,  # unused by the MLP; the configuration's RoPE validation wants an even head size
        hidden_act="silu",
        mlp_bias=False,
    )


def hf_rope(
    x: torch.Tensor,
    positions: torch.Tensor,
    base: float = 10000.0,
    rotary_dim: int | None = None,
    scaling: Mapping[str, Any] | None = None,
) -> torch.Tensor:
    """x (..., T, d) through Llama's rotary embedding (with ``scaling``'s ``rope_type``) and
    ``apply_rotary_pos_emb``."""
    rd = x.shape[-1] if rotary_dim is None else rotary_dim
    t, d = x.shape[-2:]
    q = x.reshape(1, -1, t, d)  # (batch, heads, T, d), the layout apply_rotary_pos_emb expects
    q_rot, q_pass = q[..., :rd], q[..., rd:]
    key = tuple(sorted((k, tuple(v) if isinstance(v, list) else v) for k, v in (scaling or {}).items()))
    rotary = _rotary(rd, float(base), key)
    cos, sin = rotary.to(x.device)(q_rot, positions[None, :])
    q_embed, _ = apply_rotary_pos_emb(q_rot, q_rot, cos, sin)
    return torch.cat((q_embed, q_pass), dim=-1).reshape(x.shape)


def _set(param: Any, value: torch.Tensor) -> None:
    with torch.no_grad():
        param.copy_(value)


class _HFAdapter(ModuleAdapter):
    """Shared plumbing: build a module for the call, run it, and read gradients from autograd."""

    name = ""
    norm: type[nn.Module] = LlamaRMSNorm
    #: the releases it supports (adapters/versions.py; docs/adapters.md)
    supported = SUPPORTED["hf-llama"]

    def __init__(self, device: str = "cpu") -> None:
        super().__init__()
        if device.startswith("cuda") and not torch.cuda.is_available():
            raise RuntimeError("device 'cuda' requested but torch.cuda.is_available() is False")
        self.device = device
        self.conventions = Conventions()
        self.capabilities: dict[str, Capability] = {}

    def autocast(self, dtype: str) -> AbstractContextManager[Any]:
        """The mixed-precision context of a model trained in ``dtype``: ``torch.autocast`` on this device."""
        return torch.autocast(device_type=torch.device(self.device).type, dtype=getattr(torch, dtype))

    def environment(self) -> dict[str, str]:
        return {
            "transformers": transformers.__version__,
            "torch": torch.__version__,
            "numpy": np.__version__,
            "device": self.device,
            "supports": describe(self.supported),
        }

    def norm_weight(self, weight: torch.Tensor) -> torch.Tensor:
        """The module's weight parameter for the suite's γ."""
        return weight

    def rms_norm(self, x: torch.Tensor, weight: torch.Tensor, eps: float | None = None) -> torch.Tensor:
        module = self.norm(x.shape[-1], eps=DEFAULT_EPS if eps is None else eps).to(self.device, x.dtype)
        _set(module.weight, self.norm_weight(weight.detach()))
        if weight.requires_grad:  # the parameter's gradient is the suite's ∂L/∂γ (γ − w is a constant)
            self._params = [(weight, module.weight)]
        return module(x)

    def swiglu_mlp(self, x: torch.Tensor, w1: torch.Tensor, w3: torch.Tensor, w2: torch.Tensor) -> torch.Tensor:
        d, h = w1.shape
        module = LlamaMLP(_mlp_config(d, h)).to(self.device, x.dtype)
        pairs = [(w1, module.gate_proj.weight), (w3, module.up_proj.weight), (w2, module.down_proj.weight)]
        for w, p in pairs:  # nn.Linear stores (out, in): the transpose of the suite's (in, out)
            _set(p, w.detach().T)
        self._params = [(w, p) for w, p in pairs if w.requires_grad]
        return module(x)

    def attention(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        causal: bool = False,
        softcap: float | None = None,
        scale: float | None = None,
    ) -> torch.Tensor:
        """HF's eager attention (Gemma-2's ``eager_attention_forward``: Llama's plus the logit soft-cap),
        which repeats each KV head for its query group with ``repeat_kv``. HF builds the causal mask
        elsewhere, from cache positions: query i of L_q sits at position L_k − L_q + i, so the additive mask
        here is that bottom-right one."""
        lq, lk = q.shape[-2], k.shape[-2]
        mask = None
        if causal:
            rows = torch.arange(lq, device=q.device)[:, None] + (lk - lq)
            blocked = torch.arange(lk, device=q.device)[None, :] > rows
            mask = torch.zeros(lq, lk, dtype=q.dtype, device=q.device).masked_fill(blocked, torch.finfo(q.dtype).min)
            mask = mask[None, None]  # (batch, heads, L_q, L_k) as HF's models pass it (4.x slices its last axis)
        # the function reads only these attributes of the attention module
        groups = q.shape[1] // k.shape[1]
        module = cast(nn.Module, SimpleNamespace(head_dim=q.shape[-1], num_key_value_groups=groups, training=False))
        assert gemma2_eager_attention is not None  # declared only where the release has it
        out, _ = gemma2_eager_attention(module, q, k, v, mask, dropout=0.0, scaling=scale, softcap=softcap)
        return out.transpose(1, 2)  # HF returns (B, L_q, H, D_v)

    def _impl(self, op: str) -> Callable[..., torch.Tensor]:
        impl: dict[str, Callable[..., torch.Tensor]] = {
            "rms_norm": self.rms_norm,
            "rope": hf_rope,
            "rope_scaled": hf_rope,
            "swiglu_mlp": self.swiglu_mlp,
            "attention": self.attention,
        }
        return impl[op]


class HFLlamaAdapter(_HFAdapter):
    """The built-in ``hf-llama`` adapter: LlamaRMSNorm, Llama's RoPE, LlamaMLP."""

    name = "hf-llama"
    norm = LlamaRMSNorm

    def __init__(self, device: str = "cpu") -> None:
        super().__init__(device)
        self.conventions = Conventions(
            rope_layout="half",
            rope_angle_dtype="float32",
            compute_dtype="float32",
            norm_rounding="before_weight",
            unfused=frozenset({"rms_norm.vjp", "rope", "rope_scaled", "swiglu_mlp", "attention"}),
            eps_defaults={"rms_norm": DEFAULT_EPS, "layer_norm": DEFAULT_EPS},
            causal_alignment="bottom_right",
        )
        ops = ("rms_norm", "rope", "swiglu_mlp") + (("attention",) if gemma2_eager_attention is not None else ())
        caps = {op: Capability() for op in ops}
        rules = frozenset(kind for kind in HF_SCALING_TYPES if settable(kind))  # LongRoPE: 4.48 on
        caps["rope_scaled"] = Capability(values={"scaling.type": rules})
        self.capabilities = with_autocast(caps)


class HFGemmaAdapter(_HFAdapter):
    """The built-in ``hf-gemma`` adapter: GemmaRMSNorm, norm(x)·(1 + w) with w = γ − 1."""

    name = "hf-gemma"
    norm = GemmaRMSNorm

    def __init__(self, device: str = "cpu") -> None:
        super().__init__(device)
        self.conventions = Conventions(
            compute_dtype="float32",
            norm_rounding="single",
            norm_weight_offset=1.0,
            eps_defaults={"rms_norm": DEFAULT_EPS, "layer_norm": DEFAULT_EPS},
        )
        self.capabilities = with_autocast({"rms_norm": Capability()})

    def norm_weight(self, weight: torch.Tensor) -> torch.Tensor:
        # γ − 1 in float32 (exact for bfloat16 and float16 γ), stored in the module's dtype: a rounding
        return (weight.float() - 1.0).to(weight.dtype)


class HFT5Adapter(_HFAdapter):
    """The built-in ``hf-t5`` adapter: T5LayerNorm."""

    name = "hf-t5"
    norm = T5LayerNorm

    def __init__(self, device: str = "cpu") -> None:
        super().__init__(device)
        self.conventions = Conventions(
            compute_dtype="float32",
            norm_rounding="before_weight",
            unfused=frozenset({"rms_norm.vjp"}),
            eps_defaults={"rms_norm": DEFAULT_EPS, "layer_norm": DEFAULT_EPS},
        )
        self.capabilities = with_autocast({"rms_norm": Capability()})

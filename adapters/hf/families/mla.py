"""HF transformers' DeepSeek-V3 multi-head latent attention as a candidate for ``mla_attention``: a real
``DeepseekV3Attention`` built from a tiny ``DeepseekV3Config`` (no weights downloaded), in the dtype under test,
called as the decoder layer calls it — its ``forward`` with the hidden states, the ``position_embeddings`` of
``DeepseekV3RotaryEmbedding`` and the causal mask of masking_utils, decoding after a ``DynamicCache`` when there are
fewer queries than keys. It computes the naive form (the module's ``expand_kv``: ``kv_b_proj`` up-projects the
latent to every head's [k_nope, v]), so only ``form`` naive is declared.

How the suite's tensors reach the module, exactly:

* The configuration has no query LoRA (``q_lora_rank`` None: one ``q_proj``), and the hidden state of token t holds
  [q (H·(D_n + D_r)), latent (D_c), k_rope (D_r)] side by side (zero-padded to H·D_v where that is wider). ``q_proj``
  and ``kv_a_proj_with_mqa`` are 0/1 selections of their parts and ``o_proj`` puts the H·D_v outputs first: each
  output element is one product x·1 among exact zeros, the suite's value bit for bit in any dtype, and autograd's
  ∂x through them is exact likewise.
* ``kv_a_layernorm`` (the RMSNorm DeepSeek applies to the compressed latent) is replaced by the identity: the
  contract's latent is that norm's output, and the norm is a block of its own (``rms_norm``).
* ``kv_b_proj``'s weight holds, for each head h, the rows w_uk[h]ᵀ then w_uv[h]ᵀ, as DeepSeek's checkpoints lay it
  out; gradients reach w_uk and w_uv through it.
* RoPE: ``rope_interleave`` True, DeepSeek-V3's own configuration (``apply_rotary_pos_emb_interleave``: pairs
  (2i, 2i + 1), written back de-interleaved on both q and k, which leaves every score as the interleaved rotation
  gives it): ``rope_layout="interleaved"``. cos and sin come from the family's rotary embedding at the suite's
  positions and ``base``, with the default rope type (YaRN's frequencies are ``rope_scaled``'s business).
* The softmax scale is the module's ``scaling``: (D_n + D_r)^−½, times mscale² through ``yarn_apply_mscale`` when the
  configuration's ``rope_parameters`` are YaRN's with the suite's ``factor`` and ``mscale_all_dim``.
* Fewer queries than keys: the L_k − L_q earlier tokens run first through the same module with a ``DynamicCache``
  (their outputs dropped, their compressed latent and rotated rope key cached as the module caches them); the
  queries' tokens then decode with masking_utils' ``create_causal_mask`` for the cache (bottom-right). Not causal:
  the module's ``is_causal`` False and no mask, as an encoder holds it.
* The attention runs through the configuration's default implementation for the module, SDPA, in the dtype under
  test: q, k and v are stored in it before the attention (``unfused`` mla_attention).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from functools import cache
from typing import Any, cast

import torch
from torch import nn
from torch.func import functional_call
from transformers import DeepseekV3Config
from transformers.cache_utils import DynamicCache
from transformers.masking_utils import create_causal_mask
from transformers.models.deepseek_v3 import modeling_deepseek_v3 as deepseek_v3

from transformer_conformance.adapters.contract import Capability
from transformer_conformance.adapters.hf.families.base import cache_keyword, mask_arguments

#: the trained length of the configurations (the rotary embedding takes the positions as they come, at any length)
TRAINED = 4096

#: what the module computes: the naive form only
MLA_CAPABILITY = Capability(values={"form": frozenset({"naive"})})


def _config(
    heads: int, d_nope: int, d_rope: int, d_latent: int, d_v: int, base: float, mscale: tuple[float, float] | None
) -> DeepseekV3Config:
    width = max(heads * (d_nope + d_rope) + d_latent + d_rope, heads * d_v)
    rope: dict[str, Any] = {"rope_type": "default", "rope_theta": base}
    longest = TRAINED
    if mscale is not None:  # YaRN's parameters as DeepSeek-V3 ships them: mscale = mscale_all_dim
        factor, all_dim = mscale
        rope = {
            "rope_type": "yarn",
            "rope_theta": base,
            "factor": factor,
            "mscale": all_dim,
            "mscale_all_dim": all_dim,
            "original_max_position_embeddings": TRAINED,
        }
        longest = round(TRAINED * factor)  # the extended length the factor stands for, as a checkpoint states it
    config = DeepseekV3Config(
        hidden_size=width,
        num_attention_heads=heads,
        num_key_value_heads=heads,
        q_lora_rank=None,
        kv_lora_rank=d_latent,
        qk_nope_head_dim=d_nope,
        qk_rope_head_dim=d_rope,
        v_head_dim=d_v,
        num_hidden_layers=1,
        first_k_dense_replace=1,
        rope_parameters=rope,
        rope_interleave=True,
        attention_bias=False,
        max_position_embeddings=longest,
    )
    config._attn_implementation = "sdpa"
    return config


@cache
def _modules(
    heads: int, d_nope: int, d_rope: int, d_latent: int, d_v: int, base: float, mscale: tuple[float, float] | None
) -> tuple[nn.Module, nn.Module, DeepseekV3Config]:
    """The attention (on the meta device: its weights come through ``functional_call``) and the rotary embedding of
    this geometry, and the configuration the masks are built from."""
    config = _config(heads, d_nope, d_rope, d_latent, d_v, base, mscale)
    with torch.device("meta"):
        attn = deepseek_v3.DeepseekV3Attention(config, layer_idx=0)
    setattr(attn, "kv_a_layernorm", nn.Identity())  # noqa: B010 - a submodule replaced (the module docstring)
    rotary = deepseek_v3.DeepseekV3RotaryEmbedding(_config(heads, d_nope, d_rope, d_latent, d_v, base, None))
    return attn.eval(), rotary, config


def _selection(rows: int, cols: int, offset: int, like: torch.Tensor) -> torch.Tensor:
    """A (rows, cols) 0/1 matrix whose row i picks column offset + i."""
    out = torch.zeros(rows, cols, dtype=like.dtype, device=like.device)
    out[:, offset : offset + rows] = torch.eye(rows, dtype=like.dtype, device=like.device)
    return out


class DeepseekV3MlaMixin:
    """``mla_attention`` through ``DeepseekV3Attention`` (the module docstring); a family lists it before its base
    adapter and reaches the rest of ``_impl`` through ``super()``."""

    name: str
    mla_capability = MLA_CAPABILITY

    def mla_attention(
        self,
        q_nope: torch.Tensor,
        q_rope: torch.Tensor,
        latent: torch.Tensor,
        k_rope: torch.Tensor,
        w_uk: torch.Tensor,
        w_uv: torch.Tensor,
        q_positions: torch.Tensor,
        k_positions: torch.Tensor,
        causal: bool = True,
        base: float = 10000.0,
        mscale: Mapping[str, float] | None = None,
        form: str = "naive",
    ) -> torch.Tensor:
        if form != "naive":
            raise NotImplementedError(f"{self.name}'s DeepseekV3Attention computes the naive form, not {form!r}")
        b, h, lq, d_n = q_nope.shape
        lk, d_c = latent.shape[1:]
        d_r, d_v = q_rope.shape[-1], w_uv.shape[-1]
        past = lk - lq
        if not torch.equal(q_positions.cpu(), k_positions[past:].cpu()):
            raise NotImplementedError(f"{self.name}'s attention takes the queries' positions from their own tokens")
        ys = None if not mscale else (float(mscale["factor"]), float(mscale["mscale_all_dim"]))
        attn, rotary, config = _modules(h, d_n, d_r, d_c, d_v, float(base), ys)
        width = config.hidden_size
        q = torch.cat([q_nope, q_rope], dim=-1).transpose(1, 2).reshape(b, lq, h * (d_n + d_r))
        q = torch.cat([q.new_zeros(b, past, q.shape[-1]), q], dim=1)  # the earlier tokens ask nothing
        hidden = torch.cat([q, latent, k_rope], dim=-1)
        hidden = torch.cat([hidden, hidden.new_zeros(b, lk, width - hidden.shape[-1])], dim=-1)
        weights = {
            "q_proj.weight": _selection(h * (d_n + d_r), width, 0, latent),
            "kv_a_proj_with_mqa.weight": _selection(d_c + d_r, width, h * (d_n + d_r), latent),
            "kv_b_proj.weight": torch.cat([w_uk, w_uv], dim=-1).permute(0, 2, 1).reshape(h * (d_n + d_v), d_c),
            "o_proj.weight": _selection(h * d_v, width, 0, latent).T,
        }
        cos, sin = rotary.to(latent.device)(latent, k_positions[None, :])
        kv_cache = DynamicCache()
        key = cache_keyword(attn.forward)
        if past:
            earlier = (cos[:, :past], sin[:, :past])
            functional_call(attn, weights, (hidden[:, :past], earlier, None), {key: kv_cache})
        setattr(attn, "is_causal", bool(causal))  # noqa: B010 - the module's attribute, as an encoder holds it
        mask: Any = None
        if causal:
            positions = torch.arange(past, lk, device=latent.device)[None, :]
            given = mask_arguments(create_causal_mask, config, hidden[:, past:], positions, kv_cache)
            mask = create_causal_mask(**given)
        out, _ = functional_call(
            attn, weights, (hidden[:, past:], (cos[:, past:], sin[:, past:]), mask), {key: kv_cache}
        )
        return cast(torch.Tensor, out[..., : h * d_v].reshape(b, lq, h, d_v).transpose(1, 2))

    def _impl(self, op: str) -> Callable[..., torch.Tensor]:
        if op == "mla_attention":
            return self.mla_attention
        return cast(Callable[..., torch.Tensor], super()._impl(op))  # type: ignore[misc]  # the adapter after this mixin

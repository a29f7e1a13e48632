"""PyTorch multi-head latent attention for the torch adapter, in both forms as the code that runs them writes them:
naive as HF transformers' DeepSeek-V3 attention (one up-projection of the latent to every head's [k_nope, v], the
shared rope key expanded to the heads, keys and queries concatenated, SDPA), absorbed as inference engines decode
(W_UK folded into the query by an einsum, scores against the latent and the rope key, the latent attended, W_UV
applied after). Computed in float32, rounded once; the softmax scale with DeepSeek's yarn_get_mscale.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

import torch
import torch.nn.functional as F

from transformer_conformance.adapters.torch.local_attention import positions as token_positions
from transformer_conformance.adapters.torch.tensors import rope_torch


def softmax_scale(d_nope: int, d_rope: int, mscale: Mapping[str, float] | None) -> float:
    """(D_n + D_r)^−½, times mscale² under YaRN (DeepSeek's yarn_get_mscale(factor, mscale_all_dim))."""
    scale = (d_nope + d_rope) ** -0.5
    if mscale and mscale["factor"] > 1:
        m = 0.1 * mscale["mscale_all_dim"] * math.log(mscale["factor"]) + 1.0
        scale = scale * m * m
    return scale


def ops(
    layout: str, alignment: str, scale_of: Callable[[int, int, Mapping[str, float] | None], float] = softmax_scale
) -> dict[str, Callable[..., torch.Tensor]]:
    def mla_attention(
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
        h, d_c, d_n = w_uk.shape
        d_v = w_uv.shape[-1]
        b, lk, _ = latent.shape
        lq = q_nope.shape[2]
        scale = scale_of(d_n, q_rope.shape[-1], mscale)
        c = latent.float()
        q_pe = rope_torch(q_rope.float(), q_positions, base, None, layout)
        k_pe = rope_torch(k_rope.float(), k_positions, base, None, layout)[:, None]  # (B, 1, L_k, D_r)
        mask: Any = None
        if causal:
            p, j = token_positions(lq, lk, latent.device, alignment)
            mask = j <= p
        if form == "naive":
            w_kv_b = torch.cat([w_uk, w_uv], dim=-1).float().permute(1, 0, 2).reshape(d_c, h * (d_n + d_v))
            kv = (c @ w_kv_b).view(b, lk, h, d_n + d_v).transpose(1, 2)
            k_nope, v = kv.split([d_n, d_v], dim=-1)
            k = torch.cat([k_nope, k_pe.expand(-1, h, -1, -1)], dim=-1)
            q = torch.cat([q_nope.float(), q_pe], dim=-1)
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale)
        else:
            q_lat = torch.einsum("bhqd,hcd->bhqc", q_nope.float(), w_uk.float())
            s = (torch.einsum("bhqc,bkc->bhqk", q_lat, c) + q_pe @ k_pe.transpose(-1, -2)) * scale
            if mask is not None:
                s = s.masked_fill(~mask, float("-inf"))
            o_lat = torch.einsum("bhqk,bkc->bhqc", torch.softmax(s, dim=-1), c)
            out = torch.einsum("bhqc,hcd->bhqd", o_lat, w_uv.float())
        return out.to(q_nope.dtype)

    return {"mla_attention": mla_attention}

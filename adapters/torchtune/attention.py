"""The contract's ``attention`` through torchtune's own attention modules.

torchtune's attention modules take the hidden states and project them themselves: ``q_proj(x)``,
``k_proj(y)``, ``v_proj(y)``, then ``output_proj`` of the heads. The suite hands over q, k and v already
projected, so the projections here pass them through unchanged: ``q_proj`` and ``output_proj`` are
``nn.Identity``, and y holds k and v side by side, ``k_proj`` and ``v_proj`` each taking its half. What runs
is the module's own head split, grouped-KV expansion, masking, KV cache and attention call (seed-002 §3.1.1,
seed-000 §A modern decoder block).

* ``MultiHeadAttention`` (``torchtune.modules``, every decoder's attention) when there is no soft-cap: with
  ``is_causal=False`` for non-causal attention; for causal attention with as many queries as keys as in
  training (no mask: ``F.scaled_dot_product_attention(is_causal=True)``); with fewer queries than keys as
  decoding runs it, through a ``KVCache`` (``setup_cache``): the keys before the queries are written first
  (a prefill of L_k − L_q tokens whose output is discarded), then the queries attend to the whole cache
  under the rows of a lower-triangular mask at their positions — the mask ``TransformerDecoder`` builds
  from ``input_pos`` (``causal_mask[None, input_pos]``). So the causal alignment is bottom-right. The cache
  has no backward (``KVCache.update`` advances the position index it indexed with, in place): gradients
  come from the same mask rows over all the keys at once, as in chunked prefill without a cache.
* ``Gemma2Attention`` (``torchtune.models.gemma2``) when a soft-cap or a scale is asked for: the only torchtune
  attention with logit soft-capping (``softcapping``) or a scale other than 1/√head_dim
  (``query_pre_attn_scalar``, scaling by its −½ power: the scale s is given as s⁻²), computed as Gemma 2's
  builders make it, with the same masks and cache (its default mask, ``tril(s_x, s_x)``, is the training case).

Both take one ``head_dim`` for q, k and v. A value width D_v other than D is run as ⌈D_v/D⌉ calls, each on
a D-wide slice of v (the last one zero-padded): the output is linear in v, the softmax the same in each.
"""

from __future__ import annotations

import torch
from torch import nn
from torchtune.models.gemma2._attention import Gemma2Attention
from torchtune.modules import MultiHeadAttention


class _Take(nn.Module):
    """A projection that takes columns ``start:stop`` of its input (k or v out of y = [k | v])."""

    def __init__(self, start: int, stop: int) -> None:
        super().__init__()
        self.start, self.stop = start, stop

    def forward(self, y: torch.Tensor) -> torch.Tensor:
        return y[..., self.start : self.stop]


def _module(hq: int, hkv: int, d: int, causal: bool, softcap: float | None, scale: float | None) -> nn.Module:
    common = {
        "embed_dim": hq * d,
        "num_heads": hq,
        "num_kv_heads": hkv,
        "head_dim": d,
        "q_proj": nn.Identity(),
        "k_proj": _Take(0, hkv * d),
        "v_proj": _Take(hkv * d, 2 * hkv * d),
        "output_proj": nn.Identity(),
        "is_causal": causal,
    }
    if softcap is None and scale is None:
        return MultiHeadAttention(**common)
    return Gemma2Attention(
        **common,
        softcapping=None if softcap is None else float(softcap),
        # the scale Gemma 2's builders set through query_pre_attn_scalar: it scales by query_pre_attn_scalar^-0.5
        query_pre_attn_scalar=None if scale is None else float(scale) ** -2,  # type: ignore[arg-type]
    )


def _one(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool, softcap: float | None, scale: float | None
) -> torch.Tensor:
    """One call of a torchtune attention module on q (B, Hq, Lq, D), k and v (B, Hkv, Lk, D)."""
    b, hq, lq, d = q.shape
    hkv, lk = k.shape[1], k.shape[2]
    # the module's hidden states: x (B, Lq, Hq·D) for the queries, y (B, Lk, 2·Hkv·D) for [k | v]; a copy, so
    # Gemma2Attention's in-place scaling of its q never reaches the suite's tensors
    x = q.transpose(1, 2).reshape(b, lq, hq * d).clone()
    y = torch.cat((k.transpose(1, 2).reshape(b, lk, hkv * d), v.transpose(1, 2).reshape(b, lk, hkv * d)), dim=-1)
    module = _module(hq, hkv, d, causal, softcap, scale).to(q.device)
    if causal and lq < lk:
        # the rows of the decoder's causal mask at the queries' positions lk − lq … lk − 1
        mask = torch.tril(torch.ones(lk, lk, dtype=torch.bool, device=q.device))
        p = lk - lq
        if torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad):
            # KVCache.update advances its position index in place after indexing with it: no backward through
            # the cache (it is for decoding), so a gradient attends to all the keys under the same mask rows
            out = module(x, y, mask=mask[None, p:].expand(b, lq, lk))
        else:
            # decoding: the earlier keys go into the cache first, then the queries attend to the whole cache
            module.setup_cache(b, q.dtype, lk)  # type: ignore[operator]
            module(torch.zeros(b, p, hq * d, dtype=q.dtype, device=q.device), y[:, :p], mask=mask[None, :p])
            out = module(x, y[:, p:], mask=mask[None, p:])
    elif not causal and isinstance(module, Gemma2Attention):
        # Gemma2Attention ignores is_causal: without a mask it applies its own causal one
        out = module(x, y, mask=torch.ones(b, lq, lk, dtype=torch.bool, device=q.device))
    else:
        out = module(x, y)
    return out.view(b, lq, hq, d).transpose(1, 2)


def torchtune_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    causal: bool = False,
    softcap: float | None = None,
    scale: float | None = None,
) -> torch.Tensor:
    """The contract's attention, (B, Hq, Lq, D_v), through torchtune's attention modules (module docstring)."""
    d, dv = q.shape[-1], v.shape[-1]
    parts = []
    for start in range(0, dv, d):
        chunk = v[..., start : start + d]
        width = chunk.shape[-1]
        if width < d:
            chunk = nn.functional.pad(chunk, (0, d - width))
        parts.append(_one(q, k, chunk, causal, softcap, scale)[..., :width])
    return torch.cat(parts, dim=-1)

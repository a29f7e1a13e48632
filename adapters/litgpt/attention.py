"""The contract's attention and sliding-window attention through LitGPT's ``CausalSelfAttention``.

LitGPT's attention projects the hidden states itself: ``qkv(x)`` is split into q, k and v, each viewed as heads.
The suite hands over q, k and v already projected, so ``qkv`` is ``nn.Identity`` on tokens x_t = [q_t | k_t | v_t]
(``n_head·D + 2·n_query_groups·D`` wide) and ``proj`` is ``nn.Identity``; ``rotary_percentage`` 0 makes
``rope_n_elem`` 0, so the module's RoPE leaves q and k as they are. What runs is the module's own head split, the
grouped-KV ``repeat_interleave``, its masks, its ``KVCache`` and its ``scaled_dot_product_attention`` (SDPA, or
with ``attention_logit_softcapping`` its own q·kᵀ, ``do_softcapping``, additive mask and float32 softmax).

* causal, L_q = L_k: ``forward(x, cos, sin)`` without a mask, as training runs it (SDPA ``is_causal=True``; with a
  soft-cap the module's own ``triu`` mask of ``finfo.min``; with a sliding window the module's own window mask);
* causal, L_q < L_k: decoding as ``GPT.forward`` runs it: ``build_kv_cache``, the earlier L_k − L_q tokens written
  first (their output discarded), then the queries at positions L_k − L_q … L_k − 1 under the rows
  ``batched_index_select(build_mask_cache(L_k), 2, input_pos)`` — GPT.forward's boolean mask. A sliding-window
  layer's cache is LitGPT's ring buffer of min(L_k, W) slots, which refuses a chunk longer than that
  ("use chunked prefill with chunk size <= max_cache_len"): the earlier tokens and the queries go in chunks of
  that length, each query chunk in a fresh module after the same prefill (so every chunk's gradient is its own
  graph; the cache is written in place);
* not causal (LitGPT's attention is causal; ``GPT`` never asks otherwise): the keys are written to a cache of
  L_k + L_q slots, the queries then run at positions L_k … L_k + L_q − 1 with zero keys, under an additive mask
  of 0 on the L_k keys and −∞ on the queries' own slots — the additive form the module's soft-cap and window
  paths build themselves.

The scale s is ``attention_scores_scalar`` = s⁻² (the module scales by its −½ power). One ``head_size`` serves q, k
and v: a value width D_v other than D runs as ⌈D_v/D⌉ calls on D-wide slices of v (the last zero-padded).
"""

from __future__ import annotations

import torch
from litgpt import Config
from litgpt.model import CausalSelfAttention, batched_index_select, build_mask_cache
from torch import nn


def _module(
    hq: int, hkv: int, d: int, softcap: float | None, scale: float | None, window: int | None
) -> CausalSelfAttention:
    config = Config(
        n_layer=1,
        n_embd=hq * d,
        n_head=hq,
        n_query_groups=hkv,
        head_size=d,
        rotary_percentage=0.0,
        bias=False,
        attention_logit_softcapping=None if softcap is None else float(softcap),
        attention_scores_scalar=None if scale is None else float(scale) ** -2,
        sliding_window_size=window,
        sliding_window_indices=None if window is None else [1],
    )
    module = CausalSelfAttention(config, block_idx=0)
    module.qkv = nn.Identity()
    module.proj = nn.Identity()
    return module


def _tokens(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """x (B, T, (Hq + 2·Hkv)·D): each token's [q | k | v] heads side by side, as ``qkv`` would produce them."""
    b, t = q.shape[0], q.shape[2]
    return torch.cat([a.transpose(1, 2).reshape(b, t, -1) for a in (q, k, v)], dim=-1)


def _rope_off(t: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin of width 0 (``rope_n_elem`` is 0): the module rotates nothing."""
    empty = torch.zeros(1, t, 0, device=device)
    return empty, empty


def _call(
    module: CausalSelfAttention, x: torch.Tensor, input_pos: torch.Tensor | None, mask: torch.Tensor | None
) -> torch.Tensor:
    cos, sin = _rope_off(x.shape[1], x.device)
    return module(x, cos, sin, mask=mask, input_pos=input_pos)


def _one(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    causal: bool,
    softcap: float | None,
    scale: float | None,
    window: int | None,
) -> torch.Tensor:
    b, hq, lq, d = q.shape
    hkv, lk = k.shape[1], k.shape[2]
    zq = torch.zeros(b, hq, 1, d, dtype=q.dtype, device=q.device)

    def fresh(slots: int) -> CausalSelfAttention:
        module = _module(hq, hkv, d, softcap, scale, window).to(q.device)
        module.kv_cache = module.build_kv_cache(b, slots, rope_cache_length=0, device=q.device, dtype=q.dtype)
        return module

    if causal and lq == lk:
        out = _call(_module(hq, hkv, d, softcap, scale, window).to(q.device), _tokens(q, k, v), None, None)
    elif causal:
        p = lk - lq
        rows = build_mask_cache(lk, q.device)
        chunk = lk if window is None else min(lk, window)
        outs = []
        for start in range(0, lq, chunk):
            stop = min(start + chunk, lq)
            module = fresh(lk)
            for s in range(0, p + start, chunk):  # the tokens before this chunk, in chunks the cache accepts
                e = min(s + chunk, p + start)
                pos = torch.arange(s, e, device=q.device)
                x = _tokens(zq.expand(b, hq, e - s, d), k[:, :, s:e], v[:, :, s:e])
                _call(module, x, pos, batched_index_select(rows, 2, pos))
            pos = torch.arange(p + start, p + stop, device=q.device)
            x = _tokens(q[:, :, start:stop], k[:, :, p + start : p + stop], v[:, :, p + start : p + stop])
            outs.append(_call(module, x, pos, batched_index_select(rows, 2, pos)))
        out = torch.cat(outs, dim=1)
    else:
        module = fresh(lk + lq)
        zk = torch.zeros(b, hkv, lq, d, dtype=k.dtype, device=k.device)
        pos = torch.arange(lk, device=q.device)
        keys = batched_index_select(build_mask_cache(lk + lq, q.device), 2, pos)  # GPT.forward's rows (output unused)
        _call(module, _tokens(zq.expand(b, hq, lk, d), k, v), pos, keys)
        mask = torch.zeros(1, 1, lq, lk + lq, dtype=q.dtype, device=q.device)
        mask[..., lk:] = float("-inf")
        out = _call(module, _tokens(q, zk, zk), torch.arange(lk, lk + lq, device=q.device), mask)
    return out.view(b, lq, hq, d).transpose(1, 2)


def litgpt_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    causal: bool = False,
    softcap: float | None = None,
    scale: float | None = None,
    window: int | None = None,
) -> torch.Tensor:
    """The contract's attention (``window`` None) or sliding-window attention, (B, Hq, Lq, D_v), through
    ``CausalSelfAttention`` (module docstring)."""
    d, dv = q.shape[-1], v.shape[-1]
    parts = []
    for start in range(0, dv, d):
        piece = v[..., start : start + d]
        width = piece.shape[-1]
        if width < d:
            piece = nn.functional.pad(piece, (0, d - width))
        parts.append(_one(q, k, piece, causal, softcap, scale, window)[..., :width])
    return torch.cat(parts, dim=-1)


def litgpt_sliding_window_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    window: int,
    softcap: float | None = None,
    scale: float | None = None,
) -> torch.Tensor:
    """Causal attention through a sliding-window layer of ``window`` (``sliding_window_size``)."""
    return litgpt_attention(q, k, v, causal=True, softcap=softcap, scale=scale, window=int(window))

"""PyTorch sliding-window, chunked and sink attention for the torch adapter, as model code writes them: a boolean
mask built from the query and key positions handed to ``F.scaled_dot_product_attention`` (HF transformers' sdpa
path), and for soft-capping and sinks the eager softmax (HF gpt-oss's eager attention: the sink column concatenated
to the logits, the row's maximum subtracted, softmax, the column dropped). Computed in float32, rounded once.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

from transformer_conformance.adapters.torch.blocks import SDPA_GQA


def positions(lq: int, lk: int, device: torch.device, alignment: str) -> tuple[torch.Tensor, torch.Tensor]:
    """(query token positions (L_q, 1), key positions (1, L_k)): queries are the last L_q tokens bottom-right."""
    offset = lk - lq if alignment == "bottom_right" else 0
    return (torch.arange(lq, device=device) + offset)[:, None], torch.arange(lk, device=device)[None, :]


def window_mask(
    lq: int, lk: int, device: torch.device, alignment: str, window: int | None, counts: str
) -> torch.Tensor:
    """Causal, and within the window: p − j < W (inclusive) or p − j ≤ W (exclusive)."""
    p, j = positions(lq, lk, device, alignment)
    mask = j <= p
    if window is not None:
        mask = mask & ((p - j < window) if counts == "inclusive" else (p - j <= window))
    return mask


def chunk_mask(lq: int, lk: int, device: torch.device, alignment: str, chunk: int) -> torch.Tensor:
    p, j = positions(lq, lk, device, alignment)
    return (j <= p) & (torch.div(j, chunk, rounding_mode="floor") == torch.div(p, chunk, rounding_mode="floor"))


def masked_f32(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    mask: torch.Tensor | None,
    softcap: float | None = None,
    scale: float | None = None,
    sinks: torch.Tensor | None = None,
) -> torch.Tensor:
    """Attention of float32 (B, H, L, D) tensors under ``mask`` (L_q, L_k), GQA by KV head h // (H_q/H_kv)."""
    if not softcap and sinks is None:
        if not SDPA_GQA:
            rep = q.shape[1] // k.shape[1]
            k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
        gqa: dict[str, Any] = {"enable_gqa": True} if SDPA_GQA else {}
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale, **gqa)
    rep = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
    s = (q @ k.transpose(-1, -2)) * (q.shape[-1] ** -0.5 if scale is None else scale)
    if softcap:
        s = softcap * torch.tanh(s / softcap)
    if mask is not None:
        s = s.masked_fill(~mask, float("-inf"))
    if sinks is None:
        return torch.softmax(s, dim=-1) @ v
    column = sinks.reshape(1, -1, 1, 1).expand(s.shape[0], -1, s.shape[2], 1)
    logits = torch.cat([s, column], dim=-1)
    logits = logits - logits.max(dim=-1, keepdim=True).values
    return torch.softmax(logits, dim=-1)[..., :-1] @ v


def ops(alignment: str, counts: str) -> dict[str, Callable[..., torch.Tensor]]:
    """The three operations, keyed by contract name, for the declared causal alignment and window count."""

    def sliding_window_attention(
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        window: int,
        softcap: float | None = None,
        scale: float | None = None,
    ) -> torch.Tensor:
        mask = window_mask(q.shape[-2], k.shape[-2], q.device, alignment, window, counts)
        return masked_f32(q.float(), k.float(), v.float(), mask, softcap, scale).to(q.dtype)

    def chunked_attention(
        q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, chunk: int, scale: float | None = None
    ) -> torch.Tensor:
        mask = chunk_mask(q.shape[-2], k.shape[-2], q.device, alignment, chunk)
        return masked_f32(q.float(), k.float(), v.float(), mask, None, scale).to(q.dtype)

    def sink_attention(
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        sinks: torch.Tensor,
        causal: bool = True,
        window: int | None = None,
        scale: float | None = None,
    ) -> torch.Tensor:
        mask = None
        if causal or window is not None:
            mask = window_mask(q.shape[-2], k.shape[-2], q.device, alignment, window, counts)
        return masked_f32(q.float(), k.float(), v.float(), mask, None, scale, sinks.float()).to(q.dtype)

    return {f.__name__: f for f in (sliding_window_attention, chunked_attention, sink_attention)}

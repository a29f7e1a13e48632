"""RoPE through torchtitan's ``ComplexRoPE`` (``torchtitan.models.common.rope``), the rotary embedding of its Llama 3
and DeepSeek-V3 models.

``ComplexRoPE`` precomputes a cache of complex64 ``cis`` values, ``torch.polar(1, outer(arange(max_seq_len), freqs))``,
freqs = θ^(−2i/d) in float32 (the Llama 3 bands applied to them with ``scaling="llama"``), and its
``apply_rotary_emb`` views q and k as complex numbers of **adjacent** pairs (``x.float().reshape(..., -1, 2)``),
multiplies by the cache rows of the positions (``positions`` of shape (1, T): ``cache[positions.squeeze(0)]``) and
casts once (``type_as``). The module is built as a model builds it, outside any autocast context (its cache is a
buffer made when the model is initialised), and called as ``GQAttention`` calls it: ``rope(xq, xk, positions)``
with q and k laid out (B, L, N, H).

The cache covers positions 0 … max_seq_len − 1. Past 2^16 positions (the suite draws up to 2^24 + 40) the whole
cache would take gigabytes, so the module is built with one row per position asked for: while its
``_precompute_cache`` runs, ``torch.outer(t, freqs)`` takes the positions (int64, as its ``arange``) in place of
``t`` (``_far_rows``; bit for bit the whole cache's rows, tests/test_adapters_torchtitan.py).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from functools import lru_cache
from types import SimpleNamespace
from typing import Any
from unittest import mock

import torch
from torchtitan.models.common import rope as titan_rope
from torchtitan.models.common.rope import ComplexRoPE

#: positions up to which the whole cache is built (``max_seq_len`` = the largest position + 1); beyond, one row per
#: position asked for
WHOLE_CACHE = 1 << 16


def rope_config(rd: int, length: int, base: float, scaling: Mapping[str, Any] | None) -> ComplexRoPE.Config:
    """``ComplexRoPE.Config`` of width ``rd`` for the contract's scaling rule (None: plain; ``llama3``: torchtitan's
    ``scaling="llama"``, as its Llama 3 configurations set it)."""
    if not scaling:
        return ComplexRoPE.Config(dim=rd, max_seq_len=length, theta=base)
    if scaling["type"] != "llama3":
        raise NotImplementedError(f"torchtitan's ComplexRoPE is not declared for {scaling['type']!r} scaling")
    return ComplexRoPE.Config(
        dim=rd,
        max_seq_len=length,
        theta=base,
        scaling="llama",
        scaling_factor=float(scaling["factor"]),
        low_freq_factor=float(scaling.get("low_freq_factor", 1.0)),
        high_freq_factor=float(scaling.get("high_freq_factor", 4.0)),
        original_max_position_embeddings=int(scaling["original_max_position_embeddings"]),
    )


@contextmanager
def _no_autocast(device: torch.device) -> Iterator[None]:
    """The model's buffers are made at initialisation, outside the training step's autocast."""
    with torch.autocast(device_type=device.type, enabled=False):
        yield


@lru_cache(maxsize=4)
def _whole(rd: int, length: int, base: float, scaling: tuple[tuple[str, Any], ...], device: str) -> ComplexRoPE:
    with _no_autocast(torch.device(device)), torch.device(device):
        return rope_config(rd, length, base, dict(scaling) or None).build()


class _TorchProxy:
    """``torch`` with some functions replaced (``_far_rows``)."""

    def __init__(self, replaced: SimpleNamespace) -> None:
        self._replaced = replaced

    def __getattr__(self, name: str) -> Any:
        return getattr(self._replaced, name, None) or getattr(torch, name)


def _far_rows(rd: int, positions: torch.Tensor, base: float, scaling: Mapping[str, Any] | None) -> ComplexRoPE:
    """A ``ComplexRoPE`` whose cache holds the rows of ``positions`` in their order (module docstring)."""
    wanted = positions.to(torch.int64)

    def outer(t: torch.Tensor, freqs: torch.Tensor) -> torch.Tensor:
        return torch.outer(wanted.to(t.device), freqs)

    with mock.patch.object(titan_rope, "torch", _TorchProxy(SimpleNamespace(outer=outer))):
        with _no_autocast(positions.device), torch.device(positions.device):
            return rope_config(rd, int(wanted.numel()), base, scaling).build()


def rope_module(
    rd: int, positions: torch.Tensor, base: float, scaling: Mapping[str, Any] | None
) -> tuple[ComplexRoPE, torch.Tensor]:
    """The module and the ``positions`` (1, T) to call it with for these positions."""
    top = int(positions.max()) + 1 if positions.numel() else 1
    if top <= WHOLE_CACHE:
        key = tuple(sorted((scaling or {}).items()))
        return _whole(rd, top, float(base), key, str(positions.device)), positions[None, :]
    far = _far_rows(rd, positions, float(base), scaling)
    return far, torch.arange(positions.numel(), device=positions.device)[None, :]


def rotate(x: torch.Tensor, positions: torch.Tensor, rope: ComplexRoPE) -> torch.Tensor:
    """x (..., T, d) rotated by ``rope`` as ``GQAttention`` rotates its queries: laid out (B, T, 1, d), the module's
    key a detached copy (its output is not used, and must not add to x's gradient)."""
    lead = x.reshape(-1, *x.shape[-2:]).unsqueeze(2)  # (n, T, 1, d): (B, L, N, H)
    out, _ = rope(lead, lead.detach(), positions)
    return out.squeeze(2).reshape(x.shape)


def complex_rope(
    x: torch.Tensor,
    positions: torch.Tensor,
    base: float = 10000.0,
    rotary_dim: int | None = None,
    scaling: Mapping[str, Any] | None = None,
) -> torch.Tensor:
    """The contract's ``rope`` / ``rope_scaled``: the module of width ``rotary_dim`` on x[..., :rotary_dim], the rest
    passed through (torchtitan rotates a whole head; DeepSeek's MLA rotates its rope slice and concatenates it)."""
    rd = x.shape[-1] if rotary_dim is None else int(rotary_dim)
    if rd == 0:
        return x.clone()
    module, pos = rope_module(rd, positions, base, scaling)
    roped = rotate(x[..., :rd], pos, module)
    return torch.cat((roped, x[..., rd:]), dim=-1)

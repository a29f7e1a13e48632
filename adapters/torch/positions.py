"""The torch adapter's positions, RoPE context extension and parameter count, in plain torch.

Written from the rules as the libraries state them (the ALiBi reference code's slopes, HF transformers'
frequency formulas, a LLaMA decoder's modules), independently of the oracle in ``reference/``.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Mapping
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn


def sinusoidal_positions(x: torch.Tensor, positions: torch.Tensor, base: float = 10000.0) -> torch.Tensor:
    """x + PE, PE[:, 2i] = sin(pos·ω_i), PE[:, 2i+1] = cos(pos·ω_i), angles in float32, one rounding."""
    d = x.shape[-1]
    inv_freq = 1.0 / (base ** (torch.arange(0, d, 2, device=x.device, dtype=torch.int64).float() / d))
    angles = positions.float()[:, None] * inv_freq[None, :]
    pe = torch.stack((angles.sin(), angles.cos()), dim=-1).flatten(-2)
    return (x.float() + pe).to(x.dtype)


def learned_positions(table: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """The table's rows; positions outside 0 … L−1 refused before the lookup (on CUDA an out-of-range
    embedding index is a device-side assert that poisons the context, not an exception)."""
    n = table.shape[0]
    if positions.numel() and (int(positions.min()) < 0 or int(positions.max()) >= n):
        raise IndexError(f"position outside the learned table's 0 … {n - 1}")
    return F.embedding(positions, table)


def alibi_slopes(n: int) -> list[float]:
    """The ALiBi reference implementation's ``get_slopes``."""

    def power_of_2(k: int) -> list[float]:
        start = 2 ** (-(2 ** -(math.log2(k) - 3)))
        return [start * start**i for i in range(k)]

    if math.log2(n).is_integer():
        return power_of_2(n)
    closest = 2 ** math.floor(math.log2(n))
    return power_of_2(closest) + alibi_slopes(2 * closest)[0::2][: n - closest]


def alibi(scores: torch.Tensor, q_positions: torch.Tensor, k_positions: torch.Tensor) -> torch.Tensor:
    slopes = torch.tensor(alibi_slopes(scores.shape[-3]), dtype=torch.float32, device=scores.device)
    dist = (q_positions[:, None] - k_positions[None, :]).abs().float()
    return (scores.float() - slopes[:, None, None] * dist).to(scores.dtype)


def position_ops() -> dict[str, Callable[..., torch.Tensor]]:
    return {f.__name__: f for f in (sinusoidal_positions, learned_positions, alibi)}


def rope_scaled_inv_freq(
    rd: int, base: float, scaling: Mapping[str, Any] | None, seq_len: int, device: torch.device | str
) -> tuple[torch.Tensor, float]:
    """Inverse frequencies (float32) and attention factor of a RoPE context-extension rule."""

    def inv(b: float) -> torch.Tensor:
        return 1.0 / (b ** (torch.arange(0, rd, 2, device=device, dtype=torch.int64).float() / rd))

    if scaling is None:
        return inv(base), 1.0
    kind, s = scaling["type"], float(scaling["factor"])
    if kind == "linear":
        return inv(base) / s, 1.0
    if kind == "ntk":
        return inv(base * s ** (rd / (rd - 2))), 1.0
    if kind == "dynamic":
        original = int(scaling["original_max_position_embeddings"])
        n = max(seq_len, original)
        return inv(base * ((s * n / original) - (s - 1)) ** (rd / (rd - 2))), 1.0
    if kind == "yarn":
        original = int(scaling["original_max_position_embeddings"])
        beta_fast, beta_slow = float(scaling.get("beta_fast", 32)), float(scaling.get("beta_slow", 1))

        def correction_dim(rot: float) -> float:
            return (rd * math.log(original / (rot * 2 * math.pi))) / (2 * math.log(base))

        low = max(math.floor(correction_dim(beta_fast)), 0)
        high = min(math.ceil(correction_dim(beta_slow)), rd - 1)
        span = high - low if low != high else 0.001
        ramp = torch.clamp((torch.arange(rd // 2, dtype=torch.float32, device=device) - low) / span, 0, 1)
        pos_freqs = base ** (torch.arange(0, rd, 2, device=device).float() / rd)
        extrapolation_factor = 1 - ramp
        freq = (1.0 / (s * pos_freqs)) * (1 - extrapolation_factor) + (1.0 / pos_freqs) * extrapolation_factor
        return freq, (0.1 * math.log(s) + 1.0 if s > 1 else 1.0)
    if kind == "longrope":
        original = int(scaling["original_max_position_embeddings"])
        ext = torch.tensor(scaling["long_factor" if seq_len > original else "short_factor"], dtype=torch.float32)
        pos_freqs = base ** (torch.arange(0, rd, 2, device=device, dtype=torch.int64).float() / rd)
        attention = math.sqrt(1 + math.log(s) / math.log(original)) if s > 1 else 1.0
        return 1.0 / (ext.to(device) * pos_freqs), attention
    if kind == "llama3":
        trained = float(scaling["original_max_position_embeddings"])
        low_f, high_f = float(scaling.get("low_freq_factor", 1.0)), float(scaling.get("high_freq_factor", 4.0))
        freq = inv(base)
        wavelen = 2 * math.pi / freq
        scaled = torch.where(wavelen > trained / low_f, freq / s, freq)
        smooth = (trained / wavelen - low_f) / (high_f - low_f)
        smoothed = (1 - smooth) * scaled / s + smooth * scaled
        medium = (wavelen >= trained / high_f) & (wavelen <= trained / low_f)
        return torch.where(medium, smoothed, scaled), 1.0
    raise ValueError(f"unknown RoPE scaling type {kind!r}")


class _Block(nn.Module):
    def __init__(self, d: int, d_ff: int, heads: int, kv_heads: int) -> None:
        super().__init__()
        dh = d // heads
        self.q, self.k, self.v = (nn.Linear(d, n * dh, bias=False) for n in (heads, kv_heads, kv_heads))
        self.o = nn.Linear(heads * dh, d, bias=False)
        self.gate, self.up = nn.Linear(d, d_ff, bias=False), nn.Linear(d, d_ff, bias=False)
        self.down = nn.Linear(d_ff, d, bias=False)
        self.norm1, self.norm2 = nn.RMSNorm(d), nn.RMSNorm(d)


def llama_param_count(
    vocab: int,
    hidden: int,
    intermediate: int,
    layers: int,
    heads: int,
    kv_heads: int | None = None,
    tied: bool = False,
) -> int:
    """Parameters of a LLaMA-style decoder built from torch modules on the meta device (no memory)."""
    with torch.device("meta"), warnings.catch_warnings():
        # d_ff = 0 (an attention-only layer) builds zero-element weights, whose initialisation torch warns about
        warnings.filterwarnings("ignore", "Initializing zero-element tensors")
        blocks = nn.ModuleList(_Block(hidden, intermediate, heads, kv_heads or heads) for _ in range(layers))
        embed = nn.Embedding(vocab, hidden)
        model = nn.ModuleDict({"embed": embed, "blocks": blocks, "norm": nn.RMSNorm(hidden)})
        head = nn.Linear(hidden, vocab, bias=False)
        if tied:
            head.weight = embed.weight
        model["head"] = head
    return sum(p.numel() for p in model.parameters())  # shared parameters are listed once


def mrope_torch(
    x: torch.Tensor,
    positions: torch.Tensor,
    base: float,
    sections: tuple[int, int, int],
    streams: str,
    layout: str,
) -> torch.Tensor:
    """Multimodal RoPE as Qwen2-VL's and Qwen3-VL's text rotary embeddings build it: the angles of the three
    position rows (3, T) in float32, each pair's taken from its stream (consecutive sections, or Qwen3-VL's
    t/h/w interleaving), the rotation in float32 and one rounding to x's dtype."""
    d = x.shape[-1]
    inv_freq = 1.0 / (base ** (torch.arange(0, d, 2, device=x.device, dtype=torch.int64).float() / d))
    freqs = positions.float()[..., None] * inv_freq  # (3, T, d/2)
    if streams == "sections":
        angles = torch.cat([part[i % 3] for i, part in enumerate(freqs.split(list(sections), dim=-1))], dim=-1)
    else:
        angles = freqs[0].clone()
        for s in (1, 2):
            angles[..., s : 3 * sections[s] : 3] = freqs[s, ..., s : 3 * sections[s] : 3]
    cos, sin = angles.cos(), angles.sin()
    xf = x.float()
    if layout == "interleaved":
        a, b = xf[..., 0::2], xf[..., 1::2]
        return torch.stack((a * cos - b * sin, a * sin + b * cos), dim=-1).flatten(-2).to(x.dtype)
    a, b = xf[..., : d // 2], xf[..., d // 2 :]
    return torch.cat((a * cos - b * sin, a * sin + b * cos), dim=-1).to(x.dtype)


def attention_temperature(
    q: torch.Tensor, positions: torch.Tensor, floor_scale: float = 8192.0, attn_scale: float = 0.1
) -> torch.Tensor:
    """Llama 4's temperature tuning: τ from the float32 positions, the float32 product, one rounding."""
    tau = torch.log1p(torch.floor((positions.float() + 1.0) / floor_scale)) * attn_scale + 1.0
    return (q * tau[:, None]).to(q.dtype)

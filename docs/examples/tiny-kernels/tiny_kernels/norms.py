"""The candidate library: RMSNorm and rotary position embedding (RoPE), as model code writes them.

Both compute in float32 whatever the input dtype and round once, to the input dtype, at the end.
"""

from __future__ import annotations

import torch
from torch import nn

DEFAULT_EPS = 1e-6


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float = DEFAULT_EPS) -> torch.Tensor:
    """x / sqrt(mean(x²) + eps) * weight over the last dimension."""
    xf = x.float()
    inv_rms = torch.rsqrt(xf.pow(2).mean(dim=-1, keepdim=True) + eps)
    return (xf * inv_rms * weight.float()).to(x.dtype)


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = DEFAULT_EPS) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return rms_norm(x, self.weight, self.eps)


def apply_rope(
    x: torch.Tensor, positions: torch.Tensor, base: float = 10000.0, rotary_dim: int | None = None
) -> torch.Tensor:
    """Rotate the pairs (x[2i], x[2i+1]) of x (..., T, d) at position m by the angle m·base^(−2i/rotary_dim).

    Only the first ``rotary_dim`` features rotate (all of d by default); the rest pass through.
    """
    rd = x.shape[-1] if rotary_dim is None else rotary_dim
    inv_freq = 1.0 / base ** (torch.arange(0, rd, 2, device=x.device).float() / rd)
    angles = positions.float()[:, None] * inv_freq[None, :]  # (T, rd/2)
    cos, sin = angles.cos(), angles.sin()
    xf = x.float()
    even, odd = xf[..., 0:rd:2], xf[..., 1:rd:2]
    rotated = torch.stack((even * cos - odd * sin, even * sin + odd * cos), dim=-1).flatten(-2)
    return torch.cat((rotated, xf[..., rd:]), dim=-1).to(x.dtype)

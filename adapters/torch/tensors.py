"""Tensors across the adapter boundary (NumPy in, NumPy out) and RoPE in plain torch, shared by the torch
adapter, its blocks and the adapters built on it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import ml_dtypes
import numpy as np
import torch

from transformer_conformance.adapters.contract import OPS

_TORCH_DTYPES = {
    np.dtype(np.float32): torch.float32,
    np.dtype(np.float16): torch.float16,
    np.dtype(ml_dtypes.bfloat16): torch.bfloat16,
    np.dtype(np.float64): torch.float64,
    np.dtype(np.int64): torch.int64,
}


def to_torch(a: np.ndarray, device: str) -> torch.Tensor:
    """A NumPy array as a tensor of the matching dtype (bfloat16 goes through float32, exactly)."""
    if a.dtype == np.dtype(ml_dtypes.bfloat16):
        return torch.from_numpy(a.astype(np.float32)).to(device=device, dtype=torch.bfloat16)
    # ascontiguousarray makes a 0-d array 1-d: keep the shape (a scalar loss's cotangent is 0-d)
    return torch.from_numpy(np.ascontiguousarray(a).reshape(a.shape)).to(device=device, dtype=_TORCH_DTYPES[a.dtype])


def to_numpy(t: torch.Tensor) -> np.ndarray:
    """A tensor back as a NumPy array of its own dtype (bfloat16 as ml_dtypes.bfloat16)."""
    t = t.detach().cpu()
    if t.dtype == torch.bfloat16:
        return t.float().numpy().astype(ml_dtypes.bfloat16)
    return t.numpy()


def rope_torch(
    x: torch.Tensor,
    positions: torch.Tensor,
    base: float,
    rotary_dim: int | None,
    layout: str,
    inv_freq: torch.Tensor | None = None,
    factor: float = 1.0,
) -> torch.Tensor:
    """RoPE in plain torch: angles in float32, rotation in float32, one rounding to x's dtype. ``inv_freq``
    and ``factor`` (multiplying cos and sin) come from a context-extension rule when given."""
    rd = x.shape[-1] if rotary_dim is None else rotary_dim
    if inv_freq is None:
        inv_freq = 1.0 / (base ** (torch.arange(0, rd, 2, device=x.device, dtype=torch.int64).float() / rd))
    angles = positions.float()[:, None] * inv_freq[None, :]
    cos, sin = angles.cos(), angles.sin()
    if factor != 1.0:
        cos, sin = cos * factor, sin * factor
    xf = x.float()
    rot, rest = xf[..., :rd], xf[..., rd:]
    if layout == "interleaved":
        a, b = rot[..., 0::2], rot[..., 1::2]
        out = torch.stack((a * cos - b * sin, a * sin + b * cos), dim=-1).flatten(-2)
    else:
        a, b = rot[..., : rd // 2], rot[..., rd // 2 :]
        out = torch.cat((a * cos - b * sin, a * sin + b * cos), dim=-1)
    return torch.cat((out, rest), dim=-1).to(x.dtype)


def input_tensors(op: str, inputs: Mapping[str, np.ndarray], device: str, grad: bool) -> dict[str, torch.Tensor]:
    """An operation's inputs as tensors on ``device``, the floating ones recording gradients if ``grad``."""
    tensors = {k: to_torch(v, device) for k, v in inputs.items()}
    for k in OPS[op].inputs:
        tensors[k].requires_grad_(grad)
    return tensors


def backward_grads(
    op: str,
    inputs: Mapping[str, np.ndarray],
    out: torch.Tensor,
    tensors: Mapping[str, torch.Tensor],
    cotangent: np.ndarray,
    device: str,
    held: Sequence[tuple[torch.Tensor, torch.Tensor]] = (),
) -> dict[str, np.ndarray]:
    """Backpropagate ``cotangent`` from ``out`` and collect the gradient of each of ``op``'s inputs as NumPy
    (zeros where autograd left none). ``held`` pairs an input tensor with the module parameter that holds its
    values (an ``nn.Linear`` weight stores (out, in), the transpose of the suite's (in, out)): the input's
    gradient is read from that parameter."""
    out.backward(to_torch(cotangent, device))
    from_params: dict[int, torch.Tensor | None] = {
        id(w): (p.grad.T if p.grad is not None and p.ndim == 2 else p.grad) for w, p in held
    }
    grads = {}
    for k in OPS[op].inputs:
        t = tensors[k]
        g = from_params.get(id(t), t.grad)
        grads[k] = to_numpy(g) if g is not None else np.zeros_like(inputs[k])
    return grads

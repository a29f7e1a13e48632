"""tiny-kernels exposed to transformer-conformance (the suite's docs/adapter-contract.md).

The suite calls ``forward`` and ``vjp`` with NumPy arrays in the dtype under test and compares the answers
with its float64 oracle. ``conventions`` says how this library computes, where correct implementations
differ; ``capabilities`` says what it provides. Whatever is not declared is reported unsupported.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import ml_dtypes
import numpy as np
import torch

import tiny_kernels
from tiny_kernels.norms import DEFAULT_EPS, apply_rope, rms_norm
from transformer_conformance.adapters import Capability, Conventions

BFLOAT16 = np.dtype(ml_dtypes.bfloat16)  # NumPy has no bfloat16 of its own


def to_torch(a: np.ndarray, device: str) -> torch.Tensor:
    """A copy of the suite's array as a tensor of the same dtype (bfloat16 goes through float32, exactly)."""
    if a.dtype == BFLOAT16:
        return torch.from_numpy(a.astype(np.float32)).to(device, torch.bfloat16)
    return torch.from_numpy(np.array(a)).to(device)


def to_numpy(t: torch.Tensor) -> np.ndarray:
    t = t.detach().cpu()
    return t.float().numpy().astype(BFLOAT16) if t.dtype == torch.bfloat16 else t.numpy()


class TinyKernelsAdapter:
    name = "tiny-kernels"
    conventions = Conventions(
        rope_layout="interleaved",  # apply_rope rotates the pairs (x[2i], x[2i+1])
        rope_angle_dtype="float32",  # its angles m·θ_i, and their cos and sin, are float32
        compute_dtype="float32",  # both upcast to float32...
        norm_rounding="single",  # ...and round once, after the weight
        eps_defaults={"rms_norm": DEFAULT_EPS},  # rms_norm's eps when the suite passes eps=None
    )

    def __init__(self, device: str = "cpu") -> None:
        self.device = device
        # both operations, in float32, bfloat16 and float16, with their gradients (through autograd)
        self.capabilities = {"rms_norm": Capability(), "rope": Capability()}

    def _run(
        self, op: str, inputs: Mapping[str, np.ndarray], params: Mapping[str, Any], grad: bool
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """The operation's output and its floating inputs (the leaves whose gradients vjp returns)."""
        t = {k: to_torch(v, self.device) for k, v in inputs.items()}
        if op == "rms_norm":
            x, weight = t["x"].requires_grad_(grad), t["weight"].requires_grad_(grad)
            eps = DEFAULT_EPS if params.get("eps") is None else params["eps"]
            return rms_norm(x, weight, eps), {"x": x, "weight": weight}
        if op == "rope":
            x = t["x"].requires_grad_(grad)
            return apply_rope(x, t["positions"], params["base"], params["rotary_dim"]), {"x": x}
        raise NotImplementedError(op)

    def forward(self, op: str, inputs: Mapping[str, np.ndarray], params: Mapping[str, Any]) -> np.ndarray:
        with torch.no_grad():
            out, _ = self._run(op, inputs, params, grad=False)
        return to_numpy(out)

    def vjp(
        self, op: str, inputs: Mapping[str, np.ndarray], params: Mapping[str, Any], cotangent: np.ndarray
    ) -> dict[str, np.ndarray]:
        out, leaves = self._run(op, inputs, params, grad=True)
        grads = torch.autograd.grad(out, list(leaves.values()), grad_outputs=to_torch(cotangent, self.device))
        return {k: to_numpy(g) for k, g in zip(leaves, grads, strict=True)}

    def environment(self) -> dict[str, str]:
        return {"tiny-kernels": tiny_kernels.__version__, "torch": torch.__version__, "device": self.device}

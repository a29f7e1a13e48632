"""Realistic defective PyTorch implementations, each wrong in exactly one way.

Each class is the built-in torch adapter with one operation replaced; ``BREAKS`` names the check that
must catch it. The project's tests run the conformance suite against all of them.
"""

from __future__ import annotations

import torch

from adapters.torch_adapter import TorchAdapter, llama_hidden_dim, rope_torch


class RopeWrongPairs(TorchAdapter):
    """Declares the half-split layout (HF) but rotates interleaved pairs (2i, 2i+1)."""

    name = "rope-wrong-pairs"

    def __init__(self, device: str = "cpu") -> None:
        super().__init__(device, rope_layout="half")
        self.impl["rope"] = lambda x, positions, base=10000.0, rotary_dim=None: rope_torch(
            x, positions, base, rotary_dim, "interleaved"
        )


class RmsEpsOutsideSqrt(TorchAdapter):
    """RMSNorm as γ·x / (√mean(x²) + ε): ε added outside the square root."""

    name = "rms-eps-outside-sqrt"

    def __init__(self, device: str = "cpu") -> None:
        super().__init__(device)

        def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float | None = None) -> torch.Tensor:
            eps = torch.finfo(torch.float32).eps if eps is None else eps
            xf = x.float()
            return (weight.float() * xf / (xf.pow(2).mean(-1, keepdim=True).sqrt() + eps)).to(x.dtype)

        self.impl["rms_norm"] = rms_norm


class LayerNormUnbiased(TorchAdapter):
    """LayerNorm with the unbiased variance (divides by d − 1), as torch.var does by default."""

    name = "layernorm-unbiased"

    def __init__(self, device: str = "cpu") -> None:
        super().__init__(device)

        def layer_norm(
            x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float | None = None
        ) -> torch.Tensor:
            xf = x.float()
            var = xf.var(-1, keepdim=True)  # unbiased
            y = (xf - xf.mean(-1, keepdim=True)) / torch.sqrt(var + (1e-5 if eps is None else eps))
            return (y * weight.float() + bias.float()).to(x.dtype)

        self.impl["layer_norm"] = layer_norm


class RmsAllInBf16(TorchAdapter):
    """RMSNorm computed entirely in the input dtype (squares, mean, rsqrt, products) while declaring the
    single final rounding of a float32 computation."""

    name = "rms-all-in-low-precision"

    def __init__(self, device: str = "cpu") -> None:
        super().__init__(device)

        def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float | None = None) -> torch.Tensor:
            eps = torch.finfo(torch.float32).eps if eps is None else eps
            return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight

        self.impl["rms_norm"] = rms_norm


class SwigluAt4d(TorchAdapter):
    """Sizes the SwiGLU hidden layer at 4d, as for a two-matrix MLP."""

    name = "swiglu-at-4d"

    def forward(self, op, inputs, params):  # type: ignore[no-untyped-def]
        if op == "swiglu_hidden_dim":
            import numpy as np

            return np.asarray(4 * params["d"])
        return super().forward(op, inputs, params)


class ZLossLinear(TorchAdapter):
    """z-loss as α·z instead of α·z²."""

    name = "z-loss-linear"

    def __init__(self, device: str = "cpu") -> None:
        super().__init__(device)
        self.impl["z_loss"] = lambda logits, alpha=1e-4: alpha * torch.logsumexp(logits, dim=-1)


#: adapter class -> (behaviour, the check that must fail, a dtype it must fail in)
BREAKS = {
    RopeWrongPairs: ("rope", "rope/forward", "float32"),
    RmsEpsOutsideSqrt: ("rms_norm", "rms_norm/forward", "float32"),
    LayerNormUnbiased: ("layer_norm", "layer_norm/forward", "float32"),
    RmsAllInBf16: ("rms_norm", "rms_norm/forward", "bfloat16"),
    SwigluAt4d: ("swiglu", "swiglu/hidden-width", None),
    ZLossLinear: ("z_loss", "z_loss/value", "float32"),
}

assert llama_hidden_dim(4096) == 11008  # the correct rule the defect departs from

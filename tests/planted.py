"""Realistic defective PyTorch implementations, each wrong in exactly one way.

Each class is the built-in torch adapter with one operation replaced; ``BREAKS`` names the check that
must catch it. The project's tests run the conformance suite against all of them.
"""

from __future__ import annotations

import torch

from adapters.torch_adapter import TorchAdapter, llama_hidden_dim, rope_torch
from adapters.torch_positions import llama_param_count, rope_scaled_inv_freq

# Each planted adapter declares only the operation it breaks, so the run spends its time on the checks
# that must catch it (the correct operations are the torch adapter's, which the conformance run covers).


def _only(adapter: TorchAdapter, *ops: str) -> None:
    adapter.capabilities = {op: cap for op, cap in adapter.capabilities.items() if op in ops}


class RopeWrongPairs(TorchAdapter):
    """Declares the half-split layout (HF) but rotates interleaved pairs (2i, 2i+1)."""

    name = "rope-wrong-pairs"

    def __init__(self, device: str = "cpu") -> None:
        super().__init__(device, rope_layout="half")
        _only(self, "rope")
        self.impl["rope"] = lambda x, positions, base=10000.0, rotary_dim=None: rope_torch(
            x, positions, base, rotary_dim, "interleaved"
        )


class RmsEpsOutsideSqrt(TorchAdapter):
    """RMSNorm as γ·x / (√mean(x²) + ε): ε added outside the square root."""

    name = "rms-eps-outside-sqrt"

    def __init__(self, device: str = "cpu") -> None:
        super().__init__(device)
        _only(self, "rms_norm")

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
        _only(self, "layer_norm")

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
        _only(self, "rms_norm")

        def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float | None = None) -> torch.Tensor:
            eps = torch.finfo(torch.float32).eps if eps is None else eps
            return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * weight

        self.impl["rms_norm"] = rms_norm


class SwigluAt4d(TorchAdapter):
    """Sizes the SwiGLU hidden layer at 4d, as for a two-matrix MLP."""

    name = "swiglu-at-4d"

    def __init__(self, device: str = "cpu") -> None:
        super().__init__(device)
        _only(self, "swiglu_hidden_dim")

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
        _only(self, "z_loss")
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


# ---- positions, context extension, loss reductions, accounting ---------------------------------------------------


class SinusoidalCosFirst(TorchAdapter):
    """The sinusoidal encoding with cos at even and sin at odd dimensions."""

    name = "sinusoidal-cos-first"

    def __init__(self, device: str = "cpu") -> None:
        super().__init__(device)
        _only(self, "sinusoidal_positions")

        def sinusoidal_positions(x: torch.Tensor, positions: torch.Tensor, base: float = 10000.0) -> torch.Tensor:
            d = x.shape[-1]
            inv = 1.0 / (base ** (torch.arange(0, d, 2).float() / d))
            ang = positions.float()[:, None] * inv[None, :]
            return (x.float() + torch.stack((ang.cos(), ang.sin()), -1).flatten(-2)).to(x.dtype)

        self.impl["sinusoidal_positions"] = sinusoidal_positions


class LearnedWraps(TorchAdapter):
    """A learned table indexed modulo its length: position L silently reads row 0."""

    name = "learned-wraps"

    def __init__(self, device: str = "cpu") -> None:
        super().__init__(device)
        _only(self, "learned_positions")
        self.impl["learned_positions"] = lambda table, positions: torch.nn.functional.embedding(
            positions % table.shape[0], table
        )


class AlibiNaiveSlopes(TorchAdapter):
    """ALiBi slopes 2^(−8h/H) for every H, without the interpolation for H not a power of two."""

    name = "alibi-naive-slopes"

    def __init__(self, device: str = "cpu") -> None:
        super().__init__(device)
        _only(self, "alibi")

        def alibi(scores: torch.Tensor, q_positions: torch.Tensor, k_positions: torch.Tensor) -> torch.Tensor:
            h = scores.shape[-3]
            slopes = 2.0 ** (-8.0 * torch.arange(1, h + 1, dtype=torch.float32) / h)
            dist = (q_positions[:, None] - k_positions[None, :]).abs().float()
            return (scores.float() - slopes[:, None, None] * dist).to(scores.dtype)

        self.impl["alibi"] = alibi


class DynamicNtkSticky(TorchAdapter):
    """Dynamic NTK that keeps the longest length it has seen: after one long call, short ones stay stretched."""

    name = "dynamic-ntk-sticky"

    def __init__(self, device: str = "cpu") -> None:
        super().__init__(device)
        _only(self, "rope_scaled")
        inner = self.impl["rope_scaled"]
        longest = {"n": 0}

        def rope_scaled(x, positions, base=10000.0, rotary_dim=None, scaling=None):  # type: ignore[no-untyped-def]
            if scaling is None or scaling["type"] != "dynamic":
                return inner(x, positions, base, rotary_dim, scaling)
            longest["n"] = max(longest["n"], int(positions.max()) + 1)
            rd = x.shape[-1] if rotary_dim is None else rotary_dim
            inv, _ = rope_scaled_inv_freq(rd, base, scaling, longest["n"], x.device)
            return rope_torch(x, positions, base, rotary_dim, self.conventions.rope_layout, inv)

        self.impl["rope_scaled"] = rope_scaled


class YarnNoTemperature(TorchAdapter):
    """YaRN's frequencies without its attention temperature 0.1·ln(s) + 1."""

    name = "yarn-no-temperature"

    def __init__(self, device: str = "cpu") -> None:
        super().__init__(device)
        _only(self, "rope_scaled")

        def rope_scaled(x, positions, base=10000.0, rotary_dim=None, scaling=None):  # type: ignore[no-untyped-def]
            rd = x.shape[-1] if rotary_dim is None else rotary_dim
            inv, _ = rope_scaled_inv_freq(rd, base, scaling, int(positions.max()) + 1, x.device)
            return rope_torch(x, positions, base, rotary_dim, self.conventions.rope_layout, inv)

        self.impl["rope_scaled"] = rope_scaled


class CeMeanOverAllTokens(TorchAdapter):
    """Mean cross-entropy that zeroes ignored tokens' losses but still divides by every token."""

    name = "ce-mean-over-all"

    def __init__(self, device: str = "cpu") -> None:
        super().__init__(device)
        _only(self, "cross_entropy_mean")
        self.impl["cross_entropy_mean"] = lambda logits, targets, ignore_index=-100: (
            torch.nn.functional.cross_entropy(logits, targets, ignore_index=ignore_index, reduction="sum")
            / targets.numel()
        )


class SoftcapHardClamp(TorchAdapter):
    """'Soft' capping as a hard clamp to [−c, c] before the z-loss."""

    name = "softcap-hard-clamp"

    def __init__(self, device: str = "cpu") -> None:
        super().__init__(device)
        _only(self, "softcap_z_loss")
        self.impl["softcap_z_loss"] = lambda logits, alpha=1e-4, cap=30.0: (
            alpha * torch.logsumexp(logits.float().clamp(-cap, cap), dim=-1) ** 2
        ).to(logits.dtype)


class ParamsIgnoreGqa(TorchAdapter):
    """Counts W_K and W_V as d × d whatever the number of KV heads."""

    name = "params-ignore-gqa"

    def __init__(self, device: str = "cpu") -> None:
        super().__init__(device)
        _only(self, "param_count")

    def forward(self, op, inputs, params):  # type: ignore[no-untyped-def]
        if op == "param_count":
            import numpy as np

            return np.asarray(llama_param_count(**dict(params, kv_heads=None)))
        return super().forward(op, inputs, params)


BREAKS.update(
    {
        SinusoidalCosFirst: ("sinusoidal", "sinusoidal/forward", "float32"),
        LearnedWraps: ("learned", "learned/beyond-table", "float32"),
        AlibiNaiveSlopes: ("alibi", "alibi/slopes", "float32"),
        DynamicNtkSticky: ("rope_scaling", "rope_scaled/dynamic-within-trained-length", "float32"),
        YarnNoTemperature: ("rope_scaling", "rope_scaled/bands", "float32"),
        CeMeanOverAllTokens: ("cross_entropy_mean", "cross_entropy_mean/forward", "float32"),
        SoftcapHardClamp: ("softcap_z_loss", "softcap_z_loss/value", "float32"),
        ParamsIgnoreGqa: ("accounting", "accounting/param-count", None),
    }
)

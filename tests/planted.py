"""Realistic defective PyTorch implementations, each wrong in exactly one way.

Each class is the built-in torch adapter with one operation replaced; ``BREAKS`` names the check that
must catch it. The project's tests run the conformance suite against all of them. At the end, converter
defects in ONNX graphs run by the onnxruntime adapter (``ORT_BREAKS``; tests/test_adapters_onnxruntime.py).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from transformer_conformance.adapters.contract import Capability
from transformer_conformance.adapters.torch.adapter import TorchAdapter, llama_hidden_dim
from transformer_conformance.adapters.torch.blocks import ACTIVATIONS, attention_f32, rope_float32
from transformer_conformance.adapters.torch.positions import llama_param_count, rope_scaled_inv_freq
from transformer_conformance.adapters.torch.tensors import rope_torch

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


#: adapter class -> (behaviour, the check (or checks) that must fail, a dtype it must fail in)
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


class DynamicNtkKeepsAtTrainedLength(TorchAdapter):
    """Dynamic NTK as HF transformers keeps it: the longest length seen, reset only by a call shorter than the
    trained length L; a call of exactly L right after a longer one keeps the longer one's base."""

    name = "dynamic-ntk-keeps-at-l"

    def __init__(self, device: str = "cpu") -> None:
        super().__init__(device)
        _only(self, "rope_scaled")
        inner = self.impl["rope_scaled"]
        cached = {"n": 0}

        def rope_scaled(x, positions, base=10000.0, rotary_dim=None, scaling=None):  # type: ignore[no-untyped-def]
            if scaling is None or scaling["type"] != "dynamic":
                return inner(x, positions, base, rotary_dim, scaling)
            n = int(positions.max()) + 1
            if n < scaling["original_max_position_embeddings"]:
                cached["n"] = 0  # the reset: below L only
            cached["n"] = max(cached["n"], n)
            rd = x.shape[-1] if rotary_dim is None else rotary_dim
            inv, _ = rope_scaled_inv_freq(rd, base, scaling, cached["n"], x.device)
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


class _LongropeVariant(TorchAdapter):
    """LongRoPE with a defect in ``long`` (which factor list a call of n positions takes) or ``attention``."""

    def __init__(self, device: str = "cpu") -> None:
        super().__init__(device)
        _only(self, "rope_scaled")
        inner = self.impl["rope_scaled"]

        def rope_scaled(x, positions, base=10000.0, rotary_dim=None, scaling=None):  # type: ignore[no-untyped-def]
            if scaling is None or scaling["type"] != "longrope":
                return inner(x, positions, base, rotary_dim, scaling)
            rd = x.shape[-1] if rotary_dim is None else rotary_dim
            original = scaling["original_max_position_embeddings"]
            ext = scaling["long_factor" if self.long(int(positions.max()) + 1, original) else "short_factor"]
            pow_ = base ** (torch.arange(0, rd, 2, dtype=torch.int64).float() / rd)
            inv = 1.0 / (torch.tensor(ext, dtype=torch.float32) * pow_)
            factor = self.attention(scaling["factor"], original)
            return rope_torch(x, positions, base, rotary_dim, self.conventions.rope_layout, inv, factor)

        self.impl["rope_scaled"] = rope_scaled

    @staticmethod
    def long(n: int, original: int) -> bool:
        return n > original

    @staticmethod
    def attention(factor: float, original: int) -> float:
        return math.sqrt(1 + math.log(factor) / math.log(original)) if factor > 1 else 1.0


class LongropeSwitchAtL(_LongropeVariant):
    """LongRoPE that takes the long factors from n = L on (n ≥ L), one length early."""

    name = "longrope-switch-at-l"

    @staticmethod
    def long(n: int, original: int) -> bool:
        return n >= original


class LongropeNoAttentionFactor(_LongropeVariant):
    """LongRoPE without its attention factor √(1 + ln s/ln L)."""

    name = "longrope-no-attention-factor"

    @staticmethod
    def attention(factor: float, original: int) -> float:
        return 1.0


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


class SoftcapSkipped(TorchAdapter):
    """The cap is never applied: z-loss of the raw logits, unbounded as they grow."""

    name = "softcap-skipped"

    def __init__(self, device: str = "cpu") -> None:
        super().__init__(device)
        _only(self, "softcap_z_loss")
        self.impl["softcap_z_loss"] = lambda logits, alpha=1e-4, cap=30.0: (
            alpha * torch.logsumexp(logits.float(), dim=-1) ** 2
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
        DynamicNtkSticky: (
            "rope_scaling",
            (
                "rope_scaled/dynamic-forward",
                "rope_scaled/dynamic-below-trained-length",
                "rope_scaled/dynamic-at-trained-length",
            ),
            "float32",
        ),
        DynamicNtkKeepsAtTrainedLength: (
            "rope_scaling",
            ("rope_scaled/dynamic-forward", "rope_scaled/dynamic-at-trained-length"),
            "float32",
        ),
        YarnNoTemperature: ("rope_scaling", "rope_scaled/bands", "float32"),
        LongropeSwitchAtL: ("rope_scaling", "rope_scaled/longrope-boundary", "float32"),
        LongropeNoAttentionFactor: (
            "rope_scaling",
            ("rope_scaled/forward", "rope_scaled/longrope-boundary"),
            "float32",
        ),
        CeMeanOverAllTokens: ("cross_entropy_mean", "cross_entropy_mean/forward", "float32"),
        SoftcapHardClamp: ("softcap_z_loss", "softcap_z_loss/value", "float32"),
        SoftcapSkipped: ("softcap_z_loss", ("softcap_z_loss/bounded", "softcap_z_loss/value"), "float32"),
        ParamsIgnoreGqa: ("accounting", "accounting/param-count", None),
    }
)

# --------------------------------------------------------------------------------------------------------------
# Attention, the MLP family, blocks. Each declares only the operations of the behaviour it breaks, so the run
# checks those (and reports everything else unsupported).
# --------------------------------------------------------------------------------------------------------------


class _Only(TorchAdapter):
    """Declares only ``ops`` (the operations its defect lives in), in float32 (where each shows), so a run checks
    only what it breaks."""

    ops: tuple[str, ...] = ()

    def __init__(self, device: str = "cpu", **kw: str) -> None:
        super().__init__(device, **kw)
        self.capabilities = {op: Capability(dtypes=frozenset({"float32"})) for op in self.ops}


def _plain_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool, softcap: float | None, diag: int = 0
) -> torch.Tensor:
    """Attention in float32 with KV heads already one per query head; the causal diagonal moved by ``diag``."""
    s = (q @ k.transpose(-1, -2)) * q.shape[-1] ** -0.5
    if softcap:
        s = softcap * torch.tanh(s / softcap)
    if causal:
        lq, lk = q.shape[-2], k.shape[-2]
        mask = torch.ones(lq, lk, dtype=torch.bool).tril(lk - lq + diag)
        s = s.masked_fill(~mask, float("-inf"))
    return torch.softmax(s, dim=-1) @ v


class GqaTileOrder(_Only):
    """GQA with the KV heads tiled (k.repeat): query head h reads KV head h % H_kv instead of h // (H_q/H_kv)."""

    name = "gqa-tile-order"
    ops = ("attention",)

    def __init__(self, device: str = "cpu") -> None:
        super().__init__(device)

        def attention(q, k, v, causal=False, softcap=None, scale=None):  # type: ignore[no-untyped-def]
            rep = q.shape[1] // k.shape[1]
            kf, vf = k.float().repeat(1, rep, 1, 1), v.float().repeat(1, rep, 1, 1)
            return _plain_attention(q.float(), kf, vf, causal, softcap).to(q.dtype)

        self.impl["attention"] = attention


class TopLeftForKvCache(_Only):
    """Declares the bottom-right alignment but calls SDPA with is_causal=True, which is top-left when L_q < L_k."""

    name = "top-left-kv-cache"
    ops = ("attention",)

    def __init__(self, device: str = "cpu") -> None:
        super().__init__(device)

        def attention(q, k, v, causal=False, softcap=None, scale=None):  # type: ignore[no-untyped-def]
            out = attention_f32(q.float(), k.float(), v.float(), causal, softcap, scale, alignment="top_left")
            return out.to(q.dtype)

        self.impl["attention"] = attention


class RopeRotatesV(_Only):
    """Rotates the values by their positions too."""

    name = "rope-rotates-v"
    ops = ("rope_attention",)

    def __init__(self, device: str = "cpu") -> None:
        super().__init__(device)
        layout = self.conventions.rope_layout

        def rope_attention(q, k, v, q_positions, k_positions, causal=False, softcap=None, base=10000.0):  # type: ignore[no-untyped-def]
            rq = rope_float32(q.float(), q_positions, base, layout)
            rk = rope_float32(k.float(), k_positions, base, layout)
            rv = rope_float32(v.float(), k_positions, base, layout) if v.shape[-1] % 2 == 0 else v.float()
            return attention_f32(rq, rk, rv, causal, softcap).to(q.dtype)

        self.impl["rope_attention"] = rope_attention


class GqaGradientNotSummed(_Only):
    """Forward right; the backward takes each KV head's gradient from the first query head of its group only."""

    name = "gqa-grad-not-summed"
    ops = ("attention",)

    def __init__(self, device: str = "cpu") -> None:
        super().__init__(device)

        def expand(t: torch.Tensor, rep: int) -> torch.Tensor:
            parts = [t if j == 0 else t.detach() for j in range(rep)]
            return torch.stack(parts, dim=2).flatten(1, 2)  # head h reads KV head h // rep

        def attention(q, k, v, causal=False, softcap=None, scale=None):  # type: ignore[no-untyped-def]
            rep = q.shape[1] // k.shape[1]
            kf, vf = expand(k.float(), rep), expand(v.float(), rep)
            return _plain_attention(q.float(), kf, vf, causal, softcap).to(q.dtype)

        self.impl["attention"] = attention


class SoftcapIgnored(_Only):
    """Accepts a soft-cap and drops it (a fused kernel without soft-capping)."""

    name = "softcap-ignored"
    ops = ("attention",)

    def __init__(self, device: str = "cpu") -> None:
        super().__init__(device)

        def attention(q, k, v, causal=False, softcap=None, scale=None):  # type: ignore[no-untyped-def]
            return attention_f32(q.float(), k.float(), v.float(), causal, None, scale).to(q.dtype)

        self.impl["attention"] = attention


class QkNormQueriesOnly(_Only):
    """QK-norm that normalises the queries and forgets the keys."""

    name = "qk-norm-queries-only"
    ops = ("qk_norm_attention",)

    def __init__(self, device: str = "cpu") -> None:
        super().__init__(device)

        def qk_norm_attention(q, k, v, q_weight, k_weight, causal=False, softcap=None, eps=1e-6):  # type: ignore[no-untyped-def]
            qn = F.rms_norm(q.float(), (q.shape[-1],), q_weight.float(), eps)
            return attention_f32(qn, k.float() * k_weight.float(), v.float(), causal, softcap).to(q.dtype)

        self.impl["qk_norm_attention"] = qk_norm_attention


class AlwaysCausal(_Only):
    """Applies the causal mask whether or not it is asked for (is_causal hard-wired)."""

    name = "always-causal"
    ops = ("attention",)

    def __init__(self, device: str = "cpu") -> None:
        super().__init__(device)

        def attention(q, k, v, causal=False, softcap=None, scale=None):  # type: ignore[no-untyped-def]
            if q.shape[-2] > k.shape[-2]:
                return attention_f32(q.float(), k.float(), v.float(), causal, softcap, scale).to(q.dtype)
            return attention_f32(q.float(), k.float(), v.float(), True, softcap, scale).to(q.dtype)

        self.impl["attention"] = attention


class CausalMaskOffByOne(_Only):
    """The causal mask lets every query see one key into its future."""

    name = "causal-mask-off-by-one"
    ops = ("attention",)

    def __init__(self, device: str = "cpu") -> None:
        super().__init__(device)

        def attention(q, k, v, causal=False, softcap=None, scale=None):  # type: ignore[no-untyped-def]
            rep = q.shape[1] // k.shape[1]
            kf, vf = k.float().repeat_interleave(rep, 1), v.float().repeat_interleave(rep, 1)
            return _plain_attention(q.float(), kf, vf, causal, softcap, diag=1).to(q.dtype)

        self.impl["attention"] = attention


class GegluTanhForErf(_Only):
    """GeGLU asked for the erf GELU computes the tanh approximation (as Liger's GeGLU does)."""

    name = "geglu-tanh-for-erf"
    ops = ("glu_mlp",)

    def __init__(self, device: str = "cpu") -> None:
        super().__init__(device)

        def glu_mlp(x, w1, w3, w2, activation):  # type: ignore[no-untyped-def]
            act = ACTIVATIONS["gelu_tanh" if activation == "gelu_erf" else activation]
            xf = x.float()
            return ((act(xf @ w1.float()) * (xf @ w3.float())) @ w2.float()).to(x.dtype)

        self.impl["glu_mlp"] = glu_mlp


class SizingAlways8Over3(_Only):
    """Sizes every gated MLP at ⌊8d/3⌋, memorised from the 4× baseline, whatever the base ratio."""

    name = "sizing-always-8-3"
    ops = ("ffn_hidden_dim",)

    def forward(self, op, inputs, params):  # type: ignore[no-untyped-def]
        if op == "ffn_hidden_dim":
            from transformer_conformance.adapters.torch.blocks import ffn_hidden_dim

            return np.asarray(
                ffn_hidden_dim(**{**params, "base_ratio": 4 if params["gated"] else params["base_ratio"]})
            )
        return super().forward(op, inputs, params)


class GeluSigmoidWithoutSlope(_Only):
    """The seed's x·σ(1.702x) computed as x·σ(x) (the 1.702 dropped: that is SiLU)."""

    name = "gelu-sigmoid-without-slope"
    ops = ("mlp",)

    def __init__(self, device: str = "cpu") -> None:
        super().__init__(device)

        def mlp(x, w_in, w_out, activation):  # type: ignore[no-untyped-def]
            act = F.silu if activation == "gelu_sigmoid" else ACTIVATIONS[activation]
            return (act(x.float() @ w_in.float()) @ w_out.float()).to(x.dtype)

        self.impl["mlp"] = mlp


class _GeluTanhErfBackward(torch.autograd.Function):
    @staticmethod
    def forward(ctx, a):  # type: ignore[no-untyped-def]
        ctx.save_for_backward(a)
        return F.gelu(a, approximate="tanh")

    @staticmethod
    def backward(ctx, g):  # type: ignore[no-untyped-def]
        (a,) = ctx.saved_tensors
        cdf = 0.5 * (1 + torch.erf(a / 2**0.5))
        return g * (cdf + a * torch.exp(-0.5 * a * a) / (2 * torch.pi) ** 0.5)


class GeluTanhBackwardErf(_Only):
    """A fused tanh-GELU whose backward uses the erf form's derivative."""

    name = "gelu-tanh-backward-erf"
    ops = ("mlp",)

    def __init__(self, device: str = "cpu") -> None:
        super().__init__(device)

        def mlp(x, w_in, w_out, activation):  # type: ignore[no-untyped-def]
            act = _GeluTanhErfBackward.apply if activation == "gelu_tanh" else ACTIVATIONS[activation]
            return (act(x.float() @ w_in.float()) @ w_out.float()).to(x.dtype)

        self.impl["mlp"] = mlp


def _linear_bias(fan_in: int, fan_out: int) -> torch.Tensor:
    """nn.Linear's default bias initialisation, U(−1/√fan_in, 1/√fan_in), from a fixed generator."""
    gen = torch.Generator().manual_seed(fan_in * 1000 + fan_out)
    return (torch.rand(fan_out, generator=gen) * 2 - 1) / fan_in**0.5


class MlpWithBias(_Only):
    """Model code built with nn.Linear(bias=True): the converter copied the weights, the biases stayed."""

    name = "mlp-with-bias"
    ops = ("mlp",)

    def __init__(self, device: str = "cpu") -> None:
        super().__init__(device)

        def mlp(x, w_in, w_out, activation):  # type: ignore[no-untyped-def]
            a = x.float() @ w_in.float() + _linear_bias(*w_in.shape)
            return (ACTIVATIONS[activation](a) @ w_out.float() + _linear_bias(*w_out.shape)).to(x.dtype)

        self.impl["mlp"] = mlp


class GluWithBias(_Only):
    """A gated MLP built with nn.Linear(bias=True) for W₁, W₃ and W₂: the biases stayed."""

    name = "glu-with-bias"
    ops = ("glu_mlp",)

    def __init__(self, device: str = "cpu") -> None:
        super().__init__(device)

        def glu_mlp(x, w1, w3, w2, activation):  # type: ignore[no-untyped-def]
            xf = x.float()
            gate = ACTIVATIONS[activation](xf @ w1.float() + _linear_bias(*w1.shape))
            hidden = gate * (xf @ w3.float() + _linear_bias(*w3.shape))
            return (hidden @ w2.float() + _linear_bias(*w2.shape)).to(x.dtype)

        self.impl["glu_mlp"] = glu_mlp


def _block(
    adapter: TorchAdapter,
    *,
    residual_norm: bool = False,
    bias: bool = False,
    detached_norm: bool = False,
    serial_parallel: bool = False,
):  # type: ignore[no-untyped-def]
    """The torch adapter's block with one thing wrong (see the classes below)."""
    layout = adapter.conventions.rope_layout

    def block(x, positions, placement, n_heads, n_kv_heads, eps, base=10000.0, **w):  # type: ignore[no-untyped-def]
        wf = {k: t.float() for k, t in w.items()}
        d = x.shape[-1]

        def norm(u, name):  # type: ignore[no-untyped-def]
            if detached_norm:
                return u * torch.rsqrt(u.pow(2).mean(-1, keepdim=True) + eps).detach() * wf[name]
            return F.rms_norm(u, (d,), wf[name], eps)

        def proj(u, name):  # type: ignore[no-untyped-def]
            out = u @ wf[name]
            return out + _linear_bias(*wf[name].shape) if bias and name in ("wo", "w2") else out

        def attn(u):  # type: ignore[no-untyped-def]
            b, t, _ = u.shape
            q = rope_float32(proj(u, "wq").view(b, t, n_heads, -1).transpose(1, 2), positions, base, layout)
            k = rope_float32(proj(u, "wk").view(b, t, n_kv_heads, -1).transpose(1, 2), positions, base, layout)
            v = proj(u, "wv").view(b, t, n_kv_heads, -1).transpose(1, 2)
            return proj(attention_f32(q, k, v, True).transpose(1, 2).reshape(b, t, -1), "wo")

        def mlp(u):  # type: ignore[no-untyped-def]
            return proj(F.silu(proj(u, "w1")) * proj(u, "w3"), "w2")

        h = x.float()
        if placement == "pre" and residual_norm:  # the norm on the stream itself, then the branch
            h = norm(h, "attn_norm")
            h = h + attn(h)
            h = norm(h, "mlp_norm")
            h = h + mlp(h)
        elif placement == "pre":
            h = h + attn(norm(h, "attn_norm"))
            h = h + mlp(norm(h, "mlp_norm"))
        elif placement == "post":
            h = norm(h + attn(h), "attn_norm")
            h = norm(h + mlp(h), "mlp_norm")
        elif placement == "double":
            h = h + norm(attn(norm(h, "attn_norm")), "attn_post_norm")
            h = h + norm(mlp(norm(h, "mlp_norm")), "mlp_post_norm")
        elif serial_parallel:  # "parallel" computed in series: the MLP reads the attention output
            h = h + attn(norm(h, "attn_norm"))
            h = h + mlp(norm(h, "attn_norm"))
        else:
            n = norm(h, "attn_norm")
            h = h + attn(n) + mlp(n)
        return h.to(x.dtype)

    return block


class PostNormOnResidualPath(_Only):
    """Declares pre-norm but normalises the stream itself: x = Norm(x); x = x + f(x)."""

    name = "norm-on-residual-path"
    ops = ("block",)

    def __init__(self, device: str = "cpu") -> None:
        super().__init__(device)
        self.impl["block"] = _block(self, residual_norm=True)


class BiasReintroduced(_Only):
    """Output projections built with biases (nn.Linear's default), only the weights loaded."""

    name = "block-bias-reintroduced"
    ops = ("block",)

    def __init__(self, device: str = "cpu") -> None:
        super().__init__(device)
        self.impl["block"] = _block(self, bias=True)


class NormStatisticsDetached(_Only):
    """RMSNorm's 1/rms treated as a constant in the backward (detached), in the blocks and the final norm."""

    name = "norm-stats-detached"
    ops = ("block", "lm_head")

    def __init__(self, device: str = "cpu") -> None:
        super().__init__(device)
        self.impl["block"] = _block(self, detached_norm=True)

        def lm_head(x, norm_weight, w_head, eps):  # type: ignore[no-untyped-def]
            xf = x.float()
            n = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps).detach() * norm_weight.float()
            return (n @ w_head.float()).to(x.dtype)

        self.impl["lm_head"] = lm_head


class ParallelComputedSerially(_Only):
    """Declares the parallel layout but feeds the MLP the attention output, as a serial block does."""

    name = "parallel-computed-serially"
    ops = ("block",)

    def __init__(self, device: str = "cpu") -> None:
        super().__init__(device)
        self.impl["block"] = _block(self, serial_parallel=True)


class LmHeadWithoutFinalNorm(_Only):
    """The LM head reads the stream directly: no final norm."""

    name = "lm-head-without-final-norm"
    ops = ("lm_head",)

    def __init__(self, device: str = "cpu") -> None:
        super().__init__(device)
        self.impl["lm_head"] = lambda x, norm_weight, w_head, eps: (x.float() @ w_head.float()).to(x.dtype)


BREAKS.update(
    {
        GqaTileOrder: ("attention", ("attention/gqa-grouping", "attention/forward"), "float32"),
        TopLeftForKvCache: ("attention", ("attention/kv-cache", "attention/forward"), "float32"),
        RopeRotatesV: ("attention", ("rope-attention/relative", "rope-attention/forward"), "float32"),
        GqaGradientNotSummed: ("attention", "attention/gradient", "float32"),
        SoftcapIgnored: ("attention", ("attention/softcap-bound", "attention/forward"), "float32"),
        QkNormQueriesOnly: ("attention", ("qk-norm/scale-invariance", "qk-norm/forward"), "float32"),
        AlwaysCausal: ("attention", ("attention/permutation-equivariance", "attention/forward"), "float32"),
        CausalMaskOffByOne: ("attention", ("attention/causality", "attention/forward"), "float32"),
        GegluTanhForErf: ("mlp", "glu/forward", "float32"),
        SizingAlways8Over3: ("mlp", ("ffn/hidden-width", "ffn/parameter-parity"), None),
        GeluSigmoidWithoutSlope: ("mlp", "mlp/forward", "float32"),
        GeluTanhBackwardErf: ("mlp", "mlp/gradient", "float32"),
        MlpWithBias: ("mlp", ("mlp/bias-free", "mlp/forward"), "float32"),
        GluWithBias: ("mlp", ("glu/bias-free", "glu/forward"), "float32"),
        PostNormOnResidualPath: (
            "blocks",
            ("blocks/identity-path", "blocks/depth-identity-path", "blocks/radial-gradient", "blocks/forward"),
            "float32",
        ),
        BiasReintroduced: ("blocks", ("blocks/no-bias", "blocks/forward"), "float32"),
        NormStatisticsDetached: (
            "blocks",
            ("blocks/gradient", "lm-head/gradient", "blocks/radial-gradient"),
            "float32",
        ),
        ParallelComputedSerially: ("blocks", "blocks/forward", "float32"),
        LmHeadWithoutFinalNorm: ("blocks", ("lm-head/stream-scale", "lm-head/forward"), "float32"),
    }
)


# ---- ONNX Runtime graphs: converter defects --------------------------------------------------------------------
# The onnxruntime adapter with one graph built wrong, as a model converter builds it wrong. Not torch code, so
# not in BREAKS: tests/test_adapters_onnxruntime.py runs them (onnxruntime is an optional extra, imported here
# only when one of them is built).


def ort_rope_interleaved_attr(device: str = "cpu") -> Any:
    """A converter that exports a half-split (HF) RoPE as ``RotaryEmbedding`` with ``interleaved=1``: the model
    rotates pairs (i, i + d/2), the graph rotates (2i, 2i+1). Declares the model's layout."""
    from dataclasses import replace

    from transformer_conformance.adapters.onnxruntime.adapter import OnnxRuntimeAdapter

    adapter = OnnxRuntimeAdapter(device, rope_layout="interleaved")  # builds interleaved=1
    adapter.name = "ort-rope-interleaved-attr"  # type: ignore[misc]
    adapter.conventions = replace(adapter.conventions, rope_layout="half")
    adapter.capabilities = {"rope": Capability(dtypes=frozenset({"float32"}), grad=False)}
    return adapter


def ort_gqa_tiled(device: str = "cpu") -> Any:
    """A converter that expands grouped KV heads with ``Tile`` before an ``Attention`` of equal head counts
    (torch's ``k.repeat`` where the model means ``repeat_interleave``): query head h reads KV head h % H_kv."""
    from onnx import TensorProto, helper

    from transformer_conformance.adapters.onnxruntime import graphs
    from transformer_conformance.adapters.onnxruntime.adapter import OnnxRuntimeAdapter

    class GqaTiled(OnnxRuntimeAdapter):
        name = "ort-gqa-tiled"

        def _attention(self, elem: int, causal: bool, softcap: float | None, scale: float | None, past: bool) -> bytes:
            one = helper.make_tensor("one", TensorProto.INT64, [1], [1])
            nodes = [
                helper.make_node("Constant", [], ["one"], value=one),
                helper.make_node("Shape", ["q"], ["hq"], start=1, end=2),
                helper.make_node("Shape", ["k"], ["hkv"], start=1, end=2),
                helper.make_node("Div", ["hq", "hkv"], ["groups"]),
                helper.make_node("Concat", ["one", "groups", "one", "one"], ["repeats"], axis=0),
                helper.make_node("Tile", ["k", "repeats"], ["k_tiled"]),
                helper.make_node("Tile", ["v", "repeats"], ["v_tiled"]),
            ]
            attrs: dict[str, Any] = {"is_causal": int(causal)}
            if softcap:
                attrs["softcap"] = float(softcap)
            if scale is not None:
                attrs["scale"] = float(scale)
            nodes.append(helper.make_node("Attention", ["q", "k_tiled", "v_tiled"], ["y"], **attrs))
            return graphs.model(nodes, [("q", elem), ("k", elem), ("v", elem)], [("y", elem)], 23)

    adapter = GqaTiled(device, causal_alignment="top_left")  # no cache path: the graph above has no past inputs
    adapter.capabilities = {"attention": Capability(dtypes=frozenset({"float32"}), grad=False)}
    return adapter


#: planted ONNX Runtime factory -> (behaviour, the checks that must fail (each), dtype)
ORT_BREAKS = {
    "ort_rope_interleaved_attr": ("rope", ("rope/forward",), "float32"),
    "ort_gqa_tiled": ("attention", ("attention/gqa-grouping", "attention/forward"), "float32"),
}


def one_pass_variance_renamed(device: str = "cpu") -> TorchAdapter:
    """The catalogue's ``ln-one-pass-variance-fp32`` under another name (tests/test_verdict_by_name.py)."""
    from mutants.catalogue import ln_one_pass_variance_fp32

    adapter = ln_one_pass_variance_fp32(device)
    adapter.name = "zz-renamed-layer-norm"  # type: ignore[misc]
    return adapter

"""The mutant catalogue: realistic defective implementations the conformance suite must reject.

Each mutant is the built-in torch adapter (``adapters/torch/adapter.py``) with exactly one thing wrong:
one entry of its ``impl`` table replaced, its hidden-width rule or its parameter count replaced, or one
declared convention that the code does not follow. The defects are the ones real implementations make:
the seeds' own warnings (a bias re-introduced into RMSNorm, ε placement, d_ff sizing) and the families
found in model code and kernels (RoPE pair layouts and partial rotary, positions and angles in low
precision, where a low-precision norm rounds, z-loss conventions, hand-written backwards).

Every mutant loads as an adapter: ``--adapter mutants.catalogue:<attribute>`` (the attribute is the
mutant's name with ``-`` spelled ``_``). ``mutants/run.py`` runs the suite against all of them.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from mutants.building_blocks import (
    CapStraightThrough,
    CrossEntropyFusedBackward,
    EmbeddingSortedPathDropsRepeats,
    GradMapped,
    LastBitUp,
    LinearCrossEntropyFused,
    RmsNormBlockPathWeightGrad,
    RmsNormGradIntoCotangent,
    RmsNormWeightGradLowPrecision,
    RopeForwardRotationInBackward,
    ScaleGrad,
    SiluSigmoidGrad,
    SquareWithoutTwo,
    bfloat16_round_trip,
    chunked_logsumexp,
    last_bit_up,
    matmul_low_precision_sums,
    online_softmax_attention,
    rope_variant,
    tree_sum,
)
from mutants.split_k import SplitKInputGrad, split_k_matmul
from transformer_conformance.adapters.torch import blocks as torch_blocks
from transformer_conformance.adapters.torch import local_attention as torch_local
from transformer_conformance.adapters.torch import mla as torch_mla
from transformer_conformance.adapters.torch.adapter import TorchAdapter, llama_hidden_dim
from transformer_conformance.adapters.torch.blocks import ACTIVATIONS, rope_float32
from transformer_conformance.adapters.torch.positions import (
    alibi_slopes,
    llama_param_count,
    mrope_torch,
    rope_scaled_inv_freq,
)
from transformer_conformance.adapters.torch.tensors import rope_torch

#: Behaviours the conformance suite checks, and the module holding each one's checks.
BEHAVIOURS: dict[str, str] = {
    "rms_norm": "test_rmsnorm.py",
    "layer_norm": "test_layernorm.py",
    "rope": "test_rope.py",
    "rope_scaling": "test_rope_scaling.py",
    "swiglu": "test_swiglu.py",
    "cross_entropy": "test_losses.py",
    "z_loss": "test_losses.py",
    "cross_entropy_mean": "test_loss_reductions.py",
    "attention": "test_attention.py",
    "sliding_window": "test_local_attention.py",
    "chunked_attention": "test_local_attention.py",
    "attention_sinks": "test_local_attention.py",
    "moe_routing": "test_moe.py",
    "moe_aux_loss": "test_moe.py",
    "moe_z_loss": "test_moe.py",
    "mrope": "test_mrope.py",
    "mla": "test_mla.py",
    "attention_temperature": "test_attention_temperature.py",
    "linear_cross_entropy": "test_linear_losses.py",
    "z_loss_mean": "test_linear_losses.py",
    "mlp": "test_mlp.py",
    "blocks": "test_blocks.py",
    "learned": "test_positions.py",
    "alibi": "test_positions.py",
    "sinusoidal": "test_positions.py",
    "softcap_z_loss": "test_loss_reductions.py",
    "accounting": "test_accounting.py",
    "integrity": "test_integrity.py",
}

F32_EPS = float(torch.finfo(torch.float32).eps)  # what the torch adapter declares for F.rms_norm(eps=None)
T = torch.Tensor


class MutantAdapter(TorchAdapter):
    """The torch adapter, open to one defect: ``impl`` entries, ``hidden_dim``, ``ffn_width``, ``param_count`` or
    ``conventions``."""

    def __init__(self, name: str, device: str = "cpu") -> None:
        super().__init__(device)
        self.name = name  # type: ignore[misc]
        self.hidden_dim: Callable[..., int] = llama_hidden_dim
        self.ffn_width: Callable[..., int] = torch_blocks.ffn_hidden_dim
        self.param_count: Callable[..., int] = llama_param_count

    def declare(self, **changes: Any) -> None:
        """Replace declared conventions (the code stays as it is)."""
        self.conventions = dataclasses.replace(self.conventions, **changes)

    def forward(self, op: str, inputs: Mapping[str, np.ndarray], params: Mapping[str, Any]) -> np.ndarray:
        if op == "swiglu_hidden_dim":
            return np.asarray(self.hidden_dim(**params))
        if op == "ffn_hidden_dim":
            return np.asarray(self.ffn_width(**params))
        if op == "param_count":
            return np.asarray(self.param_count(**params))
        return super().forward(op, inputs, params)


Defect = Callable[[MutantAdapter], None]


@dataclass(frozen=True)
class Mutant:
    """One defective implementation: calling it (with ``device=``) builds the adapter."""

    name: str
    behaviour: str  # the behaviour it breaks (a key of BEHAVIOURS)
    defect: str  # one line: what is wrong
    caught_by: str  # the check(s) whose failure must report it
    apply: Defect

    @property
    def attribute(self) -> str:
        return self.name.replace("-", "_")

    @property
    def spec(self) -> str:
        """The ``--adapter`` value that loads it."""
        return f"{__name__}:{self.attribute}"

    def __call__(self, device: str = "cpu") -> MutantAdapter:
        adapter = MutantAdapter(self.name, device)
        self.apply(adapter)
        return adapter


CATALOGUE: list[Mutant] = []


def mutant(behaviour: str, caught_by: str, defect: str) -> Callable[[Defect], Mutant]:
    """Register the decorated function (it plants the defect in a fresh adapter) as a mutant named after it."""

    def register(apply: Defect) -> Mutant:
        m = Mutant(apply.__name__.replace("_", "-"), behaviour, defect, caught_by, apply)
        CATALOGUE.append(m)
        return m

    return register


def _eps(eps: float | None, default: float) -> float:
    return default if eps is None else eps


def _rms(x: T, weight: T, eps: float, *, offset: float = 0.0, stat: str = "mean", dim: int = -1) -> T:
    """RMSNorm in float32 with one rounding; ``stat`` "sum" divides by the L2 norm instead of the RMS."""
    xf = x.float()
    sq = xf.pow(2)
    ms = sq.sum(dim, keepdim=True) if stat == "sum" else sq.mean(dim, keepdim=True)
    return (xf * torch.rsqrt(ms + eps) * (weight.float() + offset)).to(x.dtype)


def _ln(x: T, weight: T, bias: T, eps: float, *, dim: int = -1) -> T:
    """LayerNorm in float32 with one rounding (two-pass variance)."""
    xf = x.float()
    xc = xf - xf.mean(dim, keepdim=True)
    var = xc.pow(2).mean(dim, keepdim=True)
    return (xc * torch.rsqrt(var + eps) * weight.float() + bias.float()).to(x.dtype)


# ---------------------------------------------------------------------------------------------- rms_norm


@mutant("rms_norm", "rms_norm/forward", "a bias re-introduced: γ ⊙ x/rms + β with β = 1/64 (seed-002 §3.2.1 warns)")
def rms_bias_reintroduced(a: MutantAdapter) -> None:
    a.impl["rms_norm"] = lambda x, weight, eps=None: (_rms(x, weight, _eps(eps, F32_EPS)).float() + 2**-6).to(x.dtype)


@mutant("rms_norm", "rms_norm/forward", "mean-centred: x − mean(x) is normalised, a LayerNorm without β")
def rms_mean_centred(a: MutantAdapter) -> None:
    a.impl["rms_norm"] = lambda x, weight, eps=None: _rms(
        x - x.float().mean(-1, keepdim=True).to(x.dtype), weight, _eps(eps, F32_EPS)
    )


@mutant("rms_norm", "rms_norm/forward", "ε outside the square root: γ·x / (√mean(x²) + ε)")
def rms_eps_outside_sqrt(a: MutantAdapter) -> None:
    def rms_norm(x: T, weight: T, eps: float | None = None) -> T:
        xf = x.float()
        return (weight.float() * xf / (xf.pow(2).mean(-1, keepdim=True).sqrt() + _eps(eps, F32_EPS))).to(x.dtype)

    a.impl["rms_norm"] = rms_norm


@mutant("rms_norm", "rms_norm/forward", "ε ignored: γ·x / √mean(x²), wrong only where mean(x²) is near ε")
def rms_eps_ignored(a: MutantAdapter) -> None:
    a.impl["rms_norm"] = lambda x, weight, eps=None: _rms(x, weight, 0.0)


@mutant("rms_norm", "rms_norm/forward", "eps=None mapped to 1e-5 while declaring float32's machine epsilon")
def rms_eps_default_1e5(a: MutantAdapter) -> None:
    a.impl["rms_norm"] = lambda x, weight, eps=None: F.rms_norm(x, (x.shape[-1],), weight, _eps(eps, 1e-5))


@mutant(
    "rms_norm",
    "rms_norm/forward",
    "γ held as γ − 1 in the input dtype and applied as 1 + w, undeclared: loses γ's last bit where its spacing is 2",
)
def rms_weight_held_minus_one(a: MutantAdapter) -> None:
    def rms_norm(x: T, weight: T, eps: float | None = None) -> T:
        held = (weight.float() - 1.0).to(weight.dtype)  # Gemma's zero-centred storage, in the input dtype
        return _rms(x, 1.0 + held, _eps(eps, F32_EPS))  # 1 + w rounded to the input dtype again

    a.impl["rms_norm"] = rms_norm


@mutant(
    "rms_norm",
    "rms_norm/forward",
    "eps=None mapped to the input dtype's machine epsilon while declaring float32's (bfloat16: 7.8e-3)",
)
def rms_eps_default_input_dtype(a: MutantAdapter) -> None:
    a.impl["rms_norm"] = lambda x, weight, eps=None: F.rms_norm(
        x, (x.shape[-1],), weight, _eps(eps, float(torch.finfo(x.dtype).eps))
    )


@mutant(
    "rms_norm",
    "rms_norm/forward",
    "declares eps=None as the input dtype's epsilon (\"finfo\"); F.rms_norm uses float32's for every dtype",
)
def rms_declares_finfo_eps(a: MutantAdapter) -> None:
    a.declare(eps_defaults={"rms_norm": "finfo", "layer_norm": 1e-5})


@mutant("rms_norm", "rms_norm/forward", "Gemma-style (1 + γ) weight offset applied though not declared")
def rms_gemma_offset(a: MutantAdapter) -> None:
    a.impl["rms_norm"] = lambda x, weight, eps=None: _rms(x, weight, _eps(eps, F32_EPS), offset=1.0)


@mutant(
    "rms_norm",
    "rms_norm/forward",
    "HF-style: x̂ cast to the input dtype before the weight multiply, while declaring a single rounding",
)
def rms_cast_before_weight(a: MutantAdapter) -> None:
    def rms_norm(x: T, weight: T, eps: float | None = None) -> T:
        xf = x.float()
        xhat = (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + _eps(eps, F32_EPS))).to(x.dtype)
        return weight * xhat

    a.impl["rms_norm"] = rms_norm


@mutant("rms_norm", "rms_norm/forward", "computed entirely in the input dtype while declaring float32 arithmetic")
def rms_all_low_precision(a: MutantAdapter) -> None:
    a.impl["rms_norm"] = lambda x, weight, eps=None: (
        x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + _eps(eps, F32_EPS)) * weight
    )


@mutant(
    "rms_norm",
    "rms_norm/forward",
    "sum of squares in the input dtype (float16 overflows past |x| ≈ 256), the rest in float32",
)
def rms_square_sum_low_precision(a: MutantAdapter) -> None:
    def rms_norm(x: T, weight: T, eps: float | None = None) -> T:
        ms = (tree_sum(x * x) / x.shape[-1]).float()[..., None]
        return (x.float() * torch.rsqrt(ms + _eps(eps, F32_EPS)) * weight.float()).to(x.dtype)

    a.impl["rms_norm"] = rms_norm


@mutant("rms_norm", "rms_norm/forward", "L2 norm instead of the RMS: √Σx² (the 1/n of the mean dropped)")
def rms_sum_not_mean(a: MutantAdapter) -> None:
    a.impl["rms_norm"] = lambda x, weight, eps=None: _rms(x, weight, _eps(eps, F32_EPS), stat="sum")


@mutant("rms_norm", "rms_norm/forward", "mean(x²) over the wrong axis (the token axis instead of the features)")
def rms_mean_wrong_axis(a: MutantAdapter) -> None:
    a.impl["rms_norm"] = lambda x, weight, eps=None: _rms(x, weight, _eps(eps, F32_EPS), dim=0)


@mutant("rms_norm", "rms_norm/gradient", "the RMS detached: its dependence on x is missing from ∂L/∂x")
def rms_grad_rms_detached(a: MutantAdapter) -> None:
    def rms_norm(x: T, weight: T, eps: float | None = None) -> T:
        xf = x.float()
        r = torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + _eps(eps, F32_EPS)).detach()
        return (xf * r * weight.float()).to(x.dtype)

    a.impl["rms_norm"] = rms_norm


@mutant(
    "rms_norm",
    "rms_norm/gradient",
    "∂L/∂γ accumulated over tokens in the input dtype (bfloat16 partial sums), not declared",
)
def rms_weight_grad_low_precision(a: MutantAdapter) -> None:
    a.impl["rms_norm"] = lambda x, weight, eps=None: RmsNormWeightGradLowPrecision.apply(x, weight, _eps(eps, F32_EPS))


@mutant(
    "rms_norm",
    "rms_norm/gradient",
    "backward writes ∂L/∂x into the incoming ∂L/∂y (Liger-Kernel 0.4.0's in-place backward), not declared",
)
def rms_grad_into_cotangent(a: MutantAdapter) -> None:
    a.impl["rms_norm"] = lambda x, weight, eps=None: RmsNormGradIntoCotangent.apply(x, weight, _eps(eps, F32_EPS))


@mutant(
    "rms_norm",
    "rms_norm/forward",
    "mean(x²) in float32 as the dot product x·x (a matmul), which autocast runs in bfloat16 or float16: right "
    "outside autocast (it survives every plain dtype), 2⁻⁹ off in mean(x²) inside; killed only by the autocast mode",
)
def rms_square_sum_matmul_autocast(a: MutantAdapter) -> None:
    def rms_norm(x: T, weight: T, eps: float | None = None) -> T:
        xf = x.float()
        ms = (xf.unsqueeze(-2) @ xf.unsqueeze(-1)).squeeze(-1) / x.shape[-1]
        return (xf * torch.rsqrt(ms.float() + _eps(eps, F32_EPS)) * weight.float()).to(x.dtype)

    a.impl["rms_norm"] = rms_norm


@mutant(
    "rms_norm",
    "rms_norm/regime-gradient",
    "a block path for ≥ 32,768 rows of ≤ 256 features (Liger-Kernel's) that accumulates ∂L/∂γ in the input dtype, "
    "16 rows at a time (Liger-Kernel 0.6.4); the row path is correct",
)
def rms_block_path_weight_grad_input_dtype(a: MutantAdapter) -> None:
    a.impl["rms_norm"] = lambda x, weight, eps=None: RmsNormBlockPathWeightGrad.apply(x, weight, _eps(eps, F32_EPS))


# ----------------------------------------------------------------------------- answers that are not computed
# Right in every value when compared, delivered in a way a candidate tuned against a weak check might: these
# fail the rules every call is held to (conformance/harness/integrity.py) or the integrity checks.


@mutant("rms_norm", "rms_norm/forward", "one output buffer per shape, kept and overwritten by every forward call")
def rms_output_buffer_kept(a: MutantAdapter) -> None:
    buffers: dict[tuple[tuple[int, ...], torch.dtype], T] = {}

    def rms_norm(x: T, weight: T, eps: float | None = None) -> T:
        out = _rms(x, weight, _eps(eps, F32_EPS))
        if out.requires_grad:  # the backward's graph is left alone
            return out
        buf = buffers.setdefault((tuple(out.shape), out.dtype), torch.empty_like(out))
        return buf.copy_(out)

    a.impl["rms_norm"] = rms_norm


@mutant("rms_norm", "rms_norm/forward", "returns zeros; a thread it leaves running writes the answer 20 ms later")
def rms_finished_by_thread(a: MutantAdapter) -> None:
    def rms_norm(x: T, weight: T, eps: float | None = None) -> T:
        out = _rms(x, weight, _eps(eps, F32_EPS))
        late = torch.zeros_like(out)

        def finish() -> None:
            time.sleep(0.02)
            late.copy_(out)

        threading.Thread(target=finish, name="rms-norm-epilogue").start()
        return late

    a.impl["rms_norm"] = rms_norm


@mutant(
    "integrity",
    "integrity/rms_norm",
    "the sum of squares over the features rotated by one more place at every call (a reduction order picked at "
    "run time): within float32's budget each time, not the same bits twice",
)
def rms_reduction_order_per_call(a: MutantAdapter) -> None:
    calls = itertools.count()

    def rms_norm(x: T, weight: T, eps: float | None = None) -> T:
        xf = x.float()
        start = next(calls) % x.shape[-1] if x.shape[-1] else 0
        ms = torch.roll(xf, start, -1).pow(2).sum(-1, keepdim=True) / x.shape[-1]
        return (xf * torch.rsqrt(ms + _eps(eps, F32_EPS)) * weight.float()).to(x.dtype)

    a.impl["rms_norm"] = rms_norm


# -------------------------------------------------------------------------------------------- layer_norm


@mutant("layer_norm", "layer_norm/forward", "unbiased variance (divides by n − 1, torch.var's default)")
def ln_unbiased_variance(a: MutantAdapter) -> None:
    def layer_norm(x: T, weight: T, bias: T, eps: float | None = None) -> T:
        xf = x.float()
        y = (xf - xf.mean(-1, keepdim=True)) * torch.rsqrt(xf.var(-1, keepdim=True) + _eps(eps, 1e-5))
        return (y * weight.float() + bias.float()).to(x.dtype)

    a.impl["layer_norm"] = layer_norm


@mutant("layer_norm", "layer_norm/forward", "one-pass variance E[x²] − μ² computed in the input dtype")
def ln_one_pass_variance_low_precision(a: MutantAdapter) -> None:
    def layer_norm(x: T, weight: T, bias: T, eps: float | None = None) -> T:
        mu = x.mean(-1, keepdim=True)
        var = (x * x).mean(-1, keepdim=True) - mu * mu
        y = (x.float() - mu.float()) * torch.rsqrt(var.float().clamp_min(0) + _eps(eps, 1e-5))
        return (y * weight.float() + bias.float()).to(x.dtype)

    a.impl["layer_norm"] = layer_norm


@mutant(
    "layer_norm",
    "layer_norm/shift-invariance",
    "one-pass variance E[x²] − μ² in float32: cancels for inputs with a large common offset",
)
def ln_one_pass_variance_fp32(a: MutantAdapter) -> None:
    def layer_norm(x: T, weight: T, bias: T, eps: float | None = None) -> T:
        xf = x.float()
        mu = xf.mean(-1, keepdim=True)
        var = (xf * xf).mean(-1, keepdim=True) - mu * mu
        y = (xf - mu) * torch.rsqrt(var.clamp_min(0) + _eps(eps, 1e-5))
        return (y * weight.float() + bias.float()).to(x.dtype)

    a.impl["layer_norm"] = layer_norm


@mutant("layer_norm", "layer_norm/forward", "ε outside the square root: (x − μ)/(σ + ε)")
def ln_eps_outside_sqrt(a: MutantAdapter) -> None:
    def layer_norm(x: T, weight: T, bias: T, eps: float | None = None) -> T:
        xf = x.float()
        xc = xf - xf.mean(-1, keepdim=True)
        y = xc / (xc.pow(2).mean(-1, keepdim=True).sqrt() + _eps(eps, 1e-5))
        return (y * weight.float() + bias.float()).to(x.dtype)

    a.impl["layer_norm"] = layer_norm


@mutant("layer_norm", "layer_norm/forward", "no centring: the RMS statistic with a bias (RMSNorm + β as LayerNorm)")
def ln_not_centred(a: MutantAdapter) -> None:
    a.impl["layer_norm"] = lambda x, weight, bias, eps=None: (
        _rms(x, weight, _eps(eps, 1e-5)).float() + bias.float()
    ).to(x.dtype)


@mutant("layer_norm", "layer_norm/forward", "bias added before the weight: γ ⊙ (x̂ + β)")
def ln_bias_before_weight(a: MutantAdapter) -> None:
    def layer_norm(x: T, weight: T, bias: T, eps: float | None = None) -> T:
        xf = x.float()
        xc = xf - xf.mean(-1, keepdim=True)
        y = xc * torch.rsqrt(xc.pow(2).mean(-1, keepdim=True) + _eps(eps, 1e-5))
        return ((y + bias.float()) * weight.float()).to(x.dtype)

    a.impl["layer_norm"] = layer_norm


@mutant("layer_norm", "layer_norm/forward", "eps=None mapped to 1e-6 (RMSNorm's default) while declaring 1e-5")
def ln_eps_default_1e6(a: MutantAdapter) -> None:
    a.impl["layer_norm"] = lambda x, weight, bias, eps=None: F.layer_norm(
        x, (x.shape[-1],), weight, bias, _eps(eps, 1e-6)
    )


@mutant("layer_norm", "layer_norm/forward", "normalised over the wrong axis (tokens instead of features)")
def ln_wrong_axis(a: MutantAdapter) -> None:
    a.impl["layer_norm"] = lambda x, weight, bias, eps=None: _ln(x, weight, bias, _eps(eps, 1e-5), dim=0)


@mutant("layer_norm", "layer_norm/gradient", "the mean detached: ∂L/∂x misses the −mean(∂L/∂x̂) term")
def ln_grad_mean_detached(a: MutantAdapter) -> None:
    def layer_norm(x: T, weight: T, bias: T, eps: float | None = None) -> T:
        xf = x.float()
        xc = xf - xf.mean(-1, keepdim=True).detach()
        y = xc * torch.rsqrt(xc.pow(2).mean(-1, keepdim=True) + _eps(eps, 1e-5))
        return (y * weight.float() + bias.float()).to(x.dtype)

    a.impl["layer_norm"] = layer_norm


@mutant("layer_norm", "layer_norm/gradient", "∂L/∂β averaged over tokens instead of summed")
def ln_bias_grad_averaged(a: MutantAdapter) -> None:
    def layer_norm(x: T, weight: T, bias: T, eps: float | None = None) -> T:
        tokens = x.numel() // x.shape[-1]
        return F.layer_norm(x, (x.shape[-1],), weight, ScaleGrad.apply(bias, 1.0 / tokens), _eps(eps, 1e-5))

    a.impl["layer_norm"] = layer_norm


# -------------------------------------------------------------------------------------------------- rope


def _rope(a: MutantAdapter, **knobs: Any) -> None:
    layout = a.conventions.rope_layout
    a.impl["rope"] = lambda x, positions, base=10000.0, rotary_dim=None: rope_variant(
        x, positions, base, rotary_dim, layout, **knobs
    )


@mutant("rope", "rope/forward", "declares the half-split layout (i, i + d/2) but rotates interleaved pairs (2i, 2i+1)")
def rope_wrong_pairs(a: MutantAdapter) -> None:
    a.impl["rope"] = lambda x, positions, base=10000.0, rotary_dim=None: rope_variant(
        x, positions, base, rotary_dim, "interleaved"
    )


@mutant("rope", "rope/forward", "θ exponent i/d instead of 2i/d: θ_i = base^(−i/d)")
def rope_theta_exponent_i_over_d(a: MutantAdapter) -> None:
    _rope(a, exponent_step=1)


@mutant("rope", "rope/forward", "base ignored: always 10000")
def rope_base_ignored(a: MutantAdapter) -> None:
    layout = a.conventions.rope_layout
    a.impl["rope"] = lambda x, positions, base=10000.0, rotary_dim=None: rope_variant(
        x, positions, 10000.0, rotary_dim, layout
    )


@mutant("rope", "rope/forward", "partial rotary ignored: all d features rotate, the pass-through ones too")
def rope_rotates_passthrough(a: MutantAdapter) -> None:
    layout = a.conventions.rope_layout
    a.impl["rope"] = lambda x, positions, base=10000.0, rotary_dim=None: rope_variant(x, positions, base, None, layout)


@mutant("rope", "rope/forward", "partial rotary: frequencies use the head width d instead of rotary_dim")
def rope_partial_freqs_over_head_dim(a: MutantAdapter) -> None:
    layout = a.conventions.rope_layout
    a.impl["rope"] = lambda x, positions, base=10000.0, rotary_dim=None: rope_variant(
        x, positions, base, rotary_dim, layout, freq_dim=x.shape[-1]
    )


@mutant("rope", "rope/forward", "partial rotary: the last rotary_dim features rotate instead of the first")
def rope_partial_rotates_last(a: MutantAdapter) -> None:
    _rope(a, rotate_last=True)


@mutant("rope", "rope/forward", "positions cast to bfloat16 before the angles (exact integers only up to 256)")
def rope_positions_bf16(a: MutantAdapter) -> None:
    _rope(a, pos_dtype=torch.bfloat16)


@mutant("rope", "rope/forward", "positions clamped to a 128k cache (2^17 − 1), as a kernel indexing its cos/sin table")
def rope_positions_clamped_128k(a: MutantAdapter) -> None:
    layout = a.conventions.rope_layout
    a.impl["rope"] = lambda x, positions, base=10000.0, rotary_dim=None: rope_variant(
        x, positions.clamp(max=2**17 - 1), base, rotary_dim, layout
    )


@mutant("rope", "rope/forward", "inverse frequencies and angles computed in the input dtype, not float32")
def rope_angles_input_dtype(a: MutantAdapter) -> None:
    layout = a.conventions.rope_layout
    a.impl["rope"] = lambda x, positions, base=10000.0, rotary_dim=None: rope_variant(
        x, positions, base, rotary_dim, layout, angle_dtype=x.dtype
    )


@mutant("rope", "rope/forward", "cos/sin tables rounded to the input dtype (HF style) while declaring float32")
def rope_tables_input_dtype(a: MutantAdapter) -> None:
    layout = a.conventions.rope_layout
    a.impl["rope"] = lambda x, positions, base=10000.0, rotary_dim=None: rope_variant(
        x, positions, base, rotary_dim, layout, table_dtype=x.dtype
    )


@mutant(
    "rope",
    "rope/forward",
    "angles as the float32 matmul inv_freq @ positions (transformers 4.38.0–4.38.1), which autocast runs in "
    "bfloat16: right outside autocast (it survives every plain dtype), cos at position 15962 −0.27 for −0.91 "
    "inside; killed only by the autocast mode",
)
def rope_angles_matmul_autocast(a: MutantAdapter) -> None:
    layout = a.conventions.rope_layout
    a.impl["rope"] = lambda x, positions, base=10000.0, rotary_dim=None: rope_variant(
        x, positions, base, rotary_dim, layout, angles_by_matmul=True
    )


@mutant("rope", "rope/forward", "rotation reversed: pairs rotate by −m·θ_i (sin with the wrong sign)")
def rope_rotation_reversed(a: MutantAdapter) -> None:
    _rope(a, sign=-1.0)


@mutant("rope", "rope/forward", "positions ignored: 0, 1, …, T−1 used whatever the caller passes")
def rope_positions_ignored(a: MutantAdapter) -> None:
    layout = a.conventions.rope_layout
    a.impl["rope"] = lambda x, positions, base=10000.0, rotary_dim=None: rope_variant(
        x, torch.arange(x.shape[-2], device=x.device), base, rotary_dim, layout
    )


@mutant(
    "rope",
    "rope/forward",
    "positions handed over as a start offset, as ports onto MLX's mx.fast.rope(x, offset=...) do: rotates at "
    "positions[0] + 0, 1, …, T−1, the caller's stride lost",
)
def rope_positions_as_offset(a: MutantAdapter) -> None:
    layout = a.conventions.rope_layout
    a.impl["rope"] = lambda x, positions, base=10000.0, rotary_dim=None: rope_variant(
        x, positions[:1] + torch.arange(x.shape[-2], device=x.device), base, rotary_dim, layout
    )


@mutant("rope", "rope/forward", "declares float64 angles while computing them in float32")
def rope_declares_float64_angles(a: MutantAdapter) -> None:
    a.declare(rope_angle_dtype="float64")


@mutant("rope", "rope/gradient", "backward applies R_m again instead of its transpose R_−m (wrong sign)")
def rope_backward_wrong_sign(a: MutantAdapter) -> None:
    layout = a.conventions.rope_layout
    a.impl["rope"] = lambda x, positions, base=10000.0, rotary_dim=None: RopeForwardRotationInBackward.apply(
        x, positions, base, rotary_dim, layout
    )


# ------------------------------------------------------------------------------------------ rope_scaling


def _llama3_bands_swapped(rd: int, base: float, scaling: Mapping[str, Any]) -> torch.Tensor:
    """Llama-3 band scaling written as torchtune's ``Llama3ScaledRoPE.apply_scaling`` loop, with its first
    comparison made against the low-frequency wavelength instead of the high-frequency one: every pair shorter
    than L/low_freq_factor keeps its frequency, so the medium band is never smoothed."""
    s, trained = float(scaling["factor"]), float(scaling["original_max_position_embeddings"])
    low_f, high_f = float(scaling.get("low_freq_factor", 1.0)), float(scaling.get("high_freq_factor", 4.0))
    low_wavelen = trained / low_f
    freqs = 1.0 / (base ** (torch.arange(0, rd, 2, dtype=torch.int64).float() / rd))
    new = []
    for freq in freqs.tolist():
        wavelen = 2 * math.pi / freq
        if wavelen < low_wavelen:  # should be trained / high_f
            new.append(freq)
        elif wavelen > low_wavelen:
            new.append(freq / s)
        else:
            smooth = (trained / wavelen - low_f) / (high_f - low_f)
            new.append((1 - smooth) * freq / s + smooth * freq)
    return torch.tensor(new, dtype=torch.float32)


@mutant(
    "rope_scaling",
    "rope_scaled/forward",
    "Llama-3 bands: the first wavelength comparison against L/low_freq_factor, not L/high_freq_factor — the medium "
    "band keeps its plain frequencies instead of the smooth interpolation",
)
def rope_llama3_bands_swapped(a: MutantAdapter) -> None:
    plain = a.impl["rope_scaled"]

    def rope_scaled(x: T, positions: T, base: float = 10000.0, rotary_dim: int | None = None, scaling: Any = None) -> T:
        if not scaling or scaling["type"] != "llama3":
            return plain(x, positions, base, rotary_dim, scaling)
        rd = x.shape[-1] if rotary_dim is None else rotary_dim
        inv_freq = _llama3_bands_swapped(rd, base, scaling).to(x.device)
        return rope_torch(x, positions, base, rotary_dim, a.conventions.rope_layout, inv_freq)

    a.impl["rope_scaled"] = rope_scaled


@mutant(
    "rope_scaling",
    "rope_scaled/forward",
    "linear scaling's factor dropped, as keras-hub 0.32's LlamaRotaryEmbedding drops position_scaling_factor (its "
    "own inverse frequencies replace those of the base layer, which divided by the factor): plain RoPE at any factor",
)
def rope_linear_factor_ignored(a: MutantAdapter) -> None:
    plain = a.impl["rope_scaled"]

    def rope_scaled(x: T, positions: T, base: float = 10000.0, rotary_dim: int | None = None, scaling: Any = None) -> T:
        if scaling and scaling["type"] == "linear":
            return plain(x, positions, base, rotary_dim, None)
        return plain(x, positions, base, rotary_dim, scaling)

    a.impl["rope_scaled"] = rope_scaled


@mutant(
    "rope_scaling",
    "rope_scaled/forward",
    "YaRN's ramp inverted, as LitGPT 0.5.13's build_rope_cache blends it: the high-frequency pairs interpolated "
    "and the low-frequency ones kept, where YaRN keeps the first and interpolates the second",
)
def rope_yarn_ramp_inverted(a: MutantAdapter) -> None:
    plain = a.impl["rope_scaled"]

    def rope_scaled(x: T, positions: T, base: float = 10000.0, rotary_dim: int | None = None, scaling: Any = None) -> T:
        if not scaling or scaling["type"] != "yarn":
            return plain(x, positions, base, rotary_dim, scaling)
        rd = x.shape[-1] if rotary_dim is None else rotary_dim
        right, factor = rope_scaled_inv_freq(rd, base, scaling, 0, x.device)
        kept = rope_scaled_inv_freq(rd, base, None, 0, x.device)[0]
        # right = (kept/s)·ramp + kept·(1 − ramp); inverted, (kept/s)·(1 − ramp) + kept·ramp = kept/s + kept − right
        inv_freq = kept / float(scaling["factor"]) + kept - right
        return rope_torch(x, positions, base, rotary_dim, a.conventions.rope_layout, inv_freq, factor)

    a.impl["rope_scaled"] = rope_scaled


@mutant(
    "rope_scaling",
    "rope_scaled/bands",
    "YaRN ignores rotary_dim, as Megatron-Core 0.16's YarnRotaryEmbedding ignores rotary_percent: its frequencies "
    "span the whole head width and every feature is rotated and multiplied by 0.1·ln s + 1, none passed through",
)
def rope_yarn_ignores_rotary_dim(a: MutantAdapter) -> None:
    plain = a.impl["rope_scaled"]

    def rope_scaled(x: T, positions: T, base: float = 10000.0, rotary_dim: int | None = None, scaling: Any = None) -> T:
        if scaling and scaling["type"] == "yarn":
            return plain(x, positions, base, None, scaling)
        return plain(x, positions, base, rotary_dim, scaling)

    a.impl["rope_scaled"] = rope_scaled


@mutant(
    "rope_scaling",
    "rope_scaled/longrope-boundary",
    "LongRoPE chooses its long factors by the last position, not the length: a call ending at position L (n = L + 1) "
    "still rotates with the short ones",
)
def rope_longrope_last_position_as_length(a: MutantAdapter) -> None:
    plain = a.impl["rope_scaled"]

    def rope_scaled(x: T, positions: T, base: float = 10000.0, rotary_dim: int | None = None, scaling: Any = None) -> T:
        if not scaling or scaling["type"] != "longrope" or not positions.numel():
            return plain(x, positions, base, rotary_dim, scaling)
        rd = x.shape[-1] if rotary_dim is None else rotary_dim
        inv_freq, factor = rope_scaled_inv_freq(rd, base, scaling, int(positions.max()), x.device)
        return rope_torch(x, positions, base, rotary_dim, a.conventions.rope_layout, inv_freq, factor)

    a.impl["rope_scaled"] = rope_scaled


@mutant(
    "rope_scaling",
    "rope_scaled/regime-forward",
    "rotates from a cos/sin cache of 131,072 positions (a 128k model's max_position_embeddings), positions past its "
    "end clamped to its last row",
)
def rope_scaled_cache_128k_clamped(a: MutantAdapter) -> None:
    plain = a.impl["rope_scaled"]

    def rope_scaled(x: T, positions: T, base: float = 10000.0, rotary_dim: int | None = None, scaling: Any = None) -> T:
        return plain(x, positions.clamp(max=131_071), base, rotary_dim, scaling)

    a.impl["rope_scaled"] = rope_scaled


# ------------------------------------------------------------------------------------------------ swiglu


@mutant("swiglu", "swiglu/forward", "gate and up swapped: SiLU applied to x·W₃ instead of x·W₁")
def swiglu_gate_swapped(a: MutantAdapter) -> None:
    a.impl["swiglu_mlp"] = lambda x, w1, w3, w2: (F.silu(x @ w3) * (x @ w1)) @ w2


@mutant("swiglu", "swiglu/forward", "GELU instead of SiLU (a GeGLU)")
def swiglu_gelu(a: MutantAdapter) -> None:
    a.impl["swiglu_mlp"] = lambda x, w1, w3, w2: (F.gelu(x @ w1) * (x @ w3)) @ w2


@mutant("swiglu", "swiglu/forward", "SiLU missing: a bilinear layer (x·W₁ ⊙ x·W₃)·W₂")
def swiglu_no_activation(a: MutantAdapter) -> None:
    a.impl["swiglu_mlp"] = lambda x, w1, w3, w2: ((x @ w1) * (x @ w3)) @ w2


@mutant("swiglu", "swiglu/forward", "sigmoid gate σ(x·W₁) instead of SiLU (the original GLU)")
def swiglu_sigmoid_gate(a: MutantAdapter) -> None:
    a.impl["swiglu_mlp"] = lambda x, w1, w3, w2: (torch.sigmoid(x @ w1) * (x @ w3)) @ w2


@mutant("swiglu", "swiglu/forward", "SiLU applied after the product: SiLU(x·W₁ ⊙ x·W₃)")
def swiglu_silu_after_product(a: MutantAdapter) -> None:
    a.impl["swiglu_mlp"] = lambda x, w1, w3, w2: F.silu((x @ w1) * (x @ w3)) @ w2


@mutant("swiglu", "swiglu/forward", "matmul partial sums kept in the input dtype, not declared")
def swiglu_sums_in_input_dtype(a: MutantAdapter) -> None:
    a.impl["swiglu_mlp"] = lambda x, w1, w3, w2: matmul_low_precision_sums(
        F.silu(matmul_low_precision_sums(x, w1)) * matmul_low_precision_sums(x, w3), w2
    )


@mutant("swiglu", "swiglu/forward", "declares a fused kernel (no intermediates rounded) but runs separate ops")
def swiglu_declares_fused(a: MutantAdapter) -> None:
    a.declare(unfused=a.conventions.unfused - {"swiglu_mlp"})


@mutant("swiglu", "swiglu/gradient", "SiLU backward uses σ(z), dropping the z·σ(z)(1 − σ(z)) term")
def swiglu_silu_grad_sigmoid(a: MutantAdapter) -> None:
    a.impl["swiglu_mlp"] = lambda x, w1, w3, w2: (SiluSigmoidGrad.apply(x @ w1) * (x @ w3)) @ w2


@mutant("swiglu", "swiglu/hidden-width", "hidden width 4d, as for a two-matrix MLP")
def swiglu_hidden_4d(a: MutantAdapter) -> None:
    a.hidden_dim = lambda d, multiple_of=256, ffn_dim_multiplier=None: 4 * d


@mutant("swiglu", "swiglu/hidden-width", "hidden width ⌊8d/3⌋ not rounded up to the hardware multiple")
def swiglu_hidden_not_rounded(a: MutantAdapter) -> None:
    a.hidden_dim = lambda d, multiple_of=256, ffn_dim_multiplier=None: (8 * d) // 3


@mutant("swiglu", "swiglu/hidden-width", "hidden width rounded down to the multiple instead of up")
def swiglu_hidden_rounded_down(a: MutantAdapter) -> None:
    a.hidden_dim = lambda d, multiple_of=256, ffn_dim_multiplier=None: multiple_of * ((8 * d) // 3 // multiple_of)


@mutant("swiglu", "swiglu/hidden-width", "hidden width ⌈8d/3⌉ (ceiling) before rounding: one too many at multiple 1")
def swiglu_hidden_ceiling(a: MutantAdapter) -> None:
    def hidden_dim(d: int, multiple_of: int = 256, ffn_dim_multiplier: float | None = None) -> int:
        ceiling = -(-8 * d // 3)
        return multiple_of * -(-ceiling // multiple_of)

    a.hidden_dim = hidden_dim


@mutant("swiglu", "swiglu/hidden-width", "hidden width rounded to the nearest multiple instead of up")
def swiglu_hidden_rounded_nearest(a: MutantAdapter) -> None:
    a.hidden_dim = lambda d, multiple_of=256, ffn_dim_multiplier=None: multiple_of * round((8 * d) // 3 / multiple_of)


# ----------------------------------------------------------------------------------------- cross_entropy


@mutant(
    "cross_entropy", "cross_entropy/forward", "softmax without the max shift: log Σ exp(u) overflows at large logits"
)
def ce_no_max_shift(a: MutantAdapter) -> None:
    def cross_entropy(logits: T, targets: T) -> T:
        u = logits.float()
        lse = torch.log(torch.exp(u).sum(-1))
        return (lse - u.gather(-1, targets[:, None])[:, 0]).to(logits.dtype)

    a.impl["cross_entropy"] = cross_entropy


@mutant("cross_entropy", "cross_entropy/forward", "log of softmax instead of log_softmax: p underflows to 0, loss inf")
def ce_log_of_softmax(a: MutantAdapter) -> None:
    a.impl["cross_entropy"] = lambda logits, targets: (
        -torch.log(torch.softmax(logits, -1)).gather(-1, targets[:, None])[:, 0]
    )


@mutant("cross_entropy", "cross_entropy/forward", "label smoothing 0.1 left on")
def ce_label_smoothing(a: MutantAdapter) -> None:
    a.impl["cross_entropy"] = lambda logits, targets: F.cross_entropy(
        logits, targets, reduction="none", label_smoothing=0.1
    )


@mutant(
    "cross_entropy",
    "cross_entropy/gradient",
    "logsumexp with exp and partial sums in the input dtype, not declared as low-precision sums",
)
def ce_sums_in_input_dtype(a: MutantAdapter) -> None:
    def cross_entropy(logits: T, targets: T) -> T:
        m = logits.max(-1, keepdim=True).values
        lse = m[:, 0] + torch.log(tree_sum(torch.exp(logits - m)))
        return lse - logits.gather(-1, targets[:, None])[:, 0]

    a.impl["cross_entropy"] = cross_entropy


@mutant(
    "cross_entropy",
    "cross_entropy/regime-forward",
    "logsumexp over vocabulary chunks of 32,768 with a running max whose sum is not rescaled when a later chunk "
    "raises the max: right for vocabularies of one chunk",
)
def ce_chunked_no_rescale(a: MutantAdapter) -> None:
    def cross_entropy(logits: T, targets: T) -> T:
        lse = chunked_logsumexp(logits)
        return (lse - logits.float().gather(-1, targets[:, None])[:, 0]).to(logits.dtype)

    a.impl["cross_entropy"] = cross_entropy


@mutant("cross_entropy", "cross_entropy/gradient", "fused backward ignores the upstream gradient (assumes it is 1)")
def ce_grad_ignores_upstream(a: MutantAdapter) -> None:
    a.impl["cross_entropy"] = lambda logits, targets: CrossEntropyFusedBackward.apply(logits, targets, False, 1.0)


@mutant("cross_entropy", "cross_entropy/gradient", "backward divided by the number of tokens (a mean reduction's)")
def ce_grad_divided_by_tokens(a: MutantAdapter) -> None:
    a.impl["cross_entropy"] = lambda logits, targets: CrossEntropyFusedBackward.apply(
        logits, targets, True, 1.0 / len(targets)
    )


# ------------------------------------------------------------------------------------------------ z_loss


@mutant("z_loss", "z_loss/value", "α·z instead of α·z² (the square dropped)")
def z_loss_linear(a: MutantAdapter) -> None:
    a.impl["z_loss"] = lambda logits, alpha=1e-4: alpha * torch.logsumexp(logits, dim=-1)


@mutant("z_loss", "z_loss/value", "½·α·z² (a halved convention) instead of α·z²")
def z_loss_halved(a: MutantAdapter) -> None:
    a.impl["z_loss"] = lambda logits, alpha=1e-4: 0.5 * alpha * torch.logsumexp(logits, dim=-1) ** 2


@mutant("z_loss", "z_loss/value", "z approximated by max(u) instead of logsumexp(u)")
def z_loss_max_not_logsumexp(a: MutantAdapter) -> None:
    a.impl["z_loss"] = lambda logits, alpha=1e-4: alpha * logits.max(dim=-1).values ** 2


@mutant("z_loss", "z_loss/value", "log Σ exp(u) without the max shift: overflows at large logits")
def z_loss_no_max_shift(a: MutantAdapter) -> None:
    a.impl["z_loss"] = lambda logits, alpha=1e-4: (alpha * torch.log(torch.exp(logits.float()).sum(-1)) ** 2).to(
        logits.dtype
    )


@mutant(
    "z_loss",
    "z_loss/regime-forward",
    "vocabulary split into blocks of 65,536 (as flash-linear-attention's cross-entropy kernel splits one past 64k "
    "classes) and the z-loss summed from each block's own logsumexp, α·Σ_b lse_b², not α·(logsumexp_b lse_b)²: "
    "right for one block",
)
def z_split_vocab_partial_lse(a: MutantAdapter) -> None:
    def z_loss(logits: T, alpha: float = 1e-4) -> T:
        lse = torch.stack([torch.logsumexp(c.float(), dim=-1) for c in logits.split(65_536, dim=-1)])
        return (alpha * (lse**2).sum(0)).to(logits.dtype)

    a.impl["z_loss"] = z_loss


@mutant(
    "z_loss",
    "z_loss/value",
    "logsumexp rounded to the input dtype before squaring, declared as a fused float32 computation",
)
def z_loss_undeclared_low_precision(a: MutantAdapter) -> None:
    a.impl["z_loss"] = lambda logits, alpha=1e-4: alpha * torch.logsumexp(logits, dim=-1) ** 2


@mutant(
    "z_loss",
    "z_loss/value",
    "z² stored in the input dtype before α multiplies it: in float16 it overflows once |z| > 256 while α·z² is finite",
)
def z_loss_squared_in_float16(a: MutantAdapter) -> None:
    def z_loss(logits: T, alpha: float = 1e-4) -> T:
        z = torch.logsumexp(logits.float(), dim=-1)
        return (alpha * (z * z).to(logits.dtype).float()).to(logits.dtype)

    a.impl["z_loss"] = z_loss


@mutant(
    "z_loss",
    "z_loss/regime-forward",
    "log Σ exp over vocabulary chunks of 32,768 with a running max whose sum is not rescaled when a later chunk "
    "raises the max: right for vocabularies of one chunk",
)
def z_chunked_no_rescale(a: MutantAdapter) -> None:
    a.impl["z_loss"] = lambda logits, alpha=1e-4: (alpha * chunked_logsumexp(logits) ** 2).to(logits.dtype)


@mutant("z_loss", "z_loss/default-alpha", "default α = 1e-3 instead of PaLM's 1e-4")
def z_loss_default_alpha(a: MutantAdapter) -> None:
    a.impl["z_loss"] = lambda logits, alpha=1e-3: alpha * torch.logsumexp(logits, dim=-1) ** 2


@mutant("z_loss", "z_loss/gradient", "backward α·z·softmax: the factor 2 of d(z²)/dz forgotten")
def z_loss_grad_missing_two(a: MutantAdapter) -> None:
    a.impl["z_loss"] = lambda logits, alpha=1e-4: alpha * SquareWithoutTwo.apply(torch.logsumexp(logits, dim=-1))


@mutant(
    "attention",
    "attention/forward",
    "soft-cap applied after the additive causal mask (HF ports of Gemma 2): tanh lifts a masked logit to −c, so a "
    "future key keeps weight e^−c",
)
def attention_softcap_after_mask(a: MutantAdapter) -> None:
    def attention(
        q: T, k: T, v: T, causal: bool = False, softcap: float | None = None, scale: float | None = None
    ) -> T:
        rep = q.shape[1] // k.shape[1]
        qf, kf = q.float(), k.float().repeat_interleave(rep, dim=1)
        s = (qf @ kf.transpose(-1, -2)) * (q.shape[-1] ** -0.5 if scale is None else scale)
        if causal:
            lq, lk = s.shape[-2:]
            blocked = torch.ones(lq, lk, dtype=torch.bool, device=s.device).triu(lk - lq + 1)
            s = s.masked_fill(blocked, torch.finfo(torch.float32).min)
        if softcap:
            s = softcap * torch.tanh(s / softcap)
        return (torch.softmax(s, dim=-1) @ v.float().repeat_interleave(rep, dim=1)).to(q.dtype)

    a.impl["attention"] = attention


# ---------------------------------------------------------------------------------- linear_cross_entropy


def _fused_lce(defect: str) -> Callable[..., T]:
    def linear_cross_entropy(
        x: T, weight: T, bias: T, targets: T, ignore_index: int = -100, reduction: str = "mean"
    ) -> T:
        return LinearCrossEntropyFused.apply(x, weight, bias, targets, ignore_index, reduction, defect)

    return linear_cross_entropy


@mutant(
    "linear_cross_entropy",
    "linear_cross_entropy/gradient",
    "fused kernel scales ∂W and ∂b by the first token's upstream gradient, not each token's own (Liger 0.8.1)",
)
def lce_weight_grad_first_row(a: MutantAdapter) -> None:
    a.impl["linear_cross_entropy"] = _fused_lce("first_row")


@mutant(
    "linear_cross_entropy",
    "linear_cross_entropy/ignored-tokens",
    "fused kernel masks ignored tokens in ∂x but not in ∂W and ∂b",
)
def lce_weight_grad_unmasked(a: MutantAdapter) -> None:
    a.impl["linear_cross_entropy"] = _fused_lce("unmasked_weight")


@mutant(
    "linear_cross_entropy",
    "linear_cross_entropy/regime-gradient",
    "fused kernel walks the tokens in chunks and accumulates ∂W and ∂b across them in the weight's dtype: each "
    "chunk's sum rounded to bfloat16 or float16, where one float32 accumulation is declared",
)
def lce_chunk_accumulator_input_dtype(a: MutantAdapter) -> None:
    a.impl["linear_cross_entropy"] = _fused_lce("chunk_accumulator")


@mutant(
    "linear_cross_entropy",
    "linear_cross_entropy/regime-forward",
    "fused kernel's logsumexp over vocabulary chunks of 32,768 with a running max whose sum is not rescaled when a "
    "later chunk raises the max (the loss, and the softmax exp(u − lse) of its gradient): right for one chunk",
)
def lce_chunked_no_rescale(a: MutantAdapter) -> None:
    a.impl["linear_cross_entropy"] = _fused_lce("lse_no_rescale")


@mutant(
    "linear_cross_entropy",
    "linear_cross_entropy/gradient",
    "fused kernel's gradient filter: ∂logits below 2^-12 dropped in every dtype (bfloat16's ε/32, Cut "
    "Cross-Entropy's default filter_eps in bfloat16; its float16 one, 2^-15, fails the same way)",
)
def lce_gradient_filter_bf16_eps(a: MutantAdapter) -> None:
    a.impl["linear_cross_entropy"] = _fused_lce("filter_bf16_eps")


class _UnitUpstream(torch.autograd.Function):
    """The loss as it is, its backward handing on a gradient of 1 whatever the upstream gradient."""

    @staticmethod
    def forward(ctx: Any, loss: T) -> T:
        return loss.clone()

    @staticmethod
    def backward(ctx: Any, grad: T) -> T:
        return torch.ones_like(grad)


@mutant(
    "linear_cross_entropy",
    "linear_cross_entropy/gradient",
    "fused linear cross-entropy whose backward ignores the upstream gradient: the gradients of loss.backward() for "
    "any cotangent (torchtitan 0.3's ChunkedLossWrapper backpropagating each chunk inside its call, for 1)",
)
def lce_ignores_upstream_gradient(a: MutantAdapter) -> None:
    plain = a.impl["linear_cross_entropy"]

    def linear_cross_entropy(
        x: T, weight: T, bias: T, targets: T, ignore_index: int = -100, reduction: str = "mean"
    ) -> T:
        return _UnitUpstream.apply(plain(x, weight, bias, targets, ignore_index, reduction))

    a.impl["linear_cross_entropy"] = linear_cross_entropy


@mutant(
    "linear_cross_entropy",
    "linear_cross_entropy/equals-unfused",
    "fused logsumexp without the max shift: log Σ exp(u) overflows where the unfused loss does not",
)
def lce_no_max_shift(a: MutantAdapter) -> None:
    def linear_cross_entropy(
        x: T, weight: T, bias: T, targets: T, ignore_index: int = -100, reduction: str = "mean"
    ) -> T:
        u = F.linear(x, weight, bias).float()
        valid = targets != ignore_index
        picked = u.gather(-1, torch.where(valid, targets, 0)[:, None])[:, 0]
        per = torch.where(valid, torch.log(torch.exp(u).sum(-1)) - picked, 0.0)
        return (per if reduction == "none" else per.sum() / valid.sum()).to(x.dtype)

    a.impl["linear_cross_entropy"] = linear_cross_entropy


@mutant(
    "linear_cross_entropy",
    "linear_cross_entropy/all-ignored",
    "mean over max(#valid, 1) tokens: 0 with every token ignored, where NaN is declared",
)
def lce_all_ignored_zero_undeclared(a: MutantAdapter) -> None:
    def linear_cross_entropy(
        x: T, weight: T, bias: T, targets: T, ignore_index: int = -100, reduction: str = "mean"
    ) -> T:
        per = F.cross_entropy(F.linear(x, weight, bias), targets, ignore_index=ignore_index, reduction="none")
        return per if reduction == "none" else per.sum() / (targets != ignore_index).sum().clamp(min=1)

    a.impl["linear_cross_entropy"] = linear_cross_entropy


# ------------------------------------------------------------------------------------ cross_entropy_mean


@mutant(
    "cross_entropy_mean",
    "cross_entropy_mean/forward",
    "the summed token losses divided by every label, ignored ones counted (in the style of Unsloth's "
    "fast_cross_entropy_loss, whose divisor n_items is its count of labels != -100)",
)
def ce_mean_divided_by_every_label(a: MutantAdapter) -> None:
    def cross_entropy_mean(logits: T, targets: T, ignore_index: int = -100) -> T:
        losses = F.cross_entropy(logits, targets, ignore_index=ignore_index, reduction="none")
        return (losses.float().sum() / targets.numel()).to(logits.dtype)

    a.impl["cross_entropy_mean"] = cross_entropy_mean


# ------------------------------------------------------------------------------------------- z_loss_mean


@mutant("z_loss_mean", "z_loss_mean/forward", "z-loss averaged over all tokens, ignored ones included")
def z_loss_mean_over_all_tokens(a: MutantAdapter) -> None:
    def z_loss_mean(logits: T, targets: T, alpha: float = 1e-4, ignore_index: int = -100) -> T:
        valid = targets != ignore_index
        return torch.where(valid, alpha * torch.logsumexp(logits, dim=-1) ** 2, 0.0).mean()

    a.impl["z_loss_mean"] = z_loss_mean


@mutant("z_loss_mean", "z_loss_mean/valid-subset", "ignored tokens' z-loss summed (not masked), divided by #valid")
def z_loss_mean_unmasked(a: MutantAdapter) -> None:
    def z_loss_mean(logits: T, targets: T, alpha: float = 1e-4, ignore_index: int = -100) -> T:
        return (alpha * torch.logsumexp(logits, dim=-1) ** 2).sum() / (targets != ignore_index).sum()

    a.impl["z_loss_mean"] = z_loss_mean


@mutant("z_loss_mean", "z_loss_mean/gradient", "backward α·z·softmax/#valid: the factor 2 of d(z²)/dz forgotten")
def z_loss_mean_grad_missing_two(a: MutantAdapter) -> None:
    def z_loss_mean(logits: T, targets: T, alpha: float = 1e-4, ignore_index: int = -100) -> T:
        valid = targets != ignore_index
        per = alpha * SquareWithoutTwo.apply(torch.logsumexp(logits, dim=-1))
        return torch.where(valid, per, 0.0).sum() / valid.sum()

    a.impl["z_loss_mean"] = z_loss_mean


@mutant("z_loss_mean", "z_loss_mean/all-ignored", "mean over max(#valid, 1): 0 with every token ignored, NaN declared")
def z_loss_mean_all_ignored_zero(a: MutantAdapter) -> None:
    def z_loss_mean(logits: T, targets: T, alpha: float = 1e-4, ignore_index: int = -100) -> T:
        valid = targets != ignore_index
        per = torch.where(valid, alpha * torch.logsumexp(logits, dim=-1) ** 2, 0.0)
        return per.sum() / valid.sum().clamp(min=1)

    a.impl["z_loss_mean"] = z_loss_mean


# --------------------------------------------------------------------------------------------- attention


def _attention(q: T, k: T, v: T, causal: bool, softcap: float | None, scale: float, fill: float) -> T:
    """Attention in float32, rounded once, with masked scores set to ``fill``."""
    qf, kf, vf = q.float(), k.float(), v.float()
    rep = qf.shape[1] // kf.shape[1]
    kf, vf = kf.repeat_interleave(rep, dim=1), vf.repeat_interleave(rep, dim=1)
    s = (qf @ kf.transpose(-1, -2)) * scale
    if softcap:
        s = softcap * torch.tanh(s / softcap)
    if causal:
        lq, lk = s.shape[-2], s.shape[-1]
        visible = torch.ones(lq, lk, dtype=torch.bool, device=s.device).tril(diagonal=lk - lq)
        s = s.masked_fill(~visible, fill)
    return (torch.softmax(s, dim=-1) @ vf).to(q.dtype)


@mutant("attention", "attention/forward", "masked scores filled with −1e4 instead of −∞ (wrong once |scores| ≫ 1e4)")
def attention_mask_fill_1e4(a: MutantAdapter) -> None:
    def attention(
        q: T, k: T, v: T, causal: bool = False, softcap: float | None = None, scale: float | None = None
    ) -> T:
        return _attention(q, k, v, causal, softcap, q.shape[-1] ** -0.5 if scale is None else scale, -1e4)

    a.impl["attention"] = attention


@mutant("attention", "attention/forward", "the scale parameter ignored: always 1/√D")
def attention_scale_ignored(a: MutantAdapter) -> None:
    def attention(
        q: T, k: T, v: T, causal: bool = False, softcap: float | None = None, scale: float | None = None
    ) -> T:
        return _attention(q, k, v, causal, softcap, q.shape[-1] ** -0.5, float("-inf"))

    a.impl["attention"] = attention


@mutant(
    "attention",
    "attention/forward",
    "the soft-cap dropped: a kernel without one (as Pallas's mha) wrapped as attention, declared with soft-capping",
)
def attention_softcap_dropped(a: MutantAdapter) -> None:
    def attention(
        q: T, k: T, v: T, causal: bool = False, softcap: float | None = None, scale: float | None = None
    ) -> T:
        return _attention(q, k, v, causal, None, q.shape[-1] ** -0.5 if scale is None else scale, float("-inf"))

    a.impl["attention"] = attention


# --------------------------------------------------------------------------------------------- attention


@mutant(
    "attention",
    "attention/regime-forward",
    "online softmax over key tiles of 128 that rescales the running sum but not the output when a later tile "
    "raises the max: right for up to 128 keys",
)
def attention_tile_no_rescale(a: MutantAdapter) -> None:
    def attention(
        q: T, k: T, v: T, causal: bool = False, softcap: float | None = None, scale: float | None = None
    ) -> T:
        return online_softmax_attention(q.float(), k.float(), v.float(), causal, softcap, scale).to(q.dtype)

    a.impl["attention"] = attention


@mutant(
    "attention",
    "qk-norm/regime-forward",
    "QK-norm fused into an online-softmax attention over key tiles of 128 that does not rescale its output when a "
    "later tile raises the max: right for up to 128 keys",
)
def qk_norm_attention_tile_no_rescale(a: MutantAdapter) -> None:
    def qk_norm_attention(
        q: T,
        k: T,
        v: T,
        q_weight: T,
        k_weight: T,
        causal: bool = False,
        softcap: float | None = None,
        eps: float = 1e-6,
    ) -> T:
        d = q.shape[-1]
        qn = F.rms_norm(q.float(), (d,), q_weight.float(), eps)
        kn = F.rms_norm(k.float(), (d,), k_weight.float(), eps)
        return online_softmax_attention(qn, kn, v.float(), causal, softcap).to(q.dtype)

    a.impl["qk_norm_attention"] = qk_norm_attention


@mutant(
    "attention",
    "rope-attention/regime-forward",
    "RoPE fused into an online-softmax attention over key tiles of 128 that does not rescale its output when a "
    "later tile raises the max: right for up to 128 keys",
)
def rope_attention_tile_no_rescale(a: MutantAdapter) -> None:
    layout = a.conventions.rope_layout

    def rope_attention(
        q: T,
        k: T,
        v: T,
        q_positions: T,
        k_positions: T,
        causal: bool = False,
        softcap: float | None = None,
        base: float = 10000.0,
    ) -> T:
        rq = rope_float32(q.float(), q_positions, base, layout)
        rk = rope_float32(k.float(), k_positions, base, layout)
        return online_softmax_attention(rq, rk, v.float(), causal, softcap).to(q.dtype)

    a.impl["rope_attention"] = rope_attention


def _tiled_no_rescale(
    q: T, k: T, v: T, causal: bool, softcap: float | None = None, scale: float | None = None, alignment: str = ""
) -> T:
    return online_softmax_attention(q, k, v, causal, softcap, scale)


@mutant(
    "blocks",
    "blocks/regime-forward",
    "the layer's attention an online softmax over key tiles of 128 that does not rescale its output when a later "
    "tile raises the max: right for up to 128 tokens",
)
def block_attention_tile_no_rescale(a: MutantAdapter) -> None:
    tiled = torch_blocks.ops(a.conventions.rope_layout, a.conventions.causal_alignment, _tiled_no_rescale)["block"]

    def block(x: T, positions: T, placement: str, n_heads: int, n_kv_heads: int, eps: float, **rest: Any) -> T:
        return tiled(x, positions, placement, n_heads, n_kv_heads, eps, **rest)

    a.impl["block"] = block


# ----------------------------------------------------------------------------------- mlp, lm head: split-K
# cuBLAS-style split-K GEMMs whose slices are added in the input dtype (mutants/split_k.py): taken only for
# reductions of 4096 terms or more, so only the size regimes reach them.


@mutant(
    "mlp",
    "mlp/regime-forward",
    "both GEMMs split-K from 4096 reduction terms, slices of 512 added in the input dtype (a reduced precision "
    "reduction): exact for every shorter reduction",
)
def mlp_split_k_reduced_precision(a: MutantAdapter) -> None:
    def mlp(x: T, w_in: T, w_out: T, activation: str) -> T:
        hidden = ACTIVATIONS[activation](split_k_matmul(x.float(), w_in.float(), x.dtype))
        return split_k_matmul(hidden, w_out.float(), x.dtype).to(x.dtype)

    a.impl["mlp"] = mlp


@mutant(
    "mlp",
    "mlp/regime-gradient",
    "the backward's ∂input GEMMs split-K from 4096 reduction terms, slices of 512 added in the input dtype: the "
    "forward and every shorter reduction exact",
)
def mlp_backward_split_k_reduced_precision(a: MutantAdapter) -> None:
    def mlp(x: T, w_in: T, w_out: T, activation: str) -> T:
        hidden = ACTIVATIONS[activation](SplitKInputGrad.apply(x.float(), w_in.float(), x.dtype))
        return SplitKInputGrad.apply(hidden, w_out.float(), x.dtype).to(x.dtype)

    a.impl["mlp"] = mlp


@mutant(
    "mlp",
    "glu/regime-forward",
    "the three GEMMs split-K from 4096 reduction terms, slices of 512 added in the input dtype: exact for every "
    "shorter reduction",
)
def glu_split_k_reduced_precision(a: MutantAdapter) -> None:
    def glu_mlp(x: T, w1: T, w3: T, w2: T, activation: str) -> T:
        xf, dt = x.float(), x.dtype
        gated = ACTIVATIONS[activation](split_k_matmul(xf, w1.float(), dt)) * split_k_matmul(xf, w3.float(), dt)
        return split_k_matmul(gated, w2.float(), dt).to(dt)

    a.impl["glu_mlp"] = glu_mlp


@mutant(
    "swiglu",
    "swiglu/regime-gradient",
    "the three GEMMs split-K from 4096 reduction terms, slices of 512 added in the input dtype: exact for every "
    "shorter reduction; ∂W₂ reads the hidden layer it leaves off, the output averages it away (declared unfused)",
)
def swiglu_split_k_reduced_precision(a: MutantAdapter) -> None:
    def swiglu_mlp(x: T, w1: T, w3: T, w2: T) -> T:
        def gemm(u: T, w: T) -> T:
            return split_k_matmul(u.float(), w.float(), x.dtype).to(x.dtype)

        return gemm(F.silu(gemm(x, w1)) * gemm(x, w3), w2)

    a.impl["swiglu_mlp"] = swiglu_mlp


@mutant(
    "blocks",
    "lm-head/regime-forward",
    "the head's GEMM split-K from 4096 reduction terms (d = 8192), slices of 512 added in the input dtype",
)
def lm_head_split_k_reduced_precision(a: MutantAdapter) -> None:
    def lm_head(x: T, norm_weight: T, w_head: T, eps: float) -> T:
        normed = F.rms_norm(x.float(), (x.shape[-1],), norm_weight.float(), eps)
        return split_k_matmul(normed, w_head.float(), x.dtype).to(x.dtype)

    a.impl["lm_head"] = lm_head


@mutant(
    "blocks",
    "lm-head/regime-gradient",
    "the backward's ∂x GEMM (over the vocabulary) split-K from 4096 classes, slices of 512 added in the input dtype",
)
def lm_head_backward_split_k_reduced_precision(a: MutantAdapter) -> None:
    def lm_head(x: T, norm_weight: T, w_head: T, eps: float) -> T:
        normed = F.rms_norm(x.float(), (x.shape[-1],), norm_weight.float(), eps)
        return SplitKInputGrad.apply(normed, w_head.float(), x.dtype).to(x.dtype)

    a.impl["lm_head"] = lm_head


# ------------------------------------------------------------------------------------------ learned, alibi


@mutant(
    "learned",
    "learned/regime-gradient",
    "the embedding backward's path for 3072 positions or more (a sort-and-segment kernel, as torch's CUDA one) "
    "writes a repeated position's row once instead of adding its rows: right for fewer positions",
)
def learned_sorted_path_drops_repeats(a: MutantAdapter) -> None:
    a.impl["learned_positions"] = _lookup_dropping_repeats(3072)


def _lookup_dropping_repeats(from_count: int) -> Callable[[T, T], T]:
    """The table's rows (positions outside it refused), with a backward that keeps one row of a repeated position
    from ``from_count`` positions on."""

    def learned_positions(table: T, positions: T) -> T:
        n = table.shape[0]
        if positions.numel() and (int(positions.min()) < 0 or int(positions.max()) >= n):
            raise IndexError(f"position outside the learned table's 0 … {n - 1}")
        return EmbeddingSortedPathDropsRepeats.apply(table, positions, from_count)

    return learned_positions


@mutant(
    "alibi",
    "alibi/regime-forward",
    "key positions read per tile of 256 keys without the tile's offset (every tile reuses the first tile's "
    "positions): right for up to 256 keys",
)
def alibi_tile_offset_dropped(a: MutantAdapter) -> None:
    def alibi(scores: T, q_positions: T, k_positions: T) -> T:
        slopes = torch.tensor(alibi_slopes(scores.shape[-3]), dtype=torch.float32)
        k_tiled = k_positions[torch.arange(k_positions.shape[0]) % 256]
        dist = (q_positions[:, None] - k_tiled[None, :]).abs().float()
        return (scores.float() - slopes[:, None, None] * dist).to(scores.dtype)

    a.impl["alibi"] = alibi


# ---------------------------------------------------------------------------------------- sinusoidal positions


def _sinusoid_angles(x: T, positions: T, base: float) -> T:
    """pos·ω_i in float32, ω_i = base^(−2i/d), i = 0 … d/2 − 1 (as the torch adapter forms them)."""
    d = x.shape[-1]
    inv_freq = 1.0 / (base ** (torch.arange(0, d, 2, device=x.device, dtype=torch.int64).float() / d))
    return positions.float()[:, None] * inv_freq[None, :]


@mutant(
    "sinusoidal",
    "sinusoidal/worked-example",
    "the sines and cosines in two halves, [sin(pos·ω) | cos(pos·ω)] (tensor2tensor's and fairseq's layout), where the "
    "seed interleaves them: PE(pos, 2i) = sin, PE(pos, 2i+1) = cos",
)
def sine_halves_concatenated(a: MutantAdapter) -> None:
    def sinusoidal_positions(x: T, positions: T, base: float = 10000.0) -> T:
        angles = _sinusoid_angles(x, positions, base)
        return (x.float() + torch.cat((angles.sin(), angles.cos()), dim=-1)).to(x.dtype)

    a.impl["sinusoidal_positions"] = sinusoidal_positions


@mutant(
    "sinusoidal",
    "sinusoidal/gradient",
    "a hand-written backward that hands ∂L/∂x on through a bfloat16 buffer (right forward; the gradient rounded)",
)
def sine_grad_through_bfloat16(a: MutantAdapter) -> None:
    def sinusoidal_positions(x: T, positions: T, base: float = 10000.0) -> T:
        angles = _sinusoid_angles(x, positions, base)
        pe = torch.stack((angles.sin(), angles.cos()), dim=-1).flatten(-2)
        return (GradMapped.apply(x, bfloat16_round_trip).float() + pe).to(x.dtype)

    a.impl["sinusoidal_positions"] = sinusoidal_positions


# ---------------------------------------------------------------------------------------------- soft-capped z-loss


def _softcap_z(capped: T, alpha: float, dtype: torch.dtype) -> T:
    return (alpha * torch.logsumexp(capped, dim=-1) ** 2).to(dtype)


@mutant("softcap_z_loss", "softcap_z_loss/value", "the cap's tanh without its scale: c·tanh(u), not c·tanh(u/c)")
def softcap_tanh_unscaled(a: MutantAdapter) -> None:
    a.impl["softcap_z_loss"] = lambda logits, alpha=1e-4, cap=30.0: _softcap_z(
        cap * torch.tanh(logits.float()), alpha, logits.dtype
    )


@mutant(
    "softcap_z_loss",
    "softcap_z_loss/bounded",
    "the cap left out of the z-loss (a trainer that caps the logits its cross-entropy sees and takes z from the raw "
    "ones): unbounded once logits pass the cap",
)
def softcap_z_uncapped(a: MutantAdapter) -> None:
    a.impl["softcap_z_loss"] = lambda logits, alpha=1e-4, cap=30.0: _softcap_z(logits.float(), alpha, logits.dtype)


@mutant(
    "softcap_z_loss",
    "softcap_z_loss/gradient",
    "a hand-written backward that passes the gradient straight through the cap, its derivative 1 − tanh²(u/c) "
    "taken as 1",
)
def softcap_grad_straight_through(a: MutantAdapter) -> None:
    a.impl["softcap_z_loss"] = lambda logits, alpha=1e-4, cap=30.0: _softcap_z(
        CapStraightThrough.apply(logits.float(), cap), alpha, logits.dtype
    )


# ---------------------------------------------------------------------------------------------------- accounting


@mutant(
    "accounting",
    "accounting/gqa-70b",
    "W_K and W_V sized d × d whatever the KV heads (grouped-query attention ignored in the count)",
)
def params_kv_heads_ignored(a: MutantAdapter) -> None:
    a.param_count = lambda **cfg: llama_param_count(**dict(cfg, kv_heads=None))


@mutant(
    "accounting",
    "accounting/param-count",
    "a tied head counted twice (a count over the state dict, which lists the shared matrix under both names)",
)
def params_tied_head_counted_twice(a: MutantAdapter) -> None:
    a.param_count = lambda **cfg: llama_param_count(**dict(cfg, tied=False))


@mutant(
    "accounting",
    "accounting/seed-7b",
    "the norms left out (a count of the weight matrices only: attention, MLP, the embedding and the head)",
)
def params_norms_not_counted(a: MutantAdapter) -> None:
    a.param_count = lambda **cfg: llama_param_count(**cfg) - (2 * cfg["layers"] + 1) * cfg["hidden"]


# ---------------------------------------------------------------------------- answers not the same bits twice
# One per operation: its answers (forward, and the gradients of its inputs) one unit in the last place apart at
# every other identical call, as a kernel gives whose reductions take an order picked at run time (atomic adds)
# and that does not declare the operation nondeterministic. Only the integrity checks compare two calls' bits.

#: every operation with integrity checks (rms-reduction-order-per-call's gradients differ only where the sums'
#: rotation happens to change their bits)
BITS_PER_CALL_OPS = (
    "rms_norm",
    "layer_norm",
    "rope",
    "swiglu_mlp",
    "cross_entropy",
    "z_loss",
    "cross_entropy_mean",
    "softcap_z_loss",
    "linear_cross_entropy",
    "z_loss_mean",
    "attention",
    "sliding_window_attention",
    "chunked_attention",
    "sink_attention",
    "attention_temperature",
    "moe_router",
    "moe_aux_loss",
    "moe_z_loss",
    "mrope",
    "mla_attention",
    "mlp",
    "glu_mlp",
    "block",
    "lm_head",
    "learned_positions",
    "alibi",
)


def _float_tensors_up(out: Any) -> Any:
    """``out`` (a tensor or a tuple of them) with each floating tensor's first element one unit in the last place
    larger in magnitude."""
    if isinstance(out, tuple):
        return tuple(_float_tensors_up(o) for o in out)
    return LastBitUp.apply(out) if isinstance(out, torch.Tensor) and out.is_floating_point() else out


def _bits_per_call(op: str) -> Defect:
    def apply(a: MutantAdapter) -> None:
        right = a.impl[op]
        calls = itertools.count()

        def nondeterministic(**kw: Any) -> Any:
            if next(calls) % 2 == 0:
                return right(**kw)
            leaves = {
                k: GradMapped.apply(v, last_bit_up) if isinstance(v, torch.Tensor) and v.requires_grad else v
                for k, v in kw.items()
            }
            return _float_tensors_up(right(**leaves))

        a.impl[op] = nondeterministic

    apply.__name__ = f"{op}_bits_per_call"
    return apply


for _op in BITS_PER_CALL_OPS:
    globals()[f"{_op}_bits_per_call"] = mutant(
        "integrity",
        f"integrity/{_op}",
        f"{_op}'s answers and gradients one unit in the last place apart at every other identical call (reductions "
        "in an order picked at run time), not declared nondeterministic",
    )(_bits_per_call(_op))


# -------------------------------------------------- checks the small cases hold: GQA order, ALiBi slopes, GELU form


@mutant(
    "attention",
    "attention/gqa-grouping",
    "KV heads expanded by tiling (repeat) instead of repeat_interleave: query head h reads KV head h mod H_kv, not "
    "h // (H_q/H_kv) — an exported graph's Tile; right when H_kv is 1 or H_q",
)
def attention_gqa_tiled_heads(a: MutantAdapter) -> None:
    def attention(
        q: T, k: T, v: T, causal: bool = False, softcap: float | None = None, scale: float | None = None
    ) -> T:
        rep = q.shape[1] // k.shape[1]
        tiled_k, tiled_v = k.float().repeat(1, rep, 1, 1), v.float().repeat(1, rep, 1, 1)
        return torch_blocks.attention_f32(q.float(), tiled_k, tiled_v, causal, softcap, scale).to(q.dtype)

    a.impl["attention"] = attention


@mutant(
    "alibi",
    "alibi/slopes",
    "slopes 2^(−8h/H) for every head count, the power-of-two formula applied where H is not a power of two",
)
def alibi_slopes_power_of_two_formula(a: MutantAdapter) -> None:
    def alibi(scores: T, q_positions: T, k_positions: T) -> T:
        n = scores.shape[-3]
        slopes = torch.tensor([2.0 ** (-8.0 * (h + 1) / n) for h in range(n)], dtype=torch.float32)
        dist = (q_positions[:, None] - k_positions[None, :]).abs().float()
        return (scores.float() - slopes[:, None, None] * dist).to(scores.dtype)

    a.impl["alibi"] = alibi


@mutant(
    "mlp",
    "mlp/forward",
    "the exact GELU (erf) computed with the tanh approximation, as a config's hidden_act='gelu' mapped to gelu_new",
)
def mlp_gelu_erf_as_tanh(a: MutantAdapter) -> None:
    plain = a.impl["mlp"]

    def mlp(x: T, w_in: T, w_out: T, activation: str) -> T:
        if activation != "gelu_erf":
            return plain(x, w_in, w_out, activation)
        hidden = F.gelu(x.float() @ w_in.float(), approximate="tanh")
        return (hidden @ w_out.float()).to(x.dtype)

    a.impl["mlp"] = mlp


# ------------------------------------- checks the small cases hold: the attention variants, the block, the LM head,
# the gated MLP, learned positions, ALiBi and the NTK rules


@mutant(
    "mlp",
    "glu/forward",
    "gate and up projections swapped, act(x·W₃) ⊙ x·W₁ (a fused gate_up weight split in the wrong order by a "
    "converter)",
)
def glu_gate_up_swapped(a: MutantAdapter) -> None:
    plain = a.impl["glu_mlp"]

    def glu_mlp(x: T, w1: T, w3: T, w2: T, activation: str) -> T:
        return plain(x, w3, w1, w2, activation)

    a.impl["glu_mlp"] = glu_mlp


@mutant("attention", "qk-norm/forward", "k normalised with q's weight (the q_norm module applied to k as well)")
def qk_norm_k_with_q_weight(a: MutantAdapter) -> None:
    plain = a.impl["qk_norm_attention"]

    def qk_norm_attention(q: T, k: T, v: T, q_weight: T, k_weight: T, **params: Any) -> T:
        return plain(q, k, v, q_weight, q_weight, **params)

    a.impl["qk_norm_attention"] = qk_norm_attention


@mutant(
    "attention",
    "qk-norm/scale-invariance",
    "q left unnormalised (only k goes through its RMSNorm): the logits grow with q's scale",
)
def qk_norm_q_unnormalised(a: MutantAdapter) -> None:
    def qk_norm_attention(
        q: T,
        k: T,
        v: T,
        q_weight: T,
        k_weight: T,
        causal: bool = False,
        softcap: float | None = None,
        eps: float = 1e-6,
    ) -> T:
        kn = F.rms_norm(k.float(), (k.shape[-1],), k_weight.float(), eps)
        return torch_blocks.attention_f32(q.float() * q_weight.float(), kn, v.float(), causal, softcap).to(q.dtype)

    a.impl["qk_norm_attention"] = qk_norm_attention


@mutant(
    "attention",
    "rope-attention/relative",
    "keys rotated at positions 0 … L_k − 1 whatever their positions (a KV cache whose keys' positions restart at "
    "0): right only for a sequence that starts at 0",
)
def rope_attention_keys_from_zero(a: MutantAdapter) -> None:
    plain = a.impl["rope_attention"]

    def rope_attention(q: T, k: T, v: T, q_positions: T, k_positions: T, **params: Any) -> T:
        return plain(q, k, v, q_positions, torch.arange(k.shape[-2], device=k.device), **params)

    a.impl["rope_attention"] = rope_attention


@mutant(
    "blocks",
    "lm-head/stream-scale",
    "the final RMSNorm left out of the head, its weight still applied (x·γ·W): the logits follow the stream's scale",
)
def lm_head_norm_dropped(a: MutantAdapter) -> None:
    def lm_head(x: T, norm_weight: T, w_head: T, eps: float) -> T:
        return ((x.float() * norm_weight.float()) @ w_head.float()).to(x.dtype)

    a.impl["lm_head"] = lm_head


def _block_with_kernel(a: MutantAdapter, kernel: Callable[..., T]) -> Callable[..., T]:
    """The torch adapter's decoder layer with ``kernel`` as its attention (``adapters/torch/blocks.ops``)."""
    layer = torch_blocks.ops(a.conventions.rope_layout, a.conventions.causal_alignment, kernel)["block"]

    def block(x: T, positions: T, placement: str, n_heads: int, n_kv_heads: int, eps: float, **rest: Any) -> T:
        return layer(x, positions, placement, n_heads, n_kv_heads, eps, **rest)

    return block


def _not_causal(
    q: T, k: T, v: T, causal: bool, softcap: float | None = None, scale: float | None = None, alignment: str = ""
) -> T:
    return torch_blocks.attention_f32(q, k, v, False, softcap, scale)


@mutant(
    "blocks",
    "blocks/forward",
    "the decoder layer's attention is not causal (the mask not passed down to it): every token reads later ones",
)
def block_attention_not_causal(a: MutantAdapter) -> None:
    a.impl["block"] = _block_with_kernel(a, _not_causal)


@mutant(
    "blocks",
    "blocks/identity-path",
    "pre-norm layer whose attention residual is the normalised stream (``residual = hidden_states`` taken after "
    "the input norm): h = n + attn(n), n = RMSNorm(x)",
)
def block_residual_after_norm(a: MutantAdapter) -> None:
    plain, layout = a.impl["block"], a.conventions.rope_layout

    def block(
        x: T, positions: T, placement: str, n_heads: int, n_kv_heads: int, eps: float, base: float = 10000.0, **w: T
    ) -> T:
        if placement != "pre":
            return plain(x, positions, placement, n_heads, n_kv_heads, eps, base, **w)
        wf = {k: t.float() for k, t in w.items()}
        b, t, d = x.shape

        def heads(z: T, h: int) -> T:
            return z.view(b, t, h, -1).transpose(1, 2)

        n = F.rms_norm(x.float(), (d,), wf["attn_norm"], eps)
        q = rope_float32(heads(n @ wf["wq"], n_heads), positions, base, layout)
        k = rope_float32(heads(n @ wf["wk"], n_kv_heads), positions, base, layout)
        o = torch_blocks.attention_f32(q, k, heads(n @ wf["wv"], n_kv_heads), True)
        h = n + o.transpose(1, 2).reshape(b, t, -1) @ wf["wo"]
        m = F.rms_norm(h, (d,), wf["mlp_norm"], eps)
        return (h + (F.silu(m @ wf["w1"]) * (m @ wf["w3"])) @ wf["w2"]).to(x.dtype)

    a.impl["block"] = block


@mutant(
    "learned",
    "learned/gradient",
    "the embedding backward writes each position's gradient row (index_put without accumulate): a repeated "
    "position keeps one of its rows",
)
def learned_repeats_overwritten(a: MutantAdapter) -> None:
    a.impl["learned_positions"] = _lookup_dropping_repeats(0)


@mutant(
    "learned",
    "learned/beyond-table",
    "positions past the table clamped to its last row (and below 0 to its first) instead of refused",
)
def learned_positions_clamped(a: MutantAdapter) -> None:
    def learned_positions(table: T, positions: T) -> T:
        return F.embedding(positions.clamp(0, table.shape[0] - 1), table)

    a.impl["learned_positions"] = learned_positions


@mutant(
    "alibi",
    "alibi/translation-invariant",
    "BLOOM's bias m·j from the key's position alone: the same softmax as −m·|i − j| in a causal row (they differ by "
    "a row constant), not the same biased scores, and wrong wherever a row sees keys past its query",
)
def alibi_key_position_bias(a: MutantAdapter) -> None:
    def alibi(scores: T, q_positions: T, k_positions: T) -> T:
        slopes = torch.tensor(alibi_slopes(scores.shape[-3]), dtype=torch.float32)
        return (scores.float() + slopes[:, None, None] * k_positions[None, None, :].float()).to(scores.dtype)

    a.impl["alibi"] = alibi


@mutant("rope_scaling", "rope_scaled/ntk-base", "NTK-aware base θ·s, the exponent d/(d − 2) left out")
def rope_ntk_base_without_exponent(a: MutantAdapter) -> None:
    plain = a.impl["rope_scaled"]

    def rope_scaled(x: T, positions: T, base: float = 10000.0, rotary_dim: int | None = None, scaling: Any = None) -> T:
        if scaling and scaling["type"] == "ntk":
            return plain(x, positions, base * float(scaling["factor"]), rotary_dim, None)
        return plain(x, positions, base, rotary_dim, scaling)

    a.impl["rope_scaled"] = rope_scaled


@mutant(
    "rope_scaling",
    "rope_scaled/dynamic-below-trained-length",
    "dynamic NTK's base rescaled for every call, n < L too (the n > L guard missing): a shorter call gets a "
    "smaller base",
)
def rope_dynamic_ntk_unguarded(a: MutantAdapter) -> None:
    plain = a.impl["rope_scaled"]

    def rope_scaled(x: T, positions: T, base: float = 10000.0, rotary_dim: int | None = None, scaling: Any = None) -> T:
        if not scaling or scaling["type"] != "dynamic" or not positions.numel():
            return plain(x, positions, base, rotary_dim, scaling)
        s, trained = float(scaling["factor"]), int(scaling["original_max_position_embeddings"])
        n = int(positions.max()) + 1
        return plain(x, positions, base, rotary_dim, {"type": "ntk", "factor": s * n / trained - (s - 1)})

    a.impl["rope_scaled"] = rope_scaled


def _default_bias(features: int, fan_in: int) -> T:
    """What ``nn.Linear(bias=True)`` initialises a bias to, U(−1/√fan_in, 1/√fan_in), drawn reproducibly."""
    bound = 1.0 / math.sqrt(fan_in)
    return (torch.rand(features, generator=torch.Generator().manual_seed(0)) * 2 - 1) * bound


@mutant(
    "mlp",
    "mlp/bias-free",
    "the down projection built as nn.Linear with its default bias=True (a port of a bias-free model): a constant "
    "added to every token",
)
def mlp_down_projection_bias(a: MutantAdapter) -> None:
    plain = a.impl["mlp"]

    def mlp(x: T, w_in: T, w_out: T, activation: str) -> T:
        out = plain(x, w_in, w_out, activation)
        return (out.float() + _default_bias(w_out.shape[-1], w_out.shape[0])).to(x.dtype)

    a.impl["mlp"] = mlp


@mutant(
    "mlp",
    "glu/bias-free",
    "the gated MLP's down projection built as nn.Linear with its default bias=True: a constant added to every token",
)
def glu_down_projection_bias(a: MutantAdapter) -> None:
    plain = a.impl["glu_mlp"]

    def glu_mlp(x: T, w1: T, w3: T, w2: T, activation: str) -> T:
        out = plain(x, w1, w3, w2, activation)
        return (out.float() + _default_bias(w2.shape[-1], w2.shape[0])).to(x.dtype)

    a.impl["glu_mlp"] = glu_mlp


def _v_bias(
    q: T, k: T, v: T, causal: bool, softcap: float | None = None, scale: float | None = None, alignment: str = ""
) -> T:
    """Attention whose values carry a default-initialised v_proj bias (the softmax's rows sum to 1: it passes
    through unchanged)."""
    bias = _default_bias(v.shape[-1], v.shape[-1])
    return torch_blocks.attention_f32(q, k, v, causal, softcap, scale, alignment or "bottom_right") + bias


@mutant(
    "blocks",
    "blocks/no-bias",
    "v_proj built as nn.Linear with its default bias=True (the q/k/v biases of one family kept in a bias-free "
    "port): the zero stream maps to o_proj(b), not 0",
)
def block_v_proj_bias(a: MutantAdapter) -> None:
    a.impl["block"] = _block_with_kernel(a, _v_bias)


@mutant(
    "learned",
    "learned/lookup",
    "OPT's offset of 2 added to every position (its table holds two extra rows), not declared: position p reads "
    "row p + 2",
)
def learned_opt_offset(a: MutantAdapter) -> None:
    plain = a.impl["learned_positions"]

    def learned_positions(table: T, positions: T) -> T:
        plain(table, positions)  # its refusal of positions outside the table
        return F.embedding((positions + 2).clamp(max=table.shape[0] - 1), table)

    a.impl["learned_positions"] = learned_positions


@mutant(
    "alibi",
    "alibi/gradient",
    "the biased scores computed under torch.no_grad (the bias cached with the add): right values, no gradient to "
    "the scores",
)
def alibi_added_under_no_grad(a: MutantAdapter) -> None:
    plain = a.impl["alibi"]

    def alibi(scores: T, q_positions: T, k_positions: T) -> T:
        with torch.no_grad():
            return plain(scores, q_positions, k_positions)

    a.impl["alibi"] = alibi


def _width_eight_thirds(
    d: int, base_ratio: float = 4, gated: bool = True, multiple_of: int = 1, ffn_dim_multiplier: float | None = None
) -> int:
    hidden = int(8 * d / 3) if gated else int(base_ratio * d)  # LLaMA's int(2·4d/3), whatever the base ratio
    if ffn_dim_multiplier is not None:
        hidden = int(ffn_dim_multiplier * hidden)
    return multiple_of * ((hidden + multiple_of - 1) // multiple_of)


@mutant(
    "mlp",
    "ffn/hidden-width",
    "the gated width hard-coded as LLaMA's ⌊8d/3⌋ (two thirds of 4d) for every base ratio: right only at r = 4",
)
def ffn_gated_width_eight_thirds(a: MutantAdapter) -> None:
    a.ffn_width = _width_eight_thirds


@mutant(
    "attention",
    "attention/permutation-equivariance",
    "a sliding window of 4 keys either side of the query (a local-attention layer's window) applied though "
    "nothing declares it: a key's index, not only its content, decides whether it is read",
)
def attention_undeclared_window(a: MutantAdapter) -> None:
    def attention(
        q: T, k: T, v: T, causal: bool = False, softcap: float | None = None, scale: float | None = None
    ) -> T:
        lq, lk, rep = q.shape[-2], k.shape[-2], q.shape[1] // k.shape[1]
        kf, vf = k.float().repeat_interleave(rep, dim=1), v.float().repeat_interleave(rep, dim=1)
        s = (q.float() @ kf.transpose(-1, -2)) * (q.shape[-1] ** -0.5 if scale is None else scale)
        if softcap:
            s = softcap * torch.tanh(s / softcap)
        i, j = torch.arange(lq)[:, None] + (lk - lq), torch.arange(lk)[None, :]
        keep = (i - j).abs() < 4
        if causal:
            keep &= j <= i
        return (torch.softmax(s.masked_fill(~keep, float("-inf")), dim=-1) @ vf).to(q.dtype)

    a.impl["attention"] = attention


@mutant(
    "rope_scaling",
    "rope_scaled/dynamic-at-trained-length",
    "dynamic NTK's base kept from the longest call so far (a cos/sin cache that only grows, as transformers "
    "5.0–5.12): a call of n ≤ L after a longer one rotates with the longer call's base",
)
def rope_dynamic_ntk_stale_base(a: MutantAdapter) -> None:
    plain = a.impl["rope_scaled"]
    longest = [0]

    def rope_scaled(x: T, positions: T, base: float = 10000.0, rotary_dim: int | None = None, scaling: Any = None) -> T:
        if not scaling or scaling["type"] != "dynamic" or not positions.numel():
            return plain(x, positions, base, rotary_dim, scaling)
        longest[0] = max(longest[0], int(positions.max()) + 1)
        rd = x.shape[-1] if rotary_dim is None else rotary_dim
        inv_freq, factor = rope_scaled_inv_freq(rd, base, scaling, longest[0], x.device)
        return rope_torch(x, positions, base, rotary_dim, a.conventions.rope_layout, inv_freq, factor)

    a.impl["rope_scaled"] = rope_scaled


@mutant(
    "rope_scaling",
    "rope_scaled/dynamic-forward",
    "dynamic NTK that never scales, as vLLM 0.34's DynamicNTKScalingRotaryEmbedding (its cos/sin table built with "
    "base·(s·L/L − (s − 1))^(d/(d−2)) = base): past the trained length still plain RoPE",
)
def rope_dynamic_ntk_never_scaled(a: MutantAdapter) -> None:
    plain = a.impl["rope_scaled"]

    def rope_scaled(x: T, positions: T, base: float = 10000.0, rotary_dim: int | None = None, scaling: Any = None) -> T:
        if scaling and scaling["type"] == "dynamic":
            return plain(x, positions, base, rotary_dim, None)
        return plain(x, positions, base, rotary_dim, scaling)

    a.impl["rope_scaled"] = rope_scaled


# ------------------------------------------------------------------------------ sliding-window, chunked and sinks


def _window_attention(a: MutantAdapter, keep: Callable[[T, T, int], T]) -> None:
    """sliding_window_attention with the causal window mask replaced by ``keep(p, j, W)`` of the token positions."""

    def sliding_window_attention(
        q: T, k: T, v: T, window: int, softcap: float | None = None, scale: float | None = None
    ) -> T:
        p, j = torch_local.positions(q.shape[-2], k.shape[-2], q.device, a.conventions.causal_alignment)
        mask = keep(p, j, window)
        return torch_local.masked_f32(q.float(), k.float(), v.float(), mask, softcap, scale).to(q.dtype)

    a.impl["sliding_window_attention"] = sliding_window_attention


@mutant(
    "sliding_window",
    "sliding-window/forward",
    "a window of W attends W + 1 keys (p − j ≤ W) while declaring W keys, the query's own counted (mlx-lm's window "
    "mask one too many, SGLang's Gemma window one larger)",
)
def sliding_window_one_too_many(a: MutantAdapter) -> None:
    _window_attention(a, lambda p, j, w: (j <= p) & (p - j <= w))


@mutant(
    "sliding_window",
    "sliding-window/outside-keys",
    "the window as a band |p − j| < W without the causal mask (a flash path's window_size=(W, W): 2W − 1 keys)",
)
def sliding_window_band(a: MutantAdapter) -> None:
    _window_attention(a, lambda p, j, w: (p - j).abs() < w)


@mutant(
    "sliding_window",
    "sliding-window/forward",
    "the window measured from the query's index in the call, not its token position (right when L_q = L_k, and "
    "against a rolling cache no longer than the window: wrong for a chunk of queries after a longer prefix)",
)
def sliding_window_query_index(a: MutantAdapter) -> None:
    _window_attention(a, lambda p, j, w: (j <= p) & ((p - p[0]) - j < w))  # p − p[0]: the query's index


@mutant(
    "sliding_window",
    "sliding-window/regime-forward",
    "a block-sparse kernel that keeps every tile of 64 keys the window touches whole (keys up to 63 before the "
    "window still attended)",
)
def sliding_window_whole_tiles(a: MutantAdapter) -> None:
    _window_attention(a, lambda p, j, w: (j <= p) & (torch.div(j, 64, rounding_mode="floor") * 64 + 63 > p - w))


@mutant(
    "chunked_attention",
    "chunked/forward",
    "the query's chunk taken from its index in the call, not its token position (⌊i/C⌋ for ⌊p/C⌋)",
)
def chunked_query_index(a: MutantAdapter) -> None:
    def chunked_attention(q: T, k: T, v: T, chunk: int, scale: float | None = None) -> T:
        lq, lk = q.shape[-2], k.shape[-2]
        p, j = torch_local.positions(lq, lk, q.device, a.conventions.causal_alignment)
        i = torch.arange(lq, device=q.device)[:, None]
        mask = (j <= p) & (torch.div(j, chunk, rounding_mode="floor") == torch.div(i, chunk, rounding_mode="floor"))
        return torch_local.masked_f32(q.float(), k.float(), v.float(), mask, None, scale).to(q.dtype)

    a.impl["chunked_attention"] = chunked_attention


@mutant(
    "chunked_attention",
    "chunked/long-chunk-is-causal",
    "no mask at all once one chunk covers the call (a 'nothing to chunk' shortcut that drops the causal mask too)",
)
def chunked_single_chunk_unmasked(a: MutantAdapter) -> None:
    plain = a.impl["chunked_attention"]

    def chunked_attention(q: T, k: T, v: T, chunk: int, scale: float | None = None) -> T:
        if chunk >= k.shape[-2]:
            return torch_local.masked_f32(q.float(), k.float(), v.float(), None, None, scale).to(q.dtype)
        return plain(q, k, v, chunk, scale)

    a.impl["chunked_attention"] = chunked_attention


def _sink_attention(a: MutantAdapter, probs: Callable[[T, T], T]) -> None:
    """sink_attention with the weights of the (masked) logits and the sink column computed by ``probs(s, sinks)``."""

    def sink_attention(
        q: T, k: T, v: T, sinks: T, causal: bool = True, window: int | None = None, scale: float | None = None
    ) -> T:
        qf, kf, vf = q.float(), k.float(), v.float()
        rep = qf.shape[1] // kf.shape[1]
        kf, vf = kf.repeat_interleave(rep, dim=1), vf.repeat_interleave(rep, dim=1)
        s = (qf @ kf.transpose(-1, -2)) * (qf.shape[-1] ** -0.5 if scale is None else scale)
        if causal or window is not None:
            lq, lk = s.shape[-2], s.shape[-1]
            conv = a.conventions
            mask = torch_local.window_mask(lq, lk, s.device, conv.causal_alignment, window, conv.sliding_window)
            s = s.masked_fill(~mask, float("-inf"))
        column = sinks.float().reshape(1, -1, 1, 1).expand(s.shape[0], -1, s.shape[2], 1)
        return (probs(s, column) @ vf).to(q.dtype)

    a.impl["sink_attention"] = sink_attention


@mutant(
    "attention_sinks",
    "sinks/forward",
    "the sink added to the max-shifted denominator unshifted: e^{s−max} / (Σ e^{s−max} + e^{σ}) (right only when "
    "the row's largest logit is 0)",
)
def sinks_unshifted(a: MutantAdapter) -> None:
    def probs(s: T, column: T) -> T:
        e = torch.exp(s - s.max(dim=-1, keepdim=True).values)
        return e / (e.sum(dim=-1, keepdim=True) + torch.exp(column))

    _sink_attention(a, probs)


@mutant(
    "attention_sinks",
    "sinks/gradient",
    "the sinks detached from autograd (their column built from the values alone): no gradient reaches them",
)
def sinks_detached(a: MutantAdapter) -> None:
    def probs(s: T, column: T) -> T:
        return torch.softmax(torch.cat([s, column.detach()], dim=-1), dim=-1)[..., :-1]

    _sink_attention(a, probs)


@mutant(
    "attention_sinks",
    "sinks/minus-infinity-is-plain",
    "the sinks clamped at −1e4, as masked scores are filled (a sink of −∞ still takes weight from rows whose "
    "logits lie below −1e4)",
)
def sinks_clamped(a: MutantAdapter) -> None:
    def probs(s: T, column: T) -> T:
        return torch.softmax(torch.cat([s, column.clamp(min=-1e4)], dim=-1), dim=-1)[..., :-1]

    _sink_attention(a, probs)


@mutant(
    "attention_sinks",
    "sinks/larger-sink-shrinks",
    "the sink's sign flipped (e^{−σ} in the denominator, a sink stored as its negation): a larger sink grows the "
    "output",
)
def sinks_negated(a: MutantAdapter) -> None:
    def probs(s: T, column: T) -> T:
        return torch.softmax(torch.cat([s, -column], dim=-1), dim=-1)[..., :-1]

    _sink_attention(a, probs)


# --------------------------------------------------------------------------------------------------- MoE routing


def _router(
    a: MutantAdapter,
    group_scores: Callable[[T], T] | None = None,
    fill: float = float("-inf"),
    weights: Callable[[T, T], T] | None = None,
    finish: Callable[[T, str, float], T] | None = None,
    strided: bool = False,
) -> None:
    """moe_router as adapters/torch/moe.py writes it, with one step replaced: how a group is scored, what the
    excluded groups' choice is filled with, which values are gathered as weights (``weights(s, choice)``), how the
    gathered weights are normalised and scaled (``finish(w, norm, c)``), or groups of strided experts."""

    def moe_router(
        logits: T,
        bias: T,
        k: int,
        score: str = "softmax",
        norm: str = "none",
        routed_scaling_factor: float = 1.0,
        n_group: int | None = None,
        topk_group: int | None = None,
    ) -> T:
        u = logits.float()
        s = F.softmax(u, dim=-1) if score == "softmax" else torch.sigmoid(u)
        choice = s.detach() + bias.float()
        if n_group is not None:
            n, e = choice.shape
            size = e // n_group
            view = choice.view(n, size, n_group).transpose(1, 2) if strided else choice.view(n, n_group, size)
            scored = group_scores(view) if group_scores else view.topk(min(2, size), dim=-1)[0].sum(dim=-1)
            kept = torch.zeros_like(scored).scatter_(1, torch.topk(scored, k=topk_group or n_group, dim=-1)[1], 1)
            allowed = kept.bool().unsqueeze(-1).expand(n, n_group, size)
            allowed = (allowed.transpose(1, 2) if strided else allowed).reshape(n, e)
            choice = choice.masked_fill(~allowed, fill)
        idx = torch.topk(choice, k=k, dim=-1, sorted=False)[1]
        w = (weights(s, choice) if weights else s).gather(1, idx)
        if finish:
            w = finish(w, norm, routed_scaling_factor)
        else:
            w = (w / w.sum(dim=-1, keepdim=True) if norm == "topk" else w) * routed_scaling_factor
        return torch.zeros_like(s).scatter(1, idx, w).to(logits.dtype)

    a.impl["moe_router"] = moe_router


@mutant(
    "moe_routing",
    "moe-router/forward",
    "the selected weights always renormalised (a norm_topk_prob setting ignored: Qwen-MoE and OLMoE keep them)",
)
def moe_router_always_renormalised(a: MutantAdapter) -> None:
    _router(a, finish=lambda w, norm, c: w / w.sum(dim=-1, keepdim=True) * c)


@mutant(
    "moe_routing",
    "moe-router/renormalized-sum",
    "the routed scaling factor applied before the renormalisation, where it cancels",
)
def moe_router_scaling_cancelled(a: MutantAdapter) -> None:
    def finish(w: T, norm: str, c: float) -> T:
        w = w * c
        return w / w.sum(dim=-1, keepdim=True) if norm == "topk" else w

    _router(a, finish=finish)


@mutant(
    "moe_routing",
    "moe-router/bias-selects-only",
    "the weights gathered from score + bias (the selection's values) instead of the score",
)
def moe_router_bias_weighs(a: MutantAdapter) -> None:
    _router(a, weights=lambda s, choice: s + (choice - s.detach()).masked_fill(~torch.isfinite(choice), 0.0))


@mutant(
    "moe_routing",
    "moe-router/forward",
    "groups scored by their best expert (DeepSeek-V2's group-limited greedy) instead of their two best",
)
def moe_router_group_max(a: MutantAdapter) -> None:
    _router(a, group_scores=lambda view: view.max(dim=-1).values)


@mutant(
    "moe_routing",
    "moe-router/top-k-set",
    "the experts of excluded groups filled with 0 rather than −∞: a choice below 0 (a negative bias) loses to them",
)
def moe_router_group_fill_zero(a: MutantAdapter) -> None:
    _router(a, fill=0.0)


@mutant(
    "moe_routing",
    "moe-router/permutation-equivariance",
    "groups of strided experts (e, e + G, e + 2G, …) instead of consecutive ones",
)
def moe_router_strided_groups(a: MutantAdapter) -> None:
    _router(a, strided=True)


def _aux(a: MutantAdapter, loss: Callable[[T, T, int], T]) -> None:
    """moe_aux_loss with E·Σ f·P replaced by ``loss(p, one-hot selections (N, k, E), k)``."""

    def moe_aux_loss(logits: T, k: int) -> T:
        p = F.softmax(logits.float(), dim=-1)
        mask = F.one_hot(torch.topk(p, k, dim=-1)[1], logits.shape[-1]).float()
        return loss(p, mask, k).to(logits.dtype)

    a.impl["moe_aux_loss"] = moe_aux_loss


@mutant(
    "moe_aux_loss",
    "moe-aux-loss/forward",
    "f_e as the share of the N·k assignments (Megatron-Core's form) while declaring the share of tokens (HF's)",
)
def moe_aux_loss_per_assignment(a: MutantAdapter) -> None:
    _aux(a, lambda p, mask, k: (mask.mean(dim=0) * p.mean(dim=0)).sum() * p.shape[-1] / k)


@mutant(
    "moe_aux_loss",
    "moe-aux-loss/uniform-routing",
    "the loss not scaled by the number of experts E",
)
def moe_aux_loss_unscaled(a: MutantAdapter) -> None:
    _aux(a, lambda p, mask, k: (mask.mean(dim=0) * p.mean(dim=0)).sum())


@mutant(
    "moe_aux_loss",
    "moe-aux-loss/forward",
    "P_e, the mean router probability, taken from the selected probabilities only (0 for the others)",
)
def moe_aux_loss_selected_probs(a: MutantAdapter) -> None:
    _aux(a, lambda p, mask, k: (mask.mean(dim=0) * (p * mask.sum(dim=1)).mean(dim=0)).sum() * p.shape[-1])


def _z(a: MutantAdapter, loss: Callable[[T], T]) -> None:
    """moe_z_loss as ``loss(float32 logits)``, cast to the logits' dtype."""

    def moe_z_loss(logits: T) -> T:
        return loss(logits.float()).to(logits.dtype)

    a.impl["moe_z_loss"] = moe_z_loss


@mutant("moe_z_loss", "moe-z-loss/forward", "the router z-loss averaged over the experts too: mean of z²/E")
def moe_z_loss_over_experts(a: MutantAdapter) -> None:
    _z(a, lambda u: (torch.logsumexp(u, dim=-1) ** 2).mean() / u.shape[-1])


@mutant(
    "moe_z_loss",
    "moe-z-loss/gradient",
    "z² written as z.detach()·z: the value right, the gradient z·softmax/N, half of 2·z·softmax/N",
)
def moe_z_loss_half_gradient(a: MutantAdapter) -> None:
    def loss(u: T) -> T:
        z = torch.logsumexp(u, dim=-1)
        return (z.detach() * z).mean()

    _z(a, loss)


@mutant(
    "moe_z_loss",
    "moe-z-loss/token-mean",
    "the mean of two micro-batches' means, weighted equally when their token counts differ",
)
def moe_z_loss_micro_batch_means(a: MutantAdapter) -> None:
    def loss(u: T) -> T:
        z2 = torch.logsumexp(u, dim=-1) ** 2
        half = (len(z2) + 1) // 2
        return z2.mean() if len(z2) < 2 else (z2[:half].mean() + z2[half:].mean()) / 2

    _z(a, loss)


# ----------------------------------------------------------------------------- multimodal RoPE, NoPE temperature


Sections = tuple[int, int, int]


def _mrope(a: MutantAdapter, change: Callable[[T, Sections, str], tuple[T, Sections, str]]) -> None:
    """mrope on positions, sections and streams as ``change`` rewrites them."""

    def mrope(x: T, positions: T, sections: Sections, base: float = 10000.0, streams: str = "sections") -> T:
        pos, secs, how = change(positions, sections, streams)
        return mrope_torch(x, pos, base, secs, how, a.conventions.rope_layout)

    a.impl["mrope"] = mrope


@mutant("mrope", "mrope/forward", "the height and width sections swapped: (n_t, n_w, n_h) for (n_t, n_h, n_w)")
def mrope_sections_swapped(a: MutantAdapter) -> None:
    _mrope(a, lambda p, s, how: (p, (s[0], s[2], s[1]), how))


@mutant(
    "mrope",
    "mrope/forward",
    "every pair rotated by the temporal position (the 1-D RoPE of a text-only path applied to image tokens)",
)
def mrope_temporal_only(a: MutantAdapter) -> None:
    _mrope(a, lambda p, s, how: (p[:1].expand(3, -1), s, how))


@mutant(
    "mrope",
    "mrope/forward",
    "the height and width position rows read in the wrong order (w for h)",
)
def mrope_rows_swapped(a: MutantAdapter) -> None:
    _mrope(a, lambda p, s, how: (p[[0, 2, 1]], s, how))


@mutant(
    "mrope",
    "mrope/forward",
    "Qwen3-VL's interleaved streams computed as Qwen2-VL's consecutive sections (a converter's wrong rope config)",
)
def mrope_interleave_ignored(a: MutantAdapter) -> None:
    _mrope(a, lambda p, s, how: (p, s, "sections"))


@mutant(
    "mrope",
    "mrope/identity-at-zero",
    "position ids counted from 1 (each stream's position + 1)",
)
def mrope_one_based(a: MutantAdapter) -> None:
    _mrope(a, lambda p, s, how: (p + 1, s, how))


@mutant(
    "mrope",
    "mrope/relative",
    "the position rows held in float16 before the angles are formed (past 2048 they round; past 65504, infinite)",
)
def mrope_positions_float16(a: MutantAdapter) -> None:
    _mrope(a, lambda p, s, how: (p.to(torch.float16).float(), s, how))


@mutant(
    "mrope",
    "mrope/text-is-rope",
    "M-RoPE rotates interleaved pairs (2i, 2i+1) while the declared layout, and the adapter's own RoPE, is half-split "
    "(a port's GPT-J/NeoX rotation mode confused)",
)
def mrope_pairs_interleaved(a: MutantAdapter) -> None:
    def mrope(x: T, positions: T, sections: Sections, base: float = 10000.0, streams: str = "sections") -> T:
        return mrope_torch(x, positions, base, sections, streams, "interleaved")

    a.impl["mrope"] = mrope


def _temperature(a: MutantAdapter, tau: Callable[[T, float, float], T]) -> None:
    def attention_temperature(q: T, positions: T, floor_scale: float = 8192.0, attn_scale: float = 0.1) -> T:
        return (q * tau(positions, floor_scale, attn_scale)[:, None]).to(q.dtype)

    a.impl["attention_temperature"] = attention_temperature


@mutant(
    "attention_temperature",
    "temperature/forward",
    "⌊p/F⌋ for ⌊(p + 1)/F⌋: each step of τ one position late",
)
def temperature_step_late(a: MutantAdapter) -> None:
    _temperature(a, lambda p, f, s: torch.log1p(torch.floor(p.float() / f)) * s + 1.0)


@mutant(
    "attention_temperature",
    "temperature/identity-before-first-step",
    "log(⌊(p + 1)/F⌋ + 1) without the + 1 of τ: queries before the first step zeroed",
)
def temperature_without_one(a: MutantAdapter) -> None:
    _temperature(a, lambda p, f, s: torch.log1p(torch.floor((p.float() + 1.0) / f)) * s)


@mutant(
    "attention_temperature",
    "temperature/one-scale-per-step",
    "(p + 1)/F not floored: τ grows smoothly within a step",
)
def temperature_not_floored(a: MutantAdapter) -> None:
    _temperature(a, lambda p, f, s: torch.log1p((p.float() + 1.0) / f) * s + 1.0)


@mutant(
    "attention_temperature",
    "temperature/forward",
    "the positions cast to bfloat16 before τ is formed (a cache position held in the activations' dtype)",
)
def temperature_positions_bfloat16(a: MutantAdapter) -> None:
    _temperature(a, lambda p, f, s: torch.log1p(torch.floor((p.to(torch.bfloat16).float() + 1.0) / f)) * s + 1.0)


# --------------------------------------------------------------------------------------- multi-head latent attention


def _mla(a: MutantAdapter, **changes: Any) -> None:
    """mla_attention with its parameters or inputs rewritten by ``changes`` (name → function of the call's
    keywords) before the torch adapter's own computes it."""
    right = a.impl["mla_attention"]

    def mla_attention(**kw: Any) -> T:
        for name, change in changes.items():
            kw[name] = change(kw)
        return right(**kw)

    a.impl["mla_attention"] = mla_attention


def _mla_scale(a: MutantAdapter, scale: Callable[[int, int, Any], float]) -> None:
    """mla_attention with the softmax scale computed by ``scale(D_n, D_r, mscale)``."""
    _mla_built(a, torch_mla.ops(a.conventions.rope_layout, a.conventions.causal_alignment, scale)["mla_attention"])


def _mla_built(a: MutantAdapter, built: Callable[..., T]) -> None:
    """mla_attention as ``built`` (the torch adapter's own code built with other settings) computes it."""

    def mla_attention(**kw: Any) -> T:
        return built(**kw)

    a.impl["mla_attention"] = mla_attention


@mutant("mla", "mla/forward", "the softmax scale 1/√D_n: the decoupled RoPE slice left out of the head width")
def mla_scale_without_rope_dims(a: MutantAdapter) -> None:
    _mla_scale(a, lambda d_n, d_r, mscale: torch_mla.softmax_scale(d_n, 0, mscale))


@mutant("mla", "mla/forward", "YaRN's mscale applied once, not squared (the scale's mscale·mscale)")
def mla_mscale_not_squared(a: MutantAdapter) -> None:
    def scale(d_n: int, d_r: int, mscale: Any) -> float:
        m = 1.0 if not mscale else 0.1 * mscale["mscale_all_dim"] * math.log(mscale["factor"]) + 1.0
        return (d_n + d_r) ** -0.5 * m

    _mla_scale(a, scale)


@mutant("mla", "mla/forward", "YaRN's mscale left out of the softmax scale (a port scaling only the rotary cos/sin)")
def mla_mscale_ignored(a: MutantAdapter) -> None:
    _mla_scale(a, lambda d_n, d_r, mscale: (d_n + d_r) ** -0.5)


@mutant(
    "mla",
    "mla/forward",
    "the decoupled RoPE slice rotated in the other pair layout (DeepSeek's interleaved checkpoints read as half-split)",
)
def mla_rope_other_layout(a: MutantAdapter) -> None:
    other = "half" if a.conventions.rope_layout == "interleaved" else "interleaved"
    _mla_built(a, torch_mla.ops(other, a.conventions.causal_alignment)["mla_attention"])


@mutant(
    "mla",
    "mla/absorbed-equals-naive",
    "the absorbed form folds head 0's W_UK into every head's query (the absorbed weight built without its head axis)",
)
def mla_absorbed_one_head(a: MutantAdapter) -> None:
    right = a.impl["mla_attention"]

    def mla_attention(**kw: Any) -> T:
        if kw.get("form") == "absorbed":
            kw = dict(kw, w_uk=kw["w_uk"][:1].expand_as(kw["w_uk"]))
        return right(**kw)

    a.impl["mla_attention"] = mla_attention


@mutant(
    "mla",
    "mla/relative-positions",
    "the rotary cache built for 65,536 positions: later positions clamped to its last entry",
)
def mla_positions_clamped(a: MutantAdapter) -> None:
    _mla(
        a,
        q_positions=lambda kw: kw["q_positions"].clamp(max=65535),
        k_positions=lambda kw: kw["k_positions"].clamp(max=65535),
    )


def by_attribute() -> dict[str, Mutant]:
    return {m.attribute: m for m in CATALOGUE}

"""flash-linear-attention's Triton kernels as a candidate: ``fla`` (distribution ``flash-linear-attention``, its
kernels in ``fla-core``), the building blocks its models are made of.

What runs, per contract operation (measured on flash-linear-attention 0.6.0 / fla-core 0.6.0, triton 3.9.0,
torch 2.13.0):

* ``rms_norm`` — ``fla.modules.RMSNorm(n, eps=…).forward`` (``torch.func.functional_call`` with the suite's
  weight), i.e. ``fla.modules.norm.layernorm.rms_norm`` and its ``layer_norm_fwd``/``layer_norm_bwd`` kernels;
  ``layer_norm`` — ``fla.modules.LayerNorm(n, bias=True, eps=…).forward`` over the same kernels.
* ``rope`` — ``fla.modules.rotary.rotary_embedding`` (the kernel ``RotaryEmbedding.forward`` calls) with the cos
  and sin tables ``RotaryEmbedding._update_cos_sin_cache`` builds (its ``inv_freq``, ``torch.outer`` of float32
  positions, ``cos``/``sin`` cast to the input dtype), taken at the positions of the call: the module itself
  indexes a table of every position from 0 up to the last (2^24 positions: 4 GiB) and only consecutive ones.
  The leading dimensions of x are heads of one sequence, ``[1, T, H, D]`` as the kernel takes q and k.
* ``swiglu_mlp`` and ``glu_mlp`` (SiLU only) — ``fla.modules.GatedMLP(d, intermediate_size=h).forward`` with its
  default ``fuse_swiglu=True``: the two projections are ``nn.Linear`` and ``swiglu_linear`` runs the SwiGLU kernel
  and the down projection (its backward re-runs the kernel for ∂gate, ∂up and the product).
* ``cross_entropy`` (per token), ``cross_entropy_mean``, ``z_loss``, ``softcap_z_loss`` (``logit_softcapping``) and
  ``z_loss_mean`` — ``fla.modules.FusedCrossEntropyLoss`` (``reduction="none"``/``"mean"``, ``return_z_loss`` and
  ``lse_square_scale`` for the z-losses). Its ``forward`` asserts CUDA/NPU/XPU tensors before it calls
  ``cross_entropy_loss``; on the CPU (the interpreter) its body — that call, then the sum and the division by
  the count of valid tokens — runs here line for line. The z-loss is marked non-differentiable by the library
  (its gradient is folded into the loss's), so the z-losses are declared forward only.
* ``linear_cross_entropy`` — ``fla.modules.FusedLinearCrossEntropyLoss`` (``reduction="mean"``; it refuses
  ``"none"``, so only ``mean`` is declared).

Not declared: the other operations (fla has no kernel for them); ``mlp`` (fla's squared ReLU and GELU are
``torch.compile`` functions, not Triton kernels); ``linear_cross_entropy``'s ``reduction="none"`` (refused by the
module; the functional form sums regardless).

**Device.** As for Liger-Kernel (adapters/liger/adapter.py): without CUDA the kernels run under Triton's
interpreter, switched on by setting ``TRITON_INTERPRET=1`` before triton is imported; a process that imported
triton (or fla) first cannot interpret them and the CPU is refused in one line. Under the interpreter the
bridges of adapters/triton/interpreter_compat.py are applied (float kernel arguments; ``libdevice.tanh``, an empty
stub there, in the soft-capped cross-entropy), and one of this module: **untimed autotuning**. fla's norm, rotary
and activation kernels are ``triton.autotune``d, and the autotuner times each configuration through the active
GPU driver, which the interpreter does not have ("0 active drivers ([]). There should only be one."). The bridge
gives those autotuners a benchmark that times nothing, so each takes its first configuration (the norms: 32 rows
a program; the SwiGLU kernel: 512 elements; ``num_warps``/``num_stages`` mean nothing to the interpreter). fla
also finds no GPU to count multiprocessors on and uses 1 (the norms' backward then sums ∂γ in one program, the
RoPE kernel takes one block of up to 128 positions). bfloat16 is declared only where the kernels are compiled:
the interpreter's bfloat16 arithmetic is not the hardware's.

Declared, from fla 0.6.0's source and measured (docs/adapters.md, "fla"):

* Norms: statistics in float32 (two-pass variance for LayerNorm), x̂·γ (+β) in float32 and one rounding; the
  backward in float32 from the saved 1/σ, ∂γ and ∂β summed in float32 and rounded once: no rounding declaration.
  ε defaults to 1e-5 (``RMSNorm``, ``LayerNorm`` and the functions).
* RoPE: the half-split layout (``interleaved=False``, the module's default); the kernel asserts that cos and sin
  have the input's dtype, so they are rounded to it before the rotation, which is then computed in float32 and
  rounded once: ``unfused`` ``rope``.
* SwiGLU MLP: the projections round to the input dtype, the kernel computes SiLU(gate)·up in float32 and
  stores the product in the input dtype before the down projection: ``unfused`` ``swiglu_mlp``, ``glu_mlp``.
* Cross-entropy: log-sum-exp, loss and z-loss in float32, the per-token losses summed in float32; the backward
  recomputes the softmax from the saved float32 log-sum-exp and rounds ∂logits once.
* Fused linear cross-entropy: the logits of each chunk of tokens are ``F.linear`` in the input dtype (``unfused``
  ``linear_cross_entropy``); the forward computes the gradient for a unit cotangent into them (in the input dtype),
  projects it to ∂x in the input dtype and accumulates ∂W and ∂b in float32, and the backward multiplies the
  stored gradients by the cotangent (``grad_in_forward``). With every token ignored the count is clamped to 1: the
  mean is 0 (``zero_when_all_ignored``).
* Compiled only, from the source and not measured here (no GPU): ``tl.exp`` is the hardware's exp2
  (``exp_via_exp2`` for the losses).
"""

from __future__ import annotations

import os
import sys
import warnings
from collections.abc import Callable, Iterable
from importlib.metadata import version
from types import ModuleType
from typing import Any

import torch

from transformer_conformance.adapters.versions import SUPPORTED, Supported, require

#: The releases the fla adapter supports (adapters/versions.py): its declarations were measured on
#: flash-linear-attention 0.6.0 (whose kernels are fla-core 0.6.0's), triton 3.9.0 and torch 2.13.0
SUPPORTED_FLA: tuple[Supported, ...] = SUPPORTED["fla"]

# refused before fla is imported
require("fla", SUPPORTED_FLA)

#: Triton (or fla) was imported before this module without the interpreter: too late to interpret the kernels
_IMPORTED_COMPILED = any(m in sys.modules for m in ("triton", "fla")) and os.environ.get("TRITON_INTERPRET") != "1"
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")  # before triton's import (adapters/liger/adapter.py)

with warnings.catch_warnings():
    # fla.utils warns at import that it found no Triton GPU backend ("roll back to CPU"): the interpreter runs
    warnings.filterwarnings("ignore", message="Triton is not supported on current platform")
    import fla.modules.activations.ops as fla_activations
    import fla.modules.fused_cross_entropy.ops as fla_cross_entropy
    import fla.modules.fused_linear_cross_entropy.ops as fla_linear_cross_entropy
    import fla.modules.norm.layernorm as fla_layernorm
    import fla.modules.rotary.ops as fla_rotary
    import triton
    from fla.modules import (
        FusedCrossEntropyLoss,
        FusedLinearCrossEntropyLoss,
        GatedMLP,
        LayerNorm,
        RMSNorm,
        RotaryEmbedding,
    )
    from fla.modules.fused_cross_entropy import cross_entropy_loss
    from fla.modules.rotary import rotary_embedding
from triton.runtime.autotuner import Autotuner  # noqa: E402

from transformer_conformance.adapters.contract import Capability, Conventions, interpreted  # noqa: E402
from transformer_conformance.adapters.torch.adapter import TorchAdapter, with_autocast  # noqa: E402
from transformer_conformance.adapters.triton import interpreter_compat as compat  # noqa: E402
from transformer_conformance.adapters.triton.env import check_device  # noqa: E402

#: the kernels were defined for the interpreter (no CUDA, or TRITON_INTERPRET=1 set by the user)
INTERPRETED = not _IMPORTED_COMPILED and isinstance(
    fla_cross_entropy.cross_entropy_fwd_kernel, triton.runtime.interpreter.InterpretedFunction
)

#: the kernel modules of the operations declared
KERNEL_MODULES: tuple[ModuleType, ...] = (
    fla_layernorm,
    fla_rotary,
    fla_activations,
    fla_cross_entropy,
    fla_linear_cross_entropy,
)


def _untimed(kernel_call: Callable[[], Any], quantiles: tuple[float, ...]) -> list[float]:
    """A benchmark that runs and times nothing: every configuration ties, so the autotuner keeps its first."""
    return [0.0] * len(quantiles)


def autotuners(modules: Iterable[ModuleType]) -> dict[str, Autotuner]:
    """The ``triton.autotune``d kernels defined in ``modules`` (under heuristics wrappers too), by name."""
    found: dict[str, Autotuner] = {}
    for module in modules:
        for name, obj in vars(module).items():
            kernel = obj
            while kernel is not None and not isinstance(kernel, Autotuner):
                kernel = getattr(kernel, "fn", None)
            if isinstance(kernel, Autotuner) and getattr(kernel.base_fn, "__module__", None) == module.__name__:
                found[f"{module.__name__}.{name}"] = kernel
    return found


def untimed_autotuning(modules: Iterable[ModuleType]) -> list[str]:
    """This adapter's interpreter bridge: the autotuners of ``modules`` take their first configuration without
    timing any (the interpreter has no GPU driver to time with, and the autotuner's default benchmark asks for
    one). Only when kernels are interpreted; returns the kernels bridged."""
    if not compat.interpreting():
        return []
    tuned = autotuners(modules)
    for kernel in tuned.values():
        kernel._do_bench = _untimed
        kernel.__dict__.pop("do_bench", None)  # a cached_property: forget a benchmark resolved before
    return sorted(tuned)


BRIDGED = compat.apply([fla_cross_entropy])
UNTIMED = untimed_autotuning(KERNEL_MODULES)

#: ε of fla's RMSNorm, LayerNorm, rms_norm and layer_norm
DEFAULT_EPS = 1e-5

#: the operations of fla's cross-entropy kernels
LOSSES = ("cross_entropy", "cross_entropy_mean", "z_loss", "softcap_z_loss", "z_loss_mean", "linear_cross_entropy")


def cos_sin(positions: torch.Tensor, rotary_dim: int, base: float, dtype: torch.dtype) -> tuple[torch.Tensor, ...]:
    """The rows of ``RotaryEmbedding``'s cos and sin cache at ``positions``: its ``inv_freq``, the float32 outer
    product with the positions (its ``pos_idx_in_fp32=True`` default), cos and sin cast to ``dtype``."""
    rotary = RotaryEmbedding(dim=rotary_dim, base=base, device=positions.device)
    freqs = torch.outer(positions.to(torch.float32), rotary.inv_freq)
    return torch.cos(freqs).to(dtype), torch.sin(freqs).to(dtype)


def _module_call(module: torch.nn.Module, params: dict[str, torch.Tensor], *args: Any) -> Any:
    """``module.forward(*args)`` with its parameters replaced by the suite's tensors (gradients flow to them)."""
    return torch.func.functional_call(module, params, args)


def cross_entropy_module(
    logits: torch.Tensor, targets: torch.Tensor, reduction: str, **options: Any
) -> tuple[torch.Tensor, torch.Tensor]:
    """``FusedCrossEntropyLoss(reduction=…, return_z_loss=True, **options)(logits, targets)``: (loss, z-loss), float32.

    The module's forward asserts a CUDA/NPU/XPU tensor before anything else; elsewhere its body runs here as it is
    written in fla 0.6.0: ``cross_entropy_loss`` with the module's attributes, then the sums and the division by
    the count of valid tokens."""
    module = FusedCrossEntropyLoss(reduction=reduction, return_z_loss=True, **options)
    if logits.device.type in ("cuda", "npu", "xpu"):
        return module(logits, targets)  # type: ignore[no-any-return]
    loss, z_loss = cross_entropy_loss(
        logits=logits,
        target=targets,
        label_smoothing=module.label_smoothing,
        logit_scale=module.logit_scale,
        lse_square_scale=module.lse_square_scale,
        logit_softcapping=module.logit_softcapping,
        ignore_index=module.ignore_index,
        inplace_backward=module.inplace_backward,
        process_group=module.process_group,
    )
    if module.reduction != "none":
        loss = loss.sum()
        z_loss = z_loss.sum()
        if module.reduction == "mean":
            total = (targets != module.ignore_index).sum()
            loss = loss / total
            z_loss = z_loss / total
    return loss, z_loss


def _ops(adapter: FlaAdapter) -> dict[str, Callable[..., torch.Tensor]]:
    meta = torch.device("meta")  # modules are built without storage: the suite's tensors replace their parameters

    def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float | None = None) -> torch.Tensor:
        module = RMSNorm(x.shape[-1], eps=DEFAULT_EPS if eps is None else eps, device=meta)
        return _module_call(module, {"weight": weight}, x)  # type: ignore[no-any-return]

    def layer_norm(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float | None = None) -> torch.Tensor:
        module = LayerNorm(x.shape[-1], bias=True, eps=DEFAULT_EPS if eps is None else eps, device=meta)
        return _module_call(module, {"weight": weight, "bias": bias}, x)  # type: ignore[no-any-return]

    def rope(
        x: torch.Tensor, positions: torch.Tensor, base: float = 10000.0, rotary_dim: int | None = None
    ) -> torch.Tensor:
        t, d = x.shape[-2:]
        cos, sin = cos_sin(positions, d if rotary_dim is None else rotary_dim, float(base), x.dtype)
        q = x.reshape(-1, t, d).transpose(0, 1).unsqueeze(0)  # [B, T, H, D]: the leading dimensions are heads
        out = rotary_embedding(q, cos, sin, interleaved=adapter.interleaved)
        return out.squeeze(0).transpose(0, 1).reshape(x.shape)

    def swiglu_mlp(x: torch.Tensor, w1: torch.Tensor, w3: torch.Tensor, w2: torch.Tensor) -> torch.Tensor:
        with torch.device(meta):
            module = GatedMLP(hidden_size=x.shape[-1], intermediate_size=w1.shape[-1])
        params = {"gate_proj.weight": w1.t(), "up_proj.weight": w3.t(), "down_proj.weight": w2.t()}
        return _module_call(module, params, x)  # type: ignore[no-any-return]

    def glu_mlp(x: torch.Tensor, w1: torch.Tensor, w3: torch.Tensor, w2: torch.Tensor, activation: str) -> torch.Tensor:
        if activation != "silu":
            raise ValueError(f"fla's GatedMLP has no {activation!r} gate (it has swish, and powlu)")
        return swiglu_mlp(x, w1, w3, w2)

    def swiglu_product(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
        return fla_activations.swiglu(gate, up)  # type: ignore[no-any-return]

    def cross_entropy(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return cross_entropy_module(logits, targets, "none")[0].to(logits.dtype)  # the losses are float32

    def cross_entropy_mean(logits: torch.Tensor, targets: torch.Tensor, ignore_index: int = -100) -> torch.Tensor:
        return cross_entropy_module(logits, targets, "mean", ignore_index=ignore_index)[0].to(logits.dtype)

    def _z(logits: torch.Tensor, alpha: float, cap: float | None) -> torch.Tensor:
        targets = torch.zeros(logits.shape[0], dtype=torch.int64, device=logits.device)  # any class: z is apart
        _, z = cross_entropy_module(logits, targets, "none", lse_square_scale=alpha, logit_softcapping=cap)
        return z.to(logits.dtype)

    def z_loss(logits: torch.Tensor, alpha: float = 1e-4) -> torch.Tensor:
        return _z(logits, alpha, None)

    def softcap_z_loss(logits: torch.Tensor, alpha: float = 1e-4, cap: float = 30.0) -> torch.Tensor:
        return _z(logits, alpha, cap)

    def z_loss_mean(
        logits: torch.Tensor, targets: torch.Tensor, alpha: float = 1e-4, ignore_index: int = -100
    ) -> torch.Tensor:
        _, z = cross_entropy_module(logits, targets, "mean", lse_square_scale=alpha, ignore_index=ignore_index)
        return z.to(logits.dtype)

    def linear_cross_entropy(
        x: torch.Tensor,
        weight: torch.Tensor,
        bias: torch.Tensor,
        targets: torch.Tensor,
        ignore_index: int = -100,
        reduction: str = "mean",
    ) -> torch.Tensor:
        module = FusedLinearCrossEntropyLoss(ignore_index=ignore_index, reduction=reduction)
        return module(x, targets, weight, bias).to(x.dtype)  # type: ignore[no-any-return]  # a float32 loss

    fns = (
        rms_norm,
        layer_norm,
        rope,
        swiglu_mlp,
        glu_mlp,
        swiglu_product,
        cross_entropy,
        cross_entropy_mean,
        z_loss,
        softcap_z_loss,
        z_loss_mean,
        linear_cross_entropy,
    )
    return {f.__name__: f for f in fns}


class FlaAdapter(TorchAdapter):
    """The ``fla`` adapter: flash-linear-attention's norm, rotary, SwiGLU and cross-entropy kernels."""

    name = "fla"
    #: what the kernel is called with: RotaryEmbedding's ``interleaved`` (its pair layout, declared in ``declared``)
    interleaved = False
    #: the releases it supports (this module's SUPPORTED_FLA)
    supported = SUPPORTED_FLA

    def __init__(self, device: str = "cpu") -> None:
        check_device(device, INTERPRETED, "flash-linear-attention")
        super().__init__(device, rope_layout="half")
        self.conventions = self.declared()
        self.capabilities = with_autocast(self.declared_capabilities())
        if not self.compiled():  # every program of a grid in Python: each size regime runs once
            self.capabilities = interpreted(self.capabilities)
        self.impl = _ops(self)

    def compiled(self) -> bool:
        """On CUDA with the kernels defined for compilation (not with TRITON_INTERPRET=1 set by the user)."""
        return self.device.startswith("cuda") and not INTERPRETED

    def dtypes(self) -> frozenset[str]:
        """bfloat16 only where the kernels are compiled: the interpreter's bfloat16 arithmetic is wrong."""
        return frozenset({"float32", "float16", "bfloat16"} if self.compiled() else {"float32", "float16"})

    def declared(self) -> Conventions:
        return Conventions(
            rope_layout="half",
            rope_angle_dtype="float32",
            compute_dtype="float32",
            norm_rounding="single",
            unfused=frozenset({"rope", "swiglu_mlp", "glu_mlp", "linear_cross_entropy"}),
            eps_defaults={"rms_norm": DEFAULT_EPS, "layer_norm": DEFAULT_EPS},
            grad_in_forward=frozenset({"linear_cross_entropy"}),
            exp_via_exp2=frozenset(LOSSES) if self.compiled() else frozenset(),
            zero_when_all_ignored=frozenset({"linear_cross_entropy"}),
        )

    def declared_capabilities(self) -> dict[str, Capability]:
        dtypes = self.dtypes()
        caps = {op: Capability(dtypes=dtypes) for op in ("rms_norm", "layer_norm", "rope", "swiglu_mlp")}
        caps["glu_mlp"] = Capability(dtypes=dtypes, values={"activation": frozenset({"silu"})})
        caps |= {op: Capability(dtypes=dtypes) for op in ("cross_entropy", "cross_entropy_mean")}
        # the z-loss is returned marked non-differentiable: its gradient is folded into the loss's
        caps |= {op: Capability(dtypes=dtypes, grad=False) for op in ("z_loss", "softcap_z_loss", "z_loss_mean")}
        caps["linear_cross_entropy"] = Capability(dtypes=dtypes, values={"reduction": frozenset({"mean"})})
        return caps

    def environment(self) -> dict[str, str]:
        env = super().environment()
        env["flash-linear-attention"] = version("flash-linear-attention")
        env["fla-core"] = version("fla-core")
        env["triton"] = triton.__version__
        env["triton mode"] = "compiled" if self.compiled() else "interpreter (TRITON_INTERPRET=1)"
        if not self.compiled():
            env["interpreter bridges"] = compat.describe(BRIDGED)
            env["untimed autotuning"] = f"{len(UNTIMED)} kernels take their first configuration (no GPU driver)"
        return env


class FlaInterleavedAdapter(FlaAdapter):
    """``fla-interleaved``: ``RotaryEmbedding(interleaved=True)`` (GPT-J's adjacent pairs), the rotary kernel's
    other branch; the rest is ``fla``'s and not declared again."""

    name = "fla-interleaved"
    interleaved = True

    def declared(self) -> Conventions:
        # as ``fla``'s RoPE: cos and sin rounded to the input dtype, the rotation in float32 and one rounding
        return Conventions(rope_layout="interleaved", rope_angle_dtype="float32", unfused=frozenset({"rope"}))

    def declared_capabilities(self) -> dict[str, Capability]:
        return {"rope": super().declared_capabilities()["rope"]}

"""Liger-Kernel's Triton kernels as candidates: ``liger`` (RMSNorm in its default ``llama`` casting mode),
``liger-gemma`` and ``liger-none`` (the other two RMSNorm casting modes).

The kernels are called through their autograd functions (``liger_kernel.transformers.functional``):
``liger_rms_norm``, ``liger_layer_norm``, ``liger_rope``, ``liger_swiglu`` (SiLU(a)·b, inside the SwiGLU
MLP whose three projections are torch matmuls, as ``LigerSwiGLUMLP`` builds it) and
``liger_cross_entropy`` (per-token and mean cross-entropy; z-loss, with and without soft-capping, per token
and averaged over valid tokens) and ``liger_fused_linear_cross_entropy``.
Tensor conversions, autograd plumbing and the benchmark hook come from the torch adapter.

**Device.** On CUDA the kernels are compiled as usual. Without CUDA they run under Triton's interpreter,
which this module switches on by setting ``TRITON_INTERPRET=1`` *before* triton is imported (Triton
reads it as each kernel is decorated, its own library functions — ``tl.sum``, ``tl.sigmoid`` — when it is
imported), unless the variable is already set. It then stays set for the process: on a machine without
CUDA no Triton kernel can run compiled anyway, and nothing changes for the other adapters. A process that
imported triton before this module cannot interpret Liger's kernels: the adapter then refuses the CPU with
a one-line error. ``adapters/triton/interpreter_compat.py`` bridges two interpreter gaps that break
RMSNorm, LayerNorm, SwiGLU, GeGLU and soft-capped cross-entropy there (and a slow path that costs a third
of each program's time). The interpreter computes bfloat16 arithmetic on the raw 16-bit patterns and
truncates float32 to bfloat16, so bfloat16 is declared only where the kernels are compiled; float32 and
float16 run in both.

Declared, from liger-kernel 0.8.5's source and measured (docs/adapters.md):

* ``liger`` RMSNorm (``casting_mode="llama"``) computes 1/RMS in float32, casts x·(1/RMS) to the input
  dtype and multiplies by the weight: ``norm_rounding="before_weight"``. Its backward forms the weight
  gradient's products g·x̂ with x̂ cast to the input dtype, in that dtype: ``unfused`` ``rms_norm.vjp``. The
  backward (``in_place=True``, the default, in all three casting modes) writes ∂L/∂x into the incoming
  gradient ∂L/∂y and returns it: ``in_place_ops`` ``rms_norm.vjp``.
  ε has no functional default; ``LigerRMSNorm`` and ``LigerLayerNorm`` default to 1e-6.
* LayerNorm: float32 statistics (two-pass variance), one rounding of the output and of each gradient.
* RoPE: the half-split layout; cos and sin are computed here in float32 (angles as the torch adapter,
  ``cat(freqs, freqs)`` as HF builds them; the kernel reads only their first half), and the kernel rotates
  in the dtype of cos and sin, so once rounded. It writes the rotated values into q and k themselves
  whenever their (batch, seq, heads, dim) view is contiguous — one head or one position — so ``rope`` is
  declared in ``in_place_ops``. Its backward rotates the incoming gradient back in the same way, in place
  for one head: ``rope.vjp`` is declared too.
* SwiGLU MLP: the matmuls round to the input dtype, the kernel rounds SiLU(a) to the input dtype before
  the product: ``unfused`` ``swiglu_mlp``. The kernel's backward writes ∂L/∂a and ∂L/∂b into a and b, the
  projections x·W₁ and x·W₃ — intermediates here, not inputs of the contract's operation.
* Cross-entropy computes the gradient during the forward and stores it *in the logits*, zeroes the logits
  of ignored tokens even without gradients, and multiplies the stored gradient by the cotangent in the
  input dtype: ``in_place_ops`` and ``grad_in_forward`` cross_entropy and cross_entropy_mean, and
  ``unfused`` ``cross_entropy_mean`` (its per-token losses are rounded to the input dtype before they are
  summed). It takes exp(t) as exp2(t·log₂e): ``exp_via_exp2`` for all four losses. The z-loss
  (``lse_square_scale``·lse², after soft-capping when ``softcap`` is given) is an extra output with no
  gradient of its own — Liger adds its gradient into the cross-entropy's — so ``z_loss`` and
  ``softcap_z_loss`` are declared forward only.

* Fused linear cross-entropy (``liger_fused_linear_cross_entropy``, ``reduction`` mean and none) stores the
  logits in the input dtype chunk by chunk (``unfused`` linear_cross_entropy), computes the gradient for a unit
  cotangent in the forward and ∂x, ∂W, ∂b from it (``grad_in_forward``), accumulating ∂W and ∂b over the
  chunks in the weight's dtype (``low_precision_sums`` linear_cross_entropy.vjp); per token it folds each
  token's cotangent in before the projection. With every token ignored its mean is 0, as is the z-loss term
  (``zero_when_all_ignored``). ``z_loss_mean`` is ``liger_cross_entropy``'s z-loss with ``reduction="mean"``
  (per-token values stored in the input dtype: ``unfused``), forward only; it zeroes ignored rows of the
  logits (``in_place_ops``).

* GLU and plain MLPs: Liger has kernels for the SiLU and tanh-GELU products (``liger_swiglu``,
  ``liger_geglu``) and for squared ReLU (``liger_relu_squared``), so ``glu_mlp`` is declared with
  ``activation`` silu and gelu_tanh and ``mlp`` with relu_squared only (the checks draw no other
  activation for it). Each kernel rounds its result to the input dtype between torch's matmuls:
  ``unfused`` ``glu_mlp`` and ``mlp``.
"""

from __future__ import annotations

import dataclasses
import inspect
import os
import sys
from collections.abc import Callable
from importlib.metadata import version

import torch

from transformer_conformance.adapters.versions import SUPPORTED, require

# the releases the liger adapters support (adapters/versions.py), refused before Liger is imported. What a
# release lacks (squared ReLU before 0.8, a partial rotary width in the RoPE kernel before 0.8.5) is worked
# around as model code of that release does, or not declared
require("liger", SUPPORTED["liger"])

#: Triton (or Liger) was imported before this module without the interpreter: too late to interpret
_IMPORTED_COMPILED = (
    any(m in sys.modules for m in ("triton", "liger_kernel")) and os.environ.get("TRITON_INTERPRET") != "1"
)
if not torch.cuda.is_available():
    # must precede the import of triton: it reads the variable as each kernel is decorated, and its own
    # library functions (tl.sum, tl.max, tl.sigmoid, …) are decorated when triton is imported
    os.environ.setdefault("TRITON_INTERPRET", "1")

# liger-kernel before 0.8.5 reads torch.distributed.tensor.DTensor in RMSNorm without importing that submodule, which
# torch 2.12 made lazy: imported here, as a training process's other libraries import it, so whether Liger's RMSNorm
# raises AttributeError does not depend on what the process happened to import first (docs/adapters.md)
try:
    import torch.distributed.tensor
except ImportError:  # a torch built without the distributed package
    pass

import liger_kernel.ops.cross_entropy  # noqa: E402
import liger_kernel.ops.geglu  # noqa: E402
import liger_kernel.ops.layer_norm  # noqa: E402
import liger_kernel.ops.rms_norm  # noqa: E402
import liger_kernel.ops.rope  # noqa: E402
import liger_kernel.ops.swiglu  # noqa: E402
import triton  # noqa: E402

from transformer_conformance.adapters.versions import UnsupportedVersion, release  # noqa: E402

try:
    import liger_kernel.transformers.functional as functional
except ImportError as err:  # 0.4's liger_kernel.transformers imports the model code of the transformers of its day
    line = str(err).splitlines()[0] if str(err) else type(err).__name__
    raise UnsupportedVersion(
        f"liger-kernel {version('liger-kernel')}: liger_kernel.transformers does not import beside the transformers "
        f"installed ({line}); its releases before 0.5 need transformers 4.x (measured: 0.4.0 with 4.46.3)"
    ) from err
from liger_kernel.transformers.functional import (  # noqa: E402
    liger_cross_entropy,
    liger_fused_linear_cross_entropy,
    liger_geglu,
    liger_layer_norm,
    liger_rms_norm,
    liger_rope,
    liger_swiglu,
)

from transformer_conformance.adapters.contract import Capability, Conventions, interpreted  # noqa: E402
from transformer_conformance.adapters.torch.adapter import TorchAdapter, with_autocast  # noqa: E402
from transformer_conformance.adapters.triton import interpreter_compat as compat  # noqa: E402
from transformer_conformance.adapters.triton.env import check_device  # noqa: E402

#: Liger's kernels were defined for the interpreter (no CUDA, or TRITON_INTERPRET=1 set by the user)
INTERPRETED = not _IMPORTED_COMPILED and isinstance(
    liger_kernel.ops.rms_norm._rms_norm_forward_kernel, triton.runtime.interpreter.InterpretedFunction
)
BRIDGED = compat.apply(
    [liger_kernel.ops.rms_norm, liger_kernel.ops.layer_norm, liger_kernel.ops.cross_entropy, liger_kernel.ops.geglu]
)

#: the operations of Liger's cross-entropy kernel
_LOSSES = ("cross_entropy", "cross_entropy_mean", "z_loss", "softcap_z_loss", "linear_cross_entropy", "z_loss_mean")

#: eps of LigerRMSNorm and LigerLayerNorm (the functions have no default)
DEFAULT_EPS = 1e-6

#: the RoPE kernel rotates only the first ``rotary_dim`` of a head itself (0.8.5 on); before, model code
#: rotates x[..., :rotary_dim] through it and passes the rest, as HF's partial-rotary models do
ROPE_ROTARY_DIM = "rotary_dim" in inspect.signature(liger_kernel.ops.rope.LigerRopeFunction.forward).parameters

#: 0.4.0's functional API is the autograd Functions' ``apply``: positional arguments only (0.4.1 wraps them)
POSITIONAL = not inspect.isfunction(liger_cross_entropy)
#: the cross-entropy kernel's z-loss and soft-capping (``lse_square_scale``, ``softcap``) are 0.4.1's
HAS_Z_LOSS = (
    "lse_square_scale" in inspect.signature(liger_kernel.ops.cross_entropy.LigerCrossEntropyFunction.forward).parameters
)
#: 0.4.x's RMSNorm and LayerNorm backwards ask CUDA for its multiprocessor count (``torch.cuda.get_device_properties``)
#: on every device; from 0.5 only on CUDA. Off CUDA those gradients are then not declared (the environment says so)
NORM_BACKWARD_NEEDS_CUDA = release(version("liger-kernel")) < (0, 5)

#: backwards that write their result into the incoming gradient (measured, docs/adapters.md): RMSNorm's
#: (``in_place=True``, its default, in every casting mode) always; RoPE's whenever the gradient's
#: (batch, seq, heads, dim) view is contiguous, as its forward does with q
_GRAD_INTO_COTANGENT = frozenset({"rms_norm.vjp", "rope.vjp"})


def _cos_sin(positions: torch.Tensor, rd: int, base: float) -> tuple[torch.Tensor, torch.Tensor]:
    """cos and sin of the angles, (T, rd) in float32, each half the same (HF's ``cat(freqs, freqs)``)."""
    inv_freq = 1.0 / (base ** (torch.arange(0, rd, 2, device=positions.device, dtype=torch.int64).float() / rd))
    freqs = positions.float()[:, None] * inv_freq[None, :]
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos(), emb.sin()


def _ops(adapter: LigerAdapter) -> dict[str, Callable[..., torch.Tensor]]:
    def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float | None = None) -> torch.Tensor:
        w = adapter.stored_weight(weight)
        # positional: before 0.5 liger_rms_norm is the autograd Function's apply
        return liger_rms_norm(x, w, DEFAULT_EPS if eps is None else eps, adapter.offset, adapter.casting_mode)

    def layer_norm(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float | None = None) -> torch.Tensor:
        return liger_layer_norm(x, weight, bias, DEFAULT_EPS if eps is None else eps)

    def rope(
        x: torch.Tensor, positions: torch.Tensor, base: float = 10000.0, rotary_dim: int | None = None
    ) -> torch.Tensor:
        t, d = x.shape[-2:]
        rd = d if rotary_dim is None else rotary_dim
        cos, sin = _cos_sin(positions, rd, float(base))
        q = x.reshape(1, -1, t, d)  # (batch, heads, T, d), the layout liger_rope takes
        if not ROPE_ROTARY_DIM and rd < d:
            q_rot, q_pass = q[..., :rd].contiguous(), q[..., rd:]
            k = torch.zeros((1, 1, t, rd), dtype=x.dtype, device=x.device)
            q_out, _ = liger_rope(q_rot, k, cos, sin)
            return torch.cat((q_out, q_pass), dim=-1).reshape(x.shape)
        k = torch.zeros((1, 1, t, d), dtype=x.dtype, device=x.device)  # the kernel rotates q and k together
        q_out, _ = liger_rope(q, k, cos, sin, rotary_dim=rd) if ROPE_ROTARY_DIM else liger_rope(q, k, cos, sin)
        return q_out.reshape(x.shape)

    def swiglu_product(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
        return liger_swiglu(gate, up)

    def swiglu_mlp(x: torch.Tensor, w1: torch.Tensor, w3: torch.Tensor, w2: torch.Tensor) -> torch.Tensor:
        return liger_swiglu(x @ w1, x @ w3) @ w2

    def glu_mlp(x: torch.Tensor, w1: torch.Tensor, w3: torch.Tensor, w2: torch.Tensor, activation: str) -> torch.Tensor:
        return _kernel(GLU_PRODUCTS, activation)(x @ w1, x @ w3) @ w2

    def mlp(x: torch.Tensor, w_in: torch.Tensor, w_out: torch.Tensor, activation: str) -> torch.Tensor:
        return _kernel(ACTIVATIONS, activation)(x @ w_in) @ w_out

    def cross_entropy(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        if POSITIONAL:  # (input, target, ignore_index, label_smoothing, reduction)
            return liger_cross_entropy(logits, targets, -100, 0.0, "none")
        return liger_cross_entropy(logits, targets, reduction="none")

    def cross_entropy_mean(logits: torch.Tensor, targets: torch.Tensor, ignore_index: int = -100) -> torch.Tensor:
        if POSITIONAL:
            return liger_cross_entropy(logits, targets, ignore_index, 0.0, "mean")
        return liger_cross_entropy(logits, targets, ignore_index=ignore_index, reduction="mean")

    def _z(logits: torch.Tensor, alpha: float, softcap: float | None) -> torch.Tensor:
        targets = torch.zeros(logits.shape[0], dtype=torch.int64, device=logits.device)  # any class: z is apart
        out = liger_cross_entropy(
            logits, targets, reduction="none", lse_square_scale=alpha, softcap=softcap, return_z_loss=True
        )
        return out.z_loss if hasattr(out, "z_loss") else out[1]  # a (loss, z_loss) tuple before 0.6

    def z_loss(logits: torch.Tensor, alpha: float = 1e-4) -> torch.Tensor:
        return _z(logits, alpha, None)

    def softcap_z_loss(logits: torch.Tensor, alpha: float = 1e-4, cap: float = 30.0) -> torch.Tensor:
        return _z(logits, alpha, cap)

    def linear_cross_entropy(
        x: torch.Tensor,
        weight: torch.Tensor,
        bias: torch.Tensor,
        targets: torch.Tensor,
        ignore_index: int = -100,
        reduction: str = "mean",
    ) -> torch.Tensor:
        if POSITIONAL:  # (input, weight, target, bias, ignore_index, label_smoothing, reduction)
            loss = liger_fused_linear_cross_entropy(x, weight, targets, bias, ignore_index, 0.0, reduction)
        else:
            loss = liger_fused_linear_cross_entropy(
                x, weight, targets, bias=bias, ignore_index=ignore_index, reduction=reduction
            )
        return loss.to(x.dtype)  # the kernel's losses are float32

    def z_loss_mean(
        logits: torch.Tensor, targets: torch.Tensor, alpha: float = 1e-4, ignore_index: int = -100
    ) -> torch.Tensor:
        out = liger_cross_entropy(
            logits, targets, ignore_index=ignore_index, reduction="mean", lse_square_scale=alpha, return_z_loss=True
        )
        return out.z_loss

    fns = (
        rms_norm,
        layer_norm,
        rope,
        swiglu_mlp,
        swiglu_product,
        glu_mlp,
        mlp,
        cross_entropy,
        cross_entropy_mean,
        z_loss,
        softcap_z_loss,
        linear_cross_entropy,
        z_loss_mean,
    )
    return {f.__name__: f for f in fns}


#: Liger's kernel for each activation of the contract's glu_mlp and mlp it has one for
GLU_PRODUCTS: dict[str, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = {
    "silu": liger_swiglu,
    "gelu_tanh": liger_geglu,
}
ACTIVATIONS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = (
    {"relu_squared": functional.liger_relu_squared} if hasattr(functional, "liger_relu_squared") else {}
)


def _kernel(kernels: dict[str, Callable[..., torch.Tensor]], activation: str) -> Callable[..., torch.Tensor]:
    if activation not in kernels:
        raise ValueError(f"Liger has no kernel for activation {activation!r}; it has {', '.join(kernels)}")
    return kernels[activation]


def _check_device(device: str) -> None:
    check_device(device, INTERPRETED, "Liger")


class LigerAdapter(TorchAdapter):
    """The built-in ``liger`` adapter: every operation Liger-Kernel has kernels for; RMSNorm in the
    ``llama`` casting mode."""

    name = "liger"
    casting_mode = "llama"
    offset = 0.0
    #: the releases it supports (adapters/versions.py; docs/adapters.md)
    supported = SUPPORTED["liger"]

    def __init__(self, device: str = "cpu") -> None:
        _check_device(device)
        super().__init__(device, rope_layout="half")
        self.conventions = self.declared()
        self.capabilities = with_autocast(self.declared_capabilities())
        if INTERPRETED and not device.startswith("cuda"):  # every program of a grid in Python: regimes run once
            self.capabilities = interpreted(self.capabilities)
        #: what this release cannot run on this device, in one line (the report's environment)
        self.device_limits = ""
        if NORM_BACKWARD_NEEDS_CUDA and not device.startswith("cuda"):
            self.device_limits = (
                f"liger-kernel {version('liger-kernel')}: the RMSNorm and LayerNorm backwards need CUDA "
                "(torch.cuda.get_device_properties); their gradients are not declared on this device"
            )
            self.capabilities = {
                op: dataclasses.replace(c, grad=False) if op in ("rms_norm", "layer_norm") else c
                for op, c in self.capabilities.items()
            }
        self.impl = _ops(self)

    @staticmethod
    def dtypes() -> frozenset[str]:
        """bfloat16 only where the kernels are compiled: the interpreter's bfloat16 arithmetic is wrong."""
        return frozenset({"float32", "float16"} if INTERPRETED else {"float32", "float16", "bfloat16"})

    def declared(self) -> Conventions:
        return Conventions(
            rope_layout="half",
            rope_angle_dtype="float32",
            compute_dtype="float32",
            norm_rounding="before_weight",
            unfused=frozenset(
                {
                    "rms_norm.vjp",
                    "swiglu_mlp",
                    "glu_mlp",
                    "mlp",
                    "cross_entropy_mean",
                    "linear_cross_entropy",
                    "z_loss_mean",
                }
            ),
            low_precision_sums=frozenset({"linear_cross_entropy.vjp"}),
            eps_defaults={"rms_norm": DEFAULT_EPS, "layer_norm": DEFAULT_EPS},
            in_place_ops=frozenset(
                {"rope", "cross_entropy", "cross_entropy_mean", "z_loss_mean"} | _GRAD_INTO_COTANGENT
            ),
            grad_in_forward=frozenset({"cross_entropy", "cross_entropy_mean", "linear_cross_entropy"}),
            exp_via_exp2=frozenset(_LOSSES),
            zero_when_all_ignored=frozenset({"linear_cross_entropy", "z_loss_mean"}),
        )

    def declared_capabilities(self) -> dict[str, Capability]:
        dtypes = self.dtypes()
        caps = {op: Capability(dtypes=dtypes) for op in ("rms_norm", "layer_norm", "rope", "swiglu_mlp")}
        caps |= {op: Capability(dtypes=dtypes) for op in ("cross_entropy", "cross_entropy_mean")}
        if HAS_Z_LOSS:
            caps |= {op: Capability(dtypes=dtypes, grad=False) for op in ("z_loss", "softcap_z_loss", "z_loss_mean")}
        caps["linear_cross_entropy"] = Capability(dtypes=dtypes)
        caps["glu_mlp"] = Capability(dtypes=dtypes, values={"activation": frozenset(GLU_PRODUCTS)})
        if ACTIVATIONS:  # squared ReLU, Liger's one plain-MLP kernel, is 0.8's
            caps["mlp"] = Capability(dtypes=dtypes, values={"activation": frozenset(ACTIVATIONS)})
        return caps

    def stored_weight(self, weight: torch.Tensor) -> torch.Tensor:
        """The RMSNorm weight handed to the kernel for the suite's γ."""
        return weight

    def environment(self) -> dict[str, str]:
        env = super().environment()
        env["liger-kernel"] = version("liger-kernel")
        env["triton"] = triton.__version__
        env["triton mode"] = "interpreter (TRITON_INTERPRET=1)" if INTERPRETED else "compiled"
        if self.device_limits:
            env["not on this device"] = self.device_limits
        if BRIDGED:
            env["interpreter bridges"] = compat.describe(BRIDGED)
        return env


class LigerGemmaAdapter(LigerAdapter):
    """``liger-gemma``: RMSNorm in the ``gemma`` casting mode, offset 1 — everything in float32, one
    rounding, the weight stored zero-centred as w = γ − 1 (``LigerRMSNormForGemma``)."""

    name = "liger-gemma"
    casting_mode = "gemma"
    offset = 1.0

    def declared(self) -> Conventions:
        return Conventions(
            compute_dtype="float32",
            norm_rounding="single",
            norm_weight_offset=1.0,
            eps_defaults={"rms_norm": DEFAULT_EPS, "layer_norm": DEFAULT_EPS},
            in_place_ops=frozenset({"rms_norm.vjp"}),
        )

    def declared_capabilities(self) -> dict[str, Capability]:
        return {"rms_norm": Capability(dtypes=self.dtypes())}

    def stored_weight(self, weight: torch.Tensor) -> torch.Tensor:
        # γ − 1 in float32 (exact for 16-bit γ), stored in the dtype under test: a rounding the offset declares
        return (weight.float() - 1.0).to(weight.dtype)


class LigerNoneAdapter(LigerAdapter):
    """``liger-none``: RMSNorm in the ``none`` casting mode — the forward entirely in the input dtype (ε
    and 1/RMS too), the backward in float32 from the stored 1/RMS."""

    name = "liger-none"
    casting_mode = "none"

    def declared(self) -> Conventions:
        return Conventions(
            # the wider of bfloat16 and the input dtype is the input dtype itself, for float32, float16 and
            # bfloat16 alike (precision is what counts): the forward's arithmetic is in the input dtype
            compute_dtype="bfloat16",
            norm_rounding="single",
            eps_defaults={"rms_norm": DEFAULT_EPS, "layer_norm": DEFAULT_EPS},
            in_place_ops=frozenset({"rms_norm.vjp"}),
        )

    def declared_capabilities(self) -> dict[str, Capability]:
        return {"rms_norm": Capability(dtypes=self.dtypes())}

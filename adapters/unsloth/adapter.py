"""Unsloth's Triton kernels (``unsloth.kernels``) as a candidate: the built-in ``unsloth`` adapter.

``import unsloth`` on a machine without a GPU takes its CPU backend (stock transformers, no kernels: "Unsloth
2026.10.9: no GPU found, training on CPU"); ``unsloth.kernels`` itself imports there and its kernels run under
Triton's interpreter, which this module switches on by setting ``TRITON_INTERPRET=1`` before triton is imported
(adapters/triton/env.py, as the ``liger`` adapters do). The kernels are called as Unsloth's patched model code calls
them:

* ``rms_norm`` — ``fast_rms_layernorm(layernorm, X)`` (``Unsloth_LlamaRMSNorm.forward``: the module's ``weight`` and
  ``variance_epsilon``, ``gemma=False``): 1/RMS in float32, x·(1/RMS) cast to the weight's dtype before the weight
  multiply (``norm_rounding="before_weight"``, "Exact copy from HF"); ε defaults to 1e-6, ``LlamaRMSNorm``'s;
* ``layer_norm`` — ``fast_layernorm(layernorm, X)`` on an ``nn.LayerNorm``'s weight, bias and ε (1e-5): float32
  statistics and arithmetic, one rounding;
* ``rope`` — ``fast_rope_embedding(Q, K, cos, sin)`` with Q as ``[batch, heads, T, d]`` and the per-token cos and sin
  Unsloth's ``LlamaRotaryEmbedding`` builds (float32 ``outer(t, inv_freq)``, ``cat(freqs, freqs)``, cos and sin)
  cast to the model dtype as ``LlamaAttention_fast_forward`` casts them: the **half** split, rotated by ``tl.fma``
  in the model dtype (``unfused``). The kernel writes into Q where its ``[batch, T, heads, d]`` view is contiguous
  (one head or one token): ``in_place_ops`` rope. A partial rotary width is rotated as model code does, the first
  ``rotary_dim`` features through the kernel and the rest passed;
* ``cross_entropy_mean`` — ``fast_cross_entropy_loss(logits, labels)`` (``(batch, T, V)``, labels −100 ignored,
  hard-coded: a suite ``ignore_index`` is relabelled −100 as a data collator does), float32 per-token losses summed
  and divided by the count of kept tokens;
* ``swiglu_mlp``, ``glu_mlp`` (silu, gelu_erf, gelu_tanh) — the MLP of Unsloth's LoRA path: the projections as torch
  matmuls in the model dtype around ``swiglu_fg_kernel``, ``geglu_exact_forward_kernel`` or
  ``geglu_approx_forward_kernel`` (each stores in the model dtype: ``unfused``). Forward only: Unsloth's backward
  kernels are fused into ``LoRA_MLP``, which trains the adapters and returns no gradient for the frozen weights.

Interpreter bridges (adapters/triton/interpreter_compat.py): float arguments, libdevice's ``tanh`` (``triton_tanh``),
and ``triton_cast``, Unsloth's alias of ``tl.cast`` held in the kernel modules' globals (the interpreter patches
``triton.language`` only while a kernel runs, so the alias is the unpatched builtin: "Did you forget to add
@triton.jit ?"); it is rebound to a function that looks ``tl.cast`` up when called. The cross-entropy's chunked
path asks ``torch.cuda.current_device()`` for a CPU tensor's device index; the adapter answers 0 during its calls.
unsloth-zoo writes its compile cache (``moe_utils.py``) at import into ``UNSLOTH_COMPILE_LOCATION``, by default a folder
of the working directory: unless set, the adapter sets it to ``unsloth_compiled_cache`` in the temporary directory.
bfloat16 is not declared: the interpreter computes bfloat16 arithmetic on raw 16-bit patterns.

Measured on unsloth 2026.10.9 (unsloth-zoo 2026.10.9), triton 3.9.0 and torch 2.13.0+cpu; other releases are
refused (docs/adapters.md, "unsloth").
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from importlib.metadata import version
from types import SimpleNamespace
from typing import Any
from unittest import mock

import torch

from transformer_conformance.adapters.triton.env import check_device, interpret_triton_without_cuda
from transformer_conformance.adapters.versions import SUPPORTED as SUPPORTED_RELEASES
from transformer_conformance.adapters.versions import Supported, require

#: the releases the adapter's declarations were measured on (adapters/versions.py), refused before Unsloth is imported
SUPPORTED: tuple[Supported, ...] = SUPPORTED_RELEASES["unsloth"]
require("unsloth", SUPPORTED)
interpret_triton_without_cuda()
# unsloth-zoo copies its MoE utilities into UNSLOTH_COMPILE_LOCATION at import, by default ./unsloth_compiled_cache in
# the working directory: the adapter points it at the temporary directory unless the user chose a place
os.environ.setdefault("UNSLOTH_COMPILE_LOCATION", os.path.join(tempfile.gettempdir(), "unsloth_compiled_cache"))

import triton  # noqa: E402
import triton.language as tl  # noqa: E402
import unsloth.kernels.cross_entropy_loss as cross_entropy_module  # noqa: E402
import unsloth.kernels.geglu as geglu_module  # noqa: E402
import unsloth.kernels.rms_layernorm as rms_module  # noqa: E402
from unsloth.kernels import fast_cross_entropy_loss, fast_layernorm, fast_rms_layernorm, fast_rope_embedding  # noqa: E402
from unsloth.kernels.geglu import geglu_approx_forward_kernel, geglu_exact_forward_kernel  # noqa: E402
from unsloth.kernels.swiglu import swiglu_fg_kernel  # noqa: E402

from transformer_conformance.adapters.contract import Capability, Conventions, interpreted  # noqa: E402
from transformer_conformance.adapters.torch.adapter import TorchAdapter  # noqa: E402
from transformer_conformance.adapters.triton import interpreter_compat as compat  # noqa: E402

#: Unsloth's kernels were defined for the interpreter
INTERPRETED = isinstance(rms_module._rms_layernorm_forward, triton.runtime.interpreter.InterpretedFunction)
BRIDGED = compat.apply([cross_entropy_module, geglu_module])


def _triton_cast(x: Any, dtype: Any, fp_downcast_rounding: Any = None, bitcast: bool = False) -> Any:
    """``tl.cast`` looked up when the kernel runs (the interpreter's, then)."""
    return tl.cast(x, dtype, fp_downcast_rounding, bitcast)


if INTERPRETED and getattr(cross_entropy_module, "triton_cast", None) is tl.cast:
    cross_entropy_module.triton_cast = _triton_cast
    BRIDGED.setdefault(cross_entropy_module.__name__, []).append("triton_cast")

#: ``LlamaRMSNorm``'s and ``nn.LayerNorm``'s default ε (Unsloth's kernels read the module's)
RMS_EPS = 1e-6
LAYER_NORM_EPS = 1e-5

#: the GLU kernels for the contract's activations
GLU_KERNELS: dict[str, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = {
    "silu": swiglu_fg_kernel,
    "gelu_erf": geglu_exact_forward_kernel,
    "gelu_tanh": geglu_approx_forward_kernel,
}


def check_version(found: str | None = None) -> None:
    """Refuse, with one line, an Unsloth outside the releases the declarations were measured on."""
    require("unsloth", SUPPORTED[:1], None if found is None else {"unsloth": found})


@contextmanager
def _device_index_zero() -> Iterator[None]:
    """``torch.cuda.current_device()`` answers 0 (a CPU tensor's device has no index; the kernels' tuning tables
    ask CUDA for it)."""
    with mock.patch.object(torch.cuda, "current_device", lambda: 0):
        yield


def _cos_sin(positions: torch.Tensor, rd: int, base: float, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """``LlamaRotaryEmbedding._set_cos_sin_cache``'s rows of ``positions``, cast to the model dtype."""
    inv_freq = 1.0 / (base ** (torch.arange(0, rd, 2, dtype=torch.int64).float() / rd))
    freqs = torch.outer(positions.to(torch.int64).float(), inv_freq)
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos().to(dtype), emb.sin().to(dtype)


class UnslothAdapter(TorchAdapter):
    """The built-in ``unsloth`` adapter."""

    name = "unsloth"
    supported = SUPPORTED

    def __init__(self, device: str = "cpu") -> None:
        check_device(device, INTERPRETED, "Unsloth")
        super().__init__(device, rope_layout="half")
        self.conventions = Conventions(
            rope_layout="half",
            rope_angle_dtype="float32",
            compute_dtype="float32",
            norm_rounding="before_weight",
            unfused=frozenset({"rope", "swiglu_mlp", "glu_mlp"}),
            eps_defaults={"rms_norm": RMS_EPS, "layer_norm": LAYER_NORM_EPS},
            in_place_ops=frozenset({"rope"}),
        )
        dtypes = frozenset({"float32", "float16"} if INTERPRETED else {"float32", "float16", "bfloat16"})
        caps = {op: Capability(dtypes=dtypes) for op in ("rms_norm", "layer_norm", "rope", "cross_entropy_mean")}
        caps["swiglu_mlp"] = Capability(dtypes=dtypes, grad=False)
        caps["glu_mlp"] = Capability(dtypes=dtypes, grad=False, values={"activation": frozenset(GLU_KERNELS)})
        self.capabilities = interpreted(caps) if INTERPRETED and not device.startswith("cuda") else caps
        self.impl = {
            "rms_norm": self.rms_norm,
            "layer_norm": self.layer_norm,
            "rope": self.rope,
            "cross_entropy_mean": self.cross_entropy_mean,
            "swiglu_mlp": self.swiglu_mlp,
            "glu_mlp": self.glu_mlp,
        }

    def environment(self) -> dict[str, str]:
        env = super().environment()
        env["unsloth"] = version("unsloth")
        env["unsloth-zoo"] = version("unsloth_zoo")
        env["triton"] = triton.__version__
        env["triton mode"] = "interpreter (TRITON_INTERPRET=1)" if INTERPRETED else "compiled"
        if BRIDGED:
            names = ", ".join(sorted({n for key, done in BRIDGED.items() if key != "language" for n in done}))
            env["interpreter bridges"] = "; ".join(["float arguments", names, *BRIDGED.get("language", [])])
        return env

    # ------------------------------------------------------------------------------------------ ops

    def rms_norm(self, x: torch.Tensor, weight: torch.Tensor, eps: float | None = None) -> torch.Tensor:
        module = SimpleNamespace(weight=weight, variance_epsilon=RMS_EPS if eps is None else float(eps))
        return fast_rms_layernorm(module, x)

    def layer_norm(
        self, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float | None = None
    ) -> torch.Tensor:
        eps = LAYER_NORM_EPS if eps is None else float(eps)
        return fast_layernorm(SimpleNamespace(elementwise_affine=True, weight=weight, bias=bias, eps=eps), x)

    def rope(
        self, x: torch.Tensor, positions: torch.Tensor, base: float = 10000.0, rotary_dim: int | None = None
    ) -> torch.Tensor:
        t, d = x.shape[-2:]
        rd = d if rotary_dim is None else int(rotary_dim)
        cos, sin = _cos_sin(positions, rd, float(base), x.dtype)
        q = x.reshape(1, -1, t, d)  # [batch, heads, T, d]
        if rd < d:
            q_rot = q[..., :rd].contiguous()
            k = torch.zeros((1, 1, t, rd), dtype=x.dtype, device=x.device)
            q_out, _ = fast_rope_embedding(q_rot, k, cos, sin)
            return torch.cat((q_out, q[..., rd:]), dim=-1).reshape(x.shape)
        k = torch.zeros((1, 1, t, d), dtype=x.dtype, device=x.device)  # the kernel rotates Q and K together
        q_out, _ = fast_rope_embedding(q, k, cos, sin)
        return q_out.reshape(x.shape)

    def cross_entropy_mean(self, logits: torch.Tensor, targets: torch.Tensor, ignore_index: int = -100) -> torch.Tensor:
        labels = torch.where(targets == ignore_index, torch.full_like(targets, -100), targets)
        with _device_index_zero():
            loss = fast_cross_entropy_loss(logits[None], labels[None])
        return loss.to(logits.dtype)

    def swiglu_mlp(self, x: torch.Tensor, w1: torch.Tensor, w3: torch.Tensor, w2: torch.Tensor) -> torch.Tensor:
        return self.glu_mlp(x, w1, w3, w2, "silu")

    def glu_mlp(
        self, x: torch.Tensor, w1: torch.Tensor, w3: torch.Tensor, w2: torch.Tensor, activation: str = "silu"
    ) -> torch.Tensor:
        if activation not in GLU_KERNELS:
            raise NotImplementedError(f"Unsloth has no GLU kernel for {activation!r}")
        shape = x.shape
        e, g = x.reshape(1, -1, shape[-1]) @ w1, x.reshape(1, -1, shape[-1]) @ w3  # the kernels take (b, T, h)
        return (GLU_KERNELS[activation](e, g) @ w2).reshape(*shape[:-1], w2.shape[-1])

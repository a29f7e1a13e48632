"""Apple's Cut Cross-Entropy (``cut_cross_entropy.linear_cross_entropy``) as a candidate for the contract's
``linear_cross_entropy``, the LM head fused with its loss, as its users call it (default ``filter_eps="high"``):

* ``cce`` — ``impl="cce"``, its Triton kernels: the log-sum-exp over vocabulary blocks, the target logit as an
  indexed dot product, and a backward that recomputes each block of logits and skips the blocks whose every
  gradient is below ``filter_eps``. Without CUDA the kernels run under Triton's interpreter, switched on as for
  Liger-Kernel (``TRITON_INTERPRET=1`` before triton is imported; adapters/liger/adapter.py), with the interpreter
  bridges of adapters/triton/interpreter_compat.py (the kernels call ``libdevice.log1p``, an empty stub there, and
  reduce with a combine function of their own, which the interpreter would call once per element).
* ``cce-torch-compile`` — ``impl="torch_compile"``: ``torch.compile(fullgraph=True, dynamic=True)`` of the
  logits ``e @ c.T`` and ``F.cross_entropy`` of their float32 copy, after the ignored tokens are dropped.

**The bias.** Cut Cross-Entropy's classifier has no bias. The contract's bias enters as one more column of the
classifier against a constant-1 feature, ``e = [x, 1]``, ``c = [W, b]``: the logits x·Wᵀ + b are the same dot
products, each rounded once, and ∂b is the classifier gradient's last column (a library call of width H + 1).

Declared, from cut-cross-entropy 25.1.1's source and measured (docs/adapters.md, "cce"):

* Its backward refuses float32 embeddings ("Backwards requires embeddings to be bf16 or fp16"), and a
  capability's gradient is declared per operation, so ``cce`` declares float16, and bfloat16 only where the
  kernels are compiled (the interpreter's bfloat16 arithmetic is wrong: adapters/liger/adapter.py).
  ``cce-torch-compile`` declares every dtype.
* ``cce``: the forward accumulates the logits in float32 (``tl.dot``) and keeps the log-sum-exp, the loss and its
  mean in float32, rounded once. The backward rounds each block's ∂logits·g to the input dtype before the
  products with c and e (``unfused`` ``linear_cross_entropy.vjp``) and adds the blocks' float32 products into
  ∂e and ∂c held in the input dtype (``low_precision_sums`` ``linear_cross_entropy.vjp``). Compiled, the adds
  are taken under locks in whatever order the blocks finish, so repeated calls may differ in the last bits
  (``nondeterministic``), and ``tl.exp`` is the hardware's exp2 (``exp_via_exp2``): both from the source,
  declared only where the kernels are compiled (not measured: no device here).
* ``cce-torch-compile``: the logits are rounded to the input dtype before the float32 cross-entropy, and their
  gradient before the matmuls (``unfused`` ``linear_cross_entropy``).
* Both average over the valid tokens only (0/0, NaN, when every token is ignored).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from importlib.metadata import version

import numpy as np
import torch

from transformer_conformance.adapters.versions import SUPPORTED, require

# the releases the cce adapters support (adapters/versions.py), refused before the library is imported
require("cce", SUPPORTED["cce"])

#: Triton was imported before this module without the interpreter: too late to interpret the kernels
_IMPORTED_COMPILED = (
    any(m in sys.modules for m in ("triton", "cut_cross_entropy")) and os.environ.get("TRITON_INTERPRET") != "1"
)
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")  # before triton's import (adapters/liger/adapter.py)

import cut_cross_entropy.cce_lse_forward  # noqa: E402
import cut_cross_entropy.tl_utils  # noqa: E402
import triton  # noqa: E402
from cut_cross_entropy import linear_cross_entropy as cce_linear_cross_entropy  # noqa: E402

from transformer_conformance.adapters.contract import Capability, Conventions  # noqa: E402
from transformer_conformance.adapters.torch.adapter import TorchAdapter  # noqa: E402
from transformer_conformance.adapters.triton import interpreter_compat as compat  # noqa: E402
from transformer_conformance.adapters.triton.env import check_device  # noqa: E402

#: the kernels were defined for the interpreter (no CUDA, or TRITON_INTERPRET=1 set by the user)
INTERPRETED = not _IMPORTED_COMPILED and isinstance(
    cut_cross_entropy.cce_lse_forward._cce_lse_forward_kernel.fn.fn, triton.runtime.interpreter.InterpretedFunction
)
#: its backward's "is every gradient of this block below filter_eps" is a reduction with a & b, which the interpreter
#: would run element by element in Python (adapters/triton/interpreter_compat.py): a bitwise AND of booleans
BRIDGED = compat.apply(
    [cut_cross_entropy.tl_utils], reductions={cut_cross_entropy.tl_utils.tl_and_reduce_fn: np.bitwise_and}
)

OP = "linear_cross_entropy"


def with_bias_column(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """e = [x, 1] (N, H + 1) and c = [W, b] (V, H + 1): e·cᵀ = x·Wᵀ + b, the bias as a classifier column."""
    ones = torch.ones((*x.shape[:-1], 1), dtype=x.dtype, device=x.device)
    return torch.cat((x, ones), dim=-1), torch.cat((weight, bias[:, None].to(weight.dtype)), dim=-1)


def _op(impl: str) -> Callable[..., torch.Tensor]:
    def linear_cross_entropy(
        x: torch.Tensor,
        weight: torch.Tensor,
        bias: torch.Tensor,
        targets: torch.Tensor,
        ignore_index: int = -100,
        reduction: str = "mean",
    ) -> torch.Tensor:
        e, c = with_bias_column(x, weight, bias)
        loss = cce_linear_cross_entropy(e, c, targets, ignore_index=ignore_index, reduction=reduction, impl=impl)
        return loss.to(x.dtype)  # the library's losses are float32

    return linear_cross_entropy


def _check_device(device: str) -> None:
    check_device(device, INTERPRETED, "Cut Cross-Entropy")


class CCEAdapter(TorchAdapter):
    """The built-in ``cce`` adapter: ``linear_cross_entropy(..., impl="cce")``, Cut Cross-Entropy's kernels."""

    name = "cce"
    impl_name = "cce"
    #: the releases it supports (adapters/versions.py; docs/adapters.md)
    supported = SUPPORTED["cce"]

    def __init__(self, device: str = "cpu") -> None:
        self.check_device(device)
        super().__init__(device)
        self.conventions = self.declared()
        # under Triton's interpreter every program of a kernel's grid runs in Python: each size regime runs once
        self.capabilities = {OP: Capability(dtypes=self.dtypes(), interpreted=not self.compiled())}
        self.impl = {OP: _op(self.impl_name)}

    def check_device(self, device: str) -> None:
        _check_device(device)

    def compiled(self) -> bool:
        return self.device.startswith("cuda")

    def dtypes(self) -> frozenset[str]:
        """float16, and bfloat16 where compiled: the backward refuses float32 embeddings."""
        return frozenset({"float16", "bfloat16"} if self.compiled() else {"float16"})

    def declared(self) -> Conventions:
        compiled = frozenset({OP, f"{OP}.vjp"}) if self.compiled() else frozenset()
        return Conventions(
            compute_dtype="float32",
            unfused=frozenset({f"{OP}.vjp"}),
            low_precision_sums=frozenset({f"{OP}.vjp"}),
            exp_via_exp2=compiled,
            nondeterministic=frozenset({f"{OP}.vjp"}) if self.compiled() else frozenset(),
        )

    def environment(self) -> dict[str, str]:
        env = super().environment()
        env["cut-cross-entropy"] = version("cut-cross-entropy")
        env["impl"] = self.impl_name
        env["triton"] = triton.__version__
        if self.impl_name == "cce":
            env["triton mode"] = "compiled" if self.compiled() else "interpreter (TRITON_INTERPRET=1)"
            if BRIDGED and not self.compiled():
                env["interpreter bridges"] = compat.describe(BRIDGED)
        return env


class CCETorchCompileAdapter(CCEAdapter):
    """``cce-torch-compile``: ``linear_cross_entropy(..., impl="torch_compile")``, its torch.compile path."""

    name = "cce-torch-compile"
    impl_name = "torch_compile"

    def __init__(self, device: str = "cpu") -> None:
        super().__init__(device)
        # the library compiles with fullgraph=True, so dynamo's recompile limit (8 by default, per code object) is a
        # hard failure; a run meets more (dtype, reduction, shape) combinations than a training job does: as the
        # torch-compile adapters do, the limits are raised (its graphs are the library's; only their number grows)
        torch._dynamo.config.cache_size_limit = max(torch._dynamo.config.cache_size_limit, 256)
        torch._dynamo.config.accumulated_cache_size_limit = max(torch._dynamo.config.accumulated_cache_size_limit, 4096)
        # a graph per dtype, reduction and shape pattern: the checks draw shapes from the plan
        self.capabilities = {OP: Capability(dtypes=self.dtypes(), compiles="per_shape")}

    def compiles(self) -> int:
        """The graphs dynamo has compiled in this process (its ``unique_graphs`` counter): the report's count."""
        return int(torch._dynamo.utils.counters["stats"]["unique_graphs"])

    def check_device(self, device: str) -> None:
        if device.startswith("cuda") and not torch.cuda.is_available():
            raise RuntimeError("device 'cuda' requested but torch.cuda.is_available() is False")

    def dtypes(self) -> frozenset[str]:
        return frozenset({"float32", "bfloat16", "float16"})

    def declared(self) -> Conventions:
        return Conventions(compute_dtype="float32", unfused=frozenset({OP}))

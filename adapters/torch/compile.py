"""PyTorch through ``torch.compile``: the torch adapter's implementations compiled by inductor.

Inductor fuses the element-wise work into generated C++ (CPU) or Triton (GPU) kernels. Every call of a
contract operation runs compiled code; nothing is routed to eager. Compiling is what a run of this adapter
spends its time on (about 3 s of dynamo tracing, AOTAutograd and a C++ compile per graph on a 2-core
machine), and Hypothesis varies shapes and parameters from one example to the next, so the adapter keeps
the number of graphs small (docs/adapters.md, "torch-compile", has the measured figures):

* **Sizes are symbols.** Each operation is compiled with ``dynamic=True``, and for the operations in
  :data:`UNBACKED_OPS` every dimension of every input is also marked unbacked
  (``torch._dynamo.mark_unbacked``): ``dynamic=True`` alone specialises sizes 0 and 1, so an operation
  with k dimensions that Hypothesis sets to 1 compiles up to 2^k graphs per dtype; unbacked sizes carry
  no such guard and one graph serves every shape of a rank. The other operations (matrix products,
  attention, blocks, the learned table's range check, the scaled RoPE's position-dependent frequencies)
  do not compile with unbacked sizes on torch 2.13 (inductor's lowering guards on a size, or the code
  branches on a value) and keep ``dynamic=True`` with its 0/1 specialisation. Before torch 2.13
  (:data:`UNBACKED_SIZES`) no operation is marked: 2.4 has no ``mark_unbacked`` and 2.5's inductor guards on
  an unbacked size (``torch.arange(0, rd, 2)`` in RoPE), so every operation keeps backed sizes there and its
  checks draw their shapes from the plan (the release matrix, docs/adapters.md "Measured releases").
* **Forward and VJP share a graph.** ``forward`` runs with autograd recording, so AOTAutograd compiles
  one joint graph and partitions it into a forward and a backward; ``forward`` returns the forward
  graph's output and ``vjp`` runs the same forward graph, then the backward. A forward under
  ``torch.no_grad`` would compile a third, inference-only graph: that graph is not what this adapter
  checks (its numerics are inductor's in both cases; the saved activations differ).
* **A failed compile is not tried again.** Dynamo and inductor keep no record of a compile that raised: every later
  call of the same signature (operation, shapes and dtypes of the inputs, parameters) traced and compiled it again
  to fail the same way, seconds a call, through every example, shrink and integrity re-call that met it (two
  compiler defects made 40 % of a cold ``torch-compile-full`` run). The adapter keeps each such failure of its
  process by signature and raises it again for that signature without compiling. Only failures raised while
  compiling are kept (their traceback passes through dynamo's frame conversion or inductor's ``compile_fx``, or
  they are a ``BackendCompilerFailed``), and they depend on nothing a signature leaves out: compiling sees the
  inputs' shapes and dtypes and the parameters, never the values. An error raised while the compiled code runs
  is raised by each call as it happens.
* **Compiled graphs persist.** Inductor's FX graph cache and AOTAutograd cache are on (torch's
  defaults), in ``TORCHINDUCTOR_CACHE_DIR`` (default: a ``torchinductor_$USER`` directory under the
  system's temporary directory), shared by the pytest-xdist workers and by later runs: a second run
  skips the C++ compiles and most of the lowering.

What still compiles anew is each dtype, rank, and value of a parameter that the code branches on or that
an operator takes as a Python number (``eps`` of ``F.rms_norm``, ``causal``, ``softcap``, the RoPE base
and rotary width, the activation's name). So the operations compiled with backed sizes are declared
``compiles="per_value"``: their checks draw each planned shape with the structural values its row states
(conformance/strategies/plan.py), one graph per row and dtype rather than one per combination drawn. Two operations
compiled with unbacked sizes still build a graph per value (:data:`PLANNED_UNBACKED`): ALiBi per head count (its
slopes are Python numbers computed from it), declared ``compiles="per_shape"``, its checks, the slopes check
included, drawing the planned head counts; and RoPE per base and rotary width, declared ``compiles="per_value"``.
"""

from __future__ import annotations

import dataclasses
import traceback
from collections.abc import Callable, Mapping
from types import TracebackType
from typing import Any, TypeVar

import numpy as np
import torch

from transformer_conformance.adapters.contract import OPS, Compiles
from transformer_conformance.adapters.torch.adapter import TorchAdapter
from transformer_conformance.adapters.torch.tensors import backward_grads, to_numpy
from transformer_conformance.adapters.versions import release

#: the operations of :data:`UNBACKED_OPS` are compiled with unbacked sizes from torch 2.13, the first release
#: measured to compile them so (2.4.0 lacks ``mark_unbacked``; 2.5.1's inductor fails on them: release matrix)
UNBACKED_SIZES = release(torch.__version__) >= (2, 13)

#: Operations compiled with unbacked sizes (no 0/1 specialisation); measured to compile and pass so on
#: torch 2.13 CPU. The rest keep ``dynamic=True``'s backed sizes.
UNBACKED_OPS = frozenset(
    {
        "rms_norm",
        "layer_norm",
        "rope",
        "cross_entropy",
        "cross_entropy_mean",
        "z_loss",
        "softcap_z_loss",
        "sinusoidal_positions",
        "alibi",
    }
)


#: the files of the compiler's compile steps: a failure raised through one was raised while compiling (dynamo's frame
#: conversion: tracing, guards, the backend; inductor's compile_fx: the forward's and the lazily compiled backward's)
COMPILE_STEPS = ("torch/_dynamo/convert_frame.py", "torch/_inductor/compile_fx.py")

T = TypeVar("T")

#: A call's signature as the compiler sees it: the call (forward or VJP), the operation, each input's name, shape and
#: dtype, and the parameters.
Signature = tuple[str, str, tuple[tuple[str, tuple[int, ...], str], ...], str]


def signature(kind: str, op: str, inputs: Mapping[str, np.ndarray], params: Mapping[str, Any]) -> Signature:
    arrays = tuple((name, tuple(np.shape(v)), np.asarray(v).dtype.str) for name, v in sorted(inputs.items()))
    return (kind, op, arrays, repr(sorted(params.items())))


def raised_compiling(error: BaseException) -> bool:
    """Whether ``error`` was raised while compiling (not while the compiled code ran)."""
    if isinstance(error, torch._dynamo.exc.BackendCompilerFailed):
        return True
    files = (frame.filename.replace("\\", "/") for frame in traceback.extract_tb(error.__traceback__))
    return any(f.endswith(step) for f in files for step in COMPILE_STEPS)


#: the integer rules: plain Python, nothing compiled
INTEGER_RULES = frozenset({"swiglu_hidden_dim", "param_count", "ffn_hidden_dim"})

#: Operations of :data:`UNBACKED_OPS` that still build a graph per value, and the plan their checks draw from. ALiBi:
#: a graph per head count, as its slopes are Python numbers computed from it (21 a dtype over the free draws of a
#: ``ci`` run, every head count of the slopes check's): "per_shape". RoPE: a graph per base (dynamo specialises the
#: Python float) and per rotary width None, 2 or wider (9–12 a dtype): "per_value", each planned shape with its base
PLANNED_UNBACKED: dict[str, Compiles] = {"alibi": "per_shape", "rope": "per_value"}


def _compiles(op: str) -> Compiles:
    """An operation compiled with unbacked sizes is one graph per rank and dtype ("no" plan), unless it still builds
    one per value (:data:`PLANNED_UNBACKED`); any other one a graph per shape (backed sizes) and per value of a
    structural parameter dynamo guards on (causal, a soft-cap or scale of None or not, an ε, the code's branches):
    "per_value", its checks draw both from the plan."""
    if op in INTEGER_RULES:
        return "no"
    if UNBACKED_SIZES and op in UNBACKED_OPS:
        return PLANNED_UNBACKED.get(op, "no")
    return "per_value"


class TorchCompileAdapter(TorchAdapter):
    """The built-in ``torch-compile`` adapter: the operations that compile to one graph per rank and dtype
    (:data:`UNBACKED_OPS`: the norms, RoPE, the losses, sinusoidal and ALiBi positions). The others are not
    declared, so they are reported unsupported, never passed: each of their shapes compiles anew, and a
    run of every operation takes far longer than a gate can wait (``torch-compile-full`` has them all)."""

    name = "torch-compile"
    #: the operations this adapter compiles and declares
    compiled_ops: frozenset[str] = UNBACKED_OPS

    def __init__(self, device: str = "cpu", rope_layout: str = "half") -> None:
        super().__init__(device, rope_layout)
        # generous cache limits: a run meets many (rank, dtype, parameter) combinations per operation
        torch._dynamo.config.cache_size_limit = max(torch._dynamo.config.cache_size_limit, 256)
        torch._dynamo.config.accumulated_cache_size_limit = max(torch._dynamo.config.accumulated_cache_size_limit, 4096)
        # the autocast mode is not declared: dynamo guards on the autocast state and compiles every graph again
        # under it, too long for a CPU gate (docs/adapters.md, "torch-compile")
        # an operation compiled with backed sizes builds a graph per shape (0/1 specialisation, sizes a lowering guards
        # on): its checks draw their shapes from the plan (conformance/strategies/plan.py)
        self.capabilities = {
            op: dataclasses.replace(c, autocast=frozenset(), compiles=_compiles(op))
            for op, c in self.capabilities.items()
            if op in self.compiled_ops
        }
        self.impl = {op: torch.compile(fn, dynamic=True) for op, fn in self.impl.items() if op in self.compiled_ops}
        #: the compile failures of this process by signature, each with its traceback and notes (module docstring)
        self._failed: dict[Signature, tuple[BaseException, TracebackType | None, list[str] | None]] = {}

    def _once(self, keys: tuple[Signature, ...], run: Callable[[], T]) -> T:
        """``run()``, unless a signature of ``keys`` failed to compile before: then that failure again. A failure
        ``run`` raises while compiling is kept under the last key (the forward's signature fails the VJP too). It is
        raised again with the notes it had when kept: Hypothesis adds its falsifying example to a failure's notes, and
        the report reads a check's counterexample from them, so an earlier check's must not come along."""
        for key in keys:
            if key in self._failed:
                error, tb, notes = self._failed[key]
                if notes is not None:
                    error.__notes__ = list(notes)
                elif hasattr(error, "__notes__"):
                    del error.__notes__
                raise error.with_traceback(tb)
        try:
            return run()
        except Exception as error:
            if raised_compiling(error):
                notes = getattr(error, "__notes__", None)
                self._failed[keys[-1]] = (error, error.__traceback__, None if notes is None else list(notes))
            raise

    def compiles(self) -> int:
        """The graphs dynamo has compiled in this process (its ``unique_graphs`` counter): the report's count."""
        return int(torch._dynamo.utils.counters["stats"]["unique_graphs"])

    def environment(self) -> dict[str, str]:
        env = super().environment()
        env["compiler"] = "inductor (dynamic shapes; forward = the joint graph's forward)"
        env["unbacked sizes"] = ", ".join(sorted(UNBACKED_OPS)) if UNBACKED_SIZES else "none (torch < 2.13)"
        return env

    def _call(
        self, op: str, inputs: Mapping[str, np.ndarray], params: Mapping[str, Any], grad: bool
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        tensors = self._tensors(op, inputs, grad)
        if UNBACKED_SIZES and op in UNBACKED_OPS:
            for t in tensors.values():
                for dim in range(t.dim()):
                    torch._dynamo.decorators.mark_unbacked(t, dim)
        out = self.impl[op](**tensors, **params)
        return out, tensors

    def forward(self, op: str, inputs: Mapping[str, np.ndarray], params: Mapping[str, Any]) -> np.ndarray:
        if op in INTEGER_RULES:  # nothing to compile
            return super().forward(op, inputs, params)
        # with autograd recording: the forward graph of the joint graph the VJP also runs (module docstring)
        out, _ = self._once((signature("forward", op, inputs, params),), lambda: self._call(op, inputs, params, True))
        return to_numpy(out)

    def vjp(
        self, op: str, inputs: Mapping[str, np.ndarray], params: Mapping[str, Any], cotangent: np.ndarray
    ) -> dict[str, np.ndarray]:
        forward = signature("forward", op, inputs, params)
        out, tensors = self._once((forward,), lambda: self._call(op, inputs, params, True))
        return self._once(
            (forward, signature("vjp", op, inputs, params)),
            lambda: backward_grads(op, inputs, out, tensors, cotangent, self.device),
        )


class TorchCompileFullAdapter(TorchCompileAdapter):
    """The built-in ``torch-compile-full`` adapter: every operation of the torch adapter compiled, the
    attention, MLP and block operations included (each new shape of those compiles a graph of its own:
    a run takes hours on a 2-core CPU, minutes on a GPU)."""

    name = "torch-compile-full"
    compiled_ops = frozenset(OPS)

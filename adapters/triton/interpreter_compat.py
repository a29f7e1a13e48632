"""Two bridges over gaps of Triton's interpreter (``TRITON_INTERPRET=1``), the CPU fallback that runs a
Triton kernel as NumPy code; used by the ``liger`` adapters on a machine without a GPU, never on a GPU.

Measured on triton 3.9.0 (tests/test_triton_interpreter_compat.py tells when each stops being needed):

* **float arguments** — a compiled kernel receives a Python float argument as a float32 scalar (its
  signature type is ``fp32``); the interpreter passes the float through unwrapped, so a kernel that calls
  ``eps.to(tl.float32)`` fails with ``'float' object has no attribute 'to'``. ``wrap_float_arguments``
  makes the interpreter wrap a float as the float32 scalar a compiled kernel would see.
* **libdevice** — ``triton.language.extra.libdevice``'s functions are empty stubs that the compiler
  resolves to the backend's device library; the interpreter never does, so ``rsqrt(x)`` or ``tanh(x)``
  returns None. ``bridge_libdevice`` rebinds, in a kernel module's globals, the stubs it imported to
  NumPy-backed equivalents looked up when the kernel runs (the interpreter patches ``triton.language.math``
  only while a kernel runs, so the lookup must be late). A module that imported libdevice itself
  (``from triton.language.extra import libdevice as tl_libdevice``, as Cut Cross-Entropy's kernels do) gets a
  stand-in for it: the bridged functions, and libdevice's own stubs for the rest.

Nothing here changes a kernel's arithmetic beyond what the interpreter does anyway: float32 NumPy.
"""

from __future__ import annotations

import types
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np
import triton
import triton.language as tl
from triton.runtime import interpreter

#: the interpreter's own conversion of kernel arguments, before any bridge
UPSTREAM_IMPLICIT_CVT: Callable[[Any], Any] = getattr(
    interpreter._implicit_cvt, "__wrapped_upstream__", interpreter._implicit_cvt
)

LIBDEVICE_MODULE = "triton.language.extra.libdevice"


def interpreting() -> bool:
    """True when Triton kernels decorated now are interpreted (``TRITON_INTERPRET=1``)."""
    return bool(triton.knobs.runtime.interpret)


def _implicit_cvt_with_floats(arg: Any) -> Any:
    if isinstance(arg, float):
        ty = tl.str_to_ty(triton.runtime.jit.mangle_type(arg), None)  # "fp32", as a compiled kernel specialises it
        return tl.tensor(interpreter.TensorHandle(np.array([arg], dtype=np.float32), ty), ty)
    return UPSTREAM_IMPLICIT_CVT(arg)


_implicit_cvt_with_floats.__wrapped_upstream__ = UPSTREAM_IMPLICIT_CVT  # type: ignore[attr-defined]


def wrap_float_arguments() -> None:
    """Make the interpreter pass Python float kernel arguments as float32 scalars (idempotent)."""
    interpreter._implicit_cvt = _implicit_cvt_with_floats


def _rsqrt(x: Any) -> Any:
    return tl.math.rsqrt(x)  # resolved while the kernel runs: the interpreter's own rsqrt


def _numpy_unary(fn: Callable[[np.ndarray], np.ndarray]) -> Callable[[Any], Any]:
    def apply(x: Any) -> Any:
        return tl.tensor(interpreter.interpreter_builder.unary_op(x.handle, fn), x.type)

    return apply


#: libdevice function name -> an interpreter implementation (the ones Liger-Kernel's and Cut Cross-Entropy's
#: kernels use)
LIBDEVICE_BRIDGES: dict[str, Callable[[Any], Any]] = {
    "rsqrt": _rsqrt,
    "tanh": _numpy_unary(np.tanh),
    "log1p": _numpy_unary(np.log1p),
}


def is_libdevice_stub(obj: object) -> bool:
    return isinstance(obj, types.FunctionType) and obj.__module__ == LIBDEVICE_MODULE


class BridgedLibdevice(types.SimpleNamespace):
    """Stands in for the libdevice module in a kernel module's globals: its functions with a bridge are the
    bridges, the others libdevice's own stubs (a kernel that calls one still fails, visibly)."""

    def __init__(self, libdevice: types.ModuleType) -> None:
        super().__init__(**LIBDEVICE_BRIDGES)
        self._libdevice = libdevice

    def __getattr__(self, name: str) -> Any:  # only for names without a bridge
        return getattr(self._libdevice, name)


def bridge_libdevice(module: types.ModuleType) -> list[str]:
    """Rebind the libdevice stubs ``module`` imported into its globals, and the libdevice module itself where
    it imported that; return the names rebound. A stub without a bridge is left alone (a kernel that calls it
    still fails, visibly)."""
    done = []
    for name, obj in list(vars(module).items()):
        if is_libdevice_stub(obj) and obj.__name__ in LIBDEVICE_BRIDGES:
            setattr(module, name, LIBDEVICE_BRIDGES[obj.__name__])
            done.append(name)
        elif isinstance(obj, types.ModuleType) and obj.__name__ == LIBDEVICE_MODULE:
            setattr(module, name, BridgedLibdevice(obj))
            done.extend(f"{name}.{fn}" for fn in LIBDEVICE_BRIDGES)
    return done


def apply(modules: Iterable[types.ModuleType]) -> dict[str, list[str]]:
    """Both bridges, for the kernels of ``modules``; only when kernels are interpreted. Returns what was
    rebound per module (empty when not interpreting)."""
    if not interpreting():
        return {}
    wrap_float_arguments()
    return {m.__name__: bridge_libdevice(m) for m in modules}

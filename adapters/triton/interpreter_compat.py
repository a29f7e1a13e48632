"""Bridges over gaps and slow paths of Triton's interpreter (``TRITON_INTERPRET=1``), the CPU fallback that runs
a Triton kernel as NumPy code; used by the ``liger``, ``cce``, ``fla`` and ``unsloth`` adapters on a machine
without a GPU, never on a GPU.

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
* **reductions with a combine function of the kernel's own** — the interpreter reduces ``tl.reduce(x, axis,
  fn)`` with NumPy where ``fn`` is one of Triton's (sum, max, min, argmax, argmin), and otherwise element by
  element, calling ``fn`` once per element in Python: Cut Cross-Entropy's backward asks, for each block of
  128 × 128 logits, whether all of its gradients are below ``filter_eps`` with ``tl.reduce(.., None, a & b)``,
  16,384 Python calls a block, 97 % of its interpreted run time. ``vectorise_reductions`` gives the
  interpreter such a combine function's NumPy equivalent (a ufunc reduce: only exact, order-free ones, bitwise
  AND, OR, XOR of booleans and integers), used only for a single boolean or integer input.

* **device functions patch the language again** — a launch patches ``triton.language`` (its builtins, the tensor
  class, ``tl.math``) to interpreted versions for its run, and every call of a ``@triton.jit`` device function
  inside it patches them again (``inspect.getmembers`` over each module), although they already are: a third of a
  Liger LayerNorm program's interpreted time. ``patch_language_once`` skips a device function's patching when every
  language module it sees was patched earlier in the same launch (those patches last at least until the launch
  ends), and calls the interpreter's own otherwise; the launch's own patch and its undoing are untouched.

Nothing here changes a kernel's arithmetic beyond what the interpreter does anyway: float32 NumPy, and a
bitwise reduction whose result does not depend on the order of its operands.
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


#: the reductions whose result does not depend on the order of the operands, the only ones a combine function may
#: be vectorised to (a float sum's result does: there the interpreter's element-by-element order is the kernel's)
EXACT_UFUNCS = (np.bitwise_and, np.bitwise_or, np.bitwise_xor)

#: combine function (the ``triton.jit`` object a kernel passes to ``tl.reduce``) -> the ufunc that reduces as it does
VECTORISED: dict[object, np.ufunc] = {}


def _upstream(owner: Any, name: str) -> Any:
    """``owner.name`` before any bridge; None where this Triton's interpreter has no such thing (its internals
    change between releases: a bridge whose target is missing is not applied, and not reported)."""
    current = getattr(owner, name, None)
    return getattr(current, "__wrapped_upstream__", current)


#: the interpreter's own reduction, before any bridge
UPSTREAM_REDUCE: Callable[..., Any] | None = _upstream(getattr(interpreter, "ReduceOps", None), "apply_impl")


def _reduce_vectorised(self: Any, input: tuple[Any, ...]) -> Any:
    ufunc = VECTORISED.get(self.combine_fn)
    if ufunc is not None and len(input) == 1 and input[0].handle.data.dtype.kind in "biu":
        data = input[0].handle.data
        return [self.to_tensor(ufunc.reduce(data, axis=self.axis, keepdims=self.keep_dims), input[0].dtype)]
    assert UPSTREAM_REDUCE is not None  # installed only where the interpreter has it
    return UPSTREAM_REDUCE(self, input)


_reduce_vectorised.__wrapped_upstream__ = UPSTREAM_REDUCE  # type: ignore[attr-defined]


def vectorise_reductions(combine: dict[object, np.ufunc]) -> list[str]:
    """Let the interpreter reduce with each combine function of ``combine`` as its ufunc does, in one NumPy call
    (idempotent); returns the functions' names, none where this interpreter has no reduction to bridge. Refuses a
    ufunc whose reduction depends on the order."""
    for fn, ufunc in combine.items():
        if ufunc not in EXACT_UFUNCS:
            raise ValueError(f"{ufunc.__name__} is not an order-free bitwise reduction; {fn!r} stays element-wise")
    if UPSTREAM_REDUCE is None:
        return []
    VECTORISED.update(combine)
    interpreter.ReduceOps.apply_impl = _reduce_vectorised
    return sorted(f"{getattr(fn, '__name__', fn)} ({ufunc.__name__})" for fn, ufunc in combine.items())


#: how an adapter's environment names the language bridge
ONCE_A_LAUNCH = "language patched once a launch"

#: the interpreter's own patching of the language and its own launch, before any bridge
UPSTREAM_PATCH_LANG: Callable[[Any], Any] | None = _upstream(interpreter, "_patch_lang")
UPSTREAM_LAUNCH: Callable[..., Any] | None = _upstream(getattr(interpreter, "GridExecutor", None), "__call__")

#: per launch running now: the language modules patched since it began (its own patch comes first, before any
#: program runs; a device function's patch is never undone before the launch's own undoing)
_LAUNCHES: list[set[int]] = []


def _language_modules(fn: Any) -> set[int]:
    """The language modules a kernel or device function sees, as the interpreter finds them (by identity)."""
    return {id(v) for v in fn.__globals__.values() if isinstance(v, types.ModuleType) and v in (tl, tl.core)}


def _launch(self: Any, *args: Any, **kwargs: Any) -> Any:
    assert UPSTREAM_LAUNCH is not None  # installed only where the interpreter has it
    _LAUNCHES.append(set())
    try:
        return UPSTREAM_LAUNCH(self, *args, **kwargs)
    finally:
        _LAUNCHES.pop()


def _patch_lang_once(fn: Any) -> Any:
    langs = _language_modules(fn)
    if _LAUNCHES and langs and langs <= _LAUNCHES[-1]:
        return interpreter._LangPatchScope()  # patched earlier in this launch, still patched: nothing to do
    assert UPSTREAM_PATCH_LANG is not None  # installed only where the interpreter has it
    scope = UPSTREAM_PATCH_LANG(fn)
    if _LAUNCHES:
        _LAUNCHES[-1].update(langs)
    return scope


_launch.__wrapped_upstream__ = UPSTREAM_LAUNCH  # type: ignore[attr-defined]
_patch_lang_once.__wrapped_upstream__ = UPSTREAM_PATCH_LANG  # type: ignore[attr-defined]


def patch_language_once() -> bool:
    """Make a device function's call skip patching the language modules its launch has already patched
    (idempotent); a launch's own patch, and any patch outside a launch, run as before. False where this
    interpreter has no launch, patch or scope of patches to work with (nothing changed)."""
    if UPSTREAM_PATCH_LANG is None or UPSTREAM_LAUNCH is None or not hasattr(interpreter, "_LangPatchScope"):
        return False
    interpreter.GridExecutor.__call__ = _launch
    interpreter._patch_lang = _patch_lang_once
    return True


def apply(
    modules: Iterable[types.ModuleType], reductions: dict[object, np.ufunc] | None = None
) -> dict[str, list[str]]:
    """The bridges, for the kernels of ``modules`` (and the combine functions ``reductions``); only when kernels
    are interpreted. Returns what was bridged per module, under ``"reductions"`` the vectorised combine
    functions and under ``"language"`` the language bridge, where applied (empty when not interpreting)."""
    if not interpreting():
        return {}
    wrap_float_arguments()
    done = {m.__name__: bridge_libdevice(m) for m in modules}
    vectorised = vectorise_reductions(reductions) if reductions else []
    return (
        done
        | ({"reductions": vectorised} if vectorised else {})
        | ({"language": [ONCE_A_LAUNCH]} if patch_language_once() else {})
    )


def describe(bridged: dict[str, list[str]]) -> str:
    """What ``apply`` bridged, for an adapter's environment: "float arguments; libdevice …[; reductions …][;
    language patched once a launch]"."""
    libdevice = sorted({n for key, names in bridged.items() if key not in ("reductions", "language") for n in names})
    reductions = bridged.get("reductions", [])
    parts = ["float arguments", "libdevice " + ", ".join(libdevice)]
    parts += ["reductions " + ", ".join(reductions)] if reductions else []
    return "; ".join(parts + bridged.get("language", []))

"""The Triton interpreter bridges (adapters/triton/interpreter_compat.py): each gap is still there
upstream — when a test here fails with "can be removed", the bridge is no longer needed — and each bridge
closes it."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest

if "triton" not in sys.modules:
    # as the liger adapter does: Triton defines its own library functions (tl.sum, …) when imported, for the
    # interpreter only if this is set then; a process that later runs the liger adapter on a CPU needs that
    os.environ.setdefault("TRITON_INTERPRET", "1")
pytest.importorskip("triton")
torch = pytest.importorskip("torch")

import triton  # noqa: E402
import triton.language as tl  # noqa: E402
from triton.language.extra import libdevice  # noqa: E402
from triton.runtime import interpreter  # noqa: E402

from transformer_conformance.adapters.triton import interpreter_compat as compat  # noqa: E402


@pytest.fixture
def interpret(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Kernels defined inside the test are interpreted; the interpreter starts without the float bridge."""
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    monkeypatch.setattr(interpreter, "_implicit_cvt", compat.UPSTREAM_IMPLICIT_CVT)
    yield


def _scale_kernel() -> Any:
    @triton.jit
    def scale(x_ptr, y_ptr, factor, BLOCK: tl.constexpr):
        offs = tl.arange(0, BLOCK)
        tl.store(y_ptr + offs, tl.load(x_ptr + offs) * factor.to(tl.float32))

    return scale


#: the function the unary kernel applies (a kernel reads module globals, not closures)
UNARY: Callable[..., Any] | None = None


def _unary(x_ptr, y_ptr, BLOCK: tl.constexpr):  # type: ignore[no-untyped-def]
    offs = tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, UNARY(tl.load(x_ptr + offs)))  # type: ignore[misc]


def _libdevice_kernel(fn: Callable[..., Any], monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.setitem(globals(), "UNARY", fn)
    return triton.jit(_unary)


def _run(kernel: Any, *args: Any) -> torch.Tensor:
    x = torch.tensor([0.25, 1.0, 2.0, 4.0])
    y = torch.zeros(4)
    kernel[(1,)](x, y, *args, BLOCK=4)
    return y


def test_float_argument_gap_is_still_upstream(interpret: None) -> None:
    kernel = _scale_kernel()
    try:
        _run(kernel, 3.0)
    except interpreter.InterpreterError as exc:
        assert "'float' object has no attribute 'to'" in str(exc)
    else:
        pytest.fail(
            "Triton's interpreter now passes float kernel arguments as scalars: the float bridge "
            "(wrap_float_arguments in adapters/triton/interpreter_compat.py) can be removed"
        )


def test_float_argument_bridge(interpret: None) -> None:
    compat.wrap_float_arguments()
    assert _run(_scale_kernel(), 3.0).tolist() == [0.75, 3.0, 6.0, 12.0]


@pytest.mark.parametrize("name", sorted(compat.LIBDEVICE_BRIDGES))
def test_libdevice_gap_is_still_upstream(interpret: None, name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    stub = getattr(libdevice, name)
    assert compat.is_libdevice_stub(stub)
    try:
        _run(_libdevice_kernel(stub, monkeypatch))
    except interpreter.InterpreterError as exc:
        assert "NoneType" in str(exc)  # the stub returned None, which the store refuses
    else:
        pytest.fail(
            f"Triton's interpreter now implements libdevice.{name}: its bridge (LIBDEVICE_BRIDGES in "
            "adapters/triton/interpreter_compat.py) can be removed"
        )


@pytest.mark.parametrize(
    ("name", "exact"), [("rsqrt", lambda v: 1 / np.sqrt(v)), ("tanh", np.tanh), ("log1p", np.log1p)]
)
def test_libdevice_bridge(
    interpret: None, name: str, exact: Callable[[np.ndarray], np.ndarray], monkeypatch: pytest.MonkeyPatch
) -> None:
    got = _run(_libdevice_kernel(compat.LIBDEVICE_BRIDGES[name], monkeypatch)).numpy()
    want = exact(np.array([0.25, 1.0, 2.0, 4.0], dtype=np.float64))
    np.testing.assert_allclose(got, want, rtol=2**-22)


def test_bridge_rebinds_only_stubs() -> None:
    """Only libdevice stubs with a bridge are rebound in a kernel module's globals."""
    import types

    module = types.ModuleType("kernels")
    module.rsqrt = libdevice.rsqrt  # type: ignore[attr-defined]
    module.erf = libdevice.erf  # type: ignore[attr-defined]  # no bridge: left failing visibly
    module.sqrt = np.sqrt  # type: ignore[attr-defined]
    assert compat.bridge_libdevice(module) == ["rsqrt"]
    assert module.rsqrt is compat.LIBDEVICE_BRIDGES["rsqrt"]  # type: ignore[attr-defined]
    assert module.erf is libdevice.erf and module.sqrt is np.sqrt  # type: ignore[attr-defined]


def test_bridge_stands_in_for_an_imported_libdevice() -> None:
    """A module that imported libdevice itself gets the bridges through it, the other stubs unchanged."""
    import types

    from triton.language.extra import libdevice as module_itself

    module = types.ModuleType("kernels")
    module.tl_libdevice = module_itself  # type: ignore[attr-defined]
    assert compat.bridge_libdevice(module) == [f"tl_libdevice.{n}" for n in compat.LIBDEVICE_BRIDGES]
    stand_in = module.tl_libdevice  # type: ignore[attr-defined]
    assert stand_in.log1p is compat.LIBDEVICE_BRIDGES["log1p"] and stand_in.erf is libdevice.erf


def test_bridged_libdevice_runs_in_a_kernel(interpret: None, monkeypatch: pytest.MonkeyPatch) -> None:
    stand_in = compat.BridgedLibdevice(libdevice)
    got = _run(_libdevice_kernel(stand_in.log1p, monkeypatch)).numpy()
    np.testing.assert_allclose(got, np.log1p([0.25, 1.0, 2.0, 4.0]), rtol=2**-22)


#: the combine function of the reduction kernels (a kernel reads module globals): a & b, as Cut Cross-Entropy's
AND: Any = None


def _all_below_half(x_ptr, out_ptr, R: tl.constexpr, C: tl.constexpr):  # type: ignore[no-untyped-def]
    """out[0] = every element of the R × C block is below 0.5 (Cut Cross-Entropy's _block_is_filtered)."""
    x = tl.load(x_ptr + tl.arange(0, R)[:, None] * C + tl.arange(0, C)[None, :])
    tl.store(out_ptr, tl.reduce(x < 0.5, None, AND).to(tl.int32))


def _rows_below_half(x_ptr, out_ptr, R: tl.constexpr, C: tl.constexpr):  # type: ignore[no-untyped-def]
    """out[i] = every element of row i is below 0.5."""
    x = tl.load(x_ptr + tl.arange(0, R)[:, None] * C + tl.arange(0, C)[None, :])
    tl.store(out_ptr + tl.arange(0, R), tl.reduce(x < 0.5, 1, AND).to(tl.int32))


def _reduce(kernel: Any, x: torch.Tensor) -> list[int]:
    out = torch.zeros(x.shape[0], dtype=torch.int32)
    triton.jit(kernel)[(1,)](x, out, R=x.shape[0], C=x.shape[1])
    return out.tolist()


@pytest.fixture
def and_combine(interpret: None, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """A combine function a & b, defined for the interpreter, and the interpreter's own reduction to begin with."""

    def both(a, b):  # type: ignore[no-untyped-def]
        return a & b

    fn = triton.jit(both)
    monkeypatch.setitem(globals(), "AND", fn)
    monkeypatch.setattr(interpreter.ReduceOps, "apply_impl", compat.UPSTREAM_REDUCE)
    monkeypatch.setattr(compat, "VECTORISED", {})
    yield fn


def test_custom_combine_reduction_gap_is_still_upstream(and_combine: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []
    upstream = interpreter.ReduceOps.generic_reduce
    monkeypatch.setattr(interpreter.ReduceOps, "generic_reduce", lambda self, i: calls.append(1) or upstream(self, i))
    assert _reduce(_all_below_half, torch.full((4, 8), 0.25)) == [1, 0, 0, 0]
    if not calls:
        pytest.fail(
            "Triton's interpreter now reduces with a kernel's own combine function without calling it element by "
            "element: the reduction bridge (vectorise_reductions in adapters/triton/interpreter_compat.py) can be "
            "removed"
        )


@pytest.mark.parametrize("kernel", [_all_below_half, _rows_below_half])
@pytest.mark.parametrize("seed", range(4))
def test_vectorised_reduction_equals_the_interpreters(
    and_combine: Any, kernel: Any, seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The bridge's one NumPy call gives what the interpreter's element-by-element reduction gives, without it."""
    x = torch.rand(4, 8, generator=torch.Generator().manual_seed(seed)) * (0.55 if seed % 2 else 0.505)
    x[seed % 4] = 0.25  # one row all below: never all rows false
    want = _reduce(kernel, x)
    assert compat.vectorise_reductions({and_combine: np.bitwise_and}) == ["both (bitwise_and)"]
    calls: list[int] = []
    monkeypatch.setattr(interpreter.ReduceOps, "generic_reduce", lambda self, i: calls.append(1))
    assert _reduce(kernel, x) == want
    assert not calls  # the bridge, not the interpreter's loop, reduced


def test_vectorise_reductions_refuses_an_order_dependent_reduction(and_combine: Any) -> None:
    with pytest.raises(ValueError, match="not an order-free bitwise reduction"):
        compat.vectorise_reductions({and_combine: np.add})
    assert not compat.VECTORISED


def test_describe_names_every_bridge() -> None:
    bridged = {
        "kernels": ["rsqrt"],
        "more": ["tl_libdevice.log1p"],
        "reductions": ["both (bitwise_and)"],
        "language": [compat.ONCE_A_LAUNCH],
    }
    assert compat.describe(bridged) == (
        "float arguments; libdevice rsqrt, tl_libdevice.log1p; reductions both (bitwise_and); "
        "language patched once a launch"
    )
    assert compat.describe({"kernels": ["rsqrt"]}) == "float arguments; libdevice rsqrt"


#: the device function the doubling kernel calls (a kernel reads module globals)
TWICE: Any = None


def _double(x_ptr, y_ptr, BLOCK: tl.constexpr):  # type: ignore[no-untyped-def]
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, TWICE(tl.load(x_ptr + offs)))  # type: ignore[misc]


@pytest.fixture
def device_function(interpret: None, monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """A kernel of 3 programs each calling a device function, the interpreter's own patching to begin with;
    yields the list ``_patch_builtin`` appends to on each call."""

    def twice(x):  # type: ignore[no-untyped-def]
        return x * 2

    monkeypatch.setitem(globals(), "TWICE", triton.jit(twice))
    monkeypatch.setattr(interpreter, "_patch_lang", compat.UPSTREAM_PATCH_LANG)
    monkeypatch.setattr(interpreter.GridExecutor, "__call__", compat.UPSTREAM_LAUNCH)
    calls: list[int] = []
    upstream = interpreter._patch_builtin
    monkeypatch.setattr(interpreter, "_patch_builtin", lambda *a: calls.append(1) or upstream(*a))
    yield calls


def _launch_doubling() -> list[float]:
    x = torch.arange(12, dtype=torch.float32)
    y = torch.zeros(12)
    triton.jit(_double)[(3,)](x, y, BLOCK=4)
    return y.tolist()


def test_device_function_repatching_is_still_upstream(device_function: list[int]) -> None:
    assert _launch_doubling() == [2.0 * i for i in range(12)]
    per_patch = 4  # triton.language, its tensor class, tl.math, the tensor descriptor
    if len(device_function) <= per_patch:
        pytest.fail(
            "Triton's interpreter no longer patches the language again for each device function call: the "
            "language bridge (patch_language_once in adapters/triton/interpreter_compat.py) can be removed"
        )
    assert len(device_function) == per_patch * (1 + 3)  # the launch's, then one per program's call


def test_language_is_patched_once_a_launch(device_function: list[int]) -> None:
    assert compat.patch_language_once()
    assert _launch_doubling() == [2.0 * i for i in range(12)]
    assert len(device_function) == 4  # the launch's own patch only
    assert tl.core.is_builtin(tl.load)  # and the launch undid it, as without the bridge
    assert _launch_doubling() == [2.0 * i for i in range(12)] and len(device_function) == 8  # the next launch patches
    assert not compat._LAUNCHES  # no launch running


def test_a_device_function_called_outside_a_launch_still_patches(device_function: list[int]) -> None:
    """Only a launch's device functions skip the patch: the interpreter's patching outside a launch is untouched."""
    compat.patch_language_once()
    scope = interpreter._patch_lang(TWICE.fn)
    try:
        assert len(device_function) == 4 and not tl.core.is_builtin(tl.load)
    finally:
        scope.restore()
    assert tl.core.is_builtin(tl.load)

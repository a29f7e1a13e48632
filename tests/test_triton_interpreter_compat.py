"""The two Triton interpreter bridges (adapters/triton_interpreter_compat.py): each gap is still there
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
            "(wrap_float_arguments in adapters/triton_interpreter_compat.py) can be removed"
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
            "adapters/triton_interpreter_compat.py) can be removed"
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

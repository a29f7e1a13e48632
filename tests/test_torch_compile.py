"""The torch-compile adapter's compile-cost design holds: an operation compiled with unbacked sizes serves
shapes with and without size-1 dimensions from one graph, forward and VJP alike, and agrees with the oracle; a
compile that failed is not tried again for its signature, and nothing else is kept."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch._dynamo.utils

from tests.adapter_smoke import outside_hypothesis
from transformer_conformance.adapters.torch.compile import UNBACKED_OPS, UNBACKED_SIZES, TorchCompileAdapter
from transformer_conformance.conformance.harness.compare import Record, check_forward, check_vjp
from transformer_conformance.conformance.strategies.common import Case, fill
from transformer_conformance.reference.formats import fmt


def test_one_graph_serves_every_shape_forward_and_vjp() -> None:
    assert "rms_norm" in UNBACKED_OPS and UNBACKED_SIZES  # unbacked sizes from torch 2.13, the CI's release
    adapter, dtype = TorchCompileAdapter(), fmt("float32")
    before = torch._dynamo.utils.counters["stats"]["unique_graphs"]
    with outside_hypothesis():
        for rows, n in ((3, 5), (1, 7), (2, 1), (1, 1)):  # 0/1 specialisation would compile anew for the last three
            case = Case(
                {"x": fill(dtype, (rows, n), 1.0, rows), "weight": fill(dtype, (n,), 0.5, n, offset=1.0)},
                {"eps": 1e-5},
            )
            rec = Record("rms_norm", "rms_norm", "smoke", "")
            out = check_forward(adapter, "rms_norm", case, dtype, rec)
            check_vjp(adapter, "rms_norm", case, fill(dtype, out.shape, 1.0, 99), dtype, rec)
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] - before == 1


def _counting_compile(adapter: TorchCompileAdapter, op: str, fn: Callable[..., Any], backend: Any) -> list[int]:
    """``adapter`` with ``op`` compiled from ``fn`` by ``backend``, called once per compile: the list counts."""
    compiles: list[int] = []

    def counted(gm: torch.fx.GraphModule, example_inputs: list[torch.Tensor]) -> Callable[..., Any]:
        compiles.append(1)
        return backend(gm, example_inputs)

    torch._dynamo.reset()
    adapter.impl[op] = torch.compile(fn, backend=counted, dynamic=True)
    return compiles


def test_a_failed_compile_is_raised_again_without_compiling() -> None:
    """A compile that failed fails its signature's later calls the same way, forward and VJP, without the compiler
    (which keeps no record of a failure) running again; another signature is compiled."""

    def failing_backend(gm: torch.fx.GraphModule, example_inputs: list[torch.Tensor]) -> Callable[..., Any]:
        raise RuntimeError("the backend cannot lower this graph")

    adapter, dtype = TorchCompileAdapter(), fmt("float32")
    compiles = _counting_compile(adapter, "rms_norm", lambda x, weight, eps=None: x * weight, failing_backend)
    x, w = fill(dtype, (3, 5), 1.0, 1), fill(dtype, (5,), 0.5, 2, offset=1.0)
    for _ in range(3):
        with pytest.raises(torch._dynamo.exc.BackendCompilerFailed, match="cannot lower this graph") as raised:
            adapter.forward("rms_norm", {"x": x, "weight": w}, {"eps": 1e-5})
        assert "an earlier check's example" not in getattr(raised.value, "__notes__", [])
        raised.value.add_note("an earlier check's example")  # as Hypothesis notes its falsifying example
    with pytest.raises(torch._dynamo.exc.BackendCompilerFailed, match="cannot lower this graph"):
        adapter.vjp("rms_norm", {"x": x, "weight": w}, {"eps": 1e-5}, fill(dtype, (3, 5), 1.0, 3))
    assert len(compiles) == 1
    with pytest.raises(torch._dynamo.exc.BackendCompilerFailed):
        adapter.forward("rms_norm", {"x": x, "weight": w}, {"eps": 1e-6})  # another signature: compiled
    assert len(compiles) == 2


def test_an_error_of_the_compiled_code_is_raised_by_each_call() -> None:
    """An error raised while the compiled code runs (here one that depends on the values) is not kept: each call
    runs, and new values of the same shapes give their answer."""

    def check_finite(x: torch.Tensor, weight: torch.Tensor, eps: float | None = None) -> torch.Tensor:
        torch._check_value(bool(torch.isfinite(x).all()), lambda: "x is not finite")
        return x * weight

    adapter, dtype = TorchCompileAdapter(), fmt("float32")
    compiles = _counting_compile(adapter, "rms_norm", check_finite, lambda gm, _: gm.forward)
    x, w = fill(dtype, (3, 5), 1.0, 1), fill(dtype, (5,), 0.5, 2, offset=1.0)
    bad = x.copy()
    bad[0, 0] = np.inf
    for _ in range(2):
        with pytest.raises(ValueError, match="not finite"):
            adapter.forward("rms_norm", {"x": bad, "weight": w}, {"eps": 1e-5})
    np.testing.assert_array_equal(adapter.forward("rms_norm", {"x": x, "weight": w}, {"eps": 1e-5}), x * w)
    assert compiles and not adapter._failed


def test_alibi_and_rope_are_planned_by_the_values_they_compile_for() -> None:
    """ALiBi, compiled with unbacked sizes, still builds a graph per head count (its slopes are Python numbers of it),
    RoPE one per base and rotary width: declared per_shape and per_value, so their checks draw the planned head counts,
    and the planned shapes with their bases; the other unbacked operations need no plan."""
    caps = TorchCompileAdapter().capabilities
    assert {op: caps[op].compiles for op in UNBACKED_OPS if caps[op].compiles != "no"} == {
        "alibi": "per_shape",
        "rope": "per_value",
    }

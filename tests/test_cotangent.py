"""The cotangent a check passes to ``vjp`` is the caller's own array, and a backward that writes into it
fails the check unless the adapter declares ``op.vjp`` in ``in_place_ops`` (docs/adapter-contract.md):
the gradient of a layer's output is still needed after that layer's backward (the residual stream's)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import numpy as np
import pytest

from mutants.catalogue import rms_grad_into_cotangent
from tests.adapter_smoke import case, outside_hypothesis
from transformer_conformance.adapters.numpy.adapter import NumpyAdapter
from transformer_conformance.conformance.harness.compare import CheckFailure, Record, call_op, check_vjp
from transformer_conformance.conformance.strategies.common import fill
from transformer_conformance.reference.formats import Format, fmt


class WritesCotangent(NumpyAdapter):
    """The oracle whose backward stores ∂L/∂x in the cotangent it is handed and returns that very array as
    ∂L/∂x, as an in-place fused kernel does (Liger-Kernel's RMSNorm backward)."""

    name = "writes-cotangent"

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[np.ndarray] = []

    def vjp(
        self, op: str, inputs: Mapping[str, np.ndarray], params: Mapping[str, Any], cotangent: np.ndarray
    ) -> dict[str, np.ndarray]:
        self.seen.append(cotangent)
        grads = super().vjp(op, inputs, params, cotangent)
        cotangent[...] = grads["x"]
        return dict(grads, x=cotangent)


def _record() -> Record:
    return Record("rms_norm/gradient", "rms_norm", "", "")


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
def test_write_into_the_cotangent_fails_undeclared(dtype: str) -> None:
    adapter, f = WritesCotangent(), fmt(dtype)
    c = case("rms_norm", f)
    cot = fill(f, c.inputs["x"].shape, 1.0, 5)
    kept = cot.copy()
    with outside_hypothesis(), pytest.raises(CheckFailure) as info:
        check_vjp(adapter, "rms_norm", c, cot, f, _record())
    message = str(info.value)
    assert message.startswith("wrote into its cotangent without declaring rms_norm.vjp in-place: got ")
    assert ", should be " in message and message.endswith(")]")
    assert "[writes-cotangent.rms_norm.vjp(x: " in message
    assert adapter.seen[0] is cot  # handed over as it is, not a copy
    assert np.array_equal(cot, kept)  # and given back to the check as it drew it


def test_declared_write_passes() -> None:
    """Declared as ``rms_norm.vjp``, the same candidate passes: its gradient is read as it returned it (in the
    cotangent's memory) before the caller's cotangent is restored."""
    adapter, f = WritesCotangent(), fmt("float32")
    adapter.conventions = replace(adapter.conventions, in_place_ops=frozenset({"rms_norm.vjp"}))
    c = case("rms_norm", f)
    cot = fill(f, c.inputs["x"].shape, 1.0, 5)
    kept = cot.copy()
    with outside_hypothesis():
        check_vjp(adapter, "rms_norm", c, cot, f, _record())
        got = call_op(adapter, "rms_norm", c.inputs, c.params, "call", cot)
    assert adapter.seen[-1] is cot and np.array_equal(cot, kept)
    want = NumpyAdapter().vjp("rms_norm", c.inputs, c.params, kept)
    assert np.array_equal(got["x"], want["x"]) and not np.shares_memory(got["x"], cot)


def test_declaring_the_inputs_in_place_does_not_cover_the_cotangent() -> None:
    """``rms_norm`` in ``in_place_ops`` allows writes into x and the weight, not into the cotangent."""
    adapter, f = WritesCotangent(), fmt("float32")
    adapter.conventions = replace(adapter.conventions, in_place_ops=frozenset({"rms_norm"}))
    c = case("rms_norm", f)
    with outside_hypothesis(), pytest.raises(CheckFailure, match="wrote into its cotangent"):
        check_vjp(adapter, "rms_norm", c, fill(f, c.inputs["x"].shape, 1.0, 5), f, _record())


def test_planted_in_place_rms_norm_backward() -> None:
    """The catalogue's torch RMSNorm whose backward does grad_out.copy_(dx): correct gradients, caught only by
    the write; declared, it passes."""
    adapter, f = rms_grad_into_cotangent(), fmt("float32")
    c = case("rms_norm", f)
    cot = fill(f, c.inputs["x"].shape, 1.0, 5)
    with outside_hypothesis(), pytest.raises(CheckFailure, match="wrote into its cotangent without declaring rms_norm"):
        check_vjp(adapter, "rms_norm", c, cot, f, _record())
    adapter.declare(in_place_ops=frozenset({"rms_norm.vjp"}))
    with outside_hypothesis():
        check_vjp(adapter, "rms_norm", c, cot, f, _record())


def _double_block(f: Format) -> tuple[dict[str, np.ndarray], dict[str, Any]]:
    """A double-norm block with zero output projections (d = 4, two heads of width 2, T = 3)."""
    d, hd, hidden = 4, 2, 6
    w = {
        k: fill(f, shape, shape[0] ** -0.5, i)
        for i, (k, shape) in enumerate(
            [("wq", (d, 2 * hd)), ("wk", (d, 2 * hd)), ("wv", (d, 2 * hd)), ("w1", (d, hidden)), ("w3", (d, hidden))]
        )
    }
    norms = {
        k: fill(f, (d,), 0.2, 10 + i, offset=1.0)
        for i, k in enumerate(["attn_norm", "mlp_norm", "attn_post_norm", "mlp_post_norm"])
    }
    inputs = {"x": fill(f, (1, 3, d), 1.0, 20), "wo": np.zeros((2 * hd, d), f.np_dtype)}
    inputs |= w | norms | {"w2": np.zeros((hidden, d), f.np_dtype), "positions": np.arange(3, dtype=np.int64)}
    return inputs, {"placement": "double", "n_heads": 2, "n_kv_heads": 2, "eps": 1e-6, "base": 10000.0}


@pytest.mark.filterwarnings("ignore::pytest.PytestUnknownMarkWarning")  # the check module's own mark
def test_block_checks_see_the_write() -> None:
    """The blocks' own VJP calls (identity path, radial gradient, depth) hand over the cotangent through
    the same guard: a double-norm block whose backward leaves ∂L/∂x in g's memory fails there."""
    from transformer_conformance.conformance.checks.test_blocks import _vjp

    f = fmt("float32")
    inputs, params = _double_block(f)
    g = fill(f, inputs["x"].shape, 1.0, 7)
    kept = g.copy()
    with outside_hypothesis():
        grads, _ = _vjp(NumpyAdapter(), "block", inputs, params, g, f)
    assert np.array_equal(grads["x"], g)  # zero output projections: ∂L/∂x = g, a write would change nothing
    inputs |= {"wo": fill(f, inputs["wo"].shape, 0.5, 30), "w2": fill(f, inputs["w2"].shape, 0.5, 31)}
    with pytest.raises(CheckFailure, match=r"wrote into its cotangent without declaring block\.vjp"):
        _vjp(WritesCotangent(), "block", inputs, params, g, f)
    assert np.array_equal(g, kept)

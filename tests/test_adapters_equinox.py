"""The equinox built-in adapter loads, declares what Equinox 0.13 does, and passes a smoke subset
(docs/adapters.md, "equinox")."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("jax")
pytest.importorskip("equinox")

from tests.adapter_smoke import smoke
from transformer_conformance.adapters.registry import load_adapter
from transformer_conformance.conformance.strategies.common import fill
from transformer_conformance.reference.formats import fmt


def test_smoke() -> None:
    adapter = load_adapter("equinox")
    assert adapter.name == "equinox"
    assert set(adapter.capabilities) == {"rms_norm", "layer_norm"}
    assert smoke(adapter, ("float32", "bfloat16", "float16"))


@pytest.mark.parametrize("op", ["rms_norm", "layer_norm"])
def test_default_eps_is_the_declared_one(op: str) -> None:
    """ε = None builds the layer with its default, which is the declared 1e-5 (a row of small values shows it)."""
    adapter = load_adapter("equinox")
    dtype = fmt("float32")
    inputs = {"x": fill(dtype, (3, 16), 1e-3, 0), "weight": fill(dtype, (16,), 0.2, 1, offset=1.0)}
    if op == "layer_norm":
        inputs["bias"] = fill(dtype, (16,), 0.2, 2)
    default = adapter.forward(op, inputs, {"eps": None})
    assert adapter.conventions.eps_defaults[op] == 1e-5
    assert np.array_equal(default, adapter.forward(op, inputs, {"eps": 1e-5}))
    assert not np.array_equal(default, adapter.forward(op, inputs, {"eps": 1e-6}))


def test_outputs_and_gradients_come_back_in_the_input_dtype() -> None:
    adapter = load_adapter("equinox")
    dtype = fmt("bfloat16")
    inputs = {"x": fill(dtype, (2, 3, 8), 1.0, 0), "weight": fill(dtype, (8,), 0.2, 1, offset=1.0)}
    assert adapter.forward("rms_norm", inputs, {"eps": None}).dtype == dtype.np_dtype
    grads = adapter.vjp("rms_norm", inputs, {"eps": None}, fill(dtype, (2, 3, 8), 1.0, 2))
    assert {k: g.dtype for k, g in grads.items()} == {"x": dtype.np_dtype, "weight": dtype.np_dtype}
    assert grads["x"].shape == (2, 3, 8) and grads["weight"].shape == (8,)


def test_rmsnorm_has_a_bias_by_default() -> None:
    """The library default the findings name: ``RMSNorm(d)`` holds a learned β (zero at initialisation), which
    the architecture's RMSNorm has not; the adapter's checks run at that zero."""
    import equinox as eqx

    layer = eqx.nn.RMSNorm(4)
    assert layer.use_bias and layer.bias is not None and not np.asarray(layer.bias).any()

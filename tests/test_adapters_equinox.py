"""The equinox built-in adapter loads, declares what Equinox 0.13 does, and passes a smoke subset
(docs/adapters.md, "equinox")."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("jax")
pytest.importorskip("equinox")

from tests.adapter_smoke import assert_default_eps, assert_rms_norm_keeps_the_input_dtype, smoke
from transformer_conformance.adapters.registry import load_adapter


def test_smoke() -> None:
    adapter = load_adapter("equinox")
    assert adapter.name == "equinox"
    assert set(adapter.capabilities) == {"rms_norm", "layer_norm"}
    assert smoke(adapter, ("float32", "bfloat16", "float16"))


@pytest.mark.parametrize("op", ["rms_norm", "layer_norm"])
def test_default_eps_is_the_declared_one(op: str) -> None:
    """ε = None builds the layer with its default, which is the declared 1e-5 (a row of small values shows it)."""
    assert_default_eps(load_adapter("equinox"), op, 1e-5)


def test_outputs_and_gradients_come_back_in_the_input_dtype() -> None:
    assert_rms_norm_keeps_the_input_dtype(load_adapter("equinox"))


def test_rmsnorm_has_a_bias_by_default() -> None:
    """The library default the findings name: ``RMSNorm(d)`` holds a learned β (zero at initialisation), which
    the architecture's RMSNorm has not; the adapter's checks run at that zero."""
    import equinox as eqx

    layer = eqx.nn.RMSNorm(4)
    assert layer.use_bias and layer.bias is not None and not np.asarray(layer.bias).any()

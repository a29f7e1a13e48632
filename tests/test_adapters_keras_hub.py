"""The keras-hub built-in adapter: its backend is chosen or refused before Keras is imported; with keras-hub
installed, it loads, declares what keras-hub's layers do, passes a smoke subset, and is held to its declarations
(the half-split RoPE pairs, bottom-right causal attention, the dynamic rule's defect)."""

from __future__ import annotations

import importlib.util
from dataclasses import replace
from types import SimpleNamespace

import numpy as np
import pytest

from tests.adapter_smoke import case, outside_hypothesis, smoke
from transformer_conformance.adapters.contract import Adapter
from transformer_conformance.adapters.keras_hub.backend import select_jax
from transformer_conformance.adapters.versions import SUPPORTED, UnsupportedVersion, require
from transformer_conformance.conformance.harness.compare import CheckFailure, Record, check_forward
from transformer_conformance.reference.formats import fmt

needs_keras_hub = pytest.mark.skipif(importlib.util.find_spec("keras_hub") is None, reason="keras-hub not installed")


def _keras(backend: str) -> SimpleNamespace:
    return SimpleNamespace(backend=SimpleNamespace(backend=lambda: backend))


def test_backend_set_to_jax_before_keras_is_imported() -> None:
    env: dict[str, str] = {}
    select_jax(env, modules={})
    assert env == {"KERAS_BACKEND": "jax"}
    select_jax({"KERAS_BACKEND": "jax"}, modules={"keras": _keras("jax")})


def test_other_backend_refused() -> None:
    with pytest.raises(UnsupportedVersion, match=r"got KERAS_BACKEND=torch, should be jax or unset$"):
        select_jax({"KERAS_BACKEND": "torch"}, modules={})
    with pytest.raises(UnsupportedVersion, match="got keras already imported with the tensorflow backend"):
        select_jax({}, modules={"keras": _keras("tensorflow")})


@pytest.mark.parametrize(
    ("found", "refused"),
    [
        ({"keras-hub": "0.31.0"}, "keras-hub 0.31.0"),
        ({"keras-hub": "0.33.0"}, "keras-hub 0.33.0"),
        ({"keras": "3.14.2"}, "keras 3.14.2"),
    ],
)
def test_other_releases_refused(found: dict[str, str], refused: str) -> None:
    measured = {"keras-hub": "0.32.0", "keras": "3.15.1", "jax": "0.10.2"}
    require("keras-hub", SUPPORTED["keras-hub"], measured)
    with pytest.raises(UnsupportedVersion, match=f"^{refused} is not supported"):
        require("keras-hub", SUPPORTED["keras-hub"], {**measured, **found})


@pytest.fixture(scope="module")
def adapter() -> Adapter:
    if importlib.util.find_spec("keras_hub") is None:  # not imported here: the adapter picks Keras's backend first
        pytest.skip("keras-hub not installed")
    from transformer_conformance.adapters.registry import load_adapter

    return load_adapter("keras-hub")


@needs_keras_hub
def test_smoke(adapter: Adapter) -> None:
    """Every declared operation on one small example, but the dynamic rule (a known defect, tested below)."""
    assert adapter.name == "keras-hub" and adapter.environment()["backend"] == "jax"
    declared = adapter.capabilities["rope_scaled"]
    adapter.capabilities["rope_scaled"] = replace(  # type: ignore[index]
        declared, values={"scaling.type": frozenset({"linear", "yarn", "llama3"})}
    )
    try:
        checked = set(smoke(adapter, ("float32", "bfloat16")))
    finally:
        adapter.capabilities["rope_scaled"] = declared  # type: ignore[index]
    assert {
        "rms_norm[bfloat16]",
        "layer_norm[float32]",
        "attention[bfloat16][none]",
        "attention[bfloat16][tanh]",
        "cross_entropy_mean[float32]",
    } <= checked
    assert {"rope_scaled[float32][linear]", "rope_scaled[bfloat16][llama3]"} <= checked


@needs_keras_hub
def test_declarations(adapter: Adapter) -> None:
    conv = adapter.conventions
    assert conv.rope_layout == "half" and conv.norm_rounding == "single" and conv.causal_alignment == "bottom_right"
    assert conv.eps_defaults == {"rms_norm": 1e-6, "layer_norm": 1e-3}
    assert conv.unfused == {"rope", "rope_scaled", "attention"}
    assert adapter.capabilities["rope_scaled"].values == {"scaling.type": {"linear", "dynamic", "yarn", "llama3"}}
    assert "swiglu_mlp" not in adapter.capabilities and "z_loss" not in adapter.capabilities


@needs_keras_hub
def test_rope_layout_is_half(adapter: Adapter) -> None:
    """Declared interleaved instead, the same layer fails rope/forward: its pairs are (i, i + d/2)."""
    dtype, c = fmt("float32"), case("rope", fmt("float32"))
    declared = adapter.conventions
    try:
        with outside_hypothesis():
            check_forward(adapter, "rope", c, dtype, Record("rope", "rope", "", ""))
            adapter.conventions = replace(declared, rope_layout="interleaved")  # type: ignore[misc]
            with pytest.raises(CheckFailure, match="should be"):
                check_forward(adapter, "rope", c, dtype, Record("rope", "rope", "", ""))
    finally:
        adapter.conventions = declared  # type: ignore[misc]


@needs_keras_hub
def test_causal_attention_is_bottom_right(adapter: Adapter) -> None:
    """Queries after a prefill equal the same rows of the full causal call (the decoder's cache-index mask)."""
    rng = np.random.default_rng(0)
    q, k, v = (rng.normal(size=s).astype(np.float32) for s in ((1, 4, 5, 8), (1, 2, 5, 8), (1, 2, 5, 3)))
    for cap in (None, 5.0):
        params = {"causal": True, "softcap": cap, "scale": None}
        full = adapter.forward("attention", {"q": q, "k": k, "v": v}, params)
        tail = adapter.forward("attention", {"q": q[:, :, 3:], "k": k, "v": v}, params)
        np.testing.assert_allclose(tail, full[:, :, 3:], rtol=1e-6, atol=1e-6)


@needs_keras_hub
def test_dynamic_rule_is_not_plain_rope_below_the_trained_length(adapter: Adapter) -> None:
    """keras-hub's rope_type="dynamic" rescales every frequency at any length (expectations/keras-hub.toml)."""
    x = np.array([[[1.0, 0.0, 0.0, 0.0]]], np.float32)
    pos = np.array([1])
    scaling = {"type": "dynamic", "factor": 2.0, "original_max_position_embeddings": 16}
    out = adapter.forward("rope_scaled", {"x": x, "positions": pos}, {"base": 10000.0, "scaling": scaling})
    np.testing.assert_allclose(out[0, 0, [0, 2]], [np.cos(0.25), np.sin(0.25)], rtol=1e-6)

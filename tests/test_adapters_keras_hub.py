"""The keras-hub built-in adapter: its backend is chosen or refused before Keras is imported; with keras-hub
installed, it loads, declares what keras-hub's layers do, passes a smoke subset, and is held to its declarations
(the half-split RoPE pairs, bottom-right causal attention, Gemma 2's inclusive sliding window, the dynamic rule's
defect)."""

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
from transformer_conformance.conformance.harness.compare import CheckFailure, Record, check_forward, check_vjp
from transformer_conformance.conformance.strategies.common import Case, fill
from transformer_conformance.reference.formats import fmt
from transformer_conformance.reference.local_attention import window_mask

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
        "sliding_window_attention[float32][none]",
        "sliding_window_attention[bfloat16][tanh]",
        "cross_entropy_mean[float32]",
    } <= checked
    assert {"rope_scaled[float32][linear]", "rope_scaled[bfloat16][llama3]"} <= checked


@needs_keras_hub
def test_declarations(adapter: Adapter) -> None:
    conv = adapter.conventions
    assert conv.rope_layout == "half" and conv.norm_rounding == "single" and conv.causal_alignment == "bottom_right"
    assert conv.eps_defaults == {"rms_norm": 1e-6, "layer_norm": 1e-3}
    assert conv.unfused == {"rope", "rope_scaled", "attention", "sliding_window_attention"}
    assert conv.sliding_window == "inclusive"
    assert adapter.capabilities["sliding_window_attention"].values == {}  # soft-cap none and tanh
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
def test_sliding_window_follows_the_declaration(adapter: Adapter) -> None:
    """L_q = 3 < L_k = 5, window 2: zero scores make the weights uniform over the keys each query sees, and one-hot
    values show which (keys i + 1 and i + 2 for query i: the query's own token among the W, bottom-right); declared
    exclusive or top-left, the oracle disagrees."""
    from transformer_conformance.adapters.keras_hub import ops

    assert ops.window_counts() == "inclusive"
    lq, lk = 3, 5
    onehot = {"q": np.zeros((1, 2, lq, 1), np.float32), "k": np.zeros((1, 1, lk, 1), np.float32)}
    onehot["v"] = np.eye(lk, dtype=np.float32)[None, None]
    for w in (1, 2, 9):
        seen = adapter.forward("sliding_window_attention", onehot, {"window": w, "softcap": None, "scale": None}) > 0
        assert np.array_equal(seen, np.broadcast_to(window_mask(lq, lk, w, "bottom_right", "inclusive"), seen.shape))

    dtype = fmt("float32")
    inputs = {"q": fill(dtype, (1, 2, lq, 4), 1.0, 0), "k": fill(dtype, (1, 1, lk, 4), 1.0, 1)}
    record = Record("swa", "sliding_window_attention", "", "")
    for cap in (None, 5.0):
        c = Case(inputs | {"v": fill(dtype, (1, 1, lk, 3), 1.0, 2)}, {"window": 2, "softcap": cap, "scale": 0.3})
        with outside_hypothesis():
            check_forward(adapter, "sliding_window_attention", c, dtype, record)
            check_vjp(adapter, "sliding_window_attention", c, fill(dtype, (1, 2, lq, 3), 1.0, 3), dtype, record)
    declared = adapter.conventions
    try:
        for wrong in (replace(declared, sliding_window="exclusive"), replace(declared, causal_alignment="top_left")):
            adapter.conventions = wrong  # type: ignore[misc]
            with outside_hypothesis(), pytest.raises(CheckFailure, match="should be"):
                check_forward(adapter, "sliding_window_attention", c, dtype, record)
    finally:
        adapter.conventions = declared  # type: ignore[misc]


@needs_keras_hub
def test_window_as_long_as_the_keys_is_causal_attention(adapter: Adapter) -> None:
    """A window of L_k or more is the layer's causal attention, and a value width above the head width (q and k
    zero-padded to it) agrees too."""
    rng = np.random.default_rng(1)
    q, k, v = (rng.normal(size=s).astype(np.float32) for s in ((1, 4, 3, 4), (1, 2, 5, 4), (1, 2, 5, 6)))
    x = {"q": q, "k": k, "v": v}
    for cap in (None, 5.0):
        plain = adapter.forward("attention", x, {"causal": True, "softcap": cap, "scale": None})
        for w in (5, 8):
            windowed = adapter.forward("sliding_window_attention", x, {"window": w, "softcap": cap, "scale": None})
            np.testing.assert_allclose(windowed, plain, rtol=1e-6, atol=1e-6)


@needs_keras_hub
def test_sliding_window_refuses_what_the_layer_cannot_slice(adapter: Adapter) -> None:
    """The layer slices its band at the cache index with a clamped start: more queries than keys, or a window
    below 1, is refused rather than computed with the wrong rows."""
    from transformer_conformance.adapters.keras_hub.ops import Unsupported

    x = {"q": np.zeros((1, 1, 4, 2), np.float32), "k": np.zeros((1, 1, 3, 2), np.float32)}
    x["v"] = np.zeros((1, 1, 3, 2), np.float32)
    with pytest.raises(Unsupported, match=r"needs L_q ≤ L_k \(a cache index ≥ 0\), got 4 > 3$"):
        adapter.forward("sliding_window_attention", x, {"window": 2, "softcap": None, "scale": None})
    x["q"] = x["q"][:, :, :3]
    with pytest.raises(Unsupported, match=r"at least 1, got 0$"):
        adapter.forward("sliding_window_attention", x, {"window": 0, "softcap": None, "scale": None})


@needs_keras_hub
def test_dynamic_rule_is_not_plain_rope_below_the_trained_length(adapter: Adapter) -> None:
    """keras-hub's rope_type="dynamic" rescales every frequency at any length (expectations/keras-hub.toml)."""
    x = np.array([[[1.0, 0.0, 0.0, 0.0]]], np.float32)
    pos = np.array([1])
    scaling = {"type": "dynamic", "factor": 2.0, "original_max_position_embeddings": 16}
    out = adapter.forward("rope_scaled", {"x": x, "positions": pos}, {"base": 10000.0, "scaling": scaling})
    np.testing.assert_allclose(out[0, 0, [0, 2]], [np.cos(0.25), np.sin(0.25)], rtol=1e-6)

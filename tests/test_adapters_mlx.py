"""The mlx built-in adapter loads, refuses MLX versions it was not measured on, declares what it calls, passes a
smoke subset, and is held to what it declares (the RoPE layout it hands mx.fast.rope, its causal alignment)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

pytest.importorskip("mlx.core")

from tests.adapter_smoke import case, outside_hypothesis, smoke
from transformer_conformance.adapters.registry import load_adapter
from transformer_conformance.conformance.harness.compare import CheckFailure, Record, check_forward, check_vjp
from transformer_conformance.conformance.strategies.common import Case, fill
from transformer_conformance.reference.formats import fmt

DTYPES = ("float32", "float16", "bfloat16")


def test_smoke() -> None:
    adapter = load_adapter("mlx")
    assert adapter.name == "mlx"
    checked = set(smoke(adapter, DTYPES))
    for op in ("rms_norm", "layer_norm", "rope", "swiglu_mlp", "z_loss"):
        assert {f"{op}[{d}]" for d in DTYPES} <= checked, op
    assert {f"attention[{d}][{cap}]" for d in DTYPES for cap in ("none", "tanh")} <= checked  # mlx-lm's soft-cap
    assert {"glu_mlp[float32][gelu_sigmoid]", "cross_entropy[bfloat16]"} <= checked
    assert "rope_scaled[float16][linear]" in checked
    assert {f"sliding_window_attention[{d}][none]" for d in DTYPES} <= checked
    assert {f"sink_attention[{d}]" for d in DTYPES} <= checked


def test_declarations() -> None:
    adapter = load_adapter("mlx")
    assert set(adapter.capabilities) == {
        "rms_norm",
        "layer_norm",
        "rope",
        "rope_scaled",
        "attention",
        "sliding_window_attention",
        "sink_attention",
        "swiglu_mlp",
        "mlp",
        "glu_mlp",
        "cross_entropy",
        "cross_entropy_mean",
        "z_loss",
        "softcap_z_loss",
    }
    # measured over budget in low precision with causes not yet pinned down: not declared there
    assert adapter.capabilities["mlp"].dtypes == {"float32"}
    assert adapter.capabilities["cross_entropy"].dtypes == {"float32", "bfloat16"}
    # only position interpolation maps onto mx.fast.rope's scale
    assert adapter.capabilities["rope_scaled"].values == {"scaling.type": frozenset({"linear"})}
    conv = adapter.conventions
    assert conv.eps_defaults == {"rms_norm": 1e-5, "layer_norm": 1e-5}
    assert conv.norm_rounding == "before_weight" and conv.causal_alignment == "bottom_right"
    assert conv.rope_layout == "half"
    # the window as mlx-lm's create_causal_mask counts it; the kernel has no soft-cap
    assert conv.sliding_window == "inclusive"
    assert adapter.capabilities["sliding_window_attention"].values == {"softcap": frozenset({"none"})}
    assert {"sliding_window_attention", "sink_attention"} <= conv.unfused  # the kernel's CPU fallback
    assert adapter.capabilities["sink_attention"].grad  # mx.vjp through the CPU fallback, sinks included
    env = adapter.environment()
    assert env["mlx"].startswith("0.32.") and "cpu" in env["device"]
    assert env["mlx-lm"].startswith("0.32.")


@pytest.mark.parametrize("version", ["0.31.2", "0.33.0", "1.0.0", "dev"])
def test_other_versions_refused(version: str) -> None:
    from transformer_conformance.adapters.mlx.adapter import check_version

    with pytest.raises(RuntimeError, match=f"supports mlx 0.32.x .* not {version}$"):
        check_version(version)
    check_version("0.32.0")
    check_version("0.32.4.dev20260101+abc")


def test_unexpressible_scaling_refused() -> None:
    """A scaling rule mx.fast.rope has no parameter for is refused in one line, never approximated."""
    adapter = load_adapter("mlx")
    c = case("rope_scaled", fmt("float32"), choice="yarn")
    with pytest.raises(ValueError, match="no 'yarn' scaling"):
        adapter.forward("rope_scaled", c.inputs, c.params)


@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_rope_layout_follows_the_declaration(layout: str) -> None:
    """``traditional`` is set from the declared layout; the other layout's answer is caught."""
    from transformer_conformance.adapters.mlx.adapter import MlxAdapter

    dtype, c = fmt("float32"), case("rope", fmt("float32"))
    adapter = MlxAdapter(rope_layout=layout)
    with outside_hypothesis():
        check_forward(adapter, "rope", c, dtype, Record("rope", "rope", "", ""))
    other = "interleaved" if layout == "half" else "half"
    adapter.conventions = replace(adapter.conventions, rope_layout=other)  # declared, not built
    with outside_hypothesis(), pytest.raises(CheckFailure, match="should be"):
        check_forward(adapter, "rope", c, dtype, Record("rope", "rope", "", ""))


def test_rope_at_strided_positions() -> None:
    """Positions need not be contiguous: each is its own offset for mx.fast.rope."""
    dtype = fmt("float32")
    c = Case({"x": fill(dtype, (2, 4, 8), 1.0, 0), "positions": np.array([3, 10, 17, 99_990])}, {"base": 10000.0})
    with outside_hypothesis():
        check_forward(load_adapter("mlx"), "rope", c, dtype, Record("rope", "rope", "", ""))


def test_causal_attention_is_bottom_right() -> None:
    """mask="causal" aligns the last query with the last key: declared top-left, it is caught."""
    dtype = fmt("float32")
    c = case("attention", dtype)  # causal, 3 queries on 5 keys
    adapter = load_adapter("mlx")
    with outside_hypothesis():
        check_forward(adapter, "attention", c, dtype, Record("a", "attention", "", ""))
    adapter.conventions = replace(adapter.conventions, causal_alignment="top_left")
    with outside_hypothesis(), pytest.raises(CheckFailure, match="should be"):
        check_forward(adapter, "attention", c, dtype, Record("a", "attention", "", ""))


def test_bfloat16_crosses_exactly() -> None:
    from transformer_conformance.adapters.mlx.adapter import to_mx, to_numpy

    a = fill(fmt("bfloat16"), (3, 5), 1.0, 0)
    back = to_numpy(to_mx(a), a.dtype)
    assert back.dtype == a.dtype and np.array_equal(back.view(np.uint16), a.view(np.uint16))


# ---- sliding windows (mlx-lm's masks) and sinks (mx.fast.scaled_dot_product_attention's sinks) ----------------


def test_window_mask_is_mlx_lms_and_inclusive() -> None:
    """The mask is mlx-lm's ``create_causal_mask`` itself (loaded without importing mlx_lm's package, so neither
    transformers nor torch), and it keeps p − j < W: the query's own token among the W."""
    import sys

    from transformer_conformance.adapters.mlx import ops
    from transformer_conformance.reference.local_attention import window_mask

    base = ops.mlx_lm_base()
    assert base.__file__ is not None and base.__file__.endswith("mlx_lm/models/base.py")
    assert base.__name__ == ops.MLX_LM_BASE and sys.modules.get("mlx_lm.models.base") is not base
    for lq, lk, w in ((3, 5, 1), (3, 5, 2), (5, 5, 3), (1, 6, 4), (4, 4, 9)):
        got = np.array(ops.window_mask(lq, lk, w))
        assert np.array_equal(got, window_mask(lq, lk, w, "bottom_right", "inclusive")), (lq, lk, w)
    assert ops.window_counts() == "inclusive"


def test_sliding_window_follows_the_declaration() -> None:
    """L_q = 3 < L_k = 5, window 2: zero scores make the weights uniform over the keys each query sees, and one-hot
    values show which (keys i + 1 and i + 2 for query i); declared exclusive or top-left, the oracle disagrees."""
    from transformer_conformance.reference.local_attention import window_mask

    adapter = load_adapter("mlx")
    lq, lk = 3, 5
    onehot = {"q": np.zeros((1, 2, lq, 1), np.float32), "k": np.zeros((1, 1, lk, 1), np.float32)}
    onehot["v"] = np.eye(lk, dtype=np.float32)[None, None]
    seen = adapter.forward("sliding_window_attention", onehot, {"window": 2, "softcap": None, "scale": None}) > 0
    assert np.array_equal(seen, np.broadcast_to(window_mask(lq, lk, 2, "bottom_right", "inclusive"), seen.shape))

    dtype = fmt("float32")
    inputs = {"q": fill(dtype, (1, 2, lq, 4), 1.0, 0), "k": fill(dtype, (1, 1, lk, 4), 1.0, 1)}
    c = Case(inputs | {"v": fill(dtype, (1, 1, lk, 3), 1.0, 2)}, {"window": 2, "softcap": None, "scale": None})
    record = Record("swa", "sliding_window_attention", "", "")
    with outside_hypothesis():
        check_forward(adapter, "sliding_window_attention", c, dtype, record)
        check_vjp(adapter, "sliding_window_attention", c, fill(dtype, (1, 2, lq, 3), 1.0, 3), dtype, record)
    conv = adapter.conventions
    for wrong in (replace(conv, sliding_window="exclusive"), replace(conv, causal_alignment="top_left")):
        adapter.conventions = wrong
        with outside_hypothesis(), pytest.raises(CheckFailure, match="should be"):
            check_forward(adapter, "sliding_window_attention", c, dtype, record)


def test_softcapped_window_refused() -> None:
    adapter = load_adapter("mlx")
    c = case("sliding_window_attention", fmt("float32"), choice="tanh")
    with pytest.raises(ValueError, match="no soft-cap"):
        adapter.forward("sliding_window_attention", c.inputs, c.params)


@pytest.mark.parametrize("dtype_name", DTYPES)
@pytest.mark.parametrize(
    ("causal", "window"), [(True, None), (False, None), (True, 2)], ids=["causal", "full", "window"]
)
def test_sinks_forward_and_gradient(dtype_name: str, causal: bool, window: int | None) -> None:
    """``sinks=`` joins one logit per query head (GQA: 4 query heads on 2 KV heads) to the softmax: against the
    oracle, and its gradient with respect to the sinks too (mx.vjp through the CPU fallback)."""
    dtype = fmt(dtype_name)
    inputs = {
        "q": fill(dtype, (1, 4, 3, 8), 1.0, 0),
        "k": fill(dtype, (1, 2, 5, 8), 1.0, 1),
        "v": fill(dtype, (1, 2, 5, 3), 1.0, 2),
        "sinks": fill(dtype, (4,), 1.0, 3),
    }
    c = Case(inputs, {"causal": causal, "window": window, "scale": None})
    adapter, record = load_adapter("mlx"), Record("sinks", "sink_attention", "", "")
    with outside_hypothesis():
        check_forward(adapter, "sink_attention", c, dtype, record)
        check_vjp(adapter, "sink_attention", c, fill(dtype, (1, 4, 3, 3), 1.0, 4), dtype, record)
    grads = adapter.vjp("sink_attention", c.inputs, c.params, fill(dtype, (1, 4, 3, 3), 1.0, 4))
    assert np.all(np.isfinite(grads["sinks"].astype(np.float64))) and np.any(grads["sinks"] != 0)


def test_a_sink_of_minus_infinity_is_plain_attention() -> None:
    """σ = −∞ takes no weight: the kernel's sink path gives its causal attention."""
    dtype = fmt("float32")
    inputs = {"q": fill(dtype, (1, 2, 3, 4), 1.0, 0), "k": fill(dtype, (1, 1, 4, 4), 1.0, 1)}
    inputs["v"] = fill(dtype, (1, 1, 4, 2), 1.0, 2)
    adapter = load_adapter("mlx")
    plain = adapter.forward("attention", inputs, {"causal": True, "softcap": None, "scale": None})
    sunk = adapter.forward(
        "sink_attention",
        inputs | {"sinks": np.full((2,), -np.inf, np.float32)},
        {"causal": True, "window": None, "scale": None},
    )
    np.testing.assert_array_equal(sunk, plain)

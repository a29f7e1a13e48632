"""The mlx built-in adapter loads, refuses MLX versions it was not measured on, declares what it calls, passes a
smoke subset, and is held to what it declares (the RoPE layout it hands mx.fast.rope, its causal alignment)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

pytest.importorskip("mlx.core")

from tests.adapter_smoke import case, outside_hypothesis, smoke
from transformer_conformance.adapters.registry import load_adapter
from transformer_conformance.conformance.harness.compare import CheckFailure, Record, check_forward
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


def test_declarations() -> None:
    adapter = load_adapter("mlx")
    assert set(adapter.capabilities) == {
        "rms_norm",
        "layer_norm",
        "rope",
        "rope_scaled",
        "attention",
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
    env = adapter.environment()
    assert env["mlx"].startswith("0.32.") and "cpu" in env["device"]


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

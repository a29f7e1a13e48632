"""The unsloth built-in adapter loads, runs Unsloth's Triton kernels (under Triton's interpreter on the CPU), passes a
smoke subset and is held to its declarations: half-split RoPE pairs, RMSNorm's rounding before the weight, the
interpreter bridges it needs (pinned, so that a fixed release is noticed)."""

from __future__ import annotations

from dataclasses import replace
from importlib.util import find_spec
from typing import Any

import pytest

# not importorskip: importing triton or unsloth here, before the adapter module, would define their kernels for
# compilation (tests/conftest.py switches the interpreter on first)
if find_spec("unsloth") is None or find_spec("triton") is None:
    pytest.skip("unsloth and triton are not installed", allow_module_level=True)

from tests.adapter_smoke import assert_default_eps, case, outside_hypothesis, smoke
from transformer_conformance.adapters.versions import UnsupportedVersion
from transformer_conformance.conformance.harness.compare import CheckFailure, Record, check_forward
from transformer_conformance.reference.formats import fmt


@pytest.fixture(scope="module")
def adapter() -> Any:
    from transformer_conformance.adapters.unsloth.adapter import UnslothAdapter

    return UnslothAdapter()


def test_smoke(adapter: Any) -> None:
    checked = smoke(adapter, ("float32", "float16"))
    assert "cross_entropy_mean[float16]" in checked and "glu_mlp[float32][gelu_tanh]" in checked
    assert "rope[float16]" in checked and "layer_norm[float32]" in checked


def test_declarations(adapter: Any) -> None:
    from transformer_conformance.adapters.unsloth import adapter as unsloth_adapter

    conv = adapter.conventions
    assert conv.rope_layout == "half" and conv.norm_rounding == "before_weight"
    assert conv.in_place_ops == {"rope"} and conv.unfused == {"rope", "swiglu_mlp", "glu_mlp"}
    assert not adapter.capabilities["glu_mlp"].grad and adapter.capabilities["rms_norm"].grad
    if unsloth_adapter.INTERPRETED:
        assert all(c.dtypes == {"float32", "float16"} and c.interpreted for c in adapter.capabilities.values())
    assert_default_eps(adapter, "rms_norm", 1e-6)
    assert_default_eps(adapter, "layer_norm", 1e-5)


@pytest.mark.parametrize("found", ["2026.9.1", "2026.11.0", "2027.1.1"])
def test_other_versions_refused(found: str) -> None:
    from transformer_conformance.adapters.unsloth.adapter import check_version

    with pytest.raises(UnsupportedVersion, match=f"^unsloth {found} is not supported: the unsloth adapter"):
        check_version(found)
    check_version("2026.10.9")


def test_the_interpreter_bridges_are_still_needed() -> None:
    """``triton_cast`` is ``tl.cast`` itself in Unsloth's kernel modules (the interpreter cannot call it from a
    module's globals) and ``triton_tanh`` libdevice's stub: a release that changes either is noticed here."""
    import triton.language as tl
    import unsloth.kernels.utils as utils

    from transformer_conformance.adapters.unsloth import adapter as unsloth_adapter

    assert utils.triton_cast is tl.cast
    if unsloth_adapter.INTERPRETED:
        bridged = {n for names in unsloth_adapter.BRIDGED.values() for n in names}
        assert bridged == {"triton_cast", "triton_tanh"}


def test_rope_layout_is_half(adapter: Any) -> None:
    """Declared interleaved instead, the same kernel fails rope/forward: it pairs (i, i + d/2)."""
    dtype = fmt("float32")
    c = case("rope", dtype)
    other = type(adapter).__new__(type(adapter))
    other.__dict__.update(adapter.__dict__)
    other.conventions = replace(adapter.conventions, rope_layout="interleaved")
    with outside_hypothesis():
        check_forward(adapter, "rope", c, dtype, Record("rope", "rope", "", ""))
        with pytest.raises(CheckFailure):
            check_forward(other, "rope", c, dtype, Record("rope", "rope", "", ""))


def test_rope_writes_into_one_head_s_q(adapter: Any) -> None:
    """``in_place_ops`` rope: with one head the kernel's [batch, T, heads, d] view of Q is contiguous and it rotates Q
    itself; with two it writes a fresh buffer."""
    import torch

    for heads, written in ((1, True), (2, False)):
        x = torch.linspace(-1, 1, heads * 4 * 8).reshape(heads, 4, 8)
        before = x.clone()
        out = adapter.rope(x, torch.arange(4), 10000.0, None)
        assert (not torch.equal(x, before)) is written
        assert torch.equal(out, x) is written

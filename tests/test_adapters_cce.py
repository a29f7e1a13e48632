"""The Cut Cross-Entropy built-in adapters (``cce``, ``cce-torch-compile``) load, declare what
cut-cross-entropy 25.1 does, pass a smoke subset, and refuse what they cannot run (docs/adapters.md, "cce")."""

from __future__ import annotations

from importlib.util import find_spec

import numpy as np
import pytest

# not importorskip: importing triton or cut_cross_entropy here, before the adapter module, would define the
# kernels for compilation, where the adapter needs Triton's interpreter on a machine without a GPU
if find_spec("cut_cross_entropy") is None or find_spec("triton") is None:
    pytest.skip("cut-cross-entropy and triton are not installed", allow_module_level=True)

from tests.adapter_smoke import smoke
from transformer_conformance.adapters.registry import load_adapter
from transformer_conformance.adapters.versions import SUPPORTED, UnsupportedVersion, require


def test_smoke_kernels() -> None:
    adapter = load_adapter("cce")
    assert adapter.name == "cce" and set(adapter.capabilities) == {"linear_cross_entropy"}
    assert smoke(adapter, ("float32", "bfloat16", "float16")) == [
        "linear_cross_entropy[float16][mean]",
        "linear_cross_entropy[float16][none]",
    ]


@pytest.mark.slow  # torch.compile builds a graph per dtype and reduction, forward and backward
def test_smoke_torch_compile() -> None:
    adapter = load_adapter("cce-torch-compile")
    assert len(smoke(adapter, ("float32", "float16"))) == 4


def test_declarations() -> None:
    from transformer_conformance.adapters.cce import adapter as cce_adapter

    kernels, compiled = load_adapter("cce"), load_adapter("cce-torch-compile")
    op = "linear_cross_entropy"
    assert cce_adapter.INTERPRETED  # no CUDA here: the kernels run under Triton's interpreter
    assert kernels.capabilities[op].dtypes == {"float16"}  # the interpreter's bfloat16 is wrong; no float32 grad
    assert kernels.conventions.unfused == {f"{op}.vjp"} == kernels.conventions.low_precision_sums
    assert not kernels.conventions.exp_via_exp2 and not kernels.conventions.nondeterministic  # compiled only
    assert compiled.capabilities[op].dtypes == {"float32", "bfloat16", "float16"}
    assert compiled.capabilities[op].compiles == "per_shape" and kernels.capabilities[op].compiles == "no"
    assert compiled.conventions.unfused == {op}
    env = kernels.environment()
    assert env["cut-cross-entropy"].startswith("25.1") and env["triton mode"].startswith("interpreter")
    assert "tl_libdevice.log1p" in env["interpreter bridges"]
    assert compiled.environment()["impl"] == "torch_compile"


def test_the_bias_is_a_column_of_the_classifier() -> None:
    import torch

    from transformer_conformance.adapters.cce.adapter import with_bias_column

    x, w, b = torch.randn(5, 3), torch.randn(7, 3), torch.randn(7)
    e, c = with_bias_column(x, w, b)
    assert e.shape == (5, 4) and c.shape == (7, 4)
    torch.testing.assert_close(e @ c.T, x @ w.T + b)


def test_float32_backward_is_still_refused_upstream() -> None:
    """Why ``cce`` declares no float32: its backward asserts 16-bit embeddings. When this fails, declare it."""
    import torch
    from cut_cross_entropy import linear_cross_entropy

    e = torch.randn(4, 8, requires_grad=True)
    c = torch.randn(16, 8, requires_grad=True)
    loss = linear_cross_entropy(e, c, torch.tensor([1, 2, 3, 4]), impl="cce")
    with pytest.raises(AssertionError, match="Backwards requires embeddings to be bf16 or fp16"):
        loss.backward()


def test_all_ignored_mean_is_nan() -> None:
    """With every token ignored the mean is over no token: NaN, as declared (not zero_when_all_ignored)."""
    adapter = load_adapter("cce")
    rng = np.random.default_rng(0)
    inputs = {
        "x": rng.standard_normal((4, 8)).astype(np.float16),
        "weight": rng.standard_normal((16, 8)).astype(np.float16),
        "bias": np.zeros(16, dtype=np.float16),
        "targets": np.full(4, -100, dtype=np.int64),
    }
    got = adapter.forward("linear_cross_entropy", inputs, {"ignore_index": -100, "reduction": "mean"})
    assert np.isnan(got) and "linear_cross_entropy" not in adapter.conventions.zero_when_all_ignored


def test_other_releases_are_refused_in_one_line() -> None:
    versions = {"cut-cross-entropy": "24.12.3", "triton": "3.9.0", "torch": "2.13.0"}
    with pytest.raises(UnsupportedVersion, match=r"^cut-cross-entropy 24\.12\.3 is not supported: the cce adapter"):
        require("cce", SUPPORTED["cce"], versions)

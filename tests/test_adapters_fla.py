"""The flash-linear-attention adapters (``fla``, ``fla-interleaved``) load, declare what fla 0.6 does, pass a
smoke subset, are held to their declarations, and refuse what they cannot run (docs/adapters.md, "fla")."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import replace
from importlib.util import find_spec
from pathlib import Path

import numpy as np
import pytest

# not importorskip: importing triton or fla here, before the adapter module, would define the kernels for
# compilation, where the adapter needs Triton's interpreter on a machine without a GPU
if find_spec("fla") is None or find_spec("triton") is None:
    pytest.skip("flash-linear-attention and triton are not installed", allow_module_level=True)

from tests.adapter_smoke import case, outside_hypothesis, smoke
from transformer_conformance.adapters.registry import load_adapter
from transformer_conformance.adapters.versions import UnsupportedVersion, require
from transformer_conformance.conformance.harness.compare import CheckFailure, Record, check_forward
from transformer_conformance.conformance.strategies.common import Case, fill
from transformer_conformance.reference.formats import fmt

ROOT = Path(__file__).resolve().parent.parent
#: the adapters by import path (built-in names once registered: "fla", "fla-interleaved")
FLA = "transformer_conformance.adapters.fla.adapter:FlaAdapter"
FLA_INTERLEAVED = "transformer_conformance.adapters.fla.adapter:FlaInterleavedAdapter"


def _record(op: str) -> Record:
    return Record(op, op, "", "")


def test_smoke() -> None:
    adapter = load_adapter(FLA)
    assert adapter.name == "fla"
    checked = smoke(adapter, ("float32", "bfloat16", "float16"))
    assert len(checked) == 22 and {"linear_cross_entropy[float16][mean]", "glu_mlp[float32][silu]"} <= set(checked)
    assert not any("bfloat16" in c for c in checked)  # interpreted here: no bfloat16 declared


def test_declarations() -> None:
    from transformer_conformance.adapters.fla import adapter as fla_adapter

    adapter = load_adapter(FLA)
    conv, caps = adapter.conventions, adapter.capabilities
    assert fla_adapter.INTERPRETED  # no CUDA here: the kernels run under Triton's interpreter
    assert conv.rope_layout == "half" and conv.norm_rounding == "single" and conv.variance == "two_pass"
    assert conv.eps_defaults == {"rms_norm": 1e-5, "layer_norm": 1e-5}
    assert conv.unfused == {"rope", "swiglu_mlp", "glu_mlp", "linear_cross_entropy"}
    assert conv.grad_in_forward == conv.zero_when_all_ignored == {"linear_cross_entropy"}
    assert not conv.in_place_ops and not conv.low_precision_sums
    assert not conv.exp_via_exp2 and not conv.nondeterministic  # exp2 only where compiled
    assert set(caps) == {
        "rms_norm",
        "layer_norm",
        "rope",
        "swiglu_mlp",
        "glu_mlp",
        "cross_entropy",
        "cross_entropy_mean",
        "z_loss",
        "softcap_z_loss",
        "z_loss_mean",
        "linear_cross_entropy",
    }
    assert all(c.dtypes == {"float32", "float16"} and c.interpreted for c in caps.values())
    assert not caps["z_loss"].grad and not caps["softcap_z_loss"].grad and not caps["z_loss_mean"].grad
    assert caps["glu_mlp"].values == {"activation": {"silu"}}
    assert caps["linear_cross_entropy"].values == {"reduction": {"mean"}}
    assert caps["rms_norm"].autocast == {"float16"} and caps["rope"].autocast == {"float16"}
    env = adapter.environment()
    assert env["flash-linear-attention"].startswith("0.6") and env["fla-core"].startswith("0.6")
    assert env["triton mode"].startswith("interpreter") and "libdevice tanh" in env["interpreter bridges"]
    assert env["untimed autotuning"].startswith(f"{len(fla_adapter.UNTIMED)} kernels")


def test_interleaved_layout_is_the_kernels_other_branch() -> None:
    """``fla-interleaved`` (RotaryEmbedding(interleaved=True)) passes as interleaved and fails declared half."""
    adapter, dtype = load_adapter(FLA_INTERLEAVED), fmt("float32")
    assert set(adapter.capabilities) == {"rope"} and adapter.conventions.rope_layout == "interleaved"
    assert smoke(adapter, ("float32", "float16")) == ["rope[float32]", "rope[float16]"]
    c = case("rope", dtype)
    adapter.conventions = replace(adapter.conventions, rope_layout="half")
    with outside_hypothesis(), pytest.raises(CheckFailure, match="rope output"):
        check_forward(adapter, "rope", c, dtype, _record("rope"))


def test_rope_tables_in_the_input_dtype_are_enforced() -> None:
    """The rotary kernel asserts cos and sin in x's dtype: declared ``unfused`` rope it passes in float16; declared
    as one rounding it fails (measured)."""
    adapter, dtype = load_adapter(FLA), fmt("float16")
    c = case("rope", dtype, seed=0)
    with outside_hypothesis():
        check_forward(adapter, "rope", c, dtype, _record("rope"))
    adapter.conventions = replace(adapter.conventions, unfused=adapter.conventions.unfused - {"rope"})
    with outside_hypothesis(), pytest.raises(CheckFailure, match="rope output"):
        check_forward(adapter, "rope", c, dtype, _record("rope"))


def test_cos_sin_are_the_rows_of_the_modules_cache() -> None:
    """The tables handed to the kernel are RotaryEmbedding's own cache rows at the call's positions."""
    import torch

    from transformer_conformance.adapters.fla.adapter import RotaryEmbedding, cos_sin

    rotary = RotaryEmbedding(dim=8, base=500000.0)
    rotary._update_cos_sin_cache(4100, dtype=torch.float16)
    positions = torch.tensor([3, 4, 4095, 4099])
    cos, sin = cos_sin(positions, 8, 500000.0, torch.float16)
    assert torch.equal(cos, rotary._cos_cached[positions]) and torch.equal(sin, rotary._sin_cached[positions])


def test_autotuning_needs_the_bridge_under_the_interpreter() -> None:
    """Why this adapter bridges fla's autotuners: under the interpreter the autotuner's default benchmark asks for a
    GPU driver there is none of. When this stops failing, drop the bridge (untimed_autotuning)."""
    import torch

    from transformer_conformance.adapters.fla import adapter as fla_adapter

    if not fla_adapter.INTERPRETED:
        pytest.skip("compiled kernels are timed on the GPU")
    kernel = fla_adapter.fla_layernorm.layer_norm_fwd_kernel
    bridged = kernel._do_bench
    kernel._do_bench = None
    kernel.__dict__.pop("do_bench", None)
    try:
        x, w = torch.randn(3, 24), torch.ones(24)  # a width no other test uses: a new autotuning key
        with pytest.raises(RuntimeError, match="0 active drivers"):
            fla_adapter.fla_layernorm.rms_norm(x, w, None, eps=1e-5)
    finally:
        kernel._do_bench = bridged
        kernel.__dict__.pop("do_bench", None)
        kernel.cache.clear()
    assert "fla.modules.norm.layernorm.layer_norm_fwd_kernel" in fla_adapter.UNTIMED


def test_the_library_refuses_what_is_not_declared() -> None:
    """FusedCrossEntropyLoss.forward refuses CPU tensors (the adapter runs its body on the CPU); the fused linear
    loss has no per-token reduction (``linear_cross_entropy`` declares ``mean`` only)."""
    import torch
    from fla.modules import FusedCrossEntropyLoss, FusedLinearCrossEntropyLoss

    with pytest.raises(AssertionError, match="Only support CUDA/NPU/XPU tensors"):
        FusedCrossEntropyLoss()(torch.randn(2, 5), torch.tensor([1, 2]))
    with pytest.raises(AssertionError, match="reduction: none is not supported"):
        FusedLinearCrossEntropyLoss(reduction="none")


def test_means_over_no_valid_token() -> None:
    """Every token ignored: the fused linear loss clamps its count to 1 (0, declared zero_when_all_ignored); the
    z-loss mean of FusedCrossEntropyLoss divides by 0 (NaN, not declared)."""
    adapter, dtype = load_adapter(FLA), fmt("float16")
    targets = np.full(4, -100, dtype=np.int64)
    inputs = {
        "x": fill(dtype, (4, 8), 1.0, 1),
        "weight": fill(dtype, (16, 8), 1.0, 2),
        "bias": fill(dtype, (16,), 1.0, 3),
        "targets": targets,
    }
    got = adapter.forward("linear_cross_entropy", inputs, {"ignore_index": -100, "reduction": "mean"})
    assert got == 0 and "linear_cross_entropy" in adapter.conventions.zero_when_all_ignored
    z = adapter.forward("z_loss_mean", {"logits": fill(dtype, (4, 16), 1.0, 4), "targets": targets}, {"alpha": 1e-4})
    assert np.isnan(z) and "z_loss_mean" not in adapter.conventions.zero_when_all_ignored


def test_other_releases_are_refused_in_one_line() -> None:
    from transformer_conformance.adapters.fla.adapter import SUPPORTED_FLA

    versions = {"flash-linear-attention": "0.5.0", "fla-core": "0.5.0", "triton": "3.9.0", "torch": "2.13.0"}
    with pytest.raises(UnsupportedVersion, match=r"^flash-linear-attention 0\.5\.0 is not supported: the fla adapter"):
        require("fla", SUPPORTED_FLA, versions)
    require("fla", SUPPORTED_FLA, versions | {"flash-linear-attention": "0.6.0", "fla-core": "0.6.0"})


def test_rope_writes_nothing_into_its_inputs() -> None:
    """``inplace=False`` (the module's call): the kernel writes a fresh output, its backward a clone of ∂L/∂y."""
    adapter, dtype = load_adapter(FLA), fmt("float32")
    rope = Case({"x": fill(dtype, (1, 4, 8), 1.0, 3), "positions": np.arange(4, dtype=np.int64)}, {"base": 1e4})
    x = rope.inputs["x"].copy()
    cot = fill(dtype, (1, 4, 8), 1.0, 5)
    kept = cot.copy()
    adapter.forward("rope", rope.inputs, rope.params)
    adapter.vjp("rope", rope.inputs, rope.params, cot)
    assert np.array_equal(rope.inputs["x"], x) and np.array_equal(cot, kept)


@pytest.mark.slow  # a fresh interpreter imports fla (seconds)
def test_cpu_refused_once_triton_was_imported_compiled() -> None:
    """Triton imported before the adapter without the interpreter: fla's kernels are defined for compilation and
    the CPU is refused in one line."""
    import torch

    if torch.cuda.is_available():
        pytest.skip("with CUDA the kernels compile")
    code = (
        "import triton\n"
        "from transformer_conformance.adapters.fla.adapter import FlaAdapter\n"
        "try:\n    FlaAdapter()\nexcept RuntimeError as e:\n    print(e)\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"} | {"PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    lines = out.stdout.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("flash-linear-attention's kernels were defined for compilation")

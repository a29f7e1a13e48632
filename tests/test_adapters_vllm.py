"""The vllm built-in adapters load, declare what vLLM's forward_native paths do, pass a smoke subset, and are held to
their declarations: half-split (Neox) and adjacent (GPT-J, DeepSeek) RoPE pairs, RMSNorm's rounding before the weight,
ε 1e-6, the table rows the adapter builds for far positions; the library defect listed in expectations/vllm.toml is
pinned so that a fixed release is noticed."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

pytest.importorskip("vllm.model_executor.layers.rotary_embedding")

import torch

from tests.adapter_smoke import assert_default_eps, case, outside_hypothesis, smoke
from transformer_conformance.adapters.versions import UnsupportedVersion
from transformer_conformance.adapters.vllm import rope
from transformer_conformance.adapters.vllm.adapter import SUPPORTED, VllmAdapter, VllmDeepseekAdapter, check_version
from transformer_conformance.conformance.harness.compare import CheckFailure, Record, check_forward
from transformer_conformance.conformance.strategies.common import fill
from transformer_conformance.reference.formats import fmt


@pytest.fixture(scope="module")
def adapter() -> VllmAdapter:
    return VllmAdapter()


@pytest.fixture(scope="module")
def deepseek() -> VllmDeepseekAdapter:
    return VllmDeepseekAdapter()


def test_smoke(adapter: VllmAdapter, deepseek: VllmDeepseekAdapter) -> None:
    """Every declared operation and choice but dynamic NTK (the listed defect), forward only."""
    narrowed = VllmAdapter.__new__(VllmAdapter)
    narrowed.__dict__.update(adapter.__dict__)
    caps = dict(adapter.capabilities)
    caps["rope_scaled"] = replace(caps["rope_scaled"], values={"scaling.type": frozenset({"linear", "llama3", "yarn"})})
    narrowed.capabilities = caps
    checked = smoke(narrowed, ("float32", "bfloat16"))
    assert "rope_scaled[bfloat16][yarn]" in checked and "mrope[float32][interleaved]" in checked
    assert "glu_mlp[bfloat16][gelu_tanh]" in checked and "rms_norm[bfloat16]" in checked
    assert "rope_scaled[float32][yarn]" in smoke(deepseek, ("float32",))


def test_declarations(adapter: VllmAdapter, deepseek: VllmDeepseekAdapter) -> None:
    conv = adapter.conventions
    assert conv.rope_layout == "half" and conv.norm_rounding == "before_weight"
    assert conv.unfused == {"rope", "rope_scaled", "mrope", "swiglu_mlp", "glu_mlp"}
    assert not any(c.grad for c in adapter.capabilities.values())  # vLLM has no backward
    assert adapter.capabilities["rope_scaled"].values == {"scaling.type": {"linear", "llama3", "yarn", "dynamic"}}
    assert deepseek.conventions.rope_layout == "interleaved"
    assert set(deepseek.capabilities) == {"rope", "rope_scaled"}


def test_rms_norm_default_eps_is_vllm_s(adapter: VllmAdapter) -> None:
    from vllm.model_executor.layers.layernorm import RMSNorm

    from transformer_conformance.adapters.vllm.runtime import building

    with building():
        assert RMSNorm(8).variance_epsilon == 1e-6
    assert_default_eps(adapter, "rms_norm", 1e-6)


@pytest.mark.parametrize("found", ["0.33.0", "0.35.0", "1.0.0", "nightly"])
def test_other_versions_refused(found: str) -> None:
    with pytest.raises(UnsupportedVersion, match=f"^vllm {found} is not supported: the vllm adapter"):
        check_version(found)
    check_version("0.34.0")
    check_version("0.34.1")
    assert str(SUPPORTED[1]) == "torch >= 2.13, < 2.14"


def _fails_when_declared(adapter: VllmAdapter, op: str, dtype_name: str, seeds: range, **conventions: str) -> None:
    """The adapter passes ``op`` at these seeds; declared otherwise, the same code fails at one of them at least."""
    dtype = fmt(dtype_name)
    other = type(adapter).__new__(type(adapter))
    other.__dict__.update(adapter.__dict__)
    other.conventions = replace(adapter.conventions, **conventions)
    failed = 0
    with outside_hypothesis():
        for seed in seeds:
            c = case(op, dtype, seed=seed)
            check_forward(adapter, op, c, dtype, Record(op, op, "", ""))
            try:
                check_forward(other, op, c, dtype, Record(op, op, "", ""))
            except CheckFailure:
                failed += 1
    assert failed, f"{op} passes with {conventions} too"


def test_rope_layouts(adapter: VllmAdapter, deepseek: VllmDeepseekAdapter) -> None:
    """is_neox_style=True pairs (i, i + d/2), False (DeepSeek's) adjacent pairs: the other declaration fails."""
    _fails_when_declared(adapter, "rope", "float32", range(1), rope_layout="interleaved")
    _fails_when_declared(deepseek, "rope", "float32", range(1), rope_layout="half")


def test_rms_norm_rounds_before_the_weight(adapter: VllmAdapter) -> None:
    """vLLM IR's rms_norm casts x·rsqrt(…) to the weight's dtype before the multiply: one rounding fails."""
    _fails_when_declared(adapter, "rms_norm", "bfloat16", range(6), norm_rounding="single")


@pytest.mark.parametrize(
    "scaling",
    [
        None,
        {"type": "linear", "factor": 2.0},
        {"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 65536, "beta_fast": 32, "beta_slow": 1},
    ],
)
def test_far_positions_get_the_whole_table_s_rows(scaling: dict | None) -> None:
    """Past 2^17 rows the adapter builds the rows of the call's positions only: bit for bit the whole table's."""
    far = rope.WHOLE_TABLE + 5
    positions = torch.tensor([far, 3, 255, 3, 1000])
    params, max_position, rows = rope.rope_parameters(32, 32, 10000.0, scaling)
    x = torch.from_numpy(fill(fmt("bfloat16"), (2, 5, 32), 1.0, 0).astype(np.float32)).to(torch.bfloat16)
    few = rope.vllm_rope(x, positions, 10000.0, None, scaling)
    whole = rope.rotate(x, positions, params, max_position, rows, True, whole=True)
    assert torch.equal(few, whole)


def test_dynamic_ntk_is_plain_rope_with_a_table_of_the_trained_length() -> None:
    """The listed defect (expectations/vllm.toml): DynamicNTKScalingRotaryEmbedding, built as a model builds it, holds
    L rows of plain RoPE (its base never scaled) and raises past them, where the engine admits L·s positions."""
    rule = {"type": "dynamic", "factor": 4.0, "original_max_position_embeddings": 32}
    dynamic, max_position, _ = rope.rope_parameters(16, 16, 10000.0, rule)
    plain, _, _ = rope.rope_parameters(16, 16, 10000.0, None)
    module = rope.build(16, int(max_position or 0), torch.float32, dynamic, True)
    assert torch.equal(module.cos_sin_cache, rope.build(16, 32, torch.float32, plain, True).cos_sin_cache)
    q = torch.ones(1, 16)
    with pytest.raises(IndexError):
        module.forward_native(torch.tensor([32]), q, q.clone())

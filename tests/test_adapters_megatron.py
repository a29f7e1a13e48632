"""The megatron built-in adapter loads, declares what Megatron-Core's CPU paths do, passes a smoke subset, and is held
to its declarations: half-split RoPE pairs, the table's rows, Llama 3's bands, the cross-entropy's in-place writes,
the load-balancing fraction per assignment, the compiled activations; what it leaves undeclared is pinned to the
library's behaviour, and the library defect it lists (expectations/megatron.toml) is pinned so that a fixed release
is noticed."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

pytest.importorskip("megatron.core")

import torch

from tests.adapter_smoke import (
    assert_default_eps,
    assert_rms_norm_keeps_the_input_dtype,
    case,
    outside_hypothesis,
    smoke,
)
from transformer_conformance.adapters.contract import Capability
from transformer_conformance.adapters.megatron.adapter import SUPPORTED, MegatronAdapter, check_version
from transformer_conformance.adapters.megatron.rope import rotary_module, rows
from transformer_conformance.adapters.megatron.runtime import compiled, on_cpu
from transformer_conformance.adapters.versions import UnsupportedVersion
from transformer_conformance.conformance.harness.compare import CheckFailure, Record, check_forward
from transformer_conformance.conformance.strategies.common import fill
from transformer_conformance.reference.formats import fmt

#: the operations whose modules compile (jit_fuser): their smoke runs in a test of its own, marked slow
COMPILED = ("swiglu_mlp", "glu_mlp", "mlp")


@pytest.fixture(scope="module")
def adapter() -> MegatronAdapter:
    return MegatronAdapter()


def _smoke(adapter: MegatronAdapter, ops: dict[str, Capability]) -> list[str]:
    narrowed = MegatronAdapter.__new__(MegatronAdapter)
    narrowed.__dict__.update(adapter.__dict__)
    narrowed.capabilities = ops
    return smoke(narrowed, ("float32", "bfloat16"))


def test_smoke(adapter: MegatronAdapter) -> None:
    """Every declared operation that does not compile, but learned positions (not in the smoke cases) and YaRN (the
    smoke case rotates 8 of 16 features: the listed defect)."""
    caps = {op: c for op, c in adapter.capabilities.items() if op not in (*COMPILED, "learned_positions")}
    caps["rope_scaled"] = Capability(values={"scaling.type": frozenset({"linear", "llama3"})})
    checked = _smoke(adapter, caps)
    assert "rope_scaled[bfloat16][llama3]" in checked and "mrope[float32][sections]" in checked
    assert "moe_router[bfloat16][factor]" in checked and "moe_aux_loss[bfloat16]" in checked
    assert "cross_entropy[float32]" in checked and "moe_z_loss[float32]" in checked


@pytest.mark.slow
def test_smoke_compiled_mlps(adapter: MegatronAdapter) -> None:
    """The MLPs, whose activations Megatron-Core compiles (torch.compile: seconds a graph on the CPU)."""
    checked = _smoke(adapter, {op: adapter.capabilities[op] for op in COMPILED})
    assert "glu_mlp[bfloat16][gelu_tanh]" in checked and "mlp[bfloat16][relu_squared]" in checked


def test_declarations(adapter: MegatronAdapter) -> None:
    conv = adapter.conventions
    assert conv.rope_layout == "half" and conv.rope_angle_dtype == "float32" and conv.norm_rounding == "single"
    assert conv.eps_defaults == {"rms_norm": 1e-5, "layer_norm": 1e-5}
    assert conv.aux_loss_fraction == "per_assignment" and conv.in_place_ops == {"cross_entropy"}
    caps = adapter.capabilities
    assert caps["rope_scaled"].values == {"scaling.type": {"linear", "llama3", "yarn"}}
    assert caps["moe_router"].values == {
        "score": {"softmax"},
        "norm": {"none", "topk"},
        "selection": {"top_k"},
        "routed_scaling": {"none", "factor"},
    }
    assert caps["rope"].autocast == {"bfloat16", "float16"} and not caps["swiglu_mlp"].autocast
    assert "attention" not in caps and "block" not in caps and "cross_entropy_mean" not in caps
    env = adapter.environment()
    assert env["megatron-core"].startswith("0.16.") and env["supports"].startswith("megatron-core >= 0.16, < 0.17")


def test_config_default_is_the_declared_eps(adapter: MegatronAdapter) -> None:
    from megatron.core.transformer import TransformerConfig

    assert TransformerConfig(num_layers=1, hidden_size=8, num_attention_heads=1).layernorm_epsilon == 1e-5
    assert_default_eps(adapter, "rms_norm", 1e-5)
    assert_default_eps(adapter, "layer_norm", 1e-5)
    assert_rms_norm_keeps_the_input_dtype(adapter)


@pytest.mark.parametrize("found", ["0.15.3", "0.17.0", "1.0.0", "nightly"])
def test_other_versions_refused(found: str) -> None:
    with pytest.raises(UnsupportedVersion, match=f"^megatron-core {found} is not supported: the megatron adapter"):
        check_version(found)
    check_version("0.16.1")
    check_version("0.16.2rc0")
    assert str(SUPPORTED[1]) == "torch >= 2.13, < 2.14"


def test_rope_layout_is_half(adapter: MegatronAdapter) -> None:
    """Declared interleaved instead, the same code fails rope/forward: _rotate_half pairs (i, i + d/2)."""
    dtype = fmt("float32")
    c = case("rope", dtype)
    other = MegatronAdapter.__new__(MegatronAdapter)
    other.__dict__.update(adapter.__dict__)
    with outside_hypothesis():
        check_forward(adapter, "rope", c, dtype, Record("rope", "rope", "", ""))
        other.conventions = replace(adapter.conventions, rope_layout="interleaved")
        with pytest.raises(CheckFailure):
            check_forward(other, "rope", c, dtype, Record("rope", "rope", "", ""))


@pytest.mark.parametrize(
    "scaling",
    [(), (("factor", 4.0), ("type", "linear")), (("factor", 8.0), ("type", "llama3"))],
)
def test_far_positions_are_the_whole_table_s_rows(scaling: tuple) -> None:
    """Past 2^16 positions the adapter builds each row alone (forward(1, offset=p)): bit for bit the table's rows."""
    module = rotary_module(64, 64, 500000.0, False, scaling)
    positions = torch.tensor([69_999, 3, 65_537, 3, 12_345])
    with on_cpu():
        table = module(70_000)
    far, mscale = rows(module, positions)
    assert torch.equal(far, table[positions]) and mscale == 1.0


def test_llama3_bands_at_llama_3_1_s_values_are_the_constructor_s() -> None:
    """The adapter's _apply_scaling call with (1, 4, 8192) is what RotaryEmbedding(rope_scaling=True) computes."""
    from megatron.core.models.common.embeddings.rotary_pos_embedding import RotaryEmbedding

    with on_cpu():
        built = RotaryEmbedding(kv_channels=128, rotary_percent=1.0, rotary_base=500000, rope_scaling=True,
                                rope_scaling_factor=8.0, use_cpu_initialization=True)  # fmt: skip
    ours = rotary_module(128, 128, 500000.0, False, (("factor", 8.0), ("type", "llama3")))
    assert torch.equal(built.inv_freq, ours.inv_freq)


def test_cross_entropy_writes_into_float32_logits() -> None:
    """The in_place_ops declaration: float32 logits are overwritten (.float() is the tensor itself); bfloat16 not."""
    from megatron.core.tensor_parallel import vocab_parallel_cross_entropy

    MegatronAdapter()  # the model-parallel world
    targets = torch.tensor([0, 2])
    for dtype, written in ((torch.float32, True), (torch.bfloat16, False)):
        logits = torch.tensor([[1.0, 2.0, 3.0], [0.5, -1.0, 4.0]], dtype=dtype)
        before = logits.clone()
        vocab_parallel_cross_entropy(logits, targets)
        assert (not torch.equal(logits, before)) == written


def test_aux_loss_counts_assignments(adapter: MegatronAdapter) -> None:
    """f_e over the N·k assignments: HF's per-token loss divided by k."""
    logits = fill(fmt("float32"), (6, 4), 2.0, 5)
    p = torch.softmax(torch.from_numpy(logits).double(), dim=-1)
    chosen = torch.zeros_like(p).scatter(1, p.topk(2, dim=-1).indices, 1.0)
    per_token = 4 * (chosen.mean(0) * p.mean(0)).sum()
    ours = adapter.forward("moe_aux_loss", {"logits": logits}, {"k": 2})
    assert float(ours) == pytest.approx(float(per_token) / 2, rel=1e-6)


def test_sigmoid_scores_are_renormalised_except_at_k_1() -> None:
    """Why sigmoid scores are not declared: neither of the contract's norm values holds for every k."""
    from megatron.core.transformer.moe.moe_utils import topk_routing_with_score_function

    logits = torch.tensor([[0.3, -1.0, 2.0, 0.1]])
    one, _ = topk_routing_with_score_function(logits, 1, score_function="sigmoid")
    two, _ = topk_routing_with_score_function(logits, 2, score_function="sigmoid")
    assert one.sum().item() == pytest.approx(torch.sigmoid(torch.tensor(2.0)).item())  # not 1
    assert two.sum().item() == pytest.approx(1.0)


def test_groups_are_scored_by_k_over_topk_group_experts() -> None:
    """Why groups are not declared: a group's score is the sum of its top k/topk_group scores, not its top two."""
    from megatron.core.transformer.moe.moe_utils import group_limited_topk

    # group 0: one strong expert; group 1: two good ones. Top two: group 1 (1.0 + 1.0 > 1.5 + 0); top one: group 0
    scores = torch.tensor([[1.5, 0.0, 1.0, 1.0]])
    _, top_two = group_limited_topk(scores, topk=2, num_tokens=1, num_experts=4, num_groups=2, group_topk=1)
    _, top_one = group_limited_topk(scores, topk=1, num_tokens=1, num_experts=4, num_groups=2, group_topk=1)
    assert set(top_two[0].tolist()) == {2, 3} and top_one[0].tolist() == [0]  # DeepSeek-V3's rule keeps group 1


@pytest.mark.slow
def test_activations_run_compiled_whatever_ran_before() -> None:
    """compiled(): past dynamo's recompile limit Megatron's fast_gelu would run eagerly in float16, where its tanh
    saturates (0 at −4.36); inside, the compiled graph computes in float32 (−1.13·10⁻⁵)."""
    from megatron.core.activations import fast_gelu

    x = torch.tensor([-4.36, 1.3], dtype=torch.float16)
    with compiled():
        assert fast_gelu(x)[0].item() == pytest.approx(-1.1325e-05, rel=1e-3)
    with torch.compiler.set_stance("force_eager"):
        assert fast_gelu(x)[0].item() == 0.0


def test_known_defect_yarn_ignores_rotary_percent() -> None:
    """expectations/megatron.toml: YarnRotaryEmbedding builds angles for the whole head whatever rotary_percent."""
    from megatron.core.models.common.embeddings.rotary_pos_embedding import RotaryEmbedding
    from megatron.core.models.common.embeddings.yarn_rotary_pos_embedding import YarnRotaryEmbedding

    with on_cpu():
        plain = RotaryEmbedding(kv_channels=16, rotary_percent=0.5, use_cpu_initialization=True)
        yarn = YarnRotaryEmbedding(kv_channels=16, rotary_percent=0.5, use_cpu_initialization=True,
                                   scaling_factor=4.0, original_max_position_embeddings=64)  # fmt: skip
        assert plain(4).shape[-1] == 8
        assert yarn(4)[0].shape[-1] == 16  # 8 once fixed


def test_learned_positions_refuse_past_the_table(adapter: MegatronAdapter) -> None:
    table = fill(fmt("bfloat16"), (4, 8), 1.0, 1)
    rows_ = adapter.forward("learned_positions", {"table": table, "positions": np.array([3, 0])}, {})
    np.testing.assert_array_equal(rows_, table[[3, 0]])
    with pytest.raises(IndexError):
        adapter.forward("learned_positions", {"table": table, "positions": np.array([4])}, {})

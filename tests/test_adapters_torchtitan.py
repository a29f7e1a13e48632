"""The torchtitan adapter loads, declares what torchtitan's model code does, passes a smoke subset, and is held to its
declarations: adjacent (complex) RoPE pairs, the cache's rows, ε 1e-5, the inclusive window; the library defects it
lists (expectations/torchtitan.toml) are pinned here so that a fixed release is noticed."""

from __future__ import annotations

import warnings
from dataclasses import replace

import numpy as np
import pytest

pytest.importorskip("torchtitan")

import torch

from tests.adapter_smoke import assert_default_eps, case, outside_hypothesis, smoke
from transformer_conformance.adapters.contract import Capability, validate
from transformer_conformance.adapters.torchtitan.adapter import FLEX_OPS, TorchtitanAdapter, check_version
from transformer_conformance.conformance.harness.compare import CheckFailure, Record, check_forward
from transformer_conformance.conformance.strategies.common import fill
from transformer_conformance.reference.formats import fmt


@pytest.fixture(scope="module")
def adapter() -> TorchtitanAdapter:
    return TorchtitanAdapter()


def test_contract(adapter: TorchtitanAdapter) -> None:
    validate(adapter, "torchtitan")
    assert adapter.name == "torchtitan"


def test_smoke() -> None:
    """Every declared operation outside FlexAttention (compiled: test_flex_smoke) and the listed defects: the router
    in float32 only (on the CPU it scores in the model's dtype), the chunked loss forward only (its backward drops the
    upstream gradient)."""
    adapter = TorchtitanAdapter()
    caps = {op: cap for op, cap in adapter.capabilities.items() if op not in FLEX_OPS}
    caps["moe_router"] = Capability(dtypes=frozenset({"float32"}))
    caps["linear_cross_entropy"] = replace(caps["linear_cross_entropy"], grad=False)
    del caps["lm_head"]  # the smoke examples have no LM-head case
    adapter.capabilities = caps
    checked = smoke(adapter, ("float32", "bfloat16"))
    assert "rope_scaled[bfloat16][llama3]" in checked and "glu_mlp[float32][silu]" in checked
    assert "moe_router[float32][groups]" in checked and "linear_cross_entropy[bfloat16][mean]" in checked


@pytest.mark.slow  # FlexAttention compiled per operation and dtype: a minute and a half on 2 cores
def test_flex_smoke() -> None:
    adapter = TorchtitanAdapter()
    adapter.capabilities = {op: cap for op, cap in adapter.capabilities.items() if op in FLEX_OPS}
    checked = smoke(adapter, ("float32", "bfloat16"))
    assert "mla_attention[bfloat16][naive]" in checked and "block[float32][pre]" in checked


def test_declarations(adapter: TorchtitanAdapter) -> None:
    conv = adapter.conventions
    assert conv.rope_layout == "interleaved" and conv.rope_angle_dtype == "float32"
    assert conv.norm_rounding == "single" and conv.causal_alignment == "bottom_right"
    assert conv.sliding_window == "inclusive"
    assert conv.eps_defaults == {"rms_norm": 1e-5, "layer_norm": 1e-5}
    caps = adapter.capabilities
    assert caps["rope_scaled"].values == {"scaling.type": {"llama3"}}
    assert caps["glu_mlp"].values == {"activation": {"silu"}}
    assert caps["moe_router"].values == {}  # every value of every choice
    assert caps["linear_cross_entropy"].values == {"reduction": {"mean"}}
    assert all(not caps[op].grad and caps[op].compiles == "per_value" for op in FLEX_OPS)  # no flex backward on CPU
    assert caps["rope"].autocast == {"bfloat16"} and not caps["swiglu_mlp"].autocast
    for missing in ("moe_aux_loss", "moe_z_loss", "sink_attention", "qk_norm_attention", "z_loss", "ffn_hidden_dim"):
        assert missing not in caps
    env = adapter.environment()
    assert env["torchtitan"].startswith("0.3.") and env["supports"].startswith("torchtitan >= 0.3, < 0.4")


def test_config_defaults_are_the_declared_eps() -> None:
    from torchtitan.models.common import LayerNorm, RMSNorm

    assert RMSNorm.Config(normalized_shape=4).eps == 1e-5 and LayerNorm.Config(normalized_shape=4).eps == 1e-5


def test_default_eps(adapter: TorchtitanAdapter) -> None:
    assert_default_eps(adapter, "rms_norm", 1e-5)
    assert_default_eps(adapter, "layer_norm", 1e-5)


@pytest.mark.parametrize("found", ["0.2.2", "0.4.0", "1.0.0", "nightly"])
def test_other_versions_refused(found: str) -> None:
    from transformer_conformance.adapters.versions import UnsupportedVersion

    with pytest.raises(UnsupportedVersion, match=f"^torchtitan {found} is not supported: the torchtitan adapter"):
        check_version(found)
    check_version("0.3.0")
    check_version("0.3.1.dev20260101")


def test_rope_layout_is_interleaved(adapter: TorchtitanAdapter) -> None:
    """Declared half instead, the same code fails rope/forward: ComplexRoPE pairs (2i, 2i + 1)."""
    dtype = fmt("float32")
    c = case("rope", dtype)
    with outside_hypothesis():
        check_forward(adapter, "rope", c, dtype, Record("rope", "rope", "", ""))
        other = TorchtitanAdapter()
        other.conventions = replace(other.conventions, rope_layout="half")
        with pytest.raises(CheckFailure):
            check_forward(other, "rope", c, dtype, Record("rope", "rope", "", ""))


@pytest.mark.parametrize(
    "scaling",
    [
        None,
        {"type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
         "original_max_position_embeddings": 8192},
    ],
)  # fmt: skip
def test_far_positions_are_the_whole_cache_s_rows(scaling: dict | None) -> None:
    """Past 2^16 positions the module's cache holds only the rows asked for: bit for bit the whole cache's rows."""
    from transformer_conformance.adapters.torchtitan.rope import _far_rows, rope_config

    whole = rope_config(16, 70_000, 500000.0, scaling).build().cache
    positions = torch.tensor([69_999, 3, 65_537, 3, 12_345])
    far = _far_rows(16, positions, 500000.0, scaling).cache
    assert torch.equal(far, whole[positions])


def test_param_count_is_llama_2_7b(adapter: TorchtitanAdapter) -> None:
    params = {"vocab": 32000, "hidden": 4096, "intermediate": 11008, "layers": 32, "heads": 32}
    assert int(adapter.forward("param_count", {}, params | {"kv_heads": None, "tied": False})) == 6_738_415_616


@pytest.mark.parametrize("tied", [False, True])
def test_param_count_without_layers(adapter: TorchtitanAdapter, tied: bool) -> None:
    """A model of no layer is its embedding, final norm and (untied) head: get_nparams_and_flops reads layers[0], so
    the adapter counts it by the same expression (the suite draws layers = 0)."""
    params = {"vocab": 32000, "hidden": 4096, "intermediate": 11008, "layers": 0, "heads": 32, "kv_heads": None}
    expected = 32000 * 4096 * (1 if tied else 2) + 4096
    assert int(adapter.forward("param_count", {}, params | {"tied": tied})) == expected


def test_swiglu_hidden_dim_is_llama_3_8b(adapter: TorchtitanAdapter) -> None:
    params = {"d": 4096, "multiple_of": 1024, "ffn_dim_multiplier": 1.3}
    assert int(adapter.forward("swiglu_hidden_dim", {}, params)) == 14336


def _router(score: str, dtype: torch.dtype) -> torch.nn.Module:
    from torchtitan.models.common.config_utils import make_router_config
    from torchtitan.tools.utils import set_default_dtype

    with set_default_dtype(dtype):  # as the trainer builds a model of training.dtype
        router = make_router_config(dim=8, num_experts=8, gate_param_init={}, top_k=2, score_func=score).build()
    with torch.no_grad():
        router.gate.weight.copy_(torch.eye(8))
    return router


def test_known_defect_router_scores_in_the_model_dtype_on_cpu() -> None:
    """expectations/torchtitan.toml: the router's float32 autocast is refused on the CPU, so a bfloat16 model scores
    its experts in bfloat16 — three sigmoid scores tie at 0.99609375 and the wrong pair is selected."""
    x = torch.tensor([[[5.8, 5.9, 6.0, 0.0, 0.0, 0.0, 0.0, 0.0]]])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _, experts, scores = _router("sigmoid", torch.bfloat16)(x.bfloat16())
        _, experts32, scores32 = _router("sigmoid", torch.float32)(x)
    assert scores.dtype == torch.bfloat16 and sorted(experts[0, 0].tolist()) == [0, 1]
    assert scores32.dtype == torch.float32 and sorted(experts32[0, 0].tolist()) == [1, 2]


def test_known_defect_chunked_loss_ignores_the_upstream_gradient() -> None:
    """expectations/torchtitan.toml: (2·loss).backward() gives ChunkedLossWrapper's hidden states and head the
    gradients of loss.backward()."""
    from torchtitan.components.loss import ChunkedLossWrapper
    from torchtitan.models.common.linear import Linear

    torch.manual_seed(0)
    head = Linear.Config(in_features=4, out_features=6).build()
    labels = torch.randint(0, 6, (1, 4))
    grads = []
    for g in (1.0, 2.0):
        h = torch.randn(1, 4, 4, generator=torch.Generator().manual_seed(1), requires_grad=True)
        head.weight.grad = None
        wrapper = ChunkedLossWrapper(ChunkedLossWrapper.Config(num_chunks=2))
        wrapper.set_lm_head(head)
        loss, _ = wrapper(h, labels, torch.tensor(4))
        (g * loss).backward()
        assert h.grad is not None and head.weight.grad is not None
        grads.append((h.grad.clone(), head.weight.grad.clone()))
    assert torch.equal(grads[0][0], grads[1][0]) and torch.equal(grads[0][1], grads[1][1])


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize(("nope", "latent"), [(8, 16), (7, 16), (8, 15)])
def test_known_defect_mla_rope_of_an_odd_stride(nope: int, latent: int, dtype: torch.dtype) -> None:
    """expectations/torchtitan.toml: DeepSeek-V3's attention with an odd qk_nope_head_dim or kv_lora_rank raises in
    float32 (the RoPE's view_as_complex of a strided slice of q or kv); bfloat16 copies the slice (``.float()``)."""
    from torchtitan.models.common import ComplexRoPE, RMSNorm
    from torchtitan.models.common.attention import ScaledDotProductAttention
    from torchtitan.models.common.linear import Linear
    from torchtitan.models.deepseek_v3.model import Attention

    def lin(i: int, o: int) -> Linear.Config:
        return Linear.Config(in_features=i, out_features=o)

    from torchtitan.tools.utils import set_default_dtype

    h, rope, v, dim = 2, 4, 8, 32
    config = Attention.Config(
        n_heads=h, dim=dim, wq=lin(dim, h * (nope + rope)), wkv_a=lin(dim, latent + rope),
        wkv_b=lin(latent, h * (nope + v)), wo=lin(h * v, dim), q_lora_rank=0, kv_lora_rank=latent,
        q_norm=RMSNorm.Config(normalized_shape=1), kv_norm=RMSNorm.Config(normalized_shape=latent),
        qk_nope_head_dim=nope, qk_rope_head_dim=rope, v_head_dim=v, rope=ComplexRoPE.Config(dim=rope, max_seq_len=8),
        inner_attention=ScaledDotProductAttention.Config(),
    )  # fmt: skip
    with set_default_dtype(dtype):  # as the trainer builds a model of training.dtype
        module = config.build()
    x = torch.randn(1, 5, dim, generator=torch.Generator().manual_seed(0)).to(dtype)
    if dtype == torch.float32 and (nope % 2 or latent % 2):
        with pytest.raises(RuntimeError, match="stride divisible by 2"):
            module(x, None)
    else:
        assert module(x, None).shape == (1, 5, dim)


@pytest.mark.slow  # FlexAttention and its block mask compiled: seconds on 2 cores
def test_window_counts_the_query_s_own_token(adapter: TorchtitanAdapter) -> None:
    """A window of 1 sees the query's own token alone: the output is v."""
    dtype = fmt("float32")
    q, k, v = fill(dtype, (1, 2, 4, 8), 1.0, 1), fill(dtype, (1, 1, 4, 8), 1.0, 2), fill(dtype, (1, 1, 4, 3), 1.0, 3)
    out = adapter.forward("sliding_window_attention", {"q": q, "k": k, "v": v}, {"window": 1, "softcap": None})
    np.testing.assert_allclose(out, np.broadcast_to(v, out.shape), rtol=1e-6)


@pytest.mark.slow  # inductor compiles the block masks: seconds on 2 cores
def test_compiled_block_mask_fails_on_cpu() -> None:
    """docs: torchtitan's compiled create_block_mask does not compile on the CPU (torch 2.13's inductor) for the
    packed-document mask of two one-token rows; the adapter builds the same mask uncompiled."""
    from torch.nn.attention.flex_attention import and_masks
    from torchtitan.models.common.attention import (
        create_attention_mask,
        get_causal_mask_mod,
        get_efficient_causal_mask_mod_for_packed_document,
    )

    positions = torch.arange(1).expand(2, 1)
    mod = and_masks(get_causal_mask_mod(), get_efficient_causal_mask_mod_for_packed_document(positions))
    from torch._inductor.exc import InductorError

    with pytest.raises(InductorError, match="VecMask"):
        create_attention_mask(mod, 2, None, 1, 1, device="cpu")

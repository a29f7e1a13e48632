"""The HF model-family adapters (adapters/hf/families) load, pass a smoke subset of what they declare, and
declare what their modeling files do: the pair layout, partial rotary, the norm's rounding, the block, and the local
attention of their models (Mistral's and Gemma 2's sliding window, gpt-oss's sinks, Llama 4's chunks)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
import pytest

pytest.importorskip("transformers")

from tests.adapter_smoke import case, outside_hypothesis, smoke
from transformer_conformance.adapters.registry import EXTRAS, GROUPS, load_adapter
from transformer_conformance.conformance.harness.compare import CheckFailure, Record, check_forward, check_vjp
from transformer_conformance.conformance.strategies.common import Case, fill
from transformer_conformance.reference.formats import fmt
from transformer_conformance.reference.rope import rope

FAMILIES = [
    "hf-gpt-neox",
    "hf-cohere",
    "hf-phi3",
    "hf-gemma2",
    "hf-olmo2",
    "hf-qwen3",
    "hf-mistral",
    "hf-gpt-oss",
    "hf-llama4",
]
#: the block placement each family's decoder layer has (None: its block is not the contract's)
BLOCKS = {"hf-phi3": "pre", "hf-mistral": "pre", "hf-gemma2": "double"}
LOCAL = ("sliding_window_attention", "chunked_attention", "sink_attention")
#: the local attention each family's model has (the others declare none)
LOCAL_OPS = {
    "hf-mistral": {"sliding_window_attention"},
    "hf-gemma2": {"sliding_window_attention"},
    "hf-gpt-oss": {"sink_attention"},
    "hf-llama4": {"chunked_attention"},
}


@pytest.mark.parametrize("name", FAMILIES)
def test_smoke(name: str) -> None:
    adapter = load_adapter(name)
    assert adapter.name == name and EXTRAS[name] == "hf" and name in GROUPS["hf-families"]
    assert smoke(adapter, ("float32",))


def test_new_families_declare_their_models_operations() -> None:
    """gpt-oss: its RMSNorm (one rounding), RoPE (halves), sink attention and its MoE router; Llama 4: its norm
    (Llama's rounding), complex RoPE (interleaved pairs), MLP, attention, chunks, its NoPE layers' temperature and its
    router; the sliding windows of Mistral
    and Gemma 2 count the query's own token (masking_utils: kv_idx > q_idx − W)."""
    oss, l4 = load_adapter("hf-gpt-oss"), load_adapter("hf-llama4")
    assert set(oss.capabilities) == {"rms_norm", "rope", "sink_attention", "moe_router"}
    assert (oss.conventions.rope_layout, oss.conventions.norm_rounding) == ("half", "single")
    assert set(l4.capabilities) == {
        "rms_norm",
        "rope",
        "swiglu_mlp",
        "glu_mlp",
        "attention",
        "chunked_attention",
        "attention_temperature",
        "moe_router",
    }
    assert (l4.conventions.rope_layout, l4.conventions.norm_rounding) == ("interleaved", "before_weight")
    for name in FAMILIES:
        adapter = load_adapter(name)
        assert {op for op in adapter.capabilities if op in LOCAL} == LOCAL_OPS.get(name, set()), name
        assert adapter.conventions.sliding_window == "inclusive"
    for name in ("hf-mistral", "hf-llama4"):  # no soft-cap in their eager attention
        caps = load_adapter(name).capabilities
        assert all(
            caps[op].values["softcap"] == {"none"} for op in ("attention", "sliding_window_attention") if op in caps
        )
    assert "softcap" not in load_adapter("hf-gemma2").capabilities["sliding_window_attention"].values


def _local_case(op: str, window: int | None = 2, causal: bool = True, softcap: float | None = None) -> Case:
    """Grouped heads (4 query heads on 2 KV heads), 3 queries against 6 keys (bottom-right: tokens 3…5)."""
    dtype = fmt("float32")
    inputs = {
        "q": fill(dtype, (1, 4, 3, 8), 1.0, 0),
        "k": fill(dtype, (1, 2, 6, 8), 1.0, 1),
        "v": fill(dtype, (1, 2, 6, 4), 1.0, 2),
    }
    if op == "sliding_window_attention":
        return Case(inputs, {"window": window, "softcap": softcap, "scale": None})
    if op == "chunked_attention":
        return Case(inputs, {"chunk": window, "scale": 0.3})
    inputs["sinks"] = fill(dtype, (4,), 2.0, 3)
    return Case(inputs, {"causal": causal, "window": window, "scale": None})


LOCAL_CASES = [
    ("hf-mistral", _local_case("sliding_window_attention")),
    ("hf-mistral", _local_case("sliding_window_attention", window=1)),
    ("hf-gemma2", _local_case("sliding_window_attention", window=3, softcap=5.0)),
    ("hf-gpt-oss", _local_case("sink_attention")),
    ("hf-gpt-oss", _local_case("sink_attention", window=None)),
    ("hf-gpt-oss", _local_case("sink_attention", window=None, causal=False)),
    ("hf-llama4", _local_case("chunked_attention", window=4)),
]


@pytest.mark.parametrize(("name", "c"), LOCAL_CASES, ids=[f"{n}-{c.params}" for n, c in LOCAL_CASES])
def test_local_attention_forward(name: str, c: Case) -> None:
    """The new behaviours' operations through each family's mask and eager attention agree with the oracle, forward
    and gradient (sinks' too), in float32, with fewer queries than keys."""
    adapter = load_adapter(name)
    op = next(iter(LOCAL_OPS[name]))
    dtype = fmt("float32")
    with outside_hypothesis():
        out = check_forward(adapter, op, c, dtype, Record(op, op, "", ""))
        check_vjp(adapter, op, c, fill(dtype, out.shape, 1.0, 9), dtype, Record(op, op, "", ""))


def test_window_counts_the_querys_own_token() -> None:
    """Declared exclusive (W keys before the query's own), Mistral's window of 2 is caught: it sees one key fewer."""
    adapter = load_adapter("hf-mistral")
    adapter.conventions = replace(adapter.conventions, sliding_window="exclusive")  # type: ignore[misc]
    c = _local_case("sliding_window_attention")
    with outside_hypothesis(), pytest.raises(CheckFailure, match="should be"):
        check_forward(adapter, "sliding_window_attention", c, fmt("float32"), Record("w", "w", "", ""))


@pytest.mark.parametrize("name", FAMILIES)
def test_block_declares_the_decoder_layer_placement(name: str) -> None:
    cap = load_adapter(name).capabilities.get("block")
    placement = BLOCKS.get(name)
    assert (cap is None) == (placement is None)
    if cap is not None:
        assert cap.values["placement"] == {placement}


def _rope_forward(name: str, layout: str | None = None, rotary_dim: int = 8) -> None:
    adapter = load_adapter(name)
    if layout is not None:
        adapter.conventions = replace(adapter.conventions, rope_layout=layout)  # type: ignore[misc]
    c = case("rope", fmt("float32"))
    c.params["rotary_dim"] = rotary_dim
    with outside_hypothesis():
        check_forward(adapter, "rope", c, fmt("float32"), Record("rope", "rope", "", ""))


def test_cohere_pairs_are_interleaved() -> None:
    """Cohere's rotary embedding repeats each frequency (repeat_interleave) and rotates pairs (2i, 2i+1):
    declared interleaved it passes; declared as Llama's halves it is caught."""
    _rope_forward("hf-cohere")
    with pytest.raises(CheckFailure, match="should be"):
        _rope_forward("hf-cohere", layout="half")


@pytest.mark.parametrize("name", ["hf-gpt-neox", "hf-phi3"])
def test_partial_rotary_by_the_family(name: str) -> None:
    """GPT-NeoX and Phi-3 rotate x[..., :rotary_dim] themselves (partial_rotary_factor): the rest passes."""
    _rope_forward(name, rotary_dim=4)


def test_partial_rotary_factor_truncates() -> None:
    """docs/adapters.md: HF sizes the rotated part as int(head_dim · partial_rotary_factor). For head_dim 44
    and 30 rotated dims the factor 30/44 gives int(29.999…) = 29, so the frequencies are base^(−2i/29), not
    base^(−2i/30). The contract's draws (d ≤ 16 or a power of two) never reach such a head."""
    adapter = load_adapter("hf-gpt-neox")
    x = np.random.default_rng(0).standard_normal((1, 3, 44)).astype(np.float32)
    pos = np.arange(3, dtype=np.int64)
    got = adapter.forward("rope", {"x": x, "positions": pos}, {"base": 10000.0, "rotary_dim": 30})
    want = rope(x.astype(np.float64), pos, 10000.0, rotary_dim=30, layout="half")
    assert np.abs(got - want).max() > 1e-2  # a defect of the library: this test fails once it is fixed


def test_olmo2_rounds_once() -> None:
    """Olmo2RMSNorm multiplies by the weight in float32 and rounds once (Llama casts first): declared single, it
    passes in bfloat16."""
    adapter = load_adapter("hf-olmo2")
    assert adapter.conventions.norm_rounding == "single"
    assert load_adapter("hf-qwen3").conventions.norm_rounding == "before_weight"
    with outside_hypothesis():
        check_forward(adapter, "rms_norm", case("rms_norm", fmt("bfloat16")), fmt("bfloat16"), Record("n", "n", "", ""))


# ------------------------------------------------------------------------------------------------- MoE routers

#: the MoE families of adapters/hf/families/moe.py: what each router implements of moe_router's choices (score,
#: norm, selection, routed scaling) and whether its modeling file has load_balancing_loss_func (moe_aux_loss)
MOE_ROUTERS = {
    "hf-mixtral": ({"softmax"}, {"topk"}, {"top_k"}, {"none"}, True),
    "hf-qwen3-moe": ({"softmax"}, {"none", "topk"}, {"top_k"}, {"none"}, True),
    "hf-olmoe": ({"softmax"}, {"none", "topk"}, {"top_k"}, {"none"}, True),
    "hf-deepseek-v3": ({"sigmoid"}, {"none", "topk"}, {"top_k", "bias", "groups"}, {"none", "factor"}, False),
}


@pytest.mark.parametrize("name", list(MOE_ROUTERS))
def test_moe_families_declare_their_routers(name: str) -> None:
    """Each router declares only the values its code implements; the load-balancing loss counts tokens
    (Σ_e f_e = k: per_token) and stores its probabilities in the logits' dtype (unfused)."""
    adapter = load_adapter(name)
    assert adapter.name == name and EXTRAS[name] == "hf" and name in GROUPS["hf-families"]
    score, norm, selection, scaling, aux = MOE_ROUTERS[name]
    attention = {"mla_attention"} if name == "hf-deepseek-v3" else set()  # DeepSeek-V3's MLA besides its router
    assert set(adapter.capabilities) == {"moe_router"} | ({"moe_aux_loss"} if aux else set()) | attention
    values = adapter.capabilities["moe_router"].values
    assert (values["score"], values["norm"], values["selection"], values["routed_scaling"]) == (
        score,
        norm,
        selection,
        scaling,
    )
    assert adapter.conventions.aux_loss_fraction == "per_token"
    assert ("moe_aux_loss" in adapter.conventions.unfused) == aux


def _router_case(
    score: str,
    norm: str,
    k: int = 2,
    scaling: float = 1.0,
    groups: tuple[int, int] | None = None,
    biased: bool = False,
    dtype: str = "float32",
) -> Case:
    """Four tokens over eight experts, each token's logits a permutation of values 0.25 (sigmoid: 0.125) apart."""
    f = fmt(dtype)
    rng = np.random.default_rng(7)
    spacing = 0.25 if score == "softmax" else 0.125
    logits = f.round(np.stack([rng.permutation(8) - 3.5 for _ in range(4)]) * spacing)
    bias = f.round(rng.integers(-16, 17, 8) * 2.0**-6 if biased else np.zeros(8))
    n_group, topk_group = groups if groups else (None, None)
    params = {
        "k": k,
        "score": score,
        "norm": norm,
        "routed_scaling_factor": scaling,
        "n_group": n_group,
        "topk_group": topk_group,
    }
    return Case({"logits": logits, "bias": bias}, params)


MOE_CASES = [
    ("hf-mixtral", _router_case("softmax", "topk")),
    ("hf-mixtral", _router_case("softmax", "topk", k=1, dtype="bfloat16")),
    ("hf-qwen3-moe", _router_case("softmax", "none", k=3)),
    ("hf-qwen3-moe", _router_case("softmax", "topk", dtype="bfloat16")),
    ("hf-olmoe", _router_case("softmax", "none", k=8)),
    ("hf-olmoe", _router_case("softmax", "topk", dtype="float16")),
    ("hf-deepseek-v3", _router_case("sigmoid", "topk", k=3, scaling=2.5, biased=True)),
    # DeepSeek-V3's group-limited routing: 4 groups of 2 experts, 2 kept, 3 of their 4 experts selected
    ("hf-deepseek-v3", _router_case("sigmoid", "topk", k=3, scaling=2.5, groups=(4, 2), biased=True)),
    ("hf-deepseek-v3", _router_case("sigmoid", "none", k=2, groups=(2, 1), biased=True, dtype="bfloat16")),
]


def _check_router(name: str, adapter: Any, c: Case) -> None:
    dtype = fmt(str(c.inputs["logits"].dtype))
    with outside_hypothesis():
        out = check_forward(adapter, "moe_router", c, dtype, Record(name, "moe_router", "", ""))
        cot = fill(dtype, out.shape, 1.0, 9)
        check_vjp(adapter, "moe_router", c, cot, dtype, Record(name, "moe_router", "", ""))
    assert out.dtype == c.inputs["logits"].dtype and out.shape == c.inputs["logits"].shape
    assert np.count_nonzero(out, axis=-1).tolist() == [c.params["k"]] * out.shape[0]
    assert not np.any(adapter.vjp("moe_router", c.inputs, c.params, cot)["bias"])  # the selection-only bias: 0


@pytest.mark.parametrize(("name", "c"), MOE_CASES, ids=[f"{n}-{i}" for i, (n, _) in enumerate(MOE_CASES)])
def test_moe_router_agrees_with_the_oracle(name: str, c: Case) -> None:
    """The real router code agrees with the oracle, forward and gradient, and selects exactly k experts."""
    _check_router(name, load_adapter(name), c)


def test_deepseek_v3_groups_limit_the_selection() -> None:
    """With 4 groups of 2 and 2 kept, DeepSeek-V3's router selects only inside the two best groups (each scored by
    its two highest choice scores): the third-best expert overall is left out when its group is not kept."""
    adapter = load_adapter("hf-deepseek-v3")
    logits = np.array([[2.0, -2.0, 1.9, 1.8, -1.0, -1.0, 0.0, 0.5]], dtype=np.float32)
    params = {"k": 2, "score": "sigmoid", "norm": "topk", "routed_scaling_factor": 1.0, "n_group": 4, "topk_group": 2}
    inputs = {"logits": logits, "bias": np.zeros(8, np.float32)}
    out = adapter.forward("moe_router", inputs, params)
    # groups (2, −2) → σ sum 1.00, (1.9, 1.8) → 1.73, (−1, −1) → 0.54, (0, 0.5) → 1.12: kept groups 1 and 3
    assert np.flatnonzero(out[0]).tolist() == [2, 3]
    ungrouped = adapter.forward("moe_router", inputs, params | {"n_group": None, "topk_group": None})
    assert np.flatnonzero(ungrouped[0]).tolist() == [0, 2]


@pytest.mark.parametrize("name", [n for n, v in MOE_ROUTERS.items() if v[-1]])
def test_moe_aux_loss_counts_tokens(name: str) -> None:
    """load_balancing_loss_func's f_e is the share of tokens selecting e (Σ f_e = k): at uniform routing the
    loss is k, and it agrees with the oracle declared per_token, forward and gradient."""
    adapter = load_adapter(name)
    dtype = fmt("float32")
    c = Case({"logits": _router_case("softmax", "none").inputs["logits"]}, {"k": 3})
    with outside_hypothesis():
        check_forward(adapter, "moe_aux_loss", c, dtype, Record(name, "aux", "", ""))
        check_vjp(adapter, "moe_aux_loss", c, np.asarray(1.5, np.float32), dtype, Record(name, "aux", "", ""))
    uniform = adapter.forward("moe_aux_loss", {"logits": np.zeros((5, 8), np.float32)}, {"k": 3})
    assert uniform.shape == () and float(uniform) == pytest.approx(3.0, rel=1e-6)


def test_routers_refuse_what_they_do_not_implement() -> None:
    """An undeclared choice raises (it is never computed as something else): Mixtral always renormalises and has
    no selection bias; DeepSeek-V3's scores are sigmoids."""
    c = _router_case("softmax", "none")
    with pytest.raises(NotImplementedError, match="unnormalised"):
        load_adapter("hf-mixtral").forward("moe_router", c.inputs, c.params)
    biased = _router_case("softmax", "topk", biased=True)
    with pytest.raises(NotImplementedError, match="selection-only bias"):
        load_adapter("hf-qwen3-moe").forward("moe_router", biased.inputs, biased.params)
    with pytest.raises(NotImplementedError, match="softmax scores"):
        load_adapter("hf-deepseek-v3").forward("moe_router", c.inputs, c.params)


def _with_router(name: str, mixin: type) -> Any:
    """The family's adapter with its router mixin: as built once models.py lists the mixin in its bases (and then
    declares moe_router itself), or else the family with the mixin first and its capability and convention added."""
    adapter = load_adapter(name)
    if isinstance(adapter, mixin):
        return adapter
    cls = type(type(adapter).__name__, (mixin, type(adapter)), {})
    adapter = cls()
    adapter.capabilities = {**adapter.capabilities, "moe_router": mixin.moe_router_capability}  # type: ignore[attr-defined]
    unfused = adapter.conventions.unfused | mixin.moe_router_unfused  # type: ignore[attr-defined]
    adapter.conventions = replace(adapter.conventions, unfused=unfused)
    return adapter


@pytest.mark.parametrize(
    ("name", "mixin", "c"),
    [
        ("hf-gpt-oss", "GptOssRouterMixin", _router_case("softmax", "topk", k=3)),
        ("hf-gpt-oss", "GptOssRouterMixin", _router_case("softmax", "topk", dtype="bfloat16")),
        ("hf-llama4", "Llama4RouterMixin", _router_case("sigmoid", "none", k=1)),
        ("hf-llama4", "Llama4RouterMixin", _router_case("sigmoid", "none", k=3, dtype="float16")),
    ],
    ids=["gpt-oss-f32", "gpt-oss-bf16", "llama4-f32", "llama4-f16"],
)
def test_family_router_mixins(name: str, mixin: str, c: Case) -> None:
    """gpt-oss's GptOssTopKRouter (softmax over the top-k logits: renormalised softmax) and Llama 4's Llama4Router
    (sigmoid of the top-k logits, not renormalised) agree with the oracle, and the family's other operations are
    still dispatched (the mixin's _impl hands them on)."""
    from transformer_conformance.adapters.hf.families import moe

    adapter = _with_router(name, getattr(moe, mixin))
    cap = adapter.capabilities["moe_router"].values
    assert cap["selection"] == {"top_k"} and cap["routed_scaling"] == {"none"}
    _check_router(name, adapter, c)
    assert adapter._impl("rope") is not None


def _mla_case(causal: bool, lq: int = 3) -> Case:
    """Two heads decoding ``lq`` queries over 6 keys at uneven positions, YaRN's mscale (tests/adapter_smoke.py's
    layout with every width distinct)."""
    b, h, lk, dn, dr, dc, dv = 2, 2, 6, 5, 6, 7, 4
    dtype = fmt("float32")
    k_positions = np.array([0, 3, 5, 7, 9, 20], dtype=np.int64)
    inputs = {
        "q_nope": fill(dtype, (b, h, lq, dn), 1.0, 1),
        "q_rope": fill(dtype, (b, h, lq, dr), 1.0, 2),
        "latent": fill(dtype, (b, lk, dc), 1.0, 3),
        "k_rope": fill(dtype, (b, lk, dr), 1.0, 4),
        "w_uk": fill(dtype, (h, dc, dn), dc**-0.5, 5),
        "w_uv": fill(dtype, (h, dc, dv), dc**-0.5, 6),
        "q_positions": k_positions[lk - lq :],
        "k_positions": k_positions,
    }
    params = {"causal": causal, "base": 10000.0, "mscale": {"factor": 40.0, "mscale_all_dim": 1.0}, "form": "naive"}
    return Case(inputs, params)


@pytest.mark.parametrize(("causal", "lq"), [(True, 3), (True, 6), (False, 3)])
def test_deepseek_v3_mla_agrees_with_the_oracle(causal: bool, lq: int) -> None:
    """DeepseekV3Attention's MLA — decoding after a cache of the earlier tokens, or all at once — agrees with the
    oracle in the interleaved layout it declares, forward and every gradient; in the half layout it does not."""
    adapter = load_adapter("hf-deepseek-v3")
    assert adapter.conventions.rope_layout == "interleaved" and "mla_attention" in adapter.conventions.unfused
    assert adapter.capabilities["mla_attention"].declared("form", ("naive", "absorbed")) == ("naive",)
    c, dtype = _mla_case(causal, lq), fmt("float32")
    with outside_hypothesis():
        out = check_forward(adapter, "mla_attention", c, dtype, Record("hf-deepseek-v3", "mla", "", ""))
        cot = fill(dtype, out.shape, 1.0, 9)
        check_vjp(adapter, "mla_attention", c, cot, dtype, Record("hf-deepseek-v3", "mla", "", ""))
        adapter.conventions = replace(adapter.conventions, rope_layout="half")
        with pytest.raises(CheckFailure):
            check_forward(adapter, "mla_attention", c, dtype, Record("hf-deepseek-v3", "mla", "", ""))


def test_deepseek_v3_mla_refuses_what_the_module_cannot_compute() -> None:
    """The absorbed form, and queries at positions other than their own tokens', raise (never computed otherwise)."""
    adapter = load_adapter("hf-deepseek-v3")
    c = _mla_case(True)
    with pytest.raises(NotImplementedError, match="naive form"):
        adapter.forward("mla_attention", c.inputs, c.params | {"form": "absorbed"})
    moved = c.inputs | {"q_positions": c.inputs["q_positions"] + 1}
    with pytest.raises(NotImplementedError, match="their own tokens"):
        adapter.forward("mla_attention", moved, c.params)


def test_switch_transformers_router_z_loss() -> None:
    """router_z_loss_func is ST-MoE's router z-loss: it agrees with the oracle in float32, forward and gradient; in
    float16 its sum of the tokens' z² overflows where the mean does not (the known failure in expectations/hf.toml)."""
    adapter = load_adapter("hf-switch-transformers")
    assert set(adapter.capabilities) == {"moe_z_loss"} and adapter.conventions.unfused == {"moe_z_loss"}
    dtype = fmt("float32")
    c = Case({"logits": fill(dtype, (5, 8), 2.0, 3)}, {})
    with outside_hypothesis():
        check_forward(adapter, "moe_z_loss", c, dtype, Record("hf-switch-transformers", "z", "", ""))
        check_vjp(
            adapter, "moe_z_loss", c, np.asarray(0.5, np.float32), dtype, Record("hf-switch-transformers", "z", "", "")
        )
    ones = np.ones((4096, 256), np.float16)
    assert np.isinf(adapter.forward("moe_z_loss", {"logits": ones}, {}))
    assert float(adapter.forward("moe_z_loss", {"logits": ones.astype(np.float32)}, {})) == pytest.approx(
        (1 + np.log(256)) ** 2
    )


def test_cache_keyword_refuses_a_function_without_one() -> None:
    """The cache goes by the name the installed function takes; a function naming neither would swallow it into
    ``**kwargs`` and run without it, so it is refused."""
    from transformer_conformance.adapters.hf.families.base import cache_keyword

    assert cache_keyword(lambda x, cache=None: x) == "cache"
    assert cache_keyword(lambda x, past_key_values=None, **kw: x) == "past_key_values"
    with pytest.raises(NotImplementedError, match="takes no cache argument"):
        cache_keyword(lambda x, **kw: x)


def test_mask_arguments_are_named_as_the_release_names_them() -> None:
    """masking_utils' mask functions are called with the arguments the installed release takes: 5.0's
    ``input_embeds`` and required ``cache_position``, later releases' ``inputs_embeds`` and ``cache``; 5.0's
    bidirectional mask takes no cache (adapters/hf/families/base.py, ``mask_arguments``)."""
    import torch
    from transformers.masking_utils import create_bidirectional_mask

    from transformer_conformance.adapters.hf.families.base import mask_arguments

    def mask_5_0(config, input_embeds, attention_mask, cache_position, past_key_values, position_ids=None):  # type: ignore[no-untyped-def]
        return None

    def mask_5_25(config, inputs_embeds, attention_mask, cache=None, position_ids=None, **kwargs):  # type: ignore[no-untyped-def]
        return None

    embeds, positions, cache = torch.zeros(1, 2, 4), torch.arange(3, 5)[None, :], object()
    old = mask_arguments(mask_5_0, "config", embeds, positions, cache)
    assert set(old) == {"config", "input_embeds", "attention_mask", "cache_position", "past_key_values", "position_ids"}
    assert old["cache_position"].tolist() == [3, 4] and old["past_key_values"] is cache
    new = mask_arguments(mask_5_25, "config", embeds, positions, cache)
    assert set(new) == {"config", "inputs_embeds", "attention_mask", "cache", "position_ids"}
    bidirectional = mask_arguments(create_bidirectional_mask, "config", embeds, positions, cache)
    assert "config" in bidirectional and bidirectional["attention_mask"] is None


@pytest.mark.parametrize("name", ["hf-mistral", "hf-llama4"])
def test_attention_that_is_not_causal_sees_every_key(name: str) -> None:
    """A full-attention layer configured ``is_causal`` False gets masking_utils' bidirectional mask (5.0's
    create_causal_mask ignores is_causal): the first query's output changes with the last key's value."""
    adapter = load_adapter(name)
    rng = np.random.default_rng(0)
    q, k, v = (rng.standard_normal((1, 1, 3, 2)).astype(np.float32) for _ in range(3))
    params = {"causal": False, "softcap": None, "scale": None}
    first = adapter.forward("attention", {"q": q, "k": k, "v": v}, params)[0, 0, 0]
    v2 = v.copy()
    v2[0, 0, 2] += 1.0
    assert not np.array_equal(adapter.forward("attention", {"q": q, "k": k, "v": v2}, params)[0, 0, 0], first)

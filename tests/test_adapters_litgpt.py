"""The litgpt built-in adapter loads, declares what LitGPT's modules do, passes a smoke subset, and is held to its
declarations: half-split RoPE pairs, the cache's rows, the inclusive window; the library defects it lists
(expectations/litgpt.toml) are pinned here so that a fixed release is noticed."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

pytest.importorskip("litgpt")

import torch

from tests.adapter_smoke import case, outside_hypothesis, smoke
from transformer_conformance.adapters.contract import Capability
from transformer_conformance.adapters.registry import load_adapter
from transformer_conformance.conformance.harness.compare import CheckFailure, Record, check_forward
from transformer_conformance.conformance.strategies.common import Case, fill
from transformer_conformance.reference.formats import fmt


def test_smoke() -> None:
    """Every declared operation but the listed defects' (the soft-capped KV path, the ring-buffer window, YaRN)."""
    adapter = load_adapter("litgpt")
    assert adapter.name == "litgpt"
    caps = dict(adapter.capabilities)
    del caps["sliding_window_attention"]  # the smoke case is a chunk of 3 queries after the ring wrapped
    caps["attention"] = Capability(values={"softcap": frozenset({"none"})})
    caps["rope_scaled"] = Capability(values={"scaling.type": frozenset({"linear", "llama3"})})
    adapter.capabilities = caps  # type: ignore[misc]
    checked = smoke(adapter, ("float32", "bfloat16"))
    assert "rope_scaled[bfloat16][llama3]" in checked and "glu_mlp[float32][gelu_tanh]" in checked
    assert "moe_router[bfloat16][factor]" in checked and "attention[float32][none]" in checked


def test_declarations() -> None:
    adapter = load_adapter("litgpt")
    conv = adapter.conventions
    assert conv.rope_layout == "half" and conv.rope_angle_dtype == "float32"
    assert conv.norm_rounding == "single" and conv.causal_alignment == "bottom_right"
    assert conv.sliding_window == "inclusive"
    assert conv.eps_defaults == {"rms_norm": 1e-5, "layer_norm": 1e-5}
    caps = adapter.capabilities
    assert caps["rope_scaled"].values == {"scaling.type": {"linear", "llama3", "yarn"}}
    assert caps["glu_mlp"].values == {"activation": {"silu", "gelu_erf", "gelu_tanh"}}
    assert caps["mlp"].values == {"activation": {"gelu_erf", "gelu_tanh"}}
    assert caps["moe_router"].values["score"] == {"softmax"} and caps["moe_router"].values["norm"] == {"topk"}
    assert "cross_entropy" not in caps and "block" not in caps
    env = adapter.environment()
    assert env["litgpt"].startswith("0.5.") and env["supports"].startswith("litgpt >= 0.5.13, < 0.6")


def test_config_defaults_are_the_declared_eps() -> None:
    from litgpt import Config

    assert Config().norm_eps == 1e-5


@pytest.mark.parametrize("found", ["0.5.12", "0.6.0", "1.0.0", "nightly"])
def test_other_versions_refused(found: str) -> None:
    from transformer_conformance.adapters.litgpt.adapter import check_version
    from transformer_conformance.adapters.versions import UnsupportedVersion

    with pytest.raises(UnsupportedVersion, match=f"^litgpt {found} is not supported: the litgpt adapter supports"):
        check_version(found)
    check_version("0.5.13")
    check_version("0.5.14.dev1")


def test_rope_layout_is_half() -> None:
    """Declared interleaved instead, the same code fails rope/forward: apply_rope pairs (i, i + d/2)."""
    adapter = load_adapter("litgpt")
    dtype = fmt("float32")
    c = case("rope", dtype)
    with outside_hypothesis():
        check_forward(adapter, "rope", c, dtype, Record("rope", "rope", "", ""))
        adapter.conventions = replace(adapter.conventions, rope_layout="interleaved")  # type: ignore[misc]
        with pytest.raises(CheckFailure):
            check_forward(adapter, "rope", c, dtype, Record("rope", "rope", "", ""))


@pytest.mark.parametrize(
    "extra",
    [
        None,
        {"factor": 4.0},
        {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_seq_len": 8192},
        {"factor": 4.0, "beta_fast": 32.0, "beta_slow": 1.0, "original_max_seq_len": 4096},
    ],
)
def test_far_positions_are_the_whole_cache_s_rows(extra: dict | None) -> None:
    """Past 2^16 positions build_rope_cache builds only the rows asked for: bit for bit the whole cache's rows."""
    from litgpt.model import build_rope_cache

    from transformer_conformance.adapters.litgpt.adapter import rope_rows

    cos, sin = build_rope_cache(seq_len=70_000, n_elem=64, base=500000, extra_config=extra)
    positions = torch.tensor([69_999, 3, 65_537, 3, 12_345])
    far_cos, far_sin = rope_rows(positions, 64, 500000.0, extra, torch.device("cpu"))
    assert torch.equal(far_cos, cos[positions]) and torch.equal(far_sin, sin[positions])


def test_window_counts_the_query_s_own_token() -> None:
    """A window of 1 (no cache, L_q = L_k) sees the query's own token alone: the output is v."""
    adapter = load_adapter("litgpt")
    dtype = fmt("float32")
    q, k, v = fill(dtype, (1, 2, 4, 8), 1.0, 1), fill(dtype, (1, 1, 4, 8), 1.0, 2), fill(dtype, (1, 1, 4, 3), 1.0, 3)
    out = adapter.forward("sliding_window_attention", {"q": q, "k": k, "v": v}, {"window": 1, "softcap": None})
    np.testing.assert_array_equal(out, np.broadcast_to(v, out.shape))


def test_one_token_decoding_through_the_ring_buffer_is_right() -> None:
    """One query after the ring wrapped (decoding): the window the oracle gives."""
    adapter = load_adapter("litgpt")
    dtype = fmt("float32")
    inputs = {"q": fill(dtype, (1, 2, 1, 8), 1.0, 1), "k": fill(dtype, (1, 1, 6, 8), 1.0, 2)}
    inputs["v"] = fill(dtype, (1, 1, 6, 8), 1.0, 3)
    c = Case(inputs, {"window": 3, "softcap": None, "scale": None})
    with outside_hypothesis():
        check_forward(adapter, "sliding_window_attention", c, dtype, Record("w", "sliding_window_attention", "", ""))


def _gpt(**kw: object) -> torch.nn.Module:
    from litgpt import GPT, Config

    torch.manual_seed(0)
    cfg = Config(block_size=16, vocab_size=32, padded_vocab_size=32, n_layer=1, n_head=2, n_embd=16, head_size=8,
                 bias=False, **kw)  # fmt: skip
    return GPT(cfg).eval()


def test_known_defect_softcapped_kv_cache_adds_the_boolean_mask() -> None:
    """expectations/litgpt.toml: with soft-capping a cached prefill is not the uncached forward (the boolean mask
    is added to the scores); without it, it is."""
    idx = torch.randint(0, 32, (1, 6), generator=torch.Generator().manual_seed(0))
    for softcap, differs in ((50.0, True), (None, False)):
        model = _gpt(attention_logit_softcapping=softcap)
        with torch.no_grad():
            full = model(idx)
            model.set_kv_cache(batch_size=1)  # type: ignore[operator]
            cached = model(idx, input_pos=torch.arange(6))
        assert bool((full - cached).abs().max() > 1e-3) == differs


def test_known_defect_a_chunk_after_the_ring_wraps_sees_the_future() -> None:
    """expectations/litgpt.toml: W = 2, one token prefilled, then a chunk of two: token 1 attends to token 2."""
    model = _gpt(sliding_window_size=2)
    idx = torch.randint(0, 32, (1, 3), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        full = model(idx)
        model.set_kv_cache(batch_size=1)  # type: ignore[operator]
        model(idx[:, :1], input_pos=torch.arange(0, 1))
        chunk = model(idx[:, 1:], input_pos=torch.arange(1, 3))
    error = (full[:, 1:] - chunk).abs().amax(dim=-1)[0]
    assert error[0] > 1e-2 and error[1] < 1e-5


def test_known_defect_yarn_interpolates_the_high_frequencies() -> None:
    """expectations/litgpt.toml: build_rope_cache's YaRN gives pair 0 θ/s and no 0.1·ln(s) + 1 factor."""
    from litgpt.model import build_rope_cache

    extra = {"factor": 4.0, "beta_fast": 32.0, "beta_slow": 1.0, "original_max_seq_len": 4096}
    cos, sin = build_rope_cache(seq_len=2, n_elem=128, base=10000, extra_config=extra)
    assert torch.atan2(sin[1, 0], cos[1, 0]).item() == pytest.approx(0.25)  # θ_0 = 1 interpolated, not kept
    assert torch.hypot(cos[1, 0], sin[1, 0]).item() == pytest.approx(1.0)  # not 0.1·ln 4 + 1 = 1.1386

"""The torch-flex adapter (``torch.compile(flex_attention)``) declares what its kernel runs on the CPU, passes a
smoke subset, builds the masks it declares (bottom-right, the window inclusive, the chunk), and refuses what the
CPU kernel lacks (gradients, the logsumexp that sinks need)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import torch

from tests.adapter_smoke import case, outside_hypothesis
from transformer_conformance.adapters.torch import local_attention
from transformer_conformance.adapters.torch.flex import (
    TorchFlexAdapter,
    chunked_mod,
    compiled_flex,
    ops,
    sliding_window_mod,
    with_sinks,
)
from transformer_conformance.conformance.harness.compare import CheckFailure, Record, check_forward
from transformer_conformance.conformance.strategies.common import Case, fill
from transformer_conformance.reference.formats import fmt

DTYPES = ("float32", "bfloat16", "float16")
#: the (L_q, L_k, span) of the mask checks: fewer queries than keys, a span of 1, one past the sequence
SHAPES = ((3, 5, 1), (3, 5, 2), (5, 5, 3), (1, 6, 4), (4, 4, 9))


@pytest.fixture(scope="module")
def adapter() -> TorchFlexAdapter:
    """One adapter for the module: every test shares the compiled flex_attention and its graphs."""
    return TorchFlexAdapter()


def test_declarations(adapter: TorchFlexAdapter) -> None:
    assert adapter.name == "torch-flex"
    assert set(adapter.capabilities) == {"attention", "sliding_window_attention", "chunked_attention"}
    assert all(c.dtypes == set(DTYPES) and not c.grad for c in adapter.capabilities.values())
    conv = adapter.conventions
    assert conv.causal_alignment == "bottom_right" and conv.sliding_window == "inclusive"
    assert conv.unfused == set(adapter.capabilities) and not conv.exp_via_exp2  # the CPU kernel calls exp
    env = adapter.environment()
    assert env["device"] == "cpu" and "flex_attention" in env["compiler"]
    assert compiled_flex() is compiled_flex()  # compiled once for the process


@pytest.mark.slow  # FlexAttention compiled for each operation, dtype and soft-cap: over a minute on 2 cores
def test_smoke(adapter: TorchFlexAdapter) -> None:
    """Each operation, dtype and soft-cap on one small example (GQA, 3 queries on 5 keys), against the oracle."""
    checked = []
    with outside_hypothesis():
        for op, cap in adapter.capabilities.items():
            for name in cap.dtypes:
                for choice in ("none", "tanh") if op != "chunked_attention" else (None,):
                    dtype = fmt(name)
                    check_forward(adapter, op, case(op, dtype, choice=choice), dtype, Record(op, op, "smoke", ""))
                    checked.append((op, name, choice))
    assert len(checked) == 3 * 2 + 3 * 2 + 3


@pytest.mark.parametrize(("lq", "lk", "w"), SHAPES)
def test_masks_are_the_declared_ones(lq: int, lk: int, w: int) -> None:
    """The mask_mods, evaluated on every (query, key), are the torch adapter's masks: the window inclusive
    (p − j < W), the chunk ⌊j/C⌋ = ⌊p/C⌋, both causal with the queries the last L_q tokens."""
    offset, span = torch.tensor(lk - lq), torch.tensor(w)
    b, qi, kv = torch.zeros((), dtype=torch.int64), torch.arange(lq)[:, None], torch.arange(lk)[None, :]
    window = sliding_window_mod(offset, span, "inclusive")(b, b, qi, kv)
    expected = local_attention.window_mask(lq, lk, torch.device("cpu"), "bottom_right", w, "inclusive")
    assert torch.equal(window, expected)
    exclusive = sliding_window_mod(offset, span, "exclusive")(b, b, qi, kv)
    expected = local_attention.window_mask(lq, lk, torch.device("cpu"), "bottom_right", w, "exclusive")
    assert torch.equal(exclusive, expected)
    chunk = chunked_mod(offset, span)(b, b, qi, kv)
    assert torch.equal(chunk, local_attention.chunk_mask(lq, lk, torch.device("cpu"), "bottom_right", w))


def test_window_counts_the_querys_own_token(adapter: TorchFlexAdapter) -> None:
    """L_q = 3 < L_k = 5, window 2: zero scores make the weights uniform over the keys each query sees and one-hot
    values show which (keys i + 1 and i + 2 for query i); declared exclusive or top-left, the oracle disagrees."""
    lq, lk = 3, 5
    onehot = {"q": np.zeros((1, 2, lq, 4), np.float32), "k": np.zeros((1, 1, lk, 4), np.float32)}
    onehot["v"] = np.eye(lk, dtype=np.float32)[None, None]
    seen = adapter.forward("sliding_window_attention", onehot, {"window": 2, "softcap": None, "scale": None}) > 0
    expected = local_attention.window_mask(lq, lk, torch.device("cpu"), "bottom_right", 2, "inclusive").numpy()
    assert np.array_equal(seen, np.broadcast_to(expected, seen.shape))

    dtype = fmt("float32")
    inputs = {"q": fill(dtype, (1, 2, lq, 4), 1.0, 0), "k": fill(dtype, (1, 1, lk, 4), 1.0, 1)}
    c = Case(inputs | {"v": fill(dtype, (1, 1, lk, 3), 1.0, 2)}, {"window": 2, "softcap": None, "scale": None})
    record = Record("swa", "sliding_window_attention", "", "")
    with outside_hypothesis():
        check_forward(adapter, "sliding_window_attention", c, dtype, record)
    conv = adapter.conventions
    try:
        for wrong in (replace(conv, sliding_window="exclusive"), replace(conv, causal_alignment="top_left")):
            adapter.conventions = wrong  # declared, not built
            with outside_hypothesis(), pytest.raises(CheckFailure, match="should be"):
                check_forward(adapter, "sliding_window_attention", c, dtype, record)
    finally:
        adapter.conventions = conv


def test_causal_attention_is_bottom_right(adapter: TorchFlexAdapter) -> None:
    """The offset L_k − L_q in the mask_mod: declared top-left, it is caught."""
    dtype = fmt("float32")
    c = case("attention", dtype)  # causal, 3 queries on 5 keys
    record = Record("a", "attention", "", "")
    conv = adapter.conventions
    with outside_hypothesis():
        check_forward(adapter, "attention", c, dtype, record)
    try:
        adapter.conventions = replace(conv, causal_alignment="top_left")
        with outside_hypothesis(), pytest.raises(CheckFailure, match="should be"):
            check_forward(adapter, "attention", c, dtype, record)
    finally:
        adapter.conventions = conv


def test_no_gradient_on_the_cpu(adapter: TorchFlexAdapter) -> None:
    c = case("attention", fmt("float32"))
    with pytest.raises(NotImplementedError, match="does not support backward on CPU"):
        adapter.vjp("attention", c.inputs, c.params, np.ones((1, 4, 3, 8), np.float32))
    # the library's own refusal, which is why the gradient is not declared
    q = torch.zeros(1, 1, 2, 4, requires_grad=True)
    with pytest.raises(NotImplementedError, match="FlexAttention does not support backward on CPU"):
        compiled_flex()(q, q, q)


def test_sinks_refused_on_the_cpu(adapter: TorchFlexAdapter) -> None:
    """The compiled CPU kernel has no logsumexp: sink_attention is not declared, and refused in one line."""
    c = case("sink_attention", fmt("float32"))
    with pytest.raises(NotImplementedError, match="does not implement sink_attention on cpu"):
        adapter.forward("sink_attention", c.inputs, c.params)


@pytest.mark.filterwarnings("ignore")
def test_sink_combination_against_the_oracle() -> None:
    """out·σ(lse − σ_h) is attention with the sink in the denominator: the CUDA path's formula, run here through
    flex_attention uncompiled (which returns the logsumexp on the CPU too), matches the oracle."""
    from torch.nn.attention.flex_attention import flex_attention

    from transformer_conformance.reference.local_attention import sink_attention

    dtype = fmt("float32")
    inputs = {
        "q": fill(dtype, (1, 4, 3, 8), 1.0, 0),
        "k": fill(dtype, (1, 2, 5, 8), 1.0, 1),
        "v": fill(dtype, (1, 2, 5, 3), 1.0, 2),
        "sinks": fill(dtype, (4,), 1.0, 3),
    }
    sink = ops("bottom_right", "inclusive", flex_attention)["sink_attention"]
    t = {k: torch.from_numpy(v) for k, v in inputs.items()}
    for causal, window in ((True, None), (False, None), (True, 2)):
        got = sink(t["q"], t["k"], t["v"], t["sinks"], causal=causal, window=window).numpy()
        want = sink_attention(
            *(inputs[n].astype(np.float64) for n in ("q", "k", "v", "sinks")),
            causal=causal,
            window=window,
            alignment="bottom_right",
            counts="inclusive",
        )
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    out = torch.ones(1, 1, 1, 2)
    assert torch.equal(with_sinks(out, torch.zeros(1, 1, 1), torch.tensor([float("-inf")])), out)

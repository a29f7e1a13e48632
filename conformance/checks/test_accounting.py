"""Parameter accounting of a LLaMA-style decoder: the candidate's count of the model it builds for a
configuration (seed-002 §3.1.1 "A Worked Example")."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from transformer_conformance.adapters.contract import Adapter
from transformer_conformance.conformance.harness.compare import CheckFailure, Record, _invoke
from transformer_conformance.conformance.harness.marks import check
from transformer_conformance.conformance.strategies.choices import sampled_from
from transformer_conformance.reference.accounting import (
    LLAMA2_7B,
    LLAMA2_70B_SHAPE,
    ModelConfig,
    param_breakdown,
    param_count,
)

BUDGET = (
    "seed-002 §3.1.1: attention W_Q, W_K, W_V, W_O (4·d², no biases), SwiGLU 3·d·d_ff, embedding V·d; "
    "7B at d = 4096: ≈67M + ≈135M per layer, ≈6.7B in all"
)


def _count(adapter: Adapter, **cfg: Any) -> tuple[int, str]:
    call = f"{adapter.name}.param_count({', '.join(f'{k}={v!r}' for k, v in cfg.items())})"
    return int(np.asarray(_invoke(call, adapter.forward, "param_count", {}, cfg))), call


def _params(c: ModelConfig) -> dict[str, Any]:
    p = asdict(c)
    del p["head_dim"]
    return p


@st.composite
def configs(draw: st.DrawFn) -> ModelConfig:
    kv = draw(sampled_from([1, 2, 4, 8]), label="kv heads")
    heads = kv * draw(sampled_from([1, 1, 2, 4, 8]), label="query heads per kv head")
    d_head = draw(sampled_from([2, 8, 64, 128]), label="head dim")
    return ModelConfig(
        vocab=draw(st.integers(1, 300_000), label="vocab"),
        hidden=heads * d_head,
        intermediate=draw(st.integers(0, 50_000), label="d_ff"),
        layers=draw(st.integers(0, 3), label="layers"),
        heads=heads,
        kv_heads=kv,
        tied=draw(st.booleans(), label="tied"),
    )


@check(
    "accounting/param-count",
    "accounting",
    "the candidate's parameter count equals embedding + L·(attention with GQA + MLP + 2 norms) + final norm "
    "(+ an untied head)",
    BUDGET,
    op="param_count",
)
@given(c=configs())
def test_param_count(adapter: Adapter, record: Record, c: ModelConfig) -> None:
    got, call = _count(adapter, **_params(c))
    want = param_breakdown(c)
    record.examples += 1
    if got != want["total"]:
        parts = ", ".join(f"{k} {v:,}" for k, v in want.items() if k != "total")
        raise CheckFailure(f"parameters: got {got:,}, should be {want['total']:,} ({parts}) [{call}]")


@check(
    "accounting/seed-7b",
    "accounting",
    "at d = 4096, d_ff = 11008: one layer adds 4·4096² ≈ 67M attention and 3·4096·11008 ≈ 135M MLP parameters "
    "(plus 2d of norms), and the whole 7B model ≈ 6.7B",
    BUDGET,
    op="param_count",
)
def test_seed_7b(adapter: Adapter, record: Record) -> None:
    cfg = _params(LLAMA2_7B)
    empty, _ = _count(adapter, **dict(cfg, layers=0))
    attention_only, _ = _count(adapter, **dict(cfg, layers=1, intermediate=0))
    one, call = _count(adapter, **dict(cfg, layers=1))
    total, _ = _count(adapter, **cfg)
    d = 4096
    record.examples += 1
    for what, got, want in (
        ("attention of one layer", attention_only - empty - 2 * d, 4 * d * d),  # 67,108,864
        ("MLP of one layer", one - attention_only, 3 * d * 11008),  # 135,266,304
        ("LLaMA-2 7B", total, param_count(LLAMA2_7B)),  # 6,738,415,616 ≈ 6.7B
    ):
        if got != want:
            raise CheckFailure(f"{what}: got {got:,}, should be {want:,} [{call}]")


@check(
    "accounting/gqa-70b",
    "accounting",
    "70B shape (d = 8192, d_ff = 28672, 80 layers, 64 heads, 8 KV heads, V = 32000): 68,976,648,192 — W_K and W_V "
    "shrink to d × 8·128",
    BUDGET + "; grouped-query attention (seed-000 §A modern decoder block: n_kv_heads)",
    op="param_count",
)
@pytest.mark.parametrize("tied", [False, True], ids=["untied", "tied"])
def test_gqa_70b(adapter: Adapter, record: Record, tied: bool) -> None:
    c = ModelConfig(**dict(_params(LLAMA2_70B_SHAPE), tied=tied))
    got, call = _count(adapter, **_params(c))
    record.examples += 1
    if got != param_count(c):
        raise CheckFailure(f"parameters: got {got:,}, should be {param_count(c):,} [{call}]")

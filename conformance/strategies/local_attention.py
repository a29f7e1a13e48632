"""Hypothesis strategies for sliding-window, chunked and sink attention: the attention cases of strategies/blocks.py
(GQA and MQA, fewer queries than keys, peaked softmaxes, logits past a mask fill) with a window or chunk drawn from 1
(the query's own token alone) past the sequence (plain causal attention), and sinks from far below the logits to far
above them; and the size regimes, where kernels tile the keys and skip the tiles a window or chunk leaves out.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from hypothesis import strategies as st

from transformer_conformance.conformance.strategies.blocks import attention_case, row_of, stated
from transformer_conformance.conformance.strategies.choices import sampled_from
from transformer_conformance.conformance.strategies.common import Case, fill, magnitudes, seeds
from transformer_conformance.conformance.strategies.sizes import LONG_KEYS
from transformer_conformance.reference.formats import Format

#: The size regimes: B, H_q, H_kv, L_q, L_k — a prefill of 520 tokens (past tiles of 64 … 512 keys, a window or
#: chunk of them spanning tile boundaries) and a few decoding queries against 1,030 keys with grouped KV heads.
PREFILL = (1, 2, 1, LONG_KEYS[3], LONG_KEYS[3])
DECODE = (1, 8, 2, 3, 1030)
#: the windows and chunks of the regimes: a tile, a tile and one, and a span no tile divides
SPANS = (128, 129, 200)


def _span(draw: st.DrawFn, case: Case, label: str, long: bool = False) -> int:
    """1 (the query alone), a span inside the sequence, or one reaching past it (plain causal attention); ``long``:
    at least the sequence. Under a ``per_value`` plan, the span its planned shape states (strategies/plan.py)."""
    lk = case.inputs["k"].shape[2]
    if long:
        free = st.integers(lk, lk + 3)
    else:
        free = st.one_of(st.just(1), st.integers(1, lk + 1), st.integers(lk, lk + 3))
    span: int = stated(draw, case, "long span" if long else "span", free, label)
    return span


def decoded_tokens(case: Case) -> list[int]:
    """The tokens of a causal case's sequence of L_k queries decoded one at a time against a rolling cache: every
    one; under a plan, those its planned shape states (each length of the cache is a shape of its own)."""
    row = row_of(case)
    return list(row["decoded tokens"]) if row is not None else list(range(case.inputs["k"].shape[2]))


@st.composite
def sliding_window_case(draw: st.DrawFn, dtype: Format, softcaps: tuple[str, ...], long: bool = False) -> Case:
    """Causal attention with a window W; ``long``: W ≥ L_k, which every window count makes plain causal."""
    case = draw(attention_case(dtype, causal=True, softcaps=softcaps), label="attention")
    window = _span(draw, case, "window", long)
    params = {"window": window, "softcap": case.params["softcap"], "scale": case.params["scale"]}
    return Case(case.inputs, params, case.about | {"window": window})


@st.composite
def chunked_case(draw: st.DrawFn, dtype: Format, long: bool = False) -> Case:
    """Causal attention in chunks of C; ``long``: C ≥ L_k, one chunk, plain causal attention."""
    case = draw(attention_case(dtype, causal=True, with_softcap=False), label="attention")
    chunk = _span(draw, case, "chunk", long)
    return Case(case.inputs, {"chunk": chunk, "scale": case.params["scale"]}, case.about | {"chunk": chunk})


@st.composite
def sink_case(draw: st.DrawFn, dtype: Format) -> Case:
    """Attention, causal or not, plain or in a window, with one sink logit per query head: near 0, of the order of
    the logits, or far above them (the sink takes nearly all the weight and the output is tiny)."""
    case = draw(attention_case(dtype, with_softcap=False), label="attention")
    hq = case.inputs["q"].shape[1]
    causal = bool(case.params["causal"])
    window = _span(draw, case, "window") if causal and draw(st.booleans(), label="in a window") else None
    mag = draw(st.one_of(magnitudes(-4, 2), magnitudes(3, 6)), label="|sinks|")
    offset = draw(sampled_from([0.0, 0.0, 4.0, -4.0]), label="sinks' offset")
    seed = draw(seeds, label="sinks' seed")
    inputs = dict(case.inputs, sinks=fill(dtype, (hq,), mag, seed, offset=offset))
    params: dict[str, Any] = {"causal": causal, "window": window, "scale": case.params["scale"]}
    return Case(inputs, params, case.about | {"|sinks|": mag})


def _regime_inputs(dtype: Format, shape: tuple[int, ...], seed: int) -> dict[str, np.ndarray]:
    b, hq, hkv, lq, lk = shape
    return {
        "q": fill(dtype, (b, hq, lq, 16), 1.0, seed),
        "k": fill(dtype, (b, hkv, lk, 16), 1.0, seed + 1),
        "v": fill(dtype, (b, hkv, lk, 4), 1.0, seed + 2),
    }


def _about(shape: tuple[int, ...], what: str, seed: int) -> dict[str, Any]:
    _, hq, hkv, lq, lk = shape
    return {"regime": f"H_q {hq}, H_kv {hkv}, L_q {lq}, L_k {lk}, {what}", "seed": seed}


@st.composite
def sliding_window_cases(draw: st.DrawFn, dtype: Format) -> list[Case]:
    """The prefill and decoding regimes, each with a window of a tile, a tile and one, or 200."""
    seed = draw(seeds, label="seed")
    window = draw(sampled_from(SPANS), label="window")
    return [
        Case(
            _regime_inputs(dtype, shape, seed + 16 * n),
            {"window": window, "softcap": None, "scale": None},
            _about(shape, f"window {window}", seed + 16 * n),
        )
        for n, shape in enumerate((PREFILL, DECODE))
    ]


@st.composite
def chunked_cases(draw: st.DrawFn, dtype: Format) -> list[Case]:
    """The prefill and decoding regimes in chunks of a tile, a tile and one, or 200."""
    seed = draw(seeds, label="seed")
    chunk = draw(sampled_from(SPANS), label="chunk")
    return [
        Case(
            _regime_inputs(dtype, shape, seed + 16 * n),
            {"chunk": chunk, "scale": None},
            _about(shape, f"chunk {chunk}", seed + 16 * n),
        )
        for n, shape in enumerate((PREFILL, DECODE))
    ]


@st.composite
def sink_cases(draw: st.DrawFn, dtype: Format) -> list[Case]:
    """The prefill regime causal with sinks, and the decoding one in a window, the sinks near the logits."""
    seed = draw(seeds, label="seed")
    window = draw(sampled_from(SPANS), label="window")
    cases = []
    for n, (shape, win) in enumerate(((PREFILL, None), (DECODE, window))):
        s = seed + 16 * n
        inputs = _regime_inputs(dtype, shape, s) | {"sinks": fill(dtype, (shape[1],), 2.0, s + 3)}
        what = "sinks" if win is None else f"sinks, window {win}"
        cases.append(Case(inputs, {"causal": True, "window": win, "scale": None}, _about(shape, what, s)))
    return cases

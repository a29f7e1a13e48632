"""Hypothesis strategies for positions, ALiBi and RoPE context extension (conformance/strategies/common.py's style:
arrays drawn as (shape, magnitude, seed) and rounded to the dtype under test)."""

from __future__ import annotations

from typing import Any

import numpy as np
from hypothesis import strategies as st

from transformer_conformance.conformance.strategies.choices import sampled_from
from transformer_conformance.conformance.strategies.common import (
    Case,
    fill,
    long_positions,
    magnitudes,
    positions,
    seeds,
)
from transformer_conformance.conformance.strategies.plan import Dims, shapes
from transformer_conformance.reference.formats import Format
from transformer_conformance.reference.rope_scaling import SCALING_TYPES

#: Head counts: powers of two (the geometric rule) and the others (the interpolated rule), 1 and 64 included.
HEADS = st.one_of(st.integers(1, 16), sampled_from([20, 24, 40, 64]))


#: The planned shapes (conformance/strategies/plan.py)
SINUSOIDAL_SHAPES = shapes(("d/2", "T", "batch"), (3, 5, 2), (32, 6, 1), (256, 2, 1))
LEARNED_SHAPES = shapes(("L", "d", "T"), (7, 5, 12), (512, 48, 3), (2048, 16, 9))
ALIBI_SHAPES = shapes(("H", "Tq", "Tk", "batch"), (5, 3, 6, 1), (8, 1, 4, 2), (24, 5, 5, 1))
#: the head counts ALiBi's slopes are checked at under a plan: one head, powers of two (the geometric rule: 8 and the
#: regime's 64) and others (the interpolated rule: 3, 5 and 24, with one, one and eight interpolated slopes); the
#: shapes above and the regime have the same head counts, so a candidate that compiles per head count builds no other
ALIBI_HEAD_COUNTS = shapes(("H",), (1,), (3,), (5,), (8,), (24,), (64,))
#: RoPE scaling: under a ``per_value`` plan each shape also states the base and the rule's numbers (a fractional factor
#: and a short trained length, Llama 3.1's bands at 8k, a factor of 32 at 128k), the rule's kind drawn freely
_RULE_LABELS = ("factor", "trained length", "beta_fast", "beta_slow", "low, high factors", "factor lists seed")
ROPE_SCALED_SHAPES = shapes(
    ("d/2", "rotary_dim", "T", "heads", "base", *_RULE_LABELS),
    (3, None, 5, 2, 10000.0, 1.5, 16, 32, 1, (0.5, 2.0), 0),
    (32, 32, 4, 1, 500000.0, 8.0, 8192, 16, 2, (1.0, 4.0), 1),
    (64, None, 3, 2, 10000.0, 32.0, 131_072, 64, 1, (1.5, 8.0), 2),
)


@st.composite
def sinusoidal_case(draw: st.DrawFn, dtype: Format) -> Case:
    dims = Dims(draw, SINUSOIDAL_SHAPES)
    d = 2 * dims("d/2", st.one_of(st.integers(1, 8), sampled_from([32, 64, 256])))
    t = dims("T", st.integers(1, 6))
    seed = draw(seeds, label="seed")
    mag = draw(st.one_of(st.just(0.0), magnitudes(-6, 4)), label="|x|")
    x = fill(dtype, (dims("batch", st.integers(1, 2)), t, d), mag, seed)
    base = draw(sampled_from([10000.0, 10000.0, 100.0, 500000.0]), label="base")
    pos = draw(positions(t, long_positions(dtype)))
    return Case({"x": x, "positions": pos}, {"base": base}, {"|x|": mag, "seed": seed})


@st.composite
def learned_case(draw: st.DrawFn, dtype: Format) -> Case:
    """A table of L rows and T in-range positions, repeats likely (a repeated position's gradient adds up)."""
    dims = Dims(draw, LEARNED_SHAPES)
    n = dims("L", st.one_of(st.integers(1, 16), sampled_from([512, 2048])))
    d = dims("d", st.integers(1, 48))
    seed = draw(seeds, label="seed")
    t = dims("T", st.integers(1, 12))
    pos = np.random.default_rng(seed).integers(0, min(n, draw(sampled_from([2, 4, n]), label="distinct")), size=t)
    if draw(st.booleans(), label="last row"):
        pos[-1] = n - 1  # the largest defined position, L − 1
    table = fill(dtype, (n, d), draw(magnitudes(-4, 4), label="|table|"), seed + 1)
    return Case({"table": table, "positions": pos.astype(np.int64)}, {}, {"seed": seed})


@st.composite
def alibi_case(draw: st.DrawFn, dtype: Format) -> Case:
    dims = Dims(draw, ALIBI_SHAPES)
    h = dims("H", HEADS)
    tq, tk = dims("Tq", st.integers(1, 5)), dims("Tk", st.integers(1, 6))
    seed = draw(seeds, label="seed")
    start = draw(sampled_from([0, 0, 7, 4090, 30000, 70_000]), label="first position")
    qp = start + np.sort(np.random.default_rng(seed).integers(0, draw(sampled_from([8, 64, 5000])), size=tq))
    kp = start + np.arange(tk, dtype=np.int64) * draw(st.integers(1, 9), label="key stride")
    # up to 2^9: within 8 binades of float16's overflow
    mag = draw(st.one_of(st.just(0.0), magnitudes(-4, 5), magnitudes(8, 9)), label="|scores|")
    scores = fill(dtype, (dims("batch", st.integers(1, 2)), h, tq, tk), mag, seed + 1)
    return Case(
        {"scores": scores, "q_positions": qp.astype(np.int64), "k_positions": kp.astype(np.int64)},
        {},
        {"seed": seed},
    )


@st.composite
def alibi_heads(draw: st.DrawFn) -> int:
    """A head count for ALiBi's slopes: any of :data:`HEADS` (every one of them over a ``ci`` run), or under a plan
    one of :data:`ALIBI_HEAD_COUNTS`."""
    return int(Dims(draw, ALIBI_HEAD_COUNTS)("H", HEADS))


@st.composite
def scaling(
    draw: st.DrawFn, kinds: tuple[str, ...] = SCALING_TYPES, rotary_dim: int = 64, dims: Dims | None = None
) -> dict[str, Any]:
    """A context-extension rule among ``kinds`` with its parameters; factors 2 … 32, trained lengths 16 … 8192 and
    the 128k of current models. ``dims``: the planned shape whose stated values (a ``per_value`` plan) the rule's
    numbers are; its kind is drawn freely."""

    def pick(label: str, free: st.SearchStrategy[Any]) -> Any:
        return dims.value(label, free) if dims is not None else draw(free, label=label)

    kind = draw(sampled_from(kinds), label="scaling") if len(kinds) > 1 else kinds[0]
    factor = pick("factor", sampled_from([2.0, 4.0, 8.0, 32.0, 1.5]))
    original = pick("trained length", sampled_from([16, 64, 2048, 4096, 8192, 131_072]))
    params: dict[str, Any] = {"type": kind, "factor": factor}
    if kind in ("dynamic", "yarn", "llama3"):
        params["original_max_position_embeddings"] = original
    if kind == "yarn":  # the defaults (32, 1) passed explicitly, or others
        params |= {
            "beta_fast": pick("beta_fast", sampled_from([32, 16, 64])),
            "beta_slow": pick("beta_slow", sampled_from([1, 2, 2])),
        }
    if kind == "llama3":
        # Llama 3.1's (1, 4) and others (low < high)
        low, high = pick("low, high factors", sampled_from([(0.5, 2.0), (1.0, 4.0), (1.5, 8.0), (1.0, 2.0)]))
        params |= {"low_freq_factor": low, "high_freq_factor": high}
    if kind == "longrope":
        # as Phi-3's: short factors near 1, long factors rising from 1 towards the low frequencies
        rng = np.random.default_rng(pick("factor lists seed", st.integers(0, 2**16)))
        half = rotary_dim // 2
        params |= {
            "original_max_position_embeddings": original,
            "short_factor": [round(float(f), 4) for f in rng.uniform(1.0, 1.25, half)],
            "long_factor": [round(float(f), 4) for f in np.sort(rng.uniform(1.0, 2 * factor, half))],
        }
    return params


@st.composite
def rope_scaled_case(draw: st.DrawFn, dtype: Format, kinds: tuple[str, ...] = SCALING_TYPES) -> Case:
    dims = Dims(draw, ROPE_SCALED_SHAPES)
    half = dims("d/2", st.one_of(st.integers(2, 8), sampled_from([16, 32, 64])))
    d = 2 * half
    rotary_dim = dims("rotary_dim", st.one_of(st.none(), st.integers(2, half).map(lambda k: 2 * k)))
    t = dims("T", st.integers(1, 5))
    seed = draw(seeds, label="seed")
    base = dims.value("base", sampled_from([10000.0, 10000.0, 500000.0]))
    x = fill(dtype, (dims("heads", st.integers(1, 2)), t, d), draw(magnitudes(-4, 4), label="|x|"), seed)
    rule = draw(scaling(kinds, rotary_dim or d, dims))
    return Case(
        {"x": x, "positions": draw(positions(t, long_positions(dtype)))},
        {"base": base, "rotary_dim": rotary_dim, "scaling": rule},
        {"seed": seed},
    )

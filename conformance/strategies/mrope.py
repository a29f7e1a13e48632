"""Hypothesis strategies for multimodal RoPE and the NoPE layers' attention temperature.

M-RoPE cases draw the three streams as a text token has them (t = h = w), as an image's patches have them (t fixed,
h and w walking a grid, Qwen2-VL's layout) or independently, at short and long positions; sections as Qwen2-VL
(16, 24, 24) and Qwen3-VL (24, 20, 20) ship them for d = 128, and any split of d/2 otherwise. Temperature cases
draw consecutive positions around the steps of τ (p + 1 a multiple of the floor scale) and far past them.
"""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from transformer_conformance.conformance.strategies.choices import sampled_from
from transformer_conformance.conformance.strategies.common import Case, fill, magnitudes, positions, seeds
from transformer_conformance.conformance.strategies.plan import Dims, shapes
from transformer_conformance.reference.formats import Format

#: the sections models ship for head dim 128: Qwen2-VL and Qwen2.5-VL, Qwen3-VL
SHIPPED_SECTIONS = {"sections": (16, 24, 24), "interleaved": (24, 20, 20)}
#: Qwen2-VL's rope_theta 10^6, Qwen3-VL's 5·10^6, and RoPE's 10^4
BASES = [1_000_000.0, 5_000_000.0, 10000.0]
POSITION_KINDS = ("text", "image", "independent")
#: Llama 4's floor scale 8192 and attention scale 0.1, and others that move the steps closer
FLOOR_SCALES = [8192, 8192, 1024, 3, 1]
ATTN_SCALES = [0.1, 0.1, 0.5, 2.0]

#: The size regimes: Qwen2-VL-7B's 28 heads over 300 tokens of head dim 128, image positions
MROPE_REGIME = (28, 300, 128)


@st.composite
def stream_positions(draw: st.DrawFn, t: int, kind: str | None = None) -> np.ndarray:
    """Positions (3, T) of one of ``POSITION_KINDS``."""
    kind = kind or draw(sampled_from(POSITION_KINDS), label="positions")
    if kind == "text":
        return np.repeat(draw(positions(t, below_2_24=True))[None], 3, axis=0)
    if kind == "image":
        start = draw(sampled_from([0, 7, 4090, 70_000, 140_000]), label="image's first position")
        width = draw(st.integers(1, max(1, t)), label="grid width")
        i = np.arange(t)
        return np.stack([np.full(t, start), start + i // width, start + i % width]).astype(np.int64)
    return np.stack([draw(positions(t, below_2_24=True)) for _ in range(3)])


#: The planned shapes (conformance/strategies/plan.py): Qwen2-VL's head (d/2 = 64, its shipped sections), a narrow
#: head and a middling one; under a ``per_value`` plan each also states the base and its sections (the shipped ones
#: of the streams drawn, a stream with no pairs, uneven ones)
MROPE_SHAPES = shapes(
    ("d/2", "T", "heads", "base", "sections"),
    (64, 4, 2, 1_000_000.0, "shipped"),
    (3, 6, 1, 10000.0, (0, 2, 1)),
    (16, 2, 3, 5_000_000.0, (7, 5, 4)),
)
TEMPERATURE_SHAPES = shapes(("T", "D/2", "heads"), (4, 64, 2), (6, 3, 1), (1, 32, 3))


@st.composite
def sections(draw: st.DrawFn, half: int, streams: str) -> tuple[int, int, int]:
    if half == 64 and draw(st.booleans(), label="shipped sections"):
        return SHIPPED_SECTIONS[streams]
    n_t = draw(st.integers(0, half), label="n_t")
    n_h = draw(st.integers(0, half - n_t), label="n_h")
    return (n_t, n_h, half - n_t - n_h)


@st.composite
def mrope_case(draw: st.DrawFn, dtype: Format, streams: tuple[str, ...], kind: str | None = None) -> Case:
    dims = Dims(draw, MROPE_SHAPES)
    half = dims("d/2", st.one_of(st.integers(1, 8), sampled_from([16, 32, 64])))
    how = draw(sampled_from(streams), label="streams")
    t = dims("T", st.integers(1, 6))
    heads = dims("heads", st.integers(1, 3))
    seed = draw(seeds, label="seed")
    x = fill(dtype, (heads, t, 2 * half), draw(magnitudes(-4, 4), label="|x|"), seed)
    base = dims.value("base", sampled_from(BASES))
    stated = dims.value("sections", sections(half, how))
    params = {"base": base, "sections": SHIPPED_SECTIONS[how] if stated == "shipped" else stated, "streams": how}
    return Case({"x": x, "positions": draw(stream_positions(t, kind))}, params, {"seed": seed})


@st.composite
def mrope_cases(draw: st.DrawFn, dtype: Format, streams: tuple[str, ...]) -> list[Case]:
    """One regime case per declared streams value: shipped sections, an image's grid of positions."""
    heads, t, d = MROPE_REGIME
    seed = draw(seeds, label="seed")
    out = []
    for i, how in enumerate(streams):
        i_t = np.arange(t)
        pos = np.stack([np.full(t, 3), 3 + i_t // 20, 3 + i_t % 20]).astype(np.int64)
        x = fill(dtype, (heads, t, d), 1.0, seed + i)
        params = {"base": 1_000_000.0, "sections": SHIPPED_SECTIONS[how], "streams": how}
        out.append(Case({"x": x, "positions": pos}, params, {"seed": seed + i, "regime": f"{how}: {heads}×{t}×{d}"}))
    return out


@st.composite
def temperature_positions(draw: st.DrawFn, t: int, floor_scale: float) -> np.ndarray:
    """Positions of T consecutive tokens (a model's, p₀ + t) starting a little before a step of τ (p + 1 = n·F), or
    far past the steps: up to 2^17, past float16's 65504."""
    step = draw(st.integers(0, 15), label="step")
    before = draw(st.integers(0, 3), label="tokens before the step")
    start = max(0, int(step * floor_scale) - 1 - before)
    start = draw(sampled_from([start, start, 70_000, 130_000]), label="first position")
    return np.arange(start, start + t, dtype=np.int64)


@st.composite
def temperature_case(draw: st.DrawFn, dtype: Format) -> Case:
    dims = Dims(draw, TEMPERATURE_SHAPES)
    t = dims("T", st.integers(1, 6))
    # even: a NoPE layer has the head width of the model's RoPE layers
    d = 2 * dims("D/2", st.one_of(st.integers(1, 8), sampled_from([32, 64])))
    heads = dims("heads", st.integers(1, 3))
    seed = draw(seeds, label="seed")
    floor_scale = draw(sampled_from(FLOOR_SCALES), label="floor_scale")
    params = {"floor_scale": floor_scale, "attn_scale": draw(sampled_from(ATTN_SCALES), label="attn_scale")}
    q = fill(dtype, (heads, t, d), draw(magnitudes(-4, 4), label="|q|"), seed)
    return Case({"q": q, "positions": draw(temperature_positions(t, floor_scale))}, params, {"seed": seed})

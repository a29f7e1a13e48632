"""Hypothesis strategies for the checks: shapes, magnitudes and positions that reach the edges.

Arrays are drawn as (shape, magnitude, offset, seed) and filled from NumPy's generator: fast for
arrays of thousands of elements, shrinkable in the parameters that matter (shape and magnitude), and
reproducible from the printed case. Every floating array is rounded to the dtype under test before
anyone sees it, so the oracle and the candidate start from the same values.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
from hypothesis import strategies as st

from transformer_conformance.conformance.harness.autocast import autocast_dtype
from transformer_conformance.conformance.strategies.choices import sampled_from
from transformer_conformance.conformance.strategies.plan import Dims, shapes
from transformer_conformance.reference.formats import Format

#: Odd and power-of-two feature widths: odd widths catch vectorisation tails, large ones long reductions.
WIDTHS = st.one_of(st.integers(1, 48), sampled_from([63, 64, 127, 128, 255, 256, 1024, 4096]))


@dataclass
class Case:
    """One drawn example: the candidate's inputs (in the dtype), their float64 values, and parameters."""

    inputs: dict[str, np.ndarray]
    params: dict[str, Any]
    about: dict[str, Any] = field(default_factory=dict)

    def values(self) -> dict[str, np.ndarray]:
        """The inputs as exact float64 (integers untouched)."""
        return {k: v if v.dtype.kind in "iu" else v.astype(np.float64) for k, v in self.inputs.items()}


def fill(dtype: Format, shape: tuple[int, ...], magnitude: float, seed: int, offset: float = 0.0) -> np.ndarray:
    """Normal(offset, magnitude) values rounded to ``dtype`` (clipped to its finite range)."""
    v = np.random.default_rng(seed).standard_normal(shape)
    v *= magnitude  # in place: a size regime fills millions of elements
    v += offset
    return dtype.round(np.clip(v, -dtype.max_finite, dtype.max_finite, out=v))


@st.composite
def magnitudes(draw: st.DrawFn, lo: int, hi: int) -> float:
    """m·2^e for a mantissa m in [1, 2) and e in [lo, hi]."""
    return draw(st.floats(1.0, 2.0, exclude_max=True)) * 2.0 ** draw(st.integers(lo, hi))


def norm_magnitudes(dtype: Format) -> st.SearchStrategy[float]:
    """Tiny (mean(x²) near ε), ordinary and large activations; in float16 up to |x| ≈ 2^10, past the
    |x| > 256 where a square or a sum taken in float16 overflows."""
    return magnitudes(-12, 10 if dtype.name == "float16" else 8)


seeds = st.integers(0, 2**32 - 1)

#: A common offset this many times the spread (the "common offset ≥ 1000 × spread" regime,
#: conformance/harness/regimes.py): in float16 the spread still survives rounding (its spacing there is the spread)
FAR_OFFSET = 1500.0


def coarse_weight(dtype: Format) -> float:
    """A stored weight's centre where the dtype's spacing is 2 (bfloat16 384, float16 3072, float32 1.5·2^24): an
    offset added to it (Gemma's 1 + w) or a sum in its dtype loses bits (the "weights on a coarse grid" regime)."""
    return 1.5 * 2.0**dtype.precision


def near_overflow(dtype: Format) -> float:
    """2^−7 of the dtype's largest finite value: inside the "near overflow" regimes' 8 binades, with room for a
    spread of a few units and a log Σ exp."""
    return dtype.max_finite * 2.0**-7


#: The planned shapes (conformance/strategies/plan.py) of the cases below: one element (where compilers and kernels
#: take other paths: jax's one-element bfloat16 dot fails to compile), an odd width (a vectorised loop's tail), one
#: short of a power of two, and a long row. RoPE's: the whole head rotated, or a part of it (32 of 64, and the one pair
#: of 2, where a compiler specialises the width), each row also stating its base (read under a ``per_value`` plan)
NORM_SHAPES = shapes(("rows", "n"), (1, 1), (2, 7), (3, 127), (1, 4096))
ROPE_SHAPES = shapes(
    ("d/2", "rotary_dim", "T", "heads", "base"),
    (1, None, 1, 1, 10000.0),
    (3, None, 5, 2, 500000.0),
    (32, 32, 6, 1, 100.0),
    (64, None, 3, 3, 10000.0),
    (4, 2, 2, 2, 10000.0),
)
SWIGLU_SHAPES = shapes(("d", "h", "leading shape"), (1, 1, (1,)), (5, 13, (2, 3)), (16, 43, (1,)), (40, 72, (3,)))
LOGITS_SHAPES = shapes(("tokens", "vocab"), (1, 2), (3, 7), (2, 255), (4, 4099))


@st.composite
def norm_case(draw: st.DrawFn, dtype: Format, with_bias: bool) -> Case:
    dims = Dims(draw, NORM_SHAPES)
    rows = dims("rows", st.integers(1, 4))
    n = dims("n", WIDTHS)
    mag = draw(norm_magnitudes(dtype), label="|x|")
    offset = draw(sampled_from([0.0, 0.0, 1.0, -3.0, FAR_OFFSET]), label="offset") * mag
    seed = draw(seeds, label="seed")
    eps = draw(sampled_from([1e-6, 1e-5, 1e-8, None]), label="eps")
    # γ near 1 at three spreads, or centred where the dtype's spacing is 2
    centre = draw(sampled_from([1.0, 1.0, 1.0, coarse_weight(dtype)]), label="weight centre")
    spread = draw(sampled_from([0.5, 1.0, 2.0]), label="weight spread") * (1.0 if centre == 1.0 else 0.1 * centre)
    inputs = {
        "x": fill(dtype, (rows, n), mag, seed, offset),
        "weight": fill(dtype, (n,), spread, seed + 1, offset=centre),
    }
    if with_bias:
        inputs["bias"] = fill(dtype, (n,), 0.5, seed + 2)
    return Case(inputs, {"eps": eps}, {"|x|": mag, "offset": offset, "seed": seed})


#: First positions of a case in an autocast mode: long contexts only, where angles formed in bfloat16 or float16
#: under autocast (transformers 4.38's RoPE matmul) are wrong by whole radians — 15962 is where its cos read
#: −0.27 instead of −0.91 (conformance/harness/autocast.py).
LONG_STARTS = [2000, 4090, 8191, 15962, 30000, 99_990]


def long_positions(dtype: Format) -> bool:
    """Whether a case of ``dtype`` draws only long-context positions: one of an autocast mode."""
    return autocast_dtype(dtype) is not None


@st.composite
def positions(draw: st.DrawFn, t: int, long: bool = False, below_2_24: bool = False) -> np.ndarray:
    """Positions from 0 … 64, from the 4096 edge where bfloat16 stops counting integers exactly, up to 10⁵,
    past 2^17 (beyond a 128k context), and across 2^24, where float32 stops counting them exactly (from
    2^24 − 1: an odd stride lands on positions float32 cannot hold); with ``long``, from 2000 up only
    (``LONG_STARTS``); with ``below_2_24``, not across 2^24."""
    starts = LONG_STARTS if long else [0, 1, 2000, 4090, 8191, 30000, 99_990, 131_075, 2**24 - 1, 131_075, 2**24 - 1]
    if below_2_24:
        starts = [s for s in starts if s < 2**24 - 64]
    start = draw(sampled_from(starts), label="first position")
    stride = draw(st.integers(1, 7), label="stride")
    return np.arange(start, start + stride * t, stride, dtype=np.int64)


@st.composite
def rope_case(draw: st.DrawFn, dtype: Format) -> Case:
    dims = Dims(draw, ROPE_SHAPES)
    half = dims("d/2", st.one_of(st.integers(1, 8), sampled_from([16, 32, 64])))
    d = 2 * half
    rotary_dim = dims("rotary_dim", st.one_of(st.none(), st.integers(1, half).map(lambda k: 2 * k)))
    t = dims("T", st.integers(1, 6))
    heads = dims("heads", st.integers(1, 3))
    seed = draw(seeds, label="seed")
    base = dims.value("base", sampled_from([10000.0, 10000.0, 500000.0, 100.0]))
    x = fill(dtype, (heads, t, d), draw(magnitudes(-4, 4), label="|x|"), seed)
    pos = draw(positions(t, long_positions(dtype)))
    return Case({"x": x, "positions": pos}, {"base": base, "rotary_dim": rotary_dim}, {"seed": seed})


@st.composite
def swiglu_case(draw: st.DrawFn, dtype: Format) -> Case:
    dims = Dims(draw, SWIGLU_SHAPES)
    d = dims("d", st.integers(1, 40))
    h = dims("h", st.integers(1, 72))
    lead = dims("leading shape", sampled_from([(1,), (3,), (2, 3)]))
    seed = draw(seeds, label="seed")
    # |x| up to 2^5: the gated product grows like |x|², and float16 intermediates must stay finite
    mag = draw(magnitudes(-3, 5 if dtype.name == "float16" else 8), label="|x|")
    inputs = {
        "x": fill(dtype, (*lead, d), mag, seed),
        "w1": fill(dtype, (d, h), d**-0.5, seed + 1),
        "w3": fill(dtype, (d, h), d**-0.5, seed + 2),
        "w2": fill(dtype, (h, d), h**-0.5, seed + 3),
    }
    return Case(inputs, {}, {"|x|": mag, "seed": seed})


@st.composite
def logits_case(draw: st.DrawFn, dtype: Format, with_targets: bool) -> Case:
    dims = Dims(draw, LOGITS_SHAPES)
    n = dims("tokens", st.integers(1, 4))
    v = dims("vocab", st.one_of(st.integers(2, 40), sampled_from([255, 1000, 4099])))
    seed = draw(seeds, label="seed")
    spread = draw(sampled_from([0.5, 2.0, 8.0]), label="spread")
    # far from zero: a common offset FAR_OFFSET times the spread, or (float16) within 8 binades of overflow; in
    # float32 and bfloat16 that is 10^36, beyond what the losses' error model bounds
    # (z-loss: α·z² is finite there, but z² formed in float16 overflows once |z| > 256)
    far = -near_overflow(dtype) if dtype.name == "float16" else -1000.0
    shift = draw(sampled_from([0.0, 0.0, 30.0, -50.0, FAR_OFFSET, far]), label="shift")
    if shift == FAR_OFFSET:
        shift *= spread
    logits = fill(dtype, (n, v), spread, seed, offset=shift)
    rng = np.random.default_rng(seed + 1)
    targets = rng.integers(0, v, size=n)
    confident = draw(sampled_from([0.0, 0.0, 20.0, 60.0]), label="confidence")
    if confident:
        # a large margin on the target: p(target) near 1, the loss near 0
        f = logits.astype(np.float64)
        f[np.arange(n), targets] = f.max(axis=-1) + confident
        logits = dtype.round(f)
    inputs = {"logits": logits}
    params: dict[str, Any] = {}
    if with_targets:
        inputs["targets"] = targets.astype(np.int64)
    else:
        params["alpha"] = draw(sampled_from([1e-4, 1e-4, 1e-3, 0.1]), label="alpha")
        inputs["logits"], shift = z_in_range(logits, params["alpha"], dtype, shift)
    return Case(inputs, params, {"spread": spread, "shift": shift, "confidence": confident, "seed": seed})


def z_in_range(logits: np.ndarray, alpha: float, dtype: Format, shift: float) -> tuple[np.ndarray, float]:
    """``logits`` moved by a common offset, if need be, so that every row's α·z² (z = log Σ exp) is at most half
    the dtype's largest value: a z-loss whose exact value overflows the dtype has no answer to compare with.
    Returns the logits and their new common shift."""
    f = logits.astype(np.float64)
    z = np.log(np.exp(f - f.max(-1, keepdims=True)).sum(-1)) + f.max(-1)
    limit = float(np.sqrt(dtype.max_finite / (2.0 * alpha)))
    worst = float(z[np.argmax(np.abs(z))]) if z.size else 0.0
    if abs(worst) <= limit:
        return logits, shift
    move = -np.sign(worst) * (abs(worst) - limit)
    return dtype.round(f + move), shift + float(move)


@st.composite
def cotangent(draw: st.DrawFn, dtype: Format, shape: tuple[int, ...]) -> np.ndarray:
    """A non-uniform upstream gradient of the output's shape."""
    return fill(dtype, shape, draw(sampled_from([1.0, 0.01, 64.0]), label="|g|"), draw(seeds, label="g seed"))

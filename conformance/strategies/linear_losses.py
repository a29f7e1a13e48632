"""Hypothesis strategies for the fused LM-head loss and the token-reduced z-loss: hidden widths from 1 to 64,
vocabularies from 2 to 2053 (a few large ones, cheap at a handful of tokens), logits far from zero (the max
shift), confident rows, ignored tokens (a fraction, with ignore_index −100, 0 or the last class), and inputs
whose logits are exactly representable in the dtype under test (the fused loss against the unfused one)."""

from __future__ import annotations

from typing import Any

import numpy as np
from hypothesis import strategies as st

from transformer_conformance.conformance.strategies.choices import sampled_from
from transformer_conformance.conformance.strategies.common import Case, fill, seeds, z_in_range
from transformer_conformance.conformance.strategies.losses import ignored_case
from transformer_conformance.conformance.strategies.plan import Dims, shapes
from transformer_conformance.reference.formats import Format

HIDDEN = (1, 2, 8, 16, 64)
VOCAB = st.one_of(st.integers(2, 40), sampled_from([255, 1000, 2053]))
#: The planned shapes (conformance/strategies/plan.py): tokens × hidden × vocabulary
LINEAR_CE_SHAPES = shapes(("tokens", "hidden", "vocab"), (3, 2, 7), (6, 16, 255), (1, 8, 2053))


def ignore(draw: st.DrawFn, targets: np.ndarray, v: int, *, keep_one: bool = True) -> tuple[np.ndarray, int, int]:
    """Targets with a drawn fraction ignored (at least one kept with ``keep_one``): (targets, ignore_index,
    how many ignored). A real target equal to ignore_index is moved to the next class."""
    n = len(targets)
    ignore_index = draw(sampled_from([-100, -100, 0, v - 1]) if v > 1 else st.just(-100), label="ignore_index")
    fraction = draw(sampled_from([0.0, 0.3, 0.7]), label="ignored fraction")
    ignored = np.asarray(np.random.default_rng(draw(seeds, label="mask seed")).random(n) < fraction)
    if keep_one:
        ignored[draw(st.integers(0, n - 1), label="kept token")] = False
    moved = np.where(targets == ignore_index, (targets + 1) % v, targets)
    return np.where(ignored, ignore_index, moved).astype(np.int64), ignore_index, int(ignored.sum())


@st.composite
def linear_ce_case(draw: st.DrawFn, dtype: Format, reductions: tuple[str, ...], exact: bool = False) -> Case:
    """x (N, H), weight (V, H), bias (V,), targets (N,) with some ignored; logits of spread ~1 to ~16 around
    an offset of 0, +30 or −50 (the bias), sometimes one confident row. ``exact``: small integers scaled by a
    power of two, so that x·Wᵀ + b is exact in the dtype (|u| ≤ 60·4)."""
    dims = Dims(draw, LINEAR_CE_SHAPES, lambda s: not exact or s["hidden"] in HIDDEN[:3])
    n = dims("tokens", st.integers(1, 6))
    h = dims("hidden", sampled_from(HIDDEN[:3] if exact else HIDDEN))
    v = dims("vocab", VOCAB)
    seed = draw(seeds, label="seed")
    rng = np.random.default_rng(seed)
    if exact:
        scale = 2.0 ** draw(sampled_from([-2, 0, 2]), label="scale")
        x = dtype.round(rng.integers(-3, 4, size=(n, h)).astype(np.float64))
        w = dtype.round(scale * rng.integers(-2, 3, size=(v, h)).astype(np.float64))
        b = dtype.round(scale * rng.integers(-8, 9, size=v).astype(np.float64))
        about: dict[str, Any] = {"seed": seed, "exact": True, "scale": scale}
    else:
        spread = draw(sampled_from([1.0, 4.0, 16.0]), label="logit spread")
        offset = draw(sampled_from([0.0, 0.0, 30.0, -50.0]), label="logit offset")
        x = fill(dtype, (n, h), 1.0, seed)
        w = fill(dtype, (v, h), spread / np.sqrt(h), seed + 1)
        b = fill(dtype, (v,), 1.0, seed + 2, offset=offset)
        about = {"seed": seed, "spread": spread, "offset": offset}
    targets = rng.integers(0, v, size=n)
    if not exact and draw(st.booleans(), label="confident row"):
        # the first token's target class far above the rest: p(target) near 1, its loss near 0
        b = b.astype(np.float64)
        b[targets[0]] = float(np.max(b)) + 4.0 * about["spread"] + 20.0
        b = dtype.round(b)
    targets, ignore_index, n_ignored = ignore(draw, targets, v)
    reduction = draw(sampled_from(reductions), label="reduction")
    about |= {"ignored": n_ignored}
    return Case(
        {"x": x, "weight": w, "bias": b, "targets": targets},
        {"ignore_index": ignore_index, "reduction": reduction},
        about,
    )


@st.composite
def z_loss_mean_case(draw: st.DrawFn, dtype: Format) -> Case:
    """ignored_case's logits and targets (some ignored, at least one kept) with α 10⁻⁴, 10⁻³ or 0.1."""
    case: Case = draw(ignored_case(dtype), label="case")
    alpha = draw(sampled_from([1e-4, 1e-4, 1e-3, 0.1]), label="alpha")
    case.params = {"alpha": alpha, "ignore_index": case.params.get("ignore_index", -100)}
    case.inputs["logits"], shift = z_in_range(case.inputs["logits"], alpha, dtype, float(case.about.get("shift", 0.0)))
    case.about["shift"] = shift
    return case

"""Hypothesis strategies for MoE routing and its load-balancing loss: few or many experts (2 … 64, Qwen's 60), k from
1 to 8, softmax and sigmoid scores, a selection-only bias, groups of experts, a routed scaling factor — each only as
the adapter declares it (``adapters.CHOICES["moe_router"]``).

Selection is discontinuous: two experts whose scores a correct candidate may order either way would make its
verdict a coin toss. Every drawn case therefore keeps, in float64, the last selected and the first unselected
expert (and group) apart by a relative 2^-14 of their scores: no rounding of a score computed in float32 (2^-24,
a few units for the exponential) reorders them.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from hypothesis import assume
from hypothesis import strategies as st

from transformer_conformance.conformance.strategies.choices import sampled_from
from transformer_conformance.conformance.strategies.common import Case, fill, magnitudes, seeds, z_in_range
from transformer_conformance.conformance.strategies.plan import Dims, shapes
from transformer_conformance.reference import moe
from transformer_conformance.reference.formats import Format

#: how far apart (relative) the last selected and the first unselected expert or group are
SEPARATION = 2.0**-14
EXPERTS = [2, 3, 4, 8, 16, 60, 64]
#: DeepSeek-V3's routed scaling factor 2.5, Kimi K2's 2.827, and a power of two
SCALINGS = [2.5, 2.827, 16.0]
SELECTIONS = ("top_k", "bias", "groups")
ROUTED_SCALING = ("none", "factor")

#: The size regimes: tokens; DeepSeek-V3's router (256 experts, k 8, 8 groups of which 4 kept); a wide k (16 of 64,
#: past the k ≤ 8 fast paths of fused top-k kernels); the load-balancing loss over many tokens (tokens, E, k).
REGIME_TOKENS = 1024
MANY_EXPERTS = (256, 8, 8, 4)
WIDE_K = (64, 16)
AUX_TOKENS = (16_384, 64, 8)
#: the router z-loss's regime: DeepSeek-V3's 256 routed experts over 4096 tokens
Z_TOKENS = (4096, 256)
#: The planned shapes (conformance/strategies/plan.py): a few experts, Mixtral's 8 and Qwen's 60 (even, for groups).
#: The load-balancing loss's k is its selection's width (a top-k of static width), planned with its shape.
#: The router: under a ``per_value`` plan each shape also states the structure a compiler builds a program for — the
#: score, the normalisation, the selection (with DeepSeek's groups: n_group and topk_group, stated on every row of an
#: even E for a candidate that declares groups alone), k and the routed scaling — two rows a shape, each score,
#: normalisation and scaling on two shapes (tests/test_shape_plan.py); a value the adapter does not declare is drawn
#: freely.
ROUTER_SHAPES = shapes(
    ("E", "N", "k", "n_group", "topk_group", "scaling", "score", "norm", "selection", "routed"),
    (3, 5, 2, None, None, 2.5, "softmax", "none", "top_k", "none"),
    (3, 5, 1, None, None, 2.5, "sigmoid", "topk", "bias", "factor"),
    (8, 2, 3, 4, 2, 2.827, "sigmoid", "topk", "groups", "factor"),
    (8, 2, 2, 4, 2, 2.827, "softmax", "topk", "top_k", "factor"),
    (60, 6, 8, 2, 1, 16.0, "softmax", "none", "groups", "none"),
    (60, 6, 4, 2, 1, 16.0, "sigmoid", "none", "bias", "factor"),
)
AUX_LOSS_SHAPES = shapes(("E", "N", "k"), (3, 7, 1), (8, 16, 2), (64, 5, 8))
Z_LOSS_SHAPES = shapes(("E", "N"), (3, 7), (16, 32), (256, 2))


def separated(values: np.ndarray, k: int) -> bool:
    """Each row's k-th and (k+1)-th largest values are a relative SEPARATION apart (True when k is the width)."""
    if k >= values.shape[-1]:
        return True
    top = -np.sort(-values, axis=-1)
    a, b = top[:, k - 1], top[:, k]
    return bool(np.all(np.isfinite(a)) and np.all(a - b >= SEPARATION * np.maximum(np.abs(a), np.abs(b))))


def logits(dtype: Format, n: int, e: int, spacing: float, offset: float, seed: int) -> np.ndarray:
    """Each token's logits a random permutation of E values ``spacing`` apart around ``offset``, in ``dtype``."""
    ranks = np.argsort(np.random.default_rng(seed).random((n, e)), axis=-1).astype(np.float64)
    return dtype.round((ranks - (e - 1) / 2) * spacing + offset)


def selection_is_clear(case: Case) -> bool:
    """The drawn router case selects its experts (and groups) with room to spare (the module docstring)."""
    x, p = case.values(), case.params
    score, k = p["score"], int(p["k"])
    choice = moe.router_scores(x["logits"], score) + x["bias"][None, :]
    if p["n_group"] is not None:
        n, e = choice.shape
        grouped = choice.reshape(n, p["n_group"], e // p["n_group"])
        best = np.sort(grouped, axis=-1)[..., ::-1][..., :2].sum(axis=-1)
        if not separated(best, int(p["topk_group"])):
            return False
        choice = np.where(moe.group_mask(choice, p["n_group"], p["topk_group"]), choice, -np.inf)
    return separated(choice, k)


@st.composite
def router_case(
    draw: st.DrawFn,
    dtype: Format,
    scores: tuple[str, ...] = moe.SCORES,
    norms: tuple[str, ...] = moe.NORMS,
    selections: tuple[str, ...] = SELECTIONS,
    scalings: tuple[str, ...] = ROUTED_SCALING,
) -> Case:
    """A router case among the declared scores, normalisations, selections and scalings."""
    dims = Dims(draw, ROUTER_SHAPES, lambda s: any(h != "groups" or s["E"] % 2 == 0 for h in selections))
    score = dims.value("score", sampled_from(scores), lambda v: v in scores)
    norm = dims.value("norm", sampled_from(norms), lambda v: v in norms)
    planned_e = dims.stated("E")  # a planned shape of an odd E has no groups of experts
    usable = [h for h in selections if h != "groups" or planned_e is None or planned_e % 2 == 0]
    how = dims.value("selection", sampled_from(usable), lambda v: v in usable)
    e = dims("E", sampled_from([x for x in EXPERTS if how != "groups" or x % 2 == 0]))
    n = dims("N", st.integers(1, 6))
    n_group = topk_group = None
    if how == "groups":
        groups = [g for g in (2, 4, 8) if e % g == 0 and g < e] or [e // 2]
        n_group = dims.value("n_group", sampled_from(groups), lambda g: g in groups)
        topk_group = dims.value("topk_group", st.integers(1, n_group), lambda g: 1 <= g <= n_group)
        most = min(8, topk_group * (e // n_group))
        k = dims.value("k", st.integers(1, most), lambda k: 1 <= k <= most)
    else:
        k = dims.value("k", st.integers(1, min(8, e)), lambda k: 1 <= k <= min(8, e))
    # spacings the dtype holds exactly around the offset; sigmoid scores saturate beyond |u| ≈ 8, so its logits stay
    # nearer zero (a score whose neighbours differ by less than a float32 rounding would be a coin toss)
    spacing = draw(sampled_from([0.125, 0.25, 0.5] if score == "softmax" else [0.0625, 0.125]), label="spacing")
    if score == "sigmoid":
        spacing = min(spacing, 4.0 / e)  # every logit within 2 of the offset
    offset = draw(sampled_from([0.0, 0.0, -2.0, 3.0] if score == "softmax" else [0.0, 0.0, -1.0, 1.5]), label="offset")
    seed = draw(seeds, label="seed")
    bias: np.ndarray = np.zeros(e)
    if how != "top_k":
        # multiples of 2^-6 in [−1/4, 1/4]: exact in every dtype, and still after a shift by a multiple of 1/4
        grid = np.random.default_rng(seed + 1).integers(-16, 17, e) * 2.0**-6
        bias = grid * draw(sampled_from([0.5, 1.0]), label="|bias|")
    routed = dims.value("routed", sampled_from(scalings), lambda v: v in scalings) == "factor"
    scaling = dims.value("scaling", sampled_from(SCALINGS)) if routed else 1.0
    inputs = {"logits": logits(dtype, n, e, spacing, offset, seed), "bias": dtype.round(bias)}
    params: dict[str, Any] = {
        "k": k,
        "score": score,
        "norm": norm,
        "routed_scaling_factor": scaling,
        "n_group": n_group,
        "topk_group": topk_group,
    }
    case = Case(inputs, params, {"E": e, "seed": seed})
    assume(selection_is_clear(case))
    return case


@st.composite
def aux_loss_case(draw: st.DrawFn, dtype: Format) -> Case:
    """Softmax logits of N tokens over E experts for the load-balancing loss, k selected per token."""
    dims = Dims(draw, AUX_LOSS_SHAPES)
    e = dims("E", sampled_from(EXPERTS))
    n = dims("N", st.integers(1, 16))
    k = dims("k", st.integers(1, min(8, e)))
    spacing = draw(sampled_from([0.125, 0.25, 0.5, 1.0]), label="spacing")
    offset = draw(sampled_from([0.0, 0.0, -4.0, 6.0]), label="offset")
    x = logits(dtype, n, e, spacing, offset, draw(seeds, label="seed"))
    assume(separated(moe.router_scores(x.astype(np.float64), "softmax"), k))
    return Case({"logits": x}, {"k": k}, {"E": e})


def _first(declared: tuple[str, ...], preferred: tuple[str, ...]) -> str:
    """The first of ``preferred`` the adapter declares (every choice declares at least one value)."""
    return next((v for v in preferred if v in declared), declared[0])


def _block_ranks(rng: np.random.Generator, n: int, e: int, groups: int) -> np.ndarray:
    """Per token, the ranks 0 … E−1 with each group of E/groups experts holding a contiguous block of them (the
    blocks in a random order, shuffled inside): group scores and the selection inside the kept groups stay apart."""
    size = e // groups
    blocks = np.argsort(rng.random((n, groups)), axis=-1)  # the block of ranks each group holds
    inner = np.argsort(rng.random((n, e)).reshape(n, groups, size), axis=-1)
    return (blocks[:, :, None] * size + inner).reshape(n, e).astype(np.float64)


@st.composite
def router_cases(draw: st.DrawFn, dtype: Format, choices: dict[str, tuple[str, ...]]) -> list[Case]:
    """DeepSeek-V3's many experts in groups (or as much of it as the adapter declares) and a wide k, each over
    REGIME_TOKENS tokens; the bias 0, so that the drawn order is the selection's."""
    seed = draw(seeds, label="seed")
    rng = np.random.default_rng(seed)
    norm = _first(choices["norm"], ("topk", "none"))
    scaling = 2.5 if "factor" in choices["routed_scaling"] else 1.0
    cases = []
    for e, k, groups, kept, preferred in (
        (*MANY_EXPERTS, ("sigmoid", "softmax")),
        (WIDE_K[0], WIDE_K[1], 1, 1, ("softmax", "sigmoid")),
    ):
        score = _first(choices["score"], preferred)
        how = _first(choices["selection"], ("groups", "bias", "top_k") if groups > 1 else ("top_k", "bias", "groups"))
        n_group = groups if how == "groups" else None
        ranks = _block_ranks(rng, REGIME_TOKENS, e, groups if n_group else 1)
        spacing = 0.25 if score == "softmax" else 4.0 / e
        inputs = {"logits": dtype.round((ranks - (e - 1) / 2) * spacing), "bias": dtype.round(np.zeros(e))}
        params: dict[str, Any] = {
            "k": k,
            "score": score,
            "norm": norm,
            "routed_scaling_factor": scaling,
            "n_group": n_group,
            "topk_group": kept if n_group else None,
        }
        what = f"{REGIME_TOKENS} tokens, E {e}, k {k}, {score}" + (f", {groups} groups keep {kept}" if n_group else "")
        cases.append(Case(inputs, params, {"regime": what, "seed": seed}))
    return cases


@st.composite
def aux_loss_cases(draw: st.DrawFn, dtype: Format) -> list[Case]:
    """The load-balancing loss over AUX_TOKENS: a mean over many tokens of many experts."""
    seed = draw(seeds, label="seed")
    n, e, k = AUX_TOKENS
    x = logits(dtype, n, e, 0.25, 0.0, seed)
    return [Case({"logits": x}, {"k": k}, {"regime": f"{n} tokens, E {e}, k {k}", "seed": seed})]


@st.composite
def z_loss_case(draw: st.DrawFn, dtype: Format, extreme: bool = True) -> Case:
    """Router logits of N tokens over E experts for the router z-loss: small to large magnitudes about a common
    offset, moved (if need be) so that every z² is representable (common.z_in_range). ``extreme`` False keeps the
    magnitudes below 4, where a sum of the N z² is representable in every dtype too (for the properties: an
    overflowing sum is the agreement checks' to find)."""
    dims = Dims(draw, Z_LOSS_SHAPES)
    e = dims("E", sampled_from([*EXPERTS, 256]))
    n = dims("N", st.integers(1, 32))
    mag = draw(magnitudes(-6, 5 if extreme else 1), label="|u|")
    offset = draw(sampled_from([0.0, 0.0, -8.0, 12.0]), label="offset")
    seed = draw(seeds, label="seed")
    x, shift = z_in_range(fill(dtype, (n, e), mag, seed, offset), 1.0, dtype, 0.0)
    return Case({"logits": x}, {}, {"E": e, "seed": seed, "shift": shift})


@st.composite
def z_loss_cases(draw: st.DrawFn, dtype: Format) -> list[Case]:
    """The router z-loss over Z_TOKENS: a mean over many tokens of a wide router."""
    seed = draw(seeds, label="seed")
    n, e = Z_TOKENS
    x = fill(dtype, (n, e), 2.0, seed, 1.0)
    return [Case({"logits": x}, {}, {"regime": f"{n} tokens, E {e}", "seed": seed})]

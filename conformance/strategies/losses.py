"""Hypothesis strategies for the loss reductions: ignored tokens (with any ignore_index, a vocabulary id
included) and soft-capped logits around and far beyond the cap."""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from transformer_conformance.conformance.strategies.choices import sampled_from
from transformer_conformance.conformance.strategies.common import FAR_OFFSET, Case, fill, logits_case, seeds
from transformer_conformance.conformance.strategies.plan import Dims, shapes
from transformer_conformance.reference.formats import Format

#: The planned shapes (conformance/strategies/plan.py): the logits' own (strategies/common.py), three tokens more
IGNORED_SHAPES = shapes(("extra tokens",), (3,))
SOFTCAP_SHAPES = shapes(("tokens", "vocab"), (3, 7), (2, 255), (4, 1000))


@st.composite
def ignored_case(draw: st.DrawFn, dtype: Format) -> Case:
    """logits_case with some tokens ignored (at least one kept): ignore_index −100, 0 or the last class."""
    case: Case = draw(logits_case(dtype, with_targets=True), label="logits")
    n, v = case.inputs["logits"].shape
    extra = Dims(draw, IGNORED_SHAPES)("extra tokens", st.integers(0, 5))
    if extra:  # more tokens, so that the ignored ones are a real fraction of them
        rows = fill(dtype, (extra, v), case.about["spread"], case.about["seed"] + 7, offset=case.about["shift"])
        case.inputs["logits"] = np.concatenate([case.inputs["logits"], rows])
        more = np.random.default_rng(case.about["seed"] + 8).integers(0, v, size=extra)
        case.inputs["targets"] = np.concatenate([case.inputs["targets"], more]).astype(np.int64)
        n += extra
    ignore_index = draw(sampled_from([-100, -100, 0, v - 1]), label="ignore_index")
    targets = case.inputs["targets"]
    fraction = draw(sampled_from([0.0, 0.3, 0.7]), label="ignored fraction")
    ignored = np.asarray(np.random.default_rng(draw(seeds, label="mask seed")).random(n) < fraction)
    keep = draw(st.integers(0, n - 1), label="kept token")
    ignored[keep] = False
    if targets[keep] == ignore_index:
        targets[keep] = (ignore_index + 1) % v
    targets = np.where(ignored, ignore_index, np.where(targets == ignore_index, (targets + 1) % v, targets))
    if ignore_index >= 0 and v == 1:
        return case
    case.inputs["targets"] = targets.astype(np.int64)
    case.params = {"ignore_index": ignore_index}
    case.about["ignored"] = int(ignored.sum())
    return case


@st.composite
def softcap_case(draw: st.DrawFn, dtype: Format) -> Case:
    """Logits of spread up to ~4c: the tanh's linear part, its knee and its saturation."""
    cap = draw(sampled_from([30.0, 50.0, 5.0]), label="cap")
    dims = Dims(draw, SOFTCAP_SHAPES)
    n = dims("tokens", st.integers(1, 4))
    v = dims("vocab", st.one_of(st.integers(2, 40), sampled_from([255, 1000])))
    seed = draw(seeds, label="seed")
    spread = draw(sampled_from([0.5, 0.3, 1.0, 4.0]), label="spread / cap") * cap
    shift = draw(sampled_from([0.0, 0.0, 1.0, -2.0, None]), label="shift / cap")
    # None: a common offset FAR_OFFSET times the spread (deep in the saturation)
    shift = FAR_OFFSET * spread if shift is None else shift * cap
    alpha = draw(sampled_from([1e-4, 1e-4, 1e-2]), label="alpha")
    logits = fill(dtype, (n, v), spread, seed, offset=shift)
    return Case({"logits": logits}, {"alpha": alpha, "cap": cap}, {"seed": seed, "spread": spread})

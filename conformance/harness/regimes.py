"""The input regimes the checks must reach, per contract operation: each a predicate on one call and its reason.

A regime is a region of an operation's inputs where correct implementations are easy to get wrong: magnitudes near
the dtype's overflow in an input or an intermediate (scores, logits, activations), stored weights where their dtype
no longer holds integers, rows whose common offset dwarfs their spread, positions past the 2^16 and 2^24 edges and
beyond the trained length, the trained lengths of current models (128k and more), single-key and ignored rows.
Each comes from the operation's formula and from how kernels are written (masks and their fill values, offsets,
clamps, casts of positions), not from one known defect. ``conformance/harness/reach.py`` counts, at every call of a
candidate, the regimes its inputs are in and the parameter values it was given; the report shows both, and the
project's tests fail when a default ``ci`` run leaves a regime unreached or a parameter at its default
(docs/coverage.md, "Parameters and regimes reached").

Sizes (many rows, long rows, vocabularies of 128k and more, long sequences, many heads) are not listed here: the
size draws and their budgets own them. A regime the contract leaves undefined is listed with ``drawn=False`` and
the reason it is not drawn (the report shows it as not drawn, the tests do not ask for it).

Predicates take the call's inputs as float64 values (integer inputs untouched), its parameters and the dtype under
test; they are cheap (a few reductions of the small arrays the checks draw).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from transformer_conformance.reference.formats import Format

Values = Mapping[str, np.ndarray]
Params = Mapping[str, Any]
Predicate = Callable[[Values, Params, Format], bool]

#: The contract's default of each parameter that has one (docs/adapter-contract.md): a parameter drawn only at its
#: default (or None) is a parameter the checks never exercise.
DEFAULTS: dict[str, Any] = {
    "eps": None,
    "base": 10000.0,
    "rotary_dim": None,
    "alpha": 1e-4,
    "ignore_index": -100,
    "softcap": None,
    "scale": None,
    "scaling": None,
    "kv_heads": None,
    "ffn_dim_multiplier": None,
    "multiple_of": 256,
    "scaling.beta_fast": 32,
    "scaling.beta_slow": 1,
    "scaling.low_freq_factor": 1.0,
    "scaling.high_freq_factor": 4.0,
    "streams": "sections",
    "floor_scale": 8192.0,
    "attn_scale": 0.1,
    "mscale": None,
    "form": "naive",
}

#: Sub-parameters of ``rope_scaled``'s ``scaling`` dict, recorded as ``scaling.NAME`` (those of the rules drawn)
SCALING_KEYS = (
    "type",
    "factor",
    "original_max_position_embeddings",
    "beta_fast",
    "beta_slow",
    "low_freq_factor",
    "high_freq_factor",
    "short_factor",
    "long_factor",
)

#: Within this many binades of the dtype's largest finite value: "near overflow"
NEAR_OVERFLOW_BINADES = 8
#: A row's common offset at least this many times its spread
OFFSET_OVER_SPREAD = 1000.0
#: Trained lengths of current long-context models (Llama 3.1's 131072 and beyond)
LONG_TRAINED_LENGTH = 131_072
#: The magnitude of the fill values kernels put in masked scores (−1e4 and float16's −65504 among them) is below this
BEYOND_MASK_FILL = 2.0**17


@dataclass(frozen=True)
class Regime:
    name: str
    ops: tuple[str, ...]
    predicate: Predicate
    reason: str
    #: False: listed, but the contract leaves it undefined and no check draws it (``reason`` says why)
    drawn: bool = True
    #: (choice, value): reached only when the operation's named choice takes this value (adapters.CHOICES); an
    #: adapter that does not declare it is never drawn the regime
    needs: tuple[str, str] | None = None


def _amax(a: np.ndarray) -> float:
    return float(np.max(np.abs(a))) if a.size else 0.0


def near_overflow(a: np.ndarray, dtype: Format) -> bool:
    """Some element of ``a`` within NEAR_OVERFLOW_BINADES binades of the dtype's overflow."""
    return _amax(a) >= dtype.max_finite * 2.0**-NEAR_OVERFLOW_BINADES


def coarse_grid(a: np.ndarray, dtype: Format) -> bool:
    """Some element whose spacing in the dtype is at least 1 (bfloat16 ≥ 256, float16 ≥ 2048, float32 ≥ 2^24)."""
    return _amax(a) >= 2.0 ** (dtype.precision - 1)


def offset_rows(a: np.ndarray) -> bool:
    """Some row (last axis, at least two elements) whose |mean| is ≥ OFFSET_OVER_SPREAD × its (non-zero) spread."""
    if a.ndim == 0 or a.shape[-1] < 2 or not a.size:
        return False
    rows = a.reshape(-1, a.shape[-1])
    mean, std = np.abs(rows.mean(axis=-1)), rows.std(axis=-1)
    return bool(np.any((std > 0) & (mean >= OFFSET_OVER_SPREAD * std)))


def _positions(v: Values) -> np.ndarray:
    got = [np.asarray(v[k]) for k in ("positions", "q_positions", "k_positions") if k in v]
    return np.concatenate([g.ravel() for g in got]) if got else np.zeros(0, dtype=np.int64)


def _pos_at_least(edge: int) -> Predicate:
    return lambda v, p, d: bool(_positions(v).size and int(_positions(v).max()) >= edge)


def _eps(p: Params) -> float:
    return 1e-6 if p.get("eps") is None else float(p["eps"])


def _ms_below_eps(v: Values, p: Params, d: Format) -> bool:
    x = v["x"]
    return bool(x.size and np.min(np.mean(x * x, axis=-1)) <= _eps(p))


def _scores(v: Values, p: Params) -> np.ndarray:
    """The raw attention logits q·k·scale (KV heads repeated per group), before any cap or mask."""
    q, k = v["q"], v["k"]
    k = np.repeat(k, q.shape[1] // k.shape[1], axis=1)
    scale = q.shape[-1] ** -0.5 if p.get("scale") is None else float(p["scale"])
    return np.einsum("bhqd,bhkd->bhqk", q, k) * scale


def _scores_beyond_fill(v: Values, p: Params, d: Format) -> bool:
    return _amax(_scores(v, p)) >= BEYOND_MASK_FILL


def _scores_near_overflow(v: Values, p: Params, d: Format) -> bool:
    return near_overflow(_scores(v, p), d)


def _single_key(v: Values, p: Params, d: Format) -> bool:
    """A query that sees exactly one key: L_k = 1, or the first query of a causal L_q = L_k call."""
    lq, lk = v["q"].shape[2], v["k"].shape[2]
    return lk == 1 or (bool(p.get("causal")) and lq == lk)


def _softcap_saturated(v: Values, p: Params, d: Format) -> bool:
    cap = p.get("softcap")
    return cap is not None and _amax(_scores(v, p)) >= 3 * float(cap)


def _logits_near_overflow(v: Values, p: Params, d: Format) -> bool:
    return near_overflow(v["logits"], d)


def _logit_offset(v: Values, p: Params, d: Format) -> bool:
    return offset_rows(v["logits"])


def _cap_saturated(v: Values, p: Params, d: Format) -> bool:
    return _amax(v["logits"]) >= 3 * float(p["cap"])


def _ignored(v: Values, p: Params, d: Format) -> bool:
    return bool(np.any(v["targets"] == p.get("ignore_index", -100)))


def _beyond_trained(v: Values, p: Params, d: Format) -> bool:
    rule = p.get("scaling") or {}
    trained = rule.get("original_max_position_embeddings")
    return trained is not None and _positions(v).size > 0 and int(_positions(v).max()) + 1 > int(trained)


def _long_trained(v: Values, p: Params, d: Format) -> bool:
    rule = p.get("scaling") or {}
    return int(rule.get("original_max_position_embeddings") or 0) >= LONG_TRAINED_LENGTH


def _hidden(v: Values, w: str) -> np.ndarray:
    return v["x"] @ v[w]


def _activation_near_overflow(v: Values, p: Params, d: Format) -> bool:
    """The pre-activation x·W (the gate and the up projection of a GLU) or the gated product near overflow."""
    first = "w1" if "w1" in v else "w_in"
    a = _hidden(v, first)
    if "w3" in v:
        return near_overflow(a, d) or near_overflow(a * _hidden(v, "w3"), d)
    return near_overflow(a, d) or near_overflow(a * a, d)


def _weights(names: tuple[str, ...]) -> Predicate:
    return lambda v, p, d: any(coarse_grid(v[n], d) for n in names if n in v)


def _x_near_overflow(v: Values, p: Params, d: Format) -> bool:
    return near_overflow(v["x"], d)


def _x_offset(v: Values, p: Params, d: Format) -> bool:
    return offset_rows(v["x"])


def _scores_input_near_overflow(v: Values, p: Params, d: Format) -> bool:
    return near_overflow(v["scores"], d)


def _local_single_key(v: Values, p: Params, d: Format) -> bool:
    """A query that sees one key: L_k = 1, chunks of 1, or the first query of a causal L_q = L_k call."""
    lq, lk = v["q"].shape[2], v["k"].shape[2]
    return lk == 1 or p.get("chunk") == 1 or (bool(p.get("causal", True)) and lq == lk)


def _span(p: Params) -> int | None:
    span = p.get("window", p.get("chunk"))
    return None if span is None else int(span)


def _span_inside(v: Values, p: Params, d: Format) -> bool:
    span = _span(p)
    return span is not None and span < v["k"].shape[2]


def _span_past(v: Values, p: Params, d: Format) -> bool:
    span = _span(p)
    return span is not None and span >= v["k"].shape[2]


def _sink_above_logits(v: Values, p: Params, d: Format) -> bool:
    scores, sinks = _scores(v, p), v["sinks"]
    return bool(scores.size and np.any(sinks[None, :, None] >= np.max(scores, axis=-1) + 4.0))


NORMS = ("rms_norm", "layer_norm")
ATTENTION = ("attention", "qk_norm_attention", "rope_attention")
#: sliding-window, chunked and sink attention (reference/local_attention.py)
LOCAL = ("sliding_window_attention", "chunked_attention", "sink_attention")
SPANS = ("sliding_window_attention", "chunked_attention")
ROTARY = ("rope", "rope_scaled", "rope_attention", "sinusoidal_positions", "mrope", "mla_attention")


def _streams_apart(v: Values, p: Params, d: Format) -> bool:
    pos = np.asarray(v["positions"])
    return bool(np.any(pos[0] != pos[1]) or np.any(pos[0] != pos[2]))


def _at_step(v: Values, p: Params, d: Format) -> bool:
    floor_scale = float(p.get("floor_scale", 8192.0))
    return bool(np.any((np.asarray(v["positions"]) + 1) % floor_scale == 0) and floor_scale > 1)


REGIMES: tuple[Regime, ...] = (
    Regime(
        "input near overflow",
        NORMS,
        _x_near_overflow,
        "x within 8 binades of the dtype's overflow: x² (and a sum of squares) in the input dtype overflows",
    ),
    Regime("mean square below ε", (*NORMS, "lm_head"), _ms_below_eps, "a row whose mean square ε dominates"),
    Regime(
        "common offset ≥ 1000 × spread",
        NORMS,
        _x_offset,
        "a row far from zero relative to its spread: a one-pass variance E[x²] − μ² cancels every digit",
    ),
    Regime(
        "weights on a coarse grid",
        NORMS,
        _weights(("weight",)),
        "a weight whose dtype spacing is ≥ 1: an offset added to it (Gemma's 1 + w) or a sum in its dtype loses bits",
    ),
    Regime(
        "positions ≥ 2^16",
        (*ROTARY, "alibi", "attention_temperature"),
        _pos_at_least(2**16),
        "past 65535: a position held in 16 bits or float16 (max 65504), or clamped to a 64k table, is wrong",
    ),
    Regime(
        "positions ≥ 2^17 (beyond a 128k context)",
        ("rope", "rope_scaled", "rope_attention", "mrope"),
        _pos_at_least(2**17),
        "past 131071, the context of current models: a kernel clamping positions to its cache length is wrong",
    ),
    Regime(
        "positions near 2^24",
        ("rope", "rope_scaled", "sinusoidal_positions"),
        _pos_at_least(2**24 - 64),
        "float32 counts integers exactly only to 2^24: past it a position is rounded before it is turned into an "
        "angle; a position held in float16, bfloat16 or a 24-bit field is wrong long before",
    ),
    Regime(
        "streams apart",
        ("mrope",),
        _streams_apart,
        "t, h and w differ (an image's patches): only then does each pair's stream matter — with equal streams a "
        "wrong section split is invisible",
    ),
    Regime(
        "position at a temperature step",
        ("attention_temperature",),
        _at_step,
        "p + 1 a multiple of the floor scale: τ steps up exactly there, and ⌊p/F⌋ for ⌊(p + 1)/F⌋ is one step late",
    ),
    Regime(
        "positions beyond the trained length",
        ("rope_scaled",),
        _beyond_trained,
        "a context-extension rule acts only past L (dynamic NTK, LongRoPE's long factors)",
    ),
    Regime(
        "trained length ≥ 128k",
        ("rope_scaled",),
        _long_trained,
        "the trained lengths of current models (Llama 3.1: 131072): band edges and ln L move with L",
    ),
    Regime(
        "scores beyond a mask fill",
        ("attention", "qk_norm_attention", *LOCAL),
        _scores_beyond_fill,
        "|q·k·scale| ≥ 2^17: a masked score filled with −1e4 (or float16's −65504) instead of −∞ is not negligible",
    ),
    Regime(
        "scores near overflow",
        ("attention",),
        _scores_near_overflow,
        "logits within 8 binades of the dtype's overflow: q·k in the input dtype overflows",
    ),
    Regime(
        "single-key rows",
        ATTENTION,
        _single_key,
        "a query that sees one key: its softmax is exactly 1, whatever the score (a fill value then decides)",
    ),
    Regime(
        "single-key rows (local)",
        LOCAL,
        _local_single_key,
        "a query that sees one key (its own: a chunk of 1, or the first token): the softmax is exactly 1",
    ),
    Regime(
        "span inside the keys",
        SPANS,
        _span_inside,
        "a window or chunk shorter than the keys: keys are masked by it, and what W counts (or where a chunk "
        "starts) decides which",
    ),
    Regime(
        "span past the keys",
        SPANS,
        _span_past,
        "a window or chunk at least as long as the keys: plain causal attention, where a shortcut for it shows",
    ),
    Regime(
        "sink above the logits",
        ("sink_attention",),
        _sink_above_logits,
        "a sink ≥ 4 above a row's largest logit takes most of the weight: a sink not shifted by the row's max "
        "overflows or vanishes",
    ),
    Regime(
        "sinks of −∞",
        ("sink_attention",),
        lambda v, p, d: bool(np.any(np.isneginf(v["sinks"]))),
        "no sink at all: −∞ in the max shift and exp must give plain attention, not NaN",
    ),
    Regime(
        "soft-cap saturated",
        (*ATTENTION, "sliding_window_attention"),
        _softcap_saturated,
        "|logit| ≥ 3c: tanh saturates, and a cap ignored or applied twice shows",
        needs=("softcap", "tanh"),
    ),
    Regime(
        "all-masked rows",
        ATTENTION,
        lambda v, p, d: False,
        "undefined by the contract (causal attention is drawn with L_q ≤ L_k, docs/adapter-contract.md): no "
        "convention to hold a candidate to yet",
        drawn=False,
    ),
    Regime(
        "logits near overflow",
        ("cross_entropy", "cross_entropy_mean", "z_loss"),
        _logits_near_overflow,
        "logits within 8 binades of overflow: exp without the max shift, or z² in the input dtype, overflows",
    ),
    Regime(
        "common offset ≥ 1000 × spread",
        ("cross_entropy", "cross_entropy_mean", "z_loss", "softcap_z_loss"),
        _logit_offset,
        "logits far from zero relative to their spread: log Σ exp loses the spread unless shifted by the row max",
    ),
    Regime(
        "ignored tokens",
        ("cross_entropy_mean",),
        _ignored,
        "a target equal to ignore_index: neither summed nor counted, its gradient row exactly zero",
    ),
    Regime("soft-cap saturated", ("softcap_z_loss",), _cap_saturated, "|logit| ≥ 3c: tanh saturates"),
    Regime(
        "scores near overflow",
        ("alibi",),
        _scores_input_near_overflow,
        "scores within 8 binades of overflow: the bias added in the input dtype rounds or overflows",
    ),
    Regime(
        "activations near overflow",
        ("swiglu_mlp", "glu_mlp", "mlp"),
        _activation_near_overflow,
        "x·W or the gated product within 8 binades of overflow: an intermediate stored in the input dtype overflows",
    ),
)


def for_op(op: str) -> list[Regime]:
    """The regimes listed for ``op``, in the order above."""
    return [r for r in REGIMES if op in r.ops]


def reached(op: str, values: Values, params: Params, dtype: Format) -> list[str]:
    """The names of the drawn regimes of ``op`` this call is in."""
    out = []
    for r in for_op(op):
        if not r.drawn:
            continue
        try:
            if r.predicate(values, params, dtype):
                out.append(r.name)
        except (KeyError, ValueError, IndexError, TypeError):  # an input the predicate needs is absent
            continue
    return out


def varied(name: str, values: list[Any]) -> bool:
    """A parameter is exercised when it took at least two values and one of them is neither None nor its default."""
    default = DEFAULTS.get(name)
    return len(values) >= 2 and any(v is not None and v != default for v in values)

"""Hypothesis strategies for attention, the MLP family and decoder blocks: small shapes (the checks run every
example through a candidate and the float64 oracle), reaching the edges that matter — GQA and MQA groupings,
fewer queries than keys under a causal mask, peaked softmaxes, soft-capped logits, large positions, activations
evaluated deep in their tails, and the normalised residual stream at tiny and large scales.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from hypothesis import strategies as st

from transformer_conformance.adapters.contract import SOFTCAPS
from transformer_conformance.conformance.strategies import plan
from transformer_conformance.conformance.strategies.choices import sampled_from
from transformer_conformance.conformance.strategies.common import Case, fill, magnitudes, positions, seeds
from transformer_conformance.conformance.strategies.plan import Dims, Shape, shapes
from transformer_conformance.reference.blocks import PLACEMENTS
from transformer_conformance.reference.formats import Format
from transformer_conformance.reference.mlp import GLU_ACTIVATIONS, MLP_ACTIVATIONS

#: The planned shapes (conformance/strategies/plan.py): one element of each (jax's one-element bfloat16 dot fails to
#: compile), grouped heads (three queries a KV head, MQA) with fewer queries than keys, two batches of two KV heads at
#: a square mask and D = 16, and an odd head width over one query group. Under a ``per_value`` plan each also states
#: its structural values: causal or not, the soft-cap and the scale, and the window or chunk of the local attentions
#: ("span": the query alone, a span inside the keys, or one reaching past them; "long span": at least the keys), the
#: QK-norm's ε and the RoPE base of RoPE attention: over the rows causal and not, no soft-cap and two, each scale,
#: a window of one key, inside the keys and past them, both ε and both bases. Under any plan each also states the
#: chunks its causal sequence is computed in against a growing KV cache ("cache cuts": each chunk's last query, see
#: :func:`cache_cuts`): a prefill in chunks, then single tokens decoded one after another; and the tokens decoded
#: alone against a rolling cache of a window's keys ("decoded tokens", strategies/local_attention.py): the last two
#: and, where the window is wider than one key, one whose cache is still filling
_ATTENTION_LABELS = ("B", "H_kv", "query heads per KV head", "L_k", "L_q", "D", "D_v")
_ATTENTION_VALUES = ("causal", "softcap", "scale", "span", "long span", "eps", "base")
ATTENTION_SHAPES = shapes(
    (*_ATTENTION_LABELS, "cache cuts", "decoded tokens", *_ATTENTION_VALUES),
    (1, 1, 1, 1, 1, 1, 1, (1,), (0,), True, None, None, 1, 1, 1e-6, 10000.0),
    (1, 1, 3, 7, 3, 4, 4, (3, 5, 6, 7), (1, 5, 6), False, 5.0, 0.125, 3, 7, 1e-5, 500000.0),
    (2, 2, 2, 5, 5, 16, 3, (2, 4, 5), (3, 4), True, None, 1.0, 1, 6, 1e-5, 10000.0),
    (1, 2, 1, 6, 2, 3, 1, (4, 5, 6), (0, 4, 5), True, 50.0, None, 6, 9, 1e-6, 10000.0),
)
#: the MLP's four shapes; under a ``per_value`` plan each row also states the activation (a program each for a
#: compiler), each activation on two shapes (tests/test_shape_plan.py); a ``per_shape`` plan draws the four shapes
#: alone (``Dims``' ``values``)
_MLP_LABELS = ("d", "h", "leading shape", "activation")
MLP_SHAPES = shapes(
    _MLP_LABELS,
    (1, 1, (1,), "relu"),
    (1, 1, (1,), "gelu_sigmoid"),
    (1, 1, (1,), "relu_squared"),
    (5, 11, (2, 3), "gelu_erf"),
    (5, 11, (2, 3), "gelu_tanh"),
    (5, 11, (2, 3), "relu_squared"),
    (24, 40, (1,), "relu"),
    (24, 40, (1,), "gelu_sigmoid"),
    (16, 7, (3,), "gelu_erf"),
    (16, 7, (3,), "gelu_tanh"),
)
#: the GLU's: the same rows with SwiGLU's SiLU in place of the squared ReLU
GLU_SHAPES = shapes(
    _MLP_LABELS,
    (1, 1, (1,), "relu"),
    (1, 1, (1,), "gelu_sigmoid"),
    (1, 1, (1,), "silu"),
    (5, 11, (2, 3), "gelu_erf"),
    (5, 11, (2, 3), "gelu_tanh"),
    (5, 11, (2, 3), "silu"),
    (24, 40, (1,), "relu"),
    (24, 40, (1,), "gelu_sigmoid"),
    (16, 7, (3,), "gelu_erf"),
    (16, 7, (3,), "gelu_tanh"),
)
#: blocks: grouped KV heads two wide at head width 2 over two tokens (where inductor's symbolic shapes crash: docs/
#: adapters.md, "torch"), one query head a KV head, three query heads on one KV head (MQA); the LM head. Under a
#: ``per_value`` plan each shape also states the norms' ε (and a block its RoPE base)
BLOCK_SHAPES = shapes(
    ("H_kv", "query heads per KV head", "D/2", "d", "T", "h", "eps", "base"),
    (2, 2, 1, 4, 2, 7, 1e-6, 10000.0),
    (2, 1, 2, 8, 4, 12, 1e-5, 500000.0),
    (1, 3, 2, 6, 2, 5, 1e-5, 10000.0),
)
LM_HEAD_SHAPES = shapes(("d", "V", "tokens", "eps"), (7, 5, 1, 1e-6), (16, 24, 3, 1e-5), (3, 13, 2, 1e-6))


@st.composite
def attention_case(
    draw: st.DrawFn,
    dtype: Format,
    causal: bool | None = None,
    with_softcap: bool = True,
    even_d: bool = False,
    fewer_queries: bool | None = None,
    large: bool = True,
    softcaps: tuple[str, ...] = SOFTCAPS,
) -> Case:
    """q (B, H_q, L_q, D), k and v (B, H_kv, L_k, ·) with H_q = groups·H_kv (MQA when H_kv = 1); causal cases keep
    L_q ≤ L_k, and ``fewer_queries`` forces L_q < L_k (where the two causal alignments differ). ``softcaps``: the
    soft-capping drawn ("none": softcap None, "tanh": a cap), as the adapter declares it."""

    def fits(s: Shape) -> bool:  # a planned shape: L_q ≤ L_k for any causal draw, < where asked; even D where asked
        return (not fewer_queries or s["L_q"] < s["L_k"]) and (not even_d or s["D"] % 2 == 0)

    dims = Dims(draw, ATTENTION_SHAPES, fits)
    b = dims("B", st.integers(1, 2))
    h_kv = dims("H_kv", st.integers(1, 2))
    groups = dims("query heads per KV head", sampled_from([1, 2, 3]))
    is_causal = dims.value("causal", st.booleans()) if causal is None else causal
    lk = dims("L_k", st.integers(2 if fewer_queries else 1, 7))
    if fewer_queries:
        lq = dims("L_q", st.integers(1, lk - 1))
    elif is_causal:
        lq = dims("L_q", st.integers(1, lk))
    else:
        lq = dims("L_q", st.integers(1, 7))
    d = dims("D", sampled_from([2, 4, 6, 8, 16] if even_d else [1, 2, 3, 4, 8, 16]))
    dv = dims("D_v", sampled_from([1, 3, 4]))
    # |q|, |k| up to 2^3: logits up to ~64·√D, a softmax peaked to one key; or 2^7 … 2^8: logits beyond the
    # 2^17 where a masked score filled with −1e4 or −65504 rather than −∞ is no longer negligible
    # (not in float16, where the input dtype's own q·k overflows at 2^8: its near-overflow logits come from 2^3)
    big = magnitudes(7, 8) if dtype.name != "float16" and large else magnitudes(-3, 3)
    mag = draw(st.one_of(magnitudes(-3, 3), big), label="|q|, |k|")
    caps: list[float | None] = [None]
    if with_softcap and "tanh" in softcaps:
        caps = [None, None, 50.0, 5.0, 1.0] if "none" in softcaps else [50.0, 5.0, 1.0]
    softcap = dims.value("softcap", sampled_from(caps), lambda c: c in caps) if len(caps) > 1 else caps[0]
    scale = dims.value("scale", sampled_from([None, None, None, 0.125, 1.0]))
    seed = draw(seeds, label="seed")
    inputs = {
        "q": fill(dtype, (b, h_kv * groups, lq, d), mag, seed),
        "k": fill(dtype, (b, h_kv, lk, d), mag, seed + 1),
        "v": fill(dtype, (b, h_kv, lk, dv), draw(magnitudes(-2, 4), label="|v|"), seed + 2),
    }
    params: dict[str, Any] = {"causal": is_causal, "softcap": softcap, "scale": scale}
    return Case(inputs, params, {"|q|": mag, "seed": seed})


def planned_row(case: Case) -> Shape | None:
    """The planned shape of ``ATTENTION_SHAPES`` an attention case was drawn with, under a ``per_value`` plan (its
    stated window or chunk goes with it); None otherwise."""
    return row_of(case) if plan.values_active() else None


def cache_cuts(draw: Callable[..., Any], case: Case) -> list[int]:
    """The chunks a causal case's sequence of L_k queries is computed in against a growing KV cache, as the index
    after each chunk's last query (the last is L_k): up to three drawn chunk ends, or every token alone. Under a
    plan, the chunks its planned shape states: each chunk is a shape of its own (its queries against the cache so
    far), and the stated ones, a prefill in chunks then tokens decoded one by one, are built once, not once for each
    set drawn."""
    row = row_of(case)
    if row is not None:
        return list(row["cache cuts"])
    lk = case.inputs["k"].shape[2]
    cuts = sorted(set(draw(st.lists(st.integers(1, lk - 1), max_size=3), label="chunk ends")) | {lk}) if lk > 1 else [1]
    if draw(st.booleans(), label="decode token by token"):
        cuts = list(range(1, lk + 1))
    return cuts


def row_of(case: Case) -> Shape | None:
    """The planned shape of ``ATTENTION_SHAPES`` an attention case was drawn with, under any plan; None otherwise."""
    if not plan.active():
        return None
    q, k, v = (case.inputs[n] for n in ("q", "k", "v"))
    b, hq, lq, d = q.shape
    h_kv, lk = k.shape[1], k.shape[2]
    shape = (b, h_kv, hq // h_kv, lk, lq, d, v.shape[3])
    return next((s for s in ATTENTION_SHAPES if tuple(s[n] for n in _ATTENTION_LABELS) == shape), None)


def stated(draw: st.DrawFn, case: Case, key: str, free: st.SearchStrategy[Any], label: str | None = None) -> Any:
    """A structural value drawn beside an attention case: the one its planned shape states as ``key`` under a
    ``per_value`` plan, otherwise this draw of ``free`` (labelled ``label``, by default ``key``)."""
    row = planned_row(case)
    return row[key] if row is not None and key in row else draw(free, label=label or key)


@st.composite
def qk_norm_case(draw: st.DrawFn, dtype: Format) -> Case:
    case = draw(attention_case(dtype), label="attention")
    d = case.inputs["q"].shape[-1]
    seed = draw(seeds, label="weight seed")
    inputs = dict(case.inputs)
    inputs["q_weight"] = fill(dtype, (d,), 0.5, seed, offset=1.0)
    inputs["k_weight"] = fill(dtype, (d,), 0.5, seed + 1, offset=1.0)
    eps = stated(draw, case, "eps", sampled_from([1e-6, 1e-5]))
    params = {"causal": case.params["causal"], "softcap": case.params["softcap"], "eps": eps}
    return Case(inputs, params, case.about)


@st.composite
def rope_attention_case(draw: st.DrawFn, dtype: Format, causal: bool | None = None) -> Case:
    """RoPE attention with the queries at the last L_q of the L_k key positions (as in decoding), positions
    from 0 up to past 2^17."""
    # not the large |q|, |k|, nor positions across 2^24: rope_attention's budget carries the angles' error to
    # first order through the scores, the soft-cap and the softmax, which holds only while that error times
    # |q||k| is small; past 2^24 a float32 angle is off by radians (rope's own checks go there)
    case = draw(attention_case(dtype, causal=causal, even_d=True, large=False), label="attention")
    lq, lk = case.inputs["q"].shape[2], case.inputs["k"].shape[2]
    pos_k = draw(positions(lk, below_2_24=True), label="key positions")
    pos_q = pos_k[lk - lq :] if lq <= lk else np.arange(pos_k[0], pos_k[0] + lq, dtype=np.int64)
    base = stated(draw, case, "base", sampled_from([10000.0, 500000.0]))
    inputs = dict(case.inputs, q_positions=pos_q.copy(), k_positions=pos_k)
    params = {"causal": case.params["causal"], "softcap": case.params["softcap"], "base": base}
    return Case(inputs, params, case.about)


@st.composite
def mlp_case(draw: st.DrawFn, dtype: Format, gated: bool, activations: tuple[str, ...] | None = None) -> Case:
    """An MLP (``gated``: a GLU) case with an activation among ``activations`` (default: all the contract names)."""
    names = activations or (GLU_ACTIVATIONS if gated else MLP_ACTIVATIONS)
    dims = Dims(draw, GLU_SHAPES if gated else MLP_SHAPES, values=("activation",))
    act = dims.value("activation", sampled_from(names), lambda a: a in names)
    d = dims("d", st.integers(1, 24))
    h = dims("h", st.integers(1, 40))
    lead = dims("leading shape", sampled_from([(1,), (3,), (2, 3)]))
    seed = draw(seeds, label="seed")
    # |x| up to 2^5 (2^4 in float16, where x·w or the gated product then comes within 8 binades of overflow): GELU
    # tails at x·w ≈ −10, squared ReLU and the gate grow like |x|²
    mag = draw(magnitudes(-4, 4 if dtype.name == "float16" else 5), label="|x|")
    x = fill(dtype, (*lead, d), mag, seed)
    w_in, w_out = fill(dtype, (d, h), d**-0.5, seed + 1), fill(dtype, (h, d), h**-0.5, seed + 3)
    if gated:
        inputs = {"x": x, "w1": w_in, "w3": fill(dtype, (d, h), d**-0.5, seed + 2), "w2": w_out}
    else:
        inputs = {"x": x, "w_in": w_in, "w_out": w_out}
    return Case(inputs, {"activation": act}, {"|x|": mag, "seed": seed})


@st.composite
def block_case(
    draw: st.DrawFn,
    dtype: Format,
    placement: str | None = None,
    zero_outputs: bool = False,
    placements: tuple[str, ...] = PLACEMENTS,
) -> Case:
    """A tiny block: d ≤ 8, one or two KV heads with one to three query heads each, T ≤ 4, weights at
    N(0, 1/fan_in), norm weights near 1; the stream at |x| from 2^-4 to 2^6. ``placement`` fixed, or drawn from
    ``placements``."""
    dims = Dims(draw, BLOCK_SHAPES)
    pl = draw(sampled_from(placements), label="placement") if placement is None else placement
    h_kv = dims("H_kv", st.integers(1, 2))
    groups = dims("query heads per KV head", st.integers(1, 3))
    hd = 2 * dims("D/2", st.integers(1, 2))
    d = dims("d", sampled_from([4, 6, 8]))
    t = dims("T", st.integers(1, 4))
    hidden = dims("h", st.integers(1, 12))
    seed = draw(seeds, label="seed")
    mag = draw(magnitudes(-4, 6 if dtype.name != "float16" else 4), label="|x|")
    hq = h_kv * groups
    # positions to just past bfloat16's 4096 edge: RoPE at long context is rope/* and rope-attention/*'s subject; here
    # float32 angles at 10⁵ would leave a post-norm block's unnormalised logits undetermined
    start = draw(sampled_from([0, 1, 2000, 4090]), label="first position")

    def w(shape: tuple[int, int], k: int, scale: float = 1.0) -> np.ndarray:
        return fill(dtype, shape, scale * shape[0] ** -0.5, seed + k)

    out_scale = 0.0 if zero_outputs else 1.0
    inputs = {
        "x": fill(dtype, (1, t, d), mag, seed),
        "attn_norm": fill(dtype, (d,), 0.2, seed + 1, offset=1.0),
        "wq": w((d, hq * hd), 2),
        "wk": w((d, h_kv * hd), 3),
        "wv": w((d, h_kv * hd), 4),
        "wo": w((hq * hd, d), 5, out_scale),
        "mlp_norm": fill(dtype, (d,), 0.2, seed + 6, offset=1.0),
        "w1": w((d, hidden), 7),
        "w3": w((d, hidden), 8),
        "w2": w((hidden, d), 9, out_scale),
        "attn_post_norm": fill(dtype, (d,), 0.2, seed + 10, offset=1.0),
        "mlp_post_norm": fill(dtype, (d,), 0.2, seed + 11, offset=1.0),
        "positions": np.arange(start, start + t, dtype=np.int64),
    }
    params = {
        "placement": pl,
        "n_heads": hq,
        "n_kv_heads": h_kv,
        "eps": dims.value("eps", sampled_from([1e-6, 1e-5])),
        "base": dims.value("base", sampled_from([10000.0, 10000.0, 500000.0])),
    }
    return Case(inputs, params, {"|x|": mag, "seed": seed})


@st.composite
def lm_head_case(draw: st.DrawFn, dtype: Format) -> Case:
    dims = Dims(draw, LM_HEAD_SHAPES)
    d = dims("d", st.integers(1, 16))
    vocab = dims("V", st.integers(1, 24))
    seed = draw(seeds, label="seed")
    # from 2^-10: rows whose mean square is below ε
    mag = draw(magnitudes(-10, 8 if dtype.name != "float16" else 6), label="|x|")
    inputs = {
        "x": fill(dtype, (dims("tokens", st.integers(1, 3)), d), mag, seed),
        "norm_weight": fill(dtype, (d,), 0.2, seed + 1, offset=1.0),
        "w_head": fill(dtype, (d, vocab), d**-0.5, seed + 2),
    }
    return Case(inputs, {"eps": dims.value("eps", sampled_from([1e-6, 1e-5]))}, {"|x|": mag, "seed": seed})

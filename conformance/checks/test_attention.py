"""Attention: softmax(cap(QKᵀ/√d_k) + mask)·V with GQA/MQA, causal masking in the declared alignment, logit
soft-capping, QK-norm and RoPE on Q and K only (seed-002 §3.1.1, §3.2.2, §3.4.2; seed-000 §RoPE, §A modern decoder
block; seed-004 §Attention is permutation-blind)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from transformer_conformance.adapters.contract import SOFTCAPS, Adapter
from transformer_conformance.conformance.harness import size_regimes
from transformer_conformance.conformance.harness.agreement import agree
from transformer_conformance.conformance.harness.compare import CheckFailure, Record, check_forward, check_vjp
from transformer_conformance.conformance.harness.marks import UNSUPPORTED, check, declared
from transformer_conformance.conformance.harness.properties import run
from transformer_conformance.conformance.strategies import blocks as sb
from transformer_conformance.conformance.strategies import common as cst
from transformer_conformance.conformance.strategies import sizes
from transformer_conformance.conformance.strategies.choices import sampled_from
from transformer_conformance.conformance.strategies.common import Case
from transformer_conformance.reference import oracle
from transformer_conformance.reference.attention import causal_mask
from transformer_conformance.reference.formats import Format

CITE = (
    "seed-002 §3.1.1: multi-head scaled dot-product attention, softmax(QKᵀ/√d_k)·V; seed-000 §A modern decoder "
    "block: GroupedQueryAttention(d, n_heads, n_kv_heads); seed-002 §3.2.2: soft-capping c·tanh(l/c)"
)
GQA = (
    "seed-000 §A modern decoder block: GroupedQueryAttention(d, n_heads, n_kv_heads) — query head h reads KV head "
    "h // (H_q/H_kv)"
)
PERMUTATION = (
    "seed-004 §Attention is permutation-blind: permute the input tokens and the same outputs come back permuted; "
    "seed-000: attention by itself is permutation-equivariant"
)
CAUSAL = "seed-004 §Why this matters: the KV cache falls out of the attention equations under causal masking"
KV_CACHE = (
    "seed-000 §RoPE: compatible with the KV cache, keys rotated once when written; seed-004: the KV cache falls "
    "directly out of the attention equations under causal masking (bottom-right: query i of L_q sees keys "
    "≤ i + L_k − L_q)"
)
SOFTCAP = "seed-002 §3.2.2: logit soft-capping c·tanh(l/c) clamps extreme logits softly"
QK_NORM = (
    "seed-002 §3.2.2: QK-norm applies RMSNorm to the query and key tensors independently before QKᵀ/√d_k, bounding "
    "pre-softmax logits regardless of how W_Q and W_K evolve"
)
ROPE_QK = (
    "seed-002 §3.4.2: RoPE applies only to Q and K, not V; seed-004 §Rotary position embeddings: scores depend only "
    "on the relative offset"
)


#: the checks that draw soft-capped attention draw it only from an adapter that declares it
SOFTCAP_CHOICE = {"softcap": SOFTCAPS}


def _shape(adapter: Adapter, op: str, case: Case, dtype: Format) -> tuple[int, ...]:
    return oracle.forward(op, case.values(), case.params, adapter.conventions, dtype).shape


def _case(adapter: Adapter, dtype: Format, causal: bool | None = None) -> st.SearchStrategy[Case]:
    """An attention case with the soft-capping the adapter declares (``Capability.values["softcap"]``)."""
    return sb.attention_case(dtype, causal=causal, softcaps=declared(adapter, "attention", "softcap"))


@check(
    "attention/forward",
    "attention",
    "agrees with the oracle (causal in the declared alignment)",
    CITE,
    op="attention",
    choices=SOFTCAP_CHOICE,
)
@given(data=st.data())
def test_forward(adapter: Adapter, dtype: Format, record: Record, data: st.DataObject) -> None:
    check_forward(adapter, "attention", data.draw(_case(adapter, dtype), label="case"), dtype, record)


@check(
    "attention/gradient",
    "attention",
    "VJP agrees with the oracle",
    CITE,
    op="attention",
    grad=True,
    choices=SOFTCAP_CHOICE,
)
@given(data=st.data())
def test_gradient(adapter: Adapter, dtype: Format, record: Record, data: st.DataObject) -> None:
    case = data.draw(_case(adapter, dtype), label="case")
    cot = data.draw(cst.cotangent(dtype, _shape(adapter, "attention", case, dtype)), label="cotangent")
    check_vjp(adapter, "attention", case, cot, dtype, record)


@check(
    "attention/gqa-grouping",
    "attention",
    "GQA/MQA equals multi-head attention on KV heads repeated per group (h reads h // (H_q/H_kv))",
    GQA,
    op="attention",
    choices=SOFTCAP_CHOICE,
)
@given(data=st.data())
def test_gqa_grouping(adapter: Adapter, dtype: Format, record: Record, data: st.DataObject) -> None:
    case = data.draw(_case(adapter, dtype), label="case")
    q, k, v = (case.inputs[n] for n in ("q", "k", "v"))
    group = q.shape[1] // k.shape[1]
    repeated = dict(case.inputs, k=np.repeat(k, group, axis=1), v=np.repeat(v, group, axis=1))
    shape = _shape(adapter, "attention", case, dtype)
    y, a, call = run(adapter, "attention", case.inputs, case.params, dtype, shape)
    y_mha, a_mha, _ = run(adapter, "attention", repeated, case.params, dtype, shape)
    agree(y, a, y_mha, a_mha, dtype, record, f"GQA ({group} query heads per KV head) vs repeated KV heads", call)


@check(
    "attention/permutation-equivariance",
    "attention",
    "without positions or mask, permuting queries permutes outputs and permuting key-value pairs changes nothing",
    PERMUTATION,
    op="attention",
    choices=SOFTCAP_CHOICE,
)
@given(data=st.data())
def test_permutation_equivariance(adapter: Adapter, dtype: Format, record: Record, data: st.DataObject) -> None:
    case = data.draw(_case(adapter, dtype, causal=False), label="case")
    lq, lk = case.inputs["q"].shape[2], case.inputs["k"].shape[2]
    pq = np.array(data.draw(st.permutations(range(lq)), label="query permutation"), dtype=np.intp)
    pk = np.array(data.draw(st.permutations(range(lk)), label="key permutation"), dtype=np.intp)
    q, k, v = (case.inputs[n] for n in ("q", "k", "v"))
    permuted = {"q": q[:, :, pq], "k": k[:, :, pk], "v": v[:, :, pk]}
    shape = _shape(adapter, "attention", case, dtype)
    y, a, call = run(adapter, "attention", case.inputs, case.params, dtype, shape)
    yp, ap, _ = run(adapter, "attention", permuted, case.params, dtype, shape)
    agree(yp, ap, y[:, :, pq], a[:, :, pq], dtype, record, "output on permuted tokens", call)


@check(
    "attention/causality",
    "attention",
    "changing the tokens at positions ≥ t (their q, k, v) never changes an output before t",
    CAUSAL,
    op="attention",
    choices=SOFTCAP_CHOICE,
)
@given(data=st.data())
def test_causality(adapter: Adapter, dtype: Format, record: Record, data: st.DataObject) -> None:
    case = data.draw(_case(adapter, dtype, causal=True), label="case")
    q, k, v = (case.inputs[n] for n in ("q", "k", "v"))
    lq, lk = q.shape[2], k.shape[2]
    if lk < 2:
        return
    t = data.draw(st.integers(1, lk - 1), label="first changed position")
    seed = data.draw(cst.seeds, label="new tokens' seed")
    changed = dict(case.inputs)
    for name, arr in (("k", k), ("v", v)):
        new = arr.copy()
        new[:, :, t:] = cst.fill(dtype, new[:, :, t:].shape, 4.0, seed + len(name))
        changed[name] = new
    # bottom-right: query i of L_q is the token at position i + L_k − L_q; top-left: at position i
    offset = lk - lq if adapter.conventions.causal_alignment == "bottom_right" else 0
    first_changed_query = min(max(t - offset, 0), lq)
    new_q = q.copy()
    new_q[:, :, first_changed_query:] = cst.fill(dtype, new_q[:, :, first_changed_query:].shape, 4.0, seed)
    changed["q"] = new_q
    shape = _shape(adapter, "attention", case, dtype)
    y, a, call = run(adapter, "attention", case.inputs, case.params, dtype, shape)
    y2, a2, _ = run(adapter, "attention", changed, case.params, dtype, shape)
    rows = slice(0, first_changed_query)
    agree(
        y2[:, :, rows],
        a2[:, :, rows],
        y[:, :, rows],
        a[:, :, rows],
        dtype,
        record,
        f"outputs before position {t}",
        call,
    )


@check(
    "attention/kv-cache",
    "attention",
    "decoding token by token against a KV cache, and prefill in chunks, equal the full causal forward",
    KV_CACHE,
    op="attention",
    choices=SOFTCAP_CHOICE,
)
@given(data=st.data())
def test_kv_cache(adapter: Adapter, dtype: Format, record: Record, data: st.DataObject) -> None:
    if adapter.conventions.causal_alignment != "bottom_right":
        pytest.skip(
            f"{UNSUPPORTED}{adapter.name} declares {adapter.conventions.causal_alignment} causal alignment; decoding "
            "with a KV cache needs bottom-right"
        )
    case = data.draw(_case(adapter, dtype, causal=True), label="case")
    q, k, v = (case.inputs[n] for n in ("q", "k", "v"))
    lk = k.shape[2]
    # the full sequence: as many queries as keys
    full = dict(case.inputs, q=cst.fill(dtype, (*q.shape[:2], lk, q.shape[3]), 2.0, 7))
    if data.draw(st.booleans(), label="use drawn queries as the tail"):
        full["q"][:, :, lk - q.shape[2] :] = q
    cuts = sb.cache_cuts(data.draw, case)
    shape = (q.shape[0], q.shape[1], lk, v.shape[3])
    y, a, call = run(adapter, "attention", full, case.params, dtype, shape)
    start = 0
    for end in cuts:
        chunk = {"q": full["q"][:, :, start:end], "k": k[:, :, :end], "v": v[:, :, :end]}
        yc, ac, _ = run(adapter, "attention", chunk, case.params, dtype, (*shape[:2], end - start, shape[3]))
        agree(
            yc,
            ac,
            y[:, :, start:end],
            a[:, :, start:end],
            dtype,
            record,
            f"queries {start}…{end - 1} against the cache of {end} keys vs the full forward",
            call,
        )
        start = end


@check(
    "attention/softcap-bound",
    "attention",
    "with soft-cap c every visible key keeps a weight ≥ e^(−2c) × the largest (logits lie in (−c, c))",
    SOFTCAP,
    op="attention",
    choices={"softcap": ("tanh",)},
)
@given(data=st.data())
def test_softcap_bound(adapter: Adapter, dtype: Format, record: Record, data: st.DataObject) -> None:
    case = data.draw(sb.attention_case(dtype, with_softcap=False), label="case")
    c = data.draw(sampled_from([0.5, 1.0, 2.0, 4.0]), label="softcap")
    q, k = case.inputs["q"], case.inputs["k"]
    b, h_kv, lk, _ = k.shape
    # v: one basis vector per key, so the output rows are the attention weights themselves
    v = dtype.round(np.broadcast_to(np.eye(lk), (b, h_kv, lk, lk)).copy())
    params = dict(case.params, softcap=c)
    inputs = {"q": q, "k": k, "v": v}
    p, allowed, call = run(adapter, "attention", inputs, params, dtype, (b, q.shape[1], q.shape[2], lk))
    visible = np.ones((q.shape[2], lk), dtype=bool)
    if params["causal"]:
        visible = causal_mask(q.shape[2], lk, adapter.conventions.causal_alignment)
    vis = np.broadcast_to(visible, p.shape)
    top = np.argmax(np.where(vis, p, -np.inf), axis=-1)[..., None]
    pmax, amax = np.take_along_axis(p, top, axis=-1), np.take_along_axis(allowed, top, axis=-1)
    # p_j ≥ e^(−2c)·p_max exactly; with each weight known to its budget: p_j + a_j ≥ e^(−2c)·(p_max − a_max)
    ratio = np.exp(-2.0 * c)
    short = np.where(vis, ratio * (pmax - amax) - (p + allowed), -np.inf)
    slack = np.where(vis, ratio * pmax - p, -np.inf) / (allowed + ratio * amax)
    record.examples += 1
    used = max(float(np.max(slack)), 0.0)
    record.observe(used, used, "smallest visible weight")
    if np.max(short) > 0:
        i = tuple(int(j) for j in np.unravel_index(np.argmax(short), short.shape))
        bound = ratio * pmax[(*i[:-1], 0)]
        raise CheckFailure(
            f"weight of key {i[-1]} for query {i[-2]}: got {p[i]:.6g}, should be ≥ e^(−2·{c})·{pmax[(*i[:-1], 0)]:.6g}"
            f" = {bound:.6g} (capped logits lie in (−{c}, {c})) [{call}]"
        )


@check("qk-norm/forward", "attention", "agrees with the oracle", QK_NORM, op="qk_norm_attention")
@given(data=st.data())
def test_qk_norm_forward(adapter: Adapter, dtype: Format, record: Record, data: st.DataObject) -> None:
    check_forward(adapter, "qk_norm_attention", data.draw(sb.qk_norm_case(dtype), label="case"), dtype, record)


@check("qk-norm/gradient", "attention", "VJP agrees with the oracle", QK_NORM, op="qk_norm_attention", grad=True)
@given(data=st.data())
def test_qk_norm_gradient(adapter: Adapter, dtype: Format, record: Record, data: st.DataObject) -> None:
    case = data.draw(sb.qk_norm_case(dtype), label="case")
    cot = data.draw(cst.cotangent(dtype, _shape(adapter, "qk_norm_attention", case, dtype)), label="cotangent")
    check_vjp(adapter, "qk_norm_attention", case, cot, dtype, record)


@check(
    "qk-norm/scale-invariance",
    "attention",
    "rescaling q and k by any powers of two leaves the output unchanged (up to ε): the logits are bounded",
    QK_NORM,
    op="qk_norm_attention",
)
@given(data=st.data())
def test_qk_norm_scale_invariance(adapter: Adapter, dtype: Format, record: Record, data: st.DataObject) -> None:
    case = data.draw(sb.qk_norm_case(dtype), label="case")
    values = case.values()
    cq, ck = (2.0 ** data.draw(st.integers(-4, 6), label=f"log2 c_{n}") for n in ("q", "k"))
    changed = dict(case.inputs, q=dtype.round(values["q"] * cq), k=dtype.round(values["k"] * ck))
    if not (
        np.array_equal(changed["q"].astype(np.float64), values["q"] * cq)
        and np.array_equal(changed["k"].astype(np.float64), values["k"] * ck)
    ):
        return  # left the dtype's normal range: the statement is about exact rescaling
    shape = _shape(adapter, "qk_norm_attention", case, dtype)
    y, a, call = run(adapter, "qk_norm_attention", case.inputs, case.params, dtype, shape)
    y2, a2, _ = run(adapter, "qk_norm_attention", changed, case.params, dtype, shape)
    changed64 = {k: v if v.dtype.kind in "iu" else v.astype(np.float64) for k, v in changed.items()}
    gap = oracle.forward("qk_norm_attention", changed64, case.params, adapter.conventions, dtype) - oracle.forward(
        "qk_norm_attention", values, case.params, adapter.conventions, dtype
    )
    agree(y2, a2, y, a, dtype, record, f"output at q·{cq:g}, k·{ck:g}", call, exact_gap=gap)


@check(
    "rope-attention/forward", "attention", "agrees with the oracle (RoPE on q and k only)", ROPE_QK, op="rope_attention"
)
@given(data=st.data())
def test_rope_attention_forward(adapter: Adapter, dtype: Format, record: Record, data: st.DataObject) -> None:
    check_forward(adapter, "rope_attention", data.draw(sb.rope_attention_case(dtype), label="case"), dtype, record)


@check("rope-attention/gradient", "attention", "VJP agrees with the oracle", ROPE_QK, op="rope_attention", grad=True)
@given(data=st.data())
def test_rope_attention_gradient(adapter: Adapter, dtype: Format, record: Record, data: st.DataObject) -> None:
    case = data.draw(sb.rope_attention_case(dtype), label="case")
    cot = data.draw(cst.cotangent(dtype, _shape(adapter, "rope_attention", case, dtype)), label="cotangent")
    check_vjp(adapter, "rope_attention", case, cot, dtype, record)


@check(
    "rope-attention/relative",
    "attention",
    "shifting every query and key position by the same t leaves the output unchanged (V is never rotated)",
    ROPE_QK,
    op="rope_attention",
)
@given(data=st.data())
def test_rope_attention_relative(adapter: Adapter, dtype: Format, record: Record, data: st.DataObject) -> None:
    case = data.draw(sb.rope_attention_case(dtype), label="case")
    t = data.draw(st.one_of(st.integers(1, 64), st.integers(1, 100_000)), label="shift t")
    shifted = dict(case.inputs, q_positions=case.inputs["q_positions"] + t, k_positions=case.inputs["k_positions"] + t)
    values = case.values()
    shape = _shape(adapter, "rope_attention", case, dtype)
    y, a, call = run(adapter, "rope_attention", case.inputs, case.params, dtype, shape)
    y2, a2, _ = run(adapter, "rope_attention", shifted, case.params, dtype, shape)
    moved = dict(values, q_positions=shifted["q_positions"], k_positions=shifted["k_positions"])
    gap = oracle.forward("rope_attention", moved, case.params, adapter.conventions, dtype) - oracle.forward(
        "rope_attention", values, case.params, adapter.conventions, dtype
    )
    agree(y2, a2, y, a, dtype, record, f"output with positions shifted by {t}", call, exact_gap=gap)


REGIMES = "520 keys (past tiles of 64–512 keys) and 64 query heads over 8 KV heads"


@check(
    "attention/regime-forward",
    "attention",
    f"agrees with the oracle in the size regimes kernels dispatch on: {REGIMES}",
    CITE,
    op="attention",
)
@sizes.REGIME_SETTINGS
@given(data=st.data())
def test_regime_forward(adapter: Adapter, dtype: Format, record: Record, data: st.DataObject) -> None:
    size_regimes.forward(adapter, "attention", data.draw(sizes.attention_cases(dtype), label="cases"), dtype, record)


@check(
    "attention/regime-gradient",
    "attention",
    f"VJP agrees with the oracle in the size regimes kernels dispatch on: {REGIMES}",
    CITE,
    op="attention",
    grad=True,
)
@sizes.REGIME_SETTINGS
@given(data=st.data())
def test_regime_gradient(adapter: Adapter, dtype: Format, record: Record, data: st.DataObject) -> None:
    size_regimes.gradient(adapter, "attention", data.draw(sizes.attention_cases(dtype), label="cases"), dtype, record)


#: what the attention variants' regime checks cover
VARIANT_REGIMES = f"{REGIMES}, with the variant's own step on q and k"


@check(
    "qk-norm/regime-forward",
    "attention",
    f"agrees with the oracle in the size regimes kernels dispatch on: {VARIANT_REGIMES}",
    QK_NORM,
    op="qk_norm_attention",
)
@sizes.REGIME_SETTINGS
@given(data=st.data())
def test_qk_norm_regime_forward(adapter: Adapter, dtype: Format, record: Record, data: st.DataObject) -> None:
    cases = data.draw(sizes.qk_norm_attention_cases(dtype), label="cases")
    size_regimes.forward(adapter, "qk_norm_attention", cases, dtype, record)


@check(
    "qk-norm/regime-gradient",
    "attention",
    f"VJP agrees with the oracle in the size regimes kernels dispatch on: {VARIANT_REGIMES}",
    QK_NORM,
    op="qk_norm_attention",
    grad=True,
)
@sizes.REGIME_SETTINGS
@given(data=st.data())
def test_qk_norm_regime_gradient(adapter: Adapter, dtype: Format, record: Record, data: st.DataObject) -> None:
    cases = data.draw(sizes.qk_norm_attention_cases(dtype), label="cases")
    size_regimes.gradient(adapter, "qk_norm_attention", cases, dtype, record)


@check(
    "rope-attention/regime-forward",
    "attention",
    f"agrees with the oracle in the size regimes kernels dispatch on: {VARIANT_REGIMES}, keys up to position 131,520",
    ROPE_QK,
    op="rope_attention",
)
@sizes.REGIME_SETTINGS
@given(data=st.data())
def test_rope_attention_regime_forward(adapter: Adapter, dtype: Format, record: Record, data: st.DataObject) -> None:
    cases = data.draw(sizes.rope_attention_cases(dtype), label="cases")
    size_regimes.forward(adapter, "rope_attention", cases, dtype, record)


@check(
    "rope-attention/regime-gradient",
    "attention",
    f"VJP agrees with the oracle in the size regimes kernels dispatch on: {VARIANT_REGIMES}, keys up to position "
    "131,520",
    ROPE_QK,
    op="rope_attention",
    grad=True,
)
@sizes.REGIME_SETTINGS
@given(data=st.data())
def test_rope_attention_regime_gradient(adapter: Adapter, dtype: Format, record: Record, data: st.DataObject) -> None:
    cases = data.draw(sizes.rope_attention_cases(dtype), label="cases")
    size_regimes.gradient(adapter, "rope_attention", cases, dtype, record)

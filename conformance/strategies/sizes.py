"""Size regimes: the few large cases of each family that reach the code paths kernels select by size.

The family strategies draw small shapes (a handful of rows, widths up to 4096, vocabularies up to 4099,
up to 7 keys), where every example is cheap and shrinks well. Kernels switch algorithms on size: Liger's
RMSNorm runs a *block* kernel for ≥ 32,768 rows of ≤ 256 features (Liger-Kernel 0.6.4 summed ∂W there in
the input dtype), fused losses walk the vocabulary in chunks, attention kernels tile the keys (64–256 a
tile) and split heads across programs, norms and matmuls split long rows. No small case reaches those
paths, so each family also has a *regime* check that runs one case per regime below, with values from
NumPy's generator (cheap at millions of elements) and a single example (``REGIME_SETTINGS``): the sizes
are fixed, what Hypothesis draws is the seed and a few rows past a block boundary.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from hypothesis import Phase, settings
from hypothesis import strategies as st

from transformer_conformance.conformance.strategies.common import Case, fill, seeds
from transformer_conformance.reference.formats import Format

#: One example per regime check, never shrunk (a shrink would rerun a case of millions of elements): the
#: regime's sizes are fixed, the seed is what varies between runs of the random profiles.
REGIME_SETTINGS = settings(max_examples=1, phases=[Phase.explicit, Phase.generate])

#: Rows × features of the norms: many short rows (Liger's block kernels: ≥ 32,768 rows of ≤ 256 features;
#: split reductions of ∂γ over rows) and a few long rows (row kernels that loop over a row in blocks).
MANY_ROWS = (32_768, 64)
LONG_ROWS = (2, 8192)
#: A vocabulary past 128k (Llama-3's 128,256): chunked and online-softmax losses take several chunks.
VOCAB = 131_072
#: Keys past one tile of 64, 128 and 256 (and a partial last tile), and many heads with grouped KV heads.
LONG_KEYS = (1, 2, 4, 520)  # B, H_q, L_q, L_k
MANY_HEADS = (1, 64, 8, 3)  # B, H_q, L_q, L_k with 8 KV heads
#: RoPE over a long sequence with many heads (kernels grid over tokens × heads).
ROPE = (32, 300, 128)  # heads, T, d
#: SwiGLU with a long input row (d = 8192) and a wide hidden layer (h = 8192).
SWIGLU = ((2, 8192, 24), (2, 16, 8192))  # rows, d, h


@st.composite
def norm_cases(draw: st.DrawFn, dtype: Format, with_bias: bool) -> list[Case]:
    """One case per norm regime: 32,768 rows (plus 0–15, a partial last block) × 64, and 2 × 8192."""
    seed = draw(seeds, label="seed")
    extra = draw(st.sampled_from([0, 7, 15]), label="rows past 32,768")
    eps = draw(st.sampled_from([1e-6, 1e-5]), label="eps")
    cases = []
    for k, (rows, n) in enumerate(((MANY_ROWS[0] + extra, MANY_ROWS[1]), LONG_ROWS)):
        s = seed + 16 * k
        inputs = {
            "x": fill(dtype, (rows, n), 1.0, s),
            "weight": fill(dtype, (n,), 0.5, s + 1, offset=1.0),
        }
        if with_bias:
            inputs["bias"] = fill(dtype, (n,), 0.5, s + 2)
        cases.append(Case(inputs, {"eps": eps}, {"regime": f"{rows} × {n}", "seed": s}))
    return cases


@st.composite
def logits_cases(draw: st.DrawFn, dtype: Format) -> list[Case]:
    """Two tokens over a vocabulary of 131,072, the target of one in the last chunk."""
    seed = draw(seeds, label="seed")
    logits = fill(dtype, (2, VOCAB), 2.0, seed)
    targets = np.array([VOCAB - 3, int(np.random.default_rng(seed + 1).integers(0, VOCAB))], dtype=np.int64)
    return [Case({"logits": logits, "targets": targets}, {}, {"regime": f"vocabulary {VOCAB}", "seed": seed})]


@st.composite
def attention_cases(draw: st.DrawFn, dtype: Format) -> list[Case]:
    """520 keys (past tiles of 64, 128, 256 and 512) for a few queries, causal in the candidate's alignment or
    not; and 64 query heads over 8 KV heads."""
    seed = draw(seeds, label="seed")
    causal = draw(st.booleans(), label="causal")
    cases = []
    for k, ((b, hq, lq, lk), hkv) in enumerate(((LONG_KEYS, 1), (MANY_HEADS, 8))):
        s = seed + 16 * k
        d = 16
        inputs = {
            "q": fill(dtype, (b, hq, lq, d), 1.0, s),
            "k": fill(dtype, (b, hkv, lk, d), 1.0, s + 1),
            "v": fill(dtype, (b, hkv, lk, 4), 1.0, s + 2),
        }
        params: dict[str, Any] = {"causal": causal, "softcap": None}
        cases.append(Case(inputs, params, {"regime": f"H_q {hq}, H_kv {hkv}, L_q {lq}, L_k {lk}", "seed": s}))
    return cases


@st.composite
def rope_cases(draw: st.DrawFn, dtype: Format) -> list[Case]:
    """32 heads × 300 positions × 128 features, from a drawn first position."""
    seed = draw(seeds, label="seed")
    start = draw(st.sampled_from([0, 4090, 30000]), label="first position")
    heads, t, d = ROPE
    x = fill(dtype, (heads, t, d), 1.0, seed)
    pos = np.arange(start, start + t, dtype=np.int64)
    params = {"base": 10000.0, "rotary_dim": None}
    return [Case({"x": x, "positions": pos}, params, {"regime": f"{heads} heads × {t} × {d}", "seed": seed})]


@st.composite
def swiglu_cases(draw: st.DrawFn, dtype: Format) -> list[Case]:
    """d = 8192 (a long reduction into the hidden layer) and h = 8192 (a long one out of it)."""
    seed = draw(seeds, label="seed")
    cases = []
    for k, (rows, d, h) in enumerate(SWIGLU):
        s = seed + 16 * k
        inputs = {
            "x": fill(dtype, (rows, d), 1.0, s),
            "w1": fill(dtype, (d, h), d**-0.5, s + 1),
            "w3": fill(dtype, (d, h), d**-0.5, s + 2),
            "w2": fill(dtype, (h, d), h**-0.5, s + 3),
        }
        cases.append(Case(inputs, {}, {"regime": f"d {d}, h {h}", "seed": s}))
    return cases

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

from transformer_conformance.conformance.strategies.choices import sampled_from
from transformer_conformance.conformance.strategies.common import Case, fill, seeds
from transformer_conformance.conformance.strategies.positions import scaling
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
#: RoPE inside attention: the keys end this far past the drawn first position (at least the longest L_k)
KEYS_END = LONG_KEYS[3]
#: RoPE over a long sequence with many heads (kernels grid over tokens × heads).
ROPE = (32, 300, 128)  # heads, T, d
#: SwiGLU with a long input row (d = 8192) and a wide hidden layer (h = 8192).
SWIGLU = ((2, 8192, 24), (2, 16, 8192))  # rows, d, h
#: RoPE context extension over the RoPE regime's grid, from a first position past the trained length; and over a
#: few heads across position 131,072 (the end of a 128k model's cos/sin cache): heads, first position.
ROPE_SCALED_STARTS = (0, 4090, 30000, 131_000)
ROPE_SCALED_CACHE_END = (4, 131_000)
#: The positional encodings: the sinusoidal table over many positions of a wide model (tokens × d), ALiBi's biases
#: for 64 heads over 520 keys (kernels fill them per tile of keys), a learned table of 32,768 rows read at 4096
#: positions with repeats (embedding backward kernels sort or atomically add the repeated rows).
SINUSOIDAL = (300, 4096)
ALIBI = (64, 8, 520)  # H, T_q, T_k
LEARNED = (32_768, 64, 4096)  # L, d, T
#: The LM head: a final RMSNorm over a long row into a narrow head (a long reduction), and a short row into a
#: 131,072-class head. Tokens × d × vocabulary.
LM_HEAD = ((4, 8192, 256), (2, 16, VOCAB))
#: A whole decoder layer over a sequence half a tile past an attention tile of 128 keys: T, d, H_q, H_kv, D, h. Narrow:
#: at a model's width the block's budget (first-order error propagation through two GEMMs, growing as √d·√h) is
#: far wider than its values (d = 512, h = 1408: ~100×), and the widths are the MLP and attention regimes' subject.
BLOCK = (192, 16, 4, 2, 4, 24)
#: The token-reduced losses over many tokens (a mean over a long count; losses chunked over tokens, as torchtune's
#: CEWithChunkedOutputLoss, or over blocks of rows) — tokens × vocabulary — and over a 128k vocabulary.
MANY_TOKENS = (16_384, 32)
#: What the token-reduced losses' regime checks say they cover.
TOKEN_MEAN_REGIMES = (
    "16,384 tokens, a quarter ignored (a mean over a long count; losses chunked over tokens); a vocabulary of 131,072"
)
#: The fused LM-head loss: many tokens through a head several times wider than the hidden size (Liger's fused
#: linear cross-entropy walks the tokens in chunks of next_pow2(N / ⌈V/H⌉): 16 chunks here, ∂W and ∂b summed
#: over them), and a 128k vocabulary. Tokens × hidden × vocabulary.
LINEAR_CE = ((2048, 64, 1024), (2, 16, VOCAB))
#: Ignored tokens in the many-token regimes: about this fraction, with ignore_index −100.
IGNORED = 0.25


@st.composite
def norm_cases(draw: st.DrawFn, dtype: Format, with_bias: bool) -> list[Case]:
    """One case per norm regime: 32,768 rows (plus 0–15, a partial last block) × 64, and 2 × 8192."""
    seed = draw(seeds, label="seed")
    extra = draw(sampled_from([0, 7, 15]), label="rows past 32,768")
    eps = draw(sampled_from([1e-6, 1e-5]), label="eps")
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
def qk_norm_attention_cases(draw: st.DrawFn, dtype: Format) -> list[Case]:
    """The attention regimes with RMSNorm on q and k over the head (γ near 1, ε drawn)."""
    eps = draw(sampled_from([1e-6, 1e-5]), label="eps")
    cases = []
    for c in draw(attention_cases(dtype)):
        s, d = c.about["seed"], c.inputs["q"].shape[-1]
        weights = {f"{n}_weight": fill(dtype, (d,), 0.2, s + 3 + k, offset=1.0) for k, n in enumerate("qk")}
        cases.append(Case(c.inputs | weights, c.params | {"eps": eps}, dict(c.about)))
    return cases


@st.composite
def rope_attention_cases(draw: st.DrawFn, dtype: Format) -> list[Case]:
    """The attention regimes with RoPE on q and k, the keys ending at a drawn position (past 131,000: beyond
    every trained length drawn) and the queries the last of them."""
    end = KEYS_END + draw(sampled_from(ROPE_SCALED_STARTS), label="first position")
    cases = []
    for c in draw(attention_cases(dtype)):
        lq, lk = c.inputs["q"].shape[-2], c.inputs["k"].shape[-2]
        positions = {f"{n}_positions": np.arange(end - m, end, dtype=np.int64) for n, m in (("q", lq), ("k", lk))}
        about = c.about | {"regime": f"{c.about['regime']}, keys ending at {end - 1}"}
        cases.append(Case(c.inputs | positions, c.params | {"base": 10000.0}, about))
    return cases


@st.composite
def rope_cases(draw: st.DrawFn, dtype: Format) -> list[Case]:
    """32 heads × 300 positions × 128 features, from a drawn first position."""
    seed = draw(seeds, label="seed")
    start = draw(sampled_from([0, 4090, 30000]), label="first position")
    heads, t, d = ROPE
    x = fill(dtype, (heads, t, d), 1.0, seed)
    pos = np.arange(start, start + t, dtype=np.int64)
    params = {"base": 10000.0, "rotary_dim": None}
    return [Case({"x": x, "positions": pos}, params, {"regime": f"{heads} heads × {t} × {d}", "seed": seed})]


def _ffn_inputs(dtype: Format, rows: int, d: int, h: int, s: int, gated: bool) -> dict[str, np.ndarray]:
    """x (rows × d) and the weights at N(0, 1/fan_in): W₁, W₃, W₂ of a GLU (``gated``), else W_in, W_out."""
    x = fill(dtype, (rows, d), 1.0, s)
    w_in, w_out = fill(dtype, (d, h), d**-0.5, s + 1), fill(dtype, (h, d), h**-0.5, s + 3)
    if gated:
        return {"x": x, "w1": w_in, "w3": fill(dtype, (d, h), d**-0.5, s + 2), "w2": w_out}
    return {"x": x, "w_in": w_in, "w_out": w_out}


@st.composite
def swiglu_cases(draw: st.DrawFn, dtype: Format) -> list[Case]:
    """d = 8192 (a long reduction into the hidden layer) and h = 8192 (a long one out of it)."""
    seed = draw(seeds, label="seed")
    cases = []
    for k, (rows, d, h) in enumerate(SWIGLU):
        s = seed + 16 * k
        cases.append(Case(_ffn_inputs(dtype, rows, d, h, s, gated=True), {}, {"regime": f"d {d}, h {h}", "seed": s}))
    return cases


def _some_ignored(targets: np.ndarray, seed: int) -> np.ndarray:
    """``targets`` with about IGNORED of them set to −100 (never the first: one token always counts)."""
    ignored = np.random.default_rng(seed).random(len(targets)) < IGNORED
    ignored[0] = False
    return np.where(ignored, -100, targets).astype(np.int64)


@st.composite
def token_mean_cases(draw: st.DrawFn, dtype: Format, op: str) -> list[Case]:
    """``cross_entropy_mean`` or ``z_loss_mean`` (α 10⁻⁴) over 16,384 (+0–15) tokens of a 32-class vocabulary,
    a quarter ignored, and over two tokens of a 131,072-class one."""
    seed = draw(seeds, label="seed")
    extra = draw(sampled_from([0, 7, 15]), label="tokens past 16,384")
    cases = []
    for k, (n, v) in enumerate(((MANY_TOKENS[0] + extra, MANY_TOKENS[1]), (2, VOCAB))):
        s = seed + 16 * k
        targets = np.random.default_rng(s + 1).integers(0, v, size=n)
        params: dict[str, Any] = {"ignore_index": -100} | ({"alpha": 1e-4} if op == "z_loss_mean" else {})
        inputs = {"logits": fill(dtype, (n, v), 2.0, s), "targets": _some_ignored(targets, s + 2)}
        cases.append(Case(inputs, params, {"regime": f"{n} tokens × vocabulary {v}", "seed": s}))
    return cases


@st.composite
def linear_ce_cases(draw: st.DrawFn, dtype: Format, reductions: tuple[str, ...]) -> list[Case]:
    """The fused LM-head loss over 2048 (+0–15) tokens, hidden 64, vocabulary 1024, a quarter ignored, and over
    two tokens of a 131,072-class head; the reduction drawn among the candidate's."""
    seed = draw(seeds, label="seed")
    extra = draw(sampled_from([0, 7, 15]), label="tokens past 2048")
    reduction = draw(sampled_from(reductions), label="reduction")
    cases = []
    for k, (n, h, v) in enumerate(((LINEAR_CE[0][0] + extra, *LINEAR_CE[0][1:]), LINEAR_CE[1])):
        s = seed + 16 * k
        targets = np.random.default_rng(s + 3).integers(0, v, size=n)
        inputs = {
            "x": fill(dtype, (n, h), 1.0, s),
            "weight": fill(dtype, (v, h), 4.0 / np.sqrt(h), s + 1),
            "bias": fill(dtype, (v,), 1.0, s + 2),
            "targets": _some_ignored(targets, s + 4),
        }
        params = {"ignore_index": -100, "reduction": reduction}
        cases.append(Case(inputs, params, {"regime": f"{n} tokens, hidden {h}, vocabulary {v}", "seed": s}))
    return cases


@st.composite
def ffn_cases(draw: st.DrawFn, dtype: Format, gated: bool, activations: tuple[str, ...]) -> list[Case]:
    """The plain or gated MLP (activation drawn among ``activations``) at SwiGLU's regimes: d = 8192 and h = 8192."""
    seed = draw(seeds, label="seed")
    act = draw(sampled_from(activations), label="activation")
    cases = []
    for k, (rows, d, h) in enumerate(SWIGLU):
        s = seed + 16 * k
        inputs = _ffn_inputs(dtype, rows, d, h, s, gated)
        cases.append(Case(inputs, {"activation": act}, {"regime": f"{act}, d {d}, h {h}", "seed": s}))
    return cases


@st.composite
def z_loss_cases(draw: st.DrawFn, dtype: Format) -> list[Case]:
    """The per-token z-loss (α drawn) of two tokens over a vocabulary of 131,072."""
    seed = draw(seeds, label="seed")
    alpha = draw(sampled_from([1e-4, 1e-3]), label="alpha")
    logits = fill(dtype, (2, VOCAB), 2.0, seed)
    return [Case({"logits": logits}, {"alpha": alpha}, {"regime": f"vocabulary {VOCAB}", "seed": seed})]


@st.composite
def softcap_z_loss_cases(draw: st.DrawFn, dtype: Format) -> list[Case]:
    """The soft-capped z-loss (Gemma 2's final cap of 30, or 50) of two tokens over a vocabulary of 131,072,
    logits spread over the tanh's knee (2c)."""
    seed = draw(seeds, label="seed")
    cap = draw(sampled_from([30.0, 50.0]), label="cap")
    logits = fill(dtype, (2, VOCAB), 2.0 * cap, seed)
    params = {"alpha": 1e-4, "cap": cap}
    return [Case({"logits": logits}, params, {"regime": f"vocabulary {VOCAB}, cap {cap:g}", "seed": seed})]


@st.composite
def lm_head_cases(draw: st.DrawFn, dtype: Format) -> list[Case]:
    """Final RMSNorm then W_head: 4 tokens of d = 8192 into 256 classes, and 2 tokens of d = 16 into 131,072."""
    seed = draw(seeds, label="seed")
    eps = draw(sampled_from([1e-6, 1e-5]), label="eps")
    cases = []
    for k, (t, d, v) in enumerate(LM_HEAD):
        s = seed + 16 * k
        inputs = {
            "x": fill(dtype, (t, d), 1.0, s),
            "norm_weight": fill(dtype, (d,), 0.2, s + 1, offset=1.0),
            "w_head": fill(dtype, (d, v), d**-0.5, s + 2),
        }
        cases.append(Case(inputs, {"eps": eps}, {"regime": f"{t} tokens, d {d}, vocabulary {v}", "seed": s}))
    return cases


@st.composite
def block_cases(draw: st.DrawFn, dtype: Format, placements: tuple[str, ...]) -> list[Case]:
    """One decoder layer (placement drawn among ``placements``) over 192 tokens of d = 16: 4 query heads of 4 over
    2 KV heads, a SwiGLU of 24; weights at N(0, 1/fan_in), norm weights near 1, positions from 0 or 4090."""
    seed = draw(seeds, label="seed")
    placement = draw(sampled_from(placements), label="placement")
    start = draw(sampled_from([0, 4090]), label="first position")
    t, d, hq, hkv, hd, h = BLOCK

    def w(shape: tuple[int, int], k: int) -> np.ndarray:
        return fill(dtype, shape, shape[0] ** -0.5, seed + k)

    norms = ("attn_norm", "mlp_norm", "attn_post_norm", "mlp_post_norm")
    inputs = {n: fill(dtype, (d,), 0.2, seed + 20 + k, offset=1.0) for k, n in enumerate(norms)} | {
        "x": fill(dtype, (1, t, d), 1.0, seed),
        "wq": w((d, hq * hd), 2),
        "wk": w((d, hkv * hd), 3),
        "wv": w((d, hkv * hd), 4),
        "wo": w((hq * hd, d), 5),
        "w1": w((d, h), 7),
        "w3": w((d, h), 8),
        "w2": w((h, d), 9),
        "positions": np.arange(start, start + t, dtype=np.int64),
    }
    params = {"placement": placement, "n_heads": hq, "n_kv_heads": hkv, "eps": 1e-6, "base": 10000.0}
    regime = f"{placement}, T {t}, d {d}, H_q {hq}, H_kv {hkv}, h {h}"
    return [Case(inputs, params, {"regime": regime, "seed": seed})]


@st.composite
def rope_scaled_cases(draw: st.DrawFn, dtype: Format, kinds: tuple[str, ...]) -> list[Case]:
    """A context-extension rule among ``kinds`` over 32 heads × 300 positions × 128 features, from a drawn first
    position (131,000: past every trained length drawn), and over 4 heads from 131,000 (across 131,072)."""
    seed = draw(seeds, label="seed")
    start = draw(sampled_from(ROPE_SCALED_STARTS), label="first position")
    rule = draw(scaling(kinds, ROPE[2]), label="rule")
    _, t, d = ROPE
    cases = []
    for k, (heads, first) in enumerate(((ROPE[0], start), ROPE_SCALED_CACHE_END)):
        s = seed + 16 * k
        inputs = {"x": fill(dtype, (heads, t, d), 1.0, s), "positions": np.arange(first, first + t, dtype=np.int64)}
        params = {"base": 10000.0, "rotary_dim": None, "scaling": rule}
        regime = f"{rule['type']}, {heads} heads × {t} × {d} from {first}"
        cases.append(Case(inputs, params, {"regime": regime, "seed": s}))
    return cases


@st.composite
def sinusoidal_cases(draw: st.DrawFn, dtype: Format) -> list[Case]:
    """x + PE over 300 positions × 4096 features, from a drawn first position."""
    seed = draw(seeds, label="seed")
    start = draw(sampled_from([0, 4090, 30000]), label="first position")
    t, d = SINUSOIDAL
    inputs = {"x": fill(dtype, (1, t, d), 1.0, seed), "positions": np.arange(start, start + t, dtype=np.int64)}
    return [Case(inputs, {"base": 10000.0}, {"regime": f"{t} positions × {d}", "seed": seed})]


@st.composite
def alibi_cases(draw: st.DrawFn, dtype: Format) -> list[Case]:
    """ALiBi over 64 heads, 8 queries at the end of 520 keys."""
    seed = draw(seeds, label="seed")
    h, tq, tk = ALIBI
    start = draw(sampled_from([0, 4090]), label="first position")
    kp = np.arange(start, start + tk, dtype=np.int64)
    inputs = {"scores": fill(dtype, (1, h, tq, tk), 4.0, seed), "q_positions": kp[-tq:].copy(), "k_positions": kp}
    return [Case(inputs, {}, {"regime": f"{h} heads × {tq} queries × {tk} keys", "seed": seed})]


@st.composite
def learned_cases(draw: st.DrawFn, dtype: Format) -> list[Case]:
    """A table of 32,768 rows × 64 read at 4096 positions, about a quarter of them repeats."""
    seed = draw(seeds, label="seed")
    n, d, t = LEARNED
    pos = np.random.default_rng(seed).integers(0, n, size=t)
    pos[t // 2 :: 4] = pos[: t // 8]  # repeats far apart
    pos[-1] = n - 1
    inputs = {"table": fill(dtype, (n, d), 1.0, seed + 1), "positions": pos.astype(np.int64)}
    return [Case(inputs, {}, {"regime": f"table {n} × {d}, {t} positions", "seed": seed})]

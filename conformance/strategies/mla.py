"""Hypothesis strategies for multi-head latent attention: small heads and latents of any width, DeepSeek's
decoupled RoPE slice (even widths), the softmax scale with and without YaRN's mscale (DeepSeek-V3's factor 40,
mscale_all_dim 1), prefill (L_q = L_k) and decoding (fewer queries, bottom-right), each form the adapter declares."""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from transformer_conformance.conformance.strategies.choices import sampled_from
from transformer_conformance.conformance.strategies.common import Case, fill, magnitudes, positions, seeds
from transformer_conformance.conformance.strategies.plan import Dims, shapes
from transformer_conformance.reference.formats import Format

#: None (σ = 1/√(D_n + D_r)), DeepSeek-V3's YaRN settings, and a factor with a fractional mscale_all_dim
MSCALES: list[dict[str, float] | None] = [
    None,
    {"factor": 40.0, "mscale_all_dim": 1.0},
    {"factor": 4.0, "mscale_all_dim": 0.707},
]
#: The size regime: DeepSeek-V3's head (D_n 128, D_r 64, D_v 128) and latent (512) over 520 keys, 3 queries, 4 heads
REGIME = (1, 4, 3, 520, 128, 64, 512, 128)  # B, H, L_q, L_k, D_n, D_r, D_c, D_v


def _inputs(dtype: Format, dims: tuple[int, ...], mag: float, seed: int) -> dict[str, np.ndarray]:
    b, h, lq, lk, dn, dr, dc, dv = dims
    return {
        "q_nope": fill(dtype, (b, h, lq, dn), mag, seed),
        "q_rope": fill(dtype, (b, h, lq, dr), mag, seed + 1),
        "latent": fill(dtype, (b, lk, dc), 1.0, seed + 2),
        "k_rope": fill(dtype, (b, lk, dr), mag, seed + 3),
        "w_uk": fill(dtype, (h, dc, dn), dc**-0.5, seed + 4),
        "w_uv": fill(dtype, (h, dc, dv), dc**-0.5, seed + 5),
    }


#: The planned shapes (conformance/strategies/plan.py): decoding one query, a square prefill, half the keys' queries;
#: under a ``per_value`` plan each also states causal or not, the RoPE base and the YaRN mscale (each of MSCALES once)
MLA_SHAPES = shapes(
    ("B", "H", "L_k", "L_q", "D_n", "D_r/2", "D_c", "D_v", "causal", "base", "mscale"),
    (1, 3, 6, 1, 7, 2, 64, 5, True, 10000.0, MSCALES[1]),
    (2, 2, 5, 5, 16, 1, 9, 16, False, 500000.0, MSCALES[0]),
    (1, 4, 8, 4, 3, 4, 32, 2, True, 10000.0, MSCALES[2]),
)


@st.composite
def mla_case(draw: st.DrawFn, dtype: Format, forms: tuple[str, ...], causal: bool | None = None) -> Case:
    dims = Dims(draw, MLA_SHAPES)
    b = dims("B", st.integers(1, 2))
    h = dims("H", st.integers(1, 4))
    lk = dims("L_k", st.integers(1, 8))
    lq = dims("L_q", sampled_from([lk, 1, max(1, lk // 2)]))
    dn = dims("D_n", st.integers(1, 16))
    dr = 2 * dims("D_r/2", st.integers(1, 4))
    dc = dims("D_c", st.one_of(st.integers(1, 32), sampled_from([64, 128])))
    dv = dims("D_v", st.integers(1, 16))
    seed = draw(seeds, label="seed")
    mag = draw(magnitudes(-2, 2), label="|q|")
    k_pos = draw(positions(lk, below_2_24=True))
    params = {
        "causal": dims.value("causal", st.booleans()) if causal is None else causal,
        "base": dims.value("base", sampled_from([10000.0, 10000.0, 500000.0])),
        "mscale": dims.value("mscale", sampled_from(MSCALES)),
        "form": draw(sampled_from(forms), label="form"),
    }
    inputs = _inputs(dtype, (b, h, lq, lk, dn, dr, dc, dv), mag, seed)
    inputs.update(q_positions=k_pos[lk - lq :], k_positions=k_pos)
    return Case(inputs, params, {"seed": seed})


@st.composite
def mla_cases(draw: st.DrawFn, dtype: Format, forms: tuple[str, ...]) -> list[Case]:
    """DeepSeek-V3's dimensions, decoding 3 queries over 520 keys, once per declared form."""
    seed = draw(seeds, label="seed")
    lq, lk = REGIME[2], REGIME[3]
    out = []
    for i, form in enumerate(forms):
        inputs = _inputs(dtype, REGIME, 1.0, seed + 10 * i)
        k_pos = np.arange(4090, 4090 + lk, dtype=np.int64)
        inputs.update(q_positions=k_pos[lk - lq :], k_positions=k_pos)
        params = {"causal": True, "base": 10000.0, "mscale": MSCALES[1], "form": form}
        out.append(Case(inputs, params, {"seed": seed + 10 * i, "regime": f"{form}: DeepSeek-V3 head, {lq}×{lk}"}))
    return out

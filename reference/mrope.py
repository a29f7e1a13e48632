"""Multimodal RoPE (M-RoPE): the rotated pairs split among three position streams, temporal, height and width.

ref: Qwen2-VL (Wang et al. 2024, arXiv:2409.12191 §2.1 "Multimodal Rotary Position Embedding"); Qwen3-VL's
interleaved form (the Qwen3-VL model card and HF transformers' ``Qwen3VLTextRotaryEmbedding``).

Each token has three positions (t, h, w) — a text token has t = h = w, its 1-D position. Pair i of the head
vector is rotated by p_{s(i)}·θ_i, θ_i = base^(−2i/d) as in RoPE, where the stream s(i) is

* ``"sections"`` (Qwen2-VL, Qwen2.5-VL): with ``sections`` = (n_t, n_h, n_w), n_t + n_h + n_w = d/2, the first
  n_t pairs take t, the next n_h take h, the last n_w take w;
* ``"interleaved"`` (Qwen3-VL): pair i takes h if i mod 3 = 1 and i < 3·n_h, w if i mod 3 = 2 and i < 3·n_w,
  t otherwise — every stream spans low and high frequencies.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
from numpy.typing import NDArray

from transformer_conformance.reference.rope import Layout, rope, rope_inv_freq, rope_vjp

F64 = NDArray[np.float64]
I64 = NDArray[np.int64]
Streams = Literal["sections", "interleaved"]

STREAMS = ("sections", "interleaved")


def mrope_streams(half: int, sections: tuple[int, int, int], streams: Streams = "sections") -> NDArray[np.intp]:
    """s(i) for each of the ``half`` = d/2 pairs: 0 (temporal), 1 (height) or 2 (width)."""
    n_t, n_h, n_w = (int(n) for n in sections)
    if min(n_t, n_h, n_w) < 0 or n_t + n_h + n_w != half:
        raise ValueError(f"M-RoPE sections {tuple(sections)} must be three counts summing to d/2 = {half}")
    i = np.arange(half)
    if streams == "sections":
        return np.repeat(np.arange(3), (n_t, n_h, n_w))
    if streams == "interleaved":
        s = np.zeros(half, dtype=np.intp)
        s[(i % 3 == 1) & (i < 3 * n_h)] = 1
        s[(i % 3 == 2) & (i < 3 * n_w)] = 2
        return s
    raise ValueError(f"unknown M-RoPE streams {streams!r}; expected one of {', '.join(STREAMS)}")


def mrope_angles(
    positions: I64, d: int, sections: tuple[int, int, int], base: float = 10000.0, streams: Streams = "sections"
) -> F64:
    """The angle p_{s(i)}[t]·θ_i of pair i at token t, shape (T, d/2); ``positions`` has shape (3, T)."""
    pos = np.asarray(positions, dtype=np.float64)
    if pos.ndim != 2 or pos.shape[0] != 3:
        raise ValueError(f"M-RoPE positions must have shape (3, T), got {pos.shape}")
    s = mrope_streams(d // 2, sections, streams)
    return pos[s].T * rope_inv_freq(d, base)[None, :]


def mrope(
    x: F64,
    positions: I64,
    sections: tuple[int, int, int],
    base: float = 10000.0,
    streams: Streams = "sections",
    layout: Layout = "half",
) -> F64:
    """x (..., T, d) with pair i of token t rotated by p_{s(i)}[t]·θ_i, in the pair ``layout``."""
    d = x.shape[-1]
    return rope(x, positions[0], base, d, layout, angles=mrope_angles(positions, d, sections, base, streams))


def mrope_vjp(
    x: F64,
    positions: I64,
    g: F64,
    sections: tuple[int, int, int],
    base: float = 10000.0,
    streams: Streams = "sections",
    layout: Layout = "half",
) -> F64:
    """VJP of :func:`mrope` with respect to x: each pair's transposed rotation."""
    d = x.shape[-1]
    return rope_vjp(x, positions[0], g, base, d, layout, angles=mrope_angles(positions, d, sections, base, streams))

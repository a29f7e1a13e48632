"""The sizes each operation is benchmarked at: the full set (the seeds' shapes) and the quick set.

Full: the 7B worked example of seed-002 §3.1.1 and §3.2.1 — d = 4096, sequence 2048, batch 4, 32 heads
of head dimension 128, SwiGLU hidden width 11008 — and vocabularies of 32000 and 128000 (§3.2.2: "V ~
32,000-128,000"); each with smaller sizes so the plots show a trend. The first size of each list is the
seed's own shape: the report's headline table, and the first to run when a time budget cuts a run short.

Quick: the same operations at sizes a 2-core CPU gets through in a few minutes, all dtypes included. A
smoke run of the harness and a rough trend, not the seeds' shapes: small tensors stay in cache and a CPU
has no fast low-precision matmul.
"""

from __future__ import annotations

D, SEQ, BATCH, HEADS, HEAD_DIM, HIDDEN = 4096, 2048, 4, 32, 128, 11008


def _norm(batch: int, seq: int, d: int = D) -> dict[str, int]:
    return {"batch": batch, "seq": seq, "d": d}


def _rope(batch: int, seq: int, heads: int = HEADS, head_dim: int = HEAD_DIM) -> dict[str, int]:
    return {"batch": batch, "heads": heads, "seq": seq, "head_dim": head_dim}


def _mlp(batch: int, seq: int, d: int = D, hidden: int = HIDDEN) -> dict[str, int]:
    return {"batch": batch, "seq": seq, "d": d, "hidden": hidden}


def _product(batch: int, seq: int, hidden: int = HIDDEN) -> dict[str, int]:
    return {"batch": batch, "seq": seq, "hidden": hidden}


def _logits(tokens: int, vocab: int) -> dict[str, int]:
    return {"tokens": tokens, "vocab": vocab}


FULL: dict[str, list[dict[str, int]]] = {
    "rms_norm": [_norm(BATCH, SEQ), _norm(1, SEQ), _norm(1, 512)],
    "layer_norm": [_norm(BATCH, SEQ), _norm(1, SEQ), _norm(1, 512)],
    "rope": [_rope(BATCH, SEQ), _rope(1, SEQ), _rope(1, 512)],
    "swiglu_mlp": [_mlp(BATCH, SEQ), _mlp(1, SEQ), _mlp(1, 512)],
    "swiglu_product": [_product(BATCH, SEQ), _product(1, SEQ), _product(1, 512)],
    "cross_entropy": [_logits(BATCH * SEQ, 32000), _logits(SEQ, 128000), _logits(SEQ, 32000)],
    "z_loss": [_logits(BATCH * SEQ, 32000), _logits(SEQ, 128000), _logits(SEQ, 32000)],
}

QUICK: dict[str, list[dict[str, int]]] = {
    "rms_norm": [_norm(1, 512), _norm(1, 128)],
    "layer_norm": [_norm(1, 512), _norm(1, 128)],
    "rope": [_rope(1, 128, heads=32), _rope(1, 128, heads=8)],
    "swiglu_mlp": [_mlp(1, 64, d=256, hidden=768), _mlp(1, 16, d=256, hidden=768)],
    "swiglu_product": [_product(1, 256, hidden=2816), _product(1, 64, hidden=2816)],
    "cross_entropy": [_logits(64, 32000), _logits(16, 128000), _logits(16, 32000)],
    "z_loss": [_logits(64, 32000), _logits(16, 128000), _logits(16, 32000)],
}


def sizes(quick: bool) -> dict[str, list[dict[str, int]]]:
    return QUICK if quick else FULL

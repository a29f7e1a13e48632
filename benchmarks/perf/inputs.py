"""Benchmark inputs: NumPy arrays in the contract's form (floating in the dtype under test, integers int64).

Values are random but tame — unit-scale activations and logits, weights scaled by 1/√fan-in, norm weights
near 1 — so no dtype overflows (float16 included) and no timing depends on infinities or subnormals.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

from benchmarks.perf.accounting import BenchOp, Dims

NUMPY_DTYPES = {
    "float32": np.dtype(np.float32),
    "float16": np.dtype(np.float16),
    "bfloat16": np.dtype(ml_dtypes.bfloat16),
}


def _scale(op: BenchOp, name: str, dims: Dims) -> tuple[float, float]:
    """(offset, scale) of a floating input."""
    if op.name in ("rms_norm", "layer_norm") and name == "weight":
        return 1.0, 0.1
    if name in ("w1", "w3"):
        return 0.0, dims["d"] ** -0.5
    if name == "w2":
        return 0.0, dims["hidden"] ** -0.5
    if name == "logits":
        return 0.0, 2.0
    return 0.0, 1.0


def make_inputs(op: BenchOp, dims: Dims, dtype: str, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    out: dict[str, np.ndarray] = {}
    for name, shape in op.floating(dims).items():
        offset, scale = _scale(op, name, dims)
        a = rng.standard_normal(shape, dtype=np.float32)
        if scale != 1.0:
            a *= np.float32(scale)
        if offset:
            a += np.float32(offset)
        out[name] = a.astype(NUMPY_DTYPES[dtype])
    for name, shape in op.integer(dims).items():
        if name == "positions":
            out[name] = np.arange(shape[0], dtype=np.int64)
        else:  # targets
            out[name] = rng.integers(0, dims["vocab"], size=shape, dtype=np.int64)
    return out

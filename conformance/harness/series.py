"""Error series: a check's worst error per bucket of one input coordinate, for the report's precision plots.

A check that compares against the oracle keeps, besides its single worst error, the worst error (in ulps)
in each bucket of a coordinate that explains it: the position index for RoPE (the angle m·θ grows with
it), the row's root-mean-square for the norms (the input magnitude). Buckets are fixed in advance and
log-spaced, so a series has a bounded number of points whatever the run (at most :data:`MAX_POINTS` over
the strategies' ranges) and runs of different lengths give comparable series.

Each point keeps the error and the budget of the same element: the element with the largest error in the
bucket, and the error budget it was held to, both in ulps of the dtype.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

#: the most points a series holds over the strategies' ranges (positions below 2^17, RMS 2^-32 … 2^32)
MAX_POINTS = 64

#: positions below this are buckets of their own; above, four buckets per octave
EXACT_POSITIONS = 8
PER_OCTAVE = 4
#: the row-RMS octaves kept; rows outside are counted in the end buckets
RMS_OCTAVES = (-32, 31)


def position_bucket(p: np.ndarray) -> np.ndarray:
    """The bucket index of each position: itself below 8, then 8 + ⌊4·log2(p/8)⌋ (four per octave)."""
    p = np.asarray(p, dtype=np.float64)
    above = EXACT_POSITIONS + np.floor(PER_OCTAVE * np.log2(np.maximum(p, EXACT_POSITIONS) / EXACT_POSITIONS))
    return np.where(p < EXACT_POSITIONS, np.maximum(p, 0), above).astype(np.int64)


def position_range(k: int) -> tuple[float, float]:
    """The positions [lo, hi) of bucket ``k`` (lo and hi rounded up to integers)."""
    if k < EXACT_POSITIONS:
        return float(k), float(k + 1)
    lo = EXACT_POSITIONS * 2.0 ** ((k - EXACT_POSITIONS) / PER_OCTAVE)
    hi = EXACT_POSITIONS * 2.0 ** ((k + 1 - EXACT_POSITIONS) / PER_OCTAVE)
    return float(math.ceil(lo)), float(math.ceil(hi))


def rms_bucket(x: np.ndarray) -> np.ndarray:
    """The octave ⌊log2 RMS⌋ of each row (last axis) of ``x``, clipped to :data:`RMS_OCTAVES`; shape
    ``x.shape[:-1] + (1,)``, to broadcast over the row."""
    x = np.asarray(x, dtype=np.float64)
    rms = np.sqrt(np.mean(x * x, axis=-1, keepdims=True)) if x.shape[-1] else np.zeros((*x.shape[:-1], 1))
    with np.errstate(divide="ignore"):
        octave = np.floor(np.log2(np.maximum(rms, 2.0 ** RMS_OCTAVES[0])))
    return np.clip(octave, *RMS_OCTAVES).astype(np.int64)


def rms_range(k: int) -> tuple[float, float]:
    return 2.0**k, 2.0 ** (k + 1)


@dataclass(frozen=True)
class Along:
    """How to bucket one output's elements: ``keys`` (integer bucket indices, broadcastable to the output's
    shape), the coordinate's name, and its buckets' ranges."""

    coordinate: str  # "position", "row RMS"
    keys: np.ndarray

    @staticmethod
    def positions(positions: np.ndarray) -> Along:
        """Outputs shaped (…, T, d) whose row t is at ``positions[t]`` (RoPE)."""
        return Along("position", position_bucket(positions)[:, None])

    @staticmethod
    def row_rms(x: np.ndarray) -> Along:
        """Outputs shaped like ``x`` whose rows are normalised each on its own (the norms)."""
        return Along("row RMS", rms_bucket(x))


RANGES = {"position": position_range, "row RMS": rms_range}


@dataclass
class Series:
    """The worst error per bucket of one coordinate, over all examples of one check."""

    coordinate: str
    output: str
    #: bucket -> (worst error in ulps, the budget of that element in ulps)
    buckets: dict[int, tuple[float, float]] = field(default_factory=dict)

    def add(self, keys: np.ndarray, ulps: np.ndarray, budget_ulps: np.ndarray) -> None:
        """Fold in one output's errors and budgets (in ulps); ``keys`` broadcasts to their shape."""
        if ulps.size == 0:
            return
        keys = np.asarray(keys).reshape((1,) * (ulps.ndim - np.ndim(keys)) + np.shape(keys))
        # the axes the key does not vary along are reduced first: one argmax per key element
        spread = [i for i in range(ulps.ndim) if keys.shape[i] == 1]
        kept = [i for i in range(ulps.ndim) if keys.shape[i] != 1]
        order = kept + spread
        n = math.prod(ulps.shape[i] for i in kept)
        u = np.transpose(ulps, order).reshape(n, -1)
        b = np.transpose(np.broadcast_to(budget_ulps, ulps.shape), order).reshape(n, -1)
        k = np.transpose(keys, order).reshape(n)
        at = np.argmax(u, axis=1)
        rows = np.arange(n)
        for key, worst, budget in zip(k.tolist(), u[rows, at].tolist(), b[rows, at].tolist(), strict=True):
            old = self.buckets.get(key)
            if old is None or worst > old[0]:
                self.buckets[key] = (worst, budget)

    def to_json(self) -> dict[str, Any]:
        """``points``: [lo, hi, worst error, its budget] per bucket in increasing order, ulps to 4 digits."""
        ranges = RANGES[self.coordinate]
        return {
            "x": self.coordinate,
            "output": self.output,
            "points": [[*ranges(k), _short(u), _short(b)] for k, (u, b) in sorted(self.buckets.items())],
        }


def _short(v: float) -> float:
    return float(f"{v:.4g}") if math.isfinite(v) else v

"""The floating-point formats under test: rounding float64 values into them and their ulp spacing.

NumPy has no bfloat16; ``ml_dtypes`` supplies it as a NumPy dtype, so no framework is needed here.
"""

from __future__ import annotations

from dataclasses import dataclass

import ml_dtypes
import numpy as np
from numpy.typing import NDArray

F64 = NDArray[np.float64]

#: the exponent field of a float64
_EXPONENT_BITS = np.uint64(0x7FF0000000000000)


@dataclass(frozen=True)
class Format:
    """An IEEE-style binary format: ``precision`` significand bits (with the hidden one)."""

    name: str
    np_dtype: np.dtype
    precision: int
    min_exponent: int  # exponent of the smallest normal number
    max_finite: float

    @property
    def unit_roundoff(self) -> float:
        """u = 2^(−p): round-to-nearest puts any real within u·|x| of its rounded value."""
        return 2.0 ** (-self.precision)

    def round(self, x: F64 | float) -> np.ndarray:
        """Round float64 values to this format, correctly (to nearest, ties to even).

        ml_dtypes converts float64 to bfloat16 through float32, which rounds twice and can land a
        half-ulp tie the wrong way; bfloat16 is therefore rounded here in float64 first, exactly.
        """
        a = np.asarray(x, dtype=np.float64)
        if self.name != "bfloat16":
            with np.errstate(over="ignore"):
                return a.astype(self.np_dtype)
        with np.errstate(over="ignore", invalid="ignore"):
            spacing = self.ulp(a)
            r = np.rint(a / spacing)  # a/spacing is exact: a power of 2
            r *= spacing
            if not np.isfinite(a).all():
                r = np.where(np.isfinite(a), r, a)
        beyond = np.abs(r) > self.max_finite
        if beyond.any():
            r = np.where(beyond, np.copysign(np.inf, a), r)
        return np.asarray(r).astype(self.np_dtype)  # exact now: r has at most 8 significant bits

    def ulp(self, v: F64 | float) -> F64:
        """Spacing of this format at |v|: 2^(e − p + 1), e = ⌊log2 |v|⌋, floored at the subnormal spacing."""
        a = np.asarray(v, dtype=np.float64)
        # 2^⌊log2 |a|⌋ is |a| with its significand bits cleared (0 for zero and float64 subnormals, which the
        # floor covers; inf for inf and NaN)
        # (computed in place in that one new array: the size regimes' arrays are millions of elements)
        out = np.asarray(a.view(np.uint64) & _EXPONENT_BITS).view(np.float64)
        special = out.size > 0 and out.max() == np.inf
        smallest = 2.0 ** (self.min_exponent + 1 - self.precision)
        np.maximum(np.multiply(out, 2.0 ** (1 - self.precision), out=out), smallest, out=out)
        if special:  # ±inf: the spacing just below 1 (frexp's exponent 0); NaN: the smallest
            out = np.where(np.isnan(a), smallest, np.where(np.isinf(a), 2.0**-self.precision, out))
        return out[()] if out.ndim == 0 else out  # a scalar's spacing is a NumPy scalar


FORMATS: dict[str, Format] = {
    "float32": Format("float32", np.dtype(np.float32), 24, -126, float(np.finfo(np.float32).max)),
    "bfloat16": Format(
        "bfloat16", np.dtype(ml_dtypes.bfloat16), 8, -126, float(ml_dtypes.finfo(ml_dtypes.bfloat16).max)
    ),
    "float16": Format("float16", np.dtype(np.float16), 11, -14, float(np.finfo(np.float16).max)),
    "float64": Format("float64", np.dtype(np.float64), 53, -1022, float(np.finfo(np.float64).max)),
}

#: The dtypes a candidate is checked in (float64 is the oracle's own working format).
TESTED_DTYPES = ("float32", "bfloat16", "float16")


def fmt(name: str) -> Format:
    try:
        return FORMATS[name]
    except KeyError:
        raise ValueError(f"unknown dtype {name!r}; expected one of {', '.join(TESTED_DTYPES)}") from None


def dtype_name(a: np.ndarray) -> str:
    """The format name of an array's dtype ('bfloat16' for ml_dtypes' type), or its NumPy name."""
    for f in FORMATS.values():
        if a.dtype == f.np_dtype:
            return f.name
    return str(a.dtype)

"""Format.ulp, the spacing every budget and ulp figure is measured in: 2^(⌊log2 |x|⌋ − p + 1), floored at the
subnormal spacing, for every float64 input (zeros, subnormals, the largest values, infinities and NaN)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from transformer_conformance.reference.formats import FORMATS, Format


def _spacing(f: Format, x: float) -> float:
    """The definition, one value at a time: frexp gives |x| = m·2^k with m in [0.5, 1)."""
    p, emin = f.precision, f.min_exponent
    if math.isnan(x):
        return 2.0 ** (emin + 1 - p)
    if math.isinf(x):
        return 2.0**-p  # frexp's exponent of an infinity is 0
    e = math.frexp(abs(x))[1] - 1 if x != 0 else emin
    return 2.0 ** (max(e, emin) - p + 1)


@pytest.mark.parametrize("name", sorted(FORMATS))
def test_ulp_is_the_spacing_of_every_float64(name: str) -> None:
    f = FORMATS[name]
    rng = np.random.default_rng(0)
    special = [0.0, -0.0, math.inf, -math.inf, math.nan, 5e-324, 2.0**-1022, 1.0, -3.0, 65504.0, 1e308, 2.0**-149]
    x = np.concatenate([rng.standard_normal(3000) * 10.0 ** rng.integers(-320, 308, 3000), special])
    got = f.ulp(x)
    want = np.array([_spacing(f, float(v)) for v in x])
    assert np.array_equal(got, want), x[got != want][:5]
    assert np.array_equal(f.ulp(x.reshape(-1, 2)[:, 0]), want.reshape(-1, 2)[:, 0])  # a strided view
    assert float(f.ulp(3.0)) == _spacing(f, 3.0)

"""The units of rounding in force for an operation under a candidate's declared conventions, and the
shared vocabulary of the budgets (``Inputs``, ``F64``)."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
from numpy.typing import NDArray

from transformer_conformance.adapters.contract import Conventions
from transformer_conformance.conformance.budgets.error_model import Rounding
from transformer_conformance.reference.formats import Format, fmt

F64 = NDArray[np.float64]
Inputs = Mapping[str, np.ndarray]


def rope_angle_ulps(rotary_dim: int, base: float) -> F64:
    """Units of the angle precision by which m·θ_i may be off, pair by pair.

    θ_i = base^(−2i/d) is computed as exp((2i/d)·ln base): the roundings of 2i/d, of ln base and of their
    product (½ ulp each) become relative errors of |ln(base)·2i/d|·ulp in θ_i; exp itself (1 ulp), the
    reciprocal or division (½), the product with the (exact, integer) position (½) and a margin (½) add 2.5.
    """
    frac = np.arange(0, rotary_dim, 2, dtype=np.float64) / rotary_dim
    return 1.5 * abs(np.log(base)) * frac + 2.5


def rounding(op: str, dtype: Format, conv: Conventions, grad: bool = False) -> Rounding:
    """The units in force for ``op`` (its backward when ``grad``) under the declared conventions."""

    def declared(entries: frozenset[str]) -> bool:
        return op in entries or (grad and f"{op}.vjp" in entries)

    u_work = min(dtype.unit_roundoff, fmt(conv.compute_dtype).unit_roundoff)
    u_mid = dtype.unit_roundoff if declared(conv.unfused) else u_work
    return Rounding(
        u_work=u_work,
        u_mid=u_mid,
        u_sum=dtype.unit_roundoff if declared(conv.low_precision_sums) else 0.0,
        ftz=conv.flush_subnormals,
        exp2=declared(conv.exp_via_exp2),
    )

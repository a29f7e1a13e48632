"""First-order rounding-error bounds: how far a correct low-precision candidate may be from the oracle.

The tolerance policy (docs/tolerance.md) in code. A candidate receives inputs already rounded to the
dtype under test, so the oracle evaluated on those same values is exact; every difference comes from
the roundings the candidate performs. Each behaviour restates its formula here in *tracked*
arithmetic: every value carries ``v`` (its exact float64 value), ``e`` (a bound on how far a correct
candidate's intermediate may be from it) and ``m`` (the magnitude of the terms that make it up, which
is what rounding errors scale with when terms cancel). The rules are the standard ones of rounding
error analysis (Higham, *Accuracy and Stability of Numerical Algorithms*, ch. 2–3):

* a product or sum rounded to unit roundoff u is off by at most u·|result|;
* errors already present propagate to first order: e(a·b) = |a|·e(b) + |b|·e(a), e(f(a)) = |f'(a)|·e(a);
* a sum of n terms accumulated in working precision u_w is off by at most λ·√n·u_w·Σ|terms|, the
  probabilistic bound of Higham & Mary (2019), failing with probability below n·2·exp(−λ²/2);
  λ = 8 keeps that under 1e-10 at n = 4096.

Where intermediates are stored (``Rounding.u_mid``) is what an adapter declares: in its working
precision when it fuses an operation, in the input dtype when it runs it as separate framework ops.
The final rounding to the output dtype is not part of ``e``: it adds exactly half an ulp of the output
(see :func:`allowed_error`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
from numpy.typing import NDArray

from transformer_conformance.reference.formats import Format

F64 = NDArray[np.float64]

LAMBDA = 8.0
#: Rounding units charged for one elementary function (exp, log, sqrt, tanh …) in working precision:
#: libm and vectorised framework kernels are within a few ulps, not correctly rounded.
TRANSCENDENTAL_ULPS = 4.0


#: Half the smallest subnormal spacing of each format, by its unit roundoff: a rounding that lands in
#: the subnormal range is off by up to this much in absolute terms, whatever the value (fl(x) = x(1 + δ) + η).
_ETA = {2.0**-53: 2.0**-1075, 2.0**-24: 2.0**-150, 2.0**-11: 2.0**-25, 2.0**-8: 2.0**-134}


#: Smallest normal number of each format, by its unit roundoff: vectorised elementary functions (SLEEF,
#: CUDA's fast paths) need not return subnormal results, so one may be off by this much absolutely.
_TINY = {2.0**-53: 2.0**-1022, 2.0**-24: 2.0**-126, 2.0**-11: 2.0**-14, 2.0**-8: 2.0**-126}

#: Roundings at the result's condition scale allowed for algebraically equal orderings of the same
#: formula (a fused kernel may compute r·γ·g − r³·x·Σ(…)/n where the oracle writes r·(γg − x̂·mean(…))).
REORDER_ULPS = 2.0


def eta(unit: float) -> float:
    return _ETA.get(unit, 0.0)


def tiny(unit: float) -> float:
    return _TINY.get(unit, 0.0)


@dataclass(frozen=True)
class Rounding:
    """The unit roundoffs in force while a candidate computes one operation."""

    u_work: float  # working (compute) precision: fused arithmetic
    u_mid: float  # precision intermediates are stored in (u_work when fused, the dtype's u when not)
    u_sum: float = 0.0  # precision partial sums are kept in (u_work unless declared lower); 0: u_work
    #: subnormal results are flushed to zero (XLA CPU): a stored value may be off by the smallest normal
    #: number of its format instead of half the subnormal spacing
    ftz: bool = False
    #: exp(t) is evaluated as exp2(t·log₂e): the scaled argument is rounded at u_work before the exponential
    exp2: bool = False

    def eta(self, unit: float) -> float:
        """Absolute error of one rounding at ``unit`` near zero."""
        return tiny(unit) if self.ftz else eta(unit)

    def gamma(self, n: int) -> float:
        """Bound on the relative error of an n-term accumulation: the deterministic (n − 1)·u, or the
        probabilistic λ·√n·u where that is smaller."""
        u = self.u_sum or self.u_work
        return min(max(n - 1, 0), LAMBDA * float(np.sqrt(max(n, 1)))) * u

    @property
    def eta_sum(self) -> float:
        """Underflow allowance of one product or partial sum in an accumulation."""
        return self.eta(self.u_sum or self.u_work)


@dataclass(frozen=True)
class Tracked:
    v: F64
    e: F64
    m: F64
    #: an input, exact (``e`` is all zero): the arithmetic skips the terms its error would carry
    exact: bool = field(default=False, kw_only=True)


def exact(x: np.ndarray) -> Tracked:
    """An input: already rounded to the dtype, so exact."""
    v = np.asarray(x, dtype=np.float64)
    return Tracked(v, np.zeros_like(v), np.abs(v), exact=True)


def integers(x: np.ndarray, unit: float) -> Tracked:
    """Integers (positions) converted to a float format of unit roundoff ``unit``: exact up to 1/unit (2^24 in
    float32), then rounded to the format's spacing, off by up to ``unit``·|x|."""
    v = np.asarray(x, dtype=np.float64)
    return Tracked(v, np.where(np.abs(v) > 1.0 / unit, unit * np.abs(v), 0.0), np.abs(v))


def _reusable(x: F64, y: F64 | float) -> bool:
    """Whether x ∘ y can be written into the float64 array x: y is a scalar or of x's shape."""
    if type(x) is not np.ndarray or x.dtype != np.float64:
        return False
    return not isinstance(y, np.ndarray) or y.ndim == 0 or x.shape == y.shape


def _iadd(x: F64, y: F64 | float) -> F64:
    """x + y, written into ``x`` — a temporary of this module, never a caller's array — where its shape holds
    the result (the size regimes' arrays are millions of elements: a fresh one per step costs more than the
    arithmetic)."""
    if _reusable(x, y):
        x += y
        return x
    return x + y


def _imul(x: F64, y: F64 | float) -> F64:
    """x·y, written into the temporary ``x`` where its shape holds the result (as :func:`_iadd`)."""
    if _reusable(x, y):
        x *= y
        return x
    return x * y


def _store(r: Rounding, v: F64, unit: float | None) -> F64:
    """The rounding of a result stored at ``unit`` (default: where intermediates are stored)."""
    u = r.u_mid if unit is None else unit
    return _iadd(_imul(np.abs(v), u), r.eta(u))


def _carried_sum(a: Tracked, b: Tracked, stored: F64) -> F64:
    """e(a) + e(b) + the result's rounding ``stored`` (a temporary), leaving out an exact operand's zeros."""
    for t in (a, b):
        if not t.exact:
            stored = _iadd(stored, t.e)
    return stored


def add(r: Rounding, a: Tracked, b: Tracked, unit: float | None = None) -> Tracked:
    v = a.v + b.v
    return Tracked(v, _carried_sum(a, b, _store(r, v, unit)), a.m + b.m)


def sub(r: Rounding, a: Tracked, b: Tracked, unit: float | None = None) -> Tracked:
    v = a.v - b.v
    return Tracked(v, _carried_sum(a, b, _store(r, v, unit)), a.m + b.m)


def mul(r: Rounding, a: Tracked, b: Tracked, unit: float | None = None) -> Tracked:
    v = a.v * b.v
    e = _store(r, v, unit)
    if not b.exact:
        e = _iadd(e, _imul(np.abs(a.v), b.e))
    if not a.exact:
        e = _iadd(e, _imul(np.abs(b.v), a.e))
    return Tracked(v, e, a.m * b.m)


def div(r: Rounding, a: Tracked, b: Tracked, unit: float | None = None) -> Tracked:
    """a / b: e(a)/|b| + |a|·e(b)/b² to first order, then stored (softmax's normalisation)."""
    v = a.v / b.v
    e = a.e / np.abs(b.v) + np.abs(a.v) * b.e / (b.v * b.v) + _store(r, v, unit)
    return Tracked(v, e, a.m / np.abs(b.v))


def store(r: Rounding, a: Tracked, unit: float) -> Tracked:
    """A computed value stored (rounded) at ``unit``: a kernel that keeps it in memory in that format."""
    return Tracked(a.v, a.e + _store(r, a.v, unit), a.m)


def const(r: Rounding, c: float) -> Tracked:
    """A Python scalar (ε, α) as the candidate holds it: rounded to working precision."""
    v = np.asarray(float(c))
    return Tracked(v, r.u_work * np.abs(v), np.abs(v))


def widest(a: Tracked, b: Tracked) -> Tracked:
    """One value computed in either of two orders: the larger error bound of the two (their values agree)."""
    return Tracked(a.v, np.maximum(a.e, b.e), np.maximum(a.m, b.m))


def neg(a: Tracked) -> Tracked:
    return Tracked(-a.v, a.e, a.m, exact=a.exact)


def transpose(a: Tracked) -> Tracked:
    return Tracked(a.v.T, a.e.T, a.m.T, exact=a.exact)


def as_rows(t: F64) -> F64:
    """(..., n) -> (N, n), rows of no elements included."""
    return t.reshape(math.prod(t.shape[:-1]), t.shape[-1])


def rows(a: Tracked) -> Tracked:
    """Flatten the leading axes: (..., n) -> (N, n)."""
    return Tracked(*(as_rows(t) for t in (a.v, a.e, a.m)), exact=a.exact)


def total(r: Rounding, a: Tracked, unit: float | None = None) -> Tracked:
    """Sum over the last axis (keepdims), accumulated in working precision."""
    n = a.v.shape[-1]
    v = np.sum(a.v, axis=-1, keepdims=True)
    e = np.sum(a.e, axis=-1, keepdims=True) + r.gamma(n) * np.sum(np.abs(a.v), axis=-1, keepdims=True) + n * r.eta_sum
    return Tracked(v, e + _store(r, v, unit), np.sum(a.m, axis=-1, keepdims=True))


@dataclass(frozen=True)
class ProductSums:
    """What :func:`matmul` bounds, over some of the contraction axis: a product whose terms come a block at a
    time (the tokens of a loss's ∂W) adds the blocks' ProductSums and bounds their total once (:func:`product`)."""

    v: F64  # a @ b
    carried: F64  # |a| @ e(b) + e(a) @ |b|
    absprod: F64  # |a| @ |b| (the accumulation's own roundings)
    m: F64
    n: int  # terms summed

    def __add__(self, other: ProductSums) -> ProductSums:
        return ProductSums(
            self.v + other.v,
            self.carried + other.carried,
            self.absprod + other.absprod,
            self.m + other.m,
            self.n + other.n,
        )


def product_sums(a: Tracked, b: Tracked) -> ProductSums:
    av, bv = np.abs(a.v), np.abs(b.v)
    return ProductSums(a.v @ b.v, av @ b.e + a.e @ bv, av @ bv, a.m @ b.m, a.v.shape[-1])


def product(r: Rounding, s: ProductSums, unit: float | None = None) -> Tracked:
    """The bound :func:`matmul` gives, from the blocks' sums."""
    e = s.carried + r.gamma(s.n) * s.absprod + 2 * s.n * r.eta_sum + _store(r, s.v, unit)
    return Tracked(s.v, e, s.m)


def matmul(r: Rounding, a: Tracked, b: Tracked, unit: float | None = None) -> Tracked:
    """a @ b accumulated in working precision, the result stored at ``unit``."""
    return product(r, product_sums(a, b), unit)


def mean(r: Rounding, a: Tracked, unit: float | None = None) -> Tracked:
    """Mean over the last axis (keepdims), accumulated in working precision."""
    n = a.v.shape[-1]
    v = np.mean(a.v, axis=-1, keepdims=True)
    e = np.mean(a.e, axis=-1, keepdims=True) + r.gamma(n) * np.mean(np.abs(a.v), axis=-1, keepdims=True) + r.eta_sum
    return Tracked(v, e + _store(r, v, unit), np.mean(a.m, axis=-1, keepdims=True))


@dataclass(frozen=True)
class RowSums:
    """What :func:`sum_rows` bounds, summed over some of the rows: a budget evaluated a block of rows at a
    time (:func:`row_blocks`) adds the blocks' RowSums and bounds their total once (:func:`summed`)."""

    v: F64  # Σ values
    common: F64  # Σ the error parts that may be common to many terms (a worst case)
    own: F64  # Σ the terms' own roundings
    own_sq: F64  # Σ their squares (the root-sum-square bound)
    absv: F64  # Σ |values| (the accumulation's own roundings)
    m: F64
    rows: int

    def __add__(self, other: RowSums) -> RowSums:
        return RowSums(
            self.v + other.v,
            self.common + other.common,
            self.own + other.own,
            self.own_sq + other.own_sq,
            self.absv + other.absv,
            self.m + other.m,
            self.rows + other.rows,
        )


def row_sums(a: Tracked, shared: F64 | None = None) -> RowSums:
    """The sums over every axis but the last of ``a`` (see :func:`sum_rows` for ``shared``)."""
    a2v, a2e, a2m = (as_rows(t) for t in (a.v, a.e, a.m))
    if shared is None:
        common, own, own_sq = a2e.sum(axis=0), np.zeros(a2v.shape[-1]), np.zeros(a2v.shape[-1])
    else:
        part = np.minimum(np.broadcast_to(shared, a.e.shape).reshape(a2e.shape), a2e)
        rest = a2e - part
        common, own, own_sq = part.sum(axis=0), rest.sum(axis=0), np.sum(rest * rest, axis=0)
    return RowSums(a2v.sum(axis=0), common, own, own_sq, np.abs(a2v).sum(axis=0), a2m.sum(axis=0), a2v.shape[0])


def summed(r: Rounding, s: RowSums, unit: float | None = None) -> Tracked:
    """The bound :func:`sum_rows` gives, from the rows' sums."""
    carried = s.common + np.minimum(s.own, LAMBDA * np.sqrt(s.own_sq))
    e = carried + r.gamma(s.rows) * s.absv + s.rows * r.eta_sum
    return Tracked(s.v, e + _store(r, s.v, unit), s.m)


def sum_rows(r: Rounding, a: Tracked, unit: float | None = None, shared: F64 | None = None) -> Tracked:
    """Sum over every axis but the last (a per-feature parameter's gradient).

    ``shared``: the part of each term's error bound that may be common to many terms (errors of working
    precision carried in from statistics and constants). The rest of ``a.e`` comes from roundings of the
    terms themselves — each product or stored intermediate rounded once, at its own value — which the
    probabilistic model of Higham & Mary (2019) treats as independent and mean-independent: by Hoeffding's
    inequality their sum exceeds λ·√(Σ eᵢ²) with probability below 2·exp(−λ²/2), where the worst case
    Σ eᵢ grows with the row count. The bound is the smaller of the two, so for at most λ² = 64 rows it is
    the worst case (docs/tolerance.md, "Long reductions"). Without ``shared`` every error is summed as a
    worst case.
    """
    return summed(r, row_sums(a, shared), unit)


#: Elements of one block when a row-wise budget is evaluated a block of rows at a time: the size regimes'
#: arrays are millions of float64 elements, and NumPy's passes over them — a fresh array each, most of them
#: page-faulted in — cost several times the arithmetic; a block of 2¹⁵ stays in cache.
BLOCK_ELEMENTS = 1 << 15


def row_blocks(rows: int, width: int) -> list[slice]:
    """Slices of ``rows`` rows of ``width`` elements, about BLOCK_ELEMENTS each (one slice for a small case)."""
    step = max(1, BLOCK_ELEMENTS // max(width, 1))
    return [slice(start, start + step) for start in range(0, max(rows, 1), step)]


def concat_rows(parts: list[Tracked], shape: tuple[int, ...]) -> Tracked:
    """Row blocks of one result, joined and shaped as ``shape``."""
    if len(parts) == 1:
        (t,) = parts
        return Tracked(t.v.reshape(shape), t.e.reshape(shape), t.m.reshape(shape), exact=t.exact)
    v, e, m = (np.concatenate([getattr(t, k) for t in parts]).reshape(shape) for k in "vem")
    return Tracked(v, e, m)


def func(
    r: Rounding,
    a: Tracked,
    f: Callable[[F64], F64],
    df: Callable[[F64], F64],
    unit: float | None = None,
    ulps: float = TRANSCENDENTAL_ULPS,
    spread: Callable[[F64, F64], F64] | None = None,
) -> Tracked:
    """An elementary function evaluated in working precision (``ulps`` units of it), then stored.

    Errors already in the argument propagate by |f'(a)|·e(a), or by ``spread(a, e)`` where first order
    is not enough (exp of an argument off by more than a few percent).
    """
    v = f(a.v)
    carried = _imul(np.abs(df(a.v)), a.e) if spread is None else spread(a.v, a.e)
    if np.may_share_memory(carried, a.e):  # a spread that hands back its argument: not a temporary to write into
        carried = np.array(carried, dtype=np.float64)
    e = _iadd(_iadd(_iadd(carried, _imul(np.abs(v), ulps * r.u_work)), tiny(r.u_work)), _store(r, v, unit))
    return Tracked(v, e, np.abs(v))


def trig(r: Rounding, a: Tracked, f: Callable[[F64], F64], df: Callable[[F64], F64]) -> Tracked:
    """sin or cos (``f``, derivative ``df``) of an angle off by up to e: |f'(a)|·e + e²/2 (Taylor's remainder,
    |f''| ≤ 1). First order alone is not enough at an extremum, where f' ≈ 0: a float32 angle near 77000 rad
    is off by ~0.004, which moves a cosine near 1 by 8·10⁻⁶, not by |sin|·e."""
    return func(r, a, f, df, spread=lambda v, e: np.abs(df(v)) * e + 0.5 * e * e)


def secant(f: Callable[[F64], F64], df: Callable[[F64], F64]) -> Callable[[F64, F64], F64]:
    """A ``spread`` for ``func``: how far f moves when its argument is off by up to e, as the larger of
    |f(a ± e) − f(a)| and the first-order |f'(a)|·e.

    First order alone is not enough where f grows or decays exponentially and e is not small against the
    scale on which it does (σ(a) or a·σ(a) for a ≪ 0, where a bfloat16 argument near −60 is off by 0.25:
    e^0.25 − 1 = 0.28, not 0.25). For a monotone f the secant term is exact; near an extremum inside
    [a − e, a + e] it misses only ½·|f''|·e², far below the rounding terms at the arguments' sizes.
    """

    def spread(v: F64, e: F64) -> F64:
        with np.errstate(over="ignore", invalid="ignore"):
            sec = np.maximum(np.abs(f(v + e) - f(v)), np.abs(f(v) - f(v - e)))
        return np.maximum(np.abs(df(v)) * e, np.where(np.isnan(sec), np.inf, sec))

    return spread


def exp(r: Rounding, a: Tracked, unit: float | None = None) -> Tracked:
    """exp, with the argument's error carried exactly: |e^(a+δ) − e^a| ≤ e^a·(e^|δ| − 1). Evaluated as
    exp2(a·log₂e) (``r.exp2``), the rounded product is off by u_work·|a| more, in natural-log units."""
    if r.exp2:
        a = Tracked(a.v, a.e + r.u_work * np.abs(a.v), a.m)
    return func(r, a, np.exp, np.exp, unit, spread=lambda v, e: np.exp(v) * np.expm1(e))


def result(r: Rounding, out: Tracked, flushed: float = 0.0) -> Tracked:
    """An operation's result before its final rounding: its error plus the reordering allowance (and
    ``flushed``, the smallest normal of the output format, where subnormal results are flushed to zero)."""
    return Tracked(out.v, out.e + REORDER_ULPS * r.u_work * out.m + flushed, out.m)


def allowed_error(out: Tracked, dtype: Format) -> F64:
    """Largest |candidate − oracle| a correct candidate can show: its accumulated error ``e`` plus the
    final rounding to the output dtype, half an ulp of the value it rounds. That value is within ``e`` of
    the exact one, so just below a power of two it may lie in the binade above, where the ulp is twice
    as large: the half ulp is taken at |v| + e (never below the one at v: the spacing grows with |x|)."""
    return _iadd(_imul(dtype.ulp(_iadd(np.abs(out.v), out.e)), 0.5), out.e)

"""Central finite differences in float64 for checking hand-written VJPs.

For a forward f and an upstream gradient g, the scalar L(a) = Σ g ⊙ f(a) has gradient VJP(g) with
respect to a. A VJP is checked two ways:

* directional: ⟨VJP, v⟩ ≈ (L(a + h·v) − L(a − h·v)) / (2h) for a few random directions v;
* elementwise (small inputs only): every ∂L/∂a_i by the same central difference along e_i.

Error model of the central difference, which the tolerances below are derived from
(h is the step, ℓ the length scale over which f changes, ε = 2⁻⁵² the float64 unit roundoff):

* truncation: (h²/6)·|D³L[v, v, v]| ≈ (h/ℓ)²/6 relative to the derivative. With h = 1e-6·max(1, max|a|)
  and ℓ ≳ 1e-2 that is ≲ 2e-9, so ``RTOL = 1e-7`` covers it with margin. The rounding of a ± h·v itself
  is ε·|a|/h ≤ 2.2e-10 relative, also inside RTOL.
* cancellation: each evaluation of L carries an absolute error ≲ c·ε·R, R = Σ|g ⊙ (intermediates of f)|
  (R defaults to Σ|g ⊙ f(a)|); dividing the difference by 2h gives ≲ c·ε·R/h. c bounds the flops in one
  output's dependency chain (a few dozen, including reductions over ≤ 64 features) plus the pairwise
  summation of L (log₂ n ε); ``ROUND_C = 64`` is a generous bound for the shapes used here.
* the VJP's own rounding: entries formed as differences of O(|g|) numbers (g·(p_t − 1) in softmax − onehot)
  have an absolute floor ``grad_floor`` (per element, broadcast to a's shape; default 0) that a caller passes
  where it applies.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from numpy.typing import NDArray

F64 = NDArray[np.float64]

EPS = float(np.finfo(np.float64).eps)
H_REL = 1e-6
RTOL = 1e-7
ROUND_C = 64.0
FULL_MAX = 40  # inputs up to this many elements also get the full elementwise gradient


def default_step(a: F64, h_rel: float = H_REL) -> float:
    """A step h = h_rel · max(1, max|a|): relative to the input's magnitude, never below h_rel."""
    return h_rel * max(1.0, float(np.max(np.abs(a))))


def central_directional(loss: Callable[[F64], float], a: F64, v: F64, h: float) -> float:
    """(L(a + h·v) − L(a − h·v)) / (2h)."""
    return (loss(a + h * v) - loss(a - h * v)) / (2.0 * h)


def central_gradient(loss: Callable[[F64], float], a: F64, h: float) -> F64:
    """The full gradient of L by central differences along each coordinate axis."""
    grad = np.empty_like(a)
    flat = grad.reshape(-1)
    for i in range(a.size):
        e = np.zeros(a.size)
        e[i] = 1.0
        flat[i] = central_directional(loss, a, e.reshape(a.shape), h)
    return grad


def assert_vjp(
    terms: Callable[[F64], F64],
    a: F64,
    vjp_a: F64,
    rng: np.random.Generator,
    *,
    h: float | None = None,
    round_scale: float | None = None,
    grad_floor: float | F64 = 0.0,
    n_directions: int = 3,
) -> None:
    """Assert ``vjp_a`` is the gradient of L(a) = Σ terms(a), where terms(a) = g ⊙ f(a).

    ``round_scale`` is R of the module docstring (the magnitude of the intermediates of L); ``h`` defaults
    to :func:`default_step`. Inputs of at most ``FULL_MAX`` elements are also checked elementwise.
    """
    assert vjp_a.shape == a.shape, f"VJP shape {vjp_a.shape} != input shape {a.shape}"
    assert np.all(np.isfinite(vjp_a)), "VJP is not finite"
    step = default_step(a) if h is None else h
    scale = float(np.sum(np.abs(terms(a)))) if round_scale is None else round_scale
    fd_atol = ROUND_C * EPS * scale / step
    floor = np.broadcast_to(np.asarray(grad_floor, dtype=np.float64), a.shape)

    def loss(b: F64) -> float:
        return float(np.sum(terms(b)))

    for k in range(n_directions):
        v = rng.standard_normal(a.shape)
        fd = central_directional(loss, a, v, step)
        an = float(np.sum(vjp_a * v))
        tol = RTOL * max(abs(an), abs(fd)) + fd_atol + float(np.sum(floor * np.abs(v)))
        assert abs(an - fd) <= tol, f"direction {k}: VJP·v = {an!r}, finite difference = {fd!r}, tol = {tol:.3g}"

    if a.size <= FULL_MAX:
        fd_grad = central_gradient(loss, a, step)
        tol_el = RTOL * np.maximum(np.abs(vjp_a), np.abs(fd_grad)) + fd_atol + floor
        bad = np.abs(vjp_a - fd_grad) > tol_el
        assert not np.any(bad), (
            f"elementwise mismatch at {np.argwhere(bad).tolist()}: VJP {vjp_a[bad]!r}, "
            f"finite difference {fd_grad[bad]!r}"
        )

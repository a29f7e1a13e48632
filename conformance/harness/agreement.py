"""Comparing two outputs of the same candidate that a property says agree (up to a known exact difference)."""

from __future__ import annotations

import numpy as np

from transformer_conformance.conformance.harness.compare import CheckFailure, Record
from transformer_conformance.reference.formats import Format


def agree(
    got: np.ndarray,
    got_allowed: np.ndarray,
    want: np.ndarray,
    want_allowed: np.ndarray,
    dtype: Format,
    record: Record,
    what: str,
    call: str,
    exact_gap: np.ndarray | None = None,
) -> None:
    """Fail unless |got − want − exact_gap| ≤ the sum of both outputs' budgets, element by element.

    ``exact_gap`` is the oracle's own difference of the two (zero for an exact property; non-zero where ε or
    the order of a float64 sum moves it); the budgets are those of each candidate output against its oracle.
    """
    gap = np.zeros_like(got) if exact_gap is None else exact_gap
    deviation = np.abs(got - want - gap)
    allowed = got_allowed + want_allowed
    record.examples += 1
    if deviation.size == 0:
        return
    used = deviation / np.where(allowed > 0, allowed, np.finfo(np.float64).tiny)
    i = tuple(int(j) for j in np.unravel_index(np.argmax(used), used.shape))
    ulp = dtype.ulp(np.maximum(np.abs(want), np.abs(got)))
    record.observe(float(np.max(deviation / ulp)), float(used[i]), f"{what} at {i}")
    if used[i] > 1.0:
        raise CheckFailure(
            f"{what}: got {got[i]:.8g} at {i}, should be {want[i] + gap[i]:.8g} ± {allowed[i]:.3g} "
            f"({deviation[i] / ulp[i]:.3g} ulp off) [{call}]"
        )

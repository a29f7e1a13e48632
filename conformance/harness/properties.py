"""Shared machinery of property checks: comparing two candidate outputs that the spec says agree."""

from __future__ import annotations

from typing import Any

import numpy as np

from transformer_conformance.adapters.contract import Adapter
from transformer_conformance.conformance.budgets import registry as budgets
from transformer_conformance.conformance.budgets.error_model import allowed_error
from transformer_conformance.conformance.harness import autocast, repro
from transformer_conformance.conformance.harness.compare import CheckFailure, Record, _validate, call_op, describe_call
from transformer_conformance.conformance.strategies.common import Case
from transformer_conformance.reference import oracle
from transformer_conformance.reference.formats import Format


def run(
    adapter: Adapter,
    op: str,
    inputs: dict[str, np.ndarray],
    params: dict[str, Any],
    dtype: Format,
    shape: tuple[int, ...],
) -> tuple[np.ndarray, np.ndarray, str]:
    """Call the candidate; return (its output as float64, the allowed error of each element, the call)."""
    call = describe_call(adapter, op, inputs, params)
    out = _validate(call_op(adapter, op, inputs, params, call), shape, dtype, f"{op} output", call)
    values = {k: v if v.dtype.kind in "iu" else v.astype(np.float64) for k, v in inputs.items()}
    allowed = allowed_error(budgets.FORWARD[op](values, params, adapter.conventions, dtype), dtype)
    y = out.astype(np.float64)
    if not np.isfinite(y).all():
        want = oracle.forward(op, values, params, adapter.conventions, dtype)
        i = tuple(int(j) for j in np.argwhere(~np.isfinite(y))[0])
        raise CheckFailure(f"{op} output: got {y[i]} at {i}, should be {want[i]:.6g} [{call}]")
    return y, allowed, call


def check_invariance(
    adapter: Adapter, op: str, case: Case, changed: dict[str, np.ndarray], dtype: Format, record: Record, how: str
) -> None:
    """The candidate's outputs on ``case`` and on ``changed`` inputs differ by no more than the oracle's
    own outputs do (zero for an exact invariance, non-zero only through ε) plus both rounding budgets."""
    values = case.values()
    changed64 = {k: v if v.dtype.kind in "iu" else v.astype(np.float64) for k, v in changed.items()}
    want1 = oracle.forward(op, values, case.params, adapter.conventions, dtype)
    want2 = oracle.forward(op, changed64, case.params, adapter.conventions, dtype)
    outs: list[np.ndarray | None] = [None, None]
    try:
        y1, a1, call1 = run(adapter, op, case.inputs, case.params, dtype, want1.shape)
        outs[0] = y1
        y2, a2, _ = run(adapter, op, changed, case.params, dtype, want1.shape)
        outs[1] = y2
        scale = np.maximum(np.abs(want1), budgets.FORWARD[op](values, case.params, adapter.conventions, dtype).m)
        _compare_invariance(y1, a1, y2, a2, want2 - want1, scale, dtype, record, op, how, call1)
    except CheckFailure as failure:
        calls = [
            repro.call("forward", case.inputs, case.params, want1, None if outs[0] is None else dtype.round(outs[0])),
            repro.call("forward", changed, case.params, want2, None if outs[1] is None else dtype.round(outs[1])),
        ]
        repro.store(record, op, autocast.label(dtype), calls, relation="difference", failure=failure)
        raise


def _compare_invariance(
    y1: np.ndarray,
    a1: np.ndarray,
    y2: np.ndarray,
    a2: np.ndarray,
    exact_gap: np.ndarray,
    scale: np.ndarray,
    dtype: Format,
    record: Record,
    op: str,
    how: str,
    call1: str,
) -> None:
    deviation = np.abs((y2 - y1) - exact_gap)  # zero for an exact invariance; ε makes the oracle's gap non-zero
    allowed = a1 + a2
    record.examples += 1
    used = deviation / allowed
    i = tuple(int(j) for j in np.unravel_index(np.argmax(used), used.shape))
    ulps = deviation / dtype.ulp(scale)  # at each element's condition scale, as for agreement checks
    ulp = dtype.ulp(scale[i])
    record.observe(float(np.max(ulps)), float(used[i]), f"{op} output at {i} under {how}")
    if used[i] > 1.0:
        moved = f" moved by the exact {exact_gap[i]:.3g}" if exact_gap[i] else ""
        failure = CheckFailure(
            f"{op} under {how}: got {y2[i]:.8g} at {i}, should be {y1[i] + exact_gap[i]:.8g} ± {allowed[i]:.3g} "
            f"(the unchanged input's output {y1[i]:.8g}{moved}; "
            f"{deviation[i] / ulp:.3g} ulp off, budget {allowed[i] / ulp:.3g} ulp) [{call1}]"
        )
        failure.share = float(used[i])
        raise failure

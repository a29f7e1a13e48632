"""Running a family's size-regime cases (conformance/strategies/sizes.py) through the agreement checks."""

from __future__ import annotations

from collections.abc import Sequence

from transformer_conformance.adapters.contract import Adapter
from transformer_conformance.conformance.harness.compare import Record, check_forward, check_vjp, several_cases
from transformer_conformance.conformance.strategies.common import Case, fill
from transformer_conformance.reference import oracle
from transformer_conformance.reference.formats import Format


def forward(adapter: Adapter, op: str, cases: Sequence[Case], dtype: Format, record: Record) -> None:
    """Each regime's forward agrees with the oracle within its budget."""
    for case in cases:
        with several_cases(str(case.about.get("regime", ""))):
            check_forward(adapter, op, case, dtype, record)


def gradient(adapter: Adapter, op: str, cases: Sequence[Case], dtype: Format, record: Record) -> None:
    """Each regime's VJP agrees with the oracle within its budget, for a unit-scale random cotangent."""
    for case in cases:
        shape = oracle.forward(op, case.values(), case.params, adapter.conventions, dtype).shape
        cot = fill(dtype, shape, 1.0, int(case.about.get("seed", 0)) + 7)
        with several_cases(str(case.about.get("regime", ""))):
            check_vjp(adapter, op, case, cot, dtype, record)

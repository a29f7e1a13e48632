"""The declaration lint: is each convention an adapter declares, that loosens a budget, needed?

A declaration such as ``unfused rms_norm.vjp`` or ``low_precision_sums`` says where the candidate rounds and
widens the budget accordingly (docs/tolerance.md). A declaration that is not needed — the candidate stays
within the tighter budget computed without it — disarms part of the check for nothing: a later defect of the
kind the declaration excuses would pass. For every example it judges, the harness also measures the share of
the budget *without* each loosening declaration that applies to the operation (``record.extra["without"]``,
the largest over the examples); the report lists the declarations no check needed (docs/report.md,
"Declarations not needed").
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import numpy as np

from transformer_conformance.adapters.contract import Conventions
from transformer_conformance.conformance.budgets.error_model import Tracked, allowed_error
from transformer_conformance.reference.formats import Format

#: the declarations, entries of a set field of Conventions, that loosen the budgets of the operation they name
SET_FIELDS = ("unfused", "low_precision_sums", "grad_in_forward", "exp_via_exp2")
#: operations whose budgets read ``norm_rounding`` and ``variance``
NORM_OPS = frozenset({"rms_norm", "layer_norm", "qk_norm_attention", "block"})


def loosening(conv: Conventions, op: str, grad: bool) -> list[tuple[str, Conventions]]:
    """Each declaration of ``conv`` that loosens ``op``'s budget (its backward's when ``grad``), named as
    the report names it, with the conventions less that one declaration."""
    names = {op, f"{op}.vjp"} if grad else {op}
    out: list[tuple[str, Conventions]] = []
    for name in SET_FIELDS:
        declared: frozenset[str] = getattr(conv, name)
        for entry in sorted(declared & names):
            less: dict[str, Any] = {name: declared - {entry}}
            out.append((f"{name} {entry}", dataclasses.replace(conv, **less)))
    default = Conventions()
    if op in NORM_OPS and conv.norm_rounding != default.norm_rounding:
        out.append((f"norm_rounding {conv.norm_rounding} ({op})", dataclasses.replace(conv, norm_rounding="single")))
    if op in NORM_OPS and conv.variance != default.variance:
        out.append((f"variance {conv.variance} ({op})", dataclasses.replace(conv, variance=default.variance)))
    if conv.flush_subnormals:
        out.append((f"flush_subnormals ({op})", dataclasses.replace(conv, flush_subnormals=False)))
    return out


def share(got: np.ndarray, expected: np.ndarray, budget: Tracked, dtype: Format) -> float:
    """The largest |got − expected| over its allowed error (identical values, infinities included, use 0)."""
    g, e = got.astype(np.float64), np.asarray(expected, dtype=np.float64)
    with np.errstate(invalid="ignore"):
        err = np.where(g == e, 0.0, np.abs(g - e))
    err = np.where(np.isnan(err), np.inf, err)
    if err.size == 0:
        return 0.0
    return float(np.max(err / allowed_error(budget, dtype)))


def observe(
    record_extra: dict[str, Any],
    conv: Conventions,
    op: str,
    grad: bool,
    budget_of: Any,
    got: Mapping[str, np.ndarray],
    expected: Mapping[str, np.ndarray],
    dtype: Format,
) -> None:
    """Record, per loosening declaration, the largest share of the budget without it (``budget_of(conv)``:
    the operation's budgets, a mapping of output name to Tracked)."""
    without = record_extra.setdefault("without", {})
    for name, stripped in loosening(conv, op, grad):
        budgets = budget_of(stripped)
        used = max(share(got[k], expected[k], budgets[k], dtype) for k in got)
        without[name] = max(used, without.get(name, 0.0))

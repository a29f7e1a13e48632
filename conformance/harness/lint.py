"""The declaration lint: is each convention an adapter declares, that loosens a budget, needed?

A declaration such as ``unfused rms_norm.vjp`` or ``low_precision_sums`` says where the candidate rounds and
widens the budget accordingly (docs/tolerance.md). A declaration that is not needed — the candidate stays
within the tighter budget computed without it — disarms part of the check for nothing: a later defect of the
kind the declaration excuses would pass. For every example it judges, the harness also measures the share of
the budget *without* each loosening declaration that applies to the operation (``record.extra["without"]``,
the largest over the examples); the report lists the declarations no check needed (docs/report.md,
"Declarations not needed").

Two shortcuts keep the lint from re-evaluating budgets for nothing (over the size regimes' millions of
elements each evaluation costs as much as the check's own): a declaration read only through the units of
rounding (``unfused``, ``low_precision_sums``, ``exp_via_exp2``) that leaves the operation's units unchanged
at this dtype (``unfused`` or ``low_precision_sums`` in float32, whose input dtype is the working
precision) leaves its budget unchanged, so its share is the check's own; and once an example has needed a
declaration (a share over 1) the check's later examples do not measure it again.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import numpy as np

from transformer_conformance.adapters.contract import Conventions
from transformer_conformance.conformance.budgets.error_model import Rounding, Tracked, allowed_error
from transformer_conformance.conformance.budgets.rounding import rounding
from transformer_conformance.reference.formats import Format

#: the declarations, entries of a set field of Conventions, that loosen the budgets of the operation they name
SET_FIELDS = ("unfused", "low_precision_sums", "grad_in_forward", "exp_via_exp2")
#: the declarations the budgets read only through ``rounding()``, the units in force for the operation named
ROUNDING_ONLY = frozenset({"unfused", "low_precision_sums", "exp_via_exp2"})
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


def _units(r: Rounding) -> tuple[float, float, float, bool, bool]:
    """What the budgets read of a Rounding (an unset ``u_sum`` is ``u_work``)."""
    return r.u_work, r.u_mid, r.u_sum or r.u_work, r.ftz, r.exp2


def same_budget(conv: Conventions, stripped: Conventions, op: str, dtype: Format) -> bool:
    """Whether ``stripped`` (``conv`` less one declaration) gives ``op`` the same budgets at ``dtype``: it
    differs only in declarations read through ``rounding()``, and the units for ``op``, forward and
    backward, are the same."""
    if dataclasses.replace(stripped, **{f: getattr(conv, f) for f in ROUNDING_ONLY}) != conv:
        return False
    return all(
        _units(rounding(op, dtype, conv, grad=g)) == _units(rounding(op, dtype, stripped, grad=g))
        for g in (False, True)
    )


def observe(
    record_extra: dict[str, Any],
    conv: Conventions,
    op: str,
    grad: bool,
    budget_of: Any,
    got: Mapping[str, np.ndarray],
    expected: Mapping[str, np.ndarray],
    dtype: Format,
    budgets: Mapping[str, Tracked],
) -> None:
    """Record, per loosening declaration, the largest share of the budget without it (``budget_of(conv)``:
    the operation's budgets, a mapping of output name to Tracked; ``budgets``: those the check used), or
    the first share over 1 (the declaration is needed: later examples do not measure it)."""
    without = record_extra.setdefault("without", {})
    for name, stripped in loosening(conv, op, grad):
        if without.get(name, 0.0) > 1.0:
            continue
        tighter = budgets if same_budget(conv, stripped, op, dtype) else budget_of(stripped)
        used = max(share(got[k], expected[k], tighter[k], dtype) for k in got)
        without[name] = max(used, without.get(name, 0.0))

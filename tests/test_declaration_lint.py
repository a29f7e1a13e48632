"""The declaration lint: a declared convention the candidate does not need is reported (report.json's adapter
``declarations``, report.md's "Declarations not needed")."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from transformer_conformance.adapters.contract import Conventions
from transformer_conformance.conformance.budgets.error_model import Tracked, exact
from transformer_conformance.conformance.harness import lint
from transformer_conformance.conformance.harness.compare import Record, check_vjp
from transformer_conformance.conformance.strategies.common import Case, fill
from transformer_conformance.reference.formats import fmt
from transformer_conformance.reports.markdown import render_markdown
from transformer_conformance.reports.writer import declaration_lint


def test_loosening_names_each_declaration_of_the_operation() -> None:
    conv = Conventions(
        norm_rounding="before_weight",
        unfused=frozenset({"rms_norm.vjp", "swiglu_mlp"}),
        low_precision_sums=frozenset({"rms_norm"}),
    )
    fwd = dict(lint.loosening(conv, "rms_norm", grad=False))
    assert set(fwd) == {"low_precision_sums rms_norm", "norm_rounding before_weight (rms_norm)"}
    grad = dict(lint.loosening(conv, "rms_norm", grad=True))
    assert "unfused rms_norm.vjp" in grad
    assert grad["unfused rms_norm.vjp"].unfused == frozenset({"swiglu_mlp"})
    assert lint.loosening(Conventions(), "rms_norm", grad=True) == []


@settings(max_examples=1, database=None, deadline=None)
@given(st.none())  # the harness steers Hypothesis (target()), so it runs inside a test of it
def test_an_unneeded_declaration_is_reported(_: None) -> None:
    torch_adapter = pytest.importorskip("transformer_conformance.adapters.torch.adapter")
    adapter = torch_adapter.TorchAdapter()
    # F.rms_norm's backward does not store its intermediates in float16: the declaration is not needed
    adapter.conventions = dataclasses.replace(adapter.conventions, unfused=frozenset({"rms_norm.vjp"}))
    f16 = fmt("float16")
    case = Case({"x": fill(f16, (3, 40), 1.0, 0), "weight": fill(f16, (40,), 0.5, 1, offset=1.0)}, {"eps": 1e-6})
    record = Record("rms_norm/gradient", "rms_norm", "", "")
    check_vjp(adapter, "rms_norm", case, fill(f16, (3, 40), 1.0, 2), f16, record)
    used = record.extra["without"]["unfused rms_norm.vjp"]
    assert 0 <= used <= 1
    checks = [
        {
            "adapter": adapter.name,
            "check": "rms_norm/gradient",
            "dtype": "float16",
            "status": "passed",
            "extra": record.extra,
        }
    ]
    (entry,) = declaration_lint(checks, adapter.name)
    assert entry == {
        "declaration": "unfused rms_norm.vjp",
        "needed": False,
        "worst_share": used,
        "checks": ["rms_norm/gradient float16"],
    }


def test_needed_when_over_the_tighter_budget_or_not_passing() -> None:
    def c(status: str, used: float, dtype: str = "float16") -> dict[str, object]:
        return {"adapter": "a", "check": "x/y", "dtype": dtype, "status": status, "extra": {"without": {"d": used}}}

    assert declaration_lint([c("passed", 0.5), c("passed", 1.5, "bfloat16")], "a")[0]["needed"] is True
    assert declaration_lint([c("passed", 0.5), c("failed", 0.2, "bfloat16")], "a")[0]["needed"] is True
    assert declaration_lint([c("passed", 0.5), c("passed", 0.9, "bfloat16")], "a")[0]["needed"] is False
    assert declaration_lint([c("passed", 0.5)], "b") == []


def test_report_md_section() -> None:
    report = {
        "verdict": "conformant",
        "summary": {"passed": 1},
        "suite_version": "0",
        "schema_version": 2,
        "hypothesis": {"profile": "ci", "seed": None},
        "created": "2026-01-01T00:00:00+00:00",
        "duration_s": 1.0,
        "checks": [],
        "adapters": [
            {
                "name": "mykernels",
                "conventions": {},
                "environment": {},
                "declarations": [
                    {
                        "declaration": "unfused rms_norm.vjp",
                        "needed": False,
                        "worst_share": 0.31,
                        "checks": ["rms_norm/gradient float16"],
                    },
                    {"declaration": "unfused swiglu_mlp", "needed": True, "worst_share": 4.0, "checks": []},
                ],
            }
        ],
        "expectations": {"files": [], "entries": []},
    }
    md = render_markdown(report)
    assert "## Declarations not needed" in md
    assert "| mykernels | `unfused rms_norm.vjp` | 31% | `rms_norm/gradient float16` |" in md
    assert "unfused swiglu_mlp`" not in md.split("## Declarations not needed")[1].split("##")[0]
    assert np.isfinite(0.31)


def test_a_declaration_that_changes_no_unit_reuses_the_checks_budget() -> None:
    conv = Conventions(
        unfused=frozenset({"layer_norm.vjp"}),
        low_precision_sums=frozenset({"layer_norm.vjp"}),
        grad_in_forward=frozenset({"cross_entropy"}),
    )
    stripped = dict(lint.loosening(conv, "layer_norm", grad=True))
    for name in ("unfused layer_norm.vjp", "low_precision_sums layer_norm.vjp"):
        # float32 is the working precision: storing or summing in the input dtype changes nothing
        assert lint.same_budget(conv, stripped[name], "layer_norm", fmt("float32"))
        assert not lint.same_budget(conv, stripped[name], "layer_norm", fmt("bfloat16"))
    (name, less), *_ = lint.loosening(conv, "cross_entropy", grad=True)
    assert name == "grad_in_forward cross_entropy"  # read by the budget itself, not through its units
    assert not lint.same_budget(conv, less, "cross_entropy", fmt("float32"))


def test_a_needed_declaration_is_not_measured_again() -> None:
    conv = Conventions(unfused=frozenset({"rms_norm"}))
    f16 = fmt("float16")
    got, expected = {"y": np.array([1.0, 2.0])}, {"y": np.array([1.0, 2.5])}
    budget = {"y": exact(np.zeros(2))}  # no error allowed: any difference is over 1
    calls: list[Conventions] = []

    def budget_of(c: Conventions) -> dict[str, Tracked]:
        calls.append(c)
        return budget

    extra: dict[str, object] = {}
    lint.observe(extra, conv, "rms_norm", False, budget_of, got, expected, f16, budget)
    first = extra["without"]["unfused rms_norm"]  # type: ignore[index]
    assert first > 1 and len(calls) == 1
    lint.observe(extra, conv, "rms_norm", False, budget_of, got, {"y": np.array([1.0, 9.0])}, f16, budget)
    assert len(calls) == 1 and extra["without"]["unfused rms_norm"] == first  # type: ignore[index]

"""The declaration lint: a declared convention the candidate does not need is reported (report.json's adapter
``declarations``, report.md's "Declarations not needed")."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from transformer_conformance.adapters.contract import Conventions
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

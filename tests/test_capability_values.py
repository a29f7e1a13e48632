"""A capability may declare part of an operation's named choices (the RoPE scaling rule, the MLP
activation): the checks draw only what it declares, a check needing only undeclared values is
unsupported, and the report names what was left out. Without the declaration the same candidate fails."""

from __future__ import annotations

import pytest

from tests.choice_adapters import NarrowDeclared
from tests.conformance_run import Run, run_suite
from transformer_conformance.adapters.contract import CHOICES, Capability, ContractError, validate
from transformer_conformance.reports import schema
from transformer_conformance.reports.markdown import render_markdown


def test_declared_keeps_the_contract_order() -> None:
    cap = Capability(values={"scaling.type": frozenset({"yarn", "linear"})})
    assert cap.declared("scaling.type", CHOICES["rope_scaled"]["scaling.type"]) == ("linear", "yarn")
    assert cap.declared("activation", ("silu", "relu")) == ("silu", "relu")  # not narrowed: every value


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"activation": frozenset({"silu"})}, "narrows unknown choice 'activation'; rope_scaled has scaling.type"),
        ({"scaling.type": frozenset({"ntk", "rope2"})}, "names unknown value(s) rope2"),
        ({"scaling.type": frozenset()}, "must be a non-empty set of values"),
        ({"scaling.type": "linear"}, "must be a non-empty set of values"),
    ],
)
def test_malformed_values_are_one_line_errors(values: dict, message: str) -> None:
    adapter = NarrowDeclared()
    adapter.capabilities = {"rope_scaled": Capability(values=values)}
    with pytest.raises(ContractError, match=r"^adapter 'x': capabilities") as e:
        validate(adapter, "adapter 'x'")
    assert message in str(e.value) and "\n" not in str(e.value)


def test_values_of_an_operation_without_choices_rejected() -> None:
    adapter = NarrowDeclared()
    adapter.capabilities = {"rms_norm": Capability(values={"activation": frozenset({"silu"})})}
    with pytest.raises(ContractError, match="rms_norm has no named choice"):
        validate(adapter, "adapter 'x'")


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Run:
    return run_suite(
        tmp_path_factory.mktemp("choices"),
        "--adapter=tests.choice_adapters:NarrowDeclared,tests.choice_adapters:NarrowUndeclared",
        "--behaviour=rope_scaling,mlp,attention",
        "--dtype=float32",
        "-n",
        "2",
    )


def test_declared_part_passes(run: Run) -> None:
    """The candidate passes where it declares only what it implements: no check drew NTK, GeGLU-erf or a
    soft-cap."""
    checks = run.checks(adapter="narrow-declared")
    assert checks and not [c for c in checks if c["status"] in ("failed", "error")], [
        (c["check"], c.get("message")) for c in checks if c["status"] in ("failed", "error")
    ]
    assert {c["check"] for c in checks if c["status"] == "passed"} >= {
        "rope_scaled/forward",
        "rope_scaled/gradient",
        "rope_scaled/bands",
        "rope_scaled/dynamic-forward",
        "glu/forward",
        "glu/gradient",
        "attention/forward",
        "attention/gradient",
        "attention/gqa-grouping",
    }


def test_check_of_an_undeclared_value_is_unsupported(run: Run) -> None:
    (c,) = run.checks(adapter="narrow-declared", check="rope_scaled/ntk-base")
    assert c["status"] == "unsupported"
    assert c["message"] == "narrow-declared does not declare rope_scaled with scaling.type ntk"
    (s,) = run.checks(adapter="narrow-declared", check="attention/softcap-bound")
    assert s["status"] == "unsupported"
    assert s["message"] == "narrow-declared does not declare attention with softcap tanh"


def test_report_names_what_was_left_out(run: Run) -> None:
    (c,) = run.checks(adapter="narrow-declared", check="rope_scaled/forward")
    assert c["extra"]["not_declared"] == {"scaling.type": ["ntk"]}
    (g,) = run.checks(adapter="narrow-declared", check="glu/gradient")
    assert g["extra"]["not_declared"] == {"activation": ["gelu_erf"]}
    (f,) = run.checks(adapter="narrow-declared", check="attention/forward")
    assert f["extra"]["not_declared"] == {"softcap": ["tanh"]}
    (a,) = [a for a in run.report["adapters"] if a["name"] == "narrow-declared"]
    assert a["capabilities"]["rope_scaled"]["values"] == {
        "scaling.type": ["dynamic", "linear", "llama3", "longrope", "yarn"]
    }
    md = render_markdown(run.report)
    assert "narrow-declared · `rope_scaled/forward` · float32 — scaling.type ntk not declared" in md
    assert "declares only: rope_scaled scaling.type dynamic, linear, llama3, longrope, yarn" in md


def test_undeclared_part_fails(run: Run) -> None:
    """Declared with every value, the same candidate fails the checks that draw NTK, GeGLU-erf and a cap."""
    bad = {c["check"] for c in run.checks(adapter="narrow-undeclared") if c["status"] in ("failed", "error")}
    assert {"rope_scaled/forward", "rope_scaled/ntk-base", "glu/forward", "glu/gradient"} <= bad
    assert {"attention/forward", "attention/gradient", "attention/softcap-bound"} <= bad
    assert not run.checks(adapter="narrow-undeclared", status="unsupported", check="rope_scaled/ntk-base")


def test_report_json_keeps_the_schema(run: Run) -> None:
    assert schema.validate(run.report) == []

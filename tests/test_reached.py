"""The default ``ci`` run reaches every listed regime and every parameter beyond its default
(conformance/harness/regimes.py; docs/coverage.md, "Parameters and regimes reached").

One run of the numpy adapter in float16 and float32 (the ``ci`` profile is derandomised: these are the examples the
default run draws in those dtypes), its report read for ``reached``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.conformance_run import Run, run_suite
from transformer_conformance.adapters.contract import OPS, Capability
from transformer_conformance.conformance.harness import reach, regimes
from transformer_conformance.reference.formats import fmt
from transformer_conformance.reports.reached import gaps, markdown

#: the run: the ci profile (the default); the forward checks, which draw what the gradient and property checks draw,
#: and the checks of the integer rules (hidden widths, parameter counts), the z-loss values, the table lookup and the
#: frequency bands of YaRN and Llama 3, and sinks of −∞
RUN_ARGS = (
    "--adapter=numpy",
    "--dtype=float16",
    "--dtype=float32",
    "-k",
    "forward or hidden_width or param_count or z_loss_value or softcap_value or learned_lookup or bands "
    "or minus_infinity",
)


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Run:
    result = run_suite(tmp_path_factory.mktemp("reached"), *RUN_ARGS)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    return result


@pytest.fixture(scope="module")
def reached(run: Run) -> dict[str, Any]:
    got: dict[str, Any] = run.report["reached"]["numpy"]
    return got


def test_every_operation_is_called(reached: dict[str, Any]) -> None:
    assert sorted(reached) == sorted(OPS)


def test_every_parameter_is_drawn_beyond_its_default(reached: dict[str, Any]) -> None:
    missing = [
        f"{op}: {p} (values {reached[op]['params'].get(p, {}).get('values')})"
        for op, spec in OPS.items()
        for p in spec.params
        if not reached[op]["params"].get(p, {}).get("varied")
    ]
    scaling = reached["rope_scaled"]["params"]
    missing += [
        f"rope_scaled: scaling.{k}" for k in regimes.SCALING_KEYS if not scaling.get(f"scaling.{k}", {}).get("varied")
    ]
    assert not missing, "parameters only ever at their default or None:\n" + "\n".join(missing)


def test_every_listed_regime_is_reached(reached: dict[str, Any]) -> None:
    missing = [
        f"{op}: {r.name}"
        for op in OPS
        for r in regimes.for_op(op)
        if r.drawn and not reached[op]["regimes"][r.name]["counts"]
    ]
    assert not missing, "regimes never reached:\n" + "\n".join(missing)
    assert not gaps({"numpy": reached})


def test_report_shows_it(run: Run) -> None:
    md = (run.report_dir / "report.md").read_text()
    assert "## Parameters and regimes reached" in md
    assert "Every parameter was drawn beyond its default and every listed regime was reached." in md
    assert "| attention |" in md and "scores beyond a mask fill:" in md
    assert 'id="reached"' in (run.report_dir / "report.html").read_text()
    jsonschema = pytest.importorskip("jsonschema")
    from transformer_conformance.reports.schema import load_schema

    jsonschema.validate(run.report, load_schema())


def test_regimes_are_well_formed() -> None:
    names: dict[str, set[str]] = {}
    for r in regimes.REGIMES:
        assert r.reason.strip() and set(r.ops) <= set(OPS), r.name
        for op in r.ops:
            assert r.name not in names.setdefault(op, set()), f"{op} lists {r.name} twice"
            names[op].add(r.name)


def test_a_gap_is_reported(tmp_path: Path) -> None:
    """A parameter left at its default and an unreached regime are gaps, shown with ⚠."""
    reach.drain()
    x = np.ones((2, 3), dtype=np.float16)
    reach.note("rms_norm", {"x": x, "weight": np.ones(3, dtype=np.float16)}, {"eps": None})
    total: dict[str, Any] = {}
    reach.merge(total, reach.drain())
    summary = {"numpy": reach.summary(total)}
    found = gaps(summary)
    assert "numpy rms_norm: parameter eps" in found
    assert "numpy rms_norm: regime input near overflow" in found
    text = "\n".join(markdown({"reached": summary}))
    assert "⚠ default only" in text and "⚠ not reached" in text


def test_a_choice_declared_in_part_is_not_a_gap() -> None:
    """A kernel without soft-capping declares softcap "none": its softcap left at None is what it declares, and the
    saturated soft-cap regime is not drawn for it (not a gap); an adapter declaring both still shows the gaps."""
    reach.drain()
    q = np.ones((1, 1, 2, 4), dtype=np.float32)
    reach.note("attention", {"q": q, "k": q, "v": q}, {"causal": False, "softcap": None, "scale": None})
    total: dict[str, Any] = {}
    reach.merge(total, reach.drain())
    capped = {"attention": Capability(values={"softcap": frozenset({"none"})})}
    narrow = reach.summary(total, capped)["attention"]
    assert narrow["params"]["softcap"]["declared"] == ["none"]
    assert narrow["regimes"]["soft-cap saturated"]["drawn"] is False
    assert narrow["regimes"]["soft-cap saturated"]["reason"] == "the adapter does not declare softcap tanh"
    found = gaps({"k": {"attention": narrow}})
    assert not [g for g in found if "softcap" in g or "soft-cap" in g], found
    assert "softcap: None (declares none)" in "\n".join(markdown({"reached": {"k": {"attention": narrow}}}))
    full = gaps({"k": reach.summary(total, {"attention": Capability()})})
    assert {"k attention: parameter softcap", "k attention: regime soft-cap saturated"} <= set(full)


def test_predicates_on_the_edges() -> None:
    f16, f32 = fmt("float16"), fmt("float32")
    assert regimes.near_overflow(np.array([256.0]), f16) and not regimes.near_overflow(np.array([255.0]), f16)
    assert regimes.coarse_grid(np.array([1024.0]), f16) and not regimes.coarse_grid(np.array([1023.0]), f16)
    assert regimes.offset_rows(np.array([[1500.0, 1501.0, 1499.0]]))
    assert not regimes.offset_rows(np.array([[3.0, 3.0, 3.0]]))  # no spread left: not this regime
    q = np.full((1, 1, 1, 1), 512.0)
    calls = {"q": q, "k": q, "v": q}
    assert "scores beyond a mask fill" in regimes.reached("attention", calls, {"causal": True, "scale": None}, f32)
    pos = {"x": np.zeros((1, 1, 2)), "positions": np.array([2**17], dtype=np.int64)}
    assert "positions ≥ 2^17 (beyond a 128k context)" in regimes.reached("rope", pos, {}, f32)


def test_planned_calls_and_their_values_are_counted() -> None:
    """The calls made under a shape plan, and of them those whose structural values the plan stated (an operation
    declared compiles="per_value"), are counted apart, and the report says which plan chose them."""
    from transformer_conformance.reports.reached import calls_text

    reach.drain()
    q = np.ones((1, 1, 2, 4), dtype=np.float32)
    params = {"causal": True, "softcap": None, "scale": None}
    reach.note("attention", {"q": q, "k": q, "v": q}, params)
    reach.note("attention", {"q": q, "k": q, "v": q}, params, planned=True)
    reach.note("attention", {"q": q, "k": q, "v": q}, params, planned=True, planned_values=True)
    total: dict[str, Any] = {}
    reach.merge(total, reach.drain())
    e = reach.summary(total, {"attention": Capability(compiles="per_value")})["attention"]
    assert (e["calls"], e["planned_calls"], e["planned_value_calls"]) == (3, 2, 1)
    assert calls_text(e) == "3 · 1 shape, planned with their values"
    shapes_only = reach.summary(total, {"attention": Capability()})["attention"] | {"planned_value_calls": 0}
    assert calls_text(shapes_only) == "3 · 1 shape, planned"

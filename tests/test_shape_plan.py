"""Shape plans (conformance/strategies/plan.py): without a plan the strategies draw exactly what they drew before
(the ``ci`` sample of an eager candidate does not move); under one, every case strategy draws its shapes from the
few it states, and a run of an operation declared ``compiles="per_shape"`` builds each program once, as the report
says (``reached``: shapes, planned calls, programs built)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conformance_run import run_suite
from transformer_conformance.adapters.contract import SOFTCAPS, Capability
from transformer_conformance.adapters.numpy.adapter import NumpyAdapter
from transformer_conformance.conformance.strategies import (
    blocks,
    common,
    linear_losses,
    local_attention,
    losses,
    mla,
    moe,
    mrope,
    plan,
    positions,
    sizes,
)
from transformer_conformance.conformance.strategies.common import Case
from transformer_conformance.reference.formats import fmt
from transformer_conformance.reference.mlp import GLU_ACTIVATIONS, MLP_ACTIVATIONS

F32 = fmt("float32")

#: each case strategy, and how many shapes its plan allows (the planned shapes that fit its options)
STRATEGIES: dict[str, tuple[Callable[[], st.SearchStrategy[Case]], int]] = {
    "norm": (lambda: common.norm_case(F32, with_bias=True), 4),
    "rope": (lambda: common.rope_case(F32), 5),
    "swiglu": (lambda: common.swiglu_case(F32), 4),
    "logits": (lambda: common.logits_case(F32, with_targets=True), 4),
    "attention": (lambda: blocks.attention_case(F32), 4),
    "attention, fewer queries": (lambda: blocks.attention_case(F32, causal=True, fewer_queries=True), 2),
    "attention, even D": (lambda: blocks.attention_case(F32, even_d=True), 2),
    "mlp": (lambda: blocks.mlp_case(F32, gated=True), 4),
    "block": (lambda: blocks.block_case(F32), 3),
    "lm head": (lambda: blocks.lm_head_case(F32), 3),
    "sliding window": (lambda: local_attention.sliding_window_case(F32, SOFTCAPS), 4),
    "chunked": (lambda: local_attention.chunked_case(F32), 4),
    "sinks": (lambda: local_attention.sink_case(F32), 4),
    "ignored tokens": (lambda: losses.ignored_case(F32), 4),
    "soft-capped logits": (lambda: losses.softcap_case(F32), 3),
    "linear cross-entropy": (lambda: linear_losses.linear_ce_case(F32, ("mean", "none")), 3),
    "mla": (lambda: mla.mla_case(F32, ("naive", "absorbed")), 3),
    "router": (lambda: moe.router_case(F32), 3),
    "aux loss": (lambda: moe.aux_loss_case(F32), 3),
    "router z-loss": (lambda: moe.z_loss_case(F32), 3),
    "mrope": (lambda: mrope.mrope_case(F32, ("sections", "interleaved")), 3),
    "temperature": (lambda: mrope.temperature_case(F32), 3),
    "sinusoidal": (lambda: positions.sinusoidal_case(F32), 3),
    "learned": (lambda: positions.learned_case(F32), 3),
    "alibi": (lambda: positions.alibi_case(F32), 3),
    "rope scaled": (lambda: positions.rope_scaled_case(F32), 3),
}


def _shapes(case: Case) -> tuple[tuple[str, tuple[int, ...]], ...]:
    return tuple((k, v.shape) for k, v in case.inputs.items() if v.dtype.kind not in "iu")


def _draw_many(strategy: st.SearchStrategy[Case], on: bool, n: int = 60) -> set[Any]:
    seen: set[Any] = set()

    @settings(max_examples=n, derandomize=True, database=None, suppress_health_check=list(HealthCheck))
    @given(case=strategy)
    def collect(case: Case) -> None:
        seen.add(_shapes(case))

    with plan.planned(on):
        collect()
    return seen


@pytest.mark.parametrize("name", list(STRATEGIES))
def test_a_plan_draws_only_its_shapes(name: str) -> None:
    make, allowed = STRATEGIES[name]
    planned, free = _draw_many(make(), True), _draw_many(make(), False)
    assert 1 <= len(planned) <= allowed, sorted(planned)
    assert len(free) > allowed, f"{name}: the free draws should vary the shapes more than the plan does"


def test_free_draws_are_the_strategies_own() -> None:
    """Without a plan, Dims draws nothing of its own: each label's draw is the free strategy's, in order."""
    calls: list[tuple[Any, str]] = []

    def draw(strategy: Any, label: str = "") -> int:
        calls.append((strategy, label))
        return 3

    rows, cols = st.integers(1, 4), st.integers(5, 9)
    dims = plan.Dims(draw, plan.shapes(("rows", "n"), (2, 7)))
    assert (dims("rows", rows), dims("n", cols)) == (3, 3)
    assert calls == [(rows, "rows"), (cols, "n")]


def test_a_plan_draws_one_shape_first() -> None:
    calls: list[str] = []

    def draw(strategy: st.SearchStrategy[Any], label: str = "") -> Any:
        calls.append(label)
        return {"rows": 2, "n": 7}

    with plan.planned():
        dims = plan.Dims(draw, plan.shapes(("rows", "n"), (2, 7), (3, 9)))
        assert (dims("rows", st.integers(1, 4)), dims("n", st.integers(1, 4))) == (2, 7)
    assert calls == ["planned shape"]
    with plan.planned(), pytest.raises(ValueError, match="no planned shape fits"):
        plan.Dims(draw, plan.shapes(("rows", "n"), (2, 7)), lambda s: s["rows"] > 2)


def _draw_values(strategy: st.SearchStrategy[Case], mode: str, n: int = 80) -> set[Any]:
    """The (shapes, structural values) pairs ``strategy`` draws under ``mode``: what a per_value candidate builds."""
    seen: set[Any] = set()
    keys = ("causal", "softcap", "scale", "window", "chunk", "eps", "base", "mscale", "scaling", "sections", "streams")
    keys += ("k", "n_group", "topk_group", "routed_scaling_factor", "score", "norm", "activation")

    @settings(max_examples=n, derandomize=True, database=None, suppress_health_check=list(HealthCheck))
    @given(case=strategy)
    def collect(case: Case) -> None:
        seen.add((_shapes(case), repr(tuple(case.params.get(k) for k in keys))))

    with plan.planned(mode):
        collect()
    return seen


#: the strategies whose planned shapes state structural values, and how many programs a per_value plan allows
VALUE_STRATEGIES: dict[str, tuple[Callable[[], st.SearchStrategy[Case]], int]] = {
    "attention": (lambda: blocks.attention_case(F32), 4),
    "attention, fewer queries": (lambda: blocks.attention_case(F32, causal=True, fewer_queries=True), 2),
    "sliding window": (lambda: local_attention.sliding_window_case(F32, SOFTCAPS), 4),
    "sliding window, long": (lambda: local_attention.sliding_window_case(F32, SOFTCAPS, long=True), 4),
    "chunked": (lambda: local_attention.chunked_case(F32), 4),
    "chunked, long": (lambda: local_attention.chunked_case(F32, long=True), 4),
    "sinks (in a window or not)": (lambda: local_attention.sink_case(F32), 8),
    "qk-norm attention": (lambda: blocks.qk_norm_case(F32), 4),
    "rope attention": (lambda: blocks.rope_attention_case(F32), 2),
    "mla (one form)": (lambda: mla.mla_case(F32, ("naive",)), 3),
    "block (one placement)": (lambda: blocks.block_case(F32, placement="pre"), 3),
    "lm head": (lambda: blocks.lm_head_case(F32), 3),
    "rope": (lambda: common.rope_case(F32), 5),
    "rope scaled (one kind a shape)": (lambda: positions.rope_scaled_case(F32, ("yarn",)), 3),
    "rope scaled, llama3": (lambda: positions.rope_scaled_case(F32, ("llama3",)), 3),
    "mrope (one stream layout)": (lambda: mrope.mrope_case(F32, ("sections",)), 3),
    "mlp": (lambda: blocks.mlp_case(F32, gated=False), 10),
    "glu": (lambda: blocks.mlp_case(F32, gated=True), 10),
    "router (every choice)": (lambda: moe.router_case(F32), 6),
    "router (top-k, softmax, scaled)": (
        lambda: moe.router_case(F32, ("softmax",), ("none",), ("top_k",), ("factor",)),
        6,
    ),
    "router (groups, sigmoid, scaled)": (
        lambda: moe.router_case(F32, ("sigmoid",), ("topk",), ("groups",), ("factor",)),
        4,
    ),
}


@pytest.mark.parametrize("name", list(VALUE_STRATEGIES))
def test_a_value_plan_draws_each_shape_with_its_stated_values(name: str) -> None:
    make, allowed = VALUE_STRATEGIES[name]
    by_value, by_shape = _draw_values(make(), "per_value"), _draw_values(make(), "per_shape")
    assert 1 <= len(by_value) <= allowed, sorted(by_value, key=repr)
    # the shapes alone planned: the values vary within a shape, a program each for a per_value candidate
    assert len(by_shape) > allowed, f"{name}: a shape plan alone should draw more combinations than the value plan"
    assert {shape for shape, _ in by_value} <= {shape for shape, _ in by_shape}


def _params(strategy: st.SearchStrategy[Case], mode: str, n: int = 80) -> dict[str, set[str]]:
    seen: dict[str, set[str]] = {}

    @settings(max_examples=n, derandomize=True, database=None, suppress_health_check=list(HealthCheck))
    @given(case=strategy)
    def collect(case: Case) -> None:
        for k, v in case.params.items():
            seen.setdefault(k, set()).add(repr(v))

    with plan.planned(mode):
        collect()
    return seen


@pytest.mark.parametrize("name", list(STRATEGIES))
def test_no_parameter_loses_its_variety_under_a_plan(name: str) -> None:
    """A parameter the free draws vary is still varied under a value plan: the report would call it a gap
    (reached's "parameter … not varied"), and its other values would go unchecked."""
    make, _ = STRATEGIES[name]
    free, by_value = _params(make(), "no"), _params(make(), "per_value")
    flat = sorted(k for k, v in free.items() if len(v) > 1 and len(by_value.get(k, ())) < 2)
    assert not flat, f"{name}: varied freely, one value under the plan: {flat}"


def test_a_value_plan_states_each_kind_of_value_the_free_draws_reach() -> None:
    """Over its rows the plan states causal and not, no soft-cap and two, each scale, and windows that leave the
    query alone, fall inside the keys and reach past them (the regimes of docs/coverage.md)."""
    rows = blocks.ATTENTION_SHAPES
    assert {r["causal"] for r in rows} == {True, False}
    assert {r["scale"] for r in rows} == {None, 0.125, 1.0}
    assert None in {r["softcap"] for r in rows} and len({r["softcap"] for r in rows} - {None}) >= 2
    assert 1 in {r["span"] for r in rows}
    assert any(1 < r["span"] < r["L_k"] for r in rows) and any(r["span"] >= r["L_k"] > 1 for r in rows)
    assert all(r["long span"] >= r["L_k"] for r in rows)


def _attention_inputs(row: Mapping[str, Any]) -> Case:
    """An attention case of a planned row's shape (ones)."""
    b, h_kv, lk, d = row["B"], row["H_kv"], row["L_k"], row["D"]
    hq = h_kv * row["query heads per KV head"]
    shapes = {"q": (b, hq, row["L_q"], d), "k": (b, h_kv, lk, d), "v": (b, h_kv, lk, row["D_v"])}
    return Case({n: np.ones(s) for n, s in shapes.items()}, {}, {})


def test_a_plan_states_the_chunks_and_tokens_decoded_against_a_cache() -> None:
    """Each row's cache cuts end at its last key; over the rows, a chunk of several queries and two single tokens
    decoded one after the other (attention/kv-cache); each row decodes its last two tokens against a rolling cache,
    and one whose cache is still filling where the window is wider than one key (sliding-window/rolling-cache).
    Without a plan the cuts are drawn as before and every token is decoded."""

    def no_draw(strategy: st.SearchStrategy[Any], label: str = "") -> Any:
        raise AssertionError(f"a planned row draws no cuts (drew {label!r})")

    chunks = []
    for row in blocks.ATTENTION_SHAPES:
        cuts = list(row["cache cuts"])
        assert cuts == sorted(set(cuts)) and cuts[0] >= 1 and cuts[-1] == row["L_k"], row
        with plan.planned("per_shape"):
            assert blocks.cache_cuts(no_draw, _attention_inputs(row)) == cuts
        chunks.append([end - start for start, end in zip([0, *cuts], cuts, strict=False)])
    assert any(max(c) > 1 for c in chunks) and any(c[-2:] == [1, 1] for c in chunks), chunks

    for row in blocks.ATTENTION_SHAPES:  # sliding-window/rolling-cache: the last tokens, and one still filling
        tokens, lk = list(row["decoded tokens"]), row["L_k"]
        with plan.planned("per_shape"):
            assert local_attention.decoded_tokens(_attention_inputs(row)) == tokens
        assert tokens == sorted(set(tokens)) and tokens[0] >= 0 and tokens[-2:] == list(range(lk))[-2:], row
        filling = tokens[0] + 1 < min(row["span"], lk)  # its cache holds fewer keys than the window
        assert row["span"] == 1 or filling, f"no token decoded while the cache fills: {row}"
    assert local_attention.decoded_tokens(_attention_inputs(blocks.ATTENTION_SHAPES[1])) == list(range(7))

    labels: list[str] = []

    def draw(strategy: st.SearchStrategy[Any], label: str = "") -> Any:
        labels.append(label)
        return [2] if label == "chunk ends" else False

    assert blocks.cache_cuts(draw, _attention_inputs(blocks.ATTENTION_SHAPES[1])) == [2, 7]
    assert labels == ["chunk ends", "decode token by token"]


def test_a_value_the_draw_does_not_allow_is_drawn_freely() -> None:
    calls: list[str] = []

    def draw(strategy: st.SearchStrategy[Any], label: str = "") -> Any:
        calls.append(label)
        return {"n": 2, "softcap": 50.0} if label == "planned shape" else None

    rows = plan.shapes(("n", "softcap"), (2, 50.0))
    with plan.planned("per_value"):
        dims = plan.Dims(draw, rows)
        assert dims.value("softcap", st.just(None), lambda c: c in [None]) is None  # undeclared: the free draw
        assert dims.value("softcap", st.just(None)) == 50.0
        assert dims.value("scale", st.just(None)) is None  # not stated: the free draw
    with plan.planned("per_shape"):
        dims = plan.Dims(draw, rows)
        assert dims.value("softcap", st.just(None)) is None  # shapes alone: values drawn freely
    assert calls == ["planned shape", "softcap", "scale", "planned shape", "softcap"]
    with pytest.raises(ValueError, match="no plan 'per_op'"), plan.planned("per_op"):
        pass


def test_shapes_rows_have_a_value_per_label() -> None:
    with pytest.raises(ValueError, match="2 values for the 3 labels"):
        plan.shapes(("a", "b", "c"), (1, 2))


class PerShape(NumpyAdapter):
    """The oracle as a candidate that 'compiles' a program for each new signature (op, dtype, shapes) and says so."""

    name = "per-shape"
    OPS = ("rms_norm", "attention")

    def __init__(self) -> None:
        super().__init__()
        self.capabilities = {op: Capability(compiles="per_shape") for op in self.OPS}
        self._built: set[Any] = set()

    def compiles(self) -> int:
        return len(self._built)

    def _build(self, op: str, inputs: Mapping[str, np.ndarray], grad: bool) -> None:
        self._built.add((op, grad, tuple((k, v.dtype.str, v.shape) for k, v in inputs.items())))

    def forward(self, op: str, inputs: Mapping[str, np.ndarray], params: Mapping[str, Any]) -> np.ndarray:
        self._build(op, inputs, False)
        return super().forward(op, inputs, params)

    def vjp(
        self, op: str, inputs: Mapping[str, np.ndarray], params: Mapping[str, Any], cotangent: np.ndarray
    ) -> Mapping[str, np.ndarray]:
        self._build(op, inputs, True)
        return super().vjp(op, inputs, params, cotangent)


@pytest.mark.slow  # a whole conformance run (two behaviours, three dtypes)
def test_a_per_shape_candidate_runs_under_the_plan(tmp_path: Path) -> None:
    run = run_suite(
        tmp_path, "--adapter=tests.test_shape_plan:PerShape", "--behaviour=rms_norm", "-k", "forward or gradient"
    )
    assert run.returncode == 0, run.stdout[-3000:]
    reached = run.report["reached"]["per-shape"]
    caps = run.report["adapters"][0]["capabilities"]
    assert caps["rms_norm"]["compiles"] == "per_shape"
    norm = reached["rms_norm"]
    # the planned shapes, and the size regimes' two (which keep theirs)
    assert all(n <= len(common.NORM_SHAPES) + 2 for n in norm["shapes"].values()), norm["shapes"]
    assert norm["planned_calls"] == norm["calls"]  # every check of the operation ran under the plan
    # a program for each shape, forward and backward: built once, checked by the other examples
    for dtype, built in norm["compiles"].items():
        assert built <= 2 * norm["shapes"][dtype], (dtype, built)
    assert norm["calls"] > 4 * sum(norm["compiles"].values())


def test_the_router_rows_state_every_choice_with_more_than_one_of_the_others() -> None:
    rows = moe.ROUTER_SHAPES
    choices = {"score": ("softmax", "sigmoid"), "norm": ("none", "topk"), "routed": moe.ROUTED_SCALING}
    for label, values in choices.items():
        for v in values:
            assert len({r["E"] for r in rows if r[label] == v}) >= 2, (label, v)
    assert {r["selection"] for r in rows} == set(moe.SELECTIONS)
    assert all(r["selection"] != "groups" or r["E"] % 2 == 0 for r in rows)


@pytest.mark.parametrize(
    ("rows", "names"), [(blocks.MLP_SHAPES, MLP_ACTIVATIONS), (blocks.GLU_SHAPES, GLU_ACTIVATIONS)]
)
def test_the_mlp_rows_state_each_activation_on_two_shapes(rows: tuple[Mapping[str, Any], ...], names: Any) -> None:
    """Under a per_value plan an MLP's program is its shape and activation: each activation on two of the four
    shapes; under a per_shape plan the four shapes alone, each drawn as often (and as before the rows stated one)."""
    by_activation: dict[str, set[Any]] = {}
    for r in rows:
        by_activation.setdefault(r["activation"], set()).add((r["d"], r["h"], r["leading shape"]))
    assert set(by_activation) == set(names)
    assert all(len(s) >= 2 for s in by_activation.values()), by_activation
    seen: list[Any] = []

    def draw(strategy: st.SearchStrategy[Any], label: str = "") -> Any:
        seen.extend(strategy.elements)  # type: ignore[attr-defined]
        return seen[0]

    with plan.planned("per_shape"):
        plan.Dims(draw, rows, values=("activation",))
    assert seen == [
        {"d": 1, "h": 1, "leading shape": (1,)},
        {"d": 5, "h": 11, "leading shape": (2, 3)},
        {"d": 24, "h": 40, "leading shape": (1,)},
        {"d": 16, "h": 7, "leading shape": (3,)},
    ]


def _heads(on: bool, n: int = 40) -> list[int]:
    """The head counts ALiBi's slopes check draws, in order, without or under a plan."""
    seen: list[int] = []

    @settings(max_examples=n, derandomize=True, database=None, suppress_health_check=list(HealthCheck))
    @given(h=positions.alibi_heads())
    def collect(h: int) -> None:
        seen.append(h)

    with plan.planned(on):
        collect()
    return seen


def test_alibi_slopes_are_checked_at_both_rules_head_counts_under_a_plan() -> None:
    """ALiBi's slopes are a function of the head count alone, a program per head count for a candidate that builds
    its slopes from it: under a plan the check draws the stated head counts (both rules, one head and the regime's
    64, the same as the planned shapes'), each once; free, every head count of HEADS."""
    stated = {r["H"] for r in positions.ALIBI_HEAD_COUNTS}
    planned = _heads(True)
    assert sorted(planned) == sorted(stated), planned
    assert {r["H"] for r in positions.ALIBI_SHAPES} | {sizes.ALIBI[0]} | {1} <= stated
    powers = {h for h in stated if h & (h - 1) == 0}
    assert len(powers) >= 3 and len(stated - powers) >= 3, stated
    assert set(_heads(False)) == {*range(1, 17), 20, 24, 40, 64}

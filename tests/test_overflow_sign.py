"""An overflowed answer is judged by the interval its budget admits, not by the sign of the exact value alone
(conformance/harness/compare.py): ±inf is a correct rounding of what a correct candidate computes where that
interval reaches past the overflow threshold on that side, and the only correct answer where all of it does.

The case that showed it: torch's CPU layer_norm saves its row statistics in float16 (the torch adapter
declares ``layer_norm.vjp`` unfused for it). On a row 1800 times its spread from zero, μ rounded to float16 moves
x̂ by most of its size, so the budget of ∂L/∂x (±1.4e8) is wider than the exact value (−1.4e5): torch's +inf
is within it. The check used to demand −inf because the exact value is negative.
"""

from __future__ import annotations

import numpy as np
import pytest

from tests.adapter_smoke import outside_hypothesis
from transformer_conformance.conformance.budgets.error_model import Tracked
from transformer_conformance.conformance.harness.compare import CheckFailure, Record, check_vjp, compare
from transformer_conformance.conformance.strategies.common import Case
from transformer_conformance.reference.formats import fmt

F16 = fmt("float16")


def _judge(got: float, exact: float, error: float) -> None:
    budget = Tracked(np.array([exact]), np.array([error]), np.array([abs(exact)]))
    with outside_hypothesis():
        compare(np.array([got], np.float16), np.array([exact]), budget, F16, "y", "f(x)", Record("f/x", "f", "", ""))


@pytest.mark.parametrize("got", [np.inf, -np.inf])
def test_either_infinity_where_the_budget_reaches_past_both_thresholds(got: float) -> None:
    _judge(got, -138581.0, 1.4e8)


def test_an_infinity_the_budget_does_not_reach_fails() -> None:
    with pytest.raises(CheckFailure, match=r"^y: got inf at \(0,\), should be -1000 ± "):
        _judge(np.inf, -1000.0, 10.0)


def test_the_infinity_of_the_other_side_fails_where_the_whole_interval_overflows() -> None:
    message = r"^y: got inf at \(0,\), should be -inf \(the exact value -138581 ± \S+ overflows float16\)"
    with pytest.raises(CheckFailure, match=message):
        _judge(np.inf, -138581.0, 10.0)


def test_a_finite_answer_fails_where_the_whole_interval_overflows() -> None:
    with pytest.raises(CheckFailure, match=r"got 65504.0 at \(0,\), should be inf"):
        _judge(65504.0, 138581.0, 10.0)


def test_max_finite_of_the_reachable_side_passes() -> None:
    _judge(-65504.0, -65510.0, 20.0)


def test_max_finite_of_the_other_side_is_judged_by_its_error() -> None:
    with pytest.raises(CheckFailure, match=r"^y: got 65504 at \(0,\), should be -65510 ± "):
        _judge(65504.0, -65510.0, 20.0)


def test_nan_fails_whatever_the_budget() -> None:
    with pytest.raises(CheckFailure, match=r"^y: got nan at \(0,\)"):
        _judge(np.nan, 0.0, 1e300)


def test_torch_float16_layer_norm_gradient_on_a_far_offset_row() -> None:
    """The example a random seed found (ci-random, seed 13): torch returns +inf where the exact ∂L/∂x is
    −138,581, inside a budget of ±1.4e8. It passes; so would −inf."""
    torch_adapter = pytest.importorskip("transformer_conformance.adapters.torch.adapter")
    h = np.float16
    x = np.array(
        [[117.2, 117.1, 117.25, 117.2, 117.25, 117.3, 117.25, 117.2, 117.2, 117.2,
          117.06, 117.25, 117.1, 117.25, 117.3, 117.2, 117.2, 117.25, 117.3, 117.1]],
        h,
    )  # fmt: skip
    weight = np.array(
        [2986, 2948, 3142, 3026, 3364, 3156, 2834, 3062, 3174, 3202,
         3268, 3286, 3240, 3276, 3162, 3008, 3200, 2880, 2928, 3028],
        h,
    )  # fmt: skip
    bias = np.array(
        [-0.078, 0.443, 0.711, 0.29, -0.064, -0.279, 0.791, 0.021, 0.11, 0.422,
         -0.028, -0.323, -0.4, -0.636, 0.995, 0.189, 0.409, -0.335, -0.87, -0.336],
        h,
    )  # fmt: skip
    cot = np.array(
        [[130.6, -163.6, 26.77, -36.34, -28.97, -13.8, -129.2, -14.84, -55.38, 212.6,
          14.45, -22.56, -18.0, -42.75, -67.5, -25.02, 30.84, -15.27, 61.28, -12.79]],
        h,
    )  # fmt: skip
    case = Case({"x": x, "weight": weight, "bias": bias}, {"eps": 1e-6})
    adapter = torch_adapter.TorchAdapter()
    grads = adapter.vjp("layer_norm", case.inputs, case.params, cot)
    assert np.isinf(grads["x"][0, 5])  # torch 2.13 on a CPU: +inf, where the exact value is negative
    with outside_hypothesis():
        check_vjp(adapter, "layer_norm", case, cot, F16, Record("layer_norm/gradient", "layer_norm", "", ""))

"""``strategies.choices.sampled_from`` builds one strategy per distinct sequence of values, and only for equal
values of equal type and sign."""

from __future__ import annotations

from hypothesis import given

from transformer_conformance.conformance.strategies.choices import sampled_from


def test_equal_values_share_a_strategy() -> None:
    assert sampled_from([1e-6, 1e-5, None]) is sampled_from((1e-6, 1e-5, None))
    assert sampled_from([1, 2]) is not sampled_from([1.0, 2.0])
    assert sampled_from([0.0]) is not sampled_from([-0.0])
    assert sampled_from([[1], [2]]) is not sampled_from([[1], [2]])  # unhashable: a new one each time


@given(sampled_from([-0.0]), sampled_from([1.0, 2.0]), sampled_from([[1, 2]]))
def test_draws_what_was_given(zero: float, one_or_two: float, pair: list[int]) -> None:
    assert str(zero) == "-0.0" and one_or_two in (1.0, 2.0) and isinstance(one_or_two, float) and pair == [1, 2]

"""A failure's counterexample in the report is what the candidate was given and how to reproduce it, once:
none of the suite's internals (conformance/runner/counterexample.py)."""

from __future__ import annotations

from transformer_conformance.conformance.runner.counterexample import readable

NOTE = """Failing test case: test_ce_forward(
    adapter=<tests.faulty.OnePercentOff object at 0x7fb6aea78c50>,
    record=Record(check_id='cross_entropy/forward',
     examples=2),
    data=data(...),
)
Draw 1 (case): Case(inputs={'logits': array([[0.0629883, -0.065918]], dtype=bfloat16),
  'targets': array([0])},
 params={},
 about={'seed': 0})
Explanation:
    These lines were always and only run by failing examples:
        /site-packages/transformer_conformance/conformance/harness/compare.py:151

You can reproduce this test case by temporarily adding @reproduce_failure('6.170.17', b'AEEB') as a decorator \
on your test function
Highest target score: 3.0459  (label='cross_entropy output error / budget')"""


def test_internals_are_dropped_and_the_draws_kept() -> None:
    text = readable([NOTE, NOTE])  # the same note on the failure and on its exception group
    assert text.count("Draw 1 (case)") == 1
    assert "object at 0x" not in text and "Record(" not in text and "compare.py" not in text
    assert "Highest target score" not in text and "Explanation" not in text
    assert " params={}," in text and "'targets': array([0])}," in text
    assert "@reproduce_failure('6.170.17', b'AEEB')" in text

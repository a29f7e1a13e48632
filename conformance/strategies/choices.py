"""``sampled_from``, each strategy built once per distinct sequence of values.

The family strategies draw their choices inside composite strategies, once per example. Hypothesis validates
a strategy the first time it is drawn from and caches strategies of hashable arguments (integers, floats,
booleans), but not ``sampled_from``'s: one built inside a composite is built and validated again at every
example — a tenth of a small check's time. The same values give the same strategy here, and so the same
examples.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any, TypeVar

from hypothesis import strategies as st

T = TypeVar("T")


@functools.cache
def _cached(typed: tuple[tuple[type, str, Any], ...]) -> st.SearchStrategy[Any]:
    return st.sampled_from([v for _, _, v in typed])


def sampled_from(values: Sequence[T]) -> st.SearchStrategy[T]:
    """``st.sampled_from(values)``, the same strategy object for values equal in type and repr as well as
    value (1 and 1.0, 0.0 and −0.0 are told apart); values that cannot be hashed get a new one."""
    try:
        return _cached(tuple((type(v), repr(v), v) for v in values))
    except TypeError:  # an unhashable value
        return st.sampled_from(values)

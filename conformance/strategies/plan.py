"""Shape plans: the shapes a check draws for a candidate that compiles a program per shape.

A compiled candidate (``torch.compile`` without dynamic sizes, ``jax.jit``, an ONNX export, a Triton or Pallas
kernel specialised on its sizes) builds a new program for every new shape it is called with, and building
costs seconds where checking costs milliseconds. An operation it declares ``compiles="per_shape"``
(``Capability.compiles``, docs/adapter-contract.md) is checked under a *plan*: the examples draw their values
(magnitudes, offsets, seeds, parameters) as freely as ever, but their shapes from the small set stated here
beside each family's free draws, so each program is built once and checked many times. The size regimes keep
their shapes (conformance/strategies/sizes.py); properties that derive inputs of other shapes from a case (a
longer sequence, fewer queries) keep deriving them. Without a plan (every other candidate) the draws are
exactly the free ones, in the same order, so the ``ci`` sample of an eager candidate does not move.

A candidate that also builds a program for each value of a structural parameter — one its code branches on or
bakes into the program as a constant: causal or not, a soft-cap, the softmax scale, a window or chunk length —
declares ``compiles="per_value"``: its planned shapes then also state those values (a row's extra labels, read
with ``Dims.value``), so each planned shape is one program per dtype, not one per combination of the values
drawn with it. Every stated value is still reached, over the rows of the plan; a label a row does not state, or
states with a value the draw does not allow (an undeclared soft-cap), is drawn freely.

A strategy draws its shape through :class:`Dims`::

    dims = Dims(draw, NORM_SHAPES)           # under a plan: one planned shape, drawn here
    rows = dims("rows", st.integers(1, 4))   # free: this draw; planned: the planned shape's "rows"
    n = dims("n", WIDTHS)
    scale = dims.value("scale", sampled_from([None, 0.5]))   # the row's "scale" under a per_value plan

The plugin (conformance/runner/plugin.py) switches the plan on for a check whose operation the adapter
declares ``compiles="per_shape"`` or ``"per_value"``, and the report says which operations ran under one
(``reached``: the shapes each was called with, the calls planned, those whose values were planned too, and the
programs the candidate built, where it counts them).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any, TypeVar

from hypothesis import strategies as st

from transformer_conformance.conformance.strategies.choices import sampled_from

T = TypeVar("T")

#: One planned shape: the value of each shape label of a strategy's draws.
Shape = Mapping[str, Any]

#: What the check running now plans: "no" (free draws), "per_shape" (shapes) or "per_value" (shapes and the
#: structural values their rows state) — the operation's ``Capability.compiles``
_ACTIVE: list[str] = ["no"]


def active() -> bool:
    """Whether the check running now draws its shapes from the plans."""
    return _ACTIVE[-1] != "no"


def values_active() -> bool:
    """Whether the check running now also draws the structural values its planned shapes state."""
    return _ACTIVE[-1] == "per_value"


@contextmanager
def planned(on: bool | str = True) -> Iterator[None]:
    """Draw shapes from the plans (``on``: True or "per_shape"), shapes and their stated values ("per_value"), or
    freely (False or "no"), inside the block."""
    mode = ("per_shape" if on else "no") if isinstance(on, bool) else on
    if mode not in ("no", "per_shape", "per_value"):
        raise ValueError(f"no plan {on!r}: False, True, 'no', 'per_shape' or 'per_value'")
    _ACTIVE.append(mode)
    try:
        yield
    finally:
        _ACTIVE.pop()


class Dims:
    """The shape labels of one strategy's draws: free draws, or the values of one shape of ``shapes`` (those
    that satisfy ``fits``), drawn once, labelled "planned shape", when the plan is on. ``draw`` is a composite
    strategy's ``draw`` or a check's ``data.draw``.

    ``values`` names the labels of structural values that rows of one shape differ in (an MLP's activation): under a
    ``per_shape`` plan, which states no values, rows that differ only there are one shape, drawn as often as any
    other, and the draws are those of a table without the ``values`` columns (each shape at its first row)."""

    def __init__(
        self,
        draw: Callable[..., Any],
        shapes: Sequence[Shape],
        fits: Callable[[Shape], bool] | None = None,
        values: Sequence[str] = (),
    ) -> None:
        self._draw = draw
        self._shape: Shape | None = None
        if active():
            usable = [s for s in shapes if fits is None or fits(s)]
            if not usable:
                raise ValueError(f"no planned shape fits this draw (of {list(shapes)})")
            if values and not values_active():
                usable = _distinct(usable, values)
            self._shape = draw(sampled_from(usable), label="planned shape")

    def __call__(self, label: str, free: st.SearchStrategy[T]) -> T:
        if self._shape is None:
            return self._draw(free, label=label)
        if label not in self._shape:
            raise KeyError(f"the planned shape {dict(self._shape)} has no {label!r}")
        value: T = self._shape[label]
        return value

    def stated(self, label: str) -> Any:
        """The planned shape's ``label`` without drawing anything: None without a plan, or where the row has no
        ``label`` (for a draw that must fit the row before the row's own value is read)."""
        return None if self._shape is None else self._shape.get(label)

    def value(self, label: str, free: st.SearchStrategy[T], allowed: Callable[[Any], bool] | None = None) -> T:
        """A structural parameter: the planned shape's ``label`` under a ``per_value`` plan, when the row states
        one and ``allowed`` (if given) accepts it; otherwise this draw of ``free``."""
        if self._shape is not None and values_active() and label in self._shape:
            stated = self._shape[label]
            if allowed is None or allowed(stated):
                value: T = stated
                return value
        return self._draw(free, label=label)


def _distinct(rows: Sequence[Shape], values: Sequence[str]) -> list[Shape]:
    """The first row of each shape of ``rows``, the ``values`` labels left out of it."""
    seen: dict[str, Shape] = {}
    for row in rows:
        shape = {k: v for k, v in row.items() if k not in values}
        seen.setdefault(repr(sorted(shape.items())), shape)
    return list(seen.values())


def shapes(labels: Sequence[str], *rows: tuple[Any, ...]) -> tuple[Shape, ...]:
    """Planned shapes written as rows of values for ``labels``: ``shapes(("rows", "n"), (3, 5), (2, 64))``; labels
    of structural parameters (read with ``Dims.value``) are columns like the others."""
    for row in rows:
        if len(row) != len(labels):
            raise ValueError(f"planned shape {row} has {len(row)} values for the {len(labels)} labels {labels}")
    return tuple(dict(zip(labels, row, strict=True)) for row in rows)

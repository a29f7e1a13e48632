"""The autocast mode: a check's case run inside the candidate's mixed-precision context (``torch.autocast``).

A model trained in mixed precision holds float32 parameters and runs under its framework's autocast
context, which lowers some operations (matmuls) to bfloat16 or float16 and leaves others alone. Code that is
right outside that context can be wrong inside it: transformers 4.38.0–4.38.1 formed RoPE's angles as a
matmul of the inverse frequencies and the positions, which autocast ran in bfloat16 (cos at position 15962:
−0.27 instead of −0.91). So the suite also runs the operations of ``adapters.AUTOCAST`` in the modes
``autocast-bfloat16`` and ``autocast-float16`` (a column of the report beside the dtypes), for an adapter
whose capability declares them (``Capability.autocast``).

In mode ``autocast-D`` an operation's floating inputs arrive as a model under autocast hands them over
(``adapters.AUTOCAST``: D for RoPE's q and k, float32 for the norms' residual stream and weights), and its
output must keep that dtype: none of these operations' own steps is on autocast's lists. So the case is the
case of that dtype — the same oracle, the same derived budget (docs/tolerance.md, "Autocast") — called
inside ``adapter.autocast(D)``: a step the candidate leaves to autocast is a rounding no declaration allows.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass
from typing import Any

from transformer_conformance.adapters.contract import AUTOCAST, AUTOCAST_DTYPES, Adapter
from transformer_conformance.reference.formats import Format, fmt

#: The modes, each a column of the report: ``autocast-bfloat16``, ``autocast-float16``.
PREFIX = "autocast-"
MODES = tuple(PREFIX + d for d in AUTOCAST_DTYPES)


@dataclass(frozen=True)
class AutocastFormat(Format):
    """The format an operation's case has in an autocast mode (its numbers: those of the dtype its inputs
    arrive in, ``name``), with the mode's low-precision dtype (``autocast``) the candidate runs under."""

    autocast: str = "bfloat16"

    @property
    def mode(self) -> str:
        return PREFIX + self.autocast


def mode_format(mode: str, op: str) -> AutocastFormat:
    """The format of ``op``'s cases in ``mode`` (``autocast-bfloat16``): the dtype its inputs arrive in under
    autocast (``adapters.AUTOCAST``), marked with the mode."""
    low = mode.removeprefix(PREFIX)
    seen = fmt(low if AUTOCAST[op] == "low" else "float32")
    return AutocastFormat(seen.name, seen.np_dtype, seen.precision, seen.min_exponent, seen.max_finite, autocast=low)


def autocast_dtype(dtype: Format) -> str | None:
    """The mode's low-precision dtype of a case in an autocast mode; None outside one."""
    return dtype.autocast if isinstance(dtype, AutocastFormat) else None


def label(dtype: Format) -> str:
    """What the report calls a case's column: its dtype, or its autocast mode."""
    return dtype.mode if isinstance(dtype, AutocastFormat) else dtype.name


_ACTIVE: list[tuple[Adapter, str]] = []  # the check in progress: its adapter and the mode's dtype


@contextmanager
def active(adapter: Adapter, dtype: Format) -> Iterator[None]:
    """While a check runs: every call of ``adapter`` (harness/compare.py ``_invoke``) enters its autocast
    context when ``dtype`` is of an autocast mode."""
    low = autocast_dtype(dtype)
    if low is None:
        yield
        return
    _ACTIVE.append((adapter, low))
    try:
        yield
    finally:
        _ACTIVE.pop()


def context(fn: Any) -> AbstractContextManager[Any]:
    """The context a call of the candidate's bound method ``fn`` runs in: its adapter's ``autocast(D)`` during
    a check of an autocast mode, nothing otherwise."""
    if _ACTIVE:
        adapter, low = _ACTIVE[-1]
        if getattr(fn, "__self__", None) is adapter:
            ctx: AbstractContextManager[Any] = adapter.autocast(low)  # type: ignore[attr-defined]
            return ctx
    return nullcontext()

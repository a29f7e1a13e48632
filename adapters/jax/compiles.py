"""How many programs XLA has compiled in this process: the count the JAX-based adapters report (their optional
``compiles()`` hook, docs/adapter-contract.md), from JAX's own monitoring events: one "backend compile" event per
program handed to XLA. A compile served from JAX's in-memory cache sends none; nothing here changes what runs."""

from __future__ import annotations

import jax

#: the event JAX records for every program it hands to the backend compiler (jax._src.dispatch)
BACKEND_COMPILE = "/jax/core/compile/backend_compile_duration"

_COUNT = [0]
_LISTENING = [False]


def _listen(event: str, duration_secs: float, **_: str | int) -> None:
    if event == BACKEND_COMPILE:
        _COUNT[0] += 1


def backend_compiles() -> int:
    """The programs compiled since the first call (which starts the count)."""
    if not _LISTENING[0]:
        jax.monitoring.register_event_duration_secs_listener(_listen)
        _LISTENING[0] = True
    return _COUNT[0]

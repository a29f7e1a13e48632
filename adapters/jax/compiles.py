"""Building each XLA program once per run, and counting what was built: for the JAX-based adapters.

* **Counting** (their optional ``compiles()`` hook, docs/adapter-contract.md): from JAX's own monitoring events,
  one "backend compile" event for every program handed to XLA, less the programs JAX's persistent cache served
  (its "cache hit" events). A program served from JAX's in-memory cache sends neither.
* **Sharing**: JAX's persistent compilation cache is switched on, as inductor's FX graph cache is for torch, in a
  directory under the system's temporary directory (``jax-conformance-cache-$USER``) unless the caller chose one
  (``JAX_COMPILATION_CACHE_DIR`` or ``jax.config``): the pytest-xdist workers of a run and later runs load a
  program another has built instead of compiling it again. A cached program is the program XLA built; nothing
  here changes what runs.
"""

from __future__ import annotations

import getpass
import os
import tempfile
from pathlib import Path

import jax

#: the event JAX records for every program it hands to the backend (compiled, or loaded from the persistent cache)
BACKEND_COMPILE = "/jax/core/compile/backend_compile_duration"
#: the event JAX records for a program its persistent cache served
CACHE_HIT = "/jax/compilation_cache/cache_hits"

_COUNTS = {"backend": 0, "hits": 0}
_STARTED = [False]


def _on_duration(event: str, duration_secs: float, **_: str | int) -> None:
    if event == BACKEND_COMPILE:
        _COUNTS["backend"] += 1


def _on_event(event: str, **_: str | int) -> None:
    if event == CACHE_HIT:
        _COUNTS["hits"] += 1


def cache_dir() -> Path:
    """Where this run's compiled programs are shared (the caller's own choice, where it made one)."""
    chosen = os.environ.get("JAX_COMPILATION_CACHE_DIR") or jax.config.jax_compilation_cache_dir
    if chosen:
        return Path(chosen)
    try:
        user = getpass.getuser()
    except (KeyError, OSError):  # no name for this uid (a container)
        user = str(os.getuid()) if hasattr(os, "getuid") else "user"
    return Path(tempfile.gettempdir()) / f"jax-conformance-cache-{user}"


def start() -> None:
    """Count from now on, and share compiled programs through the persistent cache (module docstring); once."""
    if _STARTED[0]:
        return
    _STARTED[0] = True
    jax.monitoring.register_event_duration_secs_listener(_on_duration)
    jax.monitoring.register_event_listener(_on_event)
    if not jax.config.jax_compilation_cache_dir:
        jax.config.update("jax_compilation_cache_dir", str(cache_dir()))
        # every program, however small or quick to compile: the checks' programs are small and many
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
        jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)


def backend_compiles() -> int:
    """The programs XLA compiled since :func:`start` (which the first call makes), those its cache served left out."""
    start()
    return _COUNTS["backend"] - _COUNTS["hits"]

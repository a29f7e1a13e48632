"""When a candidate's call is hung: judged on the candidate's own progress, never on the wall clock alone.

A loaded machine stretches a correct candidate's wall time, not the CPU time it needs; so a call is stopped
as hung only when

* it has used ``limit`` seconds of CPU time in its own process (all its threads) without returning — a busy
  loop; the first call of an operation, where libraries compile and warm up, may use ``FIRST_CALL_FACTOR``
  times as much; or
* it has made no progress — less than ``IDLE_SHARE`` of one core over the last ``limit`` seconds of wall
  time, in its process and its child processes (a compiler's worker pool is progress) — a deadlock, a sleep,
  a wait on something that never comes. A process that gets any real share of a busy machine is above
  that share.

The clock is sampled every ``TICK`` seconds with SIGALRM, in the main thread only (elsewhere calls are not
watched). docs/gating.md, "Hung candidates".
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

#: How often the progress of a call is sampled (seconds).
TICK = 0.25
#: The first call of an operation (compilation, warm-up) may use this many times the CPU-time limit.
FIRST_CALL_FACTOR = 10.0
#: Below this share of one core over a whole window of ``limit`` seconds, a call makes no progress.
IDLE_SHARE = 0.01

_CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


class Hung(Exception):
    """The watched call is hung; ``reason`` says how it was judged."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def _children_cpu(pid: int) -> dict[int, float]:
    """CPU seconds of each live descendant of ``pid`` (Linux /proc; none elsewhere)."""
    try:
        entries = os.listdir("/proc")
    except OSError:
        return {}
    parent: dict[int, int] = {}
    cpu: dict[int, float] = {}
    for name in entries:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
        except OSError:
            continue
        # after the command: state, ppid, ..., utime (field 14) and stime (15) of the whole stat line
        parent[int(name)] = int(fields[1])
        cpu[int(name)] = (int(fields[11]) + int(fields[12])) / _CLOCK_TICKS
    found: dict[int, float] = {}
    frontier = [pid]
    while frontier:
        p = frontier.pop()
        for child, ppid in parent.items():
            if ppid == p and child not in found:
                found[child] = cpu.get(child, 0.0)
                frontier.append(child)
    return found


@contextmanager
def watch(limit: float, first_call: bool = False) -> Iterator[None]:
    """Raise :class:`Hung` inside the block when it is hung (module docstring). ``limit`` ≤ 0: not watched."""
    if limit <= 0 or threading.current_thread() is not threading.main_thread():
        yield
        return
    cpu_limit = limit * (FIRST_CALL_FACTOR if first_call else 1.0)
    pid, start_wall, start_cpu = os.getpid(), time.monotonic(), time.process_time()
    # each descendant's CPU time at the first tick (most calls end before one: no scan of /proc for them),
    # 0 for one started later, and when last seen (a child that has exited keeps what it used)
    first_seen: dict[int, float] = {}
    last_seen: dict[int, float] = {}
    samples: deque[tuple[float, float]] = deque([(start_wall, 0.0)])
    watching = [0.0]  # CPU seconds this watchdog has spent reading /proc: not the candidate's

    def tick(signum: int, frame: Any) -> None:
        now, before = time.monotonic(), time.process_time()
        first_tick = len(samples) == 1
        for child, seconds in _children_cpu(pid).items():
            first_seen.setdefault(child, seconds if first_tick else 0.0)
            last_seen[child] = seconds
        watching[0] += time.process_time() - before
        own = time.process_time() - start_cpu - watching[0]  # CPU seconds the call has used in this process
        progress = own + sum(last_seen[c] - first_seen[c] for c in last_seen)  # and in its child processes
        samples.append((now, progress))
        while len(samples) > 1 and samples[1][0] <= now - limit:
            samples.popleft()  # keep one sample at or before the start of the window
        if own >= cpu_limit:
            raise Hung(f"used {own:.0f} s of CPU time without returning")
        window_start, window_progress = samples[0]
        idle = progress - window_progress < IDLE_SHARE * limit
        if now - start_wall >= limit and now - window_start >= limit and idle:
            raise Hung(f"made no progress for {now - window_start:.0f} s")

    previous = signal.signal(signal.SIGALRM, tick)
    signal.setitimer(signal.ITIMER_REAL, TICK, TICK)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)

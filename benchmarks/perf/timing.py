"""Timing: the spread of a set of samples, and how one sample is taken on a CPU and on a CUDA GPU.

On a CPU a sample is the process's own clock around one call (pytest-benchmark's timer when a case runs
under pytest-benchmark). On a CUDA GPU it is the time between two CUDA events recorded on the stream
around the call, after warm-up, with the L2 cache flushed (a buffer larger than it overwritten) before
every sample, outside the timed interval. Asynchronous work is waited for: CUDA is synchronised, JAX
results are blocked on.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True)
class Stats:
    """Seconds per call."""

    min: float
    median: float
    q1: float
    q3: float
    iqr: float
    mean: float
    max: float
    rounds: int

    @classmethod
    def of(cls, samples: list[float]) -> Stats:
        if not samples:
            raise ValueError("no samples")
        a = np.asarray(samples, dtype=np.float64)
        q1, median, q3 = (float(v) for v in np.percentile(a, [25, 50, 75]))
        return cls(
            min=float(a.min()),
            median=median,
            q1=q1,
            q3=q3,
            iqr=q3 - q1,
            mean=float(a.mean()),
            max=float(a.max()),
            rounds=len(samples),
        )

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def wait(result: Any) -> Any:
    """``result``, once the work that produced it has finished (CUDA synchronised, JAX arrays ready)."""
    jax = sys.modules.get("jax")
    if jax is not None:
        jax.block_until_ready(result)
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.synchronize()
    return result


def rounds_for(estimate_s: float, max_time_s: float, min_rounds: int, max_rounds: int) -> int:
    """As many rounds as fit in ``max_time_s`` at ``estimate_s`` each, within [min_rounds, max_rounds]."""
    if estimate_s <= 0:
        return max_rounds
    return max(min_rounds, min(max_rounds, int(max_time_s / estimate_s)))


class CudaSampler:
    """Times calls with CUDA events, flushing the L2 cache before each one (outside the timed interval)."""

    def __init__(self, device: str, flush: bool = True) -> None:
        import torch

        self.torch = torch
        self.device = torch.device(device)
        props = torch.cuda.get_device_properties(self.device)
        l2 = int(getattr(props, "L2_cache_size", 0) or 0)
        self.flush_bytes = max(4 * l2, 256 * 2**20) if flush else 0
        self.buffer = torch.empty(self.flush_bytes, dtype=torch.uint8, device=self.device) if flush else None
        self.samples: list[float] = []

    def flush(self) -> None:
        if self.buffer is not None:
            self.buffer.zero_()

    def timed(self, fn: Callable[[], Any]) -> Callable[[], Any]:
        """``fn`` wrapped to record one sample (seconds) per call into ``self.samples``."""
        torch = self.torch

        def run() -> Any:
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            start.record()
            out = fn()
            end.record()
            end.synchronize()
            self.samples.append(start.elapsed_time(end) / 1e3)
            return out

        return run

    def sample(self, fn: Callable[[], Any], rounds: int) -> list[float]:
        self.samples = []
        run = self.timed(fn)
        for _ in range(rounds):
            self.flush()
            run()
        return list(self.samples)


def cpu_sample(fn: Callable[[], Any], rounds: int, timer: Callable[[], float] = time.perf_counter) -> list[float]:
    out = []
    for _ in range(rounds):
        t0 = timer()
        wait(fn())
        out.append(timer() - t0)
    return out

"""The machine's ceilings, measured in the same run as the benchmarks: copy bandwidth and matmul rate.

* Copy bandwidth: bytes read plus bytes written per second by ``dst.copy_(src)`` on a buffer far larger
  than any cache (256 MiB on a CPU, 1 GiB on a GPU). The roof of a memory-bound operation: one that reads
  its inputs and writes its outputs once at this rate is as fast as a copy of the same bytes.
* Matmul rate: 2·n³ FLOPs per second of an n×n by n×n product in the benchmarked dtype, n doubled from
  256 until one product takes long enough to time well (or a size cap). The roof of a compute-bound one.

A ceiling is a roof, what the machine can do: its rate is taken at the fastest repetition (the median's rate
and the spread are kept too). A result's position is its median rate over this roof.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from benchmarks.perf.timing import CudaSampler, Stats, cpu_sample, rounds_for


@dataclass(frozen=True)
class Ceiling:
    kind: str  # "copy" or "matmul"
    device: str
    dtype: str | None  # None for the copy
    size: int  # bytes copied (copy) or n (matmul)
    work: int  # bytes moved (read + written) or FLOPs per call
    stats: Stats

    @property
    def rate(self) -> float:
        """Bytes/s or FLOP/s at the fastest repetition: the roof."""
        return self.work / self.stats.min

    @property
    def median_rate(self) -> float:
        return self.work / self.stats.median

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "device": self.device,
            "dtype": self.dtype,
            "size": self.size,
            "work": self.work,
            "unit": "B/s" if self.kind == "copy" else "FLOP/s",
            "rate": self.rate,
            "median_rate": self.median_rate,
            "time_s": self.stats.to_dict(),
        }


@dataclass(frozen=True)
class CeilingSettings:
    copy_bytes: int
    matmul_min_call_s: float  # grow n until one product takes this long
    matmul_max_n: int
    max_time_s: float  # per ceiling, after warm-up
    min_rounds: int = 5
    max_rounds: int = 50


def settings(device: str, quick: bool) -> CeilingSettings:
    if device.startswith("cuda"):
        return CeilingSettings(2**30, 2e-3, 16384, 0.5 if quick else 1.0, max_rounds=200)
    return CeilingSettings(256 * 2**20, 0.02 if quick else 0.1, 2048 if quick else 4096, 0.5 if quick else 2.0)


def _sampler(device: str) -> Callable[[Callable[[], Any], int], list[float]]:
    if device.startswith("cuda"):
        cuda = CudaSampler(device, flush=False)
        return cuda.sample
    return cpu_sample


def _measure(fn: Callable[[], Any], device: str, s: CeilingSettings) -> Stats:
    sample = _sampler(device)
    warm = sample(fn, 2)
    return Stats.of(sample(fn, rounds_for(min(warm), s.max_time_s, s.min_rounds, s.max_rounds)))


def copy_bandwidth(device: str, s: CeilingSettings) -> Ceiling:
    import torch

    src = torch.zeros(s.copy_bytes, dtype=torch.uint8, device=device)
    dst = torch.zeros_like(src)
    stats = _measure(lambda: dst.copy_(src), device, s)
    return Ceiling("copy", device, None, s.copy_bytes, 2 * s.copy_bytes, stats)


def matmul_rate(device: str, dtype: str, s: CeilingSettings) -> Ceiling:
    import torch

    tdtype = getattr(torch, dtype)

    def product(n: int) -> Callable[[], Any]:
        a = torch.randn(n, n, device=device).to(tdtype)
        b = torch.randn(n, n, device=device).to(tdtype)
        return lambda: a @ b

    sample = _sampler(device)
    n = 256
    while True:
        fn = product(n)
        sample(fn, 1)
        if min(sample(fn, 3)) >= s.matmul_min_call_s or 2 * n > s.matmul_max_n:
            break
        n *= 2
    stats = _measure(fn, device, s)
    return Ceiling("matmul", device, dtype, n, 2 * n**3, stats)

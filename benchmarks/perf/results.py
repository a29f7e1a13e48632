"""One benchmark result, and a run's results as JSON (``perf.json``) and CSV (``perf.csv``).

A result is a JSON-ready dict: what ran (operation, adapter, device, dtype, pass, size), its spread of
times, and its roofline position — achieved bandwidth (minimum bytes / median time) and FLOP rate, as
fractions of the run's measured copy bandwidth and matmul rate in that dtype. ``fraction`` is the one that
bounds the operation (``ceiling``): the copy bandwidth for the memory-bound operations, the matmul rate for
the SwiGLU MLP.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable, Mapping
from typing import Any

from benchmarks.perf.accounting import BenchOp, Dims, pass_bytes, pass_flops, pass_name
from benchmarks.perf.timing import Stats

SCHEMA = "transformer-conformance/perf"
SCHEMA_VERSION = 1
BASELINE_ADAPTER = "torch"  # side-by-side ratios are to torch eager measured in the same run

CEILING_NAMES = {"memory": "copy bandwidth", "compute": "matmul rate"}


def result_key(r: Mapping[str, Any]) -> tuple[str, str, str, str, str, str]:
    """What identifies a result across runs."""
    return (r["op"], r["size"], r["dtype"], r["pass"], r["adapter"], r["device"])


def _case(r: Mapping[str, Any]) -> tuple[str, str, str, str, str]:
    """A result's case, whichever adapter ran it."""
    return (r["op"], r["size"], r["dtype"], r["pass"], r["device"])


def make_result(
    op: BenchOp,
    dims: Dims,
    dtype: str,
    grad: bool,
    adapter: str,
    device: str,
    stats: Stats,
    copy_rate: float | None,
    matmul_rate: float | None,
) -> dict[str, Any]:
    nbytes = pass_bytes(op, dims, dtype, grad)
    flops = pass_flops(op, dims, grad)
    bandwidth = nbytes / stats.median
    flop_rate = flops / stats.median
    of_copy = bandwidth / copy_rate if copy_rate else None
    of_matmul = flop_rate / matmul_rate if matmul_rate else None
    return {
        "behaviour": op.behaviour,
        "op": op.name,
        "adapter": adapter,
        "device": device,
        "dtype": dtype,
        "pass": pass_name(grad),
        "size": op.label(dims),
        "dims": dict(dims),
        "bytes": nbytes,
        "flops": flops,
        "intensity": flops / nbytes,
        "time_s": stats.to_dict(),
        "bandwidth": bandwidth,
        "flop_rate": flop_rate,
        "fraction_of_copy": of_copy,
        "fraction_of_matmul": of_matmul,
        "bound": op.bound,
        "ceiling": CEILING_NAMES[op.bound],
        "fraction": of_copy if op.bound == "memory" else of_matmul,
    }


def add_ratios(results: list[dict[str, Any]], baseline: str = BASELINE_ADAPTER) -> None:
    """Set each result's ``vs_torch``: torch eager's median time over this one's (above 1: faster than torch),
    when torch ran the same case in the same run."""
    ref = {_case(r): r["time_s"]["median"] for r in results if r["adapter"] == baseline}
    for r in results:
        t = ref.get(_case(r))
        r["vs_torch"] = t / r["time_s"]["median"] if t is not None else None


CSV_COLUMNS = (
    "behaviour",
    "op",
    "adapter",
    "device",
    "dtype",
    "pass",
    "size",
    "bytes",
    "flops",
    "min_s",
    "median_s",
    "q1_s",
    "q3_s",
    "iqr_s",
    "rounds",
    "bandwidth_GBps",
    "flop_rate_GFLOPps",
    "fraction_of_copy",
    "fraction_of_matmul",
    "ceiling",
    "fraction",
    "vs_torch",
    "verified",
)


def _num(v: float | None, fmt: str = ".6g") -> str:
    return "" if v is None else format(v, fmt)


def to_csv(results: Iterable[Mapping[str, Any]]) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(CSV_COLUMNS)
    for r in results:
        t = r["time_s"]
        w.writerow(
            [
                r["behaviour"],
                r["op"],
                r["adapter"],
                r["device"],
                r["dtype"],
                r["pass"],
                r["size"],
                r["bytes"],
                r["flops"],
                _num(t["min"]),
                _num(t["median"]),
                _num(t["q1"]),
                _num(t["q3"]),
                _num(t["iqr"]),
                t["rounds"],
                _num(r["bandwidth"] / 1e9),
                _num(r["flop_rate"] / 1e9),
                _num(r["fraction_of_copy"]),
                _num(r["fraction_of_matmul"]),
                r["ceiling"],
                _num(r["fraction"]),
                _num(r.get("vs_torch")),
                r.get("verified", ""),
            ]
        )
    return buf.getvalue()

"""What a timed call delivered: the answer of the last timed round, held to the oracle and to the rules of delivery.

A time is a measurement of the work only if the work was done inside it. A candidate optimised for "passes the
check, runs fast" can be fast by not computing: by handing back the tensor it returned last time (cached by the
identity of its inputs, which a benchmark passes again and again), or by returning before a thread it started
has finished the answer. So the answer of the last timed round is taken as the timer stopped, and:

* **settled** — it is re-read after ``PAUSE`` seconds and after the threads the timed rounds started (if any)
  have been waited for, up to ``SETTLE`` seconds: it must be what it was when the timer stopped;
* **fresh** — one more call, made while that answer is still held, must return tensors of their own, not the
  held answer's memory (a freshly computed answer cannot live in memory its caller still holds);
* **right** — it is held to the float64 oracle within the error budget of the conformance checks (the same
  ``FORWARD`` and ``VJP`` budgets), the gradients too where the ``native`` hook takes the harness's cotangent.
  ``swiglu_product`` is not a contract operation and has no budget of its own; a case whose oracle would take
  longer than its timing (more than ``ORACLE_ELEMENTS`` input elements or ``ORACLE_FLOPS`` floating-point
  operations) is verified for delivery only, and the report says so.

A case that breaks one of these is not a measurement: it is reported as rejected, with the message, and its time
is not shown.
"""

from __future__ import annotations

import inspect
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from benchmarks.perf.accounting import BenchOp
from benchmarks.perf.inputs import NUMPY_DTYPES
from benchmarks.perf.timing import wait
from transformer_conformance.adapters.contract import Adapter
from transformer_conformance.conformance.budgets import registry as budgets
from transformer_conformance.conformance.budgets.error_model import allowed_error
from transformer_conformance.conformance.harness.integrity import threads
from transformer_conformance.reference import oracle
from transformer_conformance.reference.formats import FORMATS

#: Seconds between the timer stopping and the answer's re-reading.
PAUSE = 0.05
#: Seconds the verifier waits for threads the timed rounds started and left running.
SETTLE = 2.0
#: Largest case whose values are held to the float64 oracle (the elements of its inputs, its forward FLOPs).
ORACLE_ELEMENTS = 2**23
ORACLE_FLOPS = 2**32


class Rejected(Exception):
    """The timed calls did not deliver their answer; the message says how."""


def _items(result: Any) -> list[Any]:
    return list(result) if isinstance(result, tuple | list) else [result]


def _host(t: Any) -> np.ndarray:
    """A copy of a returned tensor in float64 on the host."""
    if type(t).__module__.split(".")[0] == "torch":
        return np.array(t.detach().float().cpu().numpy(), dtype=np.float64)
    return np.array(np.asarray(t), dtype=np.float64)


def _memory(t: Any) -> int | None:
    """The address of the memory behind a returned tensor (torch: its storage), None where it cannot be told."""
    if type(t).__module__.split(".")[0] == "torch":
        storage = t.untyped_storage()
        return int(storage.data_ptr()) if storage.nbytes() else None
    if isinstance(t, np.ndarray) and t.size:
        return int(t.__array_interface__["data"][0])
    return None


def _where(mask: np.ndarray) -> tuple[int, ...]:
    return tuple(int(j) for j in np.argwhere(mask)[0]) if mask.ndim else ()


def names(op: BenchOp, inputs: Mapping[str, np.ndarray], grad: bool) -> list[str]:
    """What each returned tensor is: the output, or the gradient of each floating input in the inputs' order."""
    if not grad:
        return ["output"]
    return [f"∂L/∂{k}" for k, v in inputs.items() if v.dtype.kind == "f" or v.dtype.name == "bfloat16"]


def oracle_note(op: BenchOp, inputs: Mapping[str, np.ndarray], dims: Mapping[str, int], grad: bool) -> str:
    """Why the values of a case are not held to the oracle; empty where they are."""
    if op.name not in budgets.FORWARD:
        return f"{op.name} is not a contract operation: it has no oracle budget"
    elements = sum(int(a.size) for a in inputs.values())
    flops = op.flops_forward(dims) + (op.flops_backward(dims) if grad else 0)
    if elements > ORACLE_ELEMENTS or flops > ORACLE_FLOPS:
        return f"too large for the float64 oracle here: {elements:,} input elements, {flops:.3g} FLOPs"
    return ""


def check_values(
    adapter: Adapter,
    op: BenchOp,
    inputs: Mapping[str, np.ndarray],
    params: Mapping[str, Any],
    dtype: str,
    cotangent: np.ndarray | None,
    got: list[np.ndarray],
    names: list[str],
    call: str,
) -> None:
    """The timed answer against the oracle, within the conformance checks' budget."""
    fmt, conv = FORMATS[dtype], adapter.conventions
    values = {k: v if v.dtype.kind in "iu" else v.astype(np.float64) for k, v in inputs.items()}
    if cotangent is None:
        want = [np.asarray(oracle.forward(op.contract_op, values, params, conv, fmt), np.float64)]
        budget = [budgets.FORWARD[op.contract_op](values, params, conv, fmt)]
    else:
        g = cotangent.astype(np.float64)
        grads = oracle.vjp(op.contract_op, values, params, conv, fmt, g)
        bud = budgets.VJP[op.contract_op](values, params, conv, fmt, g)
        keys = [n.removeprefix("∂L/∂") for n in names]
        want, budget = [np.asarray(grads[k], np.float64) for k in keys], [bud[k] for k in keys]
    if len(got) != len(want):
        raise Rejected(
            f"the timed call returned {len(got)} tensor(s), should be {len(want)}: {', '.join(names)} [{call}]"
        )
    for what, a, w, b in zip(names, got, want, budget, strict=True):
        if a.shape != w.shape:
            raise Rejected(f"{what}: got shape {a.shape}, should be {w.shape} [{call}]")
        allowed = np.broadcast_to(allowed_error(b, fmt), w.shape)
        bad = ~(np.abs(a - w) <= allowed)
        if bad.any():
            i = _where(bad)
            raise Rejected(
                f"{what}: got {a[i]:.6g} at {i}, should be {w[i]:.6g} ± {allowed[i]:.3g}: the timed call's answer "
                f"disagrees with the oracle, so its time is not the operation's [{call}]"
            )


def check_delivery(fn: Callable[[], Any], last: Any, before: set[threading.Thread], call: str) -> list[np.ndarray]:
    """The last timed round's answer, settled and fresh (see the module's docstring); returns it on the host, as
    it was when the timer stopped."""
    held = _items(last)
    at_stop = [_host(t) for t in held]
    again = _items(wait(fn()))
    mine = {m for m in map(_memory, held) if m is not None}
    for i, t in enumerate(again):
        if _memory(t) in mine:
            raise Rejected(
                f"the call after the timed rounds returned the memory of their answer, still held by its caller: "
                f"tensor {i} of the answer is kept (cached by its inputs' identity, or one buffer written by every "
                f"call), so the timed rounds need not have computed it [{call}]"
            )
    time.sleep(PAUSE)
    started = [t for t in threads() - before if t.is_alive()]
    deadline = time.monotonic() + SETTLE
    for t in started:
        t.join(max(0.0, deadline - time.monotonic()))
    wait(last)
    for i, (was, t) in enumerate(zip(at_stop, held, strict=True)):
        now = _host(t)
        same = (was == now) | (np.isnan(was) & np.isnan(now))
        if not same.all():
            j = _where(~same)
            left = f" and the thread(s) the calls left running ({len(started)})" if started else ""
            raise Rejected(
                f"tensor {i} of the timed answer changed after the timer stopped: got {was[j]:.6g} at {j} when it "
                f"stopped, {now[j]:.6g} after a pause of {PAUSE * 1000:.0f} ms{left}; the work was not all inside "
                f"the timed interval [{call}]"
            )
    del again
    return at_stop


def cotangent_for(op: BenchOp, dims: Mapping[str, int], dtype: str, seed: int = 1) -> np.ndarray:
    """The cotangent the harness hands a ``native`` hook that takes one: unit-scale, of the output's shape."""
    (shape,) = op.outputs(dims).values()
    return np.random.default_rng(seed).standard_normal(shape).astype(NUMPY_DTYPES[dtype])


def takes_cotangent(native: Callable[..., Any]) -> bool:
    """Whether a ``native`` hook accepts the harness's cotangent (docs/adapter-contract.md)."""
    try:
        return "cotangent" in inspect.signature(native).parameters
    except (TypeError, ValueError):
        return False


def describe(adapter: Adapter, op: BenchOp, inputs: Mapping[str, np.ndarray], grad: bool) -> str:
    shapes = ", ".join(f"{k}: {v.dtype.name}{list(v.shape)}" for k, v in inputs.items())
    return f"{adapter.name}.native({op.name!r}, grad={grad}) on {shapes}"

"""What an answer must be besides right: fresh, settled and plain, so that a candidate cannot pass without computing.

Candidates optimised against a correctness check (by search, or by a model writing kernels) find the ways a weak
check can be passed: an output array kept and overwritten by every call (compared with itself, it always agrees),
a result finished by a thread after the call returned, memory read without being written that happens to hold
an earlier answer, a lazy subclass of ``numpy.ndarray`` that computes only when looked at. ``compare.call_op``
applies these rules to every call of every check (docs/gating.md, "Answers that must be computed"):

* **plain** — every array returned is a ``numpy.ndarray`` itself, not a subclass (:func:`plain`);
* **fresh** — no array returned shares memory with an input it was handed (unless the operation is declared
  in-place), with another array of the same answer, or with the answer of the operation's
  previous call, which the harness still holds (as a caller may): memory the candidate kept and handed out again;
* **settled** — a Python thread the call started and left running is waited for (up to ``SETTLE`` seconds), and
  the answer must not change meanwhile; nor may the previous call's answer, held by the harness, change during
  the next call of the operation;
* **poisoned** — before each call, blocks the size of each input are filled with ``POISON`` bytes and freed, so
  that memory the candidate returns unwritten holds NaN, not an earlier answer, wherever the allocator hands
  those blocks on. A NaN with that bit pattern in an answer is named as such.

``conformance/checks/test_integrity.py`` adds what needs more than one call: identical calls give identical
bits (unless the adapter declares the operation non-deterministic), an answer unchanged after a pause and after
the next call, new values of the same shapes a new answer.
"""

from __future__ import annotations

import threading
import time
import zlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

#: Seconds the harness waits for threads a call started and left running before it re-reads the answer.
SETTLE = 2.0
#: The byte freed memory is filled with before a call: 0xFF…FF is a NaN in every IEEE format (float16, bfloat16,
#: float32, float64), and no arithmetic produces it (x86's default NaN is 0xFFC00000 in float32).
POISON = 0xFF
#: Poisoned blocks per input size: an allocator hands several recently freed blocks on.
POISON_COPIES = 2


class Violation(Exception):
    """An answer broke one of the rules; the message names it (compare.call_op turns it into a failed check)."""


@dataclass
class _Returned:
    """An array a call returned, its checksum when it was returned, and the call. The harness holds the array
    until the next call of the operation, as a caller holding an answer does: its memory cannot have been freed
    and handed out again, so an answer sharing it is memory the candidate kept."""

    array: np.ndarray
    crc: int
    call: str


#: "adapter.op" (".vjp" for the backward) -> the arrays its latest call returned
_LATEST: dict[str, list[_Returned]] = {}


def arrays(out: Any) -> Iterator[tuple[str, np.ndarray]]:
    """The arrays of an answer (an array, or a mapping of name to array), with their names."""
    if isinstance(out, np.ndarray):
        yield "output", out
    elif isinstance(out, Mapping):
        for k, v in out.items():
            if isinstance(v, np.ndarray):
                yield f"gradient {k}", v


def plain(out: Any, what: str, call: str) -> None:
    """Fail an array that is a subclass of numpy.ndarray: it may compute (or change) when it is looked at."""
    if isinstance(out, np.ndarray) and type(out) is not np.ndarray:
        raise Violation(
            f"{what}: got a {type(out).__name__} (a subclass of numpy.ndarray), should be a plain numpy.ndarray: "
            f"a subclass can compute, or change, when it is compared [{call}]"
        )


def checksum(a: np.ndarray) -> int:
    return zlib.crc32(np.ascontiguousarray(a).tobytes()) if a.size else 0


def poison(inputs: Mapping[str, np.ndarray]) -> None:
    """Fill blocks the size of each input with POISON bytes and free them (the next allocations of those sizes
    are likely to get them)."""
    sizes = {v.nbytes for v in inputs.values() if v.nbytes}
    blocks = [np.full(n, POISON, np.uint8) for n in sorted(sizes) for _ in range(POISON_COPIES)]
    del blocks


def poisoned(a: np.ndarray, index: tuple[int, ...]) -> bool:
    """Whether the element at ``index`` holds the poison bit pattern (memory the candidate never wrote)."""
    if a.dtype.kind != "f" and a.dtype.name != "bfloat16":
        return False
    raw = np.ascontiguousarray(a[index]).view(np.uint8)
    return bool(raw.size) and bool((raw == POISON).all())


def threads() -> set[threading.Thread]:
    return set(threading.enumerate())


def check_aliasing(key: str, call: str, out: Any, inputs: Mapping[str, np.ndarray], in_place: bool) -> None:
    """The fresh rule (see the module's docstring)."""
    got = list(arrays(out))
    for what, a in got:
        if a.size == 0:
            continue
        if not in_place:
            for name, x in inputs.items():
                if np.shares_memory(a, x):
                    raise Violation(
                        f"{what} shares memory with its input {name}: an answer must be a fresh array, not a view "
                        f"of what it was handed [{call}]"
                    )
        for earlier in _LATEST.get(key, ()):
            if earlier.array.size and np.shares_memory(a, earlier.array):
                raise Violation(
                    f"{what} shares memory with the answer of the previous call, still held by its caller: the "
                    f"candidate kept that memory and handed it out again; each call must return a fresh array "
                    f"[this call: {call}; the previous: {earlier.call}]"
                )
    for i, (what, a) in enumerate(got):
        for other, b in got[i + 1 :]:
            if a.size and b.size and np.shares_memory(a, b):
                raise Violation(f"{what} and {other} share memory: each must be an array of its own [{call}]")


def check_kept(key: str, call: str) -> None:
    """The answer of the previous call of ``key``, held since, must be unchanged."""
    for earlier in _LATEST.get(key, ()):
        if checksum(earlier.array) != earlier.crc:
            raise Violation(
                "the answer of the previous call changed afterwards, while its caller held it: the candidate kept "
                f"its memory and wrote into it again [the previous call: {earlier.call}; changed during: {call}]"
            )


def settle(out: Any, before: set[threading.Thread], call: str) -> None:
    """Wait for the threads the call started and left running; the answer must be what it was when returned."""
    started = [t for t in threads() - before if t.is_alive()]
    if not started:
        return
    at_return = [(what, a.copy()) for what, a in arrays(out)]
    deadline = time.monotonic() + SETTLE
    for t in started:
        t.join(max(0.0, deadline - time.monotonic()))
    for (what, was), (_, now) in zip(at_return, arrays(out), strict=True):
        if not np.array_equal(was, now, equal_nan=True):
            i = tuple(int(j) for j in np.argwhere(~((was == now) | (np.isnan(was) & np.isnan(now))))[0])
            names = ", ".join(sorted(repr(t.name) for t in started))
            raise Violation(
                f"{what} changed after the call returned: got {was[i]} at {i} when it returned, {now[i]} after "
                f"the thread(s) it left running ({names}) went on; an answer must be complete on return [{call}]"
            )


def remember(key: str, call: str, out: Any) -> None:
    """Hold each array of the answer, with its checksum, until the next call of ``key``."""
    _LATEST[key] = [_Returned(a, checksum(a), call) for _, a in arrays(out)]

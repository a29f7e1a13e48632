"""Candidates that pass a weak check without computing each answer: the NumPy oracle, right in every value it
returns, delivering rms_norm's forward in one of the ways candidates optimised against a check do."""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import numpy as np

from transformer_conformance.adapters.numpy.adapter import NumpyAdapter


class KeepsOutputBuffer(NumpyAdapter):
    """One output array per shape and dtype, kept and overwritten by every call."""

    name = "keeps-output-buffer"

    def __init__(self) -> None:
        super().__init__()
        self.buffers: dict[tuple[tuple[int, ...], str], np.ndarray] = {}

    def forward(self, op: str, inputs: Mapping[str, np.ndarray], params: Mapping[str, Any]) -> np.ndarray:
        out = super().forward(op, inputs, params)
        if op != "rms_norm":
            return out
        buf = self.buffers.setdefault((out.shape, out.dtype.str), np.empty_like(out))
        buf[...] = out
        return buf


class FinishesLater(NumpyAdapter):
    """Returns zeros and writes the answer from a thread 20 ms later."""

    name = "finishes-later"

    def forward(self, op: str, inputs: Mapping[str, np.ndarray], params: Mapping[str, Any]) -> np.ndarray:
        out = super().forward(op, inputs, params)
        if op != "rms_norm":
            return out
        late = np.zeros_like(out)

        def finish() -> None:
            time.sleep(0.02)
            late[...] = out

        threading.Thread(target=finish, name="rms-norm-epilogue").start()
        return late


class Lazy(np.ndarray):
    """An ndarray subclass (values computed, but the type can compute when looked at)."""


class ReturnsSubclass(NumpyAdapter):
    name = "returns-subclass"

    def forward(self, op: str, inputs: Mapping[str, np.ndarray], params: Mapping[str, Any]) -> np.ndarray:
        out = super().forward(op, inputs, params)
        return out.view(Lazy) if op == "rms_norm" else out


class CachesByShape(NumpyAdapter):
    """The first answer for each shape and dtype, returned (as a fresh copy) for every later call of them."""

    name = "caches-by-shape"

    def __init__(self) -> None:
        super().__init__()
        self.cache: dict[tuple[Any, ...], np.ndarray] = {}

    def forward(self, op: str, inputs: Mapping[str, np.ndarray], params: Mapping[str, Any]) -> np.ndarray:
        if op != "rms_norm":
            return super().forward(op, inputs, params)
        key = (inputs["x"].shape, inputs["x"].dtype.str, inputs["weight"].shape, tuple(sorted(params.items())))
        if key not in self.cache:
            self.cache[key] = super().forward(op, inputs, params)
        return self.cache[key].copy()


class LastBitNoise(NumpyAdapter):
    """rms_norm in float32 whose every other call comes back one ulp off in its first element (as a reduction whose
    order a kernel picks at run time makes it): within the budget of float32 arithmetic every time, not the same
    bits twice in a row (a random order gave the same bits now and then on short rows)."""

    name = "last-bit-noise"

    def __init__(self) -> None:
        super().__init__()
        self.conventions = replace(self.conventions, compute_dtype="float32")
        self._calls = 0

    def forward(self, op: str, inputs: Mapping[str, np.ndarray], params: Mapping[str, Any]) -> np.ndarray:
        x = inputs.get("x")
        if op != "rms_norm" or x is None or x.dtype != np.float32 or params.get("eps") is None:
            return super().forward(op, inputs, params)
        ms = np.mean(np.square(x), axis=-1, keepdims=True, dtype=np.float32)
        out: np.ndarray = x * (np.float32(1) / np.sqrt(ms + np.float32(params["eps"]))) * inputs["weight"]
        self._calls += 1
        if self._calls % 2 and out.size:
            flat = out.reshape(-1)
            flat[0] = np.nextafter(flat[0], np.float32(np.inf))
        return out


class LastBitNoiseDeclared(LastBitNoise):
    """The same, declaring rms_norm non-deterministic: held to the budget at each call, not to bit-identity."""

    name = "last-bit-noise-declared"

    def __init__(self) -> None:
        super().__init__()
        self.conventions = replace(self.conventions, nondeterministic=frozenset({"rms_norm"}))


#: candidate -> (the check whose failure reports it, words its message must hold)
CAUGHT: dict[type, tuple[str, str]] = {
    KeepsOutputBuffer: ("rms_norm/forward", "the candidate kept"),
    FinishesLater: ("rms_norm/forward", "changed after the call returned"),
    ReturnsSubclass: ("rms_norm/forward", "a subclass of numpy.ndarray"),
    CachesByShape: ("integrity/rms_norm", "cached by shape"),
    LastBitNoise: ("integrity/rms_norm", "two identical calls gave different bits"),
}

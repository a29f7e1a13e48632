"""Candidates that misbehave in the ways real ones do: raise, return NaN, the wrong shape or dtype, or
declare only part of the contract. Each is the NumPy oracle with one thing wrong in rms_norm."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from transformer_conformance.adapters import Capability
from transformer_conformance.adapters.numpy.adapter import NumpyAdapter


class Raises(NumpyAdapter):
    name = "raises"

    def forward(self, op: str, inputs: Mapping[str, np.ndarray], params: Mapping[str, Any]) -> np.ndarray:
        if op == "rms_norm":
            raise ValueError("kernel launch failed: <script>alert(1)</script>\nsecond line")
        return super().forward(op, inputs, params)


class ReturnsNaN(NumpyAdapter):
    name = "returns-nan"

    def forward(self, op: str, inputs: Mapping[str, np.ndarray], params: Mapping[str, Any]) -> np.ndarray:
        out = super().forward(op, inputs, params)
        if op == "rms_norm":
            out = out.copy()
            out.flat[-1] = np.nan
        return out


class WrongShape(NumpyAdapter):
    name = "wrong-shape"

    def forward(self, op: str, inputs: Mapping[str, np.ndarray], params: Mapping[str, Any]) -> np.ndarray:
        out = super().forward(op, inputs, params)
        return out[..., :-1] if op == "rms_norm" else out


class WrongDtype(NumpyAdapter):
    name = "wrong-dtype"

    def forward(self, op: str, inputs: Mapping[str, np.ndarray], params: Mapping[str, Any]) -> np.ndarray:
        out = super().forward(op, inputs, params)
        return out.astype(np.float64) if op == "rms_norm" else out


class ModifiesInput(NumpyAdapter):
    name = "modifies-input"

    def forward(self, op: str, inputs: Mapping[str, np.ndarray], params: Mapping[str, Any]) -> np.ndarray:
        out = super().forward(op, inputs, params)
        if op == "rms_norm":
            inputs["x"][...] = 0
        return out


class OnlyRmsNormFloat32(NumpyAdapter):
    """Declares one operation in one dtype, without gradients."""

    name = "only-rms-float32"

    def __init__(self) -> None:
        super().__init__()
        self.capabilities = {"rms_norm": Capability(dtypes=frozenset({"float32"}), grad=False)}


class DeclaresNothing(NumpyAdapter):
    """A candidate whose capabilities are empty: nothing of it can be checked."""

    name = "declares-nothing"

    def __init__(self) -> None:
        super().__init__()
        self.capabilities = {}


class NotAnAdapter:
    name = "broken"


def _with(**attrs: Any) -> NumpyAdapter:
    adapter = NumpyAdapter()
    for k, v in attrs.items():
        setattr(adapter, k, v)
    return adapter


not_an_adapter = NotAnAdapter()
bad_conventions = _with(conventions={"rope_layout": "half"})
unknown_op = _with(capabilities={"flash_attention": Capability()})
capabilities_list = _with(capabilities=["rms_norm"])


class InterruptsRun(NumpyAdapter):
    """Presses Ctrl-C (SIGINT to its own process) the first time it is asked for a RoPE."""

    name = "interrupts"

    def forward(self, op: str, inputs: Mapping[str, np.ndarray], params: Mapping[str, Any]) -> np.ndarray:
        if op == "rope":
            import os
            import signal

            # as at a terminal: a process started in the background of a non-interactive shell inherits
            # SIGINT ignored, and Python then leaves it ignored
            signal.signal(signal.SIGINT, signal.default_int_handler)
            os.kill(os.getpid(), signal.SIGINT)
        return super().forward(op, inputs, params)


class Hangs(NumpyAdapter):
    """Never returns from rms_norm."""

    name = "hangs"

    def forward(self, op: str, inputs: Mapping[str, np.ndarray], params: Mapping[str, Any]) -> np.ndarray:
        if op == "rms_norm":
            import time

            time.sleep(3600)
        return super().forward(op, inputs, params)


class EndsProcess(NumpyAdapter):
    """Ends its own process from inside rms_norm, as a crashing kernel or a stray os._exit does."""

    name = "ends-process"

    def forward(self, op: str, inputs: Mapping[str, np.ndarray], params: Mapping[str, Any]) -> np.ndarray:
        if op == "rms_norm":
            import os

            os._exit(3)
        return super().forward(op, inputs, params)


class OnePercentOff(NumpyAdapter):
    """Every output and gradient 1 % too large: a candidate that fails every check it can (how long a fully
    failing run takes: benchmarks/bench_conformance.py)."""

    name = "one-percent-off"

    def forward(self, op: str, inputs: Mapping[str, np.ndarray], params: Mapping[str, Any]) -> np.ndarray:
        out = super().forward(op, inputs, params)
        if not np.issubdtype(out.dtype, np.floating) and out.dtype.name != "bfloat16":
            return out
        return (out.astype(np.float64) * 1.01).astype(out.dtype)

    def vjp(
        self, op: str, inputs: Mapping[str, np.ndarray], params: Mapping[str, Any], cotangent: np.ndarray
    ) -> dict[str, np.ndarray]:
        grads = super().vjp(op, inputs, params, cotangent)
        return {k: (v.astype(np.float64) * 1.01).astype(v.dtype) for k, v in grads.items()}


class MarkupName(OnePercentOff):
    """A candidate whose name is Markdown and HTML: a report must show it as text."""

    name = "evil|*name*<b>`x`"

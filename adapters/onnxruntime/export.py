"""The converter path: the torch adapter's implementations exported with ``torch.onnx.export`` and run by ONNX
Runtime on the CPU execution provider.

Each operation is wrapped in a ``torch.nn.Module`` whose forward calls the ``torch`` adapter's implementation
with the call's parameters as constants, exported by torch's default ONNX exporter (``dynamo=True``, through
onnxscript; its default opset) with every dimension dynamic, and run by an ``InferenceSession`` (one thread,
default graph optimisation). An export takes seconds, so the sessions are cached per operation, dtype,
parameters and *shape pattern*: which dimensions are 0 or 1 (torch.export specialises those) and which sizes
are equal (it may tie them). A call whose shape the cached graph refuses is exported again for its exact
shapes. Forward only: an exported inference graph has no backward.

What it tests is the exporter and ONNX Runtime together against the torch adapter's declarations: where the
exported graph computes differently from torch eager, the difference shows (docs/adapters.md,
"onnxruntime-export").
"""

from __future__ import annotations

import io
import logging
import warnings
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import onnxruntime as ort
import torch

from transformer_conformance.adapters.contract import OPS, Capability
from transformer_conformance.adapters.onnxruntime import graphs
from transformer_conformance.adapters.onnxruntime.adapter import DTYPE_NAMES
from transformer_conformance.adapters.torch.adapter import TorchAdapter
from transformer_conformance.adapters.torch.tensors import to_torch
from transformer_conformance.adapters.versions import ONNXSCRIPT, SUPPORTED, TORCH_EXPORTER, describe, require

ALL = frozenset({"float32", "float16", "bfloat16"})
F32_F16 = frozenset({"float32", "float16"})


def check_export_versions(torch_version: str = torch.__version__, onnxscript_version: str | None = None) -> None:
    """Refuse, with one line, a torch or onnxscript the adapter's declarations were not measured with."""
    if onnxscript_version is None:
        from importlib.metadata import version

        onnxscript_version = version("onnxscript")
    versions = {"torch": torch_version, "onnxscript": onnxscript_version}
    require("onnxruntime-export", (TORCH_EXPORTER, ONNXSCRIPT), versions)


def shape_pattern(arrays: list[np.ndarray]) -> tuple[tuple[int | str, ...], ...]:
    """The shapes with 0 and 1 kept and every other size named by its first occurrence (equal sizes, one name)."""
    names: dict[int, str] = {}
    return tuple(tuple(s if s < 2 else names.setdefault(s, f"s{len(names)}") for s in a.shape) for a in arrays)


class _Call(torch.nn.Module):
    """One contract operation of the torch adapter as a module: positional tensors in, parameters fixed."""

    def __init__(self, fn: Callable[..., torch.Tensor], names: tuple[str, ...], params: Mapping[str, Any]) -> None:
        super().__init__()
        self.fn, self.names, self.params = fn, names, dict(params)

    def forward(self, *tensors: torch.Tensor) -> torch.Tensor:
        return self.fn(**dict(zip(self.names, tensors, strict=True)), **self.params)


class OnnxRuntimeExportAdapter:
    """The built-in ``onnxruntime-export`` adapter: torch code through ``torch.onnx.export`` into ONNX Runtime."""

    name = "onnxruntime-export"
    #: the releases it supports (adapters/versions.py; docs/adapters.md)
    supported = SUPPORTED["onnxruntime-export"]

    #: the torch adapter's operations this adapter exports
    EXPORTED = ("rms_norm", "layer_norm", "rope", "swiglu_mlp", "cross_entropy", "z_loss")

    def __init__(self, device: str = "cpu") -> None:
        require(self.name, self.supported)
        if device != "cpu":
            raise RuntimeError(
                f"the onnxruntime-export adapter runs on the CPU execution provider only, not {device!r}"
            )
        self.torch = TorchAdapter("cpu")
        self.conventions = self.torch.conventions
        # the exported norms and RoPE compute in float32 between Casts, so bfloat16 runs; the MLP's MatMul(13), the
        # loss's SoftmaxCrossEntropyLoss function and z-loss's ReduceLogSumExp(18) have no bfloat16 CPU kernel
        # a graph is exported per shape pattern (above): the checks draw their shapes from the plan, and the count of
        # exports is the report's
        self.capabilities: dict[str, Capability] = {
            op: Capability(
                dtypes=ALL if op in ("rms_norm", "layer_norm", "rope") else F32_F16, grad=False, compiles="per_shape"
            )
            for op in self.EXPORTED
        }
        self._sessions: dict[tuple[Any, ...], tuple[ort.InferenceSession, list[str], str]] = {}
        self._exports = 0

    def compiles(self) -> int:
        """The graphs exported (and sessions built) so far."""
        return self._exports

    def environment(self) -> dict[str, str]:
        from importlib.metadata import version

        import onnx

        return {
            "onnxruntime": ort.__version__,
            "onnx": onnx.__version__,
            "onnxscript": version("onnxscript"),
            "torch": torch.__version__,
            "numpy": np.__version__,
            "provider": "CPUExecutionProvider",
            "supports": describe(self.supported),
            "device": "cpu",
        }

    def _export(
        self, op: str, names: tuple[str, ...], arrays: list[np.ndarray], params: Mapping[str, Any], exact: bool
    ) -> tuple[ort.InferenceSession, list[str], str]:
        self._exports += 1
        args = tuple(to_torch(a, "cpu") for a in arrays)
        # forward(*tensors): the dynamic shapes of the one variadic argument
        dims = None if exact else (tuple({i: torch.export.Dim.AUTO for i in range(a.ndim)} for a in arrays),)
        with warnings.catch_warnings(), _quiet():
            warnings.simplefilter("ignore")
            program = torch.onnx.export(
                _Call(self.torch.impl[op], names, params),
                args,
                dynamo=True,
                dynamic_shapes=dims,
                input_names=list(names),
                output_names=["y"],
                verbose=False,
            )
        assert program is not None
        proto = program.model_proto
        sess = graphs.session(proto.SerializeToString())
        inputs = [i.name for i in sess.get_inputs()]  # an input the graph does not read is dropped by the exporter
        return sess, inputs, sess.get_outputs()[0].name

    def forward(self, op: str, inputs: Mapping[str, np.ndarray], params: Mapping[str, Any]) -> np.ndarray:
        spec = OPS[op]
        names = spec.inputs + spec.int_inputs
        arrays = [inputs[n] for n in names]
        dtype = arrays[0].dtype
        base = (op, DTYPE_NAMES[np.dtype(dtype)], tuple(sorted(params.items())))
        for exact in (False, True):
            key = (*base, tuple(a.shape for a in arrays) if exact else shape_pattern(arrays))
            entry = self._sessions.get(key)
            if entry is None:
                entry = self._sessions[key] = self._export(op, names, arrays, params, exact)
            sess, graph_inputs, output = entry
            feeds = {n: a for n, a in zip(names, arrays, strict=True) if n in graph_inputs}
            try:
                return graphs.run(sess, feeds, output, dtype)
            except ort.capi.onnxruntime_pybind11_state.Fail:  # type: ignore[attr-defined]
                if exact:
                    raise
                # the graph for this pattern was specialised to other sizes: export this call's exact shapes
        raise AssertionError("unreachable")

    def vjp(
        self, op: str, inputs: Mapping[str, np.ndarray], params: Mapping[str, Any], cotangent: np.ndarray
    ) -> dict[str, np.ndarray]:
        raise NotImplementedError("an exported inference graph has no backward (every operation is grad=False)")


class _quiet:
    """Silence the exporter's progress messages (it prints to stdout and logs warnings for every export)."""

    def __enter__(self) -> None:
        self._level = logging.root.manager.disable
        logging.disable(logging.WARNING)
        self._stdout = io.StringIO()
        import contextlib

        self._redirect = contextlib.redirect_stdout(self._stdout)
        self._redirect.__enter__()

    def __exit__(self, *exc: object) -> None:
        self._redirect.__exit__(None, None, None)
        logging.disable(self._level)

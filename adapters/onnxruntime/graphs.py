"""Building one-operator ONNX graphs, running them on the CPU execution provider, and the tensors in between.

NumPy arrays cross into ONNX Runtime as ``OrtValue``s. onnxruntime's Python binding has no NumPy type for
bfloat16 (``ml_dtypes.bfloat16`` is refused on the way in and a bfloat16 output has no ``.numpy()``), so
bfloat16 tensors travel as their uint16 bit patterns, tagged with ONNX's BFLOAT16 element type, and come
back by copying the output's bytes.
"""

from __future__ import annotations

import ctypes
from collections.abc import Mapping, Sequence

import ml_dtypes
import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper

#: the ONNX element type of each contract dtype
ELEM: dict[str, int] = {"float32": TensorProto.FLOAT, "float16": TensorProto.FLOAT16, "bfloat16": TensorProto.BFLOAT16}

#: IR version of the models built here (onnxruntime 1.32 reads up to 11; onnx's default may be newer)
IR_VERSION = 10

MS_DOMAIN = "com.microsoft"


def value(name: str, elem: int) -> onnx.ValueInfoProto:
    """A graph input or output of element type ``elem`` and unknown shape (one session serves every shape)."""
    return helper.make_tensor_value_info(name, elem, None)


def model(
    nodes: Sequence[onnx.NodeProto],
    inputs: Sequence[tuple[str, int]],
    outputs: Sequence[tuple[str, int]],
    opset: int,
    contrib: bool = False,
) -> bytes:
    """A serialised model of ``nodes`` with the default domain at ``opset`` (and com.microsoft when ``contrib``)."""
    graph = helper.make_graph(list(nodes), "op", [value(n, t) for n, t in inputs], [value(n, t) for n, t in outputs])
    imports = [helper.make_opsetid("", opset)] + ([helper.make_opsetid(MS_DOMAIN, 1)] if contrib else [])
    m = helper.make_model(graph, opset_imports=imports, producer_name="transformer-conformance")
    m.ir_version = IR_VERSION
    return m.SerializeToString()


def session(serialised: bytes) -> ort.InferenceSession:
    """An InferenceSession on the CPU provider, one intra-op thread, default (full) graph optimisation."""
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    options.log_severity_level = 3
    return ort.InferenceSession(serialised, options, providers=["CPUExecutionProvider"])


def to_ort(a: np.ndarray) -> ort.OrtValue:
    """A NumPy array as an OrtValue (bfloat16 through its bit pattern)."""
    a = np.ascontiguousarray(a)
    if a.dtype == ml_dtypes.bfloat16:
        return ort.OrtValue.ortvalue_from_numpy_with_onnx_type(
            a.view(np.uint16), onnx_element_type=TensorProto.BFLOAT16
        )
    return ort.OrtValue.ortvalue_from_numpy(a)


def from_ort(v: ort.OrtValue, dtype: np.dtype) -> np.ndarray:
    """An output OrtValue as a NumPy array of ``dtype`` (a bfloat16 output's bytes copied out)."""
    if dtype != ml_dtypes.bfloat16 or v.data_type() != "tensor(bfloat16)":
        return np.asarray(v.numpy())  # as it came: a wrong dtype is the suite's to see
    out = np.empty(v.shape(), dtype=np.uint16)
    if out.size:
        ctypes.memmove(out.ctypes.data, v.data_ptr(), out.nbytes)
    return out.view(ml_dtypes.bfloat16)


def run(sess: ort.InferenceSession, feeds: Mapping[str, np.ndarray], output: str, dtype: np.dtype) -> np.ndarray:
    """Run ``sess`` on ``feeds`` and return its output ``output`` as a NumPy array of ``dtype``."""
    values = {k: to_ort(a) for k, a in feeds.items()}
    (out,) = sess.run_with_ort_values([output], values)
    return from_ort(out, dtype)

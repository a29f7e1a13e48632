"""The oracle itself as a candidate: float64 NumPy, rounded once to the dtype under test.

A self-check of the suite: the oracle must pass every check, in every dtype, within half an ulp.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from transformer_conformance.adapters.contract import OPS, Capability, Conventions
from transformer_conformance.adapters.versions import SUPPORTED, describe, require
from transformer_conformance.reference import accounting, oracle
from transformer_conformance.reference.formats import dtype_name, fmt
from transformer_conformance.reference.mlp import ffn_hidden_dim
from transformer_conformance.reference.swiglu import swiglu_hidden_dim


def _as_float64(op: str, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Floating inputs widened to float64 (exactly: every tested dtype embeds in it); integers kept."""
    return {k: v if k in OPS[op].int_inputs else np.asarray(v, dtype=np.float64) for k, v in inputs.items()}


class NumpyAdapter:
    """The built-in ``numpy`` adapter."""

    name = "numpy"
    #: the releases it supports (adapters/versions.py; docs/adapters.md)
    supported = SUPPORTED["numpy"]

    def __init__(
        self,
        rope_layout: str = "interleaved",
        causal_alignment: str = "bottom_right",
        sliding_window: str = "inclusive",
    ) -> None:
        require(self.name, self.supported)
        self.conventions = Conventions(
            rope_layout=rope_layout,  # type: ignore[arg-type]
            causal_alignment=causal_alignment,  # type: ignore[arg-type]
            sliding_window=sliding_window,  # type: ignore[arg-type]
            rope_angle_dtype="float64",
            compute_dtype="float64",
            eps_defaults={"rms_norm": 1e-6, "layer_norm": 1e-5},
        )
        self.capabilities = {op: Capability() for op in OPS}

    def environment(self) -> dict[str, str]:
        return {"numpy": np.__version__, "device": "cpu", "supports": describe(self.supported)}

    def forward(self, op: str, inputs: Mapping[str, np.ndarray], params: Mapping[str, Any]) -> np.ndarray:
        if op == "ffn_hidden_dim":
            return np.asarray(ffn_hidden_dim(**params))
        if op == "swiglu_hidden_dim":
            return np.asarray(
                swiglu_hidden_dim(params["d"], params.get("multiple_of", 256), params.get("ffn_dim_multiplier"))
            )
        if op == "param_count":
            return np.asarray(accounting.param_count(accounting.ModelConfig(**params)))
        dtype = fmt(dtype_name(inputs[OPS[op].inputs[0]]))
        return dtype.round(oracle.forward(op, _as_float64(op, inputs), params, self.conventions, dtype))

    def vjp(
        self, op: str, inputs: Mapping[str, np.ndarray], params: Mapping[str, Any], cotangent: np.ndarray
    ) -> dict[str, np.ndarray]:
        dtype = fmt(dtype_name(inputs[OPS[op].inputs[0]]))
        grads = oracle.vjp(
            op, _as_float64(op, inputs), params, self.conventions, dtype, np.asarray(cotangent, dtype=np.float64)
        )
        return {k: dtype.round(v) for k, v in grads.items()}

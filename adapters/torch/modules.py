"""The contract's ``forward`` and ``vjp`` for an adapter whose operations are a library's own ``torch.nn`` modules
(the HF, torchtune and LitGPT adapters): each call builds the module, gives its parameters the suite's values
(:meth:`ModuleAdapter._hold`), runs it on the suite's tensors, and reads the gradients of the inputs and of the
parameters that hold suite tensors (adapters/torch/tensors.py)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import torch

from transformer_conformance.adapters.torch.tensors import backward_grads, input_tensors, to_numpy


class ModuleAdapter:
    """What the module-based adapters share; a subclass sets ``device`` and provides :meth:`_impl`."""

    device: str

    def __init__(self) -> None:
        #: (the suite's tensor, the module parameter holding it) of the call in progress
        self._params: list[tuple[torch.Tensor, Any]] = []

    def _impl(self, op: str) -> Callable[..., torch.Tensor]:
        """The function that runs ``op`` on the suite's tensors and parameters."""
        raise NotImplementedError

    def _hold(self, suite: torch.Tensor, param: torch.Tensor, value: torch.Tensor) -> None:
        """Give a module parameter the suite's value; its gradient is then the suite tensor's."""
        with torch.no_grad():
            param.copy_(value)
        if suite.requires_grad:
            self._params.append((suite, param))

    def _call(
        self, op: str, inputs: Mapping[str, np.ndarray], params: Mapping[str, Any], grad: bool
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        tensors = input_tensors(op, inputs, self.device, grad)
        self._params = []
        return self._impl(op)(**tensors, **params), tensors

    def forward(self, op: str, inputs: Mapping[str, np.ndarray], params: Mapping[str, Any]) -> np.ndarray:
        with torch.no_grad():
            out, _ = self._call(op, inputs, params, grad=False)
        return to_numpy(out)

    def vjp(
        self, op: str, inputs: Mapping[str, np.ndarray], params: Mapping[str, Any], cotangent: np.ndarray
    ) -> dict[str, np.ndarray]:
        out, tensors = self._call(op, inputs, params, grad=True)
        return backward_grads(op, inputs, out, tensors, cotangent, self.device, self._params)

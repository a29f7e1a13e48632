"""PyTorch through ``torch.compile``: the torch adapter's implementations compiled by inductor.

Inductor fuses the element-wise work into generated C++ (CPU) or Triton (GPU) kernels. Hypothesis varies
shapes from one example to the next, so each operation is compiled once with dynamic shapes
(``dynamic=True``): sizes become symbols and a new shape reuses the compiled kernel instead of
recompiling. What still recompiles is a new rank, dtype or parameter value, and sizes 0 and 1, which
the compiler specialises; the compiled graphs are cached for the whole run.
"""

from __future__ import annotations

import torch

from adapters.torch_adapter import TorchAdapter


class TorchCompileAdapter(TorchAdapter):
    """The built-in ``torch-compile`` adapter."""

    name = "torch-compile"

    def __init__(self, device: str = "cpu", rope_layout: str = "half") -> None:
        super().__init__(device, rope_layout)
        # generous cache limits: a run meets many (rank, dtype, parameter) combinations per operation
        torch._dynamo.config.cache_size_limit = max(torch._dynamo.config.cache_size_limit, 256)
        torch._dynamo.config.accumulated_cache_size_limit = max(torch._dynamo.config.accumulated_cache_size_limit, 4096)
        self.impl = {op: torch.compile(fn, dynamic=True) for op, fn in self.impl.items()}

    def environment(self) -> dict[str, str]:
        env = super().environment()
        env["compiler"] = "inductor (dynamic shapes)"
        return env

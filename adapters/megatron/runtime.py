"""What Megatron-Core needs around its modules on a CPU host: a model-parallel world of one process, and its
"current device" being the CPU.

* **The process groups.** The tensor-parallel layers (``ColumnParallelLinear``), ``vocab_parallel_cross_entropy``
  and the MoE token counts (``get_tokens_per_expert_and_token_count``) ask ``parallel_state`` for their groups.
  :func:`ensure_model_parallel` starts ``torch.distributed`` with the ``gloo`` backend on an in-process
  ``HashStore`` (rank 0 of a world of one: no network) and ``parallel_state.initialize_model_parallel(1, 1)``, once
  per process (an already initialised world is kept). Every collective of a group of one is then the identity.
* **The current device.** Megatron-Core places its buffers on ``torch.cuda.current_device()``: the rotary
  embeddings move their ``inv_freq`` there in ``get_emb`` (``RotaryEmbedding``, ``YarnRotaryEmbedding``) and build it
  there (``MultimodalRotaryEmbedding``). On a host without CUDA that call raises. :func:`on_cpu` makes it return
  ``"cpu"`` for the duration of one library call, so the same lines move the tensors to the CPU (a no-op): nothing
  else of the library's code is changed.
* **Its compiled functions.** Megatron-Core's ``jit_fuser`` is ``torch.compile`` (torch ≥ 2.2): the activations
  (``fast_gelu``, ``quick_gelu``, ``squared_relu``) and ``bias_swiglu_impl``'s ``swiglu``/``swiglu_back`` are compiled
  (inductor; in float32 inside, one rounding per output). dynamo compiles a graph per dtype, grad mode and shape
  specialisation and, past ``recompile_limit`` (8) graphs of one function, runs it eagerly for good — op by op in
  the input dtype, other numbers (a tanh GELU of bfloat16 or float16 then saturates: ``fast_gelu(-4.36)`` is 0, not
  −1.1·10⁻⁵). A training run has a few shapes; the suite draws hundreds, so which path a call took would depend on
  the calls before it. :func:`compiled` lifts the limit to :data:`GRAPHS` during the adapter's calls: every call
  runs the compiled functions, as a run of fixed shapes does.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from unittest import mock

import torch
import torch.distributed as dist


def ensure_model_parallel() -> None:
    """A gloo world of one process and Megatron-Core's model-parallel groups of size one (idempotent)."""
    from megatron.core import parallel_state

    if not dist.is_initialized():
        dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    if not parallel_state.model_parallel_is_initialized():
        parallel_state.initialize_model_parallel(tensor_model_parallel_size=1, pipeline_model_parallel_size=1)


#: the graphs dynamo may compile per function during the adapter's calls (its default is 8)
GRAPHS = 512


@contextmanager
def compiled() -> Iterator[None]:
    """Megatron-Core's ``jit_fuser`` functions stay compiled inside, whatever was compiled before (module docstring)."""
    import torch._dynamo

    with torch._dynamo.config.patch(recompile_limit=GRAPHS, accumulated_recompile_limit=GRAPHS * 8):
        yield


@contextmanager
def on_cpu() -> Iterator[None]:
    """``torch.cuda.current_device()`` is ``"cpu"`` inside (the module docstring); where CUDA is present it is left
    alone."""
    if torch.cuda.is_available():
        yield
        return
    with mock.patch.object(torch.cuda, "current_device", lambda: "cpu"):
        yield

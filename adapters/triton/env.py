"""Triton's interpreter on machines without CUDA, switched on before anything imports triton.

Triton reads ``TRITON_INTERPRET`` as each kernel is decorated, its own library functions (``tl.sum``,
``tl.sigmoid``) when it is imported: a Triton-kernel adapter (liger) can run on a CPU only if the variable
was set before the first import of triton — and other libraries import it first (transformers does at
import, torch.compile's inductor when it compiles). The conformance and benchmark plugins call this before
they load any adapter. Without CUDA no Triton kernel can run compiled, so nothing else changes; with CUDA,
or with the variable already set, or without triton installed, it does nothing.
"""

from __future__ import annotations

import importlib.util
import os
import sys


def interpret_triton_without_cuda() -> None:
    if "TRITON_INTERPRET" in os.environ or "triton" in sys.modules or importlib.util.find_spec("triton") is None:
        return
    import torch  # triton's kernels are launched through torch; it is installed wherever triton is

    if not torch.cuda.is_available():
        os.environ["TRITON_INTERPRET"] = "1"


def check_device(device: str, interpreted: bool, library: str) -> None:
    """Refuse, with one line, a device a Triton-kernel adapter cannot run ``library``'s kernels on: CUDA without a
    GPU, or the CPU where the kernels were defined for compilation (``interpreted`` False)."""
    if device.startswith("cuda"):
        import torch

        if not torch.cuda.is_available():
            raise RuntimeError("device 'cuda' requested but torch.cuda.is_available() is False")
    elif not interpreted:
        raise RuntimeError(
            f"{library}'s kernels were defined for compilation (triton imported before this adapter, or "
            "TRITON_INTERPRET=0); to run them on the CPU set TRITON_INTERPRET=1 before the run"
        )

"""A GEMM that splits a long reduction (split-K) and adds the slices' results in the input dtype.

cuBLAS may split the reduction of a float16 or bfloat16 GEMM into slices and add the slices' partial results
in that dtype ("reduced precision reduction", which torch allows by default for float16 and bfloat16 GEMMs on
CUDA): each slice is right, their sum rounds once per slice. The kernel picks split-K only for long reductions,
so every small case of a check is computed exactly as an unsplit GEMM would — only a reduction of thousands of
terms, the size regimes of docs/coverage.md, shows it.
"""

from __future__ import annotations

from typing import Any

import torch

#: the reduction length from which the GEMM splits, and the slice it splits into
SPLIT_FROM = 4096
SLICE = 512


def split_k_matmul(a: torch.Tensor, b: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``a @ b`` of float32 operands, returned in float32. Below SPLIT_FROM reduction terms (and in float32)
    one float32 GEMM; from it on, float32 GEMMs over slices of SLICE terms, each result rounded to ``dtype``
    and added one after another in ``dtype``."""
    k = a.shape[-1]
    if k < SPLIT_FROM or dtype == torch.float32:
        return a @ b
    total = (a[..., :SLICE] @ b[:SLICE]).to(dtype)
    for s in range(SLICE, k, SLICE):
        total = total + (a[..., s : s + SLICE] @ b[s : s + SLICE]).to(dtype)
    return total.float()


class SplitKInputGrad(torch.autograd.Function):
    """``a @ b`` of float32 operands (``b`` 2-D), exact in float32; its backward computes ∂a = g·bᵀ — a
    reduction over b's columns — with ``split_k_matmul`` in ``dtype`` (∂b is a plain float32 GEMM)."""

    @staticmethod
    def forward(ctx: Any, a: torch.Tensor, b: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        ctx.save_for_backward(a, b)
        ctx.dtype = dtype
        return a @ b

    @staticmethod
    def backward(ctx: Any, g: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, None]:
        a, b = ctx.saved_tensors
        grad_b = a.reshape(-1, a.shape[-1]).T @ g.reshape(-1, g.shape[-1])
        return split_k_matmul(g, b.T.contiguous(), ctx.dtype), grad_b, None

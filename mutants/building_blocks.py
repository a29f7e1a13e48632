"""Torch building blocks from which the mutants are made: a RoPE with switchable defects, reductions
whose partial sums round to the input dtype, and autograd functions with a deliberately wrong backward.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F


def tree_sum(t: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """Sum along ``dim`` pairwise, every partial sum rounded to ``t``'s dtype (a tree reduction that keeps
    its accumulator in bfloat16/float16)."""
    t = t.movedim(dim, -1)
    while t.shape[-1] > 1:
        if t.shape[-1] % 2:
            t = torch.cat((t, torch.zeros_like(t[..., :1])), dim=-1)
        t = t[..., 0::2] + t[..., 1::2]
    return t[..., 0]


def matmul_low_precision_sums(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``a @ b`` with products and partial sums rounded to the input dtype."""
    return tree_sum(a[..., :, None] * b, dim=-2)


def rope_variant(
    x: torch.Tensor,
    positions: torch.Tensor,
    base: float,
    rotary_dim: int | None,
    layout: str,
    *,
    exponent_step: int = 2,
    freq_dim: int | None = None,
    pos_dtype: torch.dtype | None = None,
    angle_dtype: torch.dtype = torch.float32,
    table_dtype: torch.dtype | None = None,
    sign: float = 1.0,
    rotate_last: bool = False,
    angles_by_matmul: bool = False,
) -> torch.Tensor:
    """RoPE as ``adapters.torch_adapter.rope_torch`` computes it, with one knob per real-world defect:

    * ``exponent_step``: θ_i = base^(−step·i/d) for pair i (1: the exponent i/d instead of 2i/d);
    * ``freq_dim``: the d in the exponent (the head width instead of rotary_dim, for partial rotary);
    * ``pos_dtype``: positions cast to this dtype before the angles are formed;
    * ``angle_dtype``: precision of the inverse frequencies and the angles;
    * ``table_dtype``: the cos/sin tables rounded to this dtype before the rotation;
    * ``sign``: −1 rotates by −m·θ_i;
    * ``rotate_last``: rotate the last rotary_dim features instead of the first;
    * ``angles_by_matmul``: the angles as the matmul ``inv_freq[:, None] @ positions[None, :]`` (transformers
      4.38.0's LlamaRotaryEmbedding): exact outside autocast, run in bfloat16 or float16 inside it.
    """
    d = x.shape[-1]
    rd = d if rotary_dim is None else rotary_dim
    fd = rd if freq_dim is None else freq_dim
    pair = torch.arange(0, rd // 2, device=x.device, dtype=torch.int64)
    inv_freq = 1.0 / (base ** ((exponent_step * pair).to(angle_dtype) / fd))
    pos = positions if pos_dtype is None else positions.to(pos_dtype)
    if angles_by_matmul:
        angles = (inv_freq.to(angle_dtype)[:, None] @ pos.to(angle_dtype)[None, :]).transpose(0, 1)
    else:
        angles = pos.to(angle_dtype)[:, None] * inv_freq.to(angle_dtype)[None, :]
    cos, sin = angles.cos().float(), (sign * angles.sin()).float()
    if table_dtype is not None:
        cos, sin = cos.to(table_dtype).float(), sin.to(table_dtype).float()
    xf = x.float()
    rot, rest = (xf[..., d - rd :], xf[..., : d - rd]) if rotate_last else (xf[..., :rd], xf[..., rd:])
    if layout == "interleaved":
        a, b = rot[..., 0::2], rot[..., 1::2]
        out = torch.stack((a * cos - b * sin, a * sin + b * cos), dim=-1).flatten(-2)
    else:
        a, b = rot[..., : rd // 2], rot[..., rd // 2 :]
        out = torch.cat((a * cos - b * sin, a * sin + b * cos), dim=-1)
    parts = (rest, out) if rotate_last else (out, rest)
    return torch.cat(parts, dim=-1).to(x.dtype)


class RopeForwardRotationInBackward(torch.autograd.Function):
    """RoPE whose backward applies the forward rotation R_m to the gradient instead of its transpose R_−m."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, positions: torch.Tensor, base: float, rd: int | None, layout: str) -> Any:
        ctx.args = (positions, base, rd, layout)
        return rope_variant(x, positions, base, rd, layout)

    @staticmethod
    def backward(ctx: Any, g: torch.Tensor) -> Any:
        positions, base, rd, layout = ctx.args
        return rope_variant(g, positions, base, rd, layout), None, None, None, None


class SiluSigmoidGrad(torch.autograd.Function):
    """SiLU whose backward uses σ(z) as the derivative, dropping the z·σ(z)(1 − σ(z)) term."""

    @staticmethod
    def forward(ctx: Any, z: torch.Tensor) -> Any:
        ctx.save_for_backward(z)
        return F.silu(z)

    @staticmethod
    def backward(ctx: Any, g: torch.Tensor) -> Any:
        (z,) = ctx.saved_tensors
        return g * torch.sigmoid(z)


class SquareWithoutTwo(torch.autograd.Function):
    """z² whose backward forgets the factor 2 (returns g·z)."""

    @staticmethod
    def forward(ctx: Any, z: torch.Tensor) -> Any:
        ctx.save_for_backward(z)
        return z * z

    @staticmethod
    def backward(ctx: Any, g: torch.Tensor) -> Any:
        (z,) = ctx.saved_tensors
        return g * z


class CrossEntropyFusedBackward(torch.autograd.Function):
    """Per-token cross-entropy with a hand-written backward softmax − onehot, scaled by ``scale``; with
    ``use_upstream`` False it ignores the incoming gradient (as a fused kernel that assumes it is 1)."""

    @staticmethod
    def forward(ctx: Any, logits: torch.Tensor, targets: torch.Tensor, use_upstream: bool, scale: float) -> Any:
        ctx.save_for_backward(logits, targets)
        ctx.use_upstream, ctx.scale = use_upstream, scale
        return F.cross_entropy(logits.float(), targets, reduction="none").to(logits.dtype)

    @staticmethod
    def backward(ctx: Any, g: torch.Tensor) -> Any:
        logits, targets = ctx.saved_tensors
        grad = torch.softmax(logits.float(), dim=-1)
        grad[torch.arange(len(targets)), targets] -= 1.0
        if ctx.use_upstream:
            grad = grad * g.float()[:, None]
        return (grad * ctx.scale).to(logits.dtype), None, None, None


class ScaleGrad(torch.autograd.Function):
    """The identity whose backward multiplies the gradient by ``scale``."""

    @staticmethod
    def forward(ctx: Any, t: torch.Tensor, scale: float) -> Any:
        ctx.scale = scale
        return t.view_as(t)

    @staticmethod
    def backward(ctx: Any, g: torch.Tensor) -> Any:
        return g * ctx.scale, None


class RmsNormWeightGradLowPrecision(torch.autograd.Function):
    """RMSNorm (float32 arithmetic, one rounding) whose weight gradient Σ_rows g·x̂ is accumulated in the
    input dtype: products and partial sums rounded to bfloat16/float16."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, w: torch.Tensor, eps: float) -> Any:
        ctx.save_for_backward(x, w)
        ctx.eps = eps
        return F.rms_norm(x, (x.shape[-1],), w, eps)

    @staticmethod
    def backward(ctx: Any, g: torch.Tensor) -> Any:
        x, w = ctx.saved_tensors
        with torch.enable_grad():
            xf, wf = x.detach().float().requires_grad_(), w.detach().float().requires_grad_()
            y = F.rms_norm(xf, (xf.shape[-1],), wf, ctx.eps)
            dx, _ = torch.autograd.grad(y, (xf, wf), g.float())
        xhat = (x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + ctx.eps)).to(x.dtype)
        dw = tree_sum((g * xhat).reshape(-1, x.shape[-1]), dim=0)
        return dx.to(x.dtype), dw.to(w.dtype), None


class RmsNormGradIntoCotangent(torch.autograd.Function):
    """RMSNorm (float32 arithmetic, one rounding, correct gradients) whose backward saves a buffer by writing
    ∂L/∂x into the incoming gradient ∂L/∂y and returning it, as Liger-Kernel 0.4.0's in-place RMSNorm
    backward did: the caller's ∂L/∂y, which the residual stream still needs, is overwritten."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, w: torch.Tensor, eps: float) -> Any:
        ctx.save_for_backward(x, w)
        ctx.eps = eps
        return F.rms_norm(x, (x.shape[-1],), w, eps)

    @staticmethod
    def backward(ctx: Any, g: torch.Tensor) -> Any:
        x, w = ctx.saved_tensors
        with torch.enable_grad():
            xf, wf = x.detach().float().requires_grad_(), w.detach().float().requires_grad_()
            y = F.rms_norm(xf, (xf.shape[-1],), wf, ctx.eps)
            dx, dw = torch.autograd.grad(y, (xf, wf), g.float())
        g.copy_(dx)  # ∂L/∂x written over ∂L/∂y: no new buffer
        return g, dw.to(w.dtype), None


#: bfloat16's ε / 32, Cut Cross-Entropy's gradient filter for bfloat16 (``filter_eps="high"``)
BFLOAT16_FILTER = 2.0**-12


class LinearCrossEntropyFused(torch.autograd.Function):
    """Cross-entropy of x·Wᵀ + b in float32 with the gradients computed in the forward, as fused-linear-cross-
    entropy kernels do, for a unit cotangent (1/#valid per valid token for the mean), and scaled by the upstream
    gradient in the backward. ``defect``: "first_row" scales ∂W and ∂b by the first element of a per-token
    upstream gradient instead of each token's own (folding g in after the projection); "unmasked_weight" leaves
    ignored tokens' rows of softmax − onehot in the ∂W and ∂b projections (∂x masked); "chunk_accumulator" walks
    the tokens in chunks as Liger-Kernel's fused kernel sizes them (next_pow2(N / ⌈V/H⌉) tokens) and accumulates
    ∂W and ∂b chunk by chunk in the weight's dtype, each chunk's addition rounded (right in float32);
    "lse_no_rescale" takes the logsumexp over vocabulary chunks of 32,768 without rescaling the running sum
    (``chunked_logsumexp``) and the gradient's softmax as exp(u − lse), as an online-softmax kernel does;
    "filter_bf16_eps" drops every entry of softmax − onehot below bfloat16's ε/32 (2^-12) whatever the dtype, as a
    gradient-filtering kernel does (Cut Cross-Entropy's default ``filter_eps``, in bfloat16)."""

    @staticmethod
    def forward(
        ctx: Any,
        x: torch.Tensor,
        w: torch.Tensor,
        b: torch.Tensor,
        targets: torch.Tensor,
        ignore_index: int,
        reduction: str,
        defect: str,
    ) -> Any:
        valid = targets != ignore_index
        safe = torch.where(valid, targets, 0)
        xf, wf = x.float(), w.float()
        u = xf @ wf.T + b.float()
        lse = chunked_logsumexp(u) if defect == "lse_no_rescale" else torch.logsumexp(u, dim=-1)
        per = torch.where(valid, lse - u.gather(-1, safe[:, None])[:, 0], 0.0)
        d = torch.exp(u - lse[:, None]) if defect == "lse_no_rescale" else torch.softmax(u, dim=-1)
        d[torch.arange(len(safe)), safe] -= 1.0
        if defect == "filter_bf16_eps":
            d = torch.where(d.abs() < BFLOAT16_FILTER, 0.0, d)
        d_w = d.clone() if defect == "unmasked_weight" else None
        d = d * valid[:, None]
        n = valid.sum()
        if reduction == "mean":
            d = d / n.clamp(min=1)
            d_w = d_w / n.clamp(min=1) if d_w is not None else None
        ctx.save_for_backward(xf, wf, d, d if d_w is None else d_w)
        ctx.reduction, ctx.defect, ctx.dtypes = reduction, defect, (x.dtype, w.dtype, b.dtype)
        out = per if reduction == "none" else per.sum() / n
        return out.to(x.dtype)

    @staticmethod
    def backward(ctx: Any, g: torch.Tensor) -> Any:
        xf, wf, d, d_w = ctx.saved_tensors
        gf = g.float()
        if ctx.reduction == "none":
            d = d * gf[:, None]
            d_w = d_w * (gf[0] if ctx.defect == "first_row" else gf[:, None])
        else:
            d, d_w = d * gf, d_w * gf
        tx, tw, tb = ctx.dtypes
        dx, dw, db = d @ wf, d_w.T @ xf, d_w.sum(0)
        if ctx.defect == "chunk_accumulator":
            n, (v, h) = d_w.shape[0], wf.shape
            chunk = 1 << max(math.ceil(n / math.ceil(v / h)) - 1, 0).bit_length()
            dw, db = torch.zeros(wf.shape, dtype=tw), torch.zeros(v, dtype=tb)
            for s in range(0, n, chunk):
                dw = (dw.float() + d_w[s : s + chunk].T @ xf[s : s + chunk]).to(tw)
                db = (db.float() + d_w[s : s + chunk].sum(0)).to(tb)
        return dx.to(tx), dw.to(tw), db.to(tb), None, None, None, None
#: Liger-Kernel's RMSNorm block kernels: taken for at least this many rows of at most BLOCK_COLS features
BLOCK_ROWS_FROM, BLOCK_COLS, BLOCK_ROW = 32_768, 256, 16


class RmsNormBlockPathWeightGrad(torch.autograd.Function):
    """RMSNorm (float32 arithmetic, one rounding) with a row path and a *block* path, chosen as Liger-Kernel
    does (≥ 32,768 rows of ≤ 256 features). The block path's backward accumulates ∂L/∂γ block of 16 rows by
    block in an accumulator of the input dtype (Liger-Kernel 0.6.4's block backward summed ∂W in the input
    dtype; 0.6.5 in float32); the row path, and everything else, is correct."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, w: torch.Tensor, eps: float) -> Any:
        ctx.save_for_backward(x, w)
        ctx.eps = eps
        return F.rms_norm(x, (x.shape[-1],), w, eps)

    @staticmethod
    def backward(ctx: Any, g: torch.Tensor) -> Any:
        x, w = ctx.saved_tensors
        with torch.enable_grad():
            xf, wf = x.detach().float().requires_grad_(), w.detach().float().requires_grad_()
            y = F.rms_norm(xf, (xf.shape[-1],), wf, ctx.eps)
            dx, dw = torch.autograd.grad(y, (xf, wf), g.float())
        n = x.shape[-1]
        rows = x.numel() // max(n, 1)
        if rows >= BLOCK_ROWS_FROM and n <= BLOCK_COLS:
            xf = x.float().reshape(-1, n)
            xhat = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + ctx.eps)
            terms = g.float().reshape(-1, n) * xhat
            acc = torch.zeros(n, dtype=x.dtype)
            for start in range(0, rows, BLOCK_ROW):  # one program walking the row blocks, as on one SM
                acc = (acc.float() + terms[start : start + BLOCK_ROW].sum(0)).to(x.dtype)
            dw = acc
        return dx.to(x.dtype), dw.to(w.dtype), None


def online_softmax_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    causal: bool,
    softcap: float | None = None,
    scale: float | None = None,
    tile: int = 128,
    rescale_from: int = 1,
) -> torch.Tensor:
    """Float32 attention (B, H, L, D), bottom-right causal, over key tiles of ``tile`` with an online softmax
    (a running max m, sum l and output o, flash-attention style). When the max grows at a tile, o and l must
    be rescaled by exp(m_old − m_new); tiles from ``rescale_from`` on rescale l but not o — a kernel that is
    right for one tile of keys and wrong past it (``rescale_from=1``); a large ``rescale_from`` is correct."""
    rep = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
    s = (q @ k.transpose(-1, -2)) * (q.shape[-1] ** -0.5 if scale is None else scale)
    if softcap:
        s = softcap * torch.tanh(s / softcap)
    lq, lk = s.shape[-2], s.shape[-1]
    if causal:
        mask = torch.ones(lq, lk, dtype=torch.bool).tril(diagonal=lk - lq)
        s = s.masked_fill(~mask, float("-inf"))
    m = torch.full((*s.shape[:-1], 1), float("-inf"))
    l_sum = torch.zeros((*s.shape[:-1], 1))
    o = torch.zeros(*s.shape[:-1], v.shape[-1])
    for i, start in enumerate(range(0, lk, tile)):
        st = s[..., start : start + tile]
        m_new = torch.maximum(m, st.max(-1, keepdim=True).values)
        safe = torch.where(torch.isinf(m_new), torch.zeros_like(m_new), m_new)
        p = torch.exp(st - safe)
        alpha = torch.exp(torch.where(torch.isinf(m), torch.full_like(m, float("-inf")), m - safe))
        l_sum = l_sum * alpha + p.sum(-1, keepdim=True)
        o = (o if i >= rescale_from else o * alpha) + p @ v[..., start : start + tile, :]
        m = m_new
    return o / l_sum


def chunked_logsumexp(u: torch.Tensor, chunk: int = 32_768, rescale_from: int = 1) -> torch.Tensor:
    """logsumexp over the last axis in vocabulary chunks with a running max and sum (as fused cross-entropy
    kernels walk a large vocabulary). Chunks from ``rescale_from`` on add their terms without rescaling the
    running sum when the max grows — right for one chunk, wrong past it (``rescale_from=1``)."""
    m = torch.full(u.shape[:-1], float("-inf"), dtype=torch.float32)
    s = torch.zeros(u.shape[:-1], dtype=torch.float32)
    for i, start in enumerate(range(0, u.shape[-1], chunk)):
        c = u[..., start : start + chunk].float()
        m_new = torch.maximum(m, c.max(-1).values)
        scale = torch.exp(m - m_new) if i < rescale_from else torch.ones_like(s)
        s = s * scale + torch.exp(c - m_new[..., None]).sum(-1)
        m = m_new
    return m + torch.log(s)


class EmbeddingSortedPathDropsRepeats(torch.autograd.Function):
    """``F.embedding(positions, table)``; its backward, for ``from_count`` positions or more (the sort-and-segment
    path embedding kernels take for many indices), writes each position's gradient row into ∂table without adding
    a repeated position's rows (one of them is kept); below that it adds them (``index_add_``)."""

    @staticmethod
    def forward(ctx: Any, table: torch.Tensor, positions: torch.Tensor, from_count: int) -> torch.Tensor:
        ctx.save_for_backward(positions)
        ctx.rows, ctx.from_count = table.shape[0], from_count
        return F.embedding(positions, table)

    @staticmethod
    def backward(ctx: Any, g: torch.Tensor) -> tuple[torch.Tensor, None, None]:
        (positions,) = ctx.saved_tensors
        flat, rows = positions.reshape(-1), g.reshape(-1, g.shape[-1])
        grad = torch.zeros(ctx.rows, g.shape[-1], dtype=g.dtype, device=g.device)
        if flat.numel() >= ctx.from_count:
            grad[flat] = rows
        else:
            grad.index_add_(0, flat, rows)
        return grad, None, None


def last_bit_up(t: torch.Tensor) -> torch.Tensor:
    """A copy of ``t`` whose first element is one unit in the last place larger in magnitude (its bits + 1)."""
    out = t.detach().clone(memory_format=torch.contiguous_format)  # a flat view of it exists whatever t's strides
    if out.numel():
        flat = out.view(-1).view({2: torch.int16, 4: torch.int32, 8: torch.int64}[out.element_size()])
        flat[0] += 1
    return out


class LastBitUp(torch.autograd.Function):
    """:func:`last_bit_up` in the forward; the gradient passed through as it is."""

    @staticmethod
    def forward(ctx: Any, t: torch.Tensor) -> Any:
        return last_bit_up(t)

    @staticmethod
    def backward(ctx: Any, g: torch.Tensor) -> Any:
        return g


class GradMapped(torch.autograd.Function):
    """The identity whose backward hands on ``fn(gradient)`` instead of the gradient."""

    @staticmethod
    def forward(ctx: Any, t: torch.Tensor, fn: Callable[[torch.Tensor], torch.Tensor]) -> Any:
        ctx.fn = fn
        return t.view_as(t)

    @staticmethod
    def backward(ctx: Any, g: torch.Tensor) -> Any:
        return ctx.fn(g), None


def bfloat16_round_trip(g: torch.Tensor) -> torch.Tensor:
    """``g`` rounded to bfloat16 and back (a gradient buffer kept in bfloat16)."""
    return g.to(torch.bfloat16).to(g.dtype)


class CapStraightThrough(torch.autograd.Function):
    """The soft-cap c·tanh(u/c) whose backward takes its derivative as 1 (the gradient passed straight through)."""

    @staticmethod
    def forward(ctx: Any, u: torch.Tensor, cap: float) -> Any:
        return cap * torch.tanh(u / cap)

    @staticmethod
    def backward(ctx: Any, g: torch.Tensor) -> Any:
        return g, None

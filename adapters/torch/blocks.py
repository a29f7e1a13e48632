"""PyTorch implementations of attention, the MLP family, decoder blocks and the LM head for the torch adapter.

Low-precision inputs are computed in float32 and rounded once at the end (the adapter declares
compute_dtype="float32"). Causal attention is bottom-right aligned through an explicit boolean mask handed to
``F.scaled_dot_product_attention``: its own ``is_causal=True`` aligns the diagonal top-left when L_q < L_k, which
is wrong for decoding with a KV cache (:func:`sdpa_top_left` is that variant).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

from transformer_conformance.adapters.torch.tensors import rope_torch
from transformer_conformance.adapters.versions import at_least

#: SDPA takes grouped KV heads itself (``enable_gqa``) from torch 2.5; on 2.4 the adapter repeats them first,
#: as SDPA's own math path does
SDPA_GQA = at_least("torch", "2.5")

ACTIVATIONS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "relu": F.relu,
    "gelu_erf": F.gelu,
    "gelu_tanh": lambda a: F.gelu(a, approximate="tanh"),
    "gelu_sigmoid": lambda a: a * torch.sigmoid(1.702 * a),
    "relu_squared": lambda a: torch.square(F.relu(a)),
    "silu": F.silu,
}


def rope_float32(x: torch.Tensor, positions: torch.Tensor, base: float, layout: str) -> torch.Tensor:
    """RoPE of a float32 tensor, kept in float32 (no intermediate rounding to the input dtype)."""
    return rope_torch(x, positions, base, None, layout)


def causal_mask(lq: int, lk: int, device: torch.device, alignment: str = "bottom_right") -> torch.Tensor:
    """True where query i may see key j: j ≤ i + (L_k − L_q) bottom-right, j ≤ i top-left."""
    offset = lk - lq if alignment == "bottom_right" else 0
    return torch.ones(lq, lk, dtype=torch.bool, device=device).tril(diagonal=offset)


def attention_f32(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    causal: bool,
    softcap: float | None = None,
    scale: float | None = None,
    alignment: str = "bottom_right",
) -> torch.Tensor:
    """Attention on float32 tensors (B, H, L, D), query head h reading KV head h // (H_q/H_kv).

    Without soft-capping: SDPA with GQA, and bottom-right through an explicit mask (``is_causal=True`` only for
    the top-left alignment, which is what it implements). Soft-capping, which SDPA does not offer, in plain torch.
    """
    if not softcap:
        if not SDPA_GQA:
            rep = q.shape[1] // k.shape[1]
            k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
        gqa: dict[str, Any] = {"enable_gqa": True} if SDPA_GQA else {}
        if causal and alignment == "top_left":
            return F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scale, **gqa)
        mask = causal_mask(q.shape[-2], k.shape[-2], q.device) if causal else None
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale, **gqa)
    rep = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
    s = (q @ k.transpose(-1, -2)) * (q.shape[-1] ** -0.5 if scale is None else scale)
    s = softcap * torch.tanh(s / softcap)
    if causal:
        s = s.masked_fill(~causal_mask(q.shape[-2], k.shape[-2], q.device, alignment), float("-inf"))
    return torch.softmax(s, dim=-1) @ v


def ops(
    rope_layout: str, alignment: str = "bottom_right", kernel: Callable[..., torch.Tensor] = attention_f32
) -> dict[str, Callable[..., Any]]:
    """The operations, keyed by contract name, for the declared RoPE layout and causal alignment; ``kernel`` is
    the float32 attention every operation with attention calls (``attention_f32``'s signature)."""

    def attend(
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        causal: bool,
        softcap: float | None = None,
        scale: float | None = None,
    ) -> torch.Tensor:
        return kernel(q, k, v, causal, softcap, scale, alignment)

    def attention(
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        causal: bool = False,
        softcap: float | None = None,
        scale: float | None = None,
    ) -> torch.Tensor:
        return attend(q.float(), k.float(), v.float(), causal, softcap, scale).to(q.dtype)

    def qk_norm_attention(
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        q_weight: torch.Tensor,
        k_weight: torch.Tensor,
        causal: bool = False,
        softcap: float | None = None,
        eps: float = 1e-6,
    ) -> torch.Tensor:
        d = q.shape[-1]
        qn = F.rms_norm(q.float(), (d,), q_weight.float(), eps)
        kn = F.rms_norm(k.float(), (d,), k_weight.float(), eps)
        return attend(qn, kn, v.float(), causal, softcap).to(q.dtype)

    def rope_attention(
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        q_positions: torch.Tensor,
        k_positions: torch.Tensor,
        causal: bool = False,
        softcap: float | None = None,
        base: float = 10000.0,
    ) -> torch.Tensor:
        rq = rope_float32(q.float(), q_positions, base, rope_layout)
        rk = rope_float32(k.float(), k_positions, base, rope_layout)
        return attend(rq, rk, v.float(), causal, softcap).to(q.dtype)

    def mlp(x: torch.Tensor, w_in: torch.Tensor, w_out: torch.Tensor, activation: str) -> torch.Tensor:
        return (ACTIVATIONS[activation](x.float() @ w_in.float()) @ w_out.float()).to(x.dtype)

    def glu_mlp(x: torch.Tensor, w1: torch.Tensor, w3: torch.Tensor, w2: torch.Tensor, activation: str) -> torch.Tensor:
        xf = x.float()
        return ((ACTIVATIONS[activation](xf @ w1.float()) * (xf @ w3.float())) @ w2.float()).to(x.dtype)

    def block(
        x: torch.Tensor,
        positions: torch.Tensor,
        placement: str,
        n_heads: int,
        n_kv_heads: int,
        eps: float,
        base: float = 10000.0,
        **w: torch.Tensor,
    ) -> torch.Tensor:
        wf = {k: t.float() for k, t in w.items()}
        d = x.shape[-1]

        def norm(u: torch.Tensor, name: str) -> torch.Tensor:
            return F.rms_norm(u, (d,), wf[name], eps)

        def attn(u: torch.Tensor) -> torch.Tensor:
            b, t, _ = u.shape

            def heads(z: torch.Tensor, h: int) -> torch.Tensor:
                return z.view(b, t, h, -1).transpose(1, 2)

            q = rope_float32(heads(u @ wf["wq"], n_heads), positions, base, rope_layout)
            k = rope_float32(heads(u @ wf["wk"], n_kv_heads), positions, base, rope_layout)
            o = attend(q, k, heads(u @ wf["wv"], n_kv_heads), True)
            return o.transpose(1, 2).reshape(b, t, -1) @ wf["wo"]

        def mlp_(u: torch.Tensor) -> torch.Tensor:
            return (F.silu(u @ wf["w1"]) * (u @ wf["w3"])) @ wf["w2"]

        h = x.float()
        if placement == "pre":
            h = h + attn(norm(h, "attn_norm"))
            h = h + mlp_(norm(h, "mlp_norm"))
        elif placement == "post":
            h = norm(h + attn(h), "attn_norm")
            h = norm(h + mlp_(h), "mlp_norm")
        elif placement == "double":
            h = h + norm(attn(norm(h, "attn_norm")), "attn_post_norm")
            h = h + norm(mlp_(norm(h, "mlp_norm")), "mlp_post_norm")
        elif placement == "parallel":
            n = norm(h, "attn_norm")
            h = h + attn(n) + mlp_(n)
        else:
            raise ValueError(f"unknown placement {placement!r}")
        return h.to(x.dtype)

    def lm_head(x: torch.Tensor, norm_weight: torch.Tensor, w_head: torch.Tensor, eps: float) -> torch.Tensor:
        return (F.rms_norm(x.float(), (x.shape[-1],), norm_weight.float(), eps) @ w_head.float()).to(x.dtype)

    return {
        "attention": attention,
        "qk_norm_attention": qk_norm_attention,
        "rope_attention": rope_attention,
        "mlp": mlp,
        "glu_mlp": glu_mlp,
        "block": block,
        "lm_head": lm_head,
    }


def ffn_hidden_dim(
    d: int, base_ratio: float = 4, gated: bool = True, multiple_of: int = 1, ffn_dim_multiplier: float | None = None
) -> int:
    """The hidden width as LLaMA-style model code computes it, generalised from 4d to base_ratio·d: two thirds
    of the base width for a gated MLP, times the multiplier, rounded up to the multiple."""
    hidden = base_ratio * d
    hidden = int(2 * hidden / 3) if gated else int(hidden)
    if ffn_dim_multiplier is not None:
        hidden = int(ffn_dim_multiplier * hidden)
    return multiple_of * ((hidden + multiple_of - 1) // multiple_of)

"""Attention through torchtitan's ``FlexAttention`` module and the masks its decoders build.

torchtitan's language models attend through ``FlexAttention`` (``get_attention_config``: "sdpa is no longer supported
for language models"), the class-level ``torch.compile(flex_attention)`` with its inductor options, on q, k and v laid
out (B, L, N, H), with ``enable_gqa`` where there are fewer KV heads (``GQAttention``) and the caller's ``scale``. Its
masks are ``BlockMask``s made by ``create_attention_mask`` (the compiled ``create_block_mask``) from mask mods and-ed
together, as ``Decoder._create_flex_attention_mask`` makes them (its block size, ``separate_full_blocks``):

* causal — the decoder's ``get_causal_mask_mod()`` and ``get_efficient_causal_mask_mod_for_packed_document`` of one
  document (positions 0 … L − 1 in each batch row, as the data loader emits them for an unpacked sequence);
* sliding window — those and ``get_sliding_window_mask_mod(W)``, as gpt-oss's sliding layers add it:
  ``q_idx − kv_idx < W``, the query's own token among the W (``sliding_window="inclusive"``);
* chunked — those and ``get_fixed_block_mask_mod(C)`` (``q_idx // C == kv_idx // C``, Llama 4's local layers);
* not causal — the vision encoders' ``get_vision_block_mask_mod`` of one item covering every token: no masking.

torchtitan makes its ``BlockMask``s with ``torch.compile(create_block_mask)`` (``create_attention_mask``; the vision
encoders' ``compiled_create_block_mask``). On the CPU, torch 2.13's inductor fails to compile some of them (a C++
error, "operands to '?:' have different types 'VecMask<int, 1>' and 'VecMask<float, 1>'": the vision mask at any
size, the packed-document mask of two rows of one token, and the masks once dynamo has made their sizes dynamic), an
error of the compiler, not of torchtitan's masks: the adapter builds the same ``BlockMask`` with ``create_block_mask``
itself, by the decoder's own ``_create_flex_attention_mask`` (its arguments, its block size) with
``create_attention_mask`` bound to the uncompiled function. The mask mods are torchtitan's and are traced into the
compiled attention kernel as they are; the block mask says which blocks of keys the kernel visits.

torchtitan's attention is self-attention over a training sequence: it has no KV cache. Fewer queries than keys (a
causal case of the contract) are the last L_q tokens of a sequence of L_k: the adapter runs the L_k tokens with zero
queries for the earlier ones and keeps the last L_q outputs (the earlier rows get no cotangent), so query i is token
L_k − L_q + i: ``causal_alignment="bottom_right"``.

* ``mla_attention`` — DeepSeek-V3's ``Attention`` (``torchtitan.models.deepseek_v3.model``) on the same FlexAttention
  and masks, q_lora_rank 0. Each token's hidden state holds [q (H·(D_n + D_r)) | latent (D_c) | k_rope (D_r)]; ``wq``
  and ``wkv_a`` are 0/1 selections of their parts (one product x·1 among exact zeros: the suite's values bit for bit),
  ``wkv_b`` holds w_uk[h]ᵀ then w_uv[h]ᵀ for each head, as DeepSeek's checkpoints lay it out, and ``wo`` is the
  identity. ``kv_norm`` (the RMSNorm of the compressed latent) is the identity: the contract's latent is its output.
  The softmax scale is the module's own: (D_n + D_r)^−½, times mscale² when its RoPE configuration is YaRN's with
  ``rope_factor`` s > 1 and ``mscale`` m (0.1·m·ln s + 1). The module's ``rope`` is then replaced by the plain
  ``ComplexRoPE`` at the suite's base: YaRN's frequencies are ``rope_scaled``'s business (as the HF adapter hands its
  module plain position embeddings). Naive form only (``wkv_b`` up-projects the latent for every head).
* ``block`` — ``Llama3TransformerBlock`` (pre-norm) with ``make_gqa_config``'s ``GQAttention`` (separate ``wq``, ``wk``,
  ``wv``: its default ``fuse_qkv=False``), ``ComplexRoPE`` at the suite's base, FlexAttention with the causal mask,
  and ``make_ffn_config``'s ``FeedForward``; the block's ``forward(x, attention_masks, positions)``.

The compiled kernel is built for each shape it meets, statically, as a training run with its fixed sequence length
builds it (``DYNAMO_CONFIG``: dynamo's automatic dynamic shapes would, after a recompile, make kernels that torch 2.13's
CPU flex template fails to compile), one graph per shape, dtype and mask (the adapter's ``compiles()``).

On the CPU FlexAttention has no backward ("FlexAttention does not support backward on CPU"): these operations are
declared without gradients there. The compiled kernel stores the probabilities in the input dtype for P·V (as the
``torch-flex`` adapter measured for the same kernel): ``unfused``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from types import SimpleNamespace
from typing import Any
from unittest import mock

import torch
from torch import nn
from torch.func import functional_call
from torch.nn.attention.flex_attention import BlockMask, create_block_mask
from torchtitan.models.common import ComplexRoPE, RMSNorm
from torchtitan.models.common import decoder as titan_decoder
from torchtitan.models.common.attention import (
    FlexAttention,
    get_causal_mask_mod,
    get_efficient_causal_mask_mod_for_packed_document,
    get_fixed_block_mask_mod,
    get_sliding_window_mask_mod,
)
from torchtitan.models.common.config_utils import make_ffn_config, make_gqa_config
from torchtitan.models.common.decoder import Decoder
from torchtitan.models.common.linear import Linear
from torchtitan.models.common.vision_encoder import get_vision_block_mask_mod
from torchtitan.models.deepseek_v3.model import Attention as MLAttention
from torchtitan.models.llama3.model import Llama3TransformerBlock

from transformer_conformance.adapters.torchtitan.rope import rope_module

MaskMod = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]

#: How the compiled kernel is built: for each shape as it comes (a training run's shapes are fixed, so its graphs are
#: static; dynamo's automatic dynamic shapes, after a recompile, make kernels torch 2.13's CPU flex template fails to
#: compile: "'cur_qSplitSize8' was not declared in this scope"), with room for every graph of a run, and an error, not
#: a silent switch to eager flex_attention (another implementation), should the room run out.
DYNAMO_CONFIG = {
    "automatic_dynamic_shapes": False,
    "recompile_limit": 4096,
    "accumulated_recompile_limit": 65536,
    "fail_on_recompile_limit_hit": True,
}


#: what the decoder's mask builder reads of its attention configuration: the inner attention's block size
FLEX_CONFIG = SimpleNamespace(inner_attention=FlexAttention.Config())


def document_positions(b: int, length: int, device: torch.device) -> torch.Tensor:
    """The data loader's positions of an unpacked sequence: 0 … L − 1 in each of the B rows."""
    return torch.arange(length, device=device).expand(b, length)


def causal_mask(b: int, length: int, device: torch.device, extra: Sequence[MaskMod] = ()) -> BlockMask:
    """The decoder's block-causal mask of one document per row (``Decoder._create_flex_attention_mask``, itself: its
    ``self`` is not read), and-ed with ``extra`` mask mods (a sliding window, fixed blocks); the block mask made by
    the uncompiled ``create_block_mask`` (module docstring)."""
    positions = document_positions(b, length, device)
    mods = [get_causal_mask_mod(), get_efficient_causal_mask_mod_for_packed_document(positions), *extra]
    with mock.patch.object(titan_decoder, "create_attention_mask", create_block_mask):
        return Decoder._create_flex_attention_mask(FLEX_CONFIG, positions, FLEX_CONFIG, mods)  # type: ignore[arg-type]


def full_mask(b: int, lq: int, lk: int, device: torch.device) -> BlockMask:
    """No masking: the vision encoders' block mask of one item whose every patch is real (made as their
    ``compiled_create_block_mask`` makes it, uncompiled: module docstring)."""
    patches = torch.full((b,), max(lq, lk), device=device)
    return create_block_mask(get_vision_block_mask_mod(patches), b, None, lq, lk, device=device)


def _padded(q: torch.Tensor, lk: int) -> torch.Tensor:
    """q (B, L_q, N, H) as the last L_q tokens of L_k: zero queries before it."""
    b, lq, n, h = q.shape
    return torch.cat([q.new_zeros(b, lk - lq, n, h), q], dim=1)


def flex(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    causal: bool,
    scale: float | None,
    extra: Sequence[MaskMod] = (),
) -> torch.Tensor:
    """torchtitan's FlexAttention on the contract's (B, H, L, D) tensors (module docstring), (B, H_q, L_q, D_v)."""
    b, hq, lq, _ = q.shape
    hkv, lk = k.shape[1], k.shape[2]
    qq, kk, vv = (t.transpose(1, 2) for t in (q, k, v))  # (B, L, N, H)
    if causal:
        qq, mask = _padded(qq, lk), causal_mask(b, lk, q.device, extra)
    else:
        mask = full_mask(b, lq, lk, q.device)
    module = FlexAttention(FlexAttention.Config())
    with torch._dynamo.config.patch(DYNAMO_CONFIG):
        out = module(qq, kk, vv, attention_masks=mask, scale=scale, enable_gqa=hq > hkv)
    return out[:, out.shape[1] - lq :].transpose(1, 2)


def attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    causal: bool = False,
    softcap: float | None = None,
    scale: float | None = None,
) -> torch.Tensor:
    if softcap is not None:
        raise NotImplementedError("torchtitan's attention has no soft-capping")
    return flex(q, k, v, bool(causal), scale)


def sliding_window_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, window: int, softcap: float | None = None,
    scale: float | None = None,
) -> torch.Tensor:  # fmt: skip
    if softcap is not None:
        raise NotImplementedError("torchtitan's attention has no soft-capping")
    return flex(q, k, v, True, scale, (get_sliding_window_mask_mod(int(window)),))


def chunked_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, chunk: int, scale: float | None = None
) -> torch.Tensor:
    return flex(q, k, v, True, scale, (get_fixed_block_mask_mod(int(chunk)),))


def _selection(rows: int, cols: int, offset: int, like: torch.Tensor) -> torch.Tensor:
    """A (rows, cols) 0/1 matrix whose row i picks column offset + i (a Linear weight selecting a slice)."""
    out = torch.zeros(rows, cols, dtype=like.dtype, device=like.device)
    out[:, offset : offset + rows] = torch.eye(rows, dtype=like.dtype, device=like.device)
    return out


def _linear(i: int, o: int) -> Linear.Config:
    return Linear.Config(in_features=i, out_features=o)


def mla_module(
    h: int, dn: int, dr: int, dc: int, dv: int, width: int, base: float, mscale: Mapping[str, float] | None
) -> MLAttention:  # fmt: skip
    """DeepSeek-V3's attention of this geometry (on the meta device: its weights come through functional_call)."""
    yarn: dict[str, Any] = {}
    if mscale:
        yarn = {"scaling": "yarn", "rope_factor": float(mscale["factor"])}
    config = MLAttention.Config(
        n_heads=h,
        dim=width,
        wq=_linear(width, h * (dn + dr)),
        wkv_a=_linear(width, dc + dr),
        wkv_b=_linear(dc, h * (dn + dv)),
        wo=_linear(h * dv, width),
        q_lora_rank=0,
        kv_lora_rank=dc,
        q_norm=RMSNorm.Config(normalized_shape=1),
        kv_norm=RMSNorm.Config(normalized_shape=dc),
        qk_nope_head_dim=dn,
        qk_rope_head_dim=dr,
        v_head_dim=dv,
        rope=ComplexRoPE.Config(dim=dr, max_seq_len=1, theta=base, **yarn),
        inner_attention=FlexAttention.Config(),
        mscale=float(mscale["mscale_all_dim"]) if mscale else 1.0,
    )
    with torch.device("meta"):
        module = config.build()
    module.kv_norm = nn.Identity()
    module.wo = nn.Identity()
    return module


def mla_attention(
    q_nope: torch.Tensor,
    q_rope: torch.Tensor,
    latent: torch.Tensor,
    k_rope: torch.Tensor,
    w_uk: torch.Tensor,
    w_uv: torch.Tensor,
    q_positions: torch.Tensor,
    k_positions: torch.Tensor,
    causal: bool = True,
    base: float = 10000.0,
    mscale: Mapping[str, float] | None = None,
    form: str = "naive",
) -> torch.Tensor:
    """Multi-head latent attention through DeepSeek-V3's ``Attention`` (module docstring), (B, H, L_q, D_v)."""
    if form != "naive":
        raise NotImplementedError(f"torchtitan's DeepSeek-V3 attention computes the naive form, not {form!r}")
    b, h, lq, dn = q_nope.shape
    lk, dc = latent.shape[1:]
    dr, dv = q_rope.shape[-1], w_uv.shape[-1]
    if not torch.equal(q_positions.cpu(), k_positions[lk - lq :].cpu()):
        raise NotImplementedError("torchtitan's attention takes the queries' positions from their own tokens")
    width = h * (dn + dr) + dc + dr
    module = mla_module(h, dn, dr, dc, dv, width, float(base), mscale)
    module.rope, positions = rope_module(dr, k_positions, float(base), None)
    q = torch.cat([q_nope, q_rope], dim=-1).transpose(1, 2).reshape(b, lq, h * (dn + dr))
    q = torch.cat([q.new_zeros(b, lk - lq, q.shape[-1]), q], dim=1)  # the earlier tokens ask nothing
    x = torch.cat([q, latent, k_rope], dim=-1)
    weights = {
        "wq.weight": _selection(h * (dn + dr), width, 0, latent),
        "wkv_a.weight": _selection(dc + dr, width, h * (dn + dr), latent),
        "wkv_b.weight": torch.cat([w_uk, w_uv], dim=-1).permute(0, 2, 1).reshape(h * (dn + dv), dc),
    }
    mask = causal_mask(b, lk, latent.device) if causal else full_mask(b, lk, lk, latent.device)
    with torch._dynamo.config.patch(DYNAMO_CONFIG):
        out = functional_call(module, weights, (x, mask, positions.expand(b, -1)))
    return out[:, lk - lq :].reshape(b, lq, h, dv).transpose(1, 2)


def softmax_scale(d_nope: int, d_rope: int, mscale: Mapping[str, float] | None) -> float:
    """The scale DeepSeek-V3's ``Attention.__init__`` computes (for the tests)."""
    scale = (d_nope + d_rope) ** -0.5
    if mscale and mscale["factor"] > 1:
        m = 0.1 * mscale["mscale_all_dim"] * math.log(mscale["factor"]) + 1.0
        scale *= m * m
    return scale


def block_module(d: int, hq: int, hkv: int, hd: int, hidden: int, eps: float, base: float) -> Llama3TransformerBlock:
    """A Llama 3 decoder layer of this geometry, built as ``_build_llama3_layers`` builds one (module docstring)."""
    config = Llama3TransformerBlock.Config(
        attention_norm=RMSNorm.Config(normalized_shape=d, eps=eps),
        ffn_norm=RMSNorm.Config(normalized_shape=d, eps=eps),
        attention=make_gqa_config(
            dim=d,
            n_heads=hq,
            n_kv_heads=hkv,
            head_dim=None if hd == d // hq else hd,
            wqkv_param_init={},
            wo_param_init={},
            inner_attention=FlexAttention.Config(),
            rope=ComplexRoPE.Config(dim=hd, max_seq_len=1, theta=base),
        ),
        feed_forward=make_ffn_config(dim=d, hidden_dim=hidden, w1_param_init={}, w2w3_param_init={}),
    )
    return config.build()

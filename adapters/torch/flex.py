"""PyTorch's FlexAttention as a candidate: ``torch.compile(flex_attention)`` with the masks as ``mask_mod`` functions
through ``create_block_mask`` and soft-capping as a ``score_mod``, as FlexAttention's users write them.

* **Masks.** Causal attention is bottom-right through an offset L_k − L_q in the ``mask_mod`` (query i is token
  i + L_k − L_q; ``causal_alignment="top_left"`` drops the offset); the sliding window keeps p − j < W (the
  documented sliding-window ``mask_mod``, the query's own token among the W; ``"exclusive"``: p − j ≤ W); the chunk
  keeps j ≤ p with ⌊j/C⌋ = ⌊p/C⌋. Non-causal attention has no block mask. A block mask is built per shape (and
  cached by shape and parameters).
* **Soft-capping** is the ``score_mod`` c·tanh(s/c) on the scaled score; GQA is flex's ``enable_gqa=True``.
* **Sinks** (CUDA only): ``return_aux=AuxRequest(lse=True)``, then out·σ(lse − σ_h), which puts e^{σ_h} into the
  softmax's denominator (the usual way to add sinks to FlexAttention, which has no sink argument). On the CPU the
  compiled kernel returns no logsumexp ("torch.compile on CPU only supports inference and `return_lse` is not
  supported yet"), so ``sink_attention`` is not declared there.
* **Gradients** come from autograd through the compiled kernel on CUDA. FlexAttention has no backward on the CPU
  ("FlexAttention does not support backward on CPU"): there the operations are declared without gradients.

Compiling: one ``torch.compile(flex_attention)`` for the process. The masks' and the cap's parameters (the offset,
W, C, c) are captured as 0-d tensors, which dynamo reads as buffers: as Python numbers each value would be a guard
and compile a graph of its own. Sequence lengths become symbolic after the first recompile (dynamo's automatic
dynamic shapes); the head dimensions D and D_v, the dtype, a ``scale`` given as a number and which ``score_mod`` and
``mask_mod`` are used are specialised, one graph each (4–7 s on a 2-core CPU; inductor's on-disk cache makes a
second run of the same shapes cheaper).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import torch
from torch.nn.attention.flex_attention import AuxRequest, BlockMask, create_block_mask, flex_attention

from transformer_conformance.adapters.contract import Capability, Conventions
from transformer_conformance.adapters.torch.adapter import TorchAdapter
from transformer_conformance.adapters.torch.tensors import to_numpy
from transformer_conformance.adapters.versions import SUPPORTED, Supported

#: the operations on every device; ``sink_attention`` needs the logsumexp, which the compiled CPU kernel lacks
FLEX_OPS = ("attention", "sliding_window_attention", "chunked_attention")
CUDA_OPS = (*FLEX_OPS, "sink_attention")

#: the CPU kernel (inductor's C++ template) keeps the scores, their maximum, the exponentials and the output in
#: float32, but stores the probabilities in the input dtype (bfloat16, float16) for the P·V product, as does the
#: CUDA kernel (Triton's, in MATMUL_PRECISION); sink_attention's output is also stored before σ(lse − σ_h) scales it
UNFUSED = frozenset(CUDA_OPS)

MaskMod = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]
ScoreMod = Callable[[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]


@functools.cache
def compiled_flex() -> Callable[..., Any]:
    """``torch.compile(flex_attention)``, made once for the process (its graphs are dynamo's to cache)."""
    # a run meets many (dtype, D, D_v, mask, score_mod) combinations, each a graph of flex_attention's frame
    torch._dynamo.config.cache_size_limit = max(torch._dynamo.config.cache_size_limit, 256)
    torch._dynamo.config.accumulated_cache_size_limit = max(torch._dynamo.config.accumulated_cache_size_limit, 4096)
    return torch.compile(flex_attention)


def _scalar(value: int | float, device: str) -> torch.Tensor:
    dtype = torch.float32 if isinstance(value, float) else torch.int64
    return torch.tensor(value, dtype=dtype, device=device)


def causal_mod(offset: torch.Tensor) -> MaskMod:
    """Key j visible to the query at token p = i + offset iff j ≤ p."""

    def causal(b: torch.Tensor, h: torch.Tensor, q_idx: torch.Tensor, kv_idx: torch.Tensor) -> torch.Tensor:
        return kv_idx <= q_idx + offset

    return causal


def sliding_window_mod(offset: torch.Tensor, window: torch.Tensor, counts: str) -> MaskMod:
    """Causal, and p − j < W (``counts`` "inclusive": the query's own token among the W) or p − j ≤ W."""
    if counts == "inclusive":

        def sliding_window(b: torch.Tensor, h: torch.Tensor, q_idx: torch.Tensor, kv_idx: torch.Tensor) -> torch.Tensor:
            p = q_idx + offset
            return (kv_idx <= p) & (p - kv_idx < window)

        return sliding_window

    def sliding_window_exclusive(
        b: torch.Tensor, h: torch.Tensor, q_idx: torch.Tensor, kv_idx: torch.Tensor
    ) -> torch.Tensor:
        p = q_idx + offset
        return (kv_idx <= p) & (p - kv_idx <= window)

    return sliding_window_exclusive


def chunked_mod(offset: torch.Tensor, chunk: torch.Tensor) -> MaskMod:
    """Causal, and key j in the query's chunk: ⌊j/C⌋ = ⌊p/C⌋."""

    def chunked(b: torch.Tensor, h: torch.Tensor, q_idx: torch.Tensor, kv_idx: torch.Tensor) -> torch.Tensor:
        p = q_idx + offset
        return (kv_idx <= p) & (kv_idx // chunk == p // chunk)

    return chunked


def softcap_mod(cap: torch.Tensor) -> ScoreMod:
    """c·tanh(s/c) of the scaled score s."""

    def softcap(
        score: torch.Tensor, b: torch.Tensor, h: torch.Tensor, q_idx: torch.Tensor, kv_idx: torch.Tensor
    ) -> torch.Tensor:
        return cap * torch.tanh(score / cap)

    return softcap


@functools.lru_cache(maxsize=512)
def block_mask(kind: str, lq: int, lk: int, offset: int, span: int | None, counts: str, device: str) -> BlockMask:
    """The block mask of ``kind`` ("causal", "window" or "chunk", ``span`` its W or C) for L_q queries on L_k keys."""
    off = _scalar(offset, device)
    if kind == "causal":
        mod = causal_mod(off)
    elif kind == "window":
        mod = sliding_window_mod(off, _scalar(int(span or 0), device), counts)
    else:
        mod = chunked_mod(off, _scalar(int(span or 0), device))
    return create_block_mask(mod, None, None, lq, lk, device=device)


def ops(alignment: str, counts: str, flex: Callable[..., Any]) -> dict[str, Callable[..., torch.Tensor]]:
    """The operations, keyed by contract name, for the declared causal alignment and window count, run by ``flex``
    (the compiled ``flex_attention``)."""

    def mask(kind: str, q: torch.Tensor, k: torch.Tensor, span: int | None = None) -> BlockMask:
        lq, lk = q.shape[-2], k.shape[-2]
        offset = lk - lq if alignment == "bottom_right" else 0
        return block_mask(kind, lq, lk, offset, span, counts, str(q.device))

    def run(
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        bm: BlockMask | None,
        softcap: float | None,
        scale: float | None,
        **kw: Any,
    ) -> Any:
        score = softcap_mod(_scalar(float(softcap), str(q.device))) if softcap else None
        scale = None if scale is None else float(scale)
        return flex(q, k, v, score_mod=score, block_mask=bm, scale=scale, enable_gqa=True, **kw)

    def attention(
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        causal: bool = False,
        softcap: float | None = None,
        scale: float | None = None,
    ) -> torch.Tensor:
        out: torch.Tensor = run(q, k, v, mask("causal", q, k) if causal else None, softcap, scale)
        return out

    def sliding_window_attention(
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        window: int,
        softcap: float | None = None,
        scale: float | None = None,
    ) -> torch.Tensor:
        out: torch.Tensor = run(q, k, v, mask("window", q, k, int(window)), softcap, scale)
        return out

    def chunked_attention(
        q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, chunk: int, scale: float | None = None
    ) -> torch.Tensor:
        out: torch.Tensor = run(q, k, v, mask("chunk", q, k, int(chunk)), None, scale)
        return out

    def sink_attention(
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        sinks: torch.Tensor,
        causal: bool = True,
        window: int | None = None,
        scale: float | None = None,
    ) -> torch.Tensor:
        bm = None
        if window is not None:
            bm = mask("window", q, k, int(window))
        elif causal:
            bm = mask("causal", q, k)
        out, aux = run(q, k, v, bm, None, scale, return_aux=AuxRequest(lse=True))
        return with_sinks(out, aux.lse, sinks)

    return {f.__name__: f for f in (attention, sliding_window_attention, chunked_attention, sink_attention)}


def with_sinks(out: torch.Tensor, lse: torch.Tensor, sinks: torch.Tensor) -> torch.Tensor:
    """Attention ``out`` (B, H, L_q, D_v) of logsumexp ``lse`` (B, H, L_q) with one more logit σ_h per head in the
    softmax: Σ e^s v / (Σ e^s + e^σ) = out · e^lse / (e^lse + e^σ) = out · σ(lse − σ_h), in float32."""
    weight = torch.sigmoid(lse.float() - sinks.float()[None, :, None])
    return (out.float() * weight[..., None]).to(out.dtype)


class TorchFlexAdapter(TorchAdapter):
    """The ``torch-flex`` adapter: attention, sliding-window and chunked attention (and on CUDA sink attention)
    through the compiled FlexAttention kernel, in float32, bfloat16 and float16; gradients on CUDA only."""

    name = "torch-flex"
    supported: tuple[Supported, ...] = SUPPORTED["torch-flex"]
    conventions: Conventions

    def __init__(
        self, device: str = "cpu", causal_alignment: str = "bottom_right", sliding_window: str = "inclusive"
    ) -> None:
        super().__init__(device, causal_alignment=causal_alignment, sliding_window=sliding_window)
        cuda = torch.device(device).type == "cuda"
        declared = CUDA_OPS if cuda else FLEX_OPS
        self.conventions = dataclasses.replace(
            self.conventions,
            unfused=frozenset(op for op in UNFUSED if op in declared),
            # the CUDA kernel scales the scores by log₂e and exponentiates with exp2, forward and backward; the
            # CPU kernel calls exp itself
            exp_via_exp2=frozenset(declared) if cuda else frozenset(),
        )
        # each new head width, value width or mask kind compiles a kernel: the checks draw shapes from the plan
        self.capabilities = {op: Capability(grad=cuda, compiles="per_value") for op in declared}
        self.impl = ops(self.conventions.causal_alignment, self.conventions.sliding_window, compiled_flex())

    def compiles(self) -> int:
        """The graphs dynamo has compiled in this process (its ``unique_graphs`` counter): the report's count."""
        return int(torch._dynamo.utils.counters["stats"]["unique_graphs"])

    def environment(self) -> dict[str, str]:
        env = super().environment()
        env["compiler"] = "torch.compile(flex_attention): inductor's C++ template on CPU, Triton on CUDA"
        return env

    def forward(self, op: str, inputs: Mapping[str, np.ndarray], params: Mapping[str, Any]) -> np.ndarray:
        if op not in self.capabilities:
            raise NotImplementedError(f"{self.name} does not implement {op} on {self.device}")
        if not self.capabilities[op].grad:  # the CPU: inference only
            return super().forward(op, inputs, params)
        # with autograd recording: the forward of the graph the VJP also runs
        out, _ = self._call(op, inputs, params, grad=True)
        return to_numpy(out)

    def vjp(
        self, op: str, inputs: Mapping[str, np.ndarray], params: Mapping[str, Any], cotangent: np.ndarray
    ) -> dict[str, np.ndarray]:
        if op not in self.capabilities or not self.capabilities[op].grad:
            raise NotImplementedError(
                f"{self.name} has no gradient of {op} on {self.device}: FlexAttention does not support backward on CPU"
            )
        return super().vjp(op, inputs, params, cotangent)

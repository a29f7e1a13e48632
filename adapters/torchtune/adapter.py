"""torchtune's own modules as a candidate: the built-in ``torchtune`` adapter.

Each operation runs through the torchtune module its model builders use, built as its recipes build a
model — inside ``torchtune.training.set_default_dtype(dtype)``, so parameters are created in the dtype under
test — and given the suite's parameters; gradients come from autograd:

* ``rms_norm`` — ``torchtune.modules.RMSNorm`` (its weight is ``scale``): ``F.rms_norm`` on ``x.float()``,
  cast back once (``norm_rounding="single"``); ε defaults to 1e-6 (the constructor's);
* ``layer_norm`` — ``torchtune.modules.Fp32LayerNorm`` (vision encoders): float32, cast back once; ε 1e-5;
* ``rope`` — ``torchtune.modules.RotaryPositionalEmbeddings`` on x laid out as it takes it,
  ``[b, s, n_h, h_d]``, with ``input_pos`` the positions (shape ``[b, s]``). It rotates **interleaved** pairs
  (2i, 2i + 1): ``x.float().reshape(..., -1, 2)``. Its cache of cos and sin is built in float32 (theta and
  the positions are explicitly float32 even under a bfloat16 default dtype) and it rotates in float32 and
  casts once (``type_as(x)``). It rotates all of ``dim``; a partial ``rotary_dim`` is applied as a model
  with a partial rotary would use it: the module of that width on ``x[..., :rotary_dim]``, the rest passed
  through. ``max_seq_len`` is the largest position + 1 (the cache is indexed by position); past 2^20 the
  cache holds only the rows asked for, each built as ``build_rope_cache`` builds it (``far_rows``);
* ``rope_scaled`` — ``torchtune.models.llama3_1.Llama3ScaledRoPE`` (``scale_factor``, ``low_freq_factor``,
  ``high_freq_factor``, ``old_context_len``): the contract's ``llama3`` rule; torchtune has no other scaling
  rule as a module, so ``scaling.type`` declares only llama3. Same layout and precision as ``rope``;
* ``swiglu_mlp`` — ``FeedForward`` as ``torchtune.models.llama3._component_builders.llama3_mlp`` builds it
  (three bias-free ``nn.Linear``, ``nn.SiLU``): each op rounds to the input dtype, ``unfused``;
  ``swiglu_hidden_dim`` — ``scale_hidden_dim_for_mlp(dim, multiple_of)``, the width the Llama builders use
  when none is given (it has no ``ffn_dim_multiplier``: refused);
* ``attention`` — ``MultiHeadAttention`` (GQA, causal, KV cache) and, with a soft-cap or an explicit scale,
  ``Gemma2Attention`` (adapters/torchtune/attention.py). Gemma2Attention scales q in place in the input
  dtype, multiplies, caps and adds the mask in the input dtype (the softmax in float32): ``unfused``
  ``attention``. Causal attention with fewer queries than keys runs through the KV cache with the decoder's
  mask rows: bottom-right;
* ``cross_entropy_mean`` — ``torchtune.modules.loss.CEWithChunkedOutputLoss`` (8 chunks, as the recipes
  use it): each chunk's ``F.cross_entropy(logits.float(), reduction="sum")``, the sums added in float32 and
  divided by the number of non-ignored tokens. The loss is float32; it is returned in the input dtype
  (one rounding). torchtune has no per-token loss, so ``cross_entropy`` is not declared;
* ``param_count`` — ``torchtune.models.llama3_2.llama3_2`` built on the meta device
  (``tie_word_embeddings``; ``intermediate_dim`` given).

Measured on torchtune 0.6.1 with torchao 0.15.0 and torch 2.13 (CPU); other torchtune versions are refused
(docs/adapters.md, "torchtune").
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from functools import lru_cache
from importlib.metadata import version
from typing import Any

import numpy as np
import torch
import torchao
from torch import nn
from torchtune.models.llama3._component_builders import llama3_mlp
from torchtune.models.llama3._model_utils import scale_hidden_dim_for_mlp
from torchtune.models.llama3_1 import Llama3ScaledRoPE
from torchtune.models.llama3_2._component_builders import llama3_2
from torchtune.modules import Fp32LayerNorm, RMSNorm, RotaryPositionalEmbeddings
from torchtune.modules.loss import CEWithChunkedOutputLoss
from torchtune.training import set_default_dtype

from transformer_conformance.adapters.contract import Capability, Conventions
from transformer_conformance.adapters.torch.modules import ModuleAdapter
from transformer_conformance.adapters.torchtune.attention import torchtune_attention
from transformer_conformance.adapters.versions import SUPPORTED as SUPPORTED_RELEASES
from transformer_conformance.adapters.versions import describe

#: torchtune versions this adapter is measured on: [low, high) as (major, minor)
SUPPORTED = ((0, 6), (0, 7))

TORCHTUNE_VERSION = version("torchtune")  # torchtune.__version__ is empty in its releases

#: eps of torchtune's RMSNorm and of Fp32LayerNorm (nn.LayerNorm's)
RMS_EPS = 1e-6
LN_EPS = 1e-5

#: chunks of CEWithChunkedOutputLoss in torchtune's recipes (its default)
CE_CHUNKS = 8


def check_version(found: str = TORCHTUNE_VERSION) -> None:
    """Refuse, with one line, a torchtune outside the versions the adapter's declarations were measured on."""
    (lo, hi), parts = SUPPORTED, found.split("+")[0].split(".")
    try:
        have = (int(parts[0]), int(parts[1]))
    except (IndexError, ValueError):
        have = (-1, -1)
    if not lo <= have < hi:
        raise RuntimeError(
            f"the torchtune adapter supports torchtune {lo[0]}.{lo[1]}.x (its conventions are measured there), "
            f"not {found}"
        )


#: The longest cache built whole: 2^20 positions (512 MiB of cos and sin at width 128). Past it the module's
#: cache holds only the rows of the positions asked for (``far_rows``), where the whole table would take
#: gigabytes a call (positions to 2^24 − 1 are drawn).
WHOLE_CACHE = 1 << 20


@lru_cache(maxsize=4)
def _rope_module(rd: int, base: float, length: int, scaling: tuple[tuple[str, Any], ...]) -> nn.Module:
    return _new_rope_module(rd, base, length, scaling)


def _new_rope_module(rd: int, base: float, length: int, scaling: tuple[tuple[str, Any], ...]) -> nn.Module:
    """torchtune's RoPE module of width ``rd`` whose cache covers positions 0 … length − 1 (built in float32,
    as rope_init builds it whatever the default dtype)."""
    if not scaling:
        return RotaryPositionalEmbeddings(rd, max_seq_len=length, base=base)  # type: ignore[arg-type]
    rule = dict(scaling)
    if rule["type"] != "llama3":
        raise ValueError(f"torchtune has no RoPE scaling rule {rule['type']!r}; it has Llama3ScaledRoPE (llama3)")
    return Llama3ScaledRoPE(
        rd,
        max_seq_len=length,
        base=base,  # type: ignore[arg-type]
        scale_factor=rule["factor"],
        low_freq_factor=rule.get("low_freq_factor", 1),
        high_freq_factor=rule.get("high_freq_factor", 4),
        old_context_len=int(rule["original_max_position_embeddings"]),
    )


def far_rows(module: nn.Module, positions: torch.Tensor) -> tuple[nn.Module, torch.Tensor]:
    """``module`` (a fresh one) with a cache of the rows of ``positions`` alone, each built as the module's
    ``build_rope_cache`` builds every row — the float32 outer product of the position with the module's own θ
    (its scaling applied), then cos and sin — and the indices of those rows for ``input_pos``
    (tests/test_adapters_torchtune.py checks them bit for bit against the whole cache's)."""
    kept, rows = torch.unique(positions, return_inverse=True)
    theta = module.theta
    idx_theta = torch.einsum("i, j -> ij", kept.to(theta.dtype), theta).float()
    module.register_buffer("cache", torch.stack([torch.cos(idx_theta), torch.sin(idx_theta)], dim=-1), False)
    return module, rows


def torchtune_rope(
    x: torch.Tensor,
    positions: torch.Tensor,
    base: float = 10000.0,
    rotary_dim: int | None = None,
    scaling: Mapping[str, Any] | None = None,
) -> torch.Tensor:
    """x (..., T, d) through torchtune's RoPE module, in its layout [b, s, n_h, h_d] with input_pos [b, s]."""
    t, d = x.shape[-2:]
    rd = d if rotary_dim is None else rotary_dim
    key = tuple(sorted((scaling or {}).items()))
    length = int(positions.max()) + 1
    heads = x.reshape(-1, t, d).transpose(0, 1)[None]  # (1, T, n_h, d)
    if length <= WHOLE_CACHE:
        module = _rope_module(rd, float(base), length, key).to(x.device)
        rotated = module(heads[..., :rd], input_pos=positions[None, :])
    else:
        module, rows = far_rows(_new_rope_module(rd, float(base), 1, key), positions)
        rotated = module.to(x.device)(heads[..., :rd], input_pos=rows[None, :])
    out = torch.cat((rotated, heads[..., rd:]), dim=-1)
    return out[0].transpose(0, 1).reshape(x.shape)


class TorchtuneAdapter(ModuleAdapter):
    """The built-in ``torchtune`` adapter."""

    name = "torchtune"

    def __init__(self, device: str = "cpu") -> None:
        check_version()
        super().__init__()
        if device.startswith("cuda") and not torch.cuda.is_available():
            raise RuntimeError("device 'cuda' requested but torch.cuda.is_available() is False")
        self.device = device
        self.conventions = Conventions(
            rope_layout="interleaved",
            rope_angle_dtype="float32",
            compute_dtype="float32",
            norm_rounding="single",
            unfused=frozenset({"swiglu_mlp", "attention"}),
            eps_defaults={"rms_norm": RMS_EPS, "layer_norm": LN_EPS},
            causal_alignment="bottom_right",
        )
        ops = ("rms_norm", "layer_norm", "rope", "swiglu_mlp", "attention", "cross_entropy_mean")
        self.capabilities = {op: Capability() for op in ops}
        self.capabilities["rope_scaled"] = Capability(values={"scaling.type": frozenset({"llama3"})})
        self.capabilities["swiglu_hidden_dim"] = Capability(grad=False)
        self.capabilities["param_count"] = Capability(grad=False)

    def environment(self) -> dict[str, str]:
        return {
            "torchtune": TORCHTUNE_VERSION,
            "torchao": torchao.__version__,
            "torch": torch.__version__,
            "numpy": np.__version__,
            "device": self.device,
            "supports": describe(SUPPORTED_RELEASES["torchtune"]),
        }

    # ------------------------------------------------------------------------------------------ modules

    def rms_norm(self, x: torch.Tensor, weight: torch.Tensor, eps: float | None = None) -> torch.Tensor:
        with set_default_dtype(x.dtype):
            module = RMSNorm(x.shape[-1]) if eps is None else RMSNorm(x.shape[-1], eps=eps)
        module = module.to(self.device)
        self._hold(weight, module.scale, weight.detach())
        return module(x)

    def layer_norm(
        self, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float | None = None
    ) -> torch.Tensor:
        with set_default_dtype(x.dtype):
            module = Fp32LayerNorm(x.shape[-1], eps=LN_EPS if eps is None else eps)
        module = module.to(self.device)
        self._hold(weight, module.weight, weight.detach())
        self._hold(bias, module.bias, bias.detach())
        return module(x)

    def swiglu_mlp(self, x: torch.Tensor, w1: torch.Tensor, w3: torch.Tensor, w2: torch.Tensor) -> torch.Tensor:
        d, h = w1.shape
        with set_default_dtype(x.dtype):
            module = llama3_mlp(d, h)
        module = module.to(self.device)
        for w, linear in ((w1, module.w1), (w3, module.w3), (w2, module.w2)):
            assert isinstance(linear, nn.Linear)
            self._hold(w, linear.weight, w.detach().T)  # nn.Linear stores (out, in)
        return module(x)

    @staticmethod
    def cross_entropy_mean(logits: torch.Tensor, targets: torch.Tensor, ignore_index: int = -100) -> torch.Tensor:
        loss = CEWithChunkedOutputLoss(num_output_chunks=CE_CHUNKS, ignore_index=ignore_index)
        # the recipes hand it the model's output in chunks along the sequence: (1, N, V) here
        chunks = list(logits[None].chunk(CE_CHUNKS, dim=1))
        return loss(chunks, targets[None]).to(logits.dtype)

    def _impl(self, op: str) -> Callable[..., torch.Tensor]:
        impl: dict[str, Callable[..., torch.Tensor]] = {
            "rms_norm": self.rms_norm,
            "layer_norm": self.layer_norm,
            "rope": torchtune_rope,
            "rope_scaled": torchtune_rope,
            "swiglu_mlp": self.swiglu_mlp,
            "attention": torchtune_attention,
            "cross_entropy_mean": self.cross_entropy_mean,
        }
        return impl[op]

    # ------------------------------------------------------------------------------------------ contract

    def forward(self, op: str, inputs: Mapping[str, np.ndarray], params: Mapping[str, Any]) -> np.ndarray:
        if op == "swiglu_hidden_dim":
            return np.asarray(hidden_dim(**params))
        if op == "param_count":
            return np.asarray(param_count(**params))
        return super().forward(op, inputs, params)


def hidden_dim(d: int, multiple_of: int = 256, ffn_dim_multiplier: float | None = None) -> int:
    """The SwiGLU width torchtune's Llama builders use: ``scale_hidden_dim_for_mlp``."""
    if ffn_dim_multiplier is not None:
        raise ValueError("torchtune's scale_hidden_dim_for_mlp has no ffn_dim_multiplier")
    return int(scale_hidden_dim_for_mlp(d, multiple_of=multiple_of))


def param_count(
    vocab: int,
    hidden: int,
    intermediate: int,
    layers: int,
    heads: int,
    kv_heads: int | None = None,
    tied: bool = False,
) -> int:
    """Parameters of torchtune's Llama 3.2 decoder of this shape, built on the meta device (no memory)."""
    with torch.device("meta"):
        model = llama3_2(
            vocab_size=vocab,
            num_layers=layers,
            num_heads=heads,
            num_kv_heads=kv_heads or heads,
            embed_dim=hidden,
            max_seq_len=8,
            intermediate_dim=intermediate,
            tie_word_embeddings=tied,
        )
    return sum(p.numel() for p in model.parameters())

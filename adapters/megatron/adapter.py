"""NVIDIA Megatron-Core's pure-PyTorch code paths as a candidate: the built-in ``megatron`` adapter.

What runs is what a Megatron-Core model runs without Transformer Engine, Apex or fused CUDA kernels (the "local"
layer specs), each module built from a ``TransformerConfig`` in the dtype under test (``params_dtype``) on the CPU,
inside a model-parallel world of one process (adapters/megatron/runtime.py); the suite's values enter as the
modules' parameters through ``torch.func.functional_call``, and gradients are autograd's through the library's own
autograd Functions:

* ``rms_norm``, ``layer_norm`` — ``WrappedTorchNorm`` (``normalization`` "RMSNorm" / "LayerNorm"), the norm of the
  local specs without TE or Apex: ``torch.nn.RMSNorm`` and ``torch.nn.LayerNorm``. ε defaults to
  ``TransformerConfig.layernorm_epsilon``, 1e-5, which the layer specs pass for both. ``nn.LayerNorm``'s CPU backward
  keeps intermediates and partial sums in the input dtype (``unfused`` and ``low_precision_sums``
  ``layer_norm.vjp``, as the ``torch`` adapter measured for the same kernel);
* ``rope``, ``rope_scaled`` (linear, llama3, yarn), ``mrope`` (consecutive sections) — the rotary embeddings and
  ``apply_rotary_pos_emb`` (adapters/megatron/rope.py). The default layout is the **half** split
  (``rotary_interleaved`` False: ``_rotate_half`` is ``cat((-x2, x1))``); the angles are float32, cos and sin are
  rounded to the input dtype and the rotation is computed there one op at a time: ``unfused`` ``rope``,
  ``rope_scaled``, ``mrope``. Megatron-Core has no NTK, dynamic-NTK or LongRoPE rule (not declared);
* ``swiglu_mlp`` — ``MLP`` with ``ColumnParallelLinear``/``RowParallelLinear`` (fc1 holds [w1; w3], the
  gate first, as ``torch.chunk`` splits it), ``gated_linear_unit`` and ``bias_activation_fusion`` as Megatron-LM's
  ``--swiglu`` configures it: ``bias_swiglu_impl``'s ``SwiGLUFunction``, whose ``swiglu`` and hand-written
  ``swiglu_back`` are ``jit_fuser`` — ``torch.compile`` (inductor) on torch ≥ 2.2;
* ``glu_mlp`` (silu, gelu_erf, gelu_tanh, gelu_sigmoid, relu) and ``mlp`` (relu, gelu_erf, gelu_tanh, gelu_sigmoid,
  relu_squared) — the same ``MLP`` with the configuration's default ``bias_activation_fusion`` False (the plain
  ``glu``: ``activation_func(x_glu) * (x_linear + glu_linear_offset)``), ``activation_func`` ``F.silu``, ``F.gelu``,
  ``F.relu`` or Megatron-Core's own ``fast_gelu`` (the tanh form), ``quick_gelu`` (x·σ(1.702x)) and
  ``squared_relu``. Each linear layer's output is stored in the input dtype: ``unfused``;
* ``cross_entropy`` — ``tensor_parallel.vocab_parallel_cross_entropy``, in float32 (``.float()``), the per-token
  loss rounded once to the logits' dtype. It subtracts the row maximum and exponentiates **in place** ("reduces
  memory pressure"): with float32 logits ``.float()`` is the caller's tensor itself, which is overwritten with the
  softmax (and with the gradient in the backward): ``in_place_ops`` ``cross_entropy``;
* ``learned_positions`` — ``LanguageModelEmbedding(position_embedding_type="learned_absolute")``: the suite's table
  is ``position_embeddings`` (``nn.Embedding``), the word embeddings a zero row (their sum is the row exactly); a
  position past the table raises (``nn.Embedding``'s IndexError). The embedding backward adds a repeated position's
  rows in the input dtype (``low_precision_sums`` ``learned_positions.vjp``, as the ``torch`` adapter);
* ``moe_router``, ``moe_aux_loss``, ``moe_z_loss`` — ``topk_routing_with_score_function``,
  ``switch_load_balancing_loss_func`` and ``z_loss_func`` (adapters/megatron/moe.py): softmax scores, renormalised
  over the top k or not, plain top-k, with or without the scaling factor; the load-balancing fraction counts
  assignments (``aux_loss_fraction="per_assignment"``).

Not declared: attention (the local ``DotProductAttention``'s torch softmax path builds its causal and window masks
with ``device="cuda"`` hard-coded, ``transformer/utils.py``, takes its score buffer on ``torch.cuda.current_device()``
and forks the CUDA RNG tracker: it does not run without a GPU), blocks and losses Megatron-Core leaves to the
training loop (``cross_entropy_mean``, the z-loss of the LM head), parameter counts, sinusoidal positions and ALiBi
(none in Megatron-Core), MLA (its RoPE de-interleaves into the half layout, ``multi_latent_attention``).

Measured on megatron-core 0.16.1 and torch 2.13 (CPU); other megatron-core releases are refused (docs/adapters.md,
"megatron").
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from functools import cache
from importlib.metadata import version
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from megatron.core import parallel_state
from megatron.core.activations import fast_gelu, squared_relu
from megatron.core.fusions.fused_bias_geglu import quick_gelu
from megatron.core.models.common.embeddings.language_model_embedding import LanguageModelEmbedding
from megatron.core.tensor_parallel import ColumnParallelLinear, RowParallelLinear, vocab_parallel_cross_entropy
from megatron.core.transformer import TransformerConfig
from megatron.core.transformer.mlp import MLP, MLPSubmodules
from megatron.core.transformer.torch_norm import WrappedTorchNorm
from torch.func import functional_call

from transformer_conformance.adapters.contract import Capability, Conventions
from transformer_conformance.adapters.megatron import moe
from transformer_conformance.adapters.megatron.rope import megatron_mrope, megatron_rope
from transformer_conformance.adapters.megatron.runtime import compiled, ensure_model_parallel
from transformer_conformance.adapters.torch.adapter import with_autocast
from transformer_conformance.adapters.torch.modules import ModuleAdapter
from transformer_conformance.adapters.versions import SUPPORTED as SUPPORTED_RELEASES
from transformer_conformance.adapters.versions import Supported, describe, require

MEGATRON_VERSION = version("megatron-core")

#: the releases the adapter's declarations were measured on (adapters/versions.py's form; the registry's copy is
#: added by the maintainer)
SUPPORTED: tuple[Supported, ...] = SUPPORTED_RELEASES["megatron"]

#: ``TransformerConfig.layernorm_epsilon``: the ε the layer specs give both norms
NORM_EPS = 1e-5

#: the contract's activations → the ``activation_func`` a Megatron-Core configuration names
ACTIVATIONS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "silu": F.silu,
    "relu": F.relu,
    "gelu_erf": F.gelu,
    "gelu_tanh": fast_gelu,
    "gelu_sigmoid": quick_gelu,
    "relu_squared": squared_relu,
}
MLP_ACTIVATIONS = frozenset({"relu", "gelu_erf", "gelu_tanh", "gelu_sigmoid", "relu_squared"})
GLU_ACTIVATIONS = frozenset({"silu", "relu", "gelu_erf", "gelu_tanh", "gelu_sigmoid"})


def check_version(found: str | None = None) -> None:
    """Refuse, with one line, a megatron-core outside the releases the declarations were measured on."""
    require("megatron", SUPPORTED[:1], None if found is None else {"megatron-core": found})


@cache
def config(dtype: torch.dtype, hidden: int, **keys: Any) -> TransformerConfig:
    """A one-layer ``TransformerConfig`` of width ``hidden`` with parameters in ``dtype`` on the CPU, not initialised
    (the suite's values replace them)."""
    return TransformerConfig(
        num_layers=1,
        hidden_size=hidden,
        num_attention_heads=1,
        params_dtype=dtype,
        use_cpu_initialization=True,
        perform_initialization=False,
        **keys,
    )


class MegatronAdapter(ModuleAdapter):
    """The built-in ``megatron`` adapter."""

    name = "megatron"
    supported = SUPPORTED

    def __init__(self, device: str = "cpu") -> None:
        check_version()
        require(self.name, SUPPORTED[1:])
        super().__init__()
        if device != "cpu":
            raise RuntimeError("the megatron adapter runs Megatron-Core's CPU paths only (device 'cpu')")
        self.device = device
        ensure_model_parallel()
        self.conventions = Conventions(
            rope_layout="half",
            rope_angle_dtype="float32",
            compute_dtype="float32",
            norm_rounding="single",
            unfused=frozenset(
                {
                    "rope",
                    "rope_scaled",
                    "mrope",
                    "swiglu_mlp",
                    "glu_mlp",
                    "mlp",
                    "layer_norm.vjp",
                    "moe_router",
                    "moe_z_loss",
                }
            ),
            low_precision_sums=frozenset({"layer_norm.vjp", "learned_positions.vjp"}),
            eps_defaults={"rms_norm": NORM_EPS, "layer_norm": NORM_EPS},
            in_place_ops=frozenset({"cross_entropy"}),
            aux_loss_fraction="per_assignment",
        )
        ops = ("rms_norm", "layer_norm", "rope", "swiglu_mlp", "cross_entropy", "learned_positions")
        caps: dict[str, Capability] = {op: Capability() for op in ops}
        caps["rope_scaled"] = Capability(values={"scaling.type": frozenset({"linear", "llama3", "yarn"})})
        caps["mrope"] = Capability(values={"streams": frozenset({"sections"})})
        caps["mlp"] = Capability(values={"activation": MLP_ACTIVATIONS})
        caps["glu_mlp"] = Capability(values={"activation": GLU_ACTIVATIONS})
        caps["moe_router"] = Capability(
            values={
                "score": frozenset({"softmax"}),
                "norm": frozenset({"none", "topk"}),
                "selection": frozenset({"top_k"}),
                "routed_scaling": frozenset({"none", "factor"}),
            }
        )
        caps["moe_aux_loss"] = Capability()
        caps["moe_z_loss"] = Capability()
        self.capabilities = with_autocast(caps)

    def autocast(self, dtype: str) -> AbstractContextManager[Any]:
        """The mixed-precision context of a model trained in ``dtype``: ``torch.autocast`` on the CPU."""
        return torch.autocast(device_type="cpu", dtype=getattr(torch, dtype))

    def environment(self) -> dict[str, str]:
        return {
            "megatron-core": MEGATRON_VERSION,
            "torch": torch.__version__,
            "numpy": np.__version__,
            "device": self.device,
            "supports": describe(SUPPORTED),
        }

    def forward(self, op: str, inputs: Mapping[str, np.ndarray], params: Mapping[str, Any]) -> np.ndarray:
        with compiled():
            return super().forward(op, inputs, params)

    def vjp(
        self, op: str, inputs: Mapping[str, np.ndarray], params: Mapping[str, Any], cotangent: np.ndarray
    ) -> dict[str, np.ndarray]:
        with compiled():
            return super().vjp(op, inputs, params, cotangent)

    # ------------------------------------------------------------------------------------------ modules

    def _norm(self, kind: str, x: torch.Tensor, state: dict[str, torch.Tensor], eps: float | None) -> torch.Tensor:
        cfg = config(x.dtype, x.shape[-1], normalization=kind)
        module = WrappedTorchNorm(cfg, x.shape[-1], eps=NORM_EPS if eps is None else eps)
        return functional_call(module.to(dtype=x.dtype), state, (x,))

    def rms_norm(self, x: torch.Tensor, weight: torch.Tensor, eps: float | None = None) -> torch.Tensor:
        return self._norm("RMSNorm", x, {"weight": weight}, eps)

    def layer_norm(
        self, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float | None = None
    ) -> torch.Tensor:
        return self._norm("LayerNorm", x, {"weight": weight, "bias": bias}, eps)

    def _mlp(self, x: torch.Tensor, fc1: torch.Tensor, w_out: torch.Tensor, activation: str, gated: bool,
             fusion: bool = False) -> torch.Tensor:  # fmt: skip
        """Megatron's ``MLP`` on x (..., d) as [tokens, 1, d], fc1 (d, h) or [w1 | w3] (d, 2h), fc2 (h, d)."""
        d, h = w_out.shape[1], w_out.shape[0]
        cfg = config(x.dtype, d, ffn_hidden_size=h, gated_linear_unit=gated, add_bias_linear=False,
                     activation_func=ACTIVATIONS[activation], bias_activation_fusion=fusion)  # fmt: skip
        submodules = MLPSubmodules(linear_fc1=ColumnParallelLinear, linear_fc2=RowParallelLinear)
        module = MLP(cfg, submodules, ffn_hidden_size=h, tp_group=parallel_state.get_tensor_model_parallel_group())
        state = {"linear_fc1.weight": fc1.T, "linear_fc2.weight": w_out.T}  # (out, in), as the layers store them
        out, _ = functional_call(module, state, (x.reshape(-1, 1, d),))
        return out.reshape(x.shape)

    def swiglu_mlp(self, x: torch.Tensor, w1: torch.Tensor, w3: torch.Tensor, w2: torch.Tensor) -> torch.Tensor:
        return self._mlp(x, torch.cat((w1, w3), dim=1), w2, "silu", gated=True, fusion=True)

    def glu_mlp(
        self, x: torch.Tensor, w1: torch.Tensor, w3: torch.Tensor, w2: torch.Tensor, activation: str = "silu"
    ) -> torch.Tensor:
        if activation not in GLU_ACTIVATIONS:
            raise NotImplementedError(f"the adapter declares no gated MLP with {activation!r}")
        return self._mlp(x, torch.cat((w1, w3), dim=1), w2, activation, gated=True)

    def mlp(
        self, x: torch.Tensor, w_in: torch.Tensor, w_out: torch.Tensor, activation: str = "gelu_erf"
    ) -> torch.Tensor:
        if activation not in MLP_ACTIVATIONS:
            raise NotImplementedError(f"the adapter declares no MLP with {activation!r}")
        return self._mlp(x, w_in, w_out, activation, gated=False)

    def cross_entropy(self, logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return vocab_parallel_cross_entropy(logits, targets).to(logits.dtype)

    def learned_positions(self, table: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        length, d = table.shape
        cfg = config(table.dtype, d)
        tp_group = parallel_state.get_tensor_model_parallel_group()
        module = LanguageModelEmbedding(cfg, vocab_size=1, max_sequence_length=length, tp_group=tp_group).eval()
        state = {"word_embeddings.weight": table.new_zeros(1, d), "position_embeddings.weight": table}
        tokens = torch.zeros_like(positions)[None]
        return functional_call(module, state, (tokens, positions[None]))[:, 0]

    def _impl(self, op: str) -> Callable[..., torch.Tensor]:
        impl: dict[str, Callable[..., torch.Tensor]] = {
            "rms_norm": self.rms_norm,
            "layer_norm": self.layer_norm,
            "rope": megatron_rope,
            "rope_scaled": megatron_rope,
            "mrope": megatron_mrope,
            "swiglu_mlp": self.swiglu_mlp,
            "glu_mlp": self.glu_mlp,
            "mlp": self.mlp,
            "cross_entropy": self.cross_entropy,
            "learned_positions": self.learned_positions,
            "moe_router": moe.moe_router,
            "moe_aux_loss": moe.moe_aux_loss,
            "moe_z_loss": moe.moe_z_loss,
        }
        return impl[op]

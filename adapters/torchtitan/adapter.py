"""torchtitan's own model code as a candidate: the ``torchtitan`` adapter.

Each operation runs the ``torchtitan.models`` / ``torchtitan.components`` code a torchtitan model or trainer runs,
its modules built from their ``Config`` dataclasses (``config.build()``) under a default dtype of the dtype under
test (as ``training.dtype="bfloat16"`` holds a model: parameters in that dtype), given the suite's values; gradients
come from autograd:

* ``rms_norm`` — ``torchtitan.models.common.RMSNorm`` (``nn.RMSNorm``; ``F.rms_norm`` computes in float32 and
  rounds once: ``norm_rounding="single"``). ε defaults to ``RMSNorm.Config.eps``, 1e-5, which every torchtitan model
  keeps (``nn.RMSNorm``'s own default, None, is never used);
* ``layer_norm`` — ``LayerNorm`` (``nn.LayerNorm``, the vision encoders' and Flux's): ε 1e-5; its CPU backward keeps
  intermediates and partial sums in the input dtype (``unfused`` and ``low_precision_sums`` ``layer_norm.vjp``, as
  the ``torch`` adapter declares for the same kernel);
* ``rope`` — ``ComplexRoPE`` (adapters/torchtitan/rope.py): complex64 cache, **adjacent** pairs
  (``rope_layout="interleaved"``), float32 angles and rotation, one rounding;
* ``rope_scaled`` — the same with ``scaling="llama"`` (the Llama 3 bands: ``llama3``). torchtitan's YaRN
  (``_yarn_inv_freq``) is "intentionally" a pure rotation, its attention factor folded into the MLA / gpt-oss softmax
  scale: the contract's ``yarn`` (coordinates times 0.1·ln s + 1) is not what its RoPE computes, so not declared (the
  factor is checked where torchtitan puts it, ``mla_attention``'s scale); it has no linear, NTK, dynamic or LongRoPE;
* ``swiglu_mlp``, ``glu_mlp`` (silu) — ``FeedForward`` as ``make_ffn_config`` builds it (three bias-free ``Linear``s):
  each op rounds to the input dtype (``unfused``); ``swiglu_hidden_dim`` — ``compute_ffn_hidden_dim``;
* ``attention``, ``sliding_window_attention``, ``chunked_attention``, ``mla_attention``, ``block`` —
  ``FlexAttention`` with the decoders' masks, DeepSeek-V3's MLA, ``Llama3TransformerBlock``
  (adapters/torchtitan/attention.py); forward only on the CPU;
* ``lm_head`` — a ``Llama3Model`` without layers whose ``tok_embeddings`` is None, as a pipeline's last stage holds
  it: ``Decoder.forward`` is ``lm_head(norm(h))``;
* ``moe_router`` — ``TokenChoiceTopKRouter`` (every value of every choice): its gate a ``Linear`` holding the
  identity (each logit the suite's, bit for bit, under the router's float32 autocast), the scores in float32, the
  suite's bias as ``MoE.expert_bias_E`` (float32, selection only), ``num_expert_groups``/``num_limited_groups``, top-k,
  ``route_norm`` (+1e-20), ``route_scale``; the (N, k) scores scattered into the dense weights, rounded once.
  torchtitan balances its experts by that bias alone: it has no load-balancing loss (``moe_aux_loss``) nor router
  z-loss;
* ``cross_entropy``, ``cross_entropy_mean``, ``linear_cross_entropy`` (mean) — ``compute_logprobs``,
  ``CrossEntropyLoss`` and ``ChunkedLossWrapper`` (adapters/torchtitan/losses.py);
* ``param_count`` — ``Llama3Model`` built on the meta device by torchtitan's own ``_build_llama3_layers`` and
  counted by ``Llama3Model.Config.get_nparams_and_flops`` (by its own expression without layers).

Measured on torchtitan 0.3.0 with torch 2.13 and triton 3.9 (CPU; ``torchtitan.models.common`` imports triton through
its expert-parallel kernels); other torchtitan releases are refused.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from importlib.metadata import version
from typing import Any

import numpy as np
import torch
from torch._dynamo.utils import counters
from torchtitan.models.common import Embedding, FeedForward, LayerNorm, Linear, RMSNorm, compute_ffn_hidden_dim
from torchtitan.models.common.config_utils import make_ffn_config, make_router_config
from torchtitan.models.common.moe import TokenChoiceTopKRouter
from torchtitan.models.llama3 import _build_llama3_layers
from torchtitan.models.llama3.model import Llama3Model
from torchtitan.tools.utils import set_default_dtype

from transformer_conformance.adapters.contract import Capability, Conventions
from transformer_conformance.adapters.torch.modules import ModuleAdapter
from transformer_conformance.adapters.torchtitan import attention as titan_attention
from transformer_conformance.adapters.torchtitan import losses
from transformer_conformance.adapters.torchtitan.rope import complex_rope, rope_config, rope_module
from transformer_conformance.adapters.versions import SUPPORTED as SUPPORTED_RELEASES
from transformer_conformance.adapters.versions import Supported, describe, require

TORCHTITAN_VERSION = version("torchtitan")

#: the releases the adapter's declarations were measured on (adapters/versions.py)
SUPPORTED: tuple[Supported, ...] = SUPPORTED_RELEASES["torchtitan"]

#: ``RMSNorm.Config.eps`` and ``LayerNorm.Config.eps``: what torchtitan's models build their norms with
NORM_EPS = 1e-5

#: the operations that run FlexAttention: forward only on the CPU (no backward there), one graph per shape
FLEX_OPS = ("attention", "sliding_window_attention", "chunked_attention", "mla_attention", "block")


def check_version(found: str | None = None) -> None:
    """Refuse, with one line, a torchtitan outside the release series the declarations were measured on."""
    require("torchtitan", SUPPORTED[:1], None if found is None else {"torchtitan": found})


class TorchtitanAdapter(ModuleAdapter):
    """The ``torchtitan`` adapter."""

    name = "torchtitan"
    supported = SUPPORTED

    def __init__(self, device: str = "cpu") -> None:
        check_version()
        require(self.name, SUPPORTED[1:])
        super().__init__()
        if device.startswith("cuda") and not torch.cuda.is_available():
            raise RuntimeError("device 'cuda' requested but torch.cuda.is_available() is False")
        self.device = device
        self.conventions = Conventions(
            rope_layout="interleaved",
            rope_angle_dtype="float32",
            compute_dtype="float32",
            norm_rounding="single",
            unfused=frozenset(
                {
                    "swiglu_mlp",
                    "glu_mlp",
                    "layer_norm.vjp",
                    "linear_cross_entropy",
                    "lm_head",
                    *FLEX_OPS,
                }
            ),
            low_precision_sums=frozenset({"layer_norm.vjp"}),
            eps_defaults={"rms_norm": NORM_EPS, "layer_norm": NORM_EPS},
            causal_alignment="bottom_right",
            sliding_window="inclusive",
        )
        autocast = frozenset({"bfloat16"})  # torchtitan's mixed precision: bfloat16 through torch.autocast
        caps: dict[str, Capability] = {
            "rms_norm": Capability(autocast=autocast),
            "layer_norm": Capability(autocast=autocast),
            "rope": Capability(autocast=autocast),
            "rope_scaled": Capability(values={"scaling.type": frozenset({"llama3"})}, autocast=autocast),
            "swiglu_mlp": Capability(),
            "glu_mlp": Capability(values={"activation": frozenset({"silu"})}),
            "swiglu_hidden_dim": Capability(),
            "param_count": Capability(),
            "cross_entropy": Capability(),
            "cross_entropy_mean": Capability(),
            "linear_cross_entropy": Capability(values={"reduction": frozenset({"mean"})}),
            "lm_head": Capability(),
            "moe_router": Capability(),  # every value of score, norm, selection, routed_scaling
        }
        grad = not device.startswith("cpu")
        flex = {
            "attention": Capability(grad=grad, values={"softcap": frozenset({"none"})}, compiles="per_value"),
            "sliding_window_attention": Capability(
                grad=grad, values={"softcap": frozenset({"none"})}, compiles="per_value"
            ),
            "chunked_attention": Capability(grad=grad, compiles="per_value"),
            "mla_attention": Capability(grad=grad, values={"form": frozenset({"naive"})}, compiles="per_value"),
            "block": Capability(grad=grad, values={"placement": frozenset({"pre"})}, compiles="per_value"),
        }
        self.capabilities = caps | flex

    def autocast(self, dtype: str) -> AbstractContextManager[Any]:
        """The training step's mixed precision (single device or DDP): ``torch.autocast`` in ``dtype``."""
        return torch.autocast(device_type=torch.device(self.device).type, dtype=getattr(torch, dtype))

    def environment(self) -> dict[str, str]:
        return {
            "torchtitan": TORCHTITAN_VERSION,
            "torch": torch.__version__,
            "triton": version("triton"),
            "numpy": np.__version__,
            "device": self.device,
            "supports": describe(SUPPORTED),
        }

    def compiles(self) -> int:
        """The graphs dynamo has built in this process (FlexAttention's kernels, one per shape, dtype and mask)."""
        return int(counters["stats"]["unique_graphs"])

    def forward(self, op: str, inputs: Mapping[str, np.ndarray], params: Mapping[str, Any]) -> np.ndarray:
        if op == "swiglu_hidden_dim":
            return np.asarray(self.swiglu_hidden_dim(**params))
        if op == "param_count":
            return np.asarray(self.param_count(**params))
        return super().forward(op, inputs, params)

    # ------------------------------------------------------------------------------------------ norms

    def rms_norm(self, x: torch.Tensor, weight: torch.Tensor, eps: float | None = None) -> torch.Tensor:
        config = RMSNorm.Config(normalized_shape=x.shape[-1], eps=NORM_EPS if eps is None else float(eps))
        with set_default_dtype(weight.dtype), torch.device(self.device):
            module = config.build()
        self._hold(weight, module.weight, weight.detach())
        return module(x)

    def layer_norm(
        self, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float | None = None
    ) -> torch.Tensor:
        config = LayerNorm.Config(normalized_shape=x.shape[-1], eps=NORM_EPS if eps is None else float(eps))
        with set_default_dtype(weight.dtype), torch.device(self.device):
            module = config.build()
        self._hold(weight, module.weight, weight.detach())
        self._hold(bias, module.bias, bias.detach())
        return module(x)

    # ------------------------------------------------------------------------------------------ MLP

    def _feed_forward(self, x: torch.Tensor, w1: torch.Tensor, w3: torch.Tensor, w2: torch.Tensor) -> torch.Tensor:
        d, h = w1.shape
        with set_default_dtype(x.dtype), torch.device(self.device):
            module: FeedForward = make_ffn_config(dim=d, hidden_dim=h, w1_param_init={}, w2w3_param_init={}).build()
        for w, linear in ((w1, module.w1), (w3, module.w3), (w2, module.w2)):
            self._hold(w, linear.weight, w.detach().T)  # Linear stores (out, in)
        return module(x)

    def swiglu_mlp(self, x: torch.Tensor, w1: torch.Tensor, w3: torch.Tensor, w2: torch.Tensor) -> torch.Tensor:
        return self._feed_forward(x, w1, w3, w2)

    def glu_mlp(
        self, x: torch.Tensor, w1: torch.Tensor, w3: torch.Tensor, w2: torch.Tensor, activation: str = "silu"
    ) -> torch.Tensor:
        if activation != "silu":
            raise NotImplementedError(f"torchtitan's FeedForward is SwiGLU; it has no {activation!r} GLU")
        return self._feed_forward(x, w1, w3, w2)

    @staticmethod
    def swiglu_hidden_dim(d: int, multiple_of: int = 256, ffn_dim_multiplier: float | None = None) -> int:
        return compute_ffn_hidden_dim(int(d), multiple_of=int(multiple_of), ffn_dim_multiplier=ffn_dim_multiplier)

    # ------------------------------------------------------------------------------------------ counts

    @staticmethod
    def param_count(
        vocab: int,
        hidden: int,
        intermediate: int,
        layers: int,
        heads: int,
        kv_heads: int | None = None,
        tied: bool = False,
    ) -> int:
        """A Llama 3 model of this shape (``Llama3Model.Config`` as its flavours write it) on the meta device, counted
        as ``get_dense_model_nparams_and_flops`` counts it: ``model.parameters()``, a tied weight once (the function
        itself reads ``layers[0]`` for its FLOPs, so it needs a layer; the suite also counts a model without one)."""
        with torch.device("meta"):
            config = Llama3Model.Config(
                dim=hidden,
                vocab_size=vocab,
                enable_weight_tying=bool(tied),
                tok_embeddings=Embedding.Config(num_embeddings=vocab, embedding_dim=hidden),
                norm=RMSNorm.Config(normalized_shape=hidden),
                lm_head=Linear.Config(in_features=hidden, out_features=vocab),
                layers=_build_llama3_layers(
                    n_layers=layers,
                    dim=hidden,
                    n_heads=heads,
                    n_kv_heads=kv_heads,
                    hidden_dim=intermediate,
                    rope=rope_config(hidden // heads, 1, 10000.0, None),
                    attn_backend="flex",
                ),
            )
            model = config.build()
        if layers:
            nparams, _ = config.get_nparams_and_flops(model, seq_len=1)
            return int(nparams)
        return sum(p.numel() for p in model.parameters())

    # ------------------------------------------------------------------------------------------ head, router

    def lm_head(
        self, x: torch.Tensor, norm_weight: torch.Tensor, w_head: torch.Tensor, eps: float | None = None
    ) -> torch.Tensor:
        d, v = w_head.shape
        config = Llama3Model.Config(
            dim=d,
            vocab_size=v,
            tok_embeddings=Embedding.Config(num_embeddings=1, embedding_dim=d),
            norm=RMSNorm.Config(normalized_shape=d, eps=NORM_EPS if eps is None else float(eps)),
            lm_head=Linear.Config(in_features=d, out_features=v),
            layers=[],
        )
        with set_default_dtype(x.dtype), torch.device(self.device):
            model = config.build()
        model.tok_embeddings = None  # a pipeline's last stage: the hidden states come in
        self._hold(norm_weight, model.norm.weight, norm_weight.detach())
        self._hold(w_head, model.lm_head.weight, w_head.detach().T)
        lead = x.shape[:-1]
        return model(x.reshape(1, -1, d)).reshape(*lead, v)

    def moe_router(
        self,
        logits: torch.Tensor,
        bias: torch.Tensor,
        k: int,
        score: str = "softmax",
        norm: str = "none",
        routed_scaling_factor: float = 1.0,
        n_group: int | None = None,
        topk_group: int | None = None,
    ) -> torch.Tensor:
        n, e = logits.shape
        config = make_router_config(
            dim=e,
            num_experts=e,
            gate_param_init={},
            top_k=int(k),
            score_func=score,  # type: ignore[arg-type]
            route_norm=norm == "topk",
            route_scale=float(routed_scaling_factor),
            num_expert_groups=None if n_group is None else int(n_group),
            num_limited_groups=None if n_group is None else int(topk_group or n_group),
        )
        with set_default_dtype(logits.dtype), torch.device(self.device):
            router: TokenChoiceTopKRouter = config.build()
        with torch.no_grad():
            router.gate.weight.copy_(torch.eye(e))  # each logit the suite's, bit for bit
        expert_bias = bias.detach().float()  # MoE.expert_bias_E: a float32 buffer, selection only
        scores, experts, _ = router(logits[None], expert_bias)
        dense = torch.zeros(n, e, dtype=scores.dtype, device=scores.device)
        return dense.scatter(1, experts[0], scores[0]).to(logits.dtype)

    # ------------------------------------------------------------------------------------------ flex

    def block(
        self,
        x: torch.Tensor,
        attn_norm: torch.Tensor,
        mlp_norm: torch.Tensor,
        attn_post_norm: torch.Tensor,
        mlp_post_norm: torch.Tensor,
        wq: torch.Tensor,
        wk: torch.Tensor,
        wv: torch.Tensor,
        wo: torch.Tensor,
        w1: torch.Tensor,
        w3: torch.Tensor,
        w2: torch.Tensor,
        positions: torch.Tensor,
        placement: str = "pre",
        n_heads: int = 1,
        n_kv_heads: int | None = None,
        eps: float = 1e-5,
        base: float = 10000.0,
    ) -> torch.Tensor:
        if placement != "pre":
            raise NotImplementedError(f"torchtitan's Llama3TransformerBlock is pre-norm, not {placement!r}")
        b, t, d = x.shape
        hq, hkv = int(n_heads), int(n_kv_heads or n_heads)
        hd = wq.shape[1] // hq
        with set_default_dtype(x.dtype), torch.device(self.device):
            module = titan_attention.block_module(d, hq, hkv, hd, w1.shape[1], float(eps), float(base))
        attn, ffn = module.attention, module.feed_forward
        pairs = (
            (wq, attn.qkv_linear.wq),
            (wk, attn.qkv_linear.wk),
            (wv, attn.qkv_linear.wv),
            (wo, attn.wo),
            (w1, ffn.w1),
            (w3, ffn.w3),
            (w2, ffn.w2),
        )
        for w, linear in pairs:
            self._hold(w, linear.weight, w.detach().T)
        self._hold(attn_norm, module.attention_norm.weight, attn_norm.detach())
        self._hold(mlp_norm, module.ffn_norm.weight, mlp_norm.detach())
        attn.rope, pos = rope_module(hd, positions, float(base), None)
        mask = titan_attention.causal_mask(b, t, x.device)
        with torch._dynamo.config.patch(titan_attention.DYNAMO_CONFIG):
            return module(x, mask, pos.expand(b, -1))

    def _impl(self, op: str) -> Callable[..., torch.Tensor]:
        impl: dict[str, Callable[..., torch.Tensor]] = {
            "rms_norm": self.rms_norm,
            "layer_norm": self.layer_norm,
            "rope": complex_rope,
            "rope_scaled": complex_rope,
            "swiglu_mlp": self.swiglu_mlp,
            "glu_mlp": self.glu_mlp,
            "cross_entropy": losses.cross_entropy,
            "cross_entropy_mean": losses.cross_entropy_mean,
            "linear_cross_entropy": losses.linear_cross_entropy,
            "lm_head": self.lm_head,
            "moe_router": self.moe_router,
            "attention": titan_attention.attention,
            "sliding_window_attention": titan_attention.sliding_window_attention,
            "chunked_attention": titan_attention.chunked_attention,
            "mla_attention": titan_attention.mla_attention,
            "block": self.block,
        }
        return impl[op]

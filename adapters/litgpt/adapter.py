"""LitGPT's own modules as a candidate: the built-in ``litgpt`` adapter.

Each operation runs through the ``litgpt.model`` code a LitGPT model runs, its modules built from a
``litgpt.Config`` under a default dtype of the dtype under test (as ``fabric.init_module()`` builds a
"bf16-true" model: parameters in that dtype) and given the suite's values; gradients come from autograd:

* ``rms_norm`` — ``Config(norm_class_name="RMSNorm").norm_class`` (``litgpt.model.RMSNorm``, no unit offset):
  ``x.float()``, mean of squares, ``rsqrt``, times ``weight.float()``, cast back once (``norm_rounding="single"``).
  ε defaults to ``Config.norm_eps``, 1e-5 — what every LitGPT model passes (the class's own default, 1e-6, is
  never used by ``GPT``);
* ``layer_norm`` — ``torch.nn.LayerNorm``, what ``Config(norm_class_name="LayerNorm").norm_class`` is; ε 1e-5.
  Its CPU backward in bfloat16 and float16 keeps intermediates and partial sums in the input dtype (measured:
  bfloat16 ∂L/∂x 0.042 ulp off against a single-rounding budget of 0.003): ``unfused`` and
  ``low_precision_sums`` ``layer_norm.vjp``, as the ``torch`` adapter declares for the same kernel;
* ``rope`` — ``build_rope_cache(seq_len, n_elem=rotary_dim, base=base)`` and ``apply_rope`` on ``x[..., :rd]``,
  the rest concatenated, as ``CausalSelfAttention`` applies it (``rope_n_elem``). ``apply_rope`` rotates the
  **half** split (``cat((-x2, x1))``): declared ``rope_layout="half"``; the cache is float32 (``.float()`` on
  the ``arange``), the products are promoted to float32 and cast once. The cache covers positions 0 … seq_len − 1
  (``GPT`` indexes it by position); past 2^16 positions the adapter builds only the rows asked for, running
  ``build_rope_cache`` itself with the positions in place of its ``arange`` (``rope_rows``; bit for bit the whole
  cache's rows, tests/test_adapters_litgpt.py);
* ``rope_scaled`` — the same with ``extra_config`` as ``GPT.rope_cache`` builds it from ``rope_adjustments``:
  ``linear`` ({"factor"}), ``llama3`` (``factor``, ``low_freq_factor``, ``high_freq_factor``,
  ``original_max_seq_len``) and ``yarn`` (``factor``, ``beta_fast``, ``beta_slow``, ``original_max_seq_len``;
  as a user writes them; without ``mscale`` LitGPT leaves the attention factor at 1 where the contract's YaRN
  has 0.1·ln s + 1, listed with its inverted ramp in expectations/litgpt.toml). LitGPT has no NTK, dynamic or
  LongRoPE rule: not declared;
* ``swiglu_mlp``, ``glu_mlp`` — ``LLaMAMLP`` (silu) and ``GemmaMLP`` (``gelu_approximate`` "none": gelu_erf,
  "tanh": gelu_tanh), ``bias=False``; ``mlp`` — ``GptNeoxMLP`` (gelu_erf, gelu_tanh). Each ``nn.Linear`` and
  activation rounds to the input dtype: ``unfused``;
* ``attention``, ``sliding_window_attention`` — ``CausalSelfAttention`` (adapters/litgpt/attention.py): the KV
  cache with ``GPT.forward``'s mask rows gives bottom-right alignment; the window keeps keys
  ``i − W + 1 … i`` (``window_start = max(0, i - sliding_window_size + 1)``): ``sliding_window="inclusive"``.
  The soft-capped path computes q·kᵀ·scale, the cap and the mask in the input dtype: ``unfused``;
* ``moe_router`` — ``LLaMAMoE.forward``'s routing: ``torch.topk`` of the gate's logits, then the softmax over the
  k chosen in float32, cast to the input dtype, times ``routed_scaling_factor``. The softmax over the chosen k is
  the contract's softmax score renormalised over the top k: ``score`` softmax, ``norm`` topk, ``selection``
  top_k. The gate is ``nn.Identity`` (the suite's logits are the gate's output) and each expert returns its own
  one-hot row, so the block's output is the dense combine weights. The grouped sigmoid router
  (``GroupedTopkRouter``) is not declared: the contract declares a router's choices as a product, and LitGPT
  has neither a softmax router with bias or without renormalisation nor a sigmoid one without groups.

Measured on litgpt 0.5.13 and torch 2.13 (CPU); other litgpt releases are refused (docs/adapters.md, "litgpt").
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from importlib.metadata import version
from types import SimpleNamespace
from typing import Any
from unittest import mock

import numpy as np
import torch
from litgpt import Config
from litgpt import model as litgpt_model
from litgpt.model import GemmaMLP, GptNeoxMLP, LLaMAMLP, LLaMAMoE, apply_rope, build_rope_cache
from torch import nn

from transformer_conformance.adapters.contract import Capability, Conventions
from transformer_conformance.adapters.litgpt.attention import litgpt_attention, litgpt_sliding_window_attention
from transformer_conformance.adapters.torch.modules import ModuleAdapter
from transformer_conformance.adapters.versions import SUPPORTED as SUPPORTED_RELEASES
from transformer_conformance.adapters.versions import describe, require

LITGPT_VERSION = version("litgpt")

#: ``Config.norm_eps``: the ε every LitGPT model gives its RMSNorm and LayerNorm unless its config sets one
NORM_EPS = 1e-5

#: positions up to which the whole cos/sin cache is built (``build_rope_cache(seq_len=max + 1)``); beyond, the rows
#: asked for alone (``rope_rows``)
WHOLE_CACHE = 1 << 16

#: the contract's GELU names → LitGPT's ``gelu_approximate``
GELU = {"gelu_erf": "none", "gelu_tanh": "tanh"}


def check_version(found: str | None = None) -> None:
    """Refuse, with one line, a litgpt outside the releases the adapter's declarations were measured on."""
    require("litgpt", SUPPORTED_RELEASES["litgpt"][:1], None if found is None else {"litgpt": found})


@contextmanager
def default_dtype(dtype: torch.dtype) -> Iterator[None]:
    """Modules built inside have their parameters in ``dtype`` (as under ``fabric.init_module()``)."""
    old = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        yield
    finally:
        torch.set_default_dtype(old)


def extra_config(scaling: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """``build_rope_cache``'s ``extra_config`` for the contract's scaling rule, as ``GPT.rope_cache`` passes it."""
    if not scaling:
        return None
    kind = scaling["type"]
    if kind == "linear":
        return {"factor": scaling["factor"]}
    if kind == "llama3":
        return {
            "factor": scaling["factor"],
            "low_freq_factor": scaling.get("low_freq_factor", 1.0),
            "high_freq_factor": scaling.get("high_freq_factor", 4.0),
            "original_max_seq_len": scaling["original_max_position_embeddings"],
        }
    if kind == "yarn":
        return {
            "factor": scaling["factor"],
            "beta_fast": scaling.get("beta_fast", 32.0),
            "beta_slow": scaling.get("beta_slow", 1.0),
            "original_max_seq_len": scaling["original_max_position_embeddings"],
        }
    raise ValueError(f"LitGPT has no RoPE scaling rule {kind!r} (it has linear, llama3 and yarn)")


def rope_rows(
    positions: torch.Tensor, n_elem: int, base: float, extra: dict[str, Any] | None, device: torch.device
) -> tuple[torch.Tensor, torch.Tensor]:
    """The cos and sin rows of ``positions`` (in their order), built by ``build_rope_cache`` itself: while it runs,
    ``torch.outer(seq_idx, theta)`` takes the positions (float32, as its ``arange(...).float()``) for its
    ``seq_idx`` of one row. Everything else — θ, the scaling rule, the attention factor — is LitGPT's code."""
    wanted = positions.float()

    def outer(seq_idx: torch.Tensor, theta: torch.Tensor) -> torch.Tensor:
        return torch.outer(wanted.to(seq_idx.device), theta)

    stand_in = SimpleNamespace(outer=outer)
    proxy = _TorchProxy(stand_in)
    with mock.patch.object(litgpt_model, "torch", proxy):
        return build_rope_cache(seq_len=1, n_elem=n_elem, device=device, base=base, extra_config=extra)


class _TorchProxy:
    """``torch`` with some functions replaced (``rope_rows``)."""

    def __init__(self, replaced: SimpleNamespace) -> None:
        self._replaced = replaced

    def __getattr__(self, name: str) -> Any:
        return getattr(self._replaced, name, None) or getattr(torch, name)


def litgpt_rope(
    x: torch.Tensor,
    positions: torch.Tensor,
    base: float = 10000.0,
    rotary_dim: int | None = None,
    scaling: Mapping[str, Any] | None = None,
) -> torch.Tensor:
    """x (..., T, d) rotated as ``CausalSelfAttention`` rotates q and k: ``apply_rope`` on the first ``rope_n_elem``."""
    rd = x.shape[-1] if rotary_dim is None else rotary_dim
    extra = extra_config(scaling)
    top = int(positions.max()) + 1 if positions.numel() else 1
    if top <= WHOLE_CACHE:
        cos, sin = build_rope_cache(seq_len=top, n_elem=rd, device=x.device, base=base, extra_config=extra)
        cos, sin = cos[positions], sin[positions]
    else:
        cos, sin = rope_rows(positions, rd, base, extra, x.device)
    lead = x.reshape(-1, *x.shape[-2:])  # (n, T, d): apply_rope's (B, ..., T, head_size) with cos (1, T, rd)
    roped = apply_rope(lead[..., :rd], cos[None], sin[None])
    return torch.cat((roped, lead[..., rd:]), dim=-1).reshape(x.shape)


class _OneHot(nn.Module):
    """An expert whose output is its own one-hot row: the MoE block's output is then its combine weights."""

    def __init__(self, e: int, n: int) -> None:
        super().__init__()
        self.e, self.n = e, n

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = torch.zeros(x.shape[0], self.n, dtype=x.dtype, device=x.device)
        out[:, self.e] = 1
        return out


class LitgptAdapter(ModuleAdapter):
    """The built-in ``litgpt`` adapter."""

    name = "litgpt"

    def __init__(self, device: str = "cpu") -> None:
        check_version()
        super().__init__()
        if device.startswith("cuda") and not torch.cuda.is_available():
            raise RuntimeError("device 'cuda' requested but torch.cuda.is_available() is False")
        self.device = device
        self.conventions = Conventions(
            rope_layout="half",
            rope_angle_dtype="float32",
            compute_dtype="float32",
            norm_rounding="single",
            unfused=frozenset(
                {
                    "swiglu_mlp",
                    "glu_mlp",
                    "mlp",
                    "attention",
                    "sliding_window_attention",
                    "layer_norm.vjp",
                    "rope.vjp",
                    "rope_scaled.vjp",
                    "moe_router",
                }
            ),
            # torch.nn.LayerNorm's CPU backward stores and sums in the input dtype, as the torch adapter measured
            low_precision_sums=frozenset({"layer_norm.vjp"}),
            eps_defaults={"rms_norm": NORM_EPS, "layer_norm": NORM_EPS},
            causal_alignment="bottom_right",
            sliding_window="inclusive",
        )
        ops = ("rms_norm", "layer_norm", "rope", "swiglu_mlp", "attention", "sliding_window_attention")
        self.capabilities: dict[str, Capability] = {op: Capability() for op in ops}
        self.capabilities["rope_scaled"] = Capability(values={"scaling.type": frozenset({"linear", "llama3", "yarn"})})
        self.capabilities["glu_mlp"] = Capability(values={"activation": frozenset({"silu", "gelu_erf", "gelu_tanh"})})
        self.capabilities["mlp"] = Capability(values={"activation": frozenset({"gelu_erf", "gelu_tanh"})})
        self.capabilities["moe_router"] = Capability(
            values={
                "score": frozenset({"softmax"}),
                "norm": frozenset({"topk"}),
                "selection": frozenset({"top_k"}),
                "routed_scaling": frozenset({"none", "factor"}),
            }
        )

    def environment(self) -> dict[str, str]:
        return {
            "litgpt": LITGPT_VERSION,
            "torch": torch.__version__,
            "numpy": np.__version__,
            "device": self.device,
            "supports": describe(SUPPORTED_RELEASES["litgpt"]),
        }

    # ------------------------------------------------------------------------------------------ modules

    def rms_norm(self, x: torch.Tensor, weight: torch.Tensor, eps: float | None = None) -> torch.Tensor:
        config = Config(norm_class_name="RMSNorm", norm_eps=NORM_EPS if eps is None else eps)
        with default_dtype(x.dtype):
            module = config.norm_class(x.shape[-1], eps=config.norm_eps).to(self.device)
        self._hold(weight, module.weight, weight.detach())
        return module(x)

    def layer_norm(
        self, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float | None = None
    ) -> torch.Tensor:
        config = Config(norm_class_name="LayerNorm", norm_eps=NORM_EPS if eps is None else eps)
        with default_dtype(x.dtype):
            module = config.norm_class(x.shape[-1], eps=config.norm_eps).to(self.device)
        self._hold(weight, module.weight, weight.detach())
        self._hold(bias, module.bias, bias.detach())
        return module(x)

    def _glu(self, cls: type[LLaMAMLP], x: torch.Tensor, w1: torch.Tensor, w3: torch.Tensor, w2: torch.Tensor,
             gelu: str = "none") -> torch.Tensor:  # fmt: skip
        d, h = w1.shape
        config = Config(n_embd=d, n_head=1, intermediate_size=h, bias=False, gelu_approximate=gelu)
        with default_dtype(x.dtype):
            module = cls(config).to(self.device)
        for w, linear in ((w1, module.fc_1), (w3, module.fc_2), (w2, module.proj)):
            self._hold(w, linear.weight, w.detach().T)  # nn.Linear stores (out, in)
        return module(x)

    def swiglu_mlp(self, x: torch.Tensor, w1: torch.Tensor, w3: torch.Tensor, w2: torch.Tensor) -> torch.Tensor:
        return self._glu(LLaMAMLP, x, w1, w3, w2)

    def glu_mlp(
        self, x: torch.Tensor, w1: torch.Tensor, w3: torch.Tensor, w2: torch.Tensor, activation: str = "silu"
    ) -> torch.Tensor:
        if activation == "silu":
            return self._glu(LLaMAMLP, x, w1, w3, w2)
        if activation not in GELU:
            raise ValueError(f"LitGPT has no GLU MLP with {activation!r} (LLaMAMLP: silu, GemmaMLP: GELU)")
        return self._glu(GemmaMLP, x, w1, w3, w2, GELU[activation])

    def mlp(
        self, x: torch.Tensor, w_in: torch.Tensor, w_out: torch.Tensor, activation: str = "gelu_erf"
    ) -> torch.Tensor:
        if activation not in GELU:
            raise ValueError(f"LitGPT's GptNeoxMLP has GELU only, not {activation!r}")
        d, h = w_in.shape
        config = Config(n_embd=d, n_head=1, intermediate_size=h, bias=False, gelu_approximate=GELU[activation])
        with default_dtype(x.dtype):
            module = GptNeoxMLP(config).to(self.device)
        self._hold(w_in, module.fc.weight, w_in.detach().T)
        self._hold(w_out, module.proj.weight, w_out.detach().T)
        return module(x)

    def moe_router(
        self,
        logits: torch.Tensor,
        bias: torch.Tensor,
        k: int,
        score: str = "softmax",
        norm: str = "topk",
        routed_scaling_factor: float = 1.0,
        n_group: int | None = None,
        topk_group: int | None = None,
    ) -> torch.Tensor:
        if score != "softmax" or norm != "topk" or n_group is not None:
            raise ValueError("LitGPT's LLaMAMoE routes by the softmax over the top k of its logits only")
        e = logits.shape[1]
        config = Config(
            n_embd=e,
            n_head=1,
            mlp_class_name="LLaMAMoE",
            intermediate_size=1,
            moe_intermediate_size=1,
            n_expert=e,
            n_expert_per_token=int(k),
            routed_scaling_factor=float(routed_scaling_factor),
            bias=False,
        )
        with default_dtype(logits.dtype):
            module = LLaMAMoE(config).to(self.device)
        module.gate = nn.Identity()
        module.experts = nn.ModuleList(_OneHot(i, e) for i in range(e))
        return module(logits[None])[0]

    def _impl(self, op: str) -> Callable[..., torch.Tensor]:
        impl: dict[str, Callable[..., torch.Tensor]] = {
            "rms_norm": self.rms_norm,
            "layer_norm": self.layer_norm,
            "rope": litgpt_rope,
            "rope_scaled": litgpt_rope,
            "swiglu_mlp": self.swiglu_mlp,
            "glu_mlp": self.glu_mlp,
            "mlp": self.mlp,
            "attention": litgpt_attention,
            "sliding_window_attention": litgpt_sliding_window_attention,
            "moe_router": self.moe_router,
        }
        return impl[op]

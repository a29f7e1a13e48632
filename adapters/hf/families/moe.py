"""HF transformers' mixture-of-experts routers as candidates for ``moe_router`` and ``moe_aux_loss``: each model
family's own router class (the ``gate`` of its sparse MoE block) and its modeling file's
``load_balancing_loss_func``, built from a tiny configuration of that family (no weights are downloaded).

How the suite's logits reach the router: the router is a linear layer on the hidden states, so the adapter hands it
hidden states equal to the logits (N, E), hidden size E, and a gate weight equal to the identity (E, E). Each router
logit is then Σ_j u_j·δ_ij — one product u_i·1 and exact zeros — the suite's logit bit for bit in any dtype and any
order of accumulation, and autograd's ∂u = ∂logits·I is exact likewise: what is checked is the routing after the
linear layer, on the logits the suite drew. The weight enters through ``torch.func.functional_call`` on a router
built on the meta device, in the dtype a model of that dtype holds it (DeepSeek-V3's in float32, as its code keeps
it). The selected experts' weights the router returns (N, k) and their indices are scattered into the contract's
dense (N, E) combine weights, exactly 0 elsewhere; gradients are autograd's through the router's own code.

* ``hf-mixtral`` — ``MixtralTopKRouter`` (``MixtralSparseMoeBlock.gate``): softmax of the logits in float32, top-k,
  renormalised (always): ``score`` softmax, ``norm`` topk; no selection bias, no scaling factor.
* ``hf-qwen3-moe`` — ``Qwen3MoeTopKRouter``: softmax in float32, top-k, renormalised when the configuration's
  ``norm_topk_prob`` is set: ``norm`` none and topk (both values of the configuration).
* ``hf-olmoe`` — ``OlmoeTopKRouter``: as Qwen 3's (OLMoE ships ``norm_topk_prob`` false).
* ``hf-deepseek-v3`` — ``DeepseekV3TopkRouter`` (5.13 on; before, ``DeepseekV3MoE.route_tokens_to_experts``):
  sigmoid scores in float32; ``e_score_correction_bias`` holds the suite's bias, which enters only the choice;
  ``n_group`` groups of consecutive experts, each scored by the sum of its two highest choice scores, of which
  ``topk_group`` are kept; the weights gathered from the scores, divided by their sum (+ 1e-20) under
  ``norm_topk_prob`` and multiplied by ``routed_scaling_factor``. Ungrouped routing (``n_group`` None) is the
  configuration of one group, kept (``n_group`` = ``topk_group`` = 1), as DeepSeek-V3-style models without
  node-limited routing configure it. Every value of every choice but the softmax score.
* ``moe_aux_loss`` (Mixtral, Qwen 3 MoE, OLMoE) — the family's ``load_balancing_loss_func`` on a one-layer tuple of
  the logits: the softmax in the logits' dtype, top-k of those probabilities, the tokens per expert counted over
  the N·k assignments and divided by N (so Σ_e f_e = k: ``aux_loss_fraction="per_token"``) and the mean
  probability in float32; E·Σ f_e·P_e. The probabilities are stored in the input dtype before the float32 sums:
  ``unfused`` moe_aux_loss.

* ``hf-switch-transformers`` — ``router_z_loss_func`` of Switch Transformers' modeling file (``moe_z_loss``), the
  router z-loss its model adds as ``router_z_loss_coef`` times the function's value: the suite's logits as one group
  of N tokens, (1, N, E); ``logsumexp``, its square and the mean each in the logits' dtype (``unfused``).

The mixins give the existing families their routers: :class:`GptOssRouterMixin` (``GptOssTopKRouter``: a biased
linear layer, top-k of the logits, a softmax over the k selected logits in their dtype — the renormalised softmax
top-k, the linear layer's bias 0: it is a logit bias, not the contract's selection-only one; autograd keeps that
low-precision softmax for the backward: ``moe_router_unfused``) and
:class:`Llama4RouterMixin` (``Llama4Router``: top-k of the logits, then the sigmoid of the selected, in float32,
the others sigmoid(−inf) = 0: sigmoid scores, not renormalised). Each declares what its router implements
(``moe_router_capability``) and reaches ``_impl`` through ``super()``, so a family lists it before FamilyAdapter.

Seeds: reference/moe.py cites the papers (Mixtral §2.1, DeepSeek-V3 §2.1.2, Switch Transformers §2.2).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from functools import cache
from typing import Any, cast

import torch
from torch import nn
from torch.func import functional_call
from transformers import (
    DeepseekV3Config,
    GptOssConfig,
    Llama4TextConfig,
    MixtralConfig,
    OlmoeConfig,
    Qwen3MoeConfig,
)
from transformers.models.deepseek_v3 import modeling_deepseek_v3 as deepseek_v3
from transformers.models.gpt_oss import modeling_gpt_oss as gpt_oss
from transformers.models.llama4 import modeling_llama4 as llama4
from transformers.models.mixtral import modeling_mixtral as mixtral
from transformers.models.olmoe import modeling_olmoe as olmoe
from transformers.models.qwen3_moe import modeling_qwen3_moe as qwen3_moe
from transformers.models.switch_transformers import modeling_switch_transformers as switch

from transformer_conformance.adapters.contract import Capability, Conventions
from transformer_conformance.adapters.hf.families.base import FamilyAdapter
from transformer_conformance.adapters.hf.families.mla import DeepseekV3MlaMixin

RouterFn = Callable[..., torch.Tensor]


def router_capability(
    score: str, norms: tuple[str, ...], selections: tuple[str, ...] = ("top_k",), scalings: tuple[str, ...] = ("none",)
) -> Capability:
    """The ``moe_router`` capability of a router implementing these values of the contract's choices."""
    values = {"score": (score,), "norm": norms, "selection": selections, "routed_scaling": scalings}
    return Capability(values={key: frozenset(v) for key, v in values.items()})


def router_module(router: Callable[..., nn.Module], config: Callable[..., Any], **keys: Any) -> nn.Module:
    """The family's router built on the meta device from a configuration with ``keys`` (its parameters come from
    :func:`functional_call`); one module per configuration."""
    return _router_module(router, config, tuple(sorted(keys.items())))


@cache
def _router_module(router: Any, config: Any, keys: tuple[tuple[str, Any], ...]) -> nn.Module:
    with torch.device("meta"):
        module = router(config(num_hidden_layers=1, **dict(keys)))
    return cast(nn.Module, module.eval())


def identity_gate(logits: torch.Tensor, dtype: torch.dtype | None = None) -> torch.Tensor:
    """The gate weight (E, E) that makes the router's logits the hidden states, bit for bit (the module docstring)."""
    e = logits.shape[-1]
    return torch.eye(e, dtype=dtype or logits.dtype, device=logits.device)


def dense(logits: torch.Tensor, weights: torch.Tensor, indices: torch.Tensor) -> torch.Tensor:
    """The selected experts' weights (N, k) at their indices of a zero (N, E), in the logits' dtype."""
    zeros = torch.zeros(logits.shape, dtype=weights.dtype, device=weights.device)
    return zeros.scatter(1, indices, weights).to(logits.dtype)


def refuse(name: str, what: str) -> None:
    raise NotImplementedError(f"{name}'s router does not implement {what}")


def require_plain(
    name: str,
    bias: torch.Tensor,
    routed_scaling_factor: float,
    n_group: int | None,
) -> None:
    """Refuse what a router without a selection bias, groups or a scaling factor cannot express."""
    if bool(torch.any(bias != 0)):
        refuse(name, "a selection-only bias")
    if float(routed_scaling_factor) != 1.0:
        refuse(name, "a routed scaling factor")
    if n_group is not None:
        refuse(name, "group-limited selection")


class RouterAdapter(FamilyAdapter):
    """An adapter running one family's MoE router (and its load-balancing loss, where the family's modeling file
    has one); subclasses set the classes and declare what they implement."""

    #: the modeling file's load_balancing_loss_func (None: the family's file has none)
    loss: Callable[..., Any] | None = None

    def __init__(self, device: str = "cpu") -> None:
        super().__init__(device)
        # the loss stores the probabilities in the logits' dtype before its float32 sums
        self.conventions = Conventions(
            aux_loss_fraction="per_token",
            unfused=frozenset({"moe_aux_loss"} if self.loss is not None else ()),
        )
        self.capabilities = {"moe_router": self.moe_router_capability}
        if self.loss is not None:
            self.capabilities["moe_aux_loss"] = Capability()

    moe_router_capability: Capability

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
        raise NotImplementedError

    def moe_aux_loss(self, logits: torch.Tensor, k: int) -> torch.Tensor:
        """The family's ``load_balancing_loss_func`` on one layer's logits, no attention mask."""
        assert self.loss is not None  # declared only where the family has one
        loss = self.loss((logits,), logits.shape[-1], int(k), None)
        return torch.as_tensor(loss).to(logits.dtype)

    def _impl(self, op: str) -> RouterFn:
        impl: dict[str, RouterFn] = {"moe_router": self.moe_router, "moe_aux_loss": self.moe_aux_loss}
        return impl[op]


class _SoftmaxTopKAdapter(RouterAdapter):
    """A router of softmax scores in float32, top-k, renormalised always (Mixtral) or as ``norm_topk_prob`` says."""

    router: type[nn.Module]
    config: type
    #: the configuration's name of the number of experts
    experts_key: str = "num_experts"
    #: the router renormalises always (no ``norm_topk_prob``)
    always_renormalises: bool = False

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
        if score != "softmax":
            refuse(self.name, f"{score} scores")
        if self.always_renormalises and norm != "topk":
            refuse(self.name, "weights left unnormalised")
        require_plain(self.name, bias, routed_scaling_factor, n_group)
        e = logits.shape[-1]
        keys: dict[str, Any] = {"hidden_size": e, self.experts_key: e, "num_experts_per_tok": int(k)}
        if not self.always_renormalises:
            keys["norm_topk_prob"] = norm == "topk"
        module = router_module(self.router, self.config, **keys)
        _, weights, indices = functional_call(module, {"weight": identity_gate(logits)}, (logits,))
        return dense(logits, weights, indices)


class HFMixtralAdapter(_SoftmaxTopKAdapter):
    """``hf-mixtral``: MixtralTopKRouter (softmax, top-k, renormalised) and Mixtral's load_balancing_loss_func."""

    name = "hf-mixtral"
    router = mixtral.MixtralTopKRouter
    config = MixtralConfig
    experts_key = "num_local_experts"
    always_renormalises = True
    loss = staticmethod(mixtral.load_balancing_loss_func)
    moe_router_capability = router_capability("softmax", ("topk",))


class HFQwen3MoeAdapter(_SoftmaxTopKAdapter):
    """``hf-qwen3-moe``: Qwen3MoeTopKRouter (norm_topk_prob either way) and its load_balancing_loss_func."""

    name = "hf-qwen3-moe"
    router = qwen3_moe.Qwen3MoeTopKRouter
    config = Qwen3MoeConfig
    loss = staticmethod(qwen3_moe.load_balancing_loss_func)
    moe_router_capability = router_capability("softmax", ("none", "topk"))


class HFOlmoeAdapter(_SoftmaxTopKAdapter):
    """``hf-olmoe``: OlmoeTopKRouter (norm_topk_prob either way) and its load_balancing_loss_func."""

    name = "hf-olmoe"
    router = olmoe.OlmoeTopKRouter
    config = OlmoeConfig
    loss = staticmethod(olmoe.load_balancing_loss_func)
    moe_router_capability = router_capability("softmax", ("none", "topk"))


class HFDeepseekV3Adapter(DeepseekV3MlaMixin, RouterAdapter):
    """``hf-deepseek-v3``: DeepseekV3TopkRouter — sigmoid scores, the correction bias, groups, scaling — and
    DeepseekV3Attention's multi-head latent attention (adapters/hf/families/mla.py)."""

    name = "hf-deepseek-v3"
    moe_router_capability = router_capability(
        "sigmoid", ("none", "topk"), ("top_k", "bias", "groups"), ("none", "factor")
    )

    def __init__(self, device: str = "cpu") -> None:
        super().__init__(device)
        # the attention's RoPE is DeepSeek-V3's interleaved one; its q, k and v are stored in the dtype under test
        self.conventions = replace(
            self.conventions, rope_layout="interleaved", unfused=self.conventions.unfused | {"mla_attention"}
        )
        self.capabilities["mla_attention"] = self.mla_capability

    def moe_router(
        self,
        logits: torch.Tensor,
        bias: torch.Tensor,
        k: int,
        score: str = "sigmoid",
        norm: str = "none",
        routed_scaling_factor: float = 1.0,
        n_group: int | None = None,
        topk_group: int | None = None,
    ) -> torch.Tensor:
        """The router of a configuration with the suite's k, groups (one kept group of all experts when ungrouped),
        ``norm_topk_prob`` and ``routed_scaling_factor``; its float32 weight the identity and its float32
        ``e_score_correction_bias`` the suite's bias (exact in float32 from every dtype under test)."""
        if score != "sigmoid":
            refuse(self.name, f"{score} scores")
        e = logits.shape[-1]
        groups = 1 if n_group is None else int(n_group)
        kept = 1 if n_group is None else int(topk_group or n_group)
        module = router_module(
            deepseek_v3.DeepseekV3TopkRouter,
            DeepseekV3Config,
            hidden_size=e,
            n_routed_experts=e,
            num_experts_per_tok=int(k),
            n_group=groups,
            topk_group=kept,
            norm_topk_prob=norm == "topk",
            routed_scaling_factor=float(routed_scaling_factor),
        )
        state = {"weight": identity_gate(logits, torch.float32), "e_score_correction_bias": bias.float()}
        _, weights, indices = functional_call(module, state, (logits,))
        return dense(logits, weights, indices)


class HFSwitchTransformersAdapter(FamilyAdapter):
    """``hf-switch-transformers``: Switch Transformers' ``router_z_loss_func`` (ST-MoE's router z-loss)."""

    name = "hf-switch-transformers"

    def __init__(self, device: str = "cpu") -> None:
        super().__init__(device)
        # logsumexp, its square and their mean are each rounded to the logits' dtype
        self.conventions = Conventions(unfused=frozenset({"moe_z_loss"}))
        self.capabilities = {"moe_z_loss": Capability()}

    def moe_z_loss(self, logits: torch.Tensor) -> torch.Tensor:
        """The modeling file's ``router_z_loss_func`` on the logits as one group of N tokens (groups × tokens × E)."""
        return torch.as_tensor(switch.router_z_loss_func(logits[None]))

    def _impl(self, op: str) -> RouterFn:
        impl: dict[str, RouterFn] = {"moe_z_loss": self.moe_z_loss}
        return impl[op]


class GptOssRouterMixin:
    """``moe_router`` through gpt-oss's ``GptOssTopKRouter`` (``GptOssMLP.router``): top-k of the logits of a biased
    linear layer, then a softmax over the k selected logits in their dtype — the renormalised softmax top-k. Its bias
    is held 0: it adds to the logits (and so to the weights), which the contract's selection-only bias must not."""

    name: str
    #: what the router implements: softmax scores, renormalised among the selected, plain top-k, no scaling
    moe_router_capability = router_capability("softmax", ("topk",))
    #: its softmax runs in the logits' dtype (``dtype=router_top_value.dtype``) and autograd keeps that output for
    #: the backward: the family's conventions add this to their ``unfused`` (its forward rounds once)
    moe_router_unfused = frozenset({"moe_router.vjp"})

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
        if score != "softmax" or norm != "topk":
            refuse(self.name, f"{score} scores with norm {norm!r}")
        require_plain(self.name, bias, routed_scaling_factor, n_group)
        e = logits.shape[-1]
        module = router_module(
            gpt_oss.GptOssTopKRouter, GptOssConfig, hidden_size=e, num_local_experts=e, num_experts_per_tok=int(k)
        )
        state = {"weight": identity_gate(logits), "bias": logits.new_zeros(e)}
        _, weights, indices = functional_call(module, state, (logits,))
        return dense(logits, weights, indices)

    def _impl(self, op: str) -> RouterFn:
        if op == "moe_router":
            return self.moe_router
        return super()._impl(op)  # type: ignore[misc]  # the family adapter after this mixin


class Llama4RouterMixin:
    """``moe_router`` through Llama 4's ``Llama4Router`` (``Llama4TextMoe.router``): top-k of the logits, the selected
    put back among −inf, then the sigmoid of all in float32, cast to the logits' dtype: sigmoid scores of the k
    selected, 0 elsewhere, not renormalised. The router returns the dense (N, E) scores itself."""

    name: str
    #: what the router implements: sigmoid scores, not renormalised, plain top-k, no scaling
    moe_router_capability = router_capability("sigmoid", ("none",))
    #: the sigmoid runs in float32 and is rounded once, its backward too: nothing to add to ``unfused``
    moe_router_unfused: frozenset[str] = frozenset()

    def moe_router(
        self,
        logits: torch.Tensor,
        bias: torch.Tensor,
        k: int,
        score: str = "sigmoid",
        norm: str = "none",
        routed_scaling_factor: float = 1.0,
        n_group: int | None = None,
        topk_group: int | None = None,
    ) -> torch.Tensor:
        if score != "sigmoid" or norm != "none":
            refuse(self.name, f"{score} scores with norm {norm!r}")
        require_plain(self.name, bias, routed_scaling_factor, n_group)
        e = logits.shape[-1]
        module = router_module(
            llama4.Llama4Router, Llama4TextConfig, hidden_size=e, num_local_experts=e, num_experts_per_tok=int(k)
        )
        scores, _ = functional_call(module, {"weight": identity_gate(logits)}, (logits,))
        return scores

    def _impl(self, op: str) -> RouterFn:
        if op == "moe_router":
            return self.moe_router
        return super()._impl(op)  # type: ignore[misc]  # the family adapter after this mixin

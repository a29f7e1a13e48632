"""Megatron-Core's MoE routing and its auxiliary losses (``megatron.core.transformer.moe.moe_utils``), the functions
``TopKRouter.routing`` calls on the gate's logits (``moe_router_fusion`` False: no Transformer Engine kernels).

* ``moe_router`` — ``topk_routing_with_score_function(logits, k, use_pre_softmax, scaling_factor,
  score_function="softmax")``, the dense ``routing_probs`` (N, E) it returns. ``use_pre_softmax`` True (the
  configuration's ``moe_router_pre_softmax``): the softmax of all E logits in float32, rounded to the logits' dtype
  (``type_as``), then ``torch.topk`` of those probabilities — not renormalised (``norm`` none); False (the
  default): ``torch.topk`` of the logits, then the softmax of the k selected in float32 — the softmax renormalised
  over the top k (``norm`` topk). The routed scaling factor is ``moe_router_topk_scaling_factor``, multiplied in the
  logits' dtype (``unfused``). ``TopKRouter``'s configuration refuses k = 1 without pre-softmax ("Please use
  --moe-router-pre-softmax when topk is 1"); the function computes it (a weight of 1).
  Not declared: ``sigmoid`` scores — the function divides the k selected sigmoid scores by their sum when k > 1 and
  leaves them as they are when k = 1 (``if topk > 1 else scores``), so it has neither of the contract's ``norm``
  values for every k, and its expert bias (``moe_router_enable_expert_bias``) is refused by the configuration for
  softmax scores; ``groups`` — ``group_limited_topk`` scores a group by the sum of its top k/topk_group scores (the
  contract, DeepSeek-V3: its top two; the two agree only where k = 2·topk_group), and with softmax scores after the
  top-k by the logits, not the probabilities.
* ``moe_aux_loss`` — ``compute_routing_scores_for_aux_loss(logits, k, "softmax")`` (the softmax in float32 and its
  top-k routing map), ``get_tokens_per_expert_and_token_count`` over the tensor-and-context-parallel group (one
  process: the identity) and ``switch_load_balancing_loss_func(..., moe_aux_loss_coeff=1)``: E/(k·N²)·Σ_e
  (Σ_t p_te)·(tokens of e) — f_e counts the N·k assignments: ``aux_loss_fraction="per_assignment"``. In float32,
  rounded once to the logits' dtype.
* ``moe_z_loss`` — ``z_loss_func(logits, 1.0)``: ``logsumexp``, its square and the mean each in the logits' dtype
  (``unfused``), the coefficient 1 (the trainer's ``moe_z_loss_coeff`` is the contract's "no coefficient").
"""

from __future__ import annotations

import torch
from megatron.core import parallel_state
from megatron.core.transformer.moe.moe_utils import (
    compute_routing_scores_for_aux_loss,
    get_tokens_per_expert_and_token_count,
    switch_load_balancing_loss_func,
    topk_routing_with_score_function,
    z_loss_func,
)

from transformer_conformance.adapters.megatron.runtime import ensure_model_parallel


def moe_router(
    logits: torch.Tensor,
    bias: torch.Tensor,
    k: int,
    score: str = "softmax",
    norm: str = "topk",
    routed_scaling_factor: float = 1.0,
    n_group: int | None = None,
    topk_group: int | None = None,
) -> torch.Tensor:
    """The dense combine weights of ``topk_routing_with_score_function`` (module docstring)."""
    if score != "softmax" or n_group is not None or bool(torch.any(bias != 0)):
        raise NotImplementedError("the adapter declares Megatron-Core's softmax top-k routing without bias or groups")
    factor = float(routed_scaling_factor)
    probs, _ = topk_routing_with_score_function(
        logits,
        int(k),
        use_pre_softmax=norm == "none",
        scaling_factor=None if factor == 1.0 else factor,
        score_function="softmax",
    )
    return probs


def moe_aux_loss(logits: torch.Tensor, k: int) -> torch.Tensor:
    """``switch_load_balancing_loss_func`` on the scores and routing map ``TopKRouter._apply_aux_loss`` computes."""
    ensure_model_parallel()
    group = parallel_state.get_tensor_and_context_parallel_group()
    routing_map, scores = compute_routing_scores_for_aux_loss(logits, int(k), "softmax")
    tokens_per_expert, _, total = get_tokens_per_expert_and_token_count(routing_map, group, topk=int(k))
    loss = switch_load_balancing_loss_func(
        probs=scores,
        tokens_per_expert=tokens_per_expert,
        total_num_tokens=total,
        topk=int(k),
        num_experts=logits.shape[-1],
        moe_aux_loss_coeff=1.0,
    )
    return loss.to(logits.dtype)


def moe_z_loss(logits: torch.Tensor) -> torch.Tensor:
    """``z_loss_func`` with coefficient 1."""
    return z_loss_func(logits, 1.0)

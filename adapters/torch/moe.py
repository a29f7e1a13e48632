"""PyTorch MoE routing, its load-balancing loss and its router z-loss for the torch adapter, as model code writes
them: scores in float32 (softmax or sigmoid of the logits), ``torch.topk`` of the scores plus the selection bias
within the best groups (DeepSeek-V3's router: groups scored by their two highest choice scores), the selected scores
gathered, renormalised and scaled, and scattered into the dense combine weights; the loss as HF transformers'
``load_balancing_loss_func`` computes it (Mixtral, Qwen-MoE, OLMoE); the z-loss as the mean of logsumexp² in
float32. Rounded once to the input dtype.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F


def moe_router(
    logits: torch.Tensor,
    bias: torch.Tensor,
    k: int,
    score: str = "softmax",
    norm: str = "none",
    routed_scaling_factor: float = 1.0,
    n_group: int | None = None,
    topk_group: int | None = None,
) -> torch.Tensor:
    u = logits.float()
    s = F.softmax(u, dim=-1) if score == "softmax" else torch.sigmoid(u)
    choice = s.detach() + bias.float()
    if n_group is not None:
        n, e = choice.shape
        grouped = choice.view(n, n_group, e // n_group)
        group_scores = grouped.topk(min(2, e // n_group), dim=-1)[0].sum(dim=-1)
        group_idx = torch.topk(group_scores, k=topk_group or n_group, dim=-1, sorted=False)[1]
        group_mask = torch.zeros_like(group_scores).scatter_(1, group_idx, 1).bool()
        allowed = group_mask.unsqueeze(-1).expand(n, n_group, e // n_group).reshape(n, e)
        choice = choice.masked_fill(~allowed, float("-inf"))
    idx = torch.topk(choice, k=k, dim=-1, sorted=False)[1]
    w = s.gather(1, idx)
    if norm == "topk":
        w = w / w.sum(dim=-1, keepdim=True)
    w = w * routed_scaling_factor
    return torch.zeros_like(s).scatter(1, idx, w).to(logits.dtype)


def moe_aux_loss(logits: torch.Tensor, k: int, fraction: str = "per_token") -> torch.Tensor:
    """E·Σ_e f_e·P_e: HF's tokens_per_expert (the mean over tokens of the one-hot selections, per slot) times the
    mean router probability, summed and scaled by E; ``per_assignment`` divides by k (Megatron-Core's form)."""
    e = logits.shape[-1]
    p = F.softmax(logits.float(), dim=-1)
    _, selected = torch.topk(p, k, dim=-1)
    expert_mask = F.one_hot(selected, e).float()  # (N, k, E)
    tokens_per_expert = expert_mask.mean(dim=0)  # (k, E)
    router_prob_per_expert = p.mean(dim=0)
    loss = (tokens_per_expert * router_prob_per_expert.unsqueeze(0)).sum() * e
    return (loss / k if fraction == "per_assignment" else loss).to(logits.dtype)


def moe_z_loss(logits: torch.Tensor) -> torch.Tensor:
    """ST-MoE's router z-loss as MoE trainers write it: the mean over tokens of logsumexp² in float32, cast once."""
    return (torch.logsumexp(logits.float(), dim=-1) ** 2).mean().to(logits.dtype)


def ops(fraction: str) -> dict[str, Callable[..., torch.Tensor]]:
    """The three operations, keyed by contract name, for the declared load-balancing fraction."""

    def aux(logits: torch.Tensor, k: int) -> torch.Tensor:
        return moe_aux_loss(logits, k, fraction)

    return {"moe_router": moe_router, "moe_aux_loss": aux, "moe_z_loss": moe_z_loss}

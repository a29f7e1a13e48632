"""Mixture-of-experts routing and its load-balancing loss, with hand-derived VJPs.

* Top-k routing over softmax scores — Shazeer et al. 2017, *Outrageously Large Neural Networks* (the sparsely-gated
  layer); Jiang et al. 2024, *Mixtral of Experts* §2.1 (the softmax of the top-2 logits, i.e. the top-2 softmax
  weights renormalised); Qwen-MoE and OLMoE (Muennighoff et al. 2024) keep the top-k softmax weights as they are
  (``norm_topk_prob`` false).
* Sigmoid scores with a selection-only bias, group-limited selection and a routed scaling factor — DeepSeek-AI
  2024, *DeepSeek-V3 Technical Report* §2.1.2 (affinities s = σ(u); the bias b enters only the top-k choice, for
  auxiliary-loss-free balancing; the gating values normalised among the selected; node-limited routing, which
  the released code runs as groups scored by the sum of their two highest choice scores).
* The auxiliary load-balancing loss — Fedus, Zoph & Shazeer 2022, *Switch Transformers* §2.2: E·Σ_e f_e·P_e with
  f_e the fraction of tokens dispatched to expert e and P_e its mean router probability. With k > 1 experts per
  token libraries differ in what f counts, a declared convention (``aux_loss_fraction``): ``per_token`` — the
  tokens that selected e, so Σ_e f_e = k (HF transformers' ``load_balancing_loss_func``: Mixtral, Qwen-MoE,
  OLMoE); ``per_assignment`` — the share of the N·k assignments, Σ_e f_e = 1 (Megatron-Core's switch loss).
* The router z-loss — Zoph et al. 2022, *ST-MoE: Designing Stable and Transferable Sparse Expert Models* §3.3
  (equation 5): L_z = (1/N)·Σ_i (log Σ_e exp u_ie)², which keeps the router's logits small; its gradient is
  2·z_i·softmax(u_i)/N. The coefficient it is weighted by (10⁻³ in ST-MoE) is the trainer's, outside the loss.

The router's output is the dense combine weights (N, E): each token's weight for each expert, exactly 0 for the
experts it does not select. Selection is piecewise constant in the logits: the VJP is that of the weights for the
selected set, and the bias, which only selects, has gradient 0.
"""

from __future__ import annotations

from typing import Literal

import numpy as np
from numpy.typing import NDArray

from transformer_conformance.reference.losses import logsumexp, softmax

F64 = NDArray[np.float64]
Score = Literal["softmax", "sigmoid"]
Norm = Literal["none", "topk"]
Fraction = Literal["per_token", "per_assignment"]
SCORES: tuple[Score, ...] = ("softmax", "sigmoid")
NORMS: tuple[Norm, ...] = ("none", "topk")
FRACTIONS: tuple[Fraction, ...] = ("per_token", "per_assignment")


def sigmoid(x: F64) -> F64:
    return 0.5 * (1.0 + np.tanh(0.5 * x))  # no overflow for any x


def router_scores(logits: F64, score: Score) -> F64:
    """Each token's affinity for each expert: softmax over the experts, or an independent sigmoid per expert."""
    if score == "softmax":
        return softmax(logits)
    if score == "sigmoid":
        return sigmoid(logits)
    raise ValueError(f"unknown router score {score!r}; expected 'softmax' or 'sigmoid'")


def top_k_mask(values: F64, k: int) -> NDArray[np.bool_]:
    """True at each row's k largest values (k ≤ the row's width)."""
    order = np.argsort(-values, axis=-1, kind="stable")[..., :k]
    mask = np.zeros(values.shape, dtype=bool)
    np.put_along_axis(mask, order, True, axis=-1)
    return mask


def group_mask(choice: F64, n_group: int, topk_group: int) -> NDArray[np.bool_]:
    """The experts of each token's ``topk_group`` best groups of E / n_group consecutive experts, a group scored by
    the sum of its two highest choice scores (its one score when a group has one expert)."""
    n, e = choice.shape
    if e % n_group:
        raise ValueError(f"{e} experts do not split into {n_group} groups")
    grouped = choice.reshape(n, n_group, e // n_group)
    best = np.sort(grouped, axis=-1)[..., ::-1][..., :2].sum(axis=-1)
    return np.repeat(top_k_mask(best, topk_group), e // n_group, axis=-1)


def selection(
    logits: F64, bias: F64, k: int, score: Score, n_group: int | None = None, topk_group: int | None = None
) -> NDArray[np.bool_]:
    """Which experts each token selects: the top k of score + bias, within its best groups when grouped."""
    choice = router_scores(logits, score) + bias[None, :]
    if n_group is not None:
        allowed = group_mask(choice, n_group, int(topk_group or n_group))
        choice = np.where(allowed, choice, -np.inf)
    return top_k_mask(choice, k)


def moe_router(
    logits: F64,
    bias: F64,
    k: int,
    score: Score = "softmax",
    norm: Norm = "none",
    scaling: float = 1.0,
    n_group: int | None = None,
    topk_group: int | None = None,
) -> F64:
    """Dense combine weights (N, E): w = c·s on the selected experts (divided by their sum under ``norm`` "topk"),
    0 elsewhere; s the scores, c the routed scaling factor."""
    s = router_scores(logits, score)
    w = np.where(selection(logits, bias, k, score, n_group, topk_group), s, 0.0)
    if norm == "topk":
        w = w / np.sum(w, axis=-1, keepdims=True)
    return scaling * w


def moe_router_vjp(
    logits: F64,
    bias: F64,
    g: F64,
    k: int,
    score: Score = "softmax",
    norm: Norm = "none",
    scaling: float = 1.0,
    n_group: int | None = None,
    topk_group: int | None = None,
) -> tuple[F64, F64]:
    """(∂logits, ∂bias = 0). On the selected set S: ∂s_i = c·g_i, or under "topk" with Z = Σ_S s,
    ∂s_i = c·(g_i − Σ_S g_j s_j / Z) / Z; 0 off S. Then ∂u = s ⊙ (∂s − Σ ∂s ⊙ s) (softmax) or ∂s·s(1 − s) (sigmoid)."""
    s = router_scores(logits, score)
    sel = selection(logits, bias, k, score, n_group, topk_group)
    kept = np.where(sel, s, 0.0)
    gs = np.where(sel, g, 0.0)
    if norm == "topk":
        z = np.sum(kept, axis=-1, keepdims=True)
        ds = np.where(sel, (gs - np.sum(gs * kept, axis=-1, keepdims=True) / z) / z, 0.0)
    else:
        ds = gs
    ds = scaling * ds
    if score == "softmax":
        du = s * (ds - np.sum(ds * s, axis=-1, keepdims=True))
    else:
        du = ds * s * (1.0 - s)
    return du, np.zeros_like(bias)


def _fractions(p: F64, k: int, fraction: Fraction) -> F64:
    """f_e: the share of tokens (``per_token``) or of the N·k assignments (``per_assignment``) routed to e."""
    if fraction not in FRACTIONS:
        raise ValueError(f"unknown aux-loss fraction {fraction!r}; expected 'per_token' or 'per_assignment'")
    f = top_k_mask(p, k).mean(axis=0)
    return f / k if fraction == "per_assignment" else f


def moe_aux_loss(logits: F64, k: int, fraction: Fraction = "per_token") -> F64:
    """The load-balancing loss E·Σ_e f_e·P_e of a softmax top-k router (a 0-d array)."""
    p = softmax(logits)
    return np.asarray(logits.shape[-1] * np.sum(_fractions(p, k, fraction) * p.mean(axis=0)))


def moe_aux_loss_vjp(logits: F64, g: F64, k: int, fraction: Fraction = "per_token") -> F64:
    """∂logits: f is piecewise constant, so ∂L/∂p_te = g·E·f_e/N, then the softmax VJP row by row."""
    n, e = logits.shape
    p = softmax(logits)
    dp = np.broadcast_to(float(g) * e * _fractions(p, k, fraction) / n, p.shape)
    return p * (dp - np.sum(dp * p, axis=-1, keepdims=True))


def moe_z_loss(logits: F64) -> F64:
    """ST-MoE's router z-loss (1/N)·Σ_i z_i², z_i = log Σ_e exp(u_ie), over the N tokens (a 0-d array)."""
    return np.asarray(np.mean(logsumexp(logits) ** 2))


def moe_z_loss_vjp(logits: F64, g: F64) -> F64:
    """∂logits = g·2·z_i·softmax(u_i)/N, row by row (∂z_i/∂u_i = softmax(u_i))."""
    n = logits.shape[0]
    return (float(g) * 2.0 * logsumexp(logits) / n)[:, None] * softmax(logits)

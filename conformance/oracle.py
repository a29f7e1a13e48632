"""The oracle applied under a candidate's declared conventions (RoPE layout, eps default)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
from numpy.typing import NDArray

import reference as ref
from adapters.contract import OPS, Conventions
from conformance import oracle_blocks
from conformance.budgets import resolve_eps
from conformance.dtypes import Format

F64 = NDArray[np.float64]
Fwd = Callable[[Mapping[str, np.ndarray], Mapping[str, Any], Conventions], F64]
Bwd = Callable[[Mapping[str, np.ndarray], Mapping[str, Any], Conventions, F64], F64]

# positions, context extension and loss reductions: one differentiable input each
EXTRA_FORWARD: dict[str, Fwd] = {
    "sinusoidal_positions": lambda x, p, c: ref.positions.sinusoidal_positions(
        x["x"], x["positions"], p.get("base", 10000.0)
    ),
    "learned_positions": lambda x, p, c: ref.positions.learned_positions(x["table"], x["positions"]),
    "alibi": lambda x, p, c: ref.positions.alibi(x["scores"], x["q_positions"], x["k_positions"]),
    "rope_scaled": lambda x, p, c: ref.rope_scaling.rope_scaled(
        x["x"], x["positions"], p.get("base", 10000.0), p.get("rotary_dim"), p.get("scaling"), c.rope_layout
    ),
    "cross_entropy_mean": lambda x, p, c: ref.losses.cross_entropy_mean(
        x["logits"], x["targets"], p.get("ignore_index", ref.losses.IGNORE_INDEX)
    ),
    "softcap_z_loss": lambda x, p, c: ref.losses.softcap_z_loss(
        x["logits"], p.get("alpha", ref.losses.Z_LOSS_ALPHA), p["cap"]
    ),
}
EXTRA_VJP: dict[str, Bwd] = {
    "sinusoidal_positions": lambda x, p, c, g: ref.positions.sinusoidal_positions_vjp(x["x"], x["positions"], g),
    "learned_positions": lambda x, p, c, g: ref.positions.learned_positions_vjp(x["table"], x["positions"], g),
    "alibi": lambda x, p, c, g: ref.positions.alibi_vjp(x["scores"], x["q_positions"], x["k_positions"], g),
    "rope_scaled": lambda x, p, c, g: ref.rope_scaling.rope_scaled_vjp(
        x["x"], x["positions"], g, p.get("base", 10000.0), p.get("rotary_dim"), p.get("scaling"), c.rope_layout
    ),
    "cross_entropy_mean": lambda x, p, c, g: ref.losses.cross_entropy_mean_vjp(
        x["logits"], x["targets"], g, p.get("ignore_index", ref.losses.IGNORE_INDEX)
    ),
    "softcap_z_loss": lambda x, p, c, g: ref.losses.softcap_z_loss_vjp(
        x["logits"], g, p.get("alpha", ref.losses.Z_LOSS_ALPHA), p["cap"]
    ),
}


def forward(op: str, x: Mapping[str, np.ndarray], params: Mapping[str, Any], conv: Conventions, dtype: Format) -> F64:
    """The exact float64 output of ``op`` on the float64 values ``x``."""
    if op == "rms_norm":
        return ref.rms_norm(x["x"], x["weight"], resolve_eps(op, params.get("eps"), dtype, conv))
    if op == "layer_norm":
        return ref.layer_norm(x["x"], x["weight"], x["bias"], resolve_eps(op, params.get("eps"), dtype, conv))
    if op == "rope":
        return ref.rope(x["x"], x["positions"], params.get("base", 10000.0), params.get("rotary_dim"), conv.rope_layout)
    if op == "swiglu_mlp":
        return ref.swiglu_mlp(x["x"], x["w1"], x["w3"], x["w2"])
    if op == "cross_entropy":
        return ref.cross_entropy(x["logits"], x["targets"])
    if op == "z_loss":
        return ref.z_loss(x["logits"], params.get("alpha", ref.losses.Z_LOSS_ALPHA))
    if op in EXTRA_FORWARD:
        return EXTRA_FORWARD[op](x, params, conv)
    if op in oracle_blocks.HANDLED:
        return oracle_blocks.forward(op, x, params, conv)
    raise KeyError(op)


def vjp(
    op: str, x: Mapping[str, np.ndarray], params: Mapping[str, Any], conv: Conventions, dtype: Format, g: F64
) -> dict[str, F64]:
    """The exact float64 gradients of ``op``, one per differentiable input."""
    grads: tuple[F64, ...]
    if op == "rms_norm":
        grads = ref.rms_norm_vjp(x["x"], x["weight"], resolve_eps(op, params.get("eps"), dtype, conv), g)
    elif op == "layer_norm":
        grads = ref.layer_norm_vjp(x["x"], x["weight"], x["bias"], resolve_eps(op, params.get("eps"), dtype, conv), g)
    elif op == "rope":
        grads = (
            ref.rope_vjp(
                x["x"], x["positions"], g, params.get("base", 10000.0), params.get("rotary_dim"), conv.rope_layout
            ),
        )
    elif op == "swiglu_mlp":
        grads = ref.swiglu_mlp_vjp(x["x"], x["w1"], x["w3"], x["w2"], g)
    elif op == "cross_entropy":
        grads = (ref.cross_entropy_vjp(x["logits"], x["targets"], g),)
    elif op == "z_loss":
        grads = (ref.z_loss_vjp(x["logits"], g, params.get("alpha", ref.losses.Z_LOSS_ALPHA)),)
    elif op in EXTRA_VJP:
        grads = (EXTRA_VJP[op](x, params, conv, g),)
    elif op in oracle_blocks.HANDLED:
        return oracle_blocks.vjp(op, x, params, conv, g)
    else:
        raise KeyError(op)
    return dict(zip(OPS[op].inputs, grads, strict=True))

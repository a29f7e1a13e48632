"""The error budget of every operation, forward and backward, in one registry: ``FORWARD[op]`` and
``VJP[op]``.

Each budget restates the oracle's formula in tracked arithmetic (``error_model``): for a candidate, a dtype
and its declared conventions it gives, for every output element, the largest difference from the oracle
that a correct implementation can produce (docs/tolerance.md). The values carried (``Tracked.v``) equal
the oracle's; the project's tests check that. One module per family of operations; this module only
registers them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from transformer_conformance.adapters.contract import Conventions
from transformer_conformance.conformance.budgets import (
    attention,
    blocks,
    linear_losses,
    local_attention,
    losses,
    mla,
    mlp,
    moe,
    mrope,
    norms,
    positions,
    rope,
    swiglu,
)
from transformer_conformance.conformance.budgets import (
    error_model as em,
)
from transformer_conformance.conformance.budgets.rounding import F64, Inputs, rounding
from transformer_conformance.reference.formats import Format


def _with_result(op: str, fn: Any, grad: bool) -> Any:
    """Apply the reordering allowance to every result ``fn`` returns."""

    def wrapped(inputs: Inputs, params: Mapping[str, Any], conv: Conventions, dtype: Format, *g: F64) -> Any:
        r = rounding(op, dtype, conv, grad=grad)
        out = fn(inputs, params, conv, dtype, *g)
        # flushing to zero: the final rounding may lose a result below the output's smallest normal
        flushed = em.tiny(dtype.unit_roundoff) if conv.flush_subnormals else 0.0
        if grad:
            return {k: em.result(r, t, flushed) for k, t in out.items()}
        return em.result(r, out, flushed)

    return wrapped


_FORWARD: dict[str, Any] = {
    "rms_norm": norms.rms_norm,
    "layer_norm": norms.layer_norm,
    "rope": rope.rope,
    "swiglu_mlp": swiglu.swiglu_mlp,
    "cross_entropy": losses.cross_entropy,
    "z_loss": losses.z_loss,
    "cross_entropy_mean": losses.cross_entropy_mean,
    "softcap_z_loss": losses.softcap_z_loss,
    "sinusoidal_positions": positions.sinusoidal_positions,
    "learned_positions": positions.learned_positions,
    "alibi": positions.alibi,
    "rope_scaled": positions.rope_scaled,
    "attention": attention.attention,
    "qk_norm_attention": attention.qk_norm_attention,
    "rope_attention": attention.rope_attention,
    "mlp": mlp.mlp,
    "glu_mlp": mlp.glu_mlp,
    "block": blocks.block,
    "lm_head": blocks.lm_head,
    "linear_cross_entropy": linear_losses.linear_cross_entropy,
    "z_loss_mean": linear_losses.z_loss_mean,
    **local_attention.FORWARD,
    **moe.FORWARD,
    **mrope.FORWARD,
    **mla.FORWARD,
}
_VJP: dict[str, Any] = {
    "rms_norm": norms.rms_norm_vjp,
    "layer_norm": norms.layer_norm_vjp,
    "rope": rope.rope_vjp,
    "swiglu_mlp": swiglu.swiglu_mlp_vjp,
    "cross_entropy": losses.cross_entropy_vjp,
    "z_loss": losses.z_loss_vjp,
    "cross_entropy_mean": losses.cross_entropy_mean_vjp,
    "softcap_z_loss": losses.softcap_z_loss_vjp,
    "sinusoidal_positions": positions.sinusoidal_positions_vjp,
    "learned_positions": positions.learned_positions_vjp,
    "alibi": positions.alibi_vjp,
    "rope_scaled": positions.rope_scaled_vjp,
    "attention": attention.attention_vjp,
    "qk_norm_attention": attention.qk_norm_attention_vjp,
    "rope_attention": attention.rope_attention_vjp,
    "mlp": mlp.mlp_vjp,
    "glu_mlp": mlp.glu_mlp_vjp,
    "block": blocks.block_vjp,
    "lm_head": blocks.lm_head_vjp,
    "linear_cross_entropy": linear_losses.linear_cross_entropy_vjp,
    "z_loss_mean": linear_losses.z_loss_mean_vjp,
    **local_attention.VJP,
    **moe.VJP,
    **mrope.VJP,
    **mla.VJP,
}
#: op -> its forward budget: (inputs, params, conventions, dtype) -> Tracked
FORWARD: dict[str, Any] = {op: _with_result(op, fn, grad=False) for op, fn in _FORWARD.items()}
#: op -> its backward budget: (inputs, params, conventions, dtype, cotangent) -> {input: Tracked}
VJP: dict[str, Any] = {op: _with_result(op, fn, grad=True) for op, fn in _VJP.items()}

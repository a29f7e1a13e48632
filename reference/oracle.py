"""The oracle by operation name: ``forward(op, ...)`` and ``vjp(op, ...)`` dispatch to the formulas of this
package under a candidate's declared conventions (RoPE pair layout, causal alignment, ε default).

Both the built-in ``numpy`` adapter (the oracle as a candidate) and the checks (the oracle as the judge)
call it. The conventions arrive as any object with the attributes of :class:`Declared` (the adapter
contract's ``Conventions`` has them), so this package depends on nothing outside it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Literal, Protocol

import numpy as np
from numpy.typing import NDArray

import transformer_conformance.reference as ref
from transformer_conformance.reference import attention as att
from transformer_conformance.reference import attention_temperature as temp
from transformer_conformance.reference import blocks as blk
from transformer_conformance.reference import linear_losses as lin
from transformer_conformance.reference import local_attention as loc
from transformer_conformance.reference import mla as mla_ref
from transformer_conformance.reference import mlp
from transformer_conformance.reference import moe as moe_ref
from transformer_conformance.reference import mrope as mr
from transformer_conformance.reference.blocks import BLOCK_INPUTS
from transformer_conformance.reference.formats import Format

F64 = NDArray[np.float64]


class Declared(Protocol):
    """What the oracle reads of a candidate's declared conventions."""

    @property
    def rope_layout(self) -> Literal["interleaved", "half"]: ...
    @property
    def causal_alignment(self) -> Literal["bottom_right", "top_left"]: ...
    @property
    def sliding_window(self) -> Literal["inclusive", "exclusive"]: ...
    @property
    def aux_loss_fraction(self) -> Literal["per_token", "per_assignment"]: ...
    @property
    def eps_defaults(self) -> Mapping[str, float | str]: ...
    @property
    def zero_when_all_ignored(self) -> frozenset[str]: ...


#: The differentiable inputs of each operation, in the order of its gradients (the adapter contract's
#: ``OpSpec.inputs`` name the same; the project's tests check that they agree).
INPUTS: dict[str, tuple[str, ...]] = {
    "rms_norm": ("x", "weight"),
    "layer_norm": ("x", "weight", "bias"),
    "rope": ("x",),
    "swiglu_mlp": ("x", "w1", "w3", "w2"),
    "cross_entropy": ("logits",),
    "z_loss": ("logits",),
    "sinusoidal_positions": ("x",),
    "learned_positions": ("table",),
    "alibi": ("scores",),
    "rope_scaled": ("x",),
    "mrope": ("x",),
    "attention_temperature": ("q",),
    "cross_entropy_mean": ("logits",),
    "softcap_z_loss": ("logits",),
    "attention": ("q", "k", "v"),
    "qk_norm_attention": ("q", "k", "v", "q_weight", "k_weight"),
    "rope_attention": ("q", "k", "v"),
    "sliding_window_attention": ("q", "k", "v"),
    "chunked_attention": ("q", "k", "v"),
    "sink_attention": ("q", "k", "v", "sinks"),
    "mla_attention": ("q_nope", "q_rope", "latent", "k_rope", "w_uk", "w_uv"),
    "moe_router": ("logits", "bias"),
    "moe_aux_loss": ("logits",),
    "moe_z_loss": ("logits",),
    "mlp": ("x", "w_in", "w_out"),
    "glu_mlp": ("x", "w1", "w3", "w2"),
    "block": BLOCK_INPUTS,
    "lm_head": ("x", "norm_weight", "w_head"),
    "linear_cross_entropy": ("x", "weight", "bias"),
    "z_loss_mean": ("logits",),
}

Fwd = Callable[[Mapping[str, np.ndarray], Mapping[str, Any], Declared], F64]
Bwd = Callable[[Mapping[str, np.ndarray], Mapping[str, Any], Declared, F64], F64]


def resolve_eps(op: str, eps: float | None, dtype: Format, conv: Declared) -> float:
    """The ε a candidate uses: the one passed, else its declared default ("finfo": the dtype's epsilon)."""
    if eps is not None:
        return float(eps)
    default = conv.eps_defaults[op]
    return 2.0 * dtype.unit_roundoff if default == "finfo" else float(default)


def all_ignored(op: str, conv: Declared) -> lin.AllIgnored:
    """What a candidate's mean over valid tokens is when every token is ignored: its declared convention."""
    return "zero" if op in getattr(conv, "zero_when_all_ignored", frozenset()) else "nan"


def _ignore(params: Mapping[str, Any]) -> int:
    return int(params.get("ignore_index", ref.losses.IGNORE_INDEX))


def _mrope(params: Mapping[str, Any], conv: Declared) -> dict[str, Any]:
    """The keywords of ``mrope`` (reference/mrope.py): its sections, streams, base and the declared pair layout."""
    n_t, n_h, n_w = (int(n) for n in params["sections"])
    return {
        "sections": (n_t, n_h, n_w),
        "base": params.get("base", 10000.0),
        "streams": params.get("streams", "sections"),
        "layout": conv.rope_layout,
    }


def _temperature(params: Mapping[str, Any]) -> dict[str, float]:
    return {"floor_scale": float(params.get("floor_scale", 8192.0)), "attn_scale": float(params.get("attn_scale", 0.1))}


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
    "mrope": lambda x, p, c: mr.mrope(x["x"], x["positions"], **_mrope(p, c)),
    "attention_temperature": lambda x, p, c: temp.attention_temperature(x["q"], x["positions"], **_temperature(p)),
    "cross_entropy_mean": lambda x, p, c: ref.losses.cross_entropy_mean(
        x["logits"], x["targets"], p.get("ignore_index", ref.losses.IGNORE_INDEX)
    ),
    "softcap_z_loss": lambda x, p, c: ref.losses.softcap_z_loss(
        x["logits"], p.get("alpha", ref.losses.Z_LOSS_ALPHA), p["cap"]
    ),
    "linear_cross_entropy": lambda x, p, c: lin.linear_cross_entropy(
        x["x"],
        x["weight"],
        x["bias"],
        x["targets"],
        _ignore(p),
        p.get("reduction", "mean"),
        all_ignored("linear_cross_entropy", c),
    ),
    "z_loss_mean": lambda x, p, c: lin.z_loss_mean(
        x["logits"], x["targets"], p.get("alpha", ref.losses.Z_LOSS_ALPHA), _ignore(p), all_ignored("z_loss_mean", c)
    ),
}
EXTRA_VJP: dict[str, Bwd] = {
    "sinusoidal_positions": lambda x, p, c, g: ref.positions.sinusoidal_positions_vjp(x["x"], x["positions"], g),
    "learned_positions": lambda x, p, c, g: ref.positions.learned_positions_vjp(x["table"], x["positions"], g),
    "alibi": lambda x, p, c, g: ref.positions.alibi_vjp(x["scores"], x["q_positions"], x["k_positions"], g),
    "rope_scaled": lambda x, p, c, g: ref.rope_scaling.rope_scaled_vjp(
        x["x"], x["positions"], g, p.get("base", 10000.0), p.get("rotary_dim"), p.get("scaling"), c.rope_layout
    ),
    "mrope": lambda x, p, c, g: mr.mrope_vjp(x["x"], x["positions"], g, **_mrope(p, c)),
    "attention_temperature": lambda x, p, c, g: temp.attention_temperature_vjp(
        x["q"], x["positions"], g, **_temperature(p)
    ),
    "cross_entropy_mean": lambda x, p, c, g: ref.losses.cross_entropy_mean_vjp(
        x["logits"], x["targets"], g, p.get("ignore_index", ref.losses.IGNORE_INDEX)
    ),
    "softcap_z_loss": lambda x, p, c, g: ref.losses.softcap_z_loss_vjp(
        x["logits"], g, p.get("alpha", ref.losses.Z_LOSS_ALPHA), p["cap"]
    ),
    "z_loss_mean": lambda x, p, c, g: lin.z_loss_mean_vjp(
        x["logits"], x["targets"], g, p.get("alpha", ref.losses.Z_LOSS_ALPHA), _ignore(p)
    ),
}


def _local(params: Mapping[str, Any], conv: Declared) -> dict[str, Any]:
    """The keywords of a local or sink attention: its alignment and, with a window, what W counts."""
    return {"alignment": conv.causal_alignment, "scale": params.get("scale")}


def _window(params: Mapping[str, Any], conv: Declared) -> dict[str, Any]:
    window = params.get("window")
    return {"window": None if window is None else int(window), "counts": conv.sliding_window}


# sliding-window, chunked and sink attention (reference/local_attention.py)
LOCAL_FORWARD: dict[str, Fwd] = {
    "sliding_window_attention": lambda x, p, c: loc.sliding_window_attention(
        x["q"], x["k"], x["v"], softcap=p.get("softcap"), **_window(p, c), **_local(p, c)
    ),
    "chunked_attention": lambda x, p, c: loc.chunked_attention(x["q"], x["k"], x["v"], int(p["chunk"]), **_local(p, c)),
    "mla_attention": lambda x, p, c: mla_ref.mla_attention(**_mla(x, p, c), form=p.get("form", "naive")),
    "sink_attention": lambda x, p, c: loc.sink_attention(
        x["q"], x["k"], x["v"], x["sinks"], bool(p.get("causal", True)), **_window(p, c), **_local(p, c)
    ),
}
LocalBwd = Callable[[Mapping[str, np.ndarray], Mapping[str, Any], Declared, F64], tuple[F64, ...]]
LOCAL_VJP: dict[str, LocalBwd] = {
    "sliding_window_attention": lambda x, p, c, g: loc.sliding_window_attention_vjp(
        x["q"], x["k"], x["v"], g, softcap=p.get("softcap"), **_window(p, c), **_local(p, c)
    ),
    "chunked_attention": lambda x, p, c, g: loc.chunked_attention_vjp(
        x["q"], x["k"], x["v"], g, int(p["chunk"]), **_local(p, c)
    ),
    "mla_attention": lambda x, p, c, g: mla_ref.mla_attention_vjp(g=g, **_mla(x, p, c)),
    "sink_attention": lambda x, p, c, g: loc.sink_attention_vjp(
        x["q"], x["k"], x["v"], x["sinks"], g, bool(p.get("causal", True)), **_window(p, c), **_local(p, c)
    ),
}


def _mla(x: Mapping[str, np.ndarray], params: Mapping[str, Any], conv: Declared) -> dict[str, Any]:
    """The arrays and keywords of ``mla_attention`` (reference/mla.py)."""
    names = ("q_nope", "q_rope", "latent", "k_rope", "w_uk", "w_uv", "q_positions", "k_positions")
    arrays = {("c" if n == "latent" else n): x[n] for n in names}
    return {
        **arrays,
        "causal": bool(params.get("causal", True)),
        "alignment": conv.causal_alignment,
        "base": params.get("base", 10000.0),
        "layout": conv.rope_layout,
        "mscale": params.get("mscale"),
    }


def router_kw(params: Mapping[str, Any]) -> dict[str, Any]:
    """The keywords of ``moe_router`` (reference/moe.py) from the operation's parameters."""
    groups = params.get("n_group")
    return {
        "k": int(params["k"]),
        "score": params.get("score", "softmax"),
        "norm": params.get("norm", "none"),
        "scaling": float(params.get("routed_scaling_factor", 1.0)),
        "n_group": None if groups is None else int(groups),
        "topk_group": None if params.get("topk_group") is None else int(params["topk_group"]),
    }


# MoE routing and its load-balancing loss (reference/moe.py)
MOE_FORWARD: dict[str, Fwd] = {
    "moe_router": lambda x, p, c: moe_ref.moe_router(x["logits"], x["bias"], **router_kw(p)),
    "moe_aux_loss": lambda x, p, c: moe_ref.moe_aux_loss(x["logits"], int(p["k"]), c.aux_loss_fraction),
    "moe_z_loss": lambda x, p, c: moe_ref.moe_z_loss(x["logits"]),
}
MOE_VJP: dict[str, LocalBwd] = {
    "moe_router": lambda x, p, c, g: moe_ref.moe_router_vjp(x["logits"], x["bias"], g, **router_kw(p)),
    "moe_aux_loss": lambda x, p, c, g: (moe_ref.moe_aux_loss_vjp(x["logits"], g, int(p["k"]), c.aux_loss_fraction),),
    "moe_z_loss": lambda x, p, c, g: (moe_ref.moe_z_loss_vjp(x["logits"], g),),
}


#: Operations of attention, the MLP family, blocks and the LM head (causal alignment, RoPE layout).
BLOCK_OPS = frozenset({"attention", "qk_norm_attention", "rope_attention", "mlp", "glu_mlp", "block", "lm_head"})


def _attn_kw(params: Mapping[str, Any], conv: Declared) -> dict[str, Any]:
    return {
        "causal": bool(params.get("causal")),
        "alignment": conv.causal_alignment,
        "softcap": params.get("softcap"),
    }


def _shape(params: Mapping[str, Any], conv: Declared) -> blk.AttentionShape:
    return blk.AttentionShape(
        int(params["n_heads"]), int(params["n_kv_heads"]), params.get("base", 10000.0), conv.rope_layout
    )


def _blocks_forward(op: str, x: Mapping[str, np.ndarray], params: Mapping[str, Any], conv: Declared) -> F64:
    if op == "attention":
        return att.attention(x["q"], x["k"], x["v"], scale=params.get("scale"), **_attn_kw(params, conv))
    if op == "qk_norm_attention":
        return att.qk_norm_attention(
            x["q"], x["k"], x["v"], x["q_weight"], x["k_weight"], float(params["eps"]), **_attn_kw(params, conv)
        )
    if op == "rope_attention":
        return att.rope_attention(
            x["q"],
            x["k"],
            x["v"],
            x["q_positions"],
            x["k_positions"],
            base=params.get("base", 10000.0),
            layout=conv.rope_layout,
            **_attn_kw(params, conv),
        )
    if op == "mlp":
        return mlp.mlp(x["x"], x["w_in"], x["w_out"], params["activation"])
    if op == "glu_mlp":
        return mlp.glu_mlp(x["x"], x["w1"], x["w3"], x["w2"], params["activation"])
    if op == "block":
        return blk.block(x, x["positions"], params["placement"], _shape(params, conv), float(params["eps"]))
    if op == "lm_head":
        return blk.lm_head(x["x"], x["norm_weight"], x["w_head"], float(params["eps"]))
    raise KeyError(op)


def _blocks_vjp(
    op: str, x: Mapping[str, np.ndarray], params: Mapping[str, Any], conv: Declared, g: F64
) -> tuple[F64, ...] | dict[str, F64]:
    """The gradients, in the order of ``oracle.INPUTS[op]`` (a block's by name)."""
    grads: tuple[F64, ...]
    if op == "attention":
        grads = att.attention_vjp(x["q"], x["k"], x["v"], g, scale=params.get("scale"), **_attn_kw(params, conv))
    elif op == "qk_norm_attention":
        grads = att.qk_norm_attention_vjp(
            x["q"], x["k"], x["v"], x["q_weight"], x["k_weight"], float(params["eps"]), g, **_attn_kw(params, conv)
        )
    elif op == "rope_attention":
        grads = att.rope_attention_vjp(
            x["q"],
            x["k"],
            x["v"],
            x["q_positions"],
            x["k_positions"],
            g,
            base=params.get("base", 10000.0),
            layout=conv.rope_layout,
            **_attn_kw(params, conv),
        )
    elif op == "mlp":
        grads = mlp.mlp_vjp(x["x"], x["w_in"], x["w_out"], params["activation"], g)
    elif op == "glu_mlp":
        grads = mlp.glu_mlp_vjp(x["x"], x["w1"], x["w3"], x["w2"], params["activation"], g)
    elif op == "block":
        return blk.block_vjp(x, x["positions"], params["placement"], _shape(params, conv), float(params["eps"]), g)
    elif op == "lm_head":
        grads = blk.lm_head_vjp(x["x"], x["norm_weight"], x["w_head"], float(params["eps"]), g)
    else:
        raise KeyError(op)
    return grads


def forward(op: str, x: Mapping[str, np.ndarray], params: Mapping[str, Any], conv: Declared, dtype: Format) -> F64:
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
    if op in BLOCK_OPS:
        return _blocks_forward(op, x, params, conv)
    if op in LOCAL_FORWARD:
        return LOCAL_FORWARD[op](x, params, conv)
    if op in MOE_FORWARD:
        return MOE_FORWARD[op](x, params, conv)
    raise KeyError(op)


def vjp(
    op: str, x: Mapping[str, np.ndarray], params: Mapping[str, Any], conv: Declared, dtype: Format, g: F64
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
    elif op == "linear_cross_entropy":
        grads = lin.linear_cross_entropy_vjp(
            x["x"], x["weight"], x["bias"], x["targets"], g, _ignore(params), params.get("reduction", "mean")
        )
    elif op in EXTRA_VJP:
        grads = (EXTRA_VJP[op](x, params, conv, g),)
    elif op in LOCAL_VJP:
        grads = LOCAL_VJP[op](x, params, conv, g)
    elif op in MOE_VJP:
        grads = MOE_VJP[op](x, params, conv, g)
    elif op in BLOCK_OPS:
        res = _blocks_vjp(op, x, params, conv, g)
        if isinstance(res, dict):
            return res
        grads = res
    else:
        raise KeyError(op)
    return dict(zip(INPUTS[op], grads, strict=True))

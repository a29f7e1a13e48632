"""The oracle of attention, the MLP family, blocks and the LM head under a candidate's declared conventions
(causal alignment, RoPE layout)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
from numpy.typing import NDArray

from adapters.contract import OPS, Conventions
from reference import attention as att
from reference import blocks as blk
from reference import mlp

F64 = NDArray[np.float64]

#: Operations this module answers for.
HANDLED = frozenset({"attention", "qk_norm_attention", "rope_attention", "mlp", "glu_mlp", "block", "lm_head"})


def _attn_kw(params: Mapping[str, Any], conv: Conventions) -> dict[str, Any]:
    return {
        "causal": bool(params.get("causal")),
        "alignment": conv.causal_alignment,
        "softcap": params.get("softcap"),
    }


def _shape(params: Mapping[str, Any], conv: Conventions) -> blk.AttentionShape:
    return blk.AttentionShape(
        int(params["n_heads"]), int(params["n_kv_heads"]), params.get("base", 10000.0), conv.rope_layout
    )


def forward(op: str, x: Mapping[str, np.ndarray], params: Mapping[str, Any], conv: Conventions) -> F64:
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


def vjp(op: str, x: Mapping[str, np.ndarray], params: Mapping[str, Any], conv: Conventions, g: F64) -> dict[str, F64]:
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
    return dict(zip(OPS[op].inputs, grads, strict=True))

"""Error budgets of sliding-window, chunked and sink attention: the attention budget (budgets/attention.py) with the
operation's own mask, and for sinks one more exact logit per head in the softmax."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
from numpy.typing import NDArray

from transformer_conformance.adapters.contract import Conventions
from transformer_conformance.conformance.budgets import error_model as em
from transformer_conformance.conformance.budgets.attention import attention_t, masked_attention_vjp_t
from transformer_conformance.conformance.budgets.error_model import Tracked
from transformer_conformance.conformance.budgets.rounding import F64, Inputs, rounding
from transformer_conformance.reference import local_attention as loc
from transformer_conformance.reference.formats import Format


def mask(op: str, inputs: Inputs, params: Mapping[str, Any], conv: Conventions) -> NDArray[np.bool_] | None:
    """The keys each query of ``op`` sees, under the declared alignment and window count (None: every key)."""
    lq, lk = inputs["q"].shape[2], inputs["k"].shape[2]
    alignment = conv.causal_alignment
    if op == "chunked_attention":
        return loc.chunk_mask(lq, lk, int(params["chunk"]), alignment)
    window = params.get("window")
    if op == "sink_attention" and window is None and not params.get("causal", True):
        return None
    return loc.window_mask(lq, lk, None if window is None else int(window), alignment, conv.sliding_window)


def _softcap(op: str, params: Mapping[str, Any]) -> float | None:
    return params.get("softcap") if op == "sliding_window_attention" else None


def _sinks(inputs: Inputs) -> Tracked | None:
    return em.exact(inputs["sinks"]) if "sinks" in inputs else None


def forward(op: str) -> Any:
    def budget(inputs: Inputs, params: Mapping[str, Any], conv: Conventions, dtype: Format) -> Tracked:
        r = rounding(op, dtype, conv)
        q, k, v = (em.exact(inputs[n]) for n in ("q", "k", "v"))
        return attention_t(
            r,
            q,
            k,
            v,
            False,
            conv.causal_alignment,
            _softcap(op, params),
            params.get("scale"),
            r.u_work,
            mask=mask(op, inputs, params, conv),
            sinks=_sinks(inputs),
        )

    return budget


def vjp(op: str) -> Any:
    def budget(
        inputs: Inputs, params: Mapping[str, Any], conv: Conventions, dtype: Format, g64: F64
    ) -> dict[str, Tracked]:
        r = rounding(op, dtype, conv, grad=True)
        q, k, v = (em.exact(inputs[n]) for n in ("q", "k", "v"))
        dq, dk, dv, ds = masked_attention_vjp_t(
            r,
            q,
            k,
            v,
            em.exact(g64),
            False,
            conv.causal_alignment,
            _softcap(op, params),
            params.get("scale"),
            r.u_work,
            mask=mask(op, inputs, params, conv),
            sinks=_sinks(inputs),
        )
        return {"q": dq, "k": dk, "v": dv} | ({} if ds is None else {"sinks": ds})

    return budget


OPS = ("sliding_window_attention", "chunked_attention", "sink_attention")
FORWARD: dict[str, Any] = {op: forward(op) for op in OPS}
VJP: dict[str, Any] = {op: vjp(op) for op in OPS}

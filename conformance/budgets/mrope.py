"""Budgets of multimodal RoPE and of the NoPE layers' attention temperature, forward and backward.

M-RoPE is RoPE whose pair i takes the position of its stream s(i): each pair's angle, cos and sin carry the
error RoPE's budget gives them at that stream's positions (conformance/budgets/rope.py), and the rotation is
RoPE's. The temperature τ(p) = log1p(⌊(p + 1)/F⌋)·α + 1 is formed in float32 (the positions as float32, as
Llama 4's code forms it): below 2^22 the quotient's rounding cannot move its floor (an integer n lies at least
1/F away, a relative 1/(F·n) > 2^-24), so the floor is exact and log1p, the product and the sum each add their
rounding; the query's product with τ rounds once more.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from transformer_conformance.adapters.contract import Conventions
from transformer_conformance.conformance.budgets import error_model as em
from transformer_conformance.conformance.budgets.error_model import Rounding, Tracked
from transformer_conformance.conformance.budgets.rope import rope_trig, rotate
from transformer_conformance.conformance.budgets.rounding import F64, Inputs, rounding
from transformer_conformance.reference.formats import Format, fmt
from transformer_conformance.reference.mrope import mrope_streams


def mrope_trig(
    params: Mapping[str, Any], positions: np.ndarray, d: int, conv: Conventions, r: Rounding
) -> tuple[Tracked, Tracked]:
    """cos and sin of each pair's angle at its own stream's positions, shape (T, d/2)."""
    n_t, n_h, n_w = (int(n) for n in params["sections"])
    streams = mrope_streams(d // 2, (n_t, n_h, n_w), params.get("streams", "sections"))
    per_stream = [rope_trig({"base": params.get("base", 10000.0)}, positions[s], d, conv, r)[:2] for s in range(3)]
    pairs = np.arange(d // 2)

    def pick(which: int) -> Tracked:
        v, e, m = (np.stack([getattr(t[which], k) for t in per_stream])[streams, :, pairs].T for k in "vem")
        return Tracked(v, e, m)

    return pick(0), pick(1)


def mrope(inputs: Inputs, params: Mapping[str, Any], conv: Conventions, dtype: Format) -> Tracked:
    r = rounding("mrope", dtype, conv)
    x = em.exact(inputs["x"])
    cos, sin = mrope_trig(params, inputs["positions"], x.v.shape[-1], conv, r)
    return rotate(r, x, cos, sin, x.v.shape[-1], conv.rope_layout, transpose=False)


def mrope_vjp(
    inputs: Inputs, params: Mapping[str, Any], conv: Conventions, dtype: Format, g64: F64
) -> dict[str, Tracked]:
    r = rounding("mrope", dtype, conv, grad=True)
    g = em.exact(g64)
    cos, sin = mrope_trig(params, inputs["positions"], g.v.shape[-1], conv, r)
    return {"x": rotate(r, g, cos, sin, g.v.shape[-1], conv.rope_layout, transpose=True)}


def temperature(params: Mapping[str, Any], positions: np.ndarray, r: Rounding) -> Tracked:
    """τ(p), shape (T, 1), formed in float32 (or the working precision, when wider)."""
    floor_scale, alpha = float(params.get("floor_scale", 8192.0)), float(params.get("attn_scale", 0.1))
    if np.max(positions, initial=0) >= 2**22:
        raise ValueError("the temperature budget holds for positions below 2^22 (an exact floor)")
    t = Rounding(u_work=min(r.u_work, fmt("float32").unit_roundoff), u_mid=r.u_mid)
    steps = em.exact(np.floor((np.asarray(positions, dtype=np.float64) + 1.0) / floor_scale))
    logs = em.func(t, steps, np.log1p, lambda v: 1.0 / (1.0 + v), unit=t.u_work)
    tau = em.add(t, em.mul(t, logs, em.const(t, alpha), unit=t.u_work), em.const(t, 1.0))
    return Tracked(tau.v[:, None], tau.e[:, None], tau.m[:, None])


def attention_temperature(inputs: Inputs, params: Mapping[str, Any], conv: Conventions, dtype: Format) -> Tracked:
    r = rounding("attention_temperature", dtype, conv)
    tau = temperature(params, inputs["positions"], r)
    q = em.exact(inputs["q"])
    return em.mul(r, q, Tracked(*(np.broadcast_to(getattr(tau, k), q.v.shape) for k in "vem")), unit=r.u_work)


def attention_temperature_vjp(
    inputs: Inputs, params: Mapping[str, Any], conv: Conventions, dtype: Format, g64: F64
) -> dict[str, Tracked]:
    r = rounding("attention_temperature", dtype, conv, grad=True)
    tau = temperature(params, inputs["positions"], r)
    g = em.exact(g64)
    return {"q": em.mul(r, g, Tracked(*(np.broadcast_to(getattr(tau, k), g.v.shape) for k in "vem")), unit=r.u_work)}


FORWARD = {"mrope": mrope, "attention_temperature": attention_temperature}
VJP = {"mrope": mrope_vjp, "attention_temperature": attention_temperature_vjp}

"""Budgets of RoPE, forward and backward: the angles' error and the rotation of each pair (seed-000 §2.1)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

import transformer_conformance.reference as ref
from transformer_conformance.adapters.contract import Conventions
from transformer_conformance.conformance.budgets import error_model as em
from transformer_conformance.conformance.budgets.error_model import Rounding, Tracked
from transformer_conformance.conformance.budgets.rounding import F64, Inputs, rope_angle_ulps, rounding
from transformer_conformance.reference.formats import Format, fmt


def rope_trig(
    params: Mapping[str, Any], positions: np.ndarray, d: int, conv: Conventions, r: Rounding
) -> tuple[Tracked, Tracked, int]:
    rd = params.get("rotary_dim") or d
    base = params.get("base", 10000.0)
    angles = ref.rope_angles(positions, rd, base)
    u_angle = fmt(conv.rope_angle_dtype).unit_roundoff
    # the positions as the angle format holds them: past 1/u (2^24 in float32) a position is itself rounded
    held = em.integers(positions, u_angle)
    rel = rope_angle_ulps(rd, base) * u_angle + held.e[:, None] / np.maximum(held.m[:, None], 1.0)
    ang = Tracked(angles, rel * np.abs(angles), np.abs(angles))
    trig = Rounding(u_work=max(u_angle, r.u_work), u_mid=r.u_mid)
    return em.trig(trig, ang, np.cos, lambda v: -np.sin(v)), em.trig(trig, ang, np.sin, np.cos), rd


def rotate(r: Rounding, x: Tracked, cos: Tracked, sin: Tracked, rd: int, layout: str, transpose: bool) -> Tracked:
    ia, ib = ref.rope_pair_indices(rd, layout)  # type: ignore[arg-type]
    a = Tracked(x.v[..., ia], x.e[..., ia], x.m[..., ia])
    b = Tracked(x.v[..., ib], x.e[..., ib], x.m[..., ib])
    s = em.neg(sin) if transpose else sin
    out_a = em.sub(r, em.mul(r, a, cos), em.mul(r, b, s), unit=r.u_work)
    out_b = em.add(r, em.mul(r, a, s), em.mul(r, b, cos), unit=r.u_work)
    v, e, m = x.v.copy(), x.e.copy(), x.m.copy()
    for idx, t in ((ia, out_a), (ib, out_b)):
        v[..., idx], e[..., idx], m[..., idx] = t.v, t.e, t.m
    return Tracked(v, e, m)


def rope(inputs: Inputs, params: Mapping[str, Any], conv: Conventions, dtype: Format) -> Tracked:
    r = rounding("rope", dtype, conv)
    x = em.exact(inputs["x"])
    cos, sin, rd = rope_trig(params, inputs["positions"], x.v.shape[-1], conv, r)
    return rotate(r, x, cos, sin, rd, conv.rope_layout, transpose=False)


def rope_vjp(
    inputs: Inputs, params: Mapping[str, Any], conv: Conventions, dtype: Format, g64: F64
) -> dict[str, Tracked]:
    r = rounding("rope", dtype, conv, grad=True)
    g = em.exact(g64)
    cos, sin, rd = rope_trig(params, inputs["positions"], g.v.shape[-1], conv, r)
    return {"x": rotate(r, g, cos, sin, rd, conv.rope_layout, transpose=True)}

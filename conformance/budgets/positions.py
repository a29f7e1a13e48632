"""Error budgets of the position behaviours: sinusoidal and learned positions, ALiBi, scaled RoPE.

Each formula of ``reference.positions`` and ``reference.rope_scaling`` restated in tracked arithmetic
(conformance/budgets/error_model.py); registered in conformance/budgets/registry.py.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np
from numpy.typing import NDArray

import transformer_conformance.reference as ref
from transformer_conformance.adapters.contract import Conventions
from transformer_conformance.conformance.budgets import error_model as em
from transformer_conformance.conformance.budgets.error_model import Rounding, Tracked
from transformer_conformance.conformance.budgets.rope import rotate
from transformer_conformance.conformance.budgets.rounding import Inputs, rope_angle_ulps, rounding
from transformer_conformance.reference.formats import Format, fmt

F64 = NDArray[np.float64]


def _trig_rounding(conv: Conventions, r: Rounding) -> tuple[float, Rounding]:
    """(unit of the angle precision, the rounding cos and sin are evaluated under)."""
    u_angle = fmt(conv.rope_angle_dtype).unit_roundoff
    return u_angle, Rounding(u_work=max(u_angle, r.u_work), u_mid=r.u_mid)


def _theta(rd: int, base: float, u: float) -> Tracked:
    """θ_i = base^(−2i/d) as computed at unit ``u``: the loss of budgets.rope_angle_ulps, less the half unit
    it charges for the product with the position (charged where that product is formed)."""
    v = ref.rope_inv_freq(rd, base)
    return Tracked(v, (rope_angle_ulps(rd, base) - 0.5) * u * v, v)


def _sin_cos(trig: Rounding, ang: Tracked) -> tuple[Tracked, Tracked]:
    return em.trig(trig, ang, np.sin, np.cos), em.trig(trig, ang, np.cos, lambda v: -np.sin(v))


# ---- sinusoidal -----------------------------------------------------------------------------------------------


def sinusoidal_table(positions: np.ndarray, d: int, base: float, conv: Conventions, r: Rounding) -> Tracked:
    """PE(positions) (T, d) as a candidate computes it: angles pos·ω_i at the declared angle precision."""
    u_angle, trig = _trig_rounding(conv, r)
    ang = em.mul(
        Rounding(u_angle, u_angle), em.integers(np.asarray(positions)[:, None], u_angle), _theta(d, base, u_angle)
    )
    sin, cos = _sin_cos(trig, ang)
    parts = []
    for a in ("v", "e", "m"):
        t = np.empty((ang.v.shape[0], d))
        t[:, 0::2], t[:, 1::2] = getattr(sin, a), getattr(cos, a)
        parts.append(t)
    return Tracked(*parts)


def sinusoidal_positions(inputs: Inputs, params: Mapping[str, Any], conv: Conventions, dtype: Format) -> Tracked:
    r = rounding("sinusoidal_positions", dtype, conv)
    x = em.exact(inputs["x"])
    pe = sinusoidal_table(inputs["positions"], x.v.shape[-1], params.get("base", 10000.0), conv, r)
    return em.add(r, x, pe, unit=r.u_work)


def sinusoidal_positions_vjp(
    inputs: Inputs, params: Mapping[str, Any], conv: Conventions, dtype: Format, g64: F64
) -> dict[str, Tracked]:
    return {"x": em.exact(g64)}


# ---- learned --------------------------------------------------------------------------------------------------


def learned_positions(inputs: Inputs, params: Mapping[str, Any], conv: Conventions, dtype: Format) -> Tracked:
    return em.exact(ref.positions.learned_positions(np.asarray(inputs["table"], dtype=np.float64), inputs["positions"]))


def learned_positions_vjp(
    inputs: Inputs, params: Mapping[str, Any], conv: Conventions, dtype: Format, g64: F64
) -> dict[str, Tracked]:
    """Row l of ∂L/∂table sums the n_l upstream rows that read position l, accumulated in working precision."""
    r = rounding("learned_positions", dtype, conv, grad=True)
    table, pos = np.asarray(inputs["table"], dtype=np.float64), np.asarray(inputs["positions"])
    v = ref.positions.learned_positions_vjp(table, pos, g64)
    absum = np.zeros_like(v)
    np.add.at(absum, pos, np.abs(g64))
    n = np.bincount(pos, minlength=table.shape[0]).astype(np.float64)[:, None]
    u_sum = r.u_sum or r.u_work
    gamma = np.minimum(np.maximum(n - 1.0, 0.0), em.LAMBDA * np.sqrt(np.maximum(n, 1.0))) * u_sum
    e = gamma * absum + n * r.eta_sum + r.u_work * np.abs(v)
    return {"table": Tracked(v, e, absum)}


# ---- ALiBi ----------------------------------------------------------------------------------------------------


def alibi(inputs: Inputs, params: Mapping[str, Any], conv: Conventions, dtype: Format) -> Tracked:
    """scores − m_h·|i − j|: the slope 2^(−8(h+1)/H) an elementary function of working precision, the integer
    distance exact, then a product and a sum."""
    r = rounding("alibi", dtype, conv)
    scores = em.exact(inputs["scores"])
    slopes = ref.positions.alibi_slopes(scores.v.shape[-3])[:, None, None]
    slope = Tracked(slopes, em.TRANSCENDENTAL_ULPS * r.u_work * slopes, slopes)
    qp, kp = (np.asarray(inputs[k], dtype=np.float64) for k in ("q_positions", "k_positions"))
    bias = em.mul(r, slope, em.exact(np.abs(qp[:, None] - kp[None, :])[None]))
    return em.sub(r, scores, bias, unit=r.u_work)


def alibi_vjp(
    inputs: Inputs, params: Mapping[str, Any], conv: Conventions, dtype: Format, g64: F64
) -> dict[str, Tracked]:
    return {"scores": em.exact(g64)}


# ---- RoPE with context extension ------------------------------------------------------------------------------


def scaled_inv_freq(
    rd: int, base: float, scaling: Mapping[str, Any] | None, seq_len: int, u: float
) -> tuple[Tracked, float]:
    """θ'_i of each scaling rule (reference.rope_scaling) in tracked arithmetic at unit ``u``, in the order
    HF transformers' modeling_rope_utils evaluates it, and the attention factor."""
    r = Rounding(u_work=u, u_mid=u)
    rs = ref.rope_scaling
    if scaling is None:
        return _theta(rd, base, u), 1.0
    kind, s = scaling["type"], float(scaling["factor"])
    if kind == "ntk":
        return _theta(rd, rs.ntk_base(base, s, rd), u), 1.0
    if kind == "dynamic":
        original = int(scaling["original_max_position_embeddings"])
        return _theta(rd, rs.dynamic_ntk_base(base, s, rd, seq_len, original), u), 1.0
    th = _theta(rd, base, u)
    if kind == "longrope":
        # 1/(f_i·base^(2i/d)): f_i rounded to working precision, the product and the reciprocal rounded
        inv_f = 1.0 / rs.longrope_factors(scaling, rd, seq_len)
        factor = rs.longrope_attention_factor(s, int(scaling["original_max_position_embeddings"]))
        return em.mul(r, th, Tracked(inv_f, u * inv_f, inv_f)), factor
    divided = em.mul(r, th, em.const(r, 1.0 / s))
    one = em.exact(np.ones_like(th.v))
    if kind == "linear":
        return divided, 1.0
    if kind == "yarn":
        original = int(scaling["original_max_position_embeddings"])
        ramp_v = rs.yarn_ramp(
            rd, base, original, float(scaling.get("beta_fast", 32)), float(scaling.get("beta_slow", 1))
        )
        ramp = Tracked(ramp_v, u * ramp_v, ramp_v)  # (i − low)/(high − low): one division
        keep = em.sub(r, one, ramp)  # the "extrapolation factor"; HF then forms 1 − keep again
        inv = em.add(r, em.mul(r, divided, em.sub(r, one, keep)), em.mul(r, th, keep))
        return inv, rs.yarn_attention_factor(s)
    if kind == "llama3":
        trained = float(scaling["original_max_position_embeddings"])
        low, high = float(scaling.get("low_freq_factor", 1.0)), float(scaling.get("high_freq_factor", 4.0))
        wavelen = em.func(r, th, lambda v: 2 * math.pi / v, lambda v: -2 * math.pi / v**2, ulps=1.0)
        ratio = em.func(r, wavelen, lambda w: trained / w, lambda w: -trained / w**2, ulps=0.5)
        raw = em.mul(r, em.sub(r, ratio, em.const(r, low)), em.const(r, 1.0 / (high - low)))
        # clipping to [0, 1] adds no error: the blend is continuous at both ends
        smooth = Tracked(np.clip(raw.v, 0.0, 1.0), raw.e, np.clip(raw.m, 0.0, 1.0))
        inv = em.add(r, em.mul(r, em.sub(r, one, smooth), divided), em.mul(r, smooth, th))
        return inv, 1.0
    raise ValueError(f"unknown RoPE scaling type {kind!r}")


def _scaled_trig(
    params: Mapping[str, Any], positions: np.ndarray, d: int, conv: Conventions, r: Rounding
) -> tuple[Tracked, Tracked, int]:
    rd = params.get("rotary_dim") or d
    pos = np.asarray(positions)
    u_angle, trig = _trig_rounding(conv, r)
    inv, factor = scaled_inv_freq(
        rd, params.get("base", 10000.0), params.get("scaling"), int(pos.max()) + 1 if pos.size else 0, u_angle
    )
    ang = em.mul(Rounding(u_angle, u_angle), em.integers(pos[:, None], u_angle), inv)
    sin, cos = _sin_cos(trig, ang)
    if factor != 1.0:
        f = em.const(trig, factor)
        cos, sin = em.mul(trig, cos, f, unit=trig.u_work), em.mul(trig, sin, f, unit=trig.u_work)
    return cos, sin, rd


def rope_scaled(inputs: Inputs, params: Mapping[str, Any], conv: Conventions, dtype: Format) -> Tracked:
    r = rounding("rope_scaled", dtype, conv)
    x = em.exact(inputs["x"])
    cos, sin, rd = _scaled_trig(params, inputs["positions"], x.v.shape[-1], conv, r)
    return rotate(r, x, cos, sin, rd, conv.rope_layout, transpose=False)


def rope_scaled_vjp(
    inputs: Inputs, params: Mapping[str, Any], conv: Conventions, dtype: Format, g64: F64
) -> dict[str, Tracked]:
    r = rounding("rope_scaled", dtype, conv, grad=True)
    g = em.exact(g64)
    cos, sin, rd = _scaled_trig(params, inputs["positions"], g.v.shape[-1], conv, r)
    return {"x": rotate(r, g, cos, sin, rd, conv.rope_layout, transpose=True)}

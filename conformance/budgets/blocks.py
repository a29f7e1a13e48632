"""Error budgets of decoder blocks (pre-, post-, double-norm, parallel) and of the final norm + LM head, in
tracked arithmetic: reference/blocks.py restated step for step, each sub-operation's budget (RMSNorm, the
projections, RoPE, attention, SwiGLU) composed with its input's error carried through.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
from numpy.typing import NDArray

from transformer_conformance.adapters.contract import Conventions
from transformer_conformance.conformance.budgets import error_model as em
from transformer_conformance.conformance.budgets.attention import (
    _rope_pair,
    attention_t,
    attention_vjp_t,
    rms_norm_t,
    rms_norm_vjp_t,
)
from transformer_conformance.conformance.budgets.error_model import Rounding, Tracked
from transformer_conformance.conformance.budgets.mlp import glu_t, glu_vjp_t
from transformer_conformance.conformance.budgets.rounding import rounding
from transformer_conformance.reference.blocks import BLOCK_INPUTS
from transformer_conformance.reference.formats import Format

F64 = NDArray[np.float64]
Inputs = Mapping[str, np.ndarray]
TGrads = dict[str, Tracked]
TPullback = Callable[[Tracked], tuple[Tracked, TGrads]]
Step = Callable[[Tracked], tuple[Tracked, TPullback]]


def _map(t: Tracked, f: Callable[[F64], F64]) -> Tracked:
    return Tracked(f(t.v), f(t.e), f(t.m))


def _split(u: Tracked, heads: int) -> Tracked:
    b, t, hd = u.v.shape
    return _map(u, lambda a: a.reshape(b, t, heads, hd // heads).transpose(0, 2, 1, 3))


def _merge(u: Tracked) -> Tracked:
    b, h, t, d = u.v.shape
    return _map(u, lambda a: a.transpose(0, 2, 1, 3).reshape(b, t, h * d))


def _rows(t: Tracked) -> Tracked:
    return _map(t, lambda a: a.reshape(-1, a.shape[-1]))


def _outer(r: Rounding, u: Tracked, g: Tracked) -> Tracked:
    return em.matmul(r, em.transpose(_rows(u)), _rows(g))


def _accumulate(r: Rounding, into: TGrads, grads: TGrads) -> None:
    for k, v in grads.items():
        into[k] = em.add(r, into[k], v) if k in into else v


def _chain(r: Rounding, *steps: TPullback) -> TPullback:
    def pullback(g: Tracked) -> tuple[Tracked, TGrads]:
        grads: TGrads = {}
        for step in reversed(steps):
            g, gw = step(g)
            _accumulate(r, grads, gw)
        return g, grads

    return pullback


def _residual(r: Rounding, x: Tracked, branch: tuple[Tracked, TPullback]) -> tuple[Tracked, TPullback]:
    out, pb = branch

    def pullback(g: Tracked) -> tuple[Tracked, TGrads]:
        dx, grads = pb(g)
        return em.add(r, g, dx), grads

    return em.add(r, x, out), pullback


def _norm(r: Rounding, u: Tracked, w: Mapping[str, Tracked], name: str, eps: float) -> tuple[Tracked, TPullback]:
    def pullback(g: Tracked) -> tuple[Tracked, TGrads]:
        du, dw = rms_norm_vjp_t(r, u, w[name], eps, g)
        return du, {name: dw}

    return rms_norm_t(r, u, w[name], eps), pullback


def _attn(
    r: Rounding,
    u: Tracked,
    w: Mapping[str, Tracked],
    positions: np.ndarray,
    params: Mapping[str, Any],
    conv: Conventions,
) -> tuple[Tracked, TPullback]:
    hq, hkv = int(params["n_heads"]), int(params["n_kv_heads"])
    base = params.get("base", 10000.0)
    q, k = _split(em.matmul(r, u, w["wq"]), hq), _split(em.matmul(r, u, w["wk"]), hkv)
    v = _split(em.matmul(r, u, w["wv"]), hkv)
    rq, rk = _rope_pair(r, q, positions, base, conv, False), _rope_pair(r, k, positions, base, conv, False)
    o = _merge(attention_t(r, rq, rk, v, True, "bottom_right", None))
    out = em.matmul(r, o, w["wo"])

    def pullback(g: Tracked) -> tuple[Tracked, TGrads]:
        do = _split(em.matmul(r, g, em.transpose(w["wo"])), hq)
        drq, drk, dv = attention_vjp_t(r, rq, rk, v, do, True, "bottom_right", None)
        dq = _merge(_rope_pair(r, drq, positions, base, conv, True))
        dk = _merge(_rope_pair(r, drk, positions, base, conv, True))
        dvm = _merge(dv)
        du = em.add(
            r,
            em.add(r, em.matmul(r, dq, em.transpose(w["wq"])), em.matmul(r, dk, em.transpose(w["wk"]))),
            em.matmul(r, dvm, em.transpose(w["wv"])),
        )
        grads = {"wq": _outer(r, u, dq), "wk": _outer(r, u, dk), "wv": _outer(r, u, dvm), "wo": _outer(r, o, g)}
        return du, grads

    return out, pullback


def _mlp(r: Rounding, u: Tracked, w: Mapping[str, Tracked]) -> tuple[Tracked, TPullback]:
    out = glu_t(r, u, w["w1"], w["w3"], w["w2"], "silu", None)

    def pullback(g: Tracked) -> tuple[Tracked, TGrads]:
        dx, d1, d3, d2 = glu_vjp_t(r, _rows(u), w["w1"], w["w3"], w["w2"], "silu", _rows(g))
        return _map(dx, lambda a: a.reshape(u.v.shape)), {"w1": d1, "w3": d3, "w2": d2}

    return out, pullback


def _steps(
    r: Rounding, w: Mapping[str, Tracked], positions: np.ndarray, params: Mapping[str, Any], conv: Conventions
) -> list[Step]:
    eps = float(params["eps"])
    placement = params["placement"]

    def attn(u: Tracked) -> tuple[Tracked, TPullback]:
        return _attn(r, u, w, positions, params, conv)

    def mlp(u: Tracked) -> tuple[Tracked, TPullback]:
        return _mlp(r, u, w)

    def pre(x: Tracked, f: Step, norm: str, post: str | None) -> tuple[Tracked, TPullback]:
        n, pb_n = _norm(r, x, w, norm, eps)
        o, pb_f = f(n)
        if post is None:
            return _residual(r, x, (o, _chain(r, pb_n, pb_f)))
        p, pb_p = _norm(r, o, w, post, eps)
        return _residual(r, x, (p, _chain(r, pb_n, pb_f, pb_p)))

    def post_step(x: Tracked, f: Step, norm: str) -> tuple[Tracked, TPullback]:
        s, pb_s = _residual(r, x, f(x))
        y, pb_n = _norm(r, s, w, norm, eps)
        return y, _chain(r, pb_s, pb_n)

    def parallel(x: Tracked) -> tuple[Tracked, TPullback]:
        n, pb_n = _norm(r, x, w, "attn_norm", eps)
        a, pb_a = attn(n)
        m, pb_m = mlp(n)

        def both(g: Tracked) -> tuple[Tracked, TGrads]:
            da, ga = pb_a(g)
            dm, gm = pb_m(g)
            return em.add(r, da, dm), {**ga, **gm}

        return _residual(r, x, (em.add(r, a, m), _chain(r, pb_n, both)))

    if placement == "pre":
        return [lambda x: pre(x, attn, "attn_norm", None), lambda x: pre(x, mlp, "mlp_norm", None)]
    if placement == "double":
        return [
            lambda x: pre(x, attn, "attn_norm", "attn_post_norm"),
            lambda x: pre(x, mlp, "mlp_norm", "mlp_post_norm"),
        ]
    if placement == "post":
        return [lambda x: post_step(x, attn, "attn_norm"), lambda x: post_step(x, mlp, "mlp_norm")]
    return [parallel]


def _weights(inputs: Inputs) -> dict[str, Tracked]:
    return {k: em.exact(inputs[k]) for k in BLOCK_INPUTS}


def block(inputs: Inputs, params: Mapping[str, Any], conv: Conventions, dtype: Format) -> Tracked:
    r = rounding("block", dtype, conv)
    w = _weights(inputs)
    x = w["x"]
    for step in _steps(r, w, inputs["positions"], params, conv):
        x, _ = step(x)
    return x


def block_vjp(
    inputs: Inputs, params: Mapping[str, Any], conv: Conventions, dtype: Format, g64: F64
) -> dict[str, Tracked]:
    r = rounding("block", dtype, conv, grad=True)
    w = _weights(inputs)
    x, pullbacks = w["x"], []
    for step in _steps(r, w, inputs["positions"], params, conv):
        x, pb = step(x)
        pullbacks.append(pb)
    dx, grads = _chain(r, *pullbacks)(em.exact(g64))
    out = {k: em.exact(np.zeros_like(inputs[k], dtype=np.float64)) for k in BLOCK_INPUTS}
    out.update(grads)
    out["x"] = dx
    return out


def lm_head(inputs: Inputs, params: Mapping[str, Any], conv: Conventions, dtype: Format) -> Tracked:
    r = rounding("lm_head", dtype, conv)
    x, nw, wh = (em.exact(inputs[k]) for k in ("x", "norm_weight", "w_head"))
    return em.matmul(r, rms_norm_t(r, x, nw, float(params["eps"])), wh, unit=r.u_work)


def lm_head_vjp(
    inputs: Inputs, params: Mapping[str, Any], conv: Conventions, dtype: Format, g64: F64
) -> dict[str, Tracked]:
    r = rounding("lm_head", dtype, conv, grad=True)
    x, nw, wh = (em.exact(inputs[k]) for k in ("x", "norm_weight", "w_head"))
    g = em.exact(g64)
    eps = float(params["eps"])
    n = rms_norm_t(r, x, nw, eps)
    dx, dw = rms_norm_vjp_t(r, x, nw, eps, em.matmul(r, g, em.transpose(wh)))
    return {"x": dx, "norm_weight": dw, "w_head": _outer(r, n, g)}

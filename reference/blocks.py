"""Decoder blocks and the residual stream: pre-norm, post-norm, double-norm and parallel placements; the final
norm and LM head; and the gradient of a stack, layer by layer. Hand-derived VJPs throughout.

seed-000 §Pre-norm vs. post-norm, §The residual-stream view, §A modern decoder block; seed-002 §3.1.1 (residual
stream, serial and parallel layers, no biases), §3.1.2 (pre-/post-/double-norm).

A block reads x (B, T, d) and holds: RMSNorm weights ``attn_norm``, ``mlp_norm`` (and ``attn_post_norm``,
``mlp_post_norm`` for double-norm); causal self-attention with RoPE on Q and K and GQA (``wq`` (d, H_q·D),
``wk``, ``wv`` (d, H_kv·D), ``wo`` (H_q·D, d)); a SwiGLU MLP (``w1``, ``w3`` (d, h), ``w2`` (h, d)). No biases.

* ``pre``:      h = x + A(N_a(x));            y = h + M(N_m(h))
* ``post``:     h = N_a(x + A(x));            y = N_m(h + M(h))
* ``double``:   h = x + N_a'(A(N_a(x)));      y = h + N_m'(M(N_m(h)))
* ``parallel``: y = x + A(N_a(x)) + M(N_a(x))  (one norm, both sub-blocks read it; ``mlp_norm`` unused)

Weights a placement does not use get a zero gradient.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
from numpy.typing import NDArray

from transformer_conformance.reference.attention import attention, attention_vjp
from transformer_conformance.reference.norms import rms_norm, rms_norm_vjp
from transformer_conformance.reference.rope import Layout, rope, rope_vjp
from transformer_conformance.reference.swiglu import swiglu_mlp, swiglu_mlp_vjp

F64 = NDArray[np.float64]
I64 = NDArray[np.int64]
Placement = Literal["pre", "post", "double", "parallel"]
PLACEMENTS: tuple[Placement, ...] = ("pre", "post", "double", "parallel")
BLOCK_INPUTS = (
    "x",
    "attn_norm",
    "wq",
    "wk",
    "wv",
    "wo",
    "mlp_norm",
    "w1",
    "w3",
    "w2",
    "attn_post_norm",
    "mlp_post_norm",
)
Grads = dict[str, F64]
Pullback = Callable[[F64], tuple[F64, Grads]]


@dataclass(frozen=True)
class AttentionShape:
    n_heads: int
    n_kv_heads: int
    base: float = 10000.0
    layout: Layout = "interleaved"


def _split(u: F64, heads: int) -> F64:
    """(B, T, H·D) -> (B, H, T, D)."""
    b, t, hd = u.shape
    return u.reshape(b, t, heads, hd // heads).transpose(0, 2, 1, 3)


def _merge(u: F64) -> F64:
    """(B, H, T, D) -> (B, T, H·D)."""
    b, h, t, d = u.shape
    return u.transpose(0, 2, 1, 3).reshape(b, t, h * d)


def _outer(u: F64, g: F64) -> F64:
    return u.reshape(-1, u.shape[-1]).T @ g.reshape(-1, g.shape[-1])


def _attn(u: F64, w: Mapping[str, F64], positions: I64, shape: AttentionShape) -> tuple[F64, Pullback]:
    """Causal self-attention of the normalised stream u, RoPE on Q and K, and its pullback."""
    hq, hkv = shape.n_heads, shape.n_kv_heads
    q, k, v = _split(u @ w["wq"], hq), _split(u @ w["wk"], hkv), _split(u @ w["wv"], hkv)
    rq, rk = rope(q, positions, shape.base, layout=shape.layout), rope(k, positions, shape.base, layout=shape.layout)
    o = _merge(attention(rq, rk, v, causal=True))
    out = o @ w["wo"]

    def pullback(g: F64) -> tuple[F64, Grads]:
        do = _split(g @ w["wo"].T, hq)
        drq, drk, dv = attention_vjp(rq, rk, v, do, causal=True)
        dq = _merge(rope_vjp(q, positions, drq, shape.base, layout=shape.layout))
        dk = _merge(rope_vjp(k, positions, drk, shape.base, layout=shape.layout))
        dvm = _merge(dv)
        du = dq @ w["wq"].T + dk @ w["wk"].T + dvm @ w["wv"].T
        return du, {"wq": _outer(u, dq), "wk": _outer(u, dk), "wv": _outer(u, dvm), "wo": _outer(o, g)}

    return out, pullback


def _mlp(u: F64, w: Mapping[str, F64]) -> tuple[F64, Pullback]:
    out = swiglu_mlp(u, w["w1"], w["w3"], w["w2"])

    def pullback(g: F64) -> tuple[F64, Grads]:
        du, d1, d3, d2 = swiglu_mlp_vjp(u, w["w1"], w["w3"], w["w2"], g)
        return du, {"w1": d1, "w3": d3, "w2": d2}

    return out, pullback


def _norm(u: F64, w: F64, name: str, eps: float) -> tuple[F64, Pullback]:
    def pullback(g: F64) -> tuple[F64, Grads]:
        du, dw = rms_norm_vjp(u, w, eps, g)
        return du, {name: dw}

    return rms_norm(u, w, eps), pullback


def _chain(*steps: Pullback) -> Pullback:
    """The pullback of a composition f_n ∘ … ∘ f_1 given the pullbacks of f_1 … f_n in forward order."""

    def pullback(g: F64) -> tuple[F64, Grads]:
        grads: Grads = {}
        for step in reversed(steps):
            g, gw = step(g)
            for k, v in gw.items():
                grads[k] = grads[k] + v if k in grads else v
        return g, grads

    return pullback


def _residual(x: F64, branch: tuple[F64, Pullback]) -> tuple[F64, Pullback]:
    """x + f(x): the stream passes unchanged, the branch adds (seed-000: "blocks only add to it")."""
    out, pb = branch

    def pullback(g: F64) -> tuple[F64, Grads]:
        dx, grads = pb(g)
        return g + dx, grads

    return x + out, pullback


def sub_blocks(
    placement: Placement, w: Mapping[str, F64], positions: I64, shape: AttentionShape, eps: float
) -> list[Callable[[F64], tuple[F64, Pullback]]]:
    """The block as residual steps, each x -> (x', pullback): two in series, one for ``parallel``."""

    def attn(u: F64) -> tuple[F64, Pullback]:
        return _attn(u, w, positions, shape)

    def mlp(u: F64) -> tuple[F64, Pullback]:
        return _mlp(u, w)

    def pre(x: F64, f: Callable[[F64], tuple[F64, Pullback]], norm: str, post: str | None) -> tuple[F64, Pullback]:
        n, pb_n = _norm(x, w[norm], norm, eps)
        o, pb_f = f(n)
        if post is None:
            return _residual(x, (o, _chain(pb_n, pb_f)))
        p, pb_p = _norm(o, w[post], post, eps)
        return _residual(x, (p, _chain(pb_n, pb_f, pb_p)))

    def post_step(x: F64, f: Callable[[F64], tuple[F64, Pullback]], norm: str) -> tuple[F64, Pullback]:
        s, pb_s = _residual(x, f(x))
        y, pb_n = _norm(s, w[norm], norm, eps)
        return y, _chain(pb_s, pb_n)

    def parallel(x: F64) -> tuple[F64, Pullback]:
        n, pb_n = _norm(x, w["attn_norm"], "attn_norm", eps)
        a, pb_a = attn(n)
        m, pb_m = mlp(n)

        def both(g: F64) -> tuple[F64, Grads]:
            da, ga = pb_a(g)
            dm, gm = pb_m(g)
            return da + dm, {**ga, **gm}

        return _residual(x, (a + m, _chain(pb_n, both)))

    if placement == "pre":
        return [lambda x: pre(x, attn, "attn_norm", None), lambda x: pre(x, mlp, "mlp_norm", None)]
    if placement == "double":
        return [
            lambda x: pre(x, attn, "attn_norm", "attn_post_norm"),
            lambda x: pre(x, mlp, "mlp_norm", "mlp_post_norm"),
        ]
    if placement == "post":
        return [lambda x: post_step(x, attn, "attn_norm"), lambda x: post_step(x, mlp, "mlp_norm")]
    if placement == "parallel":
        return [parallel]
    raise ValueError(f"unknown placement {placement!r}; expected one of {', '.join(PLACEMENTS)}")


def block(w: Mapping[str, F64], positions: I64, placement: Placement, shape: AttentionShape, eps: float) -> F64:
    """One decoder block applied to ``w["x"]`` under ``placement`` (module docstring)."""
    x = w["x"]
    for step in sub_blocks(placement, w, positions, shape, eps):
        x, _ = step(x)
    return x


def block_vjp(
    w: Mapping[str, F64], positions: I64, placement: Placement, shape: AttentionShape, eps: float, g: F64
) -> Grads:
    """VJP of :func:`block`: one gradient per name of ``BLOCK_INPUTS`` (zero for weights the placement ignores)."""
    x, pullbacks = w["x"], []
    for step in sub_blocks(placement, w, positions, shape, eps):
        x, pb = step(x)
        pullbacks.append(pb)
    dx, grads = _chain(*pullbacks)(g)
    out = {k: np.zeros_like(w[k]) for k in BLOCK_INPUTS}
    out.update(grads)
    out["x"] = dx
    return out


def lm_head(x: F64, norm_weight: F64, w_head: F64, eps: float) -> F64:
    """Logits = RMSNorm(x)·W_head: the final norm the pre-norm stream needs before the output head (seed-000:
    "A final normalization before the output head is required, because the stream itself is never normalized")."""
    return rms_norm(x, norm_weight, eps) @ w_head


def lm_head_vjp(x: F64, norm_weight: F64, w_head: F64, eps: float, g: F64) -> tuple[F64, F64, F64]:
    """VJP of :func:`lm_head`: (∂x, ∂γ, ∂W_head)."""
    n = rms_norm(x, norm_weight, eps)
    dx, dw = rms_norm_vjp(x, norm_weight, eps, g @ w_head.T)
    return dx, dw, _outer(n, g)


@dataclass(frozen=True)
class StepRecord:
    """One residual step of a stack on the way back: its input x, the sum s it normalises (post-norm; else x),
    and the gradients at its output, at s and at x."""

    x: F64
    s: F64
    g_out: F64
    g_s: F64
    g_in: F64


def stack_gradients(
    layers: Sequence[Mapping[str, F64]],
    x: F64,
    positions: I64,
    placement: Placement,
    shape: AttentionShape,
    eps: float,
    g: F64,
) -> list[StepRecord]:
    """Run a stack of blocks forward on x and back from the upstream gradient g, recording every residual step
    (bottom first). ``g_in`` of step 0 is ∂L/∂x; per-layer gradient norms are ‖g_in‖ of each layer's first step."""
    records: list[tuple[F64, F64, Pullback, Pullback | None]] = []
    for w in layers:
        w = {**w, "x": x}
        for step in sub_blocks(placement, w, positions, shape, eps):
            x_in = x
            if placement == "post":
                # split the step at the sum s = x + f(x) so its gradient can be recorded
                s, pb_s = step_sum(w, x_in, len(records) % 2, positions, shape)
                name = "attn_norm" if len(records) % 2 == 0 else "mlp_norm"
                x, pb_norm = _norm(s, w[name], name, eps)
                records.append((x_in, s, pb_s, pb_norm))
            else:
                x, pb = step(x_in)
                records.append((x_in, x_in, pb, None))
    out: list[StepRecord] = []
    for x_in, s, pb_step, pb_n in reversed(records):
        g_s = g if pb_n is None else pb_n(g)[0]  # post-norm: back through the norm to the sum
        g_in = pb_step(g_s)[0]
        out.append(StepRecord(x_in, s, g, g_s, g_in))
        g = g_in
    return out[::-1]


def step_sum(w: Mapping[str, F64], x: F64, which: int, positions: I64, shape: AttentionShape) -> tuple[F64, Pullback]:
    """The un-normalised sum x + f(x) of a post-norm step (which = 0: attention, 1: MLP)."""
    return _residual(x, _attn(x, w, positions, shape) if which == 0 else _mlp(x, w))

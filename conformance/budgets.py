"""Per-behaviour error budgets: each oracle formula restated in tracked arithmetic (error_model).

For a candidate, a dtype and its declared conventions, these give for every output element the
largest difference from the oracle that a correct implementation can produce. The values carried
(``Tracked.v``) equal the oracle's; the project's tests check that.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
from numpy.typing import NDArray

import reference as ref
from adapters.contract import Conventions
from conformance import error_model as em
from conformance.dtypes import Format, fmt
from conformance.error_model import Rounding, Tracked

F64 = NDArray[np.float64]
Inputs = Mapping[str, np.ndarray]


def rope_angle_ulps(rotary_dim: int, base: float) -> F64:
    """Units of the angle precision by which m·θ_i may be off, pair by pair.

    θ_i = base^(−2i/d) is computed as exp((2i/d)·ln base): the roundings of 2i/d, of ln base and of their
    product (½ ulp each) become relative errors of |ln(base)·2i/d|·ulp in θ_i; exp itself (1 ulp), the
    reciprocal or division (½), the product with the (exact, integer) position (½) and a margin (½) add 2.5.
    """
    frac = np.arange(0, rotary_dim, 2, dtype=np.float64) / rotary_dim
    return 1.5 * abs(np.log(base)) * frac + 2.5


def rounding(op: str, dtype: Format, conv: Conventions, grad: bool = False) -> Rounding:
    """The units in force for ``op`` (its backward when ``grad``) under the declared conventions."""

    def declared(entries: frozenset[str]) -> bool:
        return op in entries or (grad and f"{op}.vjp" in entries)

    u_work = min(dtype.unit_roundoff, fmt(conv.compute_dtype).unit_roundoff)
    u_mid = dtype.unit_roundoff if declared(conv.unfused) else u_work
    return Rounding(
        u_work=u_work,
        u_mid=u_mid,
        u_sum=dtype.unit_roundoff if declared(conv.low_precision_sums) else 0.0,
        ftz=conv.flush_subnormals,
        exp2=declared(conv.exp_via_exp2),
    )


def resolve_eps(op: str, eps: float | None, dtype: Format, conv: Conventions) -> float:
    """The ε a candidate uses: the one passed, else its declared default ("finfo": the dtype's epsilon)."""
    if eps is not None:
        return float(eps)
    default = conv.eps_defaults[op]
    return 2.0 * dtype.unit_roundoff if default == "finfo" else float(default)


def _rsqrt(r: Rounding, a: Tracked) -> Tracked:
    return em.func(r, a, lambda v: 1.0 / np.sqrt(v), lambda v: -0.5 * v**-1.5)


def _norm_stats(
    r: Rounding, x: Tracked, eps: float, centred: bool, variance: str = "two_pass"
) -> tuple[Tracked, Tracked]:
    """(x − μ, r): the centred input (x itself for RMSNorm) and 1/√(stat + ε), stat = mean(x²) or the
    biased variance.

    ``variance="one_pass"`` computes the variance as mean(x²) − μ² (clamped at 0, which only moves a
    negative result towards the true, non-negative one): the subtraction cancels, so its error is of the
    order of u_work·mean(x²), not u_work·σ² — the tracked magnitudes carry that.
    """
    if not centred:
        return x, _rsqrt(r, em.add(r, em.mean(r, em.mul(r, x, x)), em.const(r, eps)))
    mu = em.mean(r, x)
    xc = em.sub(r, x, mu)
    if variance == "one_pass":
        var = em.sub(r, em.mean(r, em.mul(r, x, x)), em.mul(r, mu, mu))
    else:
        var = em.mean(r, em.mul(r, xc, xc))
    return xc, _rsqrt(r, em.add(r, var, em.const(r, eps)))


def _norm_weight(r: Rounding, w: np.ndarray, conv: Conventions, dtype: Format) -> Tracked:
    """γ as the candidate holds it: exact, or, stored zero-centred (``norm_weight_offset``), as
    w = γ − offset rounded to the dtype under test and then offset + w in working precision."""
    t = em.exact(w)
    if conv.norm_weight_offset == 0.0:
        return t
    stored = dtype.unit_roundoff * np.abs(t.v - conv.norm_weight_offset) + r.eta(dtype.unit_roundoff)
    return Tracked(t.v, stored + r.u_work * np.abs(t.v), t.m)


def rms_norm(inputs: Inputs, params: Mapping[str, Any], conv: Conventions, dtype: Format) -> Tracked:
    r = rounding("rms_norm", dtype, conv)
    x, w = em.exact(inputs["x"]), _norm_weight(r, inputs["weight"], conv, dtype)
    eps = resolve_eps("rms_norm", params.get("eps"), dtype, conv)
    _, rinv = _norm_stats(r, x, eps, centred=False)
    # "before_weight": x̂ is cast to the output dtype before the weight multiply (a second rounding)
    xhat = em.mul(r, x, rinv, unit=dtype.unit_roundoff if conv.norm_rounding == "before_weight" else None)
    return em.mul(r, xhat, w, unit=r.u_work)


def layer_norm(inputs: Inputs, params: Mapping[str, Any], conv: Conventions, dtype: Format) -> Tracked:
    r = rounding("layer_norm", dtype, conv)
    x, w, b = em.exact(inputs["x"]), _norm_weight(r, inputs["weight"], conv, dtype), em.exact(inputs["bias"])
    eps = resolve_eps("layer_norm", params.get("eps"), dtype, conv)
    xc, rinv = _norm_stats(r, x, eps, centred=True, variance=conv.variance)
    xhat = em.mul(r, xc, rinv, unit=dtype.unit_roundoff if conv.norm_rounding == "before_weight" else None)
    return em.add(r, em.mul(r, xhat, w), b, unit=r.u_work)


def _before_weight_unit(conv: Conventions, dtype: Format) -> float | None:
    """Where a "before_weight" norm rounds in its backward: g·γ and the saved x̂ are products in the dtype."""
    return dtype.unit_roundoff if conv.norm_rounding == "before_weight" else None


def rms_norm_vjp(
    inputs: Inputs, params: Mapping[str, Any], conv: Conventions, dtype: Format, g64: F64
) -> dict[str, Tracked]:
    r = rounding("rms_norm", dtype, conv, grad=True)
    x, w, g = em.exact(inputs["x"]), _norm_weight(r, inputs["weight"], conv, dtype), em.exact(g64)
    eps = resolve_eps("rms_norm", params.get("eps"), dtype, conv)
    _, rinv = _norm_stats(r, x, eps, centred=False)
    xhat = em.mul(r, x, rinv)
    lowp = _before_weight_unit(conv, dtype)  # the weight multiply and its backward run in the dtype
    gw = em.mul(r, g, w, unit=lowp)
    c = em.mean(r, em.mul(r, gw, xhat))
    # two paths reach x (directly, and through mean(x²)); autodiff rounds each partial gradient where it
    # stores intermediates, after the factor r, and then sums them
    dx = em.sub(r, em.mul(r, rinv, gw), em.mul(r, rinv, em.mul(r, xhat, c)), unit=r.u_work)
    xhat_stored = em.mul(r, x, rinv, unit=lowp)
    return {"x": dx, "weight": em.sum_rows(r, em.mul(r, g, xhat_stored), unit=r.u_work)}


def layer_norm_vjp(
    inputs: Inputs, params: Mapping[str, Any], conv: Conventions, dtype: Format, g64: F64
) -> dict[str, Tracked]:
    r = rounding("layer_norm", dtype, conv, grad=True)
    x, w, g = em.exact(inputs["x"]), _norm_weight(r, inputs["weight"], conv, dtype), em.exact(g64)
    eps = resolve_eps("layer_norm", params.get("eps"), dtype, conv)
    xc, rinv = _norm_stats(r, x, eps, centred=True, variance=conv.variance)
    xhat = em.mul(r, xc, rinv)
    lowp = _before_weight_unit(conv, dtype)
    gw = em.mul(r, g, w, unit=lowp)
    # three paths reach x (directly, through μ and through σ²), each partial rounded after the factor r
    direct = em.mul(r, rinv, gw)
    via_mean = em.mul(r, rinv, em.mean(r, gw))
    via_var = em.mul(r, rinv, em.mul(r, xhat, em.mean(r, em.mul(r, gw, xhat))))
    return {
        "x": em.sub(r, em.sub(r, direct, via_mean), via_var, unit=r.u_work),
        "weight": em.sum_rows(r, em.mul(r, g, em.mul(r, xc, rinv, unit=lowp)), unit=r.u_work),
        "bias": em.sum_rows(r, g, unit=r.u_work),
    }


def _rope_trig(
    params: Mapping[str, Any], positions: np.ndarray, d: int, conv: Conventions, r: Rounding
) -> tuple[Tracked, Tracked, int]:
    rd = params.get("rotary_dim") or d
    base = params.get("base", 10000.0)
    angles = ref.rope_angles(positions, rd, base)
    u_angle = fmt(conv.rope_angle_dtype).unit_roundoff
    ang = Tracked(angles, rope_angle_ulps(rd, base) * u_angle * np.abs(angles), np.abs(angles))
    trig = Rounding(u_work=max(u_angle, r.u_work), u_mid=r.u_mid)
    return em.func(trig, ang, np.cos, lambda v: -np.sin(v)), em.func(trig, ang, np.sin, np.cos), rd


def _rotate(r: Rounding, x: Tracked, cos: Tracked, sin: Tracked, rd: int, layout: str, transpose: bool) -> Tracked:
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
    cos, sin, rd = _rope_trig(params, inputs["positions"], x.v.shape[-1], conv, r)
    return _rotate(r, x, cos, sin, rd, conv.rope_layout, transpose=False)


def rope_vjp(
    inputs: Inputs, params: Mapping[str, Any], conv: Conventions, dtype: Format, g64: F64
) -> dict[str, Tracked]:
    r = rounding("rope", dtype, conv, grad=True)
    g = em.exact(g64)
    cos, sin, rd = _rope_trig(params, inputs["positions"], g.v.shape[-1], conv, r)
    return {"x": _rotate(r, g, cos, sin, rd, conv.rope_layout, transpose=True)}


def _silu_parts(r: Rounding, a: Tracked) -> tuple[Tracked, Tracked]:
    """(σ(a), SiLU(a) = a·σ(a)), σ stored where intermediates are.

    σ is the elementary function (it may lose results below the smallest normal number); SiLU is the
    product, as a chain of framework ops computes it.
    """
    sigma = ref.swiglu.sigmoid

    def dsigma(v: F64) -> F64:
        return sigma(v) * (1.0 - sigma(v))

    sig = em.func(r, a, sigma, dsigma, spread=em.secant(sigma, dsigma))
    return sig, em.mul(r, a, sig)


def _silu_vjp(r: Rounding, a: Tracked, sig: Tracked, ds: Tracked) -> Tracked:
    """∂L/∂a = ds·σ + (ds·a)·(σ·(1 − σ)): the product rule on a·σ(a), as autodiff evaluates it.

    σ's absolute error reaches the result multiplied by about |ds|·|1 + a|, as it does in real kernels; a
    fused kernel computes the same terms with fewer roundings, well within this.
    """
    one = em.exact(np.ones_like(a.v))
    dsig = em.mul(r, sig, em.sub(r, one, sig))
    return em.add(r, em.mul(r, ds, sig), em.mul(r, em.mul(r, ds, a), dsig))


def swiglu_mlp(inputs: Inputs, params: Mapping[str, Any], conv: Conventions, dtype: Format) -> Tracked:
    r = rounding("swiglu_mlp", dtype, conv)
    x, w1, w3, w2 = (em.exact(inputs[k]) for k in ("x", "w1", "w3", "w2"))
    _, silu = _silu_parts(r, em.matmul(r, x, w1))
    h = em.mul(r, silu, em.matmul(r, x, w3))
    return em.matmul(r, h, w2, unit=r.u_work)


def swiglu_mlp_vjp(
    inputs: Inputs, params: Mapping[str, Any], conv: Conventions, dtype: Format, g64: F64
) -> dict[str, Tracked]:
    r = rounding("swiglu_mlp", dtype, conv, grad=True)
    shape = inputs["x"].shape
    x, g = em.rows(em.exact(inputs["x"])), em.rows(em.exact(g64))
    w1, w3, w2 = (em.exact(inputs[k]) for k in ("w1", "w3", "w2"))
    a, b = em.matmul(r, x, w1), em.matmul(r, x, w3)
    sig, silu = _silu_parts(r, a)
    h = em.mul(r, silu, b)
    dh = em.matmul(r, g, em.transpose(w2))
    da = _silu_vjp(r, a, sig, em.mul(r, dh, b))
    db = em.mul(r, dh, silu)
    dx = em.add(r, em.matmul(r, da, em.transpose(w1)), em.matmul(r, db, em.transpose(w3)), unit=r.u_work)
    xt = em.transpose(x)
    return {
        "x": Tracked(dx.v.reshape(shape), dx.e.reshape(shape), dx.m.reshape(shape)),
        "w1": em.matmul(r, xt, da, unit=r.u_work),
        "w3": em.matmul(r, xt, db, unit=r.u_work),
        "w2": em.matmul(r, em.transpose(h), g, unit=r.u_work),
    }


def _log_softmax_parts(r: Rounding, logits: F64) -> tuple[Tracked, Tracked, Tracked]:
    """(u − max, log Σ exp(u − max), max) as a max-shifted implementation computes them (each stored
    where the candidate keeps intermediates)."""
    mx = np.max(logits, axis=-1, keepdims=True)
    shifted = em.sub(r, em.exact(logits), em.exact(mx))
    log_s = em.func(r, em.total(r, em.exp(r, shifted)), np.log, lambda v: 1.0 / v)
    return shifted, log_s, em.exact(mx)


def _pick(t: Tracked, targets: np.ndarray) -> Tracked:
    idx = targets[..., None]
    return Tracked(*(np.take_along_axis(a, idx, axis=-1) for a in (t.v, t.e, t.m)))


def _squeeze(t: Tracked) -> Tracked:
    return Tracked(t.v[..., 0], t.e[..., 0], t.m[..., 0])


def _lse(r: Rounding, logits: F64) -> Tracked:
    """logsumexp = max + log Σ exp(u − max), as the candidate stores it."""
    _, log_s, mx = _log_softmax_parts(r, logits)
    return em.add(r, mx, log_s)


def token_loss(r: Rounding, logits: F64, targets: np.ndarray, unit: float | None = None) -> Tracked:
    """z − u_target (..., 1) in either order a candidate takes: through the logsumexp (max + log Σ, less the
    target logit) or through the log-softmax (log Σ less the shifted target logit u_t − max, itself rounded:
    ``jax.nn.log_softmax`` then the pick). ``unit``: where the difference is stored."""
    shifted, log_s, mx = _log_softmax_parts(r, logits)
    via_lse = em.sub(r, em.add(r, mx, log_s), _pick(em.exact(logits), targets), unit=unit)
    via_log_softmax = em.sub(r, log_s, _pick(shifted, targets), unit=unit)
    return em.widest(via_lse, via_log_softmax)


def log_softmax(r: Rounding, logits: F64) -> Tracked:
    """log p = u − z in either order: u less the logsumexp, or the shifted u − max less log Σ."""
    shifted, log_s, mx = _log_softmax_parts(r, logits)
    return em.widest(em.sub(r, em.exact(logits), em.add(r, mx, log_s)), em.sub(r, shifted, log_s))


def cross_entropy(inputs: Inputs, params: Mapping[str, Any], conv: Conventions, dtype: Format) -> Tracked:
    r = rounding("cross_entropy", dtype, conv)
    return _squeeze(token_loss(r, inputs["logits"], inputs["targets"], unit=r.u_work))


def cross_entropy_vjp(
    inputs: Inputs, params: Mapping[str, Any], conv: Conventions, dtype: Format, g64: F64
) -> dict[str, Tracked]:
    r = rounding("cross_entropy", dtype, conv, grad=True)
    log_p = log_softmax(r, inputs["logits"])  # the saved log-softmax
    p = em.exp(r, log_p, unit=r.u_work)
    onehot = np.zeros_like(p.v)
    np.put_along_axis(onehot, inputs["targets"][..., None], 1.0, axis=-1)
    q = em.sub(r, p, em.exact(onehot), unit=r.u_work)
    if "cross_entropy" in conv.grad_in_forward:  # ∂loss/∂u for a unit cotangent, kept in the input dtype
        q = em.store(r, q, dtype.unit_roundoff)
    return {"logits": em.mul(r, q, em.exact(np.asarray(g64)[..., None]), unit=r.u_work)}


def z_loss(inputs: Inputs, params: Mapping[str, Any], conv: Conventions, dtype: Format) -> Tracked:
    r = rounding("z_loss", dtype, conv)
    z = _lse(r, inputs["logits"])
    alpha = em.const(r, params.get("alpha", ref.losses.Z_LOSS_ALPHA))
    return _squeeze(em.mul(r, alpha, em.mul(r, z, z), unit=r.u_work))


def z_loss_vjp(
    inputs: Inputs, params: Mapping[str, Any], conv: Conventions, dtype: Format, g64: F64
) -> dict[str, Tracked]:
    r = rounding("z_loss", dtype, conv, grad=True)
    logits = inputs["logits"]
    z = _lse(r, logits)
    alpha = em.const(r, params.get("alpha", ref.losses.Z_LOSS_ALPHA))
    two_z = em.Tracked(2.0 * z.v, 2.0 * z.e, 2.0 * z.m)  # doubling is exact
    coef = em.mul(r, em.mul(r, em.exact(np.asarray(g64)[..., None]), alpha), two_z)  # (g·α)·2z, as autograd orders it
    p = em.exp(r, em.sub(r, em.exact(logits), z))  # u − z and its exp, each stored
    return {"logits": em.mul(r, coef, p, unit=r.u_work)}


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


FORWARD: dict[str, Any] = {
    "rms_norm": rms_norm,
    "layer_norm": layer_norm,
    "rope": rope,
    "swiglu_mlp": swiglu_mlp,
    "cross_entropy": cross_entropy,
    "z_loss": z_loss,
}
VJP: dict[str, Any] = {
    "rms_norm": rms_norm_vjp,
    "layer_norm": layer_norm_vjp,
    "rope": rope_vjp,
    "swiglu_mlp": swiglu_mlp_vjp,
    "cross_entropy": cross_entropy_vjp,
    "z_loss": z_loss_vjp,
}
# positions, context extension, loss reductions: their own modules, registered here
from conformance import budgets_losses, budgets_positions  # noqa: E402 - they build on the helpers above

FORWARD.update(budgets_positions.FORWARD, **budgets_losses.FORWARD)
VJP.update(budgets_positions.VJP, **budgets_losses.VJP)
# attention, the MLP family, blocks and the LM head (their formulas live in budget_attention, budget_mlp and
# budget_blocks, which use rounding() above)
from conformance import budget_attention, budget_blocks, budget_mlp  # noqa: E402

FORWARD.update(
    attention=budget_attention.attention,
    qk_norm_attention=budget_attention.qk_norm_attention,
    rope_attention=budget_attention.rope_attention,
    mlp=budget_mlp.mlp,
    glu_mlp=budget_mlp.glu_mlp,
    block=budget_blocks.block,
    lm_head=budget_blocks.lm_head,
)
VJP.update(
    attention=budget_attention.attention_vjp,
    qk_norm_attention=budget_attention.qk_norm_attention_vjp,
    rope_attention=budget_attention.rope_attention_vjp,
    mlp=budget_mlp.mlp_vjp,
    glu_mlp=budget_mlp.glu_mlp_vjp,
    block=budget_blocks.block_vjp,
    lm_head=budget_blocks.lm_head_vjp,
)
FORWARD = {op: _with_result(op, fn, grad=False) for op, fn in FORWARD.items()}
VJP = {op: _with_result(op, fn, grad=True) for op, fn in VJP.items()}

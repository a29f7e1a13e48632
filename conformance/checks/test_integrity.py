"""Integrity: an answer computed from the inputs, every call — not kept, cached, finished later or left to chance.

A check of agreement passes a candidate whose answer is right when it is compared; these checks ask what needs
more than one call to see (the rules every call is held to are in conformance/harness/integrity.py):

* two identical calls return identical bits, unless the adapter declares the operation ``nondeterministic`` (then
  the agreement checks hold each answer to the oracle's budget);
* an answer is unchanged by the next call and after a pause (an output array the candidate keeps and rewrites,
  or a background thread that finishes the work after the call returned);
* new values of the same shapes give the new answer, not the last one (an answer cached by shape or by the
  address of a buffer the allocator handed out again).

One check per operation, forward and backward. The values are the agreement checks' to judge (a known
disagreement fails those, not these), but for the answer to new values: it must not be the earlier answer bit
for bit where the oracle's two answers lie further apart than their budgets together. What these enforce is a rule
of the contract rather than a seed statement: each seed formula, computed from the inputs of the call
(docs/adapter-contract.md, "Arrays"; docs/gating.md, "Answers that must be computed").
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from transformer_conformance.adapters.contract import CHOICES, OPS, Adapter
from transformer_conformance.conformance.budgets import registry as budgets
from transformer_conformance.conformance.budgets.error_model import allowed_error
from transformer_conformance.conformance.harness.compare import (
    CheckFailure,
    Record,
    _validate,
    call_op,
    describe_call,
)
from transformer_conformance.conformance.harness.marks import check, declared
from transformer_conformance.conformance.strategies import blocks as sb
from transformer_conformance.conformance.strategies import common as cst
from transformer_conformance.conformance.strategies import linear_losses as lls
from transformer_conformance.conformance.strategies import local_attention as sl
from transformer_conformance.conformance.strategies import losses as lst
from transformer_conformance.conformance.strategies import mla as smla
from transformer_conformance.conformance.strategies import moe as smoe
from transformer_conformance.conformance.strategies import mrope as smr
from transformer_conformance.conformance.strategies import positions as pst
from transformer_conformance.conformance.strategies.common import Case
from transformer_conformance.reference import oracle
from transformer_conformance.reference.formats import Format

CITE = (
    "seed-000, seed-002, seed-004: each formula, computed from the inputs of the call, every call "
    "(the contract's rule: docs/adapter-contract.md §Arrays)"
)
#: Seconds between an answer and its re-reading: a thread finishing the work late has had the time to. Paused once
#: per check (its first example): lateness is the candidate's way of delivering, not a property of the values, and
#: every call is also settled at once (the threads it left running waited for: harness/integrity.py)
PAUSE = 0.05
#: Examples per operation and dtype: each is three calls of the candidate, and the rules are about the calls, not
#: the values (the agreement checks draw the values).
EXAMPLES = 4

Cases = Callable[[Adapter, Format], st.SearchStrategy[Case]]


def _router(adapter: Adapter, dtype: Format) -> st.SearchStrategy[Case]:
    picks = {key: declared(adapter, "moe_router", key) for key in CHOICES["moe_router"]}
    return smoe.router_case(dtype, picks["score"], picks["norm"], picks["selection"], picks["routed_scaling"])


#: Each operation checked, and a strategy of its ordinary cases.
CASES: dict[str, Cases] = {
    "rms_norm": lambda a, d: cst.norm_case(d, with_bias=False),
    "layer_norm": lambda a, d: cst.norm_case(d, with_bias=True),
    "rope": lambda a, d: cst.rope_case(d),
    "swiglu_mlp": lambda a, d: cst.swiglu_case(d),
    "cross_entropy": lambda a, d: cst.logits_case(d, with_targets=True),
    "z_loss": lambda a, d: cst.logits_case(d, with_targets=False),
    "cross_entropy_mean": lambda a, d: lst.ignored_case(d),
    "softcap_z_loss": lambda a, d: lst.softcap_case(d),
    "attention": lambda a, d: sb.attention_case(d, softcaps=declared(a, "attention", "softcap")),
    "sliding_window_attention": lambda a, d: sl.sliding_window_case(
        d, declared(a, "sliding_window_attention", "softcap")
    ),
    "chunked_attention": lambda a, d: sl.chunked_case(d),
    "sink_attention": lambda a, d: sl.sink_case(d),
    "mla_attention": lambda a, d: smla.mla_case(d, declared(a, "mla_attention", "form")),
    "moe_router": _router,
    "moe_aux_loss": lambda a, d: smoe.aux_loss_case(d),
    "moe_z_loss": lambda a, d: smoe.z_loss_case(d),
    "mrope": lambda a, d: smr.mrope_case(d, declared(a, "mrope", "streams")),
    "attention_temperature": lambda a, d: smr.temperature_case(d),
    "learned_positions": lambda a, d: pst.learned_case(d),
    "alibi": lambda a, d: pst.alibi_case(d),
    "mlp": lambda a, d: sb.mlp_case(d, gated=False, activations=declared(a, "mlp", "activation")),
    "glu_mlp": lambda a, d: sb.mlp_case(d, gated=True, activations=declared(a, "glu_mlp", "activation")),
    "block": lambda a, d: sb.block_case(d, placements=declared(a, "block", "placement")),
    "lm_head": lambda a, d: sb.lm_head_case(d),
    "linear_cross_entropy": lambda a, d: lls.linear_ce_case(d, declared(a, "linear_cross_entropy", "reduction")),
    "z_loss_mean": lambda a, d: lls.z_loss_mean_case(d),
}


def _shuffled(case: Case, seed: int, op: str) -> Case:
    """The case with the values of each floating input in a new order: the same shapes, dtypes and magnitudes,
    other values (integer inputs — positions, targets — and parameters as they were). A router's case keeps each
    token's logits whole (the tokens in a new order), and the load-balancing loss's each token's values (in a new
    order among the experts): their strategies keep the top-k margins of a token, which a free shuffle breaks."""
    rng = np.random.default_rng(seed)

    def new(name: str, v: np.ndarray) -> np.ndarray:
        if v.dtype.kind in "iu":
            return v
        if op == "moe_router":
            return v[rng.permutation(v.shape[0])] if name == "logits" else v
        if op == "moe_aux_loss":
            return rng.permuted(v, axis=-1)
        return rng.permutation(v.reshape(-1)).reshape(v.shape)

    return Case({k: new(k, v) for k, v in case.inputs.items()}, dict(case.params), dict(case.about))


def _first_difference(a: np.ndarray, b: np.ndarray) -> tuple[int, ...]:
    differ = ~((a == b) | (np.isnan(a) & np.isnan(b)))
    return tuple(int(i) for i in np.argwhere(differ)[0]) if a.ndim else ()


Answers = dict[str, np.ndarray]


def _unchanged(name: str, now: Answers, kept: Answers, after: str) -> None:
    for what, was in kept.items():
        if not np.array_equal(now[what], was, equal_nan=True):
            i = _first_difference(now[what], was)
            raise CheckFailure(
                f"{what} changed after the call returned, {after}: got {now[what][i]} at {i}, should be {was[i]} "
                f"(what it returned): the candidate kept the array, or went on writing it [{name}]"
            )


def _identical(name: str, first: Answers, again: Answers) -> None:
    for what, a in first.items():
        b = again[what]
        if not np.array_equal(a, b, equal_nan=True):
            i = _first_difference(a, b)
            raise CheckFailure(
                f"{what}: two identical calls gave different bits: got {b[i]} at {i}, should be {a[i]} (the "
                f"first call's); declare the operation in nondeterministic if its answers vary by design [{name}]"
            )


def _output_shape(adapter: Adapter, op: str, case: Case, dtype: Format) -> tuple[int, ...]:
    return tuple(oracle.forward(op, case.values(), case.params, adapter.conventions, dtype).shape)


def _call(adapter: Adapter, op: str, case: Case, cot: np.ndarray | None, dtype: Format) -> Answers:
    """One call through the harness (held to its rules of delivery), its arrays of the shapes and dtype the
    operation defines. Their values are the agreement checks' to judge: a known disagreement fails those, not
    these."""
    call = describe_call(adapter, op, case.inputs, case.params, "vjp" if cot is not None else "")
    if cot is None:
        out = call_op(adapter, op, case.inputs, case.params, call)
        return {"output": _validate(out, _output_shape(adapter, op, case, dtype), dtype, "output", call)}
    grads = call_op(adapter, op, case.inputs, case.params, call, cot)
    if not isinstance(grads, Mapping):
        raise CheckFailure(f"vjp: got a {type(grads).__name__}, should be a mapping of name to gradient [{call}]")
    return {
        f"∂L/∂{k}": _validate(grads.get(k), np.shape(case.inputs[k]), dtype, f"∂L/∂{k}", call) for k in OPS[op].inputs
    }


def _exact(adapter: Adapter, op: str, case: Case, cot: np.ndarray | None, dtype: Format) -> tuple[Answers, Answers]:
    """The oracle's answers for the case, and how far from each a correct candidate's may lie."""
    values, conv = case.values(), adapter.conventions
    if cot is None:
        want = {"output": oracle.forward(op, values, case.params, conv, dtype)}
        budget = {"output": budgets.FORWARD[op](values, case.params, conv, dtype)}
    else:
        g = cot.astype(np.float64)
        grads = oracle.vjp(op, values, case.params, conv, dtype, g)
        bud = budgets.VJP[op](values, case.params, conv, dtype, g)
        want = {f"∂L/∂{k}": grads[k] for k in OPS[op].inputs}
        budget = {f"∂L/∂{k}": bud[k] for k in OPS[op].inputs}
    allowed = {w: np.broadcast_to(allowed_error(b, dtype), np.shape(want[w])) for w, b in budget.items()}
    return {w: np.asarray(v, np.float64) for w, v in want.items()}, allowed


def _not_cached(
    adapter: Adapter,
    op: str,
    case: Case,
    other: Case,
    cot: np.ndarray | None,
    dtype: Format,
    earlier: Answers,
    now: Answers,
) -> None:
    """The answer for new values of the same shapes is not the earlier answer, bit for bit, where no correct
    candidate's could be: where the earlier answer held to its budget and the oracle's two answers lie further
    apart than their two budgets together. An answer wrong for both values (a gradient left at zero) is a
    disagreement the agreement checks report, not a cache; so is zero everywhere, which a computation that
    underflows or overflows to zero returns whatever its values (jax's float16 norm backward does)."""
    want, allowed = _exact(adapter, op, case, cot, dtype)
    want_new, allowed_new = _exact(adapter, op, other, cot, dtype)
    call = describe_call(adapter, op, other.inputs, other.params, "vjp" if cot is not None else "")
    for what, was in earlier.items():
        if not np.array_equal(now[what], was, equal_nan=True) or not np.any(now[what]):
            continue
        # a finite answer only: NaN for NaN is a disagreement the agreement checks report, not a cache
        finite = np.isfinite(np.asarray(now[what], np.float64))
        held = np.abs(np.asarray(was, np.float64) - want[what]) <= allowed[what]
        apart = finite & held & (np.abs(want_new[what] - want[what]) > allowed[what] + allowed_new[what])
        if apart.any():
            i = tuple(int(j) for j in np.argwhere(apart)[0]) if apart.ndim else ()
            raise CheckFailure(
                f"{what}: got {now[what][i]} at {i} for new values of the same shapes, should be "
                f"{want_new[what][i]:.6g} ± {allowed_new[what][i]:.3g}: the answer is the previous call's, bit for "
                f"bit (for those values {want[what][i]:.6g} ± {allowed[what][i]:.3g}): cached by shape or by a "
                f"buffer's address, not computed from the values [{call}]"
            )


def _integrity(adapter: Adapter, op: str, dtype: Format, data: st.DataObject, grad: bool, pause: bool) -> None:
    case = data.draw(CASES[op](adapter, dtype), label="case")
    other = _shuffled(case, data.draw(cst.seeds, label="shuffle seed"), op)
    cot = data.draw(cst.cotangent(dtype, _output_shape(adapter, op, case, dtype)), label="cotangent") if grad else None
    name = describe_call(adapter, op, case.inputs, case.params, kind="vjp" if grad else "")
    nondeterministic = (f"{op}.vjp" if grad else op) in adapter.conventions.nondeterministic

    first = _call(adapter, op, case, cot, dtype)
    kept = _copies(first)
    again = _call(adapter, op, case, cot, dtype)
    _unchanged(name, first, kept, "during the next, identical call")
    if not nondeterministic:  # declared, each answer is the agreement checks' to hold to the oracle's budget
        _identical(name, kept, again)
    kept_again = _copies(again)
    _not_cached(adapter, op, case, other, cot, dtype, kept, _call(adapter, op, other, cot, dtype))
    if not pause:
        _unchanged(name, first, kept, "two calls later")
        _unchanged(name, again, kept_again, "a call later")
        return
    time.sleep(PAUSE)
    _unchanged(name, first, kept, f"{PAUSE * 1000:.0f} ms and two calls later")
    _unchanged(name, again, kept_again, f"{PAUSE * 1000:.0f} ms and a call later")


def _copies(a: Answers) -> Answers:
    return {w: v.copy() for w, v in a.items()}


def _make(op: str, grad: bool) -> Callable[..., None]:
    what = "VJP" if grad else "forward"

    @check(
        f"integrity/{op}{'-gradient' if grad else ''}",
        "integrity",
        f"{what}: identical calls give identical bits (unless declared nondeterministic), an answer is unchanged by "
        "the next call and a pause, new values of the same shapes give their own answer",
        CITE,
        op=op,
        grad=grad,
        choices=CHOICES.get(op),
        autocast=False,
    )
    @settings(max_examples=EXAMPLES)
    @given(data=st.data())
    def test(adapter: Adapter, dtype: Format, record: Record, data: st.DataObject) -> None:
        record.examples += 1
        _integrity(adapter, op, dtype, data, grad, pause=record.examples == 1)

    test.__name__ = test.__qualname__ = f"test_{op}{'_gradient' if grad else ''}"
    return test


for _op in CASES:
    for _grad in (False, True):
        _test = _make(_op, _grad)
        globals()[_test.__name__] = _test
del _op, _grad, _test

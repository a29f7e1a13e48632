"""What every check does with a candidate: call it safely, validate what came back, compare in ulps.

Failure messages read "got X, should be Y [the call]". Anything the candidate does wrong — raising,
returning NaN, the wrong shape or dtype — is a failed check with the example attached, never a crash
of the run.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from hypothesis import target

from transformer_conformance.adapters.contract import OPS, Adapter
from transformer_conformance.conformance.budgets import registry as budgets
from transformer_conformance.conformance.budgets.error_model import Tracked, allowed_error
from transformer_conformance.conformance.harness import autocast, headroom, integrity, lint, reach, repro, watchdog
from transformer_conformance.conformance.harness.series import Along, Series
from transformer_conformance.conformance.strategies import plan
from transformer_conformance.conformance.strategies.common import Case
from transformer_conformance.reference import oracle
from transformer_conformance.reference.formats import Format, dtype_name


class CheckFailure(AssertionError):
    """A candidate's answer is not what the behaviour requires. ``share``: for an error over its budget, how
    many times the budget it is (the severity of the example)."""

    share: float | None = None


@dataclass
class Record:
    """What a check observed across all its examples; written to the report."""

    check_id: str
    behaviour: str
    property: str
    cites: str
    examples: int = 0
    max_ulp: float | None = None
    budget_used: float | None = None
    #: the largest share of an element's budget used beyond the half ulp of the output's own final rounding:
    #: 0 for a correctly rounded result, whatever its budget (the report's colours and shares)
    margin: float | None = None
    worst: str = ""
    #: filled while the check runs (``extra["repro"]``: the failing call, conformance/harness/repro.py); not an
    #: init field, so Hypothesis's printed counterexample leaves it out
    extra: dict[str, Any] = field(default_factory=dict, init=False)
    #: examples the check has started (Hypothesis's generation, targeting and shrinking all count)
    calls: int = field(default=0, init=False)
    #: the 1-based index of the example that first failed: how many examples it took to find a failure
    first_failure: int | None = field(default=None, init=False)
    #: the worst error per bucket of an input coordinate, by output (conformance/harness/series.py)
    series: dict[str, Series] = field(default_factory=dict, init=False)

    def __repr__(self) -> str:
        return f"Record({self.check_id!r})"

    def observe(self, max_ulp: float, budget_used: float, where: str, margin: float | None = None) -> None:
        if self.budget_used is None or budget_used > self.budget_used:
            self.budget_used, self.worst = budget_used, where
        if self.max_ulp is None or max_ulp > self.max_ulp:
            self.max_ulp = max_ulp
        if margin is not None and (self.margin is None or margin > self.margin):
            self.margin = margin

    def observe_along(self, along: Along, what: str, ulps: np.ndarray, budget_ulps: np.ndarray) -> None:
        s = self.series.get(what)
        if s is None:
            s = self.series[what] = Series(along.coordinate, what)
        s.add(along.keys, ulps, budget_ulps)


def describe_call(
    adapter: Adapter, op: str, inputs: Mapping[str, np.ndarray], params: Mapping[str, Any], kind: str = ""
) -> str:
    args = [f"{k}: {dtype_name(v)}{list(v.shape)}" for k, v in inputs.items()]
    args += [f"{k}={v!r}" for k, v in params.items()]
    return f"{adapter.name}.{op}{'.' + kind if kind else ''}({', '.join(args)})"


#: Seconds one call of a candidate may take before it is stopped as hung (``--example-timeout``).
CALL_TIMEOUT = 60.0
_HUNG: dict[str, str] = {}  # "adapter.op" -> the call that hung: later calls fail at once instead of waiting


_CALLED: set[str] = set()  # "adapter.op" already called once: its warm-up is over


def _invoke(call: str, fn: Any, *args: Any) -> Any:
    """Call the candidate; any exception, or a call judged hung (harness/watchdog.py: no progress for
    CALL_TIMEOUT seconds, or that much CPU time used — ten times as much on an operation's first call), is a
    verdict."""
    key = call.split("(", 1)[0]
    if key in _HUNG:
        raise CheckFailure(f"hung earlier in this run [{_HUNG[key]}]")
    # a size regime's case is a first call too: kernels dispatch (and compile) other code at that size, and
    # an interpreted one (Triton's on CPU) takes minutes over 32,768 rows
    first = key not in _CALLED or bool(_TARGET_SUFFIX)
    _CALLED.add(key)
    if len(args) >= 3 and isinstance(args[0], str):
        # what the examples reach (harness/reach.py): not part of the verdict
        reach.note(args[0], args[1], args[2], planned=plan.active(), planned_values=plan.values_active())
    try:
        with watchdog.watch(CALL_TIMEOUT, first_call=first), autocast.context(fn):
            return headroom.call(fn, *args)  # room on the frame stack, whatever the harness's depth
    except CheckFailure:
        raise
    except watchdog.Hung as exc:
        _HUNG[key] = call
        raise CheckFailure(f"hung: {exc.reason} (--example-timeout {CALL_TIMEOUT:g} s) [{call}]") from None
    except Exception as exc:  # noqa: BLE001 - a candidate's exception is a verdict
        first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        raise CheckFailure(f"raised {type(exc).__name__}: {first_line} [{call}]") from None


def _validate(out: Any, shape: tuple[int, ...], dtype: Format, what: str, call: str) -> np.ndarray:
    if not isinstance(out, np.ndarray):
        raise CheckFailure(f"{what}: got a {type(out).__name__}, should be a numpy.ndarray [{call}]")
    if out.shape != shape:
        raise CheckFailure(f"{what}: got shape {list(out.shape)}, should be {list(shape)} [{call}]")
    if out.dtype != dtype.np_dtype:
        raise CheckFailure(f"{what}: got dtype {dtype_name(out)}, should be {dtype.name} [{call}]")
    return out


def _scratch(a: Any, *operands: Any) -> np.ndarray | None:
    """``a``, a temporary of :func:`compare`, as the output of a ufunc over it and ``operands`` where it holds
    the result (not a 0-d result, which NumPy hands back as a scalar); None otherwise (a fresh array)."""
    if not isinstance(a, np.ndarray) or a.ndim == 0 or a.dtype != np.float64:
        return None
    return a if np.broadcast_shapes(a.shape, *(np.shape(o) for o in operands)) == a.shape else None


def compare(
    got: np.ndarray,
    expected: np.ndarray,
    budget: Tracked,
    dtype: Format,
    what: str,
    call: str,
    record: Record,
    along: Along | None = None,
) -> None:
    """Fail unless every element is within its error budget of the oracle; record the worst ulp error (and,
    with ``along``, the worst per bucket of that coordinate)."""
    g = got.astype(np.float64)
    exp = np.asarray(expected, dtype=np.float64)
    allowed = allowed_error(budget, dtype)
    # a correct candidate's value lies within the budget of the exact one: where that interval reaches past
    # the overflow threshold on one side, ±inf (or ±max) of that sign is a correct rounding of it. The side
    # counts, not the exact value's sign: a budget wider than the value (a cancelling row) admits either
    threshold = dtype.max_finite + 0.5 * float(dtype.ulp(dtype.max_finite))
    # (the masks below are built only where some interval reaches that far, or the candidate is not finite:
    # a size regime's arrays are millions of elements)
    reach = np.abs(exp)
    reach = np.add(reach, allowed, out=_scratch(reach, allowed))
    overflows = bool((reach >= threshold).any())
    up = exp + allowed >= threshold if overflows else np.False_
    down = exp - allowed <= -threshold if overflows else np.False_
    if overflows:
        # where the whole interval lies past the threshold, the answer must be the infinity of that side
        must = np.where(exp - allowed >= threshold, np.inf, np.where(exp + allowed <= -threshold, -np.inf, 0.0))
        wrong = (must != 0.0) & (g != must)
        if wrong.any():
            i = _index(wrong)
            raise CheckFailure(
                f"{what}: got {g[i]} at {i}, should be {must[i]} (the exact value {exp[i]:.6g} ± {allowed[i]:.3g} "
                f"overflows {dtype.name}) [{call}]"
            )
    if not np.isfinite(g).all():
        bad_nonfinite = np.isnan(g) | ((g == np.inf) & ~up) | ((g == -np.inf) & ~down)
        if bad_nonfinite.any():
            i = _index(bad_nonfinite)
            never = (
                f" (all bits set: the poison the harness fills freed memory with — memory the candidate returned "
                f"without writing it, {int(np.isnan(g).sum())} of {g.size} elements NaN)"
                if integrity.poisoned(got, i)
                else ""
            )
            raise CheckFailure(f"{what}: got {g[i]} at {i}, should be {exp[i]:.6g} ± {allowed[i]:.3g}{never} [{call}]")
    err = g - exp
    err = np.abs(err, out=_scratch(err))
    if overflows:
        near_max = ((g >= dtype.max_finite) & up) | ((g <= -dtype.max_finite) & down)
        err = np.where(near_max, 0.0, err)
    # ulps are counted at the element's condition scale: the larger of |value| and the magnitude of the
    # terms that make it up (equal to |value| where nothing cancels, as in a norm's forward)
    # (each temporary below is written into where it can: a size regime's arrays are millions of elements)
    scale = np.abs(exp, out=_scratch(reach))
    ulp = dtype.ulp(np.maximum(scale, budget.m, out=_scratch(scale, budget.m)))
    used = err / allowed
    if used.size == 0:
        return
    most = float(used.max())
    worst = _index(used == most)
    budget_ulps = allowed / ulp if along is not None else None
    ulp_worst = float(ulp[worst])
    ulps = np.divide(err, ulp, out=_scratch(ulp))
    where = f"{what} at {worst}: {ulps[worst]:.3g} ulp of {dtype.name}, budget {allowed[worst] / ulp_worst:.3g} ulp"
    # beyond the final rounding: half an ulp of the output at the exact value is what any correctly rounded
    # answer may be off, however tight the budget (only the elements past it can use any of the room above it)
    half = dtype.ulp(exp)
    half = np.multiply(half, 0.5, out=_scratch(half))
    over = err > half
    beyond = 0.0
    if over.any():
        e_over, h_over, room = err[over], half[over], allowed[over] - half[over]
        fits = room > 0
        beyond = float(np.max(np.where(fits, (e_over - h_over) / np.where(fits, room, 1.0), used[over])))
    record.observe(float(ulps.max()), most, where, beyond)
    if along is not None and budget_ulps is not None:
        record.observe_along(along, what, ulps, budget_ulps)
    target(most, label=f"{what} error / budget{_TARGET_SUFFIX[-1] if _TARGET_SUFFIX else ''}")
    if most > 1.0:
        failure = CheckFailure(
            f"{what}: got {g[worst]:.8g} at {worst}, should be {exp[worst]:.8g} ± {allowed[worst]:.3g} "
            f"(error {ulps[worst]:.3g} ulp of {dtype.name}, budget {allowed[worst] / ulp_worst:.3g} ulp) [{call}]"
        )
        failure.share = most
        raise failure


#: a suffix for Hypothesis's target labels while one example judges several cases (the size regimes), each a
#: label of its own: Hypothesis takes one observation per label and example
_TARGET_SUFFIX: list[str] = []


@contextmanager
def several_cases(name: str) -> Iterator[None]:
    """Judge one of several cases of the same example: its target labels carry ``name``."""
    _TARGET_SUFFIX.append(f" ({name})")
    try:
        yield
    finally:
        _TARGET_SUFFIX.pop()


def _index(mask: np.ndarray) -> tuple[int, ...]:
    return tuple(int(i) for i in np.argwhere(mask)[0])


def call_op(
    adapter: Adapter,
    op: str,
    inputs: Mapping[str, np.ndarray],
    params: Mapping[str, Any],
    call: str,
    *cotangent: np.ndarray,
) -> Any:
    """Call ``forward`` (or ``vjp`` when a cotangent is given) on copies of the inputs, and fail if the
    candidate wrote into them without declaring the operation in-place. The cotangent is handed over as it
    is, not copied: a backward that writes into the gradient it receives (as fused kernels may, to save a
    buffer) fails unless the adapter declares ``op.vjp`` in-place; either way the caller's array holds the
    cotangent it passed again afterwards."""
    copies = {k: v.copy() for k, v in inputs.items()}
    key = f"{adapter.name}.{op}{'.vjp' if cotangent else ''}"
    integrity.poison(copies)
    before = integrity.threads()
    built = compiles(adapter)
    if not cotangent:
        out = _invoke(call, adapter.forward, op, copies, params)
    else:
        (cot,) = cotangent
        kept = cot.copy()
        try:
            out = _invoke(call, adapter.vjp, op, copies, params, cot)
        except CheckFailure:
            _restore(cot, kept)
            raise
        # the gradients it returned may be that very buffer (an in-place backward returns ∂L/∂x in ∂L/∂y's
        # memory, a pass-through gradient may be the cotangent itself): keep them as returned, in memory of
        # their own, then give the caller back the cotangent it drew
        if isinstance(out, Mapping):
            out = {k: _own(v, cot) for k, v in out.items()}
        if not np.array_equal(cot, kept, equal_nan=True):
            wrote = cot.copy()
            _restore(cot, kept)
            if f"{op}.vjp" not in adapter.conventions.in_place_ops:
                _unwritten(wrote, kept, op, call)
    if built is not None:
        reach.note_compiles(op, reach.dtype_of(inputs), (compiles(adapter) or built) - built)
    if op not in adapter.conventions.in_place_ops:
        for k, v in copies.items():
            if not np.array_equal(v, inputs[k], equal_nan=True):
                raise CheckFailure(f"modified its input {k} without declaring {op} in-place [{call}]")
    _hold_to_the_rules(adapter, op, key, call, out, copies, before, grad=bool(cotangent))
    return out


def compiles(adapter: Adapter) -> int | None:
    """The programs the candidate has built so far, where its adapter counts them (the optional ``compiles()``
    hook, docs/adapter-contract.md); None where it does not, or the hook fails (never a verdict)."""
    hook = getattr(adapter, "compiles", None)
    if not callable(hook):
        return None
    try:
        n = hook()
    except Exception:  # noqa: BLE001 - a count for the report, not part of the verdict
        return None
    return int(n) if isinstance(n, int | np.integer) else None


def _hold_to_the_rules(
    adapter: Adapter,
    op: str,
    key: str,
    call: str,
    out: Any,
    copies: Mapping[str, np.ndarray],
    before: set[Any],
    grad: bool,
) -> None:
    """The answer is plain, fresh and settled (harness/integrity.py): a candidate that passes without computing
    fails here, whatever its values."""
    try:
        for what, a in integrity.arrays(out):
            integrity.plain(a, what, call)
        integrity.settle(out, before, call)
        integrity.check_kept(key, call)
        declared = adapter.conventions.in_place_ops
        in_place = op in declared or (grad and f"{op}.vjp" in declared)
        integrity.check_aliasing(key, call, out, copies, in_place)
    except integrity.Violation as v:
        raise CheckFailure(str(v)) from None
    finally:  # a failed call's answer is the one the next call is held against, not an older one
        integrity.remember(key, call, out)


def _own(value: Any, buffer: np.ndarray) -> Any:
    """``value``, copied if it is an array sharing memory with ``buffer``."""
    return value.copy() if isinstance(value, np.ndarray) and np.shares_memory(value, buffer) else value


def _restore(buffer: np.ndarray, kept: np.ndarray) -> None:
    if not np.array_equal(buffer, kept, equal_nan=True):
        np.copyto(buffer, kept)


def _unwritten(wrote: np.ndarray, kept: np.ndarray, op: str, call: str) -> None:
    """Fail where the cotangent after the candidate's backward (``wrote``) differs from the one it was
    handed (``kept``)."""
    now, before = wrote.astype(np.float64), kept.astype(np.float64)
    changed = (now != before) & ~(np.isnan(now) & np.isnan(before))
    if changed.any():
        i = _index(changed)
        got, want = now[i], before[i]
        raise CheckFailure(
            f"wrote into its cotangent without declaring {op}.vjp in-place: got {got:.8g} at {i}, should be "
            f"{want:.8g} (the gradient it was handed, which the caller still needs), {int(changed.sum())} of "
            f"{changed.size} elements changed [{call}]"
        )


def check_forward(
    adapter: Adapter, op: str, case: Case, dtype: Format, record: Record, along: Along | None = None
) -> np.ndarray:
    """The candidate's forward output agrees with the oracle within its declared rounding budget. ``along``:
    also keep the worst error per bucket of that coordinate (the report's precision plots)."""
    call = describe_call(adapter, op, case.inputs, case.params)
    values = case.values()
    expected = oracle.forward(op, values, case.params, adapter.conventions, dtype)
    got: Any = None
    try:
        got = call_op(adapter, op, case.inputs, case.params, call)
        got = _validate(got, expected.shape, dtype, f"{op} output", call)
        record.examples += 1
        budget = budgets.FORWARD[op](values, case.params, adapter.conventions, dtype)
        compare(got, expected, budget, dtype, f"{op} output", call, record, along)
        lint.observe(
            record.extra,
            adapter.conventions,
            op,
            False,
            lambda conv: {"y": budgets.FORWARD[op](values, case.params, conv, dtype)},
            {"y": got},
            {"y": expected},
            dtype,
            {"y": budget},
        )
    except CheckFailure as failure:
        calls = [repro.call("forward", case.inputs, case.params, expected, got)]
        repro.store(record, op, autocast.label(dtype), calls, failure=failure)
        raise
    return got


def check_vjp(
    adapter: Adapter,
    op: str,
    case: Case,
    cot: np.ndarray,
    dtype: Format,
    record: Record,
    along: Mapping[str, Along] | None = None,
) -> dict[str, np.ndarray]:
    """Every gradient the candidate returns agrees with the oracle's VJP within its budget; returns them.
    ``along``: for the gradients it names, also keep the worst error per bucket of that coordinate."""
    call = describe_call(adapter, op, case.inputs, case.params, kind="vjp")
    values = case.values()
    g = cot.astype(np.float64)
    expected = oracle.vjp(op, values, case.params, adapter.conventions, dtype, g)
    got: Any = None
    try:
        got = call_op(adapter, op, case.inputs, case.params, call, cot)
        if not isinstance(got, Mapping):
            raise CheckFailure(
                f"vjp: got a {type(got).__name__}, should be a mapping of input name to gradient [{call}]"
            )
        missing = [k for k in OPS[op].inputs if k not in got]
        if missing:
            raise CheckFailure(f"vjp: got gradients for {sorted(got)}, should include {missing} [{call}]")
        record.examples += 1
        budget = budgets.VJP[op](values, case.params, adapter.conventions, dtype, g)
        grads = {}
        for name in OPS[op].inputs:
            grad = grads[name] = _validate(got[name], expected[name].shape, dtype, f"d{name}", call)
            compare(grad, expected[name], budget[name], dtype, f"∂L/∂{name}", call, record, (along or {}).get(name))
        lint.observe(
            record.extra,
            adapter.conventions,
            op,
            True,
            lambda conv: budgets.VJP[op](values, case.params, conv, dtype, g),
            grads,
            {k: expected[k] for k in grads},
            dtype,
            budget,
        )
    except CheckFailure as failure:
        calls = [repro.call("vjp", case.inputs, case.params, expected, got, cot)]
        repro.store(record, op, autocast.label(dtype), calls, failure=failure)
        raise
    return grads

"""What the examples of a run reached: per operation, the parameter values a candidate was given and the regimes
(conformance/harness/regimes.py) its inputs were in, counted at every call of the candidate.

``note`` runs in ``harness/compare.py``'s guarded call (every call of a candidate goes through it); ``drain`` hands
what one check noted to the plugin, which carries it to the controller with the check's result and merges it per
adapter into report.json's ``reached`` (docs/report.md). Nothing here judges the candidate.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from transformer_conformance.adapters.contract import Capability
from transformer_conformance.conformance.harness import regimes
from transformer_conformance.reference.formats import TESTED_DTYPES, dtype_name, fmt

#: At most this many distinct values of one parameter are kept (with the count of the others)
MAX_VALUES = 16

# op -> {"calls": n, "params": {name: {"values": [...], "more": n, "min": x, "max": y}}, "regimes": {name: {dtype: n}}}
_NOTED: dict[str, dict[str, Any]] = {}


def _flat(params: Mapping[str, Any]) -> dict[str, Any]:
    """Parameters as recorded: ``scaling`` by its type (``none``), its entries as ``scaling.NAME``; lists by length
    (:func:`_listed`)."""
    out: dict[str, Any] = {}
    for k, v in params.items():
        if k == "scaling":
            out[k] = None if v is None else v.get("type")
            for sub in regimes.SCALING_KEYS:
                if isinstance(v, Mapping) and sub in v:
                    out[f"scaling.{sub}"] = v[sub]
        else:
            out[k] = v
    return {k: _listed(v) if isinstance(v, list | tuple) else v for k, v in out.items()}


def _listed(v: list[Any] | tuple[Any, ...]) -> str:
    """A list parameter as recorded: three integers or fewer by value (M-RoPE's sections), longer ones by length."""
    if len(v) <= 3 and all(isinstance(x, int | np.integer) for x in v):
        return "(" + ", ".join(str(int(x)) for x in v) + ")"
    return f"list of {len(v)}"


def _json_value(v: Any) -> Any:
    if isinstance(v, np.generic):
        return v.item()
    return v if v is None or isinstance(v, bool | int | float | str) else repr(v)


def dtype_of(inputs: Mapping[str, np.ndarray]) -> str | None:
    for a in inputs.values():
        if isinstance(a, np.ndarray) and a.dtype.kind not in "iub":
            name = dtype_name(a)
            return name if name in TESTED_DTYPES else None
    return None


def _entry(op: str) -> dict[str, Any]:
    return _NOTED.setdefault(op, {"calls": 0, "params": {}, "regimes": {}, "shapes": {}, "planned": 0, "compiles": {}})


def signature(inputs: Mapping[str, Any]) -> str:
    """The shapes of a call's arrays, in their order: what a compiler specialising on shapes builds a program for."""
    return " ".join(f"{k}{list(v.shape)}" for k, v in inputs.items() if isinstance(v, np.ndarray))


def note(
    op: str, inputs: Mapping[str, Any], params: Mapping[str, Any], planned: bool = False, planned_values: bool = False
) -> None:
    """Count one call of ``op``: its parameter values, the shapes of its arrays (and whether they came from a shape
    plan, conformance/strategies/plan.py, their structural values too) and the regimes its inputs are in."""
    entry = _entry(op)
    entry["calls"] += 1
    entry["planned"] += int(planned)
    if planned_values:
        entry["planned_values"] = entry.get("planned_values", 0) + 1
    for key, value in _flat(params).items():
        add_value(entry["params"].setdefault(key, {"values": [], "more": 0}), _json_value(value))
    name = dtype_of(inputs)
    if name is None:
        return
    seen = entry["shapes"].setdefault(name, [])
    sig = signature(inputs)
    if sig not in seen:
        seen.append(sig)
    arrays = {k: v for k, v in inputs.items() if isinstance(v, np.ndarray)}
    values = {k: (v if v.dtype.kind in "iub" else v.astype(np.float64)) for k, v in arrays.items()}
    for r in regimes.reached(op, values, params, fmt(name)):
        counts = entry["regimes"].setdefault(r, {})
        counts[name] = counts.get(name, 0) + 1


def note_compiles(op: str, dtype: str | None, count: int) -> None:
    """Count the programs a candidate built during one call of ``op`` (its optional ``compiles()`` hook)."""
    if count > 0 and dtype is not None:
        built = _entry(op)["compiles"]
        built[dtype] = built.get(dtype, 0) + count


def add_value(slot: dict[str, Any], value: Any, count: int = 1) -> None:
    """Add a value to a parameter's record: kept while fewer than MAX_VALUES are, the range of numbers always."""
    if value not in slot["values"]:
        if len(slot["values"]) < MAX_VALUES:
            slot["values"].append(value)
        else:
            slot["more"] += count
    if isinstance(value, int | float) and not isinstance(value, bool):
        slot["min"] = value if slot.get("min") is None else min(slot["min"], value)
        slot["max"] = value if slot.get("max") is None else max(slot["max"], value)


def drain() -> dict[str, dict[str, Any]]:
    """What was noted since the last drain (and forget it)."""
    out = dict(_NOTED)
    _NOTED.clear()
    return out


def merge(into: dict[str, dict[str, Any]], noted: Mapping[str, Mapping[str, Any]]) -> None:
    """Fold one check's ``drain()`` into a per-operation total (the controller's, for one adapter)."""
    for op, e in noted.items():
        t = into.setdefault(op, {"calls": 0, "params": {}, "regimes": {}, "shapes": {}, "planned": 0, "compiles": {}})
        t["calls"] += e["calls"]
        t["planned"] += e.get("planned", 0)
        if e.get("planned_values"):
            t["planned_values"] = t.get("planned_values", 0) + e["planned_values"]
        for d, sigs in e.get("shapes", {}).items():
            kept = t["shapes"].setdefault(d, [])
            kept.extend(sig for sig in sigs if sig not in kept)
        for d, n in e.get("compiles", {}).items():
            t["compiles"][d] = t["compiles"].get(d, 0) + n
        for name, slot in e["params"].items():
            ts = t["params"].setdefault(name, {"values": [], "more": 0})
            for v in slot["values"]:
                add_value(ts, v)
            ts["more"] += slot.get("more", 0)
            for bound, pick in (("min", min), ("max", max)):
                if slot.get(bound) is not None:
                    ts[bound] = slot[bound] if ts.get(bound) is None else pick(ts[bound], slot[bound])
        for r, counts in e["regimes"].items():
            tc = t["regimes"].setdefault(r, {})
            for d, n in counts.items():
                tc[d] = tc.get(d, 0) + n


def summary(
    noted: Mapping[str, Mapping[str, Any]], capabilities: Mapping[str, Capability] | None = None
) -> dict[str, Any]:
    """report.json's view of one adapter's totals: per operation its calls, each parameter's values (sorted, with
    the range of numbers and whether it was exercised beyond its default), and every listed regime's counts by
    dtype (an empty object: not reached; ``drawn`` false: listed but not drawn, with the reason). A parameter
    that is a named choice the adapter declares in part (``capabilities``) carries ``declared``, the values it
    declares; a regime that needs an undeclared value of it is not drawn, and says so."""
    out: dict[str, Any] = {}
    for op in sorted(noted):
        e = noted[op]
        narrowed = dict(capabilities[op].values) if capabilities and op in capabilities else {}
        params = {}
        for name in sorted(e["params"]):
            slot = e["params"][name]
            vals = sorted(slot["values"], key=lambda v: (v is not None, type(v).__name__, v if v is not None else 0))
            params[name] = {
                "values": vals,
                **({"more": slot["more"]} if slot.get("more") else {}),
                **({"min": slot["min"], "max": slot["max"]} if slot.get("min") is not None else {}),
                "varied": regimes.varied(name, vals) or bool(slot.get("more")),
                **({"declared": sorted(narrowed[name])} if name in narrowed else {}),
            }
        listed = {}
        for r in regimes.for_op(op):
            counts = e["regimes"].get(r.name, {})
            undeclared = r.needs is not None and r.needs[1] not in narrowed.get(r.needs[0], {r.needs[1]})
            reason = f"the adapter does not declare {r.needs[0]} {r.needs[1]}" if undeclared and r.needs else r.reason
            listed[r.name] = {
                "counts": dict(sorted(counts.items())),
                "reason": reason,
                **({} if r.drawn and not undeclared else {"drawn": False}),
            }
        shapes = {d: len(sigs) for d, sigs in sorted(e.get("shapes", {}).items())}
        out[op] = {
            "calls": e["calls"],
            "params": params,
            "regimes": listed,
            **({"shapes": shapes} if shapes else {}),
            **({"planned_calls": e["planned"]} if e.get("planned") else {}),
            **({"planned_value_calls": e["planned_values"]} if e.get("planned_values") else {}),
            **({"compiles": dict(sorted(e["compiles"].items()))} if e.get("compiles") else {}),
        }
    return out

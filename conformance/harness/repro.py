"""What a failed check keeps to rebuild its failing call outside the suite.

When a check raises :class:`CheckFailure`, the failing call is stored in ``record.extra["repro"]``: the
operation, the inputs as lists with their dtype names, the parameters (and the cotangent of a VJP), the
float64 oracle's value and the candidate's. The report turns it into a standalone script
(reports/repro_script.py). Hypothesis replays the shrunk example last, so the stored call is the shrunk
one. Inputs larger than :data:`MAX_ELEMENTS` are not stored (the payload of a report stays small).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from transformer_conformance.reference.formats import dtype_name

#: Most array elements (inputs, cotangent, oracle and candidate values together) kept for one failure.
MAX_ELEMENTS = 4096
#: Longest text kept for a candidate's value that is not an array.
MAX_TEXT = 300


def array(a: Any) -> dict[str, Any]:
    """An array as JSON: dtype name, shape and the values (exact: every tested dtype converts to float64)."""
    arr = np.asarray(a)
    if arr.dtype.kind in "iub":
        values: list[Any] = arr.astype(np.int64).ravel().tolist()
    else:
        values = arr.astype(np.float64).ravel().tolist()
    return {"dtype": dtype_name(arr), "shape": list(arr.shape), "values": values}


def value(v: Any) -> Any:
    """An oracle's or candidate's output: an array, a mapping of arrays (gradients), or a short text."""
    if v is None:
        return None
    if isinstance(v, np.ndarray | np.generic | int | float):
        return array(v)
    if isinstance(v, Mapping):
        return {str(k): value(x) for k, x in v.items()}
    return {"text": repr(v)[:MAX_TEXT]}


def _size(obj: Any) -> int:
    if isinstance(obj, dict):
        return len(obj["values"]) if "values" in obj else sum(_size(v) for v in obj.values())
    if isinstance(obj, list):
        return sum(_size(v) for v in obj)
    return 0


def call(
    method: str,
    inputs: Mapping[str, np.ndarray],
    params: Mapping[str, Any],
    oracle: Any,
    candidate: Any,
    cotangent: np.ndarray | None = None,
) -> dict[str, Any]:
    """One call of the candidate (``method``: "forward" or "vjp") with the oracle's and the candidate's answer."""
    out: dict[str, Any] = {
        "method": method,
        "inputs": {k: array(v) for k, v in inputs.items()},
        "params": {k: v if isinstance(v, int | float | str | bool | None) else repr(v) for k, v in params.items()},
        "oracle": value(oracle),
        "candidate": value(candidate),
    }
    if cotangent is not None:
        out["cotangent"] = array(cotangent)
    return out


def store(
    record: Any, op: str, dtype: str, calls: list[dict[str, Any]], relation: str = "", failure: Any = None
) -> None:
    """Keep the failing calls on the record (the last: after shrinking, the minimal example); ``relation``:
    "difference" when the property compares the candidate's two outputs (their difference should equal the
    oracle's). ``failure``: its CheckFailure; the example furthest over its budget is also kept, as
    ``extra["worst"]`` (its message, how many times its budget, its calls), since the minimal example is
    often a borderline one."""
    payload: dict[str, Any] = {"op": op, "dtype": dtype, "calls": calls}
    if relation:
        payload["relation"] = relation
    n = _size(calls)
    if n > MAX_ELEMENTS:
        payload = {
            "op": op,
            "dtype": dtype,
            "omitted": f"the failing call has {n} array elements (over {MAX_ELEMENTS})",
        }
    record.extra["repro"] = payload
    share = getattr(failure, "share", None)
    if share is not None and share > record.extra.get("worst", {}).get("share", 0.0):
        record.extra["worst"] = {"share": share, "message": str(failure), "repro": payload}

"""A standalone reproduction script for a failed check, from the call the check stored (conformance/harness/repro.py).

The script needs only NumPy, ml_dtypes and the candidate's own library: it rebuilds the input arrays in the
dtype under test, imports the adapter by the import path given on the command line (``--adapter``),
calls it, and prints the candidate's values next to the float64 oracle's (embedded: the oracle is the
suite's, under the adapter's declared conventions). Everything taken from the report enters the script
as a Python literal (strings quoted by ``repr``), so no value or name, however odd, can change what the script does.
"""

from __future__ import annotations

import pprint
from typing import Any

_TEMPLATE = """#!/usr/bin/env python3
# Standalone reproduction of a failed conformance check (transformer-conformance).
# Needs NumPy, ml_dtypes and the candidate's library. Run it from the directory the suite ran in
# (or with the adapter's package importable):   python repro.py
import importlib
import inspect
import os
import sys

import ml_dtypes
import numpy as np

CASE = {case}

DTYPES = {{"float32": np.float32, "float16": np.float16, "bfloat16": ml_dtypes.bfloat16, "float64": np.float64}}


def build(a):
    if a["dtype"] in DTYPES:
        values = np.array([float(v) for v in a["values"]], dtype=np.float64)
        return values.astype(DTYPES[a["dtype"]]).reshape(a["shape"])
    return np.array(a["values"], dtype=a["dtype"]).reshape(a["shape"])


def load(spec, device):
    sys.path.insert(0, os.getcwd())
    module, _, attr = spec.partition(":")
    obj = getattr(importlib.import_module(module), attr)
    if inspect.isclass(obj) or (callable(obj) and not hasattr(obj, "forward")):
        obj = obj(device=device) if "device" in inspect.signature(obj).parameters else obj()
    return obj


def show(label, got, want):
    got64 = np.asarray(got).astype(np.float64).ravel()
    want64 = np.asarray(want).astype(np.float64).ravel()
    shapes = f"candidate {{np.asarray(got).dtype}}{{list(np.shape(got))}}, oracle float64{{list(np.shape(want))}}"
    print(f"{{label}}: {{shapes}}")
    if got64.shape != want64.shape:
        print(f"  shapes differ; candidate {{got64.tolist()}}")
        return None
    for i, (g, w) in enumerate(zip(got64.tolist(), want64.tolist())):
        if i < 16:
            print(f"  [{{i}}] candidate {{g!r:<24}} oracle {{w!r:<24}} difference {{g - w:.6g}}")
    diff = np.abs(got64 - want64)
    worst = int(np.nanargmax(diff)) if diff.size and not np.isnan(diff).all() else 0
    if diff.size:
        print(f"  largest difference: {{float(diff[worst])!r}} at flat index {{worst}}")
    return got64 - want64


def main():
    print(CASE["title"])
    info = CASE["adapter"]
    adapter = load(info["spec"], info["device"])
    outputs = []
    for n, c in enumerate(CASE["calls"], 1):
        inputs = {{k: build(v) for k, v in c["inputs"].items()}}
        args = [build(c["cotangent"])] if "cotangent" in c else []
        fn = adapter.vjp if c["method"] == "vjp" else adapter.forward
        shapes = ", ".join(f"{{k}}: {{v.dtype}}{{list(v.shape)}}" for k, v in inputs.items())
        print(f"call {{n}}: {{info['name']}}.{{CASE['op']}}.{{c['method']}}({{shapes}}, params={{c['params']!r}})")
        try:
            if CASE["autocast"]:  # the check ran inside the framework's mixed-precision context
                print(f"  inside {{info['name']}}.autocast({{CASE['autocast']!r}})")
                with adapter.autocast(CASE["autocast"]):
                    got = fn(CASE["op"], inputs, c["params"], *args)
            else:
                got = fn(CASE["op"], inputs, c["params"], *args)
        except Exception as exc:
            print(f"  raised {{type(exc).__name__}}: {{exc}}")
            outputs.append(None)
            continue
        oracle = c["oracle"]
        if oracle is not None and "values" not in oracle:  # gradients: one per input
            outputs.append(None)
            for name, want in oracle.items():
                show(f"  d{{name}}", got[name], build(want))
        elif oracle is not None:
            outputs.append((np.asarray(got).astype(np.float64), build(oracle)))
            show("  output", got, build(oracle))
        else:
            print(f"  candidate: {{got!r}}")
    if CASE.get("relation") == "difference" and len(outputs) == 2 and all(o is not None for o in outputs):
        (g1, w1), (g2, w2) = outputs
        print("the property: call 2's output minus call 1's should equal the oracle's difference")
        show("  difference", g2 - g1, w2 - w1)


if __name__ == "__main__":
    main()
"""


def _first_line(text: Any) -> str:
    return str(text).splitlines()[0] if text else ""


def _autocast(check: dict[str, Any]) -> bool:
    return str(check.get("dtype") or "").startswith("autocast-")


def repro_script(check: dict[str, Any], worst: bool = False) -> str | None:
    """The script for a failed check's stored call (``worst``: of the example furthest over its budget), or None
    if the check stored none (or it was too large)."""
    extra = check.get("extra") or {}
    payload = (extra.get("worst") or {}).get("repro") if worst else extra.get("repro")
    if not isinstance(payload, dict) or "calls" not in payload or "adapter" not in payload:
        return None
    title = (
        f"{check.get('adapter')} · {check.get('check')} · {check.get('dtype') or '-'}: {check.get('property')}\n"
        f"  reported: {_first_line(extra['worst']['message'] if worst else check.get('message'))}"
    )
    case = {
        "title": title,
        "op": payload["op"],
        "adapter": payload["adapter"],
        "calls": payload["calls"],
        "relation": payload.get("relation", ""),
        # a check of the mode autocast-D (its dtype column) calls the candidate inside its autocast(D) context
        "autocast": str(check.get("dtype") or "").removeprefix("autocast-") if _autocast(check) else "",
    }
    # a Python literal of str, float, int, bool, None, lists and dicts: repr quotes every string safely
    return _TEMPLATE.format(case=pprint.pformat(case, width=110, sort_dicts=False))

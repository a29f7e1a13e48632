"""A run against a saved baseline (``--compare BASELINE.json``): regressions beyond the runs' own noise.

A case regressed when its median time grew by more than the larger of the two runs' interquartile ranges
for it and a minimum relative change (default 5 % of the baseline median): a change the repetitions
themselves would not produce. It improved when it shrank by as much. Cases in only one of the runs are
listed, not judged.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from benchmarks.perf.results import result_key

MIN_RELATIVE = 0.05


def compare(run: Mapping[str, Any], baseline: Mapping[str, Any], min_relative: float = MIN_RELATIVE) -> dict[str, Any]:
    base = {result_key(r): r for r in baseline.get("results", [])}
    new = {result_key(r): r for r in run.get("results", [])}
    rows = []
    for key, r in new.items():
        b = base.get(key)
        if b is None:
            continue
        tb, tn = b["time_s"], r["time_s"]
        threshold = max(tb["iqr"], tn["iqr"], min_relative * tb["median"])
        change = tn["median"] - tb["median"]
        verdict = "regression" if change > threshold else "improvement" if change < -threshold else "unchanged"
        rows.append(
            {
                "behaviour": r["behaviour"],
                "op": r["op"],
                "size": r["size"],
                "dtype": r["dtype"],
                "pass": r["pass"],
                "adapter": r["adapter"],
                "device": r["device"],
                "baseline_median_s": tb["median"],
                "median_s": tn["median"],
                "relative_change": change / tb["median"],
                "threshold_s": threshold,
                "verdict": verdict,
            }
        )
    notes = []
    for field in ("device", "mode"):
        if run.get(field) != baseline.get(field):
            notes.append(f"{field} differs: baseline {baseline.get(field)!r}, this run {run.get(field)!r}")
    be, re_ = baseline.get("environment", {}), run.get("environment", {})
    for field in ("machine", "gpu", "torch"):
        if be.get(field) != re_.get(field):
            notes.append(f"{field} differs: baseline {be.get(field)!r}, this run {re_.get(field)!r}")
    return {
        "baseline_created": baseline.get("created"),
        "min_relative": min_relative,
        "rows": rows,
        "regressions": sum(r["verdict"] == "regression" for r in rows),
        "improvements": sum(r["verdict"] == "improvement" for r in rows),
        "only_in_baseline": [list(k) for k in base.keys() - new.keys()],
        "only_in_run": [list(k) for k in new.keys() - base.keys()],
        "notes": notes,
    }

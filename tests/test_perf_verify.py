"""The performance report verifies what its timed calls delivered (benchmarks/perf/verify.py): torch's own
answers pass, forward and gradients; an answer cached by its inputs' identity, one finished by a thread after the
timer stopped, one that is not computed and gradients for another cotangent are rejected. Nothing is timed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from benchmarks.perf import verify
from benchmarks.perf.accounting import OPS
from benchmarks.perf.inputs import make_inputs
from tests import gaming_native
from tests.test_native_hook import TINY
from transformer_conformance.adapters.torch.adapter import TorchAdapter

ROOT = Path(__file__).resolve().parents[1]
CONTRACT_OPS = sorted(n for n in OPS if n != "swiglu_product")


def _deliver(adapter: Any, name: str, dtype: str, grad: bool) -> None:
    """What the report does with one case, its timing left out: the last call's answer verified."""
    op, dims = OPS[name], TINY[name]
    inputs = make_inputs(op, dims, dtype)
    cot = verify.cotangent_for(op, dims, dtype) if grad else None
    fn = adapter.native(name, inputs, dict(op.params), grad, cotangent=cot)
    fn()  # warm-up
    before = verify.threads()
    last = fn()
    call = verify.describe(adapter, op, inputs, grad)
    got = verify.check_delivery(fn, last, before, call)
    assert not verify.oracle_note(op, inputs, dims, grad)
    names = verify.names(op, inputs, grad)
    verify.check_values(adapter, op, inputs, dict(op.params), dtype, cot, got, names, call)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
@pytest.mark.parametrize("grad", [False, True], ids=["forward", "backward"])
@pytest.mark.parametrize("name", CONTRACT_OPS)
def test_torch_answers_are_verified(name: str, grad: bool, dtype: str) -> None:
    _deliver(TorchAdapter(), name, dtype, grad)


@pytest.mark.parametrize(
    ("cls", "grad", "words"),
    [
        (gaming_native.CachedNative, False, "returned the memory of their answer"),
        (gaming_native.CachedNative, True, "returned the memory of their answer"),
        (gaming_native.LateNative, False, "changed after the timer stopped"),
        (gaming_native.EmptyNative, False, "disagrees with the oracle"),
        (gaming_native.IgnoresCotangent, True, "disagrees with the oracle"),
    ],
    ids=lambda v: v.__name__ if isinstance(v, type) else str(v),
)
def test_a_timed_answer_not_computed_is_rejected(cls: type, grad: bool, words: str) -> None:
    with pytest.raises(verify.Rejected, match=words) as caught:
        _deliver(cls(), "rms_norm", "float32", grad)
    assert f"{cls.name}.native('rms_norm', grad={grad})" in str(caught.value)  # type: ignore[attr-defined]


def test_what_is_not_held_to_the_oracle_says_why() -> None:
    product = OPS["swiglu_product"]
    note = verify.oracle_note(
        product, make_inputs(product, TINY["swiglu_product"], "float32"), TINY["swiglu_product"], False
    )
    assert "not a contract operation" in note
    mlp = OPS["swiglu_mlp"]
    dims = {"batch": 4, "seq": 2048, "d": 4096, "hidden": 11008}  # the seeds' 7B shape: hours of float64
    note = verify.oracle_note(mlp, {}, dims, True)
    assert "too large for the float64 oracle" in note


def test_a_hook_taking_the_cotangent_is_told_apart() -> None:
    assert verify.takes_cotangent(TorchAdapter().native)
    assert not verify.takes_cotangent(lambda op, inputs, params, grad: None)


def test_the_report_rejects_a_time_whose_answer_was_not_computed(tmp_path: Path) -> None:
    """End to end through ``pytest benchmarks``: the cases of a cached and a late candidate fail, are listed as
    rejected with the reason, and have no time in the report; torch's cases beside them are results."""
    adapters = "torch,tests.gaming_native:CachedNative,tests.gaming_native:LateNative"
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "benchmarks",
            "-p",
            "no:cacheprovider",
            "-q",
            "--quick",
            "--perf-dtype",
            "float32",
            "--perf-adapter",
            adapters,
            "--perf-out",
            str(tmp_path),
            "-k",
            "rms_norm and 128x4096",
            "--perf-max-time",
            "0.01",
            "--perf-min-rounds",
            "2",
        ],
        cwd=ROOT,
        env={k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")},  # an xdist worker's disable timing
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert run.returncode == 1, run.stdout[-3000:] + run.stderr[-3000:]
    report = json.loads((tmp_path / "perf.json").read_text())
    assert {(r["adapter"], r["pass"]) for r in report["results"]} == {
        ("torch", "forward"),
        ("torch", "forward+backward"),
        ("late-native", "forward+backward"),  # its backward is torch's, on time
    }
    assert all(r["verified"] == "values and delivery" for r in report["results"])
    rejected = {(n["adapter"], n["pass"]): n["reason"] for n in report["not_run"]}
    assert set(rejected) == {
        ("cached-native", "forward"),
        ("cached-native", "forward+backward"),
        ("late-native", "forward"),
    }
    assert "returned the memory of their answer" in rejected["cached-native", "forward"]
    assert "changed after the timer stopped" in rejected["late-native", "forward"]
    assert all(r.startswith("rejected: ") for r in rejected.values())
    assert "rejected, not a measurement" in run.stdout

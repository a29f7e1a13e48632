"""The causal alignment is a declared convention: a top-left candidate (is_causal=True in PyTorch's fused attention)
is held to top-left by the agreement checks and passes them; decoding with a KV cache needs bottom-right, so that
check is unsupported for it. (A candidate that declares bottom-right and computes top-left is a planted defect:
tests/planted.py TopLeftForKvCache.)"""

from __future__ import annotations

from pathlib import Path

from tests.conformance_run import run_suite


def test_top_left_declared_is_held_to_top_left(tmp_path: Path) -> None:
    run = run_suite(
        tmp_path,
        "--adapter=tests.alignment_adapters:torch_top_left,tests.alignment_adapters:numpy_top_left",
        "--dtype=float32",
        "test_attention.py",
        "-k",
        "test_forward or test_causality or test_kv_cache or test_softcap_bound",
    )
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    for name in ("torch-top-left", "numpy-top-left"):
        by_check = {c["check"]: c for c in run.checks(adapter=name)}
        for check_id in ("attention/forward", "attention/causality", "attention/softcap-bound"):
            assert by_check[check_id]["status"] == "passed", by_check[check_id]
        kv = by_check["attention/kv-cache"]
        assert kv["status"] == "unsupported" and "needs bottom-right" in kv["message"], kv
    assert run.report["adapters"][0]["conventions"]["causal_alignment"] == "top_left"

"""The onnxruntime built-in adapter loads, refuses versions it was not measured on, declares what runs on the
CPU provider, passes a smoke subset, and is held to what it declares."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("onnxruntime")
pytest.importorskip("onnx")

from tests.adapter_smoke import case, outside_hypothesis, smoke
from tests.conformance_run import run_suite
from tests.planted import ORT_BREAKS
from transformer_conformance.adapters.registry import load_adapter
from transformer_conformance.conformance.harness.compare import CheckFailure, Record, check_forward
from transformer_conformance.conformance.strategies.common import Case, fill
from transformer_conformance.reference.formats import fmt


def test_smoke() -> None:
    adapter = load_adapter("onnxruntime")
    assert adapter.name == "onnxruntime"
    checked = smoke(adapter, ("float32", "float16", "bfloat16"))
    assert "layer_norm[bfloat16]" in checked and "attention[float16][tanh]" in checked
    assert "rms_norm[bfloat16]" not in checked  # no bfloat16 kernel on the CPU provider


def test_contrib_smoke() -> None:
    adapter = load_adapter("onnxruntime-contrib")
    assert adapter.name == "onnxruntime-contrib"
    checked = smoke(adapter, ("float32", "float16", "bfloat16"))
    assert set(checked) == {f"rms_norm[{d}]" for d in ("float32", "float16", "bfloat16")} | {
        "rope[float32]",
        "rope[float16]",
    } | {f"sliding_window_attention[{d}][{c}]" for d in ("float32", "float16") for c in ("none", "tanh")}


def test_declarations() -> None:
    adapter = load_adapter("onnxruntime")
    assert set(adapter.capabilities) == {
        "layer_norm",
        "rms_norm",
        "rope",
        "attention",
        "cross_entropy",
        "cross_entropy_mean",
    }
    assert not any(cap.grad for cap in adapter.capabilities.values())  # inference: no gradients
    assert adapter.conventions.eps_defaults == {"rms_norm": 1e-5, "layer_norm": 1e-5}
    assert adapter.environment()["provider"] == "CPUExecutionProvider"


@pytest.mark.parametrize("version", ["1.31.1", "1.33.0", "2.0.0", "nightly"])
def test_other_versions_refused(version: str) -> None:
    from transformer_conformance.adapters.onnxruntime.adapter import check_version
    from transformer_conformance.adapters.versions import UnsupportedVersion

    match = f"^onnxruntime {version} is not supported: the onnxruntime adapter supports onnxruntime >= 1.32, < 1.33$"
    with pytest.raises(UnsupportedVersion, match=match):
        check_version(version)
    check_version("1.32.0")
    check_version("1.32.3+cpu")


def test_undeclared_dtype_does_not_run() -> None:
    """What is left undeclared really has no kernel: a bfloat16 RMSNormalization session fails to build."""
    adapter = load_adapter("onnxruntime")
    dtype = fmt("bfloat16")
    with pytest.raises(Exception, match="NOT_IMPLEMENTED"):
        adapter.forward("rms_norm", case("rms_norm", dtype).inputs, {"eps": 1e-5})


@pytest.mark.parametrize("contrib", [False, True], ids=["standard", "contrib"])
@pytest.mark.parametrize("layout", ["half", "interleaved"])
def test_rope_layout_follows_the_declaration(layout: str, contrib: bool) -> None:
    """The interleaved attribute is set from the declared layout; the other layout's answer is caught."""
    from transformer_conformance.adapters.onnxruntime.adapter import OnnxRuntimeAdapter, OnnxRuntimeContribAdapter

    dtype, c = fmt("float32"), case("rope", fmt("float32"))
    adapter = (OnnxRuntimeContribAdapter if contrib else OnnxRuntimeAdapter)(rope_layout=layout)
    with outside_hypothesis():
        check_forward(adapter, "rope", c, dtype, Record("rope", "rope", "", ""))
    other = "interleaved" if layout == "half" else "half"
    adapter.conventions = replace(adapter.conventions, rope_layout=other)  # declared, not built
    with outside_hypothesis(), pytest.raises(CheckFailure, match="should be"):
        check_forward(adapter, "rope", c, dtype, Record("rope", "rope", "", ""))


def test_causal_alignment_is_enforced() -> None:
    """Attention's is_causal is offset by the cache length only: with no past_key it is top-left. Declared
    top-left, plain is_causal passes; declaring bottom-right while calling it without a cache is caught."""
    from transformer_conformance.adapters.onnxruntime.adapter import OnnxRuntimeAdapter

    dtype = fmt("float32")
    c = case("attention", dtype)  # causal, 3 queries on 5 keys
    top_left = OnnxRuntimeAdapter(causal_alignment="top_left")
    with outside_hypothesis():
        check_forward(top_left, "attention", c, dtype, Record("a", "attention", "", ""))
        check_forward(OnnxRuntimeAdapter(), "attention", c, dtype, Record("a", "attention", "", ""))
    top_left.conventions = replace(top_left.conventions, causal_alignment="bottom_right")
    with outside_hypothesis(), pytest.raises(CheckFailure, match="should be"):
        check_forward(top_left, "attention", c, dtype, Record("a", "attention", "", ""))


def test_float16_attention_declared_unfused() -> None:
    """Attention in float16 stores its intermediates in float16: declared fused, it is caught."""
    adapter = load_adapter("onnxruntime")
    dtype = fmt("float16")
    c = case("attention", dtype)
    with outside_hypothesis():
        check_forward(adapter, "attention", c, dtype, Record("a", "attention", "", ""))
    adapter.conventions = replace(adapter.conventions, unfused=adapter.conventions.unfused - {"attention"})
    with outside_hypothesis(), pytest.raises(CheckFailure, match="should be"):
        check_forward(adapter, "attention", c, dtype, Record("a", "attention", "", ""))


def test_bfloat16_crosses_as_bits() -> None:
    """bfloat16 goes in and comes out bit for bit (the binding has no NumPy bfloat16)."""
    from transformer_conformance.adapters.onnxruntime import graphs

    dtype = fmt("bfloat16")
    a = fill(dtype, (3, 5), 1.0, 0)
    v = graphs.to_ort(a)
    assert v.data_type() == "tensor(bfloat16)"
    back = graphs.from_ort(v, a.dtype)
    assert back.dtype == a.dtype and np.array_equal(back.view(np.uint16), a.view(np.uint16))


def test_sessions_cached() -> None:
    adapter = load_adapter("onnxruntime")
    dtype = fmt("float32")
    for n in (8, 16, 3):  # shapes do not make new sessions
        c = Case({"x": fill(dtype, (2, n), 1.0, n), "weight": fill(dtype, (n,), 0.5, 1, offset=1.0)}, {"eps": None})
        adapter.forward("rms_norm", c.inputs, c.params)
    assert len(adapter._sessions) == 1  # type: ignore[attr-defined]


def test_planted_converter_defects_caught(tmp_path: Path) -> None:
    """Graphs built as a faulty converter builds them (tests/planted.py): RoPE exported with the other
    ``interleaved`` value, GQA heads expanded with Tile. Each fails the checks of its behaviour, nothing else."""
    adapters = [f"--adapter=tests.planted:{name}" for name in ORT_BREAKS]
    run = run_suite(tmp_path, *adapters, "--dtype=float32", "--behaviour=rope,attention", "-n", "1")
    assert run.returncode == 1, run.stdout[-2000:] + run.stderr[-2000:]
    for name, (behaviour, check_ids, dtype) in ORT_BREAKS.items():
        adapter = name.replace("_", "-")
        failed = run.checks(adapter=adapter, status="failed")
        assert {c["behaviour"] for c in failed} == {behaviour}, [c["check"] for c in failed]
        for check_id in check_ids:
            caught = [c for c in failed if c["check"] == check_id and c["dtype"] == dtype]
            assert caught and "should be" in caught[0]["message"], (adapter, check_id, [c["check"] for c in failed])
        assert not run.checks(adapter=adapter, status="error")


# ---- the converter path: torch.onnx.export into onnxruntime -----------------------------------------------------


def _export_adapter():  # type: ignore[no-untyped-def]
    pytest.importorskip("onnxscript")
    pytest.importorskip("torch")
    return load_adapter("onnxruntime-export")


def test_export_versions_refused() -> None:
    pytest.importorskip("onnxscript")
    from transformer_conformance.adapters.onnxruntime.export import check_export_versions
    from transformer_conformance.adapters.versions import UnsupportedVersion

    check_export_versions("2.13.0+cpu", "0.7.2")
    with pytest.raises(UnsupportedVersion, match=r"^torch 2\.12\.1 is not supported: .* torch >= 2\.13, < 2\.14$"):
        check_export_versions("2.12.1", "0.7.2")
    with pytest.raises(UnsupportedVersion, match=r"^onnxscript 0\.8\.0 is not supported: .* >= 0\.7, < 0\.8$"):
        check_export_versions("2.13.0", "0.8.0")


def test_shape_pattern() -> None:
    pytest.importorskip("onnxscript")
    from transformer_conformance.adapters.onnxruntime.export import shape_pattern

    a, b = np.zeros((3, 8)), np.zeros((8,))
    assert shape_pattern([a, b]) == (("s0", "s1"), ("s1",))
    assert shape_pattern([np.zeros((1, 5, 5)), np.zeros((0,))]) == ((1, "s0", "s0"), (0,))


def test_export_runs_and_reuses_graphs() -> None:
    """One export serves the shapes of a pattern; bfloat16 runs where the exported graph computes in float32."""
    adapter = _export_adapter()
    for name, shapes in (("float32", ((3, 8), (5, 16))), ("bfloat16", ((2, 4),))):
        dtype = fmt(name)
        for rows, n in shapes:
            c = Case(
                {"x": fill(dtype, (rows, n), 1.0, n), "weight": fill(dtype, (n,), 0.5, 1, offset=1.0)}, {"eps": 1e-5}
            )
            with outside_hypothesis():
                check_forward(adapter, "rms_norm", c, dtype, Record("rms", "rms_norm", "", ""))
    assert len(adapter._sessions) == 2  # type: ignore[attr-defined]


def test_exporter_drops_eps_1e8() -> None:
    """The known failure of expectations/onnxruntime.toml: onnxscript's no-op rule (x + 0 → x, matched with
    abs_tol 1e-8) removes RMSNorm's Add(mean, 1e-8), so a zero row is NaN where torch gives 0. When this test
    fails, the exporter keeps ε: remove the expectation entry and this test."""
    adapter = _export_adapter()
    x, w = np.zeros((1, 2), np.float32), np.ones(2, np.float32)
    assert np.isnan(adapter.forward("rms_norm", {"x": x, "weight": w}, {"eps": 1e-8})).all()
    assert np.array_equal(adapter.forward("rms_norm", {"x": x, "weight": w}, {"eps": 1e-7}), np.zeros((1, 2)))


def test_gqa_window_count_follows_the_release() -> None:
    """GroupQueryAttention's local_window_size counts the query's own token from 1.24 (onnxruntime#25927)."""
    from transformer_conformance.adapters.onnxruntime.adapter import gqa_window_counts

    assert load_adapter("onnxruntime-contrib").conventions.sliding_window == "inclusive"  # 1.32, measured
    assert [gqa_window_counts(v) for v in ("1.22.0", "1.23.2", "1.24.1", "1.32.0", "2")] == [
        "exclusive",
        "exclusive",
        "inclusive",
        "inclusive",
        "inclusive",
    ]


@pytest.mark.parametrize("alignment", ["bottom_right", "top_left"])
def test_sliding_window_against_the_oracle(alignment: str) -> None:
    """GroupQueryAttention with a past (3 queries on 5 keys, B = 2, heads 4 on 2, D 3 and D_v 1 padded to 8) agrees
    with the oracle in the declared count and alignment; the other count is caught, and so is the other alignment."""
    from transformer_conformance.adapters.onnxruntime.adapter import OnnxRuntimeContribAdapter

    dtype = fmt("float32")
    inputs = {
        "q": fill(dtype, (2, 4, 3, 3), 1.0, 0),
        "k": fill(dtype, (2, 2, 5, 3), 1.0, 1),
        "v": fill(dtype, (2, 2, 5, 1), 1.0, 2),
    }
    c = Case(inputs, {"window": 2, "softcap": 5.0, "scale": 0.5}, {})
    adapter = OnnxRuntimeContribAdapter(causal_alignment=alignment)
    rec = Record("swa", "sliding_window_attention", "", "")
    with outside_hypothesis():
        out = check_forward(adapter, "sliding_window_attention", c, dtype, rec)
    assert out.shape == (2, 4, 3, 1)
    declared = adapter.conventions
    other = "top_left" if alignment == "bottom_right" else "bottom_right"
    for wrong in (replace(declared, sliding_window="exclusive"), replace(declared, causal_alignment=other)):
        adapter.conventions = wrong  # declared, not built
        with outside_hypothesis(), pytest.raises(CheckFailure, match="should be"):
            check_forward(adapter, "sliding_window_attention", c, dtype, rec)


def test_sliding_window_bfloat16_has_no_kernel() -> None:
    """What is left undeclared has no kernel: a bfloat16 GroupQueryAttention session fails to build."""
    from transformer_conformance.adapters.onnxruntime.adapter import OnnxRuntimeContribAdapter

    adapter = OnnxRuntimeContribAdapter()
    assert adapter.capabilities["sliding_window_attention"].dtypes == {"float32", "float16"}
    assert not adapter.capabilities["sliding_window_attention"].grad
    c = case("sliding_window_attention", fmt("bfloat16"))
    with pytest.raises(Exception, match="NOT_IMPLEMENTED"):
        adapter.forward("sliding_window_attention", c.inputs, c.params)

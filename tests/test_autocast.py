"""The autocast mode (conformance/harness/autocast.py): cases run inside the candidate's torch.autocast, the
declaration that opts an operation in, and the planted transformers 4.38 RoPE that only this mode catches."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch")

from mutants.catalogue import rms_square_sum_matmul_autocast, rope_angles_matmul_autocast
from tests.adapter_smoke import outside_hypothesis
from tests.conformance_run import run_suite
from transformer_conformance.adapters.contract import AUTOCAST, Capability, ContractError, validate
from transformer_conformance.adapters.torch.adapter import TorchAdapter
from transformer_conformance.conformance.harness import autocast
from transformer_conformance.conformance.harness.compare import CheckFailure, Record, check_forward
from transformer_conformance.conformance.strategies.common import Case, fill
from transformer_conformance.reference.formats import Format, fmt


def _rope_case(dtype: Format) -> Case:
    x = fill(dtype, (1, 3, 64), 1.0, seed=7)
    return Case({"x": x, "positions": np.array([15960, 15961, 15962])}, {"base": 10000.0, "rotary_dim": None})


def _norm_case(dtype: Format) -> Case:
    return Case({"x": fill(dtype, (2, 256), 3.0, seed=3), "weight": fill(dtype, (256,), 1.0, 4, 1.0)}, {"eps": 1e-6})


def _forward(adapter: TorchAdapter, op: str, case: Case, dtype: Format) -> None:
    with outside_hypothesis(), autocast.active(adapter, dtype):
        check_forward(adapter, op, case, dtype, Record("x", "x", "", ""))


def test_a_mode_has_the_numbers_of_the_dtype_its_inputs_arrive_in() -> None:
    rope = autocast.mode_format("autocast-bfloat16", "rope")
    norm = autocast.mode_format("autocast-float16", "rms_norm")
    assert (rope.name, rope.precision, autocast.label(rope)) == ("bfloat16", 8, "autocast-bfloat16")
    assert (norm.name, norm.precision, autocast.label(norm)) == ("float32", 24, "autocast-float16")
    assert autocast.label(fmt("float16")) == "float16" and autocast.autocast_dtype(fmt("float16")) is None


def test_the_transformers_438_rope_passes_outside_autocast_and_fails_inside() -> None:
    """Angles as inv_freq @ positions: right in plain bfloat16, wrong by radians at position 15962 in the mode."""
    mutant = rope_angles_matmul_autocast()
    plain, mode = fmt("bfloat16"), autocast.mode_format("autocast-bfloat16", "rope")
    _forward(mutant, "rope", _rope_case(plain), plain)
    with pytest.raises(CheckFailure, match="rope output"):
        _forward(mutant, "rope", _rope_case(mode), mode)
    _forward(TorchAdapter(), "rope", _rope_case(mode), mode)  # the torch adapter's elementwise angles


def test_a_norm_whose_sum_of_squares_autocast_lowers_fails_only_in_the_mode() -> None:
    mutant = rms_square_sum_matmul_autocast()
    plain, mode = fmt("float32"), autocast.mode_format("autocast-bfloat16", "rms_norm")
    _forward(mutant, "rms_norm", _norm_case(plain), plain)
    with pytest.raises(CheckFailure, match="rms_norm output"):
        _forward(mutant, "rms_norm", _norm_case(mode), mode)
    _forward(TorchAdapter(), "rms_norm", _norm_case(mode), mode)


def test_the_context_is_the_adapters_and_only_in_a_mode() -> None:
    import torch

    a = TorchAdapter()
    seen: list[bool] = []

    class Probe(TorchAdapter):
        def forward(self, op: str, inputs: object, params: object) -> np.ndarray:  # type: ignore[override]
            seen.append(torch.is_autocast_enabled("cpu"))
            return np.zeros(1, np.float32)

    p = Probe()
    for dtype in (fmt("bfloat16"), autocast.mode_format("autocast-bfloat16", "rope")):
        with autocast.active(p, dtype), autocast.context(p.forward):
            p.forward("rope", {}, {})
        with autocast.active(p, dtype), autocast.context(a.forward):  # another adapter's call: untouched
            seen.append(torch.is_autocast_enabled("cpu"))
    assert seen == [False, False, True, False]


def test_declaring_autocast() -> None:
    caps = TorchAdapter().capabilities
    assert {op for op, c in caps.items() if c.autocast} == set(AUTOCAST)
    assert caps["rope"].autocast == {"bfloat16", "float16"}

    class NoContext:
        name = "no-context"
        conventions = TorchAdapter().conventions

        def __init__(self, op: str, dtype: str) -> None:
            self.capabilities = {op: Capability(autocast=frozenset({dtype}))}

        def forward(self, *a: object) -> None: ...
        def vjp(self, *a: object) -> None: ...
        def environment(self) -> dict[str, str]:
            return {}

    with pytest.raises(ContractError, match="no autocast"):
        validate(NoContext("rope", "bfloat16"), "x")
    with pytest.raises(ContractError, match="defined for rope"):
        validate(NoContext("swiglu_mlp", "bfloat16"), "x")
    with pytest.raises(ContractError, match="names float32"):
        validate(NoContext("rope", "float32"), "x")


def test_a_reproduction_script_calls_inside_the_context() -> None:
    from transformer_conformance.reports.repro_script import repro_script

    x = {"dtype": "bfloat16", "shape": [1], "values": [1.0]}
    call = {"method": "forward", "inputs": {"x": x}, "params": {}, "oracle": x, "candidate": x}
    repro = {"op": "rope", "dtype": "autocast-bfloat16", "calls": [call], "adapter": {"name": "a", "spec": "m:a"}}
    check = {"adapter": "a", "check": "rope/forward", "property": "", "message": "m", "extra": {"repro": repro}}
    plain = repro_script(dict(check, dtype="bfloat16")) or ""
    mode = repro_script(dict(check, dtype="autocast-bfloat16")) or ""
    assert "'autocast': ''" in plain and "'autocast': 'bfloat16'" in mode
    compile(mode, "repro.py", "exec")


def test_the_report_names_the_mode(tmp_path: Path) -> None:
    """A run shows each mode as its own column and check id; the 4.38 RoPE fails there alone."""
    run = run_suite(
        tmp_path,
        "test_rope.py",
        "--adapter",
        rope_angles_matmul_autocast.spec,
        "--dtype",
        "bfloat16,autocast-bfloat16",
        "-k",
        "test_forward",
    )
    assert run.returncode == 1, run.stdout[-2000:]
    by_dtype = {c["dtype"]: c for c in run.checks(check="rope/forward")}
    assert by_dtype["bfloat16"]["status"] == "passed"
    assert by_dtype["autocast-bfloat16"]["status"] == "failed"
    assert by_dtype["autocast-bfloat16"]["nodeid"].endswith("[rope-angles-matmul-autocast-autocast-bfloat16]")
    assert "autocast-bfloat16" in (run.report_dir / "report.md").read_text()

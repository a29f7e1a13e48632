"""Triton's interpreter is switched on before anything imports triton (adapters/triton/env.py): a liger
adapter named after an adapter whose library imports triton (transformers does) still runs on a CPU."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("triton")
pytest.importorskip("liger_kernel")
pytest.importorskip("transformers")
torch = pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.skipif(torch.cuda.is_available(), reason="with CUDA, Triton compiles: nothing to switch")


def _env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"} | {"PYTHONPATH": str(ROOT)}


def test_switched_on_without_cuda() -> None:
    code = (
        "import os, transformer_conformance.adapters.triton.env as t; t.interpret_triton_without_cuda(); "
        "print(os.environ.get('TRITON_INTERPRET'))"
    )
    out = subprocess.run([sys.executable, "-c", code], env=_env(), capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "1", out.stdout + out.stderr


def test_liger_after_an_adapter_whose_library_imports_triton(tmp_path: Path) -> None:
    cmd = [
        sys.executable, "-m", "transformer_conformance.conformance", "-n", "0", "-q",
        "--adapter=hf-llama,liger", "--behaviour=rms_norm", "--dtype=float32", "-k", "test_forward",
        "--report-dir", str(tmp_path),
    ]  # fmt: skip
    run = subprocess.run(cmd, cwd=ROOT, env=_env(), capture_output=True, text=True)
    assert run.returncode == 0, (run.stdout + run.stderr)[-3000:]
    assert "2 passed" in run.stdout, run.stdout[-2000:]

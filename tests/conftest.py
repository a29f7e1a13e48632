"""Runs of the conformance suite shared by the report tests (each a separate pytest process, kept small)."""

from __future__ import annotations

import pytest

from tests.conformance_run import Run, run_suite
from transformer_conformance.adapters.triton.env import interpret_triton_without_cuda

# the liger adapter's tests need Triton's interpreter on a CPU, switched on before anything imports triton
# (torch.compile's inductor does, in the tests that compile)
interpret_triton_without_cuda()

#: a planted defect (z-loss as α·z) and a candidate whose error message carries markup, on two checks
DEFECT_ARGS = (
    "--adapter=tests.planted:ZLossLinear,tests.faulty:Raises",
    "test_losses.py",
    "test_rmsnorm.py",
    "-k",
    "z_loss_value or rmsnorm.py and forward",
    "--dtype=float32",
    "--dtype=bfloat16",
)


@pytest.fixture(scope="session")
def defect_run(tmp_path_factory: pytest.TempPathFactory) -> Run:
    run = run_suite(tmp_path_factory.mktemp("defect-run"), *DEFECT_ARGS)
    assert run.returncode == 1, run.stdout[-2000:] + run.stderr[-2000:]
    return run


@pytest.fixture(scope="session")
def builtin_run(tmp_path_factory: pytest.TempPathFactory) -> Run:
    """The built-in numpy and torch adapters on one z-loss check: a conformant run."""
    run = run_suite(
        tmp_path_factory.mktemp("builtin-run"),
        "--adapter=numpy,torch",
        "test_losses.py",
        "-k",
        "z_loss_value",
        "--dtype=float32",
    )
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    return run


#: a small real run that keeps error series: the RoPE and RMSNorm forwards of the built-in adapters
PRECISION_ARGS = (
    "--adapter=numpy,torch",
    "--behaviour=rope,rms_norm",
    "-k",
    "test_forward",
    "--dtype=float32",
    "--dtype=bfloat16",
)
#: the name of the second adapter of the made-up performance run: markup a third party could choose
PERF_ADAPTER = "fused<script>alert(1)</script>"


@pytest.fixture(scope="session")
def precision_run(tmp_path_factory: pytest.TempPathFactory) -> Run:
    """The run above, with a made-up performance run (torch and a faster adapter) given by --perf-json."""
    import json

    from tests.test_perf_report import fake_run

    perf = fake_run()
    for r in perf["results"]:
        if r["adapter"] == "fused":
            r["adapter"] = PERF_ADAPTER
    perf["adapters"][1]["name"] = PERF_ADAPTER
    path = tmp_path_factory.mktemp("perf") / "perf.json"
    path.write_text(json.dumps(perf))
    run = run_suite(tmp_path_factory.mktemp("precision-run"), *PRECISION_ARGS, f"--perf-json={path}")
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    return run

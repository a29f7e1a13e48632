"""Runs of the conformance suite shared by the report tests (each a separate pytest process, kept small)."""

from __future__ import annotations

import pytest

from tests.conformance_run import Run, run_suite

#: a planted defect (z-loss as α·z) and a candidate whose error message carries markup, on two checks
DEFECT_ARGS = (
    "--adapter=tests.planted:ZLossLinear,tests.faulty:Raises",
    "conformance/test_losses.py",
    "conformance/test_rmsnorm.py",
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
        "conformance/test_losses.py",
        "-k",
        "z_loss_value",
        "--dtype=float32",
    )
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    return run

"""A known failure of a compiled operation is confirmed, not minimised (conformance/runner/plugin.py,
``known_failure_unshrunk``): shrinking a compiled candidate's failure builds a program at nearly every step. An
eager candidate's known failure, and every failure no entry lists, is shrunk as before."""

from __future__ import annotations

from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.conformance_run import run_suite
from tests.planted import ZLossLinear
from transformer_conformance.adapters.contract import Capability
from transformer_conformance.conformance.runner.plugin import SETTINGS_ATTRIBUTE

EXPECT = """\
[[expect]]
check = "z_loss/value"
status = "fail"
reason = "z-loss computed as alpha*z"
match = "^z_loss output: got .* should be "
"""


class CompiledZLossLinear(ZLossLinear):
    """The planted z-loss defect, declared compiled per shape (as a jit-compiled candidate would be)."""

    name = "z-loss-linear-compiled"

    def __init__(self, device: str = "cpu") -> None:
        super().__init__(device)
        self.capabilities = {"z_loss": Capability(compiles="per_shape")}


def test_a_hypothesis_test_keeps_its_settings_where_the_plugin_reads_them() -> None:
    @given(st.integers())
    def check(x: int) -> None:
        pass

    assert isinstance(getattr(check, SETTINGS_ATTRIBUTE, None), settings)


def test_a_compiled_known_failure_is_not_shrunk(tmp_path: Path) -> None:
    (tmp_path / "expect.toml").write_text(EXPECT)
    run = run_suite(
        tmp_path / "out",
        # the compiled adapter first: the eager one's check, after it, must find the settings put back
        "--adapter=tests.test_known_failure_unshrunk:CompiledZLossLinear,tests.planted:ZLossLinear",
        *("test_losses.py", "--behaviour=z_loss", "--dtype=float32", "-k", "value"),
        *("--expectations", str(tmp_path / "expect.toml")),
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
    (compiled,) = run.checks(check="z_loss/value", adapter="z-loss-linear-compiled")
    (eager,) = run.checks(check="z_loss/value", adapter="z-loss-linear")
    assert compiled["status"] == eager["status"] == "known_failure"
    # the examples up to the first failure, and Hypothesis's final replay of it: no shrinking step
    assert compiled["examples"] <= compiled["first_failure"] + 1, compiled
    assert "should be" in compiled["message"] and "reproduce_failure" in compiled["counterexample"]
    assert eager["examples"] > eager["first_failure"] + 1, eager  # shrunk


def test_an_unlisted_compiled_failure_is_shrunk(tmp_path: Path) -> None:
    run = run_suite(
        tmp_path / "out",
        "--adapter=tests.test_known_failure_unshrunk:CompiledZLossLinear",
        *("test_losses.py", "--behaviour=z_loss", "--dtype=float32", "-k", "value"),
    )
    assert run.returncode == 1, run.stdout[-3000:] + run.stderr[-2000:]
    (c,) = run.checks(check="z_loss/value")
    assert c["status"] == "failed" and c["examples"] > c["first_failure"] + 1, c

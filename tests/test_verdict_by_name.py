"""The verdict depends only on the candidate, not on its name: the same defective layer norm under two names
(the catalogue's ``ln-one-pass-variance-fp32`` and a renamed copy) fails the same checks at the same example,
under the derandomised ``ci`` sample and under a random seed (Hypothesis draws a check's examples from the
check, never from the adapter's name or its place in the run)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conformance_run import run_suite

NAMES = ("ln-one-pass-variance-fp32", "zz-renamed-layer-norm")
SPECS = "mutants.catalogue:ln_one_pass_variance_fp32,tests.planted:one_pass_variance_renamed"


@pytest.mark.parametrize("sample", [[], ["--hypothesis-profile=ci-random-noshrink", "--hypothesis-seed=3"]])
def test_a_renamed_candidate_gets_the_same_verdict(tmp_path: Path, sample: list[str]) -> None:
    run = run_suite(
        tmp_path, f"--adapter={SPECS}", "--behaviour=layer_norm", "--dtype=float32", "-k", "forward or shift", *sample
    )
    assert run.returncode == 1, run.stdout[-2000:] + run.stderr[-2000:]
    outcome = {
        name: sorted((c["check"], c["status"], c.get("first_failure")) for c in run.checks(adapter=name))
        for name in NAMES
    }
    assert outcome[NAMES[0]], run.stdout[-2000:]
    assert any(status == "failed" for _, status, _ in outcome[NAMES[0]]), outcome
    assert outcome[NAMES[0]] == outcome[NAMES[1]], outcome

"""The release matrix (adapters/releases.py, ``nox -s release-matrix``, reports/releases.py): every entry pins
releases inside the ranges its adapters declare, every declared lower bound of torch, transformers, liger-kernel
and jax is an entry, and the table says per release and adapter what the run found, a refusal's reason included
(docs/adapters.md, "Measured releases")."""

from __future__ import annotations

import json
import runpy
from pathlib import Path
from typing import Any

import pytest

from transformer_conformance.adapters import BUILTIN
from transformer_conformance.adapters.releases import RELEASES
from transformer_conformance.adapters.versions import SUPPORTED, release
from transformer_conformance.reports.releases import load, main, table

ROOT = Path(__file__).resolve().parents[1]

#: the libraries whose declared ranges the matrix must measure at their lower bound (issue: releases measured)
MEASURED = ("torch", "transformers", "liger-kernel", "jax")


def _pins(name: str) -> dict[str, str]:
    return dict(p.split("==") for p in RELEASES[name][0])


@pytest.mark.parametrize("name", sorted(RELEASES))
def test_each_entry_pins_releases_its_adapters_declare(name: str) -> None:
    pins, adapters = RELEASES[name]
    assert all(p.count("==") == 1 for p in pins), f"{name}: pin exact releases, got {pins}"
    for adapter in adapters:
        assert adapter in BUILTIN, f"{name}: {adapter!r} is not a built-in adapter"
        for dist, version in _pins(name).items():
            for rng in SUPPORTED[adapter]:
                if rng.distribution == dist:
                    assert rng.admits(version), f"{name}: {dist} {version} is outside {adapter}'s {rng}"


@pytest.mark.parametrize("dist", MEASURED)
def test_every_declared_lower_bound_is_measured(dist: str) -> None:
    """Every adapter's declared lower bound of transformers, liger-kernel and jax is an entry that runs it; of torch,
    that of every adapter the matrix runs on torch releases (torch, torch-compile: the others' torch is the CI's)."""
    for adapter, ranges in SUPPORTED.items():
        for rng in ranges:
            if rng.distribution != dist:
                continue
            low = release(rng.low)
            runs = [
                n
                for n, (_, adapters) in RELEASES.items()
                if adapter in adapters and release(_pins(n).get(dist, "-"))[: len(low)] == low
            ]
            ran_elsewhere = any(dist in _pins(n) and adapter in a for n, (_, a) in RELEASES.items())
            if dist != "torch" or ran_elsewhere:
                assert runs, f"{adapter}: the lower bound of {rng} is not in adapters/releases.py"


def test_the_noxfile_reads_the_same_matrix() -> None:
    nox_globals = runpy.run_path(str(ROOT / "noxfile.py"))
    assert nox_globals["RELEASES"] == RELEASES
    distribution = nox_globals["_distribution"]
    assert distribution("Liger_Kernel==0.4.0") == "liger-kernel"
    assert distribution("torch==2.13.0  # the CPU build") == "torch"
    assert distribution("jax[cpu]>=0.4.30") == "jax"
    selection = nox_globals["_release_selection"]
    assert selection([]) == {name: () for name in RELEASES}
    assert selection(["jax-0.4.30", "liger-kernel-0.4.0:liger-gemma,liger-none"]) == {
        "jax-0.4.30": (),
        "liger-kernel-0.4.0": ("liger-gemma", "liger-none"),
    }


def _report(verdict: str, summary: dict[str, int], libraries: dict[str, str]) -> dict[str, Any]:
    return {"verdict": verdict, "exit_status": 1, "summary": summary, "environment": {"libraries": libraries}}


def test_the_table_has_a_row_per_run_and_a_refusal_gives_its_reason(tmp_path: Path) -> None:
    run = tmp_path / "torch-2.4.0" / "torch"
    run.mkdir(parents=True)
    libraries = {"numpy": "2.4.6", "torch": "2.4.0", "triton": "3.0.0", "pytest": "9"}
    (run / "report.json").write_text(json.dumps(_report("non-conformant", {"passed": 754, "failed": 10}, libraries)))
    reason = "adapter 'liger': liger-kernel 0.3.1 is not supported: the liger adapter supports liger-kernel >= 0.4"
    runs = {
        "torch-2.4.0": {"torch": {"exit": 1, "wall_s": 86.1}},
        "liger-kernel-0.3.1": {"liger": {"exit": 4, "wall_s": 3.0, "reason": reason}},
        "jax-0.4.30": {"jax": {"exit": 3, "wall_s": 9.0}},  # a run that crashed before writing its report
    }
    (tmp_path / "runs.json").write_text(json.dumps(runs))
    rows = table(load(tmp_path)).splitlines()
    assert rows[0].startswith("| release | adapter | verdict | passed | known failures |")
    assert rows[2] == "| jax-0.4.30 | `jax` | no report (exit 3) | – | – | – | – | – | – | 9 s |  |"
    assert rows[3] == f"| liger-kernel-0.3.1 | `liger` | refused: {reason} | – | – | – | – | – | – | 3 s |  |"
    counts = "754 | 0 | 0 | 10 | 0 | 0"
    assert rows[4] == f"| torch-2.4.0 | `torch` | non-conformant | {counts} | 86 s | torch 2.4.0, triton 3.0.0 |"
    out = tmp_path / "releases.md"
    assert main([str(tmp_path), "--out", str(out)]) == 0
    assert out.read_text().splitlines()[2:] == rows


def test_no_run_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(SystemExit):
        main([str(tmp_path)])


def test_libraries_installed_without_their_dependencies_follow_their_extra() -> None:
    nox_globals = runpy.run_path(str(ROOT / "noxfile.py"))
    assert nox_globals["no_deps_requirements"](["torch", "vllm"]) == ["vllm==0.34.0"]
    assert nox_globals["no_deps_requirements"](("unsloth",)) == ["unsloth==2026.10.9", "unsloth-zoo==2026.10.9"]
    assert nox_globals["no_deps_requirements"](()) == []

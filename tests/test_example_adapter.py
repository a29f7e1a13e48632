"""The worked example of a candidate's repository (docs/examples/tiny-kernels): its adapter conforms when run
from its own directory, its entry point resolves, a defect planted in it is caught; malformed plugins are
usage errors of one line; ``--install`` of ``nox -s conformance``; docs/gating.md's workflow is the example's."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from tests.conformance_run import ROOT, Run
from transformer_conformance.adapters.registry import (
    BUILTIN,
    ENTRY_POINT_GROUP,
    AdapterLoadError,
    import_path,
    known_names,
    load_adapter,
)

EXAMPLE = ROOT / "docs" / "examples" / "tiny-kernels"
ADAPTER = "tiny_kernels.conformance_adapter:TinyKernelsAdapter"


def run_from(cwd: Path, report_dir: Path, *args: str, path: tuple[Path, ...] = ()) -> Run:
    """``python -m transformer_conformance.conformance ARGS`` in ``cwd`` (the installed suite), on one process."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(map(str, path)), OMP_NUM_THREADS="1")
    env.pop("GITHUB_STEP_SUMMARY", None)
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "transformer_conformance.conformance",
            "-n",
            "0",
            "-q",
            "--report-dir",
            str(report_dir),
            *args,
        ],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
    )
    return Run(proc.returncode, proc.stdout, proc.stderr, report_dir)


def test_example_conforms_from_its_own_directory(tmp_path: Path) -> None:
    """The example's adapter, by import path from its directory: every RMSNorm and RoPE check passes."""
    run = run_from(EXAMPLE, tmp_path, "--adapter", ADAPTER, "--behaviour", "rms_norm,rope", "--dtype", "bfloat16")
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    checks = run.checks(adapter="tiny-kernels")
    assert {c["behaviour"] for c in checks} == {"rms_norm", "rope"}
    assert all(c["status"] == "passed" for c in checks), [c for c in checks if c["status"] != "passed"]
    (adapter,) = run.report["adapters"]
    assert adapter["spec"] == ADAPTER and adapter["conventions"]["rope_layout"] == "interleaved"
    assert (tmp_path / "report.md").read_text().startswith("# Conformance report")


def test_console_script_finds_the_candidate_in_the_current_directory(tmp_path: Path) -> None:
    """The ``transformer-conformance`` console script, uninstalled candidate, from the candidate's directory:
    the import path resolves there (as under ``python -m``), in the worker processes too."""
    exe = Path(sys.executable).parent / "transformer-conformance"
    env = dict(os.environ, OMP_NUM_THREADS="1")
    env.pop("PYTHONPATH", None)
    env.pop("GITHUB_STEP_SUMMARY", None)
    args = ["--adapter", ADAPTER, "--behaviour", "rms_norm", "--dtype", "float32", "-k", "forward"]
    proc = subprocess.run(
        [str(exe), "-n", "1", "-q", "--report-dir", str(tmp_path), *args],
        cwd=EXAMPLE,
        env=env,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert {c["status"] for c in Run(0, "", "", tmp_path).checks(adapter="tiny-kernels")} == {"passed"}


def test_planted_defect_in_a_copy_is_caught(tmp_path: Path) -> None:
    """ε moved out of the square root of a copy of the example fails rms_norm/forward; the copy's own pytest
    configuration and conftest (which would break any run that read them) are not the suite's."""
    copy = tmp_path / "repo"
    shutil.copytree(EXAMPLE / "tiny_kernels", copy / "tiny_kernels")
    norms = copy / "tiny_kernels" / "norms.py"
    correct = "torch.rsqrt(xf.pow(2).mean(dim=-1, keepdim=True) + eps)"
    assert correct in norms.read_text()
    norms.write_text(norms.read_text().replace(correct, "1.0 / (xf.pow(2).mean(dim=-1, keepdim=True).sqrt() + eps)"))
    (copy / "pyproject.toml").write_text('[tool.pytest.ini_options]\naddopts = "--no-such-option"\n')
    (copy / "conftest.py").write_text("raise SystemExit('the candidate repository conftest was loaded')\n")
    run = run_from(
        copy, tmp_path / "out", "--adapter", ADAPTER, "--behaviour=rms_norm", "--dtype=float32", "-k", "forward"
    )
    assert run.returncode == 1, run.stdout[-2000:] + run.stderr[-2000:]
    (forward,) = run.checks(check="rms_norm/forward")
    assert forward["status"] == "failed" and "should be" in forward["message"]


def _dist_info(site: Path, dist: str, entry_points: dict[str, str]) -> None:
    """An installed distribution's metadata, as pip writes it, declaring adapters in the suite's group."""
    info = site / f"{dist.replace('-', '_')}-0.1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 0.1.0\n")
    lines = [f"{name} = {target}" for name, target in entry_points.items()]
    (info / "entry_points.txt").write_text(f"[{ENTRY_POINT_GROUP}]\n" + "\n".join(lines) + "\n")


def test_example_entry_point_resolves(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The entry point the example's pyproject.toml declares makes ``--adapter tiny-kernels`` its adapter."""
    declared = tomllib.loads((EXAMPLE / "pyproject.toml").read_text())["project"]["entry-points"][ENTRY_POINT_GROUP]
    assert declared == {"tiny-kernels": ADAPTER}
    _dist_info(tmp_path, "tiny-kernels", declared)
    monkeypatch.syspath_prepend(str(EXAMPLE))
    monkeypatch.syspath_prepend(str(tmp_path))
    assert "tiny-kernels" in known_names()
    assert import_path("tiny-kernels") == ADAPTER
    adapter = load_adapter("tiny-kernels")
    assert adapter.name == "tiny-kernels" and set(adapter.capabilities) == {"rms_norm", "rope"}


BROKEN_PLUGIN = """
class BuildFails:
    def __init__(self):
        raise RuntimeError("no device found")

not_an_adapter = object()
"""
PLUGIN_IMPORT_FAILS = "import numpy\nimport tiny_kernels_native_ext  # a compiled extension that was not built\n"


@pytest.fixture
def broken_plugins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Installed plugins that are broken in the ways plugins break; the site directory they are in."""
    (tmp_path / "broken_plugin.py").write_text(BROKEN_PLUGIN)
    (tmp_path / "plugin_import_fails.py").write_text(PLUGIN_IMPORT_FAILS)
    _dist_info(
        tmp_path,
        "broken-plugins",
        {
            "missing-attr": "broken_plugin:Missing",
            "not-an-adapter": "broken_plugin:not_an_adapter",
            "build-fails": "broken_plugin:BuildFails",
            "import-fails": "plugin_import_fails:Adapter",
        },
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    return tmp_path


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("missing-attr", "adapter 'missing-attr': module 'broken_plugin' has no attribute 'Missing'"),
        ("not-an-adapter", "adapter 'not-an-adapter' is not an adapter: it has no name, conventions"),
        ("build-fails", "adapter 'build-fails': building it failed: RuntimeError: no device found"),
        (
            "import-fails",
            "adapter 'import-fails': cannot import 'plugin_import_fails': ModuleNotFoundError: "
            "No module named 'tiny_kernels_native_ext'",
        ),
    ],
)
def test_broken_plugin_is_one_line(broken_plugins: Path, name: str, expected: str) -> None:
    with pytest.raises(AdapterLoadError) as err:
        load_adapter(name)
    assert expected in str(err.value) and "\n" not in str(err.value)


def test_unknown_name_lists_plugins_apart(broken_plugins: Path) -> None:
    """An unknown name is answered with the built-in names and, apart from them, the installed plugins."""
    with pytest.raises(AdapterLoadError) as err:
        load_adapter("nope")
    builtin, _, plugins = str(err.value).partition("; installed plugins: ")
    assert f"built-in adapters: {', '.join(sorted(BUILTIN))}" in builtin and "missing-attr" not in builtin
    assert {"build-fails", "import-fails", "missing-attr", "not-an-adapter"} <= set(plugins.split("; ")[0].split(", "))


def test_broken_plugin_stops_the_run_with_status_4(broken_plugins: Path, tmp_path: Path) -> None:
    """Named on the command line, a plugin whose module fails to import ends the run at once: exit 4, one line."""
    run = run_from(tmp_path, tmp_path / "out", "--adapter", "import-fails", path=(broken_plugins,))
    assert run.returncode == 4, run.stdout[-1500:] + run.stderr[-1500:]
    errors = [line for line in run.stderr.splitlines() if line.startswith("ERROR:")]
    assert len(errors) == 1 and "No module named 'tiny_kernels_native_ext'" in errors[0], run.stderr
    assert "Traceback" not in run.stderr


def test_nox_install_option() -> None:
    """``--install`` is taken out of the pytest arguments (repeatable); paths are made absolute from where nox
    was run, requirements and URLs are left to pip."""
    noxfile = pytest.importorskip("noxfile")
    installs, rest = noxfile.take_install(
        [
            "--install",
            "docs/examples/tiny-kernels",
            "--adapter",
            "tiny-kernels",
            "--install=-e ../mypkg",
            "--install",
            "tiny-kernels==0.1.0",
            "--install",
            "tiny-kernels @ git+https://example.org/tiny-kernels@v1",
            "--dtype=float32",
        ],
        "/home/me/suite",
    )
    assert installs == [
        ["/home/me/suite/docs/examples/tiny-kernels"],
        ["-e", "/home/me/mypkg"],
        ["tiny-kernels==0.1.0"],
        ["tiny-kernels @ git+https://example.org/tiny-kernels@v1"],
    ]
    assert rest == ["--adapter", "tiny-kernels", "--dtype=float32"]
    with pytest.raises(ValueError, match="--install needs a path or requirement"):
        noxfile.take_install(["--adapter", "x", "--install"], "/")


def test_gating_doc_shows_the_example_workflow() -> None:
    """docs/gating.md's workflow is the example's file, word for word, and it is valid YAML."""
    workflow = (EXAMPLE / ".github" / "workflows" / "conformance.yml").read_text()
    blocks = re.findall(r"```yaml\n(.*?)```", (ROOT / "docs" / "gating.md").read_text(), flags=re.S)
    assert workflow in blocks
    yaml = pytest.importorskip("yaml")
    steps = yaml.safe_load(workflow)["jobs"]["conformance"]["steps"]
    assert any(s.get("run") == "nox -s conformance" for s in steps)


#: the first major version of each action that runs on Node 24 (GitHub retires the Node 20 ones in 2026)
NODE24 = {"actions/checkout": 5, "actions/setup-python": 6, "actions/upload-artifact": 6}


def test_the_workflow_is_current() -> None:
    """The example's workflow uses Node-24 actions, reads the repository only, caches pip, uploads the badge."""
    yaml = pytest.importorskip("yaml")
    workflow = yaml.safe_load((EXAMPLE / ".github" / "workflows" / "conformance.yml").read_text())
    assert workflow["permissions"] == {"contents": "read"}
    steps = workflow["jobs"]["conformance"]["steps"]
    used = {s["uses"].split("@")[0]: int(s["uses"].split("@v")[1]) for s in steps if "uses" in s}
    assert used.keys() == NODE24.keys() and all(used[a] >= v for a, v in NODE24.items()), used
    setup = next(s for s in steps if s.get("uses", "").startswith("actions/setup-python"))
    assert setup["with"]["cache"] == "pip"
    upload = next(s for s in steps if s.get("uses", "").startswith("actions/upload-artifact"))
    assert "conformance-report/badge.svg" in upload["with"]["path"]


#: the one placeholder: the suite's repository, which has no published address yet (the example's README says
#: what to put for OWNER); the pin it is used in until the first release
SUITE_REPOSITORY = "https://github.com/OWNER/transformer-conformance"


def test_no_placeholder_and_no_feature_called_future() -> None:
    """The example and the gating guide name a real pin and the expectation files that exist; the one
    placeholder is the suite's repository until its first release, which the README explains."""
    for path in [*EXAMPLE.rglob("*.py"), *EXAMPLE.rglob("*.md"), *EXAMPLE.rglob("*.yml"), ROOT / "docs" / "gating.md"]:
        text = path.read_text()
        assert "being designed" not in text, path
        for word in re.findall(r"\S*OWNER\S*", text):
            assert SUITE_REPOSITORY in word or word.strip("`:(),.") == "OWNER", (path, word)
    readme = (EXAMPLE / "README.md").read_text()
    assert "`OWNER` stands for the account that holds the suite's repository" in readme


def test_the_suite_comes_from_its_repository_until_the_release() -> None:
    """Until the suite is on PyPI, the example pins its repository at the release's tag, and shows the pinned
    release for after it; the README gives both and the local checkout, the gating guide both pins."""
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    noxfile = (EXAMPLE / "noxfile.py").read_text()
    match = re.search(r'^SUITE = "(.+)"$', noxfile, flags=re.M)
    assert match is not None
    suite = match.group(1)
    assert suite == f"transformer-conformance @ git+{SUITE_REPOSITORY}@v{version}"
    assert f'SUITE = "transformer-conformance=={version}"' in noxfile  # in the comment: the form after the release
    readme = (EXAMPLE / "README.md").read_text()
    local = "CONFORMANCE_SUITE=/path/to/transformer-conformance nox -s conformance"
    for form in (suite, local, f"transformer-conformance=={version}", "pip install /path/to/transformer-conformance"):
        assert form in readme, form
    gating = (ROOT / "docs" / "gating.md").read_text()
    assert suite in gating and f"transformer-conformance=={version}" in gating


@pytest.mark.slow
def test_a_copy_runs_by_its_readme(tmp_path: Path) -> None:
    """The example copied out of this repository runs as its README says: ``nox -s conformance`` (with
    CONFORMANCE_SUITE naming this checkout, as the README says for a checkout), exit 0 and a report."""
    nox = Path(sys.executable).parent / "nox"
    if not nox.exists():
        pytest.skip("nox is not installed in this environment")
    copy = tmp_path / "tiny-kernels"
    shutil.copytree(EXAMPLE, copy, ignore=shutil.ignore_patterns(".nox", ".hypothesis", ".benchmarks", "*-report"))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "GITHUB_STEP_SUMMARY"))}
    env.update(CONFORMANCE_SUITE=str(ROOT), PIP_CONSTRAINT=str(ROOT / "constraints" / "ci.txt"), OMP_NUM_THREADS="1")
    proc = subprocess.run(
        [str(nox), "-s", "conformance", "--", "--behaviour", "rms_norm", "--dtype", "float32", "-n", "1"],
        cwd=copy,
        env=env,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    report = json.loads((copy / "conformance-report" / "report.json").read_text())
    assert report["verdict"] == "conformant" and report["summary"]["passed"] > 0
    assert report["expectations"]["files"] == ["conformance-expectations.toml"]

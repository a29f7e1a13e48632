"""The GitHub Actions workflows (.github/workflows/ and the example's): each is a well-formed workflow; the CI
workflow runs .ci/run's steps in its order; the release workflow checks the distributions and publishes them
with PyPI's trusted publishing (docs/releasing.md). actionlint, where it is installed, has the last word."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
WORKFLOWS = sorted((ROOT / ".github" / "workflows").glob("*.y*ml"))
EXAMPLE_WORKFLOW = ROOT / "docs" / "examples" / "tiny-kernels" / ".github" / "workflows" / "conformance.yml"
ALL = [*WORKFLOWS, EXAMPLE_WORKFLOW]
#: the events a workflow of this project may name, and the keys a job and a step may have
EVENTS = {"push", "pull_request", "workflow_dispatch", "schedule", "release"}
JOB_KEYS = {
    "name", "needs", "if", "runs-on", "timeout-minutes", "strategy", "permissions", "environment", "env",
    "steps", "concurrency", "outputs", "defaults", "continue-on-error", "services", "container",
}  # fmt: skip
STEP_KEYS = {"name", "id", "if", "uses", "run", "with", "env", "shell", "timeout-minutes", "continue-on-error"}
PERMISSIONS = {
    "actions", "attestations", "checks", "contents", "deployments", "discussions", "id-token", "issues",
    "packages", "pages", "pull-requests", "repository-projects", "security-events", "statuses",
}  # fmt: skip
USES = re.compile(r"[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+(/[A-Za-z0-9_./-]+)?@[A-Za-z0-9_./-]+")


def load(path: Path) -> dict[str, Any]:
    yaml = pytest.importorskip("yaml")
    doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    assert isinstance(doc, dict), path
    if True in doc:  # YAML 1.1 reads the key `on` as true
        doc["on"] = doc.pop(True)
    return doc


def triggers(doc: dict[str, Any]) -> dict[str, Any]:
    on = doc["on"]
    if isinstance(on, str):
        return {on: None}
    if isinstance(on, list):
        return dict.fromkeys(on)
    return dict(on)


def steps(doc: dict[str, Any], job: str) -> list[dict[str, Any]]:
    return list(doc["jobs"][job]["steps"])


def runs(doc: dict[str, Any], job: str) -> list[str]:
    return [s["run"].strip() for s in steps(doc, job) if "run" in s]


@pytest.mark.parametrize("path", ALL, ids=lambda p: str(p.relative_to(ROOT)))
def test_each_workflow_is_well_formed(path: Path) -> None:
    """Name, events, read-only default permissions; each job runs somewhere, needs jobs that exist and has
    steps; each step either uses an action at a ref or runs a command; expressions are closed."""
    text = path.read_text(encoding="utf-8")
    doc = load(path)
    assert isinstance(doc.get("name"), str) and doc["name"], path
    assert set(triggers(doc)) and set(triggers(doc)) <= EVENTS, triggers(doc)
    assert doc.get("permissions") == {"contents": "read"}, "the workflow's default token reads the repository only"
    assert text.count("${{") == text.count("}}"), "an expression is not closed"
    jobs = doc["jobs"]
    assert isinstance(jobs, dict) and jobs
    for name, job in jobs.items():
        assert set(job) <= JOB_KEYS, (name, set(job) - JOB_KEYS)
        assert job.get("runs-on"), name
        needs = job.get("needs", [])
        assert set([needs] if isinstance(needs, str) else needs) <= set(jobs) - {name}, (name, needs)
        assert set(job.get("permissions", {})) <= PERMISSIONS, job.get("permissions")
        assert job["steps"], name
        for step in job["steps"]:
            assert set(step) <= STEP_KEYS, (name, step)
            assert ("uses" in step) != ("run" in step), f"{name}: a step uses an action or runs a command: {step}"
            if "uses" in step:
                assert USES.fullmatch(step["uses"]), step["uses"]
            else:
                assert isinstance(step["run"], str) and step["run"].strip(), step
                assert "with" not in step, step


def test_ci_runs_the_steps_of_ci_run() -> None:
    """On pushes and pull requests, the nox sessions of .ci/run in its order, with the same constraints file."""
    doc = load(ROOT / ".github" / "workflows" / "ci.yml")
    on = triggers(doc)
    assert "pull_request" in on and "push" in on
    script = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    sessions = re.findall(r"^nox -s (\S+)$", script, flags=re.M)
    assert sessions[:3] == ["lint", "wheel", "tests"] and "conformance" in sessions
    (job,) = doc["jobs"]
    assert [r for r in runs(doc, job) if r.startswith("nox ")] == [f"nox -s {s}" for s in sessions]
    assert 'PIP_CONSTRAINT="$PWD/constraints/ci.txt"' in script
    assert doc["env"]["PIP_CONSTRAINT"] == "${{ github.workspace }}/constraints/ci.txt"
    assert "python -m pip install nox" in runs(doc, job)


def test_release_builds_checks_and_publishes_with_trusted_publishing() -> None:
    """A version tag builds the sdist and the wheel, checks them (.ci/check_dist.py: twine, the wheel in a clean
    virtualenv running --adapter numpy), and only then publishes them, with an OIDC token and no password."""
    doc = load(ROOT / ".github" / "workflows" / "release.yml")
    assert triggers(doc) == {"push": {"tags": ["v*"]}}
    build, publish = doc["jobs"]["build"], doc["jobs"]["publish"]
    assert "permissions" not in build  # the workflow's contents: read
    commands = runs(doc, "build")
    assert "python -m pip install build twine" in commands and "python -m build" in commands
    check = 'python .ci/check_dist.py dist --tag "${GITHUB_REF_NAME}"'
    assert check in commands and commands.index("python -m build") < commands.index(check)
    assert (ROOT / ".ci" / "check_dist.py").is_file()
    upload = next(s for s in steps(doc, "build") if s.get("uses", "").startswith("actions/upload-artifact@"))
    assert upload["with"]["name"] == "dist" and upload["with"]["path"] == "dist/"

    assert publish["needs"] == "build"
    assert publish["permissions"] == {"id-token": "write"}
    assert publish["environment"]["name"] == "pypi"
    used = [s["uses"] for s in publish["steps"]]
    assert used[0].startswith("actions/download-artifact@") and publish["steps"][0]["with"]["name"] == "dist"
    assert used[-1] == "pypa/gh-action-pypi-publish@release/v1"
    text = (ROOT / ".github" / "workflows" / "release.yml").read_text(encoding="utf-8")
    assert "password" not in text and "secrets." not in text and "PYPI_API_TOKEN" not in text
    for name, job in doc["jobs"].items():
        if name != "publish":
            assert "id-token" not in job.get("permissions", {}), name


def test_the_release_check_reads_the_version_and_the_changelog() -> None:
    """.ci/check_dist.py takes the version from pyproject.toml; the changelog has an Unreleased section, and the
    release policy is documented where the README says."""
    import runpy
    import tomllib

    check = runpy.run_path(str(ROOT / ".ci" / "check_dist.py"))
    version = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["version"]
    assert check["project_version"]() == version
    assert f"{check['PACKAGE']}/docs/releasing.md" in check["required_in_wheel"]()
    assert "CHANGELOG.md" in check["required_in_sdist"]()
    changelog = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    assert changelog.startswith("# Changelog") and "## [Unreleased]" in changelog
    assert "docs/releasing.md" in (ROOT / "README.md").read_text(encoding="utf-8")
    policy = (ROOT / "docs" / "releasing.md").read_text(encoding="utf-8")
    assert "trusted publishing" in policy and "patch" in policy and "minor" in policy


@pytest.mark.skipif(shutil.which("actionlint") is None, reason="actionlint is not installed")
def test_actionlint() -> None:
    proc = subprocess.run(["actionlint", *map(str, ALL)], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr

"""What judged a run (reports/provenance.py): ``--version`` and the report name the suite's exact version and,
for a ``git+`` install (PEP 610's direct_url.json) or a checkout, its commit; a wheel's install names none."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from importlib.metadata import version
from pathlib import Path

import pytest

from transformer_conformance.reports import provenance
from transformer_conformance.reports.markdown import render_markdown
from transformer_conformance.reports.schema import load_schema, validate
from transformer_conformance.reports.writer import build_report

ROOT = Path(__file__).resolve().parent.parent
COMMIT = "0123456789abcdef0123456789abcdef01234567"
needs_git = pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")


def _git(cwd: Path, *args: str) -> str:
    cmd = ["git", "-c", "user.name=t", "-c", "user.email=t@example.invalid", "-c", "init.defaultBranch=main"]
    return subprocess.run([*cmd, *args], cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


def _dist(site: Path, name: str, direct_url: dict[str, object] | None) -> str:
    """An installed distribution's metadata as pip writes it, with its direct_url.json (PEP 610)."""
    info = site / f"{name.replace('-', '_')}-9.8.7.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 9.8.7\n")
    if direct_url is not None:
        (info / "direct_url.json").write_text(json.dumps(direct_url))
    return name


def _suite_tree(root: Path) -> Path:
    """The files by which a directory is recognised as a checkout of the suite."""
    (root / "reports").mkdir(parents=True)
    (root / "reports" / "provenance.py").write_text("# the suite\n")
    (root / "pyproject.toml").write_text('[project]\nname = "transformer-conformance"\n')
    return root


def test_version_option_names_the_version_and_this_checkouts_commit() -> None:
    """``--version`` from the project's checkout: the installed version, then HEAD's commit when this is a git
    work tree (a copy without .git names only the version)."""
    proc = subprocess.run(
        [sys.executable, "-m", "transformer_conformance.conformance", "--version"],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stderr
    line = proc.stdout.strip()
    assert line.count("\n") == 0 and line.startswith(f"transformer-conformance {version('transformer-conformance')}")
    here = provenance.current()
    if here.commit is None:
        assert line.startswith(f"transformer-conformance {here.version} (pytest "), line
    else:
        assert here.source == "checkout" and here.commit == _git(ROOT, "rev-parse", "HEAD")
        assert f", commit {here.commit}" in line
    assert "hypothesis " in line and "python " in line


def test_git_install_records_the_commit_pip_resolved(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``pip install "transformer-conformance @ git+https://...@v9.8.7"``: the commit of direct_url.json."""
    name = _dist(
        tmp_path,
        "tc-from-git",
        {"url": "https://git.example.invalid/suite", "vcs_info": {"vcs": "git", "commit_id": COMMIT.upper(),
                                                                 "requested_revision": "v9.8.7"}},
    )  # fmt: skip
    monkeypatch.syspath_prepend(str(tmp_path))
    got = provenance.read(root=tmp_path / "not-a-checkout", dist_name=name)
    assert got == provenance.Provenance("9.8.7", COMMIT, False, "git")
    assert got.describe() == f"9.8.7, commit {COMMIT}"
    assert got.report_fields() == {"suite_version": "9.8.7", "suite_commit": COMMIT}


@pytest.mark.parametrize(
    "direct_url",
    [
        None,  # a wheel from an index
        {"url": "file:///src/suite", "dir_info": {}},  # a copy of a directory
        {"url": "file:///w/tc-9.8.7-py3-none-any.whl", "archive_info": {}},
        {"url": "https://git.example.invalid/suite", "vcs_info": {"vcs": "git", "commit_id": "v1.0"}},
    ],
)
def test_other_installs_record_no_commit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, direct_url: dict[str, object] | None
) -> None:
    name = _dist(tmp_path, "tc-plain", direct_url)
    monkeypatch.syspath_prepend(str(tmp_path))
    got = provenance.read(root=tmp_path / "site" / "transformer_conformance", dist_name=name)
    assert got == provenance.Provenance("9.8.7") and got.describe() == "9.8.7"
    assert got.report_fields() == {"suite_version": "9.8.7"}


def test_unreadable_direct_url_is_no_commit() -> None:
    assert provenance.direct_url_commit("{not json") is None
    assert provenance.direct_url_commit("[1]") is None
    assert provenance.direct_url_commit(json.dumps({"vcs_info": {"commit_id": COMMIT}})) == COMMIT


@needs_git
def test_a_checkout_records_head_and_whether_it_is_modified(tmp_path: Path) -> None:
    repo = _suite_tree(tmp_path / "suite")
    _git(repo, "init", "-q")
    _git(repo, "add", ".")
    _git(repo, "commit", "-q", "-m", "one")
    head = _git(repo, "rev-parse", "HEAD")
    assert provenance.checkout_commit(repo) == (head, False)
    (repo / "untracked.txt").write_text("not the suite's\n")  # untracked files do not count
    assert provenance.checkout_commit(repo) == (head, False)
    (repo / "reports" / "provenance.py").write_text("# changed\n")
    assert provenance.checkout_commit(repo) == (head, True)
    got = provenance.read(root=repo, dist_name="no-such-distribution-here")
    assert got == provenance.Provenance("unknown", head, True, "checkout")
    assert got.report_fields() == {"suite_version": "unknown", "suite_commit": head, "suite_modified": True}
    assert got.describe() == f"unknown, commit {head}, modified"


@needs_git
def test_installed_files_inside_a_work_tree_are_no_checkout(tmp_path: Path) -> None:
    """A virtualenv inside some repository: the installed package is not the top of that work tree, and a
    directory that is no work tree (an unpacked sdist) has no commit either."""
    repo = tmp_path / "project"
    repo.mkdir()
    _git(repo, "init", "-q")
    inside = _suite_tree(repo / ".venv" / "site-packages" / "transformer_conformance")
    assert provenance.checkout_commit(inside) is None
    assert provenance.checkout_commit(_suite_tree(tmp_path / "unpacked")) is None
    assert provenance.checkout_commit(tmp_path / "nothing-here") is None


def test_the_report_records_the_provenance_and_validates() -> None:
    """build_report's top-level fields are provenance.current()'s; the schema takes them (and refuses a commit
    that is not a full hexadecimal id, or suite_modified false); report.md names the commit."""
    pytest.importorskip("jsonschema")
    report = build_report([], [], "ci", None, time.time(), 5, unchecked=["x"])
    here = provenance.current()
    assert report["suite_version"] == here.version
    assert report.get("suite_commit") == here.commit and report.get("suite_modified", False) == here.modified
    assert validate(report) == []
    for field, value in {"suite_commit": COMMIT, "suite_modified": True}.items():
        assert validate({**report, field: value}) == []
    bad = [
        {**report, "suite_commit": "v0.1.0"},
        {**report, "suite_commit": COMMIT[:12]},
        {**report, "suite_modified": False},
    ]
    for doc in bad:
        assert validate(doc), doc
    assert set(load_schema()["properties"]) >= {"suite_version", "suite_commit", "suite_modified"}
    md = render_markdown({**report, "suite_version": "9.8.7", "suite_commit": COMMIT, "suite_modified": True})
    assert f"Suite 9.8.7 (commit `{COMMIT}`, modified), schema 2" in md
    plain = {k: v for k, v in report.items() if k not in ("suite_commit", "suite_modified")}
    assert f"Suite {report['suite_version']}, schema 2" in render_markdown({**plain})

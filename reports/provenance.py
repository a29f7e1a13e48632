"""What judged a run: the suite's exact version and, where it can be known, the commit it was built from.

``transformer-conformance --version`` prints it and every report records it (``suite_version``,
``suite_commit``, ``suite_modified``; docs/report.md), so a published report names the code that produced it.

The commit comes from, in this order:

* a checkout: the suite imported from its repository's work tree (an editable install, ``PYTHONPATH``, a
  run inside the repository) — ``git rev-parse HEAD`` there, and whether tracked files differ from it
  (``suite_modified``);
* a ``git+`` install (``pip install "transformer-conformance @ git+https://...@v0.1.0"``) — the commit pip
  resolved, which it records in the distribution's ``direct_url.json`` (PEP 610, ``vcs_info.commit_id``).

A wheel or an sdist from an index or a file, or a copy of a directory, records no commit: the version is then
the whole of what the report can say, and releases are what a gate pins (docs/releasing.md).
"""

from __future__ import annotations

import functools
import json
import re
import subprocess
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, distribution
from pathlib import Path

#: the distribution's name on the package index
DISTRIBUTION = "transformer-conformance"
#: a full commit id: SHA-1 (40 hex digits) or SHA-256 (64)
COMMIT = re.compile(r"[0-9a-f]{40}(?:[0-9a-f]{24})?")
#: the repository's root, when this module is imported from a checkout (``<root>/reports/provenance.py``)
_CHECKOUT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Provenance:
    """The suite's version; the commit it comes from (None when unknown); whether a checkout it runs from has
    uncommitted changes to tracked files (only ever true for a checkout); where the commit was read."""

    version: str
    commit: str | None = None
    modified: bool = False
    source: str | None = None  # "checkout" or "git" (a git+ install), with a commit

    def describe(self) -> str:
        """``0.1.0``, ``0.1.0, commit 0123...`` or ``0.1.0, commit 0123..., modified``."""
        if self.commit is None:
            return self.version
        return f"{self.version}, commit {self.commit}" + (", modified" if self.modified else "")

    def report_fields(self) -> dict[str, object]:
        """The report's top-level fields: ``suite_version``, and ``suite_commit`` / ``suite_modified`` when known."""
        fields: dict[str, object] = {"suite_version": self.version}
        if self.commit is not None:
            fields["suite_commit"] = self.commit
            if self.modified:
                fields["suite_modified"] = True
        return fields


def _git(root: Path, *args: str) -> str | None:
    # --no-optional-locks: a read, never a write of the repository's index (git status would refresh it)
    cmd = ["git", "--no-optional-locks", "-C", str(root), *args]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=20, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return proc.stdout.strip() if proc.returncode == 0 else None


def checkout_commit(root: Path = _CHECKOUT) -> tuple[str, bool] | None:
    """(HEAD's commit, whether tracked files differ from it) when ``root`` is the top of a git work tree that
    holds this suite's sources (``reports/provenance.py`` and a ``pyproject.toml``); None otherwise — an
    installed wheel's files are not a work tree's, even inside one (a virtualenv in a repository)."""
    if not ((root / "pyproject.toml").is_file() and (root / "reports" / "provenance.py").is_file()):
        return None
    top = _git(root, "rev-parse", "--show-toplevel")
    if top is None or Path(top).resolve() != root.resolve():
        return None
    head = _git(root, "rev-parse", "HEAD")
    if head is None or not COMMIT.fullmatch(head):
        return None
    status = _git(root, "status", "--porcelain", "--untracked-files=no")
    return head, bool(status)


def direct_url_commit(direct_url: str | None) -> str | None:
    """The commit of a VCS install from the text of its ``direct_url.json`` (PEP 610), or None."""
    if not direct_url:
        return None
    try:
        info = json.loads(direct_url)
    except ValueError:
        return None
    vcs = info.get("vcs_info") if isinstance(info, dict) else None
    commit = vcs.get("commit_id") if isinstance(vcs, dict) else None
    return commit.lower() if isinstance(commit, str) and COMMIT.fullmatch(commit.lower()) else None


def read(root: Path = _CHECKOUT, dist_name: str = DISTRIBUTION) -> Provenance:
    """The provenance of the suite imported now (see the module's docstring); ``root`` and ``dist_name`` for
    tests."""
    try:
        dist = distribution(dist_name)
    except PackageNotFoundError:
        version, direct_url = "unknown", None
    else:
        version, direct_url = dist.version, dist.read_text("direct_url.json")
    checkout = checkout_commit(root)
    if checkout is not None:
        return Provenance(version, checkout[0], checkout[1], "checkout")
    commit = direct_url_commit(direct_url)
    if commit is not None:
        return Provenance(version, commit, False, "git")
    return Provenance(version)


@functools.cache
def current() -> Provenance:
    """:func:`read`, once per process."""
    return read()

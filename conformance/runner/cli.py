"""``transformer-conformance [OPTIONS]`` (or ``python -m transformer_conformance.conformance``): run the
installed suite's checks from any directory, as a candidate's own repository does.

The checks are pytest tests inside this package (``conformance/checks``); the suite's options
(``--adapter``, ``--dtype``, ``--behaviour``, ``--report-dir``...) come from its plugin, loaded with ``-p``
so that pytest knows them before it reads the command line. This runs
``pytest <the checks> -n auto OPTIONS`` and exits with pytest's status (0 conformant, 1 non-conformant,
2 interrupted, 4 usage error, 5 nothing ran).

The current directory's pytest configuration (its pytest.ini, pyproject.toml or conftest.py) is not read:
the run is the suite's alone. Relative paths (``--report-dir``, default ``reports/out``) and the candidate's
import path are the current directory's. Choose checks with ``--behaviour`` and ``-k``; a check module may
also be named by its file name (``test_rmsnorm.py``). ``--docs [TOPIC]`` prints the documentation installed
with the suite (the ``docs/TOPIC.md`` files that messages and reports name).
"""

from __future__ import annotations

import os
import sys
import textwrap
from pathlib import Path

#: The package that holds the checks, the harness and this runner.
PACKAGE_DIR = Path(__file__).resolve().parent.parent
#: The check modules, one per behaviour.
CHECKS_DIR = PACKAGE_DIR / "checks"
#: The run's pytest configuration; ``-c`` makes pytest read it instead of looking for one.
CONFIG = Path(__file__).resolve().parent / "run.ini"
#: The pytest plugin that turns the checks into a conformance run.
PLUGIN = "transformer_conformance.conformance.runner.plugin"

#: One intra-op thread per worker process: the checks run tiny tensors.
ONE_THREAD = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


def has_n(args: list[str]) -> bool:
    """Whether the arguments choose the number of pytest-xdist workers themselves."""
    return any(
        a == "-n" or a.startswith(("-n=", "--numprocesses")) or (a.startswith("-n") and a[2:].isdigit()) for a in args
    )


def has_dist(args: list[str]) -> bool:
    """Whether the arguments choose pytest-xdist's distribution mode themselves."""
    return any(a == "-d" or a == "--dist" or a.startswith("--dist=") or a == "--distload" for a in args)


def check_module(arg: str) -> str | None:
    """The path of the check module ``arg`` names (``test_rmsnorm.py``, ``conformance/test_rmsnorm.py``,
    optionally with ``::test_name``), or None if it names none."""
    name, sep, rest = arg.partition("::")
    path = CHECKS_DIR / Path(name).name
    if not name.endswith(".py") or not Path(name).name.startswith("test_") or not path.is_file():
        return None
    return f"{path}{sep}{rest}"


def pytest_args(args: list[str]) -> list[str]:
    """The pytest command line for the given options: this package's checks, configured by it alone."""
    modules = [m for m in map(check_module, args) if m is not None]
    rest = [a for a in args if check_module(a) is None]
    isolated = ["-c", str(CONFIG), "--rootdir", str(CHECKS_DIR), "--confcutdir", str(CHECKS_DIR), "-p", PLUGIN]
    workers = [] if has_n(rest) else ["-n", "auto"]
    # the checks of one program in one worker (scheduling.py), unless the caller chooses a distribution
    grouped = [] if has_dist(rest) else ["--dist", "loadgroup"]
    return [*(modules or [str(CHECKS_DIR)]), *isolated, *workers, *grouped, *rest]


def version() -> str:
    """This suite's version — with the commit it comes from, for a ``git+`` install or a checkout
    (reports/provenance.py; the report records the same) — and the versions that decide how it runs."""
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as dist_version

    from transformer_conformance.reports import provenance

    def v(name: str) -> str:
        try:
            return dist_version(name)
        except PackageNotFoundError:
            return "not installed"

    return (
        f"transformer-conformance {provenance.current().describe()} (pytest {v('pytest')}, "
        f"hypothesis {v('hypothesis')}, pytest-xdist {v('pytest-xdist')}, python {sys.version.split()[0]})"
    )


class _Options:
    """Collects the plugin's options as pytest's parser would, to print them."""

    def __init__(self) -> None:
        self.options: list[tuple[str, str, str]] = []

    def getgroup(self, *args: object, **kw: object) -> _Options:
        return self

    def addoption(self, *names: str, **kw: object) -> None:
        metavar = str(kw.get("metavar", "")) if kw.get("action") not in ("store_true",) else ""
        self.options.append((", ".join(names), metavar, str(kw.get("help", ""))))


def usage() -> str:
    """``--help``: the suite's own options first; pytest's are one option away."""
    from transformer_conformance.conformance.runner import plugin

    collected = _Options()
    plugin.pytest_addoption(collected)  # type: ignore[arg-type]
    lines = [
        "usage: transformer-conformance [OPTIONS]",
        "",
        "Check transformer building blocks against the float64 oracle and write the report (docs/report.md).",
        "Every docs/TOPIC.md named in messages and reports is installed: --docs TOPIC prints it.",
        "Exit status: 0 conformant (or only known failures), 1 non-conformant, 2 interrupted, 4 usage error,",
        "5 nothing checked (no check of some candidate ran).",
        "",
        "suite options:",
    ]
    for names, metavar, text in collected.options:
        head = f"  {names} {metavar}".rstrip()
        lines.append(head)
        lines += [f"      {part}" for part in textwrap.wrap(text, 96)]
    lines += [
        "",
        "often used pytest options:",
        "  -n N                  worker processes (default: auto, one per core; 0: none)",
        "  --dist MODE           how checks go to workers (default: loadgroup, an operation's checks in a dtype",
        "                        together, so a compiled program is built once a run)",
        "  -k EXPRESSION         only the checks whose names match",
        "  -q, -v                less or more output",
        "  --hypothesis-profile=NAME   ci (default, derandomised), dev, thorough",
        "  --hypothesis-seed=N   with a random profile, the seed",
        "  test_rmsnorm.py       only the checks of this module (a file name of conformance/checks)",
        "",
        "  --docs [TOPIC]        the suite's documents (docs/TOPIC.md in messages and reports), or one of them",
        "  --version             the suite's version (and commit, from git) and the versions it runs with",
        "  --help-pytest         every pytest option",
    ]
    return "\n".join(lines) + "\n"


def print_docs(rest: list[str]) -> int:
    """``--docs``: list the shipped documents; ``--docs TOPIC``: print one (exit 4 for an unknown topic)."""
    from transformer_conformance.conformance.runner import docs

    if not rest:
        print(docs.listing(), end="")
        return 0
    try:
        text = docs.show(rest[0])
    except KeyError as exc:
        print(f"transformer-conformance: {exc.args[0]}", file=sys.stderr)
        return 4
    print(text, end="" if text.endswith("\n") else "\n")
    return 0


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else list(argv)
    if "--version" in args or "-V" in args:
        print(version())
        return 0
    if "--help" in args or "-h" in args:
        print(usage(), end="")
        return 0
    docs_at = [i for i, a in enumerate(args) if a == "--docs" or a.startswith("--docs=")]
    if docs_at:
        i = docs_at[0]
        given = args[i].partition("=")[2]
        after = args[i + 1 : i + 2]
        return print_docs([given] if given else [a for a in after if not a.startswith("-")])
    args = ["--help" if a == "--help-pytest" else a for a in args]

    import pytest

    for key, value in ONE_THREAD.items():
        os.environ.setdefault(key, value)
    # the candidate's import path is the current directory's, as under ``python -m`` (xdist's workers get the
    # same sys.path)
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    return int(pytest.main(pytest_args(args)))

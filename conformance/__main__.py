"""``python -m conformance [OPTIONS]`` (or ``transformer-conformance [OPTIONS]``): run the installed suite's
checks from any directory, as a candidate's own repository does.

The checks are pytest tests inside this package, and their options (``--adapter``, ``--dtype``,
``--behaviour``, ``--report-dir``...) come from its conftest, which pytest loads only when this package's
directory is collected as a path: ``pytest --pyargs conformance`` does not see them. This runs
``pytest <this package's directory> -n auto OPTIONS`` and exits with pytest's status (0 conformant,
1 non-conformant, 2 interrupted, 4 usage error, 5 nothing ran).

The current directory's pytest configuration (its pytest.ini, pyproject.toml or conftest.py) is not read:
the run is the suite's alone. Relative paths (``--report-dir``, default ``reports/out``) and the candidate's
import path are the current directory's. Choose checks with ``--behaviour`` and ``-k``, not with paths.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent
#: The run's pytest configuration; ``-c`` makes pytest read it instead of looking for one.
CONFIG = PACKAGE_DIR / "run.ini"

#: One intra-op thread per worker process (as ``nox -s conformance`` runs): the checks run tiny tensors.
ONE_THREAD = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


def has_n(args: list[str]) -> bool:
    """Whether the arguments choose the number of pytest-xdist workers themselves."""
    return any(
        a == "-n" or a.startswith(("-n=", "--numprocesses")) or (a.startswith("-n") and a[2:].isdigit()) for a in args
    )


def pytest_args(args: list[str]) -> list[str]:
    """The pytest command line for the given options: this package's checks, configured by it alone."""
    isolated = ["-c", str(CONFIG), "--rootdir", str(PACKAGE_DIR), "--confcutdir", str(PACKAGE_DIR)]
    workers = [] if has_n(args) else ["-n", "auto"]
    return [str(PACKAGE_DIR), *isolated, *workers, *args]


def main(argv: list[str] | None = None) -> int:
    import pytest

    for key, value in ONE_THREAD.items():
        os.environ.setdefault(key, value)
    return int(pytest.main(pytest_args(sys.argv[1:] if argv is None else list(argv))))


if __name__ == "__main__":
    sys.exit(main())

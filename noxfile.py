"""Sessions: ``conformance`` (check adapters, write the report), ``tests`` (the project's own tests),
``lint`` (ruff and mypy), ``bench`` (how long the CI-profile conformance run takes), ``mutants`` (the suite
against the catalogue of defective implementations: every one must be caught).

Arguments after ``--`` go to pytest, so every conformance option works there:
``nox -s conformance -- --adapter torch --report-dir out/``.
"""

from __future__ import annotations

import nox

nox.options.sessions = ["tests"]
nox.options.reuse_existing_virtualenvs = True

PYTHON = "3.11"


def install(session: nox.Session, *extras: str) -> None:
    """Install the project (editable) with the given extras. Set PIP_CONSTRAINT to pin versions, as the
    project's CI does with constraints/ci.txt."""
    spec = f".[{','.join(extras)}]" if extras else "."
    session.install("-e", spec)


def _has_n(args: list[str]) -> bool:
    return any(
        a == "-n" or a.startswith(("-n=", "--numprocesses")) or (a.startswith("-n") and a[2:].isdigit()) for a in args
    )


@nox.session(python=PYTHON)
def conformance(session: nox.Session) -> None:
    """Run the conformance checks (default adapters: numpy, torch) and write report.json / report.md."""
    install(session, "torch")
    args = list(session.posargs)
    if not _has_n(args):
        args = ["-n", "auto", *args]
    session.run("pytest", "conformance", "-p", "no:cacheprovider", *args)


@nox.session(python=PYTHON)
def tests(session: nox.Session) -> None:
    """The project's own tests: oracle vs finite differences, planted defects caught, report and CLI."""
    install(session, "torch", "dev")
    session.run("pytest", "tests", *session.posargs)


@nox.session(python=PYTHON)
def lint(session: nox.Session) -> None:
    install(session, "torch", "dev")
    session.run("ruff", "check", ".")
    session.run("mypy", "reference", "adapters", "conformance", "reports", "benchmarks", "mutants")


@nox.session(python=PYTHON)
def bench(session: nox.Session) -> None:
    """Time the CI-profile conformance run of the torch adapter (a benchmark, never a test)."""
    install(session, "torch")
    session.run("python", "benchmarks/bench_conformance.py", *session.posargs)


@nox.session(python=PYTHON)
def mutants(session: nox.Session) -> None:
    """Run the conformance checks against every mutant of mutants/catalogue.py; fails if one survives.
    Writes mutants.json and mutants.md to reports/out/mutants/ (``-- --out DIR`` elsewhere)."""
    install(session, "torch")
    session.run("python", "mutants/run.py", *session.posargs)

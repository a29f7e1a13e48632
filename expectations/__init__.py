"""The known library defects of the built-in adapters, as expectation files (docs/expectations.md), installed
with the suite: ``--expectations builtin`` reads every file that names an adapter of the run,
``--expectations builtin:jax`` one of them."""

from __future__ import annotations

from pathlib import Path

#: where the files are, in the tree or installed
DIRECTORY = Path(__file__).resolve().parent


def files() -> dict[str, Path]:
    """name (the file's stem) -> path, for every built-in expectation file."""
    return {p.stem: p for p in sorted(DIRECTORY.glob("*.toml"))}

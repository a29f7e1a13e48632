"""What an installed user gets: the built-in expectation files the README tells them to pass, readable by name
from the installed package, the documents messages and reports point at, the project's address and the license."""

from __future__ import annotations

import re
from importlib.metadata import files, metadata
from pathlib import Path

import pytest

import transformer_conformance
from transformer_conformance.conformance.runner import cli, docs
from transformer_conformance.conformance.runner.expectations import ExpectationError, load, resolve
from transformer_conformance.expectations import files as builtin_files

ROOT = Path(__file__).resolve().parent.parent


def test_the_expectation_files_are_installed() -> None:
    shipped = builtin_files()
    assert set(shipped) == {p.stem for p in (ROOT / "expectations").glob("*.toml")} >= {"jax", "hf", "liger", "flax"}
    for name, path in shipped.items():
        assert path.read_text() == (ROOT / "expectations" / f"{name}.toml").read_text()


def test_builtin_names_resolve() -> None:
    ((path, shown),) = resolve("builtin:jax", Path("/nowhere"), ["numpy"])
    assert shown == "builtin:jax" and load(path)
    chosen = resolve("builtin", Path("/nowhere"), ["hf-llama", "liger-none"])
    assert sorted(shown for _, shown in chosen) == ["builtin:hf", "builtin:liger"]
    assert resolve("builtin", Path("/nowhere"), ["numpy"]) == []
    assert resolve("mine.toml", Path("/repo"), ["numpy"]) == [(Path("/repo/mine.toml"), "mine.toml")]
    with pytest.raises(
        ExpectationError, match=r"no built-in expectation file 'nope'; the suite has (.+, )?flax, hf, jax"
    ):
        resolve("builtin:nope", Path("/"), [])


def test_the_license_is_installed() -> None:
    names = [str(f) for f in files("transformer-conformance") or []]
    assert any(n.endswith("LICENSE") for n in names), names
    assert (ROOT / "LICENSE").read_text().lstrip().startswith("Apache License")


def test_the_documents_are_installed() -> None:
    shipped = docs.topics()
    assert set(shipped) == {p.stem for p in (ROOT / "docs").glob("*.md")} >= {"report", "tolerance", "gating"}
    for name, doc in shipped.items():
        assert doc.read_text(encoding="utf-8") == (ROOT / "docs" / f"{name}.md").read_text(encoding="utf-8")


def test_every_document_the_installed_suite_names_is_installed() -> None:
    """Messages, option help and reports say ``docs/TOPIC.md``: each is a document ``--docs TOPIC`` prints."""
    named: set[str] = set()
    for root in transformer_conformance.__path__:
        for source in Path(root).rglob("*.py"):
            named |= set(re.findall(r"docs/([a-z0-9-]+)\.md", source.read_text(encoding="utf-8")))
    assert named >= {"report", "adapter-contract", "expectations", "tolerance"}
    assert named <= set(docs.topics()), sorted(named - set(docs.topics()))


@pytest.mark.parametrize("argv", [["--docs", "report"], ["--docs=docs/report.md"], ["-q", "--docs", "report.md"]])
def test_docs_prints_a_document(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(argv) == 0
    assert capsys.readouterr().out == (ROOT / "docs" / "report.md").read_text(encoding="utf-8")


def test_docs_lists_the_documents_and_refuses_an_unknown_one(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["--docs"]) == 0
    listing = capsys.readouterr().out
    assert "tolerance" in listing and "read one with --docs TOPIC" in listing
    assert cli.main(["--docs", "nope"]) == 4
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "no document 'nope'; the suite has adapter-contract" in err


def test_the_project_has_an_address() -> None:
    urls = metadata("transformer-conformance").get_all("Project-URL") or []
    assert any(u.startswith("Homepage, https://") for u in urls), urls

"""The documentation that ships in the wheel: ``transformer-conformance --docs [TOPIC]``.

Messages and reports name a document as ``docs/TOPIC.md`` (its path in the source tree); an installed user
reads the same file with ``transformer-conformance --docs TOPIC``, and lists them all with ``--docs``.
"""

from __future__ import annotations

from importlib.resources import files
from importlib.resources.abc import Traversable

#: The package the ``docs/*.md`` files install into.
DOCS_PACKAGE = "transformer_conformance.docs"


def topics() -> dict[str, Traversable]:
    """Each shipped document by topic (its file name without ``.md``)."""
    root = files(DOCS_PACKAGE)
    shipped = sorted((f for f in root.iterdir() if f.name.endswith(".md")), key=lambda f: f.name)
    return {f.name.removesuffix(".md"): f for f in shipped}


def first_line(doc: Traversable) -> str:
    """The document's title, without its markdown heading marks."""
    for line in doc.read_text(encoding="utf-8").splitlines():
        if line.strip():
            return line.lstrip("#").strip()
    return ""


def listing() -> str:
    """``--docs``: every topic with its title, and how to read one."""
    docs = topics()
    width = max(map(len, docs), default=0)
    lines = ["documents (docs/TOPIC.md in messages and reports; read one with --docs TOPIC):", ""]
    lines += [f"  {name:<{width}}  {first_line(doc)}" for name, doc in docs.items()]
    return "\n".join(lines) + "\n"


def show(topic: str) -> str:
    """The text of one document; ``topic`` may be given as ``report``, ``report.md`` or ``docs/report.md``."""
    name = topic.removeprefix("docs/").removesuffix(".md")
    docs = topics()
    if name not in docs:
        raise KeyError(f"no document {topic!r}; the suite has {', '.join(docs)}")
    return docs[name].read_text(encoding="utf-8")

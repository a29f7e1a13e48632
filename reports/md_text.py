"""Text from outside the suite (an adapter's name, an expectation's reason) written as plain text in Markdown."""

from __future__ import annotations

import re

#: characters Markdown or HTML would read as markup (a link, a tag, a table cell, code, emphasis) in a candidate's
#: text: names, reasons, environments
_MARKUP = re.compile(r"([\\`*\[\]<>|])")


def esc(text: object) -> str:
    """``text`` with every character Markdown or HTML reads as markup backslash-escaped, on one line."""
    return _MARKUP.sub(r"\\\1", str(text).replace("&", "&amp;")).replace("\n", " ")

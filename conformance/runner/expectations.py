"""Expectation files: a candidate's known failures and the checks it skips (docs/expectations.md).

A TOML file of ``[[expect]]`` entries, read with the standard library's ``tomllib``::

    [[expect]]
    check = "layer_norm/forward"   # a check id; "layer_norm/*" or "layer_norm": all checks of the behaviour
    dtype = "float16"              # optional: one dtype or a list; omitted = every dtype
    adapter = "jax"                # optional: omitted = every adapter in the run
    status = "fail"                # "fail": known failure; "skip": do not run
    reason = "why"                 # required, not empty
    match = "got nan"              # optional ("fail" only): a regular expression every failure's message must contain
    sometimes = true               # optional ("fail" only): only some samples reach the failure; a pass is expected

:func:`load` turns a file into :class:`Entry` values or raises :class:`ExpectationError` with one line
saying what is wrong; :func:`decide` picks the entry that decides a check's verdict.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from transformer_conformance.conformance.harness.autocast import MODES
from transformer_conformance.reference.formats import TESTED_DTYPES

FAIL = "fail"
SKIP = "skip"
STATUSES = (FAIL, SKIP)
KEYS = ("check", "dtype", "adapter", "status", "reason", "match", "sometimes")
_HEADER = re.compile(r"^\s*\[\[\s*[\"']?expect[\"']?\s*\]\]")


class ExpectationError(ValueError):
    """An expectations file that cannot be used; the message is one line naming the file and the problem."""


class ExpectationWarning(UserWarning):
    """An expectation that did not hold: a known failure passed, or an entry matched no check in the run."""


@dataclass(frozen=True)
class Entry:
    """One ``[[expect]]`` entry: which checks it covers and what is expected of them."""

    file: str  # the path as given on the command line
    index: int  # 1-based position among the file's entries
    check: str
    dtypes: tuple[str, ...] | None  # None: every dtype
    adapter: str | None  # None: every adapter in the run
    status: str  # FAIL or SKIP
    reason: str
    line: int = 1  # the line of its [[expect]] header, where warnings point
    match: str | None = None  # a "fail" entry's regular expression; None: any failure of the check is the known one
    #: a "fail" entry whose failure only some samples reach (random seeds; a shape plan's): a pass is no surprise
    sometimes: bool = False

    @property
    def behaviour(self) -> str | None:
        """The behaviour (or check-id prefix) a wildcard entry covers; None for an exact check id."""
        if self.check.endswith("/*"):
            return self.check[:-2]
        return None if "/" in self.check else self.check

    def matches(self, check_id: str, behaviour: str, adapter: str, dtype: str | None) -> bool:
        if self.adapter is not None and self.adapter != adapter:
            return False
        if self.dtypes is not None and dtype not in self.dtypes:
            return False
        prefix = self.behaviour
        if prefix is None:
            return check_id == self.check
        return behaviour == prefix or check_id.startswith(prefix + "/")

    def describes(self, messages: Sequence[str]) -> bool:
        """Whether failures with these messages (one per distinct failure the check found) are the known failure:
        always without ``match``, else when the expression is found (``re.search``) in every message."""
        return describes(self.match, messages)

    def label(self) -> str:
        """How warnings and reports name the entry: the file, its position and its selector."""
        parts = [f"check {self.check!r}"]
        if self.dtypes is not None:
            parts.append(f"dtype {', '.join(self.dtypes)}")
        if self.adapter is not None:
            parts.append(f"adapter {self.adapter}")
        if self.match is not None:
            parts.append(f"match {self.match!r}")
        if self.sometimes:
            parts.append("sometimes")
        return f"{self.file} entry {self.index} ({'; '.join(parts)}; status {self.status})"

    def ref(self) -> dict[str, Any]:
        """What a check decided by this entry carries in report.json."""
        ref = {"file": self.file, "entry": self.index, "status": self.status, "reason": self.reason}
        ref |= {"match": self.match} if self.match is not None else {}
        return ref | ({"sometimes": True} if self.sometimes else {})

    def to_json(self, matched: int) -> dict[str, Any]:
        return {
            "file": self.file,
            "entry": self.index,
            "check": self.check,
            "dtype": list(self.dtypes) if self.dtypes is not None else None,
            "adapter": self.adapter,
            "status": self.status,
            "reason": self.reason,
            **({"match": self.match} if self.match is not None else {}),
            **({"sometimes": True} if self.sometimes else {}),
            "matched": matched,
        }


def describes(match: str | None, messages: Sequence[str]) -> bool:
    """Whether every message contains the regular expression ``match`` (``re.search``); True for no expression."""
    return match is None or all(re.search(match, m) for m in messages)


def unlisted(ref: Mapping[str, Any]) -> str:
    """The note added to a failure a "fail" entry (``ref``: its :meth:`Entry.ref`) does not describe."""
    return f"(not the known failure of {ref['file']} entry {ref['entry']}: its match {ref['match']!r} is not in it)"


def _fail(where: str, problem: str) -> ExpectationError:
    return ExpectationError(f"expectations file {where}: {problem}")


def _entry(raw: Any, file: str, index: int, line: int) -> Entry:
    where = f"{file!r}, entry {index}"
    if not isinstance(raw, dict):
        raise _fail(where, "is not a table; write each entry as [[expect]] followed by its keys")
    check = raw.get("check")
    if isinstance(check, str) and check.strip():
        where += f" (check {check!r})"
    unknown = sorted(set(raw) - set(KEYS))
    if unknown:
        raise _fail(where, f"unknown key {unknown[0]!r}; an entry has only {', '.join(KEYS)}")
    if not isinstance(check, str) or not check.strip():
        raise _fail(
            where, "'check' is required: a check id such as 'layer_norm/forward', or a behaviour such as 'layer_norm'"
        )
    if check != check.strip() or "*" in check.removesuffix("/*") or check in ("*", "/*"):
        raise _fail(where, f"check {check!r} is not a check id, 'behaviour/*' or a behaviour name")
    dtype = raw.get("dtype")
    dtypes: tuple[str, ...] | None = None
    if dtype is not None:
        values = [dtype] if isinstance(dtype, str) else dtype
        if not isinstance(values, list) or not values or not all(isinstance(d, str) for d in values):
            raise _fail(where, "'dtype' must be a dtype name or a non-empty list of them")
        for d in values:
            if d not in TESTED_DTYPES + MODES:
                raise _fail(where, f"unknown dtype {d!r}; expected one of {', '.join(TESTED_DTYPES + MODES)}")
        dtypes = tuple(values)
    adapter = raw.get("adapter")
    if adapter is not None and (not isinstance(adapter, str) or not adapter.strip()):
        raise _fail(where, "'adapter' must be an adapter name (omit it for every adapter in the run)")
    status = raw.get("status")
    if status is None:
        raise _fail(where, '\'status\' is required: "fail" (a known failure) or "skip" (do not run the check)')
    if status not in STATUSES:
        raise _fail(where, f'unknown status {status!r}; expected "fail" (a known failure) or "skip" (do not run)')
    reason = raw.get("reason")
    if not isinstance(reason, str) or not reason.strip():
        raise _fail(where, "'reason' is required and must not be empty: say why the check fails or is skipped")
    match = raw.get("match")
    if match is not None:
        if not isinstance(match, str) or not match:
            raise _fail(where, "'match' must be a non-empty regular expression (omit it: any failure of the check)")
        if status != FAIL:
            raise _fail(where, "'match' belongs to a \"fail\" entry: it says which failure is the known one")
        try:
            re.compile(match)
        except re.error as exc:
            raise _fail(where, f"'match' {match!r} is not a regular expression: {exc}") from None
    sometimes = raw.get("sometimes", False)
    if not isinstance(sometimes, bool):
        raise _fail(where, "'sometimes' must be true or false")
    if sometimes and status != FAIL:
        raise _fail(where, "'sometimes' belongs to a \"fail\" entry: it says only some samples reach the failure")
    return Entry(file, index, check, dtypes, adapter, status, reason.strip(), line, match, sometimes)


def parse(text: str, file: str) -> list[Entry]:
    """The entries of one file's text; ``file`` names it in error messages and reports."""
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise _fail(repr(file), f"not valid TOML: {str(exc).splitlines()[0]}") from None
    unknown = sorted(set(doc) - {"expect"})
    if unknown:
        raise _fail(repr(file), f"unknown top-level key {unknown[0]!r}; the file holds only [[expect]] entries")
    raw = doc.get("expect", [])
    if not isinstance(raw, list):
        raise _fail(repr(file), "'expect' must be an array of tables: write each entry as [[expect]]")
    headers = [n for n, text in enumerate(text.splitlines(), start=1) if _HEADER.match(text)]
    if len(headers) != len(raw):  # entries written as an inline array: point at the file's start
        headers = [1] * len(raw)
    return [_entry(item, file, i, line) for i, (item, line) in enumerate(zip(raw, headers, strict=True), start=1)]


#: ``--expectations builtin`` / ``builtin:NAME``: the suite's own files of the built-in adapters' defects
BUILTIN = "builtin"


def resolve(option: str, directory: Path, adapters: Sequence[str]) -> list[tuple[Path, str]]:
    """The files an ``--expectations`` value names, each with how to show it: a path (relative to
    ``directory``), ``builtin:NAME`` (the suite's file NAME.toml), or ``builtin`` (every built-in file with an
    entry for one of ``adapters``)."""
    from transformer_conformance.expectations import files

    if option != BUILTIN and not option.startswith(f"{BUILTIN}:"):
        return [(directory / option, option)]
    shipped = files()
    if option == BUILTIN:
        return [(p, f"{BUILTIN}:{n}") for n, p in shipped.items() if any(e.adapter in adapters for e in load(p))]
    name = option.removeprefix(f"{BUILTIN}:")
    if name not in shipped:
        raise ExpectationError(f"no built-in expectation file {name!r}; the suite has {', '.join(shipped)}")
    return [(shipped[name], option)]


def load(path: Path, name: str | None = None) -> list[Entry]:
    """The entries of the file at ``path`` (``name``: how to show it; default the path)."""
    file = name if name is not None else str(path)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ExpectationError(f"cannot read expectations file {file!r}: {exc.strerror or exc}") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise _fail(repr(file), "not UTF-8 text") from None
    return parse(text, file)


def decide(entries: Sequence[Entry], check_id: str, behaviour: str, adapter: str, dtype: str | None) -> Entry | None:
    """The entry that decides a check's verdict: a matching "skip" entry before any "fail" entry, else the
    first matching entry (files in command-line order, entries in file order); None if none matches."""
    found = [e for e in entries if e.matches(check_id, behaviour, adapter, dtype)]
    skips = [e for e in found if e.status == SKIP]
    return (skips or found)[0] if found else None


def matched_counts(entries: Sequence[Entry], checks: Iterable[dict[str, Any]]) -> list[int]:
    """For each entry, how many of the run's checks (of candidates) it covers; checks the adapter does not
    declare do not count."""
    rows = [c for c in checks if c.get("status") != "unsupported"]
    return [sum(e.matches(c["check"], c["behaviour"], c["adapter"], c["dtype"]) for c in rows) for e in entries]


def warn(entry: Entry, message: str) -> None:
    """A warning pointing at the entry's line in its file (pytest's warnings summary shows FILE:LINE)."""
    import warnings

    warnings.warn_explicit(ExpectationWarning(message), ExpectationWarning, entry.file, entry.line)

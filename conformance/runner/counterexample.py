"""Hypothesis's notes on a failing check, as a reader of the report needs them.

Kept: each draw (what the candidate was given: ``Draw 1 (case): Case(inputs=..., params=...)``) and the
``@reproduce_failure`` line. Dropped: the call of the suite's own test function (object addresses, the
check's record), explanation lines that point into the suite's code, target scores, and repeats (a failure
carries its notes once per level of Hypothesis's exception groups).
"""

from __future__ import annotations

from collections.abc import Iterable

#: lines that open a block of the suite's internals, closed by a line ")" at the left margin
_CALL_BLOCKS = ("Falsifying example:", "Failing test case:", "Falsifying explicit example:")


def readable(notes: Iterable[str]) -> str:
    kept: list[str] = []
    for note in dict.fromkeys(n for n in notes if n.strip()):  # each note once, in order
        in_call = in_explanation = False
        for line in note.splitlines():
            if in_call:
                in_call = line.rstrip() != ")"
                continue
            if in_explanation:
                if line.startswith((" ", "\t")) or not line.strip():
                    continue
                in_explanation = False
            if line.startswith(_CALL_BLOCKS):
                in_call = not line.rstrip().endswith(")")
                continue
            if line.startswith("Explanation:"):
                in_explanation = True
                continue
            if line.startswith("Highest target score"):
                continue
            if line.strip():
                kept.append(line)
    return "\n".join(kept)

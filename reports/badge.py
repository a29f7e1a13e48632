"""``badge.svg``: the conformance level of a run, for a README — passed / declared checks, coloured, and
the known failures (docs/expectations.md) when there are any."""

from __future__ import annotations

from typing import Any

from transformer_conformance.reports.html_page import esc

#: statuses of checks the adapters declare (``unsupported`` ones are not declared)
DECLARED = ("passed", "failed", "error", "skipped", "known_failure", "unexpectedly_passed")
PASSED = ("passed", "unexpectedly_passed")


def level(report: dict[str, Any]) -> tuple[int, int]:
    """(passed, declared) over the run's checks; an unexpectedly passed check passed."""
    s = report["summary"]
    return sum(int(s.get(k, 0)) for k in PASSED), sum(int(s.get(k, 0)) for k in DECLARED)


def known(report: dict[str, Any]) -> int:
    return int(report["summary"].get("known_failure", 0))


def colour(report: dict[str, Any]) -> str:
    passed, total = level(report)
    if report.get("verdict") == "incomplete" or total == 0:
        return "#9f9f9f"
    if passed == total:
        return "#2ea043"
    share = passed / total
    return "#dfb317" if share >= 0.9 else "#fe7d37" if share >= 0.5 else "#e05d44"


def _width(text: str) -> int:
    return 7 * len(text) + 12


def render_badge(report: dict[str, Any], label: str = "conformance") -> str:
    passed, total = level(report)
    incomplete = " incomplete" if report.get("verdict") == "incomplete" else ""
    k = known(report)
    value = f"{passed}/{total}" + (f", {k} known" if k else "") + incomplete
    title = f"{passed}/{total} checks passed" + (f", {k} known failures" if k else "") + incomplete
    lw, vw = _width(label), _width(value)
    c = colour(report)
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{lw + vw}" height="20" role="img" '
        f'aria-label="{esc(label)}: {esc(value)}"><title>{esc(label)}: {esc(title)}</title>'
        f'<rect width="{lw}" height="20" fill="#555"/><rect x="{lw}" width="{vw}" height="20" fill="{c}"/>'
        '<g fill="#fff" text-anchor="middle" font-family="Verdana,DejaVu Sans,sans-serif" font-size="11">'
        f'<text x="{lw / 2}" y="14">{esc(label)}</text><text x="{lw + vw / 2}" y="14">{esc(value)}</text></g></svg>\n'
    )

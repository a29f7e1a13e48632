"""The shell every HTML page of the reports shares: escaping, styles, the one script, and a strict policy.

Pages are self-contained (inline CSS, JS and SVG; no request leaves the page). Everything shown comes
from candidates and may contain anything, so every text goes through :func:`esc`, and the page's
Content-Security-Policy allows only its own script (by hash): markup a candidate smuggles into a message
is shown as text, and would not run even if it were not.
"""

from __future__ import annotations

import base64
import hashlib
import html
import re
from typing import Any

_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")

STATUS_MARK = {
    "passed": "✓",
    "failed": "✗",
    "error": "!",
    "unsupported": "–",
    "skipped": "○",
    "known_failure": "✗",
    "unexpectedly_passed": "✓",
    "expected_skip": "⊘",
}
STATUS_WORD = {
    "passed": "pass",
    "failed": "FAIL",
    "error": "ERROR",
    "unsupported": "unsupported",
    "skipped": "skipped",
    "known_failure": "known failure",
    "unexpectedly_passed": "unexpectedly passed",
    "expected_skip": "skipped (expected)",
}
DTYPE_ORDER = ("float32", "bfloat16", "float16", "autocast-bfloat16", "autocast-float16")  # autocast: a mode

CSS = """
:root { --pass:#1a7f37; --pass-bg:#dafbe1; --fail:#b91c1c; --fail-bg:#ffe0e0; --err:#9a3412; --err-bg:#ffedd5;
  --uns:#57606a; --uns-bg:#eef0f2; --skip:#6e7781; --skip-bg:#f6f8fa; --line:#d0d7de; }
* { box-sizing: border-box; }
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; margin: 0; color: #1f2328; }
main { max-width: 1400px; margin: 0 auto; padding: 1rem 1.5rem 4rem; }
h1 { font-size: 1.6rem; margin: .5rem 0; } h2 { margin-top: 2rem; border-bottom: 1px solid var(--line); }
nav a { margin-right: 1rem; }
table { border-collapse: collapse; margin: .5rem 0; }
th, td { border: 1px solid var(--line); padding: .25rem .5rem; text-align: left; vertical-align: top; }
thead th { background: #f6f8fa; position: sticky; top: 0; }
td.cell { text-align: center; white-space: nowrap; min-width: 4.5rem; }
td.cell a { color: inherit; text-decoration: none; display: block; }
td.cell small { display: block; font-size: .75rem; opacity: .8; }
.s-passed { background: var(--pass-bg); color: var(--pass); }
.s-failed { background: var(--fail-bg); color: var(--fail); font-weight: 700; }
.s-error { background: var(--err-bg); color: var(--err); font-weight: 700; }
.s-unsupported { background: var(--uns-bg); color: var(--uns); }
.s-skipped { background: var(--skip-bg); color: var(--skip); }
.s-known_failure { background: repeating-linear-gradient(135deg, #fff1c2 0 6px, #fde68a 6px 12px); color: #7c4a03; }
.s-unexpectedly_passed { background: #ddf4ff; color: #0550ae; font-weight: 700; outline: 2px dashed #0969da;
  outline-offset: -3px; }
.s-expected_skip { background: repeating-linear-gradient(135deg, #f6f8fa 0 6px, #e6e9ec 6px 12px); color: #57606a; }
.s-none { background: #fff; color: #8c959f; }
.verdict { display: inline-block; padding: .2rem .7rem; border-radius: 1rem; font-weight: 700; }
.v-conformant { background: var(--pass-bg); color: var(--pass); }
.v-non-conformant { background: var(--fail-bg); color: var(--fail); }
.v-incomplete { background: var(--err-bg); color: var(--err); }
.v-known-failures { background: #fff1c2; color: #7c4a03; }
.notice { border: 2px solid #0969da; background: #ddf4ff; padding: .4rem 1rem; margin: 1rem 0; }
pre { background: #f6f8fa; border: 1px solid var(--line); padding: .6rem; overflow-x: auto; white-space: pre-wrap;
  word-break: break-word; max-height: 32rem; }
.failure { border: 1px solid var(--line); border-left: 4px solid var(--fail); padding: .2rem 1rem .8rem;
  margin: 1rem 0; }
.failure.error { border-left-color: var(--err); }
.failure.known { border-left-color: #d4a72c; }
.actions button, .actions a { font: inherit; margin-right: .6rem; }
.legend span { display: inline-block; padding: 0 .5rem; margin-right: .3rem; border-radius: .2rem; }
.muted { color: #57606a; }
code { background: #f6f8fa; padding: 0 .2rem; }
svg text { font: 11px system-ui, sans-serif; }
.plots { display: flex; flex-wrap: wrap; gap: .75rem; margin: .5rem 0 1rem; }
svg.plot { border: 1px solid var(--line); background: #fff; }
svg.plot text.title { font-weight: 600; }
td.num { text-align: right; white-space: nowrap; }
table.perf td small { opacity: .7; }
"""

SCRIPT = """document.documentElement.setAttribute("data-js", "ready");
for (const b of document.querySelectorAll("button[data-copy]")) {
  b.addEventListener("click", () => {
    const text = document.getElementById(b.getAttribute("data-copy")).textContent;
    const done = () => { b.textContent = "Copied"; setTimeout(() => { b.textContent = "Copy"; }, 1500); };
    if (navigator.clipboard) { navigator.clipboard.writeText(text).then(done, () => {}); }
  });
}"""

_SCRIPT_HASH = base64.b64encode(hashlib.sha256(SCRIPT.encode()).digest()).decode()
CSP = (
    "default-src 'none'; style-src 'unsafe-inline'; img-src data:; "
    f"script-src 'sha256-{_SCRIPT_HASH}'; base-uri 'none'; form-action 'none'"
)


def esc(value: Any) -> str:
    """Text for HTML: markup characters escaped, control characters dropped."""
    return html.escape(_CONTROL.sub("", str(value)), quote=True)


def fmt_ulp(v: Any) -> str:
    if v is None:
        return ""
    if isinstance(v, str):
        return v
    return f"{float(v):.3g}"


def fmt_share(v: Any) -> str:
    """A share of an error budget as a reader compares it: a percentage up to 10×, then a multiple."""
    if v is None or isinstance(v, str):
        return "" if v is None else v
    x = float(v)
    if x != x:
        return "nan"
    return f"{x:.0%}" if x < 9.995 else f"{x:.3g}× budget"


def share(c: dict[str, Any]) -> Any:
    """The share of its budget a check used: within the budget, the share beyond the output's final rounding
    (0 for a correctly rounded result); over it, how many times the whole budget (older reports: the whole
    budget's share throughout)."""
    used, margin = c.get("budget_used"), c.get("margin")
    if margin is None or not isinstance(used, int | float) or used > 1.0:
        return used
    return margin


def severity(c: dict[str, Any]) -> tuple[int, float]:
    """Sort key of failures, most severe first: a failure with no measured error (an exception, NaN, a wrong
    shape, a broken property) before any measured one, then by how far over its budget its worst example is."""
    worst = (c.get("extra") or {}).get("worst") or {}
    try:
        return (1, -float(worst["share"]))
    except (KeyError, TypeError, ValueError):
        return (0, 0.0)


def page(title: str, body: str) -> str:
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">\n'
        f'<meta http-equiv="Content-Security-Policy" content="{CSP}">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        f"<title>{esc(title)}</title>\n<style>{CSS}</style></head>\n"
        f"<body><main>\n{body}\n</main><script>{SCRIPT}</script></body></html>\n"
    )


def data_url(text: str, mime: str = "text/x-python") -> str:
    return f"data:{mime};charset=utf-8;base64," + base64.b64encode(text.encode()).decode()


def safe_filename(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-")[:80] or "file"


def not_declared(c: dict[str, Any]) -> str:
    """The values a check did not draw because its adapter does not declare them, in words, or ''."""
    left = c.get("extra", {}).get("not_declared", {})
    return "; ".join(f"{key} {', '.join(values)} not declared" for key, values in left.items())


def kind(check: dict[str, Any]) -> str:
    """How a check is shown: its status, or ``expected_skip`` for a check an expectation file skipped."""
    if check["status"] == "skipped" and (check.get("expectation") or {}).get("status") == "skip":
        return "expected_skip"
    return str(check["status"])


def legend() -> str:
    return (
        '<p class="legend">'
        + "".join(f'<span class="s-{s}">{STATUS_MARK[s]} {STATUS_WORD[s]}</span>' for s in STATUS_MARK)
        + "</p>"
    )

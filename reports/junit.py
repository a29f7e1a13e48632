"""``junit.xml``: the run as JUnit XML (the Jenkins/Ant format CI systems read): one test suite per
adapter, one test case per check × dtype; failures and errors carry the message and counterexample,
unsupported and skipped checks are skipped test cases.

Checks an expectation file decides (docs/expectations.md) are read by CI systems as not failing, the way
pytest writes its own xfail outcomes: a known failure is a skipped test case (type ``known-failure``,
the reason in its message, the full failure in its text); an unexpectedly passed check is a passing test
case whose ``system-out`` says so; a check skipped by an expectation is skipped (type ``expected-skip``)."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from collections import defaultdict
from typing import Any

from transformer_conformance.reports.html_page import kind

# XML 1.0 has no place for most control characters; a candidate's message may hold any
_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")


def _text(v: Any) -> str:
    return _NOT_XML.sub("\ufffd", str(v))


def _params(c: dict[str, Any], adapter: str) -> str:
    """The parameters that tell apart the cases of one check: the pytest id without the adapter (a dtype, and
    others such as tied/untied), or the dtype."""
    node = str(c.get("nodeid", ""))
    inside = node[node.index("[") + 1 : -1] if node.endswith("]") and "[" in node else ""
    rest = inside[len(adapter) :].lstrip("-") if inside.startswith(adapter) else inside
    return rest or c.get("dtype") or "-"


def render_junit(report: dict[str, Any]) -> str:
    by_adapter: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for c in report["checks"]:
        by_adapter[c["adapter"]].append(c)
    root = ET.Element("testsuites", name="transformer-conformance", time=f"{float(report['duration_s']):.3f}")
    totals = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    for adapter, checks in by_adapter.items():
        counts = {
            "tests": len(checks),
            "failures": sum(c["status"] == "failed" for c in checks),
            "errors": sum(c["status"] == "error" for c in checks),
            "skipped": sum(c["status"] in ("unsupported", "skipped", "known_failure") for c in checks),
        }
        for k, v in counts.items():
            totals[k] += v
        attrs = {
            "name": _text(adapter),
            "timestamp": _text(report.get("created", ""))[:19],
            "time": f"{sum(float(c.get('duration_s', 0.0)) for c in checks):.3f}",
            **{k: str(v) for k, v in counts.items()},
        }
        suite = ET.SubElement(root, "testsuite", attrs)
        props = ET.SubElement(suite, "properties")
        hyp = report.get("hypothesis", {})
        for k, v in (("hypothesis.profile", hyp.get("profile")), ("hypothesis.seed", hyp.get("seed"))):
            ET.SubElement(props, "property", name=k, value="" if v is None else _text(v))
        for c in checks:
            case = ET.SubElement(
                suite,
                "testcase",
                name=_text(f"{c['check']}[{_params(c, adapter)}]"),
                classname=_text(f"{adapter}.{c['behaviour']}"),
                time=f"{float(c.get('duration_s', 0.0)):.3f}",
            )
            message = _text(c.get("message", ""))
            first = message.splitlines()[0] if message else ""
            if c["status"] in ("failed", "error"):
                tag = "failure" if c["status"] == "failed" else "error"
                el = ET.SubElement(case, tag, message=first, type="CheckFailure" if tag == "failure" else "Error")
                detail = f"{c['property']} ({c['cites']})\n{message}"
                if c.get("counterexample"):
                    detail += "\n\n" + c["counterexample"]
                el.text = _text(detail)
            elif c["status"] == "known_failure":
                reason = (c.get("expectation") or {}).get("reason", "")
                el = ET.SubElement(case, "skipped", message=_text(f"known failure: {reason}"), type="known-failure")
                detail = f"{c['property']} ({c['cites']})\n{message}"
                if c.get("counterexample"):
                    detail += "\n\n" + c["counterexample"]
                el.text = _text(detail)
            elif kind(c) == "expected_skip":
                reason = c["expectation"].get("reason", "")
                ET.SubElement(case, "skipped", message=_text(f"skipped by expectation: {reason}"), type="expected-skip")
            elif c["status"] in ("unsupported", "skipped"):
                ET.SubElement(case, "skipped", message=_text(f"{c['status']}: {first}"))
            elif c["status"] == "unexpectedly_passed":
                e = c.get("expectation") or {}
                out = ET.SubElement(case, "system-out")
                out.text = _text(
                    f"unexpectedly passed: {e.get('file', '?')} entry {e.get('entry', '?')} expects it to fail "
                    f"({e.get('reason', '')}); remove the entry if the defect is fixed"
                )
    for k, v in totals.items():
        root.set(k, str(v))
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"

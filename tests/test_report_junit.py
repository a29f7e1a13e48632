"""junit.xml: valid JUnit XML (Jenkins/Ant format), one test case per check × adapter × dtype."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from tests.conformance_run import Run

XSD = Path(__file__).with_name("junit.xsd")


def test_valid_against_junit_schema(defect_run: Run, builtin_run: Run) -> None:
    xmlschema = pytest.importorskip("xmlschema")
    schema = xmlschema.XMLSchema(str(XSD))
    for run in (defect_run, builtin_run):
        schema.validate(str(run.report_dir / "junit.xml"))


def test_one_case_per_check(defect_run: Run) -> None:
    """Test cases, counts and failure messages match report.json; markup in a message is plain text."""
    root = ET.parse(defect_run.report_dir / "junit.xml").getroot()
    checks = defect_run.report["checks"]
    cases = root.findall("testsuite/testcase")
    assert len(cases) == len(checks) == int(root.get("tests", "-1"))
    assert int(root.get("failures", "-1")) == defect_run.report["summary"]["failed"]
    by_name = {(c.get("classname"), c.get("name")): c for c in cases}
    for c in checks:
        case = by_name[(f"{c['adapter']}.{c['behaviour']}", f"{c['check']}[{c['dtype'] or '-'}]")]
        failure = case.find("failure")
        if c["status"] == "failed":
            assert failure is not None and failure.get("message") == c["message"].splitlines()[0]
            assert c["cites"] in (failure.text or "")
        else:
            assert failure is None
    raised = by_name[("raises.rms_norm", "rms_norm/forward[float32]")].find("failure")
    assert raised is not None and "<script>alert(1)</script>" in (raised.get("message") or "")


def test_unsupported_is_skipped(tmp_path: Path) -> None:
    """An unsupported check is a skipped test case with its reason; control characters never break the XML."""
    from transformer_conformance.reports.junit import render_junit

    report = {
        "duration_s": 1.0,
        "created": "2026-01-01T00:00:00+00:00",
        "hypothesis": {"profile": "ci", "seed": None},
        "checks": [
            {
                "check": "rope/forward",
                "behaviour": "rope",
                "property": "p",
                "cites": "seed-000",
                "adapter": "a\x00b",
                "dtype": "float16",
                "status": "unsupported",
                "duration_s": 0.0,
                "message": "a does not declare rope in float16\x1b[0m",
            }
        ],
    }
    path = tmp_path / "junit.xml"
    path.write_text(render_junit(report))
    case = ET.parse(path).getroot().find("testsuite/testcase")
    assert case is not None
    skipped = case.find("skipped")
    assert skipped is not None and "unsupported: a does not declare rope in float16" in (skipped.get("message") or "")

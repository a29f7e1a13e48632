"""The README's conformance matrix (reports/matrix.py): one row per adapter, counts per behaviour."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from transformer_conformance.reports import matrix


def _check(adapter: str, behaviour: str, status: str) -> dict[str, str]:
    return {"adapter": adapter, "behaviour": behaviour, "status": status, "check": f"{behaviour}/forward"}


def test_cells_count_statuses_and_mark_undeclared_behaviours() -> None:
    report = {
        "checks": [
            _check("a", "rope", "passed"),
            _check("a", "rope", "passed"),
            _check("a", "rope", "failed"),
            _check("a", "rms_norm", "known_failure"),
            _check("a", "rms_norm", "passed"),
            _check("b", "rope", "unsupported"),
            _check("b", "rms_norm", "error"),
            {"adapter": None, "behaviour": "swiglu", "status": "passed", "check": "swiglu/hidden-width"},
        ]
    }
    rows = matrix.render(matrix.tally([report])).splitlines()
    assert rows[0] == "| adapter | rms_norm | rope |", rows[0]
    assert rows[2] == "| `a` | 1 ✓ 1 known | 2 ✓ 1 ✗ |", rows[2]
    assert rows[3] == "| `b` | 1 error | – |", rows[3]


def test_an_adapter_in_a_later_report_replaces_the_earlier(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    old, new = tmp_path / "old.json", tmp_path / "new.json"
    old.write_text(json.dumps({"checks": [_check("a", "rope", "failed")]}))
    new.write_text(json.dumps({"checks": [_check("a", "rope", "passed")]}))
    assert matrix.main([str(old), str(new)]) == 0
    assert "| `a` | 1 ✓ |" in capsys.readouterr().out


def test_an_unreadable_report_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    assert matrix.main([str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "bad.json" in err, err

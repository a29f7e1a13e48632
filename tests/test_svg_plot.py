"""reports/svg_plot.py draws valid, escaped SVG on every scale; conformance/harness/series.py keeps bounded series."""

from __future__ import annotations

import math
import xml.etree.ElementTree as ET

import numpy as np
import pytest

from transformer_conformance.conformance.harness.series import (
    MAX_POINTS,
    Along,
    Series,
    position_bucket,
    position_range,
    rms_bucket,
    rms_range,
)
from transformer_conformance.reports.svg_plot import Line, Reference, fmt_number, fmt_power_of_two, plot

NS = "{http://www.w3.org/2000/svg}"
INJECTED = "<script>alert(1)</script> & co"


def _parse(svg: str) -> ET.Element:
    root = ET.fromstring(svg)
    assert root.tag == f"{NS}svg"
    return root


def _texts(root: ET.Element) -> list[str]:
    return ["".join(t.itertext()) for t in root.iter(f"{NS}text")]


@pytest.mark.parametrize(
    ("xscale", "yscale", "xs", "ys"),
    [
        ("linear", "linear", [0, 1, 2, 3], [0.1, 0.5, 0.4, 0.2]),
        ("log", "log", [1e3, 1e4, 1e6], [1e-3, 1.0, 1e5]),
        ("log2", "auto", [2.0**-12, 2.0**-3, 2.0**9], [0.5, 0.0, 3e4]),
        ("log1p", "auto", [0, 1, 7, 100, 99_990], [0.0, 0.5, 0.4, 0.5, 0.5]),
    ],
)
def test_plot_is_valid_svg_on_every_scale(xscale: str, yscale: str, xs: list[float], ys: list[float]) -> None:
    """A complete SVG document: title, axis labels, ticks, one polyline and one marker with a tooltip per point,
    and every mark inside the plotting area."""
    svg = plot(
        "a title",
        [Line("float32 error", list(zip(xs, ys, strict=True))), Line("budget", [(x, 1.0) for x in xs], dashed=True)],
        "the x",
        "the y",
        xscale=xscale,  # type: ignore[arg-type]
        yscale=yscale,  # type: ignore[arg-type]
        references=[Reference(1.0, "limit")],
        y_floor=0.01,
    )
    root = _parse(svg)
    texts = _texts(root)
    assert (
        "a title" in texts and any(t.startswith("the x") for t in texts) and any(t.startswith("the y") for t in texts)
    )
    assert "float32 error" in texts and "budget" in texts and "limit" in texts
    assert len(root.findall(f"{NS}polyline")) == 2
    circles = root.findall(f"{NS}circle")
    assert len([c for c in circles if c.find(f"{NS}title") is not None]) == 2 * len(xs)
    frame = next(r for r in root.findall(f"{NS}rect") if r.get("fill") == "none")
    x0, y0 = float(frame.get("x", 0)), float(frame.get("y", 0))
    x1, y1 = x0 + float(frame.get("width", 0)), y0 + float(frame.get("height", 0))
    for c in circles:
        if c.find(f"{NS}title") is not None:
            assert x0 - 0.1 <= float(c.get("cx", 0)) <= x1 + 0.1 and y0 - 0.1 <= float(c.get("cy", 0)) <= y1 + 0.1
    ticks = [t for t in texts if (t and t[0].isdigit()) or t.startswith(("2⁻", "-"))]
    assert len(ticks) >= 4


def test_log_scale_ticks_are_powers() -> None:
    root = _parse(plot("t", [Line("a", [(1.0, 1e-2), (1e4, 1e3)])], "x", "y", xscale="log", yscale="log"))
    texts = _texts(root)
    assert {"0.01", "0.1", "1", "10", "100", "1k"} <= set(texts)
    assert {"1", "10", "100", "1k", "10k"} <= set(texts)


def test_names_are_escaped() -> None:
    """A name holding markup is text of the SVG, never an element."""
    svg = plot(INJECTED, [Line(INJECTED, [(1.0, 2.0)], tips=[INJECTED])], INJECTED, INJECTED)
    root = _parse(svg)
    assert "<script" not in svg
    assert not root.findall(f".//{NS}script")
    assert INJECTED in _texts(root)
    assert root.get("aria-label") == INJECTED


def test_gaps_and_empty_plots() -> None:
    """None and non-finite values leave gaps; a plot without data is still a valid document."""
    root = _parse(plot("t", [Line("a", [(1, 1.0), (2, None), (3, math.nan), (4, 2.0), (5, 3.0)])], "x", "y"))
    assert len(root.findall(f"{NS}polyline")) == 1  # (1) alone, then (4, 5) joined
    assert len(root.findall(f"{NS}circle")) == 3  # the points (the legend's marker is in its group)
    _parse(plot("empty", [], "x", "y", xscale="log", yscale="log"))


def test_tick_labels() -> None:
    assert [fmt_number(v) for v in (0, 1e-5, 0.01, 2.5, 1000, 20_000, 1e7)] == [
        "0",
        "1e-5",
        "0.01",
        "2.5",
        "1k",
        "20k",
        "1e7",
    ]
    assert fmt_power_of_two(2.0**-12) == "2⁻¹²" and fmt_power_of_two(512) == "2⁹" and fmt_power_of_two(3) == "3"


def test_position_buckets_are_bounded_and_cover_every_position() -> None:
    """Positions 0 … 2^17 (the strategies draw up to about 10^5) fall in at most 64 buckets, each position in
    the bucket whose range holds it."""
    p = np.arange(0, 2**17)
    b = position_bucket(p)
    assert len(np.unique(b)) <= MAX_POINTS and b.min() == 0
    assert np.all(np.diff(b) >= 0)
    for k in np.unique(b)[:: max(1, len(np.unique(b)) // 16)]:
        lo, hi = position_range(int(k))
        inside = p[b == k]
        assert lo == inside.min() and hi == inside.max() + 1


def test_rms_buckets() -> None:
    x = np.array([[0.0, 0.0], [0.3, -0.3], [3.0, 4.0], [1e30, 1e30]])
    b = rms_bucket(x)
    assert b.shape == (4, 1)
    assert b[:, 0].tolist() == [-32, -2, 1, 31]  # clipped at both ends
    assert rms_range(-2) == (0.25, 0.5)


def test_series_keeps_the_worst_error_and_its_budget() -> None:
    """Per bucket, the largest error over all calls, and the budget of that same element."""
    along = Along.positions(np.array([0, 5, 5000]))
    s = Series(along.coordinate, "rope output")
    ulps = np.array([[[0.1, 0.2], [0.4, 0.3], [0.9, 0.2]]])
    budget = np.array([[[0.5, 0.5], [0.6, 0.7], [2.0, 3.0]]])
    s.add(along.keys, ulps, budget)
    s.add(along.keys, ulps * 0.5, budget * 0.1)  # smaller errors change nothing
    s.add(along.keys[:1], np.full((1, 1, 2), 0.45), np.full((1, 1, 2), 0.55))  # position 0 only: a larger error
    doc = s.to_json()
    assert doc["x"] == "position" and doc["output"] == "rope output"
    assert doc["points"] == [[0.0, 1.0, 0.45, 0.55], [5.0, 6.0, 0.4, 0.6], [4871.0, 5793.0, 0.9, 2.0]]

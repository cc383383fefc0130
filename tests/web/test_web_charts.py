"""The SVG charts: every mark carries its data, and every string in one is escaped."""

from __future__ import annotations

import xml.etree.ElementTree as ET

from web.charts import Point, Rule, bars, points

SVG = "{http://www.w3.org/2000/svg}"


def test_bars_carry_their_values_and_scale_to_the_largest() -> None:
    svg = ET.fromstring(str(bars([("5Bob", 600_000), ("5Burn", 300_000)], title="weights")))
    groups = svg.findall(f"{SVG}g")
    assert [(g.get("data-label"), g.get("data-value")) for g in groups] == [
        ("5Bob", "600000"), ("5Burn", "300000")]
    widths = [float(g.find(f"{SVG}rect").get("width")) for g in groups]  # type: ignore[union-attr]
    assert widths[0] == 2 * widths[1]


def test_points_sit_on_the_right_side_of_their_rule() -> None:
    svg = ET.fromstring(str(points(
        [Point(1, 0.9, "o1"), Point(2, 1.1, "o1")], title="ratios", rules=[Rule(1.0, "stock")])))
    circles = svg.findall(f"{SVG}circle")
    rule = svg.find(f"{SVG}g")
    assert rule is not None and rule.get("data-y") == "1.0"
    rule_y = float(rule.find(f"{SVG}line").get("y1"))  # type: ignore[union-attr]
    below, above = (float(c.get("cy")) for c in circles)  # type: ignore[arg-type]
    assert above < rule_y < below  # SVG's y grows downwards
    assert [c.get("data-y") for c in circles] == ["0.9", "1.1"]


def test_strings_in_a_chart_are_escaped() -> None:
    hostile = '<script>alert("x")</script>'
    svg = str(bars([(hostile, 1)], title=hostile)) + str(
        points([Point(0, 1, hostile, hostile)], title="t", rules=[Rule(1, hostile)]))
    assert "<script>" not in svg
    assert "&lt;script&gt;" in svg

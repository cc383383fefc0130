"""Reads the charts back out of a page: each inline SVG's points and rules with their data."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from dataclasses import dataclass

SVG = "{http://www.w3.org/2000/svg}"
_SVG = re.compile(r"<svg\b.*?</svg>", re.DOTALL)


@dataclass(frozen=True)
class Mark:
    """Is one point of a chart: its data and where it was drawn (SVG y grows downwards)."""

    x: float
    y: float
    series: str
    label: str
    cy: float


@dataclass(frozen=True)
class Line:
    """Is one horizontal rule of a chart: its value, its label and where it was drawn."""

    y: float
    label: str
    drawn_y: float


@dataclass(frozen=True)
class Chart:
    """Is one chart of a page: its title, points and rules, in document order."""

    title: str
    marks: list[Mark]
    lines: list[Line]

    def line(self, label: str) -> Line:
        """Returns the rule labelled ``label`` (fails the test when there is none)."""
        found = [line for line in self.lines if line.label == label]
        assert len(found) == 1, (label, [line.label for line in self.lines])
        return found[0]


def charts(page: str) -> list[Chart]:
    """Returns every SVG chart of ``page`` (an HTML document), parsed."""
    found = []
    for text in _SVG.findall(page):
        svg = ET.fromstring(text)
        title = svg.find(f"{SVG}title")
        marks = [
            Mark(float(c.get("data-x", "nan")), float(c.get("data-y", "nan")),
                 c.get("data-series", ""), c.get("data-label", ""), float(c.get("cy", "nan")))
            for c in svg.iter(f"{SVG}circle")
        ]
        lines = []
        for group in svg.iter(f"{SVG}g"):
            drawn = group.find(f"{SVG}line")
            if group.get("class") == "rule" and drawn is not None:
                lines.append(Line(float(group.get("data-y", "nan")), group.get("data-label", ""),
                                  float(drawn.get("y1", "nan"))))
        found.append(Chart("" if title is None else title.text or "", marks, lines))
    return found

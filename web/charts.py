"""Draws charts as server-rendered SVG: no script, no library to ship, readable with
JavaScript off, and every mark carries its data (``data-*``) so a test or a reader's tool
can take the numbers back from the page.

Two shapes cover the dashboard: horizontal bars (weights, fees) and points against
horizontal rules (window ratios against the pass line, rewards over settlements).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from markupsafe import Markup, escape

__all__ = ["Point", "Rule", "bars", "points"]

WIDTH = 640
ROW = 22  # a bar's height with its gap
LABEL = 170  # room for a bar's label
PLOT_H = 220
PAD = 36


@dataclass(frozen=True)
class Point:
    """Is one mark: x and y in the data's own units, the series it belongs to, a label."""

    x: float
    y: float
    series: str = ""
    label: str = ""


@dataclass(frozen=True)
class Rule:
    """Is a horizontal line across the plot at ``y`` (a pass line, ratio 1), named."""

    y: float
    label: str


def _n(value: float) -> str:
    return f"{value:.2f}".rstrip("0").rstrip(".")


def _open(width: int, height: int, title: str, kind: str) -> list[str]:
    t = escape(title)
    return [f'<svg class="chart {kind}" xmlns="http://www.w3.org/2000/svg" role="img" '
            f'viewBox="0 0 {width} {height}" width="{width}" height="{height}" '
            f'aria-label="{t}"><title>{t}</title>']


def bars(items: Sequence[tuple[str, float]], *, title: str, unit: str = "") -> Markup:
    """Returns a horizontal bar chart of (label, value), longest bar the largest value."""
    height = max(1, len(items)) * ROW + 8
    out = _open(WIDTH, height, title, "bars")
    top = max((v for _, v in items), default=0) or 1
    span = WIDTH - LABEL - 90
    for i, (label, value) in enumerate(items):
        y = 4 + i * ROW
        w = max(0.0, value) / top * span
        lab = escape(label)
        out.append(
            f'<g class="bar" data-label="{lab}" data-value="{escape(str(value))}">'
            f'<text x="{LABEL - 6}" y="{y + 14}" text-anchor="end">{lab}</text>'
            f'<rect x="{LABEL}" y="{y}" width="{_n(w)}" height="{ROW - 6}" fill="#0b5cad"/>'
            f'<text x="{_n(LABEL + w + 6)}" y="{y + 14}">{escape(f"{value:,}")}'
            f'{escape(unit)}</text></g>')
    out.append("</svg>")
    return Markup("".join(out))


def points(marks: Sequence[Point], *, title: str, rules: Sequence[Rule] = (),
           x_label: str = "", y_label: str = "", connect: bool = False) -> Markup:
    """Returns a scatter (or, with ``connect``, a line per series) of ``marks`` against
    ``rules``; the y range covers every mark and rule with a margin."""
    height = PLOT_H + 2 * PAD
    out = _open(WIDTH, height, title, "points")
    ys = [m.y for m in marks] + [r.y for r in rules]
    xs = [m.x for m in marks]
    lo, hi = (min(ys), max(ys)) if ys else (0.0, 1.0)
    margin = (hi - lo) * 0.1 or abs(hi) * 0.05 or 1.0
    lo, hi = lo - margin, hi + margin
    x_lo, x_hi = (min(xs), max(xs)) if xs else (0.0, 1.0)
    x_span = (x_hi - x_lo) or 1.0
    left, right = PAD + 30, WIDTH - PAD - 110

    def sx(x: float) -> float:
        if len(set(xs)) < 2:  # one x: the marks stand in the middle
            return (left + right) / 2
        return left + (x - x_lo) / x_span * (right - left)

    def sy(y: float) -> float:
        return PAD + (hi - y) / (hi - lo) * PLOT_H

    out.append(f'<line x1="{left}" y1="{PAD + PLOT_H}" x2="{right}" y2="{PAD + PLOT_H}" '
               'stroke="#999"/>')
    out.append(f'<text x="{left - 4}" y="{_n(sy(hi - margin) + 4)}" text-anchor="end">'
               f'{escape(_n(hi - margin))}</text>')
    out.append(f'<text x="{left - 4}" y="{_n(sy(lo + margin) + 4)}" text-anchor="end">'
               f'{escape(_n(lo + margin))}</text>')
    last_label = -1e9
    for rule in sorted(rules, key=lambda r: sy(r.y)):
        y = sy(rule.y)
        # Rules a few pixels apart (ratio 1 and a pass line near it) keep readable labels.
        label_y = max(y + 4, last_label + 12)
        last_label = label_y
        lab = escape(rule.label)
        out.append(f'<g class="rule" data-label="{lab}" data-y="{escape(str(rule.y))}">'
                   f'<line x1="{left}" y1="{_n(y)}" x2="{right}" y2="{_n(y)}" '
                   'stroke="#b42318" stroke-dasharray="4 3"/>'
                   f'<text x="{right + 4}" y="{_n(label_y)}">{lab}</text></g>')
    series = sorted({m.series for m in marks})
    colours = ("#0b5cad", "#9a6700", "#1a7f37", "#6e40c9")
    for index, name in enumerate(series):
        colour = colours[index % len(colours)]
        own = [m for m in marks if m.series == name]
        if connect and len(own) > 1:
            path = " ".join(f"{_n(sx(m.x))},{_n(sy(m.y))}" for m in own)
            out.append(f'<polyline points="{path}" fill="none" stroke="{colour}"/>')
        for m in own:
            out.append(
                f'<circle class="point" cx="{_n(sx(m.x))}" cy="{_n(sy(m.y))}" r="4" '
                f'fill="{colour}" data-series="{escape(m.series)}" '
                f'data-x="{escape(str(m.x))}" data-y="{escape(str(m.y))}" '
                f'data-label="{escape(m.label)}"><title>{escape(m.label or _n(m.y))}'
                '</title></circle>')
    if x_label:
        out.append(f'<text x="{(left + right) // 2}" y="{height - 6}" text-anchor="middle">'
                   f'{escape(x_label)}</text>')
    if y_label:
        out.append(f'<text x="8" y="{PAD - 12}">{escape(y_label)}</text>')
    out.append("</svg>")
    return Markup("".join(out))

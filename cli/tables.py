"""Lays tables out to fit the width they are printed in: a cell wraps between words, and a
word that cannot fit is cut with "…", never split over two lines.

rich alone narrows every column alike once a table is too wide, splitting words at any
character (``referenc|e``, ``NO_DECISI|ON``). Here each column keeps its longest word while
prose columns wrap; only when the words alone are too wide are the widest columns cut, each
to no less than ``cut_width_min``. Off a terminal (``plain``) a table is printed without
borders, and no line ends in padding.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from rich.segment import Segment
from rich.table import Table
from rich.text import Text

if TYPE_CHECKING:
    from rich.console import Console, ConsoleOptions, RenderResult

__all__ = ["FittedTable", "cut_cell", "cut_width_min", "fit_widths", "whole_width_max"]

#: The fewest characters a column cut to fit keeps, its "…" included: an id cut to 8 still
#: names a prefix that ``explain`` takes.
cut_width_min = 8

#: A column whose every cell fits in this many characters (a status, a count, a short name)
#: is never cut: cutting it would win a few columns and lose what it says.
whole_width_max = 12


def fit_widths(naturals: Sequence[int], floors: Sequence[int], room: int) -> list[int]:
    """Returns each column's width so that together they take at most ``room`` where they can.

    ``naturals`` are the widths that show every cell on one line, ``floors`` the widths of
    each column's longest word. First the widest columns wrap, down to their floors; then, if
    the words alone are too wide, the widest are cut, down to ``cut_width_min`` each; a
    column no wider than ``whole_width_max`` is never cut. Where even that is too wide, the
    widths returned take more than ``room``.
    """
    widths = list(naturals)
    widths = _lowered(widths, floors, sum(widths) - room)
    least = [natural if natural <= whole_width_max else cut_width_min for natural in naturals]
    return _lowered(widths, least, sum(widths) - room)


def _lowered(widths: list[int], limits: Sequence[int], excess: int) -> list[int]:
    """Takes ``excess`` columns off the widest of ``widths`` one at a time, none below its
    limit; of equally wide ones the rightmost first (ids and names stand on the left)."""
    while excess > 0:
        open_ = [i for i, width in enumerate(widths) if width > limits[i]]
        if not open_:
            break
        widest = max(open_, key=lambda i: (widths[i], i))
        widths[widest] -= 1
        excess -= 1
    return widths


def cut_cell(text: str, width: int) -> str:
    """Returns ``text`` cut to ``width`` characters, its last one "…" when anything is cut."""
    return text if len(text) <= width else text[: max(width - 1, 0)] + "…"


def _plain(cell: Any, console: Console) -> str | None:
    """Returns a cell's text as it will be printed, or None for a renderable of another kind."""
    if isinstance(cell, str):
        return console.render_str(cell).plain  # control characters written out, as printed
    if isinstance(cell, Text):
        return cell.plain
    return None


def _measures(texts: Iterable[str]) -> tuple[int, int]:
    """Returns (the longest line, the longest word) of a column's texts."""
    natural = floor = 0
    for text in texts:
        for line in text.splitlines() or [""]:
            natural = max(natural, len(line))
            floor = max(floor, *(len(word) for word in line.split()), 0)
    return natural, floor


class FittedTable(Table):
    """A rich Table that fits its columns to the width it is printed in (``fit_widths``).

    A bordered table whose words do not fit drops its borders before any cell is cut; on a
    console whose ``plain`` attribute is true (a pipe or a file) it has none to begin with.
    """

    def __init__(self, *columns: Any, **options: Any) -> None:
        super().__init__(*columns, **options)
        self.asked = (self.box, self.pad_edge, self.show_edge)  # as asked, before any fit

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        self._fit(console, options.max_width)
        lines = Segment.split_lines(self._segments(console, options))
        for line in lines:
            yield from _without_trailing_space(line)
            yield Segment.line()

    def _segments(self, console: Console, options: ConsoleOptions) -> Iterator[Segment]:
        for item in super().__rich_console__(console, options):
            if isinstance(item, Segment):
                yield item
            else:
                yield from console.render(item, options)

    def _fit(self, console: Console, width: int) -> None:
        measured = []
        for column in self.columns:
            texts = [_plain(cell, console) for cell in (column.header, *column.cells)]
            measured.append(_measures(text for text in texts if text is not None))
        naturals = [natural for natural, _ in measured]
        floors = [floor for _, floor in measured]
        self.box, self.pad_edge, self.show_edge = self.asked
        if getattr(console, "plain", False) or sum(floors) > width - self._frame_width():
            self.box, self.pad_edge, self.show_edge = None, False, False
        fitted = fit_widths(naturals, floors, width - self._frame_width())
        for column, fit in zip(self.columns, fitted, strict=True):
            # Every width given: rich would take a column left to it down to nothing.
            column.width = max(fit, 1)
            column.overflow = "ellipsis"  # a word wider than its column is cut, not split
            column.no_wrap = False

    def _frame_width(self) -> int:
        """Returns the columns that borders and padding take."""
        return self._border_width() + self._padding_width()

    def _border_width(self) -> int:
        if not self.box:
            return 0
        return len(self.columns) - 1 + (2 if self.show_edge else 0)

    def _padding_width(self) -> int:
        _, right, _, left = self.padding
        count = len(self.columns)
        total = (left + right) * count
        if not self.pad_edge and count:
            total -= left + right
        return total


def _without_trailing_space(line: list[Segment]) -> list[Segment]:
    """Returns a line's segments without the spaces that pad it on the right."""
    segments = list(line)
    while segments and not segments[-1].control:
        last = segments[-1]
        text = last.text.rstrip(" ")
        if text:
            segments[-1] = Segment(text, last.style)
            break
        segments.pop()
    return segments


"""Checks how tables fit the width they are printed in (``cli.tables``, ``cli.common.new_table``)
and how the demo summary keeps within its rule (``cli.render.within_summary_width``).

The rule (docs/cli.md): on a terminal a cell wraps between words and a word that cannot fit
is cut with "…", never split over two lines; piped, a table has no borders and no line ends in
padding. The rows are the real ones a user reads: ``submission_row`` with the stated causes
and next steps of ``machines.reasons``.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence

import pytest

from cli.common import console, new_table, state
from cli.demo import _render
from cli.render import summary_width_max, within_summary_width
from cli.tables import cut_cell, cut_width_min, fit_widths, whole_width_max
from ledger.store import DEFAULT_URL
from machines.reasons import describe
from services.demo import DemoSummary

#: Characters of rich's borders (heavy head, light body): not words.
BORDERS = re.compile("[\u2500-\u257f]")

#: Statuses and reasons as ``submissions`` lists them, with the causes and next steps said.
ROWS = [
    ("3306a28cc00c7b87", "arena-ledger-controls", "5Alice", "QUALIFIED", None),
    ("09e0633ad93ae1b7", "mlp-a", "5Bob", "NO_DECISION", "quality_drift"),
    ("4233e7aff883534c", "mlp-a", "5Alice", "FAILED", "candidate_slower"),
    ("bfb008bdd70fc975", "mlp-b", "5Carol", "REJECTED", "missing_eval_cost_payment"),
    ("f01af678dbe37f1e", "reference", "5Dave", "NO_DECISION", "unproven_infrastructure_failure"),
]
HEADERS = ("submission", "arena", "hotkey", "status", "reason", "cause", "next step")


def _said(reason: str | None) -> tuple[str, str]:
    """Returns (cause, next step) as ``submission_row`` states them."""
    said = describe(reason) if reason else None
    if said is None:
        return "passed", "nothing: rewards follow at settlement"
    return said.cause, said.next_step


def _cells() -> list[list[str]]:
    return [[sid, arena, hotkey, status, reason or "", *_said(reason)]
            for sid, arena, hotkey, status, reason in ROWS]


def _printed(rows: Sequence[Sequence[str]], width: int, plain: bool, **options: object) -> str:
    table = new_table(*HEADERS, **options)
    for row in rows:
        table.add_row(*row)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(console, "width", width)
        patch.setattr(console, "plain", plain)
        with console.capture() as captured:
            console.print(table)
    return captured.get()


def _tokens(text: str) -> Iterator[str]:
    yield from BORDERS.sub(" ", text).split()


def _whole_or_cut(text: str, cells: Sequence[Sequence[str]]) -> list[str]:
    """Returns the printed words that are neither a word of a cell (or header) nor a prefix of
    one cut with "…": a word split over two lines shows up here as two pieces."""
    words = {word for row in [HEADERS, *cells] for cell in row for word in cell.split()}
    return [token for token in _tokens(text) if token not in words and not (
        token.endswith("…") and any(word.startswith(token[:-1]) for word in words))]


def test_widths_that_fit_are_the_natural_ones() -> None:
    assert fit_widths([16, 5, 40], [16, 5, 9], 61) == [16, 5, 40]


def test_the_widest_column_wraps_first_and_no_column_below_its_longest_word() -> None:
    # 10 columns too many: the 40-wide prose column gives them all, down to 30.
    assert fit_widths([16, 5, 40], [16, 5, 9], 51) == [16, 5, 30]
    # Two prose columns: they wrap alike, the widest first; neither below its longest word.
    assert fit_widths([10, 40, 30], [10, 12, 11], 50) == [10, 20, 20]
    assert fit_widths([10, 40, 30], [10, 12, 11], 33) == [10, 12, 11]


def test_words_too_wide_together_are_cut_widest_first_short_columns_never() -> None:
    assert fit_widths([16, 11, 25], [16, 11, 25], 45) == [16, 11, 18]
    assert fit_widths([16, 11, 25], [16, 11, 25], 36) == [13, 11, 12]  # the 11 kept whole
    assert whole_width_max >= 11  # NO_DECISION, the longest status
    least = fit_widths([16, 11, 25, 4], [16, 11, 25, 4], 10)
    assert least == [cut_width_min, 11, cut_width_min, 4]  # too narrow: the least


def test_a_cut_cell_ends_in_an_ellipsis_within_its_width() -> None:
    assert cut_cell("NO_DECISION", 11) == "NO_DECISION"
    assert cut_cell("NO_DECISION", 8) == "NO_DECI…"


@pytest.mark.parametrize("width", [80, 100, 60])
def test_at_a_terminals_width_every_word_is_whole_or_cut_never_split(width: int) -> None:
    cells = _cells()
    text = _printed(cells, width, plain=False)
    lines = text.splitlines()
    assert max(map(len, lines)) <= width
    assert _whole_or_cut(text, cells) == []
    assert not [line for line in lines if line != line.rstrip()]
    if width >= 80:  # a status is what a user looks for: whole, where there is any room
        assert {"QUALIFIED", "NO_DECISION", "FAILED", "REJECTED"} <= set(_tokens(text))


def test_a_table_that_fits_keeps_its_borders_and_one_that_cannot_drops_them_first() -> None:
    cells = [[*row[:4], "", "passed", "nothing"] for row in _cells()]
    wide = _printed(cells, 120, plain=False)
    assert wide.splitlines()[0].startswith("┏") and "│ NO_DECISION │" in wide
    narrow = _printed(_cells(), 80, plain=False)
    assert not BORDERS.search(narrow)  # the borders' columns went to the words


def test_piped_a_table_has_no_borders_no_padding_and_each_row_on_one_line() -> None:
    cells = _cells()
    text = _printed(cells, 4096, plain=True)
    lines = text.splitlines()
    assert not BORDERS.search(text)
    assert [line for line in lines if line != line.rstrip()] == []
    assert len(lines) == 1 + len(cells)  # the header, then one line a row
    for line, row in zip(lines[1:], cells, strict=True):
        assert line.startswith(row[0]) and line.endswith(row[-1])
        assert all(cell in line for cell in row)


def _summary() -> DemoSummary:
    return DemoSummary(
        session=1,
        arena_id="mlp-arena",
        submissions=[
            {"hotkey": hotkey, "status": status, "reason": reason, "cause": _said(reason)[0]}
            for _, _, hotkey, status, reason in ROWS
        ],
        controls=[
            {"control_id": name, "verdict": "FAIL", "reason": "slot_audit_failed",
             "outcome": "as_expected", "block": 100_005}
            for name in ("faithful", "wrong-mlp", "skip-mlp", "engine-kill")
        ],
        fees={"total": {"net_rao": 200_000_000, "consumed_rao": 200_000_000,
                        "released_rao": 0, "credits_spent_rao": 500_000_000}},
        weights_ppm={"5Alice": 250_000, "5Bob": 250_000, "burn": 500_000},
        settlement_digest="ab" * 32,
        checkpoint={"tree_size": 120, "root_hash": "cd" * 32, "origin": "arena-ledger/demo"},
        replay={"ok": True, "events": 120, "verdicts_checked": 5, "settlements_checked": 1,
                "settlement_digest": "ab" * 32},
        verify={"ok": True},
        credits={"control_runs": 4, "control_runs_rao": 400_000_000, "miners": 1,
                 "miners_rao": 100_000_000},
        keys={"public": "arena-ledger-demo/validator.key.pub"},
    )


@pytest.mark.parametrize(("width", "plain"), [(4096, True), (200, False), (60, False)])
def test_the_demo_summary_keeps_within_its_rule(width: int, plain: bool) -> None:
    # Printed at a pipe's or a wide terminal's width, its rows ran to 160 characters under
    # its 80-character rule.
    summary = _summary()
    with pytest.MonkeyPatch.context() as patch:
        # The ledger the summary names is the default one, whatever another test left.
        patch.setattr(state, "db_url", DEFAULT_URL)
        patch.setattr(console, "width", width)
        patch.setattr(console, "plain", plain)
        with console.capture() as captured, within_summary_width():
            _render(summary)
        assert console.width == width  # given back afterwards
    text = captured.get()
    lines = text.splitlines()
    rule = min(width, summary_width_max)
    assert len(lines[0]) == rule and "summary" in lines[0]
    assert max(map(len, lines)) <= rule
    assert [line for line in lines if line != line.rstrip()] == []  # wrapped, not padded
    cells = [[row["hotkey"], row["status"], row["reason"] or "-", row["cause"]]
             for row in summary.submissions]
    words = text.split()
    for row in cells:  # a status whole, and each cause wrapped between its words
        assert row[1] in words and all(word in words for word in row[3].split())

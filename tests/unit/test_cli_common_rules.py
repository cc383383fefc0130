"""Pins output rules of cli.common and cli.render that the main CLI tests leave loose.

Found by a hand-made mutation review of cli/common.py and cli/render.py: each test here fails
on one small change to those modules that the other unit tests let through. They pin, from
the modules' docstrings and docs/cli.md:

* a reader that stops early (``arena-ledger events | head``) ends a table with exit 0;
* a control character written out by the console keeps the style of the text around it;
* off a terminal a table is laid out wider than 80 columns, so no row is folded;
* what the consoles print is data, not rich markup (``[b]`` and ``[/]`` shown as typed),
  on stdout and on stderr alike;
* ``--as-of`` takes 0 up to 2**53 - 1 and refuses what lies outside; ``--as-of 0`` is
  said as a position like any other;
* an error's message and reason are one line each with every control character written out
  (also those ``str.split`` takes for spaces: \\x0b-\\x0d, \\x1c-\\x1f, \\x85);
* JSON output is one document indented by 2, keys in the document's order, ending in a
  newline; JSON Lines are one object a line, ``\\n``-ended, keys in order, streamed;
* the audit table shows each tally under its own header.
"""

from __future__ import annotations

import io
import json
from typing import Any

import pytest
import typer
from test_cli_errors import _exit_code_of  # same directory, prepend import mode
from typer.testing import CliRunner

from cli import common
from cli.common import (
    as_of_option,
    console,
    emit_json,
    emit_jsonl,
    err_console,
    handle_errors,
    new_table,
    output_width,
    print_as_of,
)
from cli.render import render_explain
from vocabulary.errors import InvalidInput


class _ClosedPipe(io.StringIO):
    """A stdout whose reader has gone: every write is refused, and counted."""

    def __init__(self) -> None:
        super().__init__()
        self.writes = 0

    def write(self, text: str) -> int:
        self.writes += 1
        raise BrokenPipeError(32, "Broken pipe")


def test_a_table_to_a_reader_that_stopped_ends_with_exit_0(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    pipe = _ClosedPipe()
    piped = common._Console(file=pipe, soft_wrap=True, markup=False, width=80)
    monkeypatch.setattr(common.sys, "stderr", io.StringIO())  # handle_errors closes it

    @handle_errors
    def command() -> None:
        piped.print("a row")

    with pytest.raises(typer.Exit) as exited:
        command()
    assert exited.value.exit_code == 0
    assert pipe.writes >= 1  # the table did reach the pipe


def test_a_control_character_written_out_keeps_the_style_around_it() -> None:
    from rich.text import Text

    segments = list(console.render(Text.assemble(("r\x1b[2Jx", "bold"))))
    (shown,) = [s for s in segments if "\\x1b" in s.text]
    assert shown.text == "r\\x1b[2Jx"
    assert shown.style is not None and shown.style.bold


def test_off_a_terminal_a_table_keeps_each_row_on_one_line(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    class Pipe:
        def isatty(self) -> bool:
            return False

    width = output_width(Pipe(), {})
    assert width is not None
    monkeypatch.setattr(console, "width", width)
    hotkey = "5GrwvaEF5zXb26Fz9rcQpDWS57CtERHpNehXCPcNoHGKutQY"  # 48 characters, as SS58
    table = new_table("hotkey", "coldkey", "reason")
    table.add_row(hotkey, hotkey[::-1], "x" * 60)
    with console.capture() as captured:
        console.print(table)
    rows = [line for line in captured.get().splitlines() if line.startswith("│")]
    assert len(rows) == 1  # the one row, not folded over several lines
    assert hotkey in rows[0] and hotkey[::-1] in rows[0] and "x" * 60 in rows[0]


@pytest.mark.parametrize("printer", [console, err_console], ids=["stdout", "stderr"])
def test_square_brackets_in_data_are_printed_as_typed(printer: Any) -> None:
    with printer.capture() as captured:
        printer.print("5[b]Mal[/]ory [bold]x[/bold]")
    assert captured.get() == "5[b]Mal[/]ory [bold]x[/bold]\n"


def _as_of_app() -> typer.Typer:
    app = typer.Typer()

    @app.command()
    def query(as_of: int | None = as_of_option()) -> None:
        print(f"as_of={as_of}")

    return app


@pytest.mark.parametrize(
    ("value", "exit_code"),
    [("0", 0), (str(2**53 - 1), 0), ("-1", 2), (str(2**53), 2)],
)
def test_as_of_takes_a_position_from_0_to_the_largest_json_integer(
    value: str, exit_code: int
) -> None:
    done = CliRunner().invoke(_as_of_app(), ["--as-of", value])
    assert done.exit_code == exit_code, done.output
    if exit_code == 0:
        assert done.output == f"as_of={value}\n"


def test_as_of_position_0_is_said_like_any_other() -> None:
    with console.capture() as captured:
        print_as_of(None, 7)  # not asked: nothing
        print_as_of(0, 0)
        print_as_of(5, 3)
    assert captured.get() == "as of position 0\nas of position 3\n"


@pytest.mark.parametrize(
    ("raised", "line"),
    [
        # A reason over several lines is one line, and one the message gives is not repeated.
        (
            InvalidInput("the file failed", reason="disk\n  full"),
            "error[invalid_input]: the file failed (reason: disk full)\n",
        ),
        (
            InvalidInput("the file failed: disk full", reason="disk\nfull"),
            "error[invalid_input]: the file failed: disk full\n",
        ),
        # Controls that str.split() takes for spaces are written out too, not made spaces.
        (
            InvalidInput("hotkey a\x1fb\x85c\rd unknown", reason="disk\x1efull"),
            "error[invalid_input]: hotkey a\\x1fb\\x85c\\x0dd unknown (reason: disk\\x1efull)\n",
        ),
        # A terminal's control sequences in the reason are written out, as in the message.
        (
            InvalidInput("the file failed", reason="\x1b[2J\x1b[Hok\x9b"),
            "error[invalid_input]: the file failed (reason: \\x1b[2J\\x1b[Hok\\x9b)\n",
        ),
    ],
)
def test_the_reason_is_printed_as_the_message_is(
    raised: InvalidInput, line: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _exit_code_of(raised) == 1
    assert capsys.readouterr().err == line


def test_json_output_is_one_document_indented_by_two_in_the_documents_order(
    capsys: pytest.CaptureFixture[str],
) -> None:
    emit_json({"submission_id": "dd97", "admitted": False, "fee": None})
    assert capsys.readouterr().out == (
        '{\n  "submission_id": "dd97",\n  "admitted": false,\n  "fee": null\n}\n'
    )


def test_json_lines_are_one_object_a_line_in_order_ended_by_a_line_feed(
    capsys: pytest.CaptureFixture[str],
) -> None:
    values = [
        {"stream": "credit-a", "position": 2, "payload": {"b": [1, 2], "a": None}},
        {"z": "last", "a": "first"},
    ]
    emit_jsonl(values)
    out = capsys.readouterr().out
    assert out.endswith("\n") and "\r" not in out
    lines = out.split("\n")[:-1]
    assert len(lines) == 2
    parsed = [json.loads(line) for line in lines]
    assert parsed == values
    assert [list(p) for p in parsed] == [["stream", "position", "payload"], ["z", "a"]]
    assert list(parsed[0]["payload"]) == ["b", "a"]


def test_json_lines_are_written_as_each_value_comes(monkeypatch: pytest.MonkeyPatch) -> None:
    out = io.StringIO()
    monkeypatch.setattr(common.sys, "stdout", out)
    seen: list[str] = []

    def values() -> Any:
        yield {"position": 1}
        seen.append(out.getvalue())  # what was written before the second value was read
        yield {"position": 2}

    emit_jsonl(values())
    assert seen == ['{"position":1}\n']
    assert out.getvalue() == '{"position":1}\n{"position":2}\n'


def test_the_audit_table_shows_each_tally_under_its_header(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(console, "width", 200)
    tally = {
        "calls": 64,
        "violations": 1,
        "near_misses": 2,
        "uncomparable": 3,
        "min_score": "0.97",
        "outcome": "FAIL",
    }
    with console.capture() as captured:
        render_explain("attempt", {"attempt_id": "att-1", "audit": {"lm_head": tally}})
    lines = captured.get().splitlines()
    start = lines.index("audit")

    def cells(line: str) -> list[str]:
        return [cell.strip() for cell in line.replace("┃", "│").strip("│").split("│")]

    header = next(line for line in lines[start:] if line.startswith("┃ node"))
    row = next(line for line in lines[start:] if line.startswith("│ lm_head"))
    assert dict(zip(cells(header), cells(row), strict=True)) == {
        "node": "lm_head",
        "calls": "64",
        "violations": "1",
        "near misses": "2",
        "uncomparable": "3",
        "min score": "0.97",
        "outcome": "FAIL",
    }

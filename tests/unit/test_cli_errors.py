"""Checks the CLI's last line of defence: every error a command lets out is one stderr line.

The library maps the database's errors where it talks to the database; ``handle_errors``
also maps one it missed, so a path nobody foresaw still ends as the store's one line and
its exit code, not a traceback.
"""

from __future__ import annotations

import os
import sqlite3
import threading
from pathlib import Path

import psycopg
import pytest
import typer
from sqlalchemy.exc import OperationalError

from cli.common import (
    handle_errors,
    output_width,
    piped_width,
    state,
)
from vocabulary.errors import InvalidInput, open_input, read_input, require_file


def _exit_code_of(raised: BaseException) -> int:
    """Runs a command that raises ``raised`` under ``handle_errors``; returns its exit code."""

    @handle_errors
    def command() -> None:
        raise raised

    with pytest.raises(typer.Exit) as exited:
        command()
    return exited.value.exit_code


@pytest.mark.parametrize(
    ("raised", "code", "exit_code", "text"),
    [
        (sqlite3.OperationalError("database is locked"), "store_unavailable", 5,
         "the database is unavailable: database is locked"),
        (OperationalError("SELECT 1", {}, sqlite3.OperationalError("disk I/O error")),
         "store_unavailable", 5, "the database is unavailable: disk I/O error"),
        (psycopg.errors.InsufficientPrivilege("permission denied for table events"),
         "store_error", 5, "database error: permission denied for table events"),
        (InvalidInput("bad thing", path="--x"), "invalid_input", 1, "[path --x]: bad thing"),
    ],
)
def test_a_command_error_is_one_line_and_its_exit_code(
    raised: Exception, code: str, exit_code: int, text: str,
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(state, "db_url", "postgresql+psycopg://u:secret@db.internal/x")
    assert _exit_code_of(raised) == exit_code
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"error[{code}]"), err
    assert text in err and "secret" not in err and "Traceback" not in err


@pytest.mark.parametrize(
    ("raised", "line"),
    [
        # A reason the message does not already give is added; one it gives is not repeated.
        (InvalidInput("the file failed", reason="disk full"),
         "error[invalid_input]: the file failed (reason: disk full)\n"),
        (InvalidInput("the file failed: disk full", reason="disk full"),
         "error[invalid_input]: the file failed: disk full\n"),
        # Line before path, each named; a message over several lines is one line.
        (InvalidInput("bad\n  value", path="$.x", line=3),
         "error[invalid_input] [line 3] [path $.x]: bad value\n"),
        # A terminal's control sequences, in the message or the place, are written out.
        (InvalidInput("stage \x1b[2Jx\x9b", path="run\x1b]0;t\x07"),
         "error[invalid_input] [path run\\x1b]0;t\\x07]: stage \\x1b[2Jx\\x9b\n"),
    ],
)
def test_the_error_line_names_the_place_and_a_reason_once(
    raised: InvalidInput, line: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _exit_code_of(raised) == 1
    assert capsys.readouterr().err == line


def test_an_interrupt_exits_130_with_one_word(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert _exit_code_of(KeyboardInterrupt()) == 130  # 128 + SIGINT, as a shell reports it
    assert capsys.readouterr().err == "interrupted\n"


def test_anything_else_is_left_to_surface_as_the_bug_it_is() -> None:
    @handle_errors
    def command() -> None:
        raise KeyError("a bug, not an expected error")

    with pytest.raises(KeyError):
        command()


def test_a_path_that_is_not_a_file_is_told_apart(tmp_path: Path) -> None:
    (tmp_path / "f.json").write_text("{}")
    require_file(tmp_path / "f.json", "input file")  # a file: no error
    for path, problem in ((tmp_path / "nope.json", "does not exist"),
                          (tmp_path, "is a directory, not a file")):
        with pytest.raises(InvalidInput) as caught:
            require_file(path, "input file")
        assert caught.value.message == f"input file {path} {problem}"
        assert caught.value.context == {"path": str(path)}


def test_a_pipe_is_read_as_input_but_refused_where_a_regular_file_is_needed(
    tmp_path: Path,
) -> None:
    fifo = tmp_path / "input.pipe"
    os.mkfifo(fifo)
    require_file(fifo, "input file")  # a pipe reads as a stream of bytes: no error
    with pytest.raises(InvalidInput) as caught:
        require_file(fifo, "backup file", regular=True)
    assert caught.value.message == (
        f"backup file {fifo} is not a regular file; give a file, not a pipe or a device")
    writer = threading.Thread(target=fifo.write_bytes, args=(b'{"a": 1}',))
    writer.start()
    try:
        assert read_input(fifo, "file") == b'{"a": 1}'
    finally:
        writer.join(timeout=30)
    with pytest.raises(InvalidInput) as missing:
        read_input(tmp_path / "nope.json", "file")
    assert missing.value.message == f"file {tmp_path / 'nope.json'} does not exist"


@pytest.mark.skipif(not Path("/proc/self/mem").exists(), reason="needs Linux's /proc")
def test_a_file_the_system_will_not_read_is_named_with_its_reason() -> None:
    # /proc/self/mem opens, and its first page (address 0, unmapped) fails to read: an
    # OSError past the checks, as an unreadable disk or a permission would give.
    with pytest.raises(InvalidInput) as caught:
        read_input("/proc/self/mem", "input file")
    assert caught.value.message == "input file /proc/self/mem cannot be read: Input/output error"
    assert caught.value.context == {"path": "/proc/self/mem"}
    with open_input("/proc/self/mem", "input file") as opened:  # opening it succeeds
        assert opened.readable()


class _Stream:
    def __init__(self, tty: bool | None) -> None:
        self.tty = tty

    def isatty(self) -> bool:
        if self.tty is None:
            raise ValueError("I/O operation on closed file")
        return self.tty


def test_tables_keep_every_cell_off_a_terminal_and_fit_a_terminal_or_columns() -> None:
    assert output_width(_Stream(False), {}) == piped_width  # a pipe or a file
    assert output_width(_Stream(None), {}) == piped_width  # a closed stream: not a terminal
    assert output_width(object(), {}) == piped_width  # no isatty at all
    assert output_width(_Stream(True), {}) is None  # rich measures the terminal
    assert output_width(_Stream(False), {"COLUMNS": "100"}) is None  # rich reads COLUMNS


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("tab\there\nnext line", "tab\there\nnext line"),  # kept: the CLI's own layout
        ("\x00\x08\x0b\x1f", "\\x00\\x08\\x0b\\x1f"),  # C0, both sides of tab and line feed
        ("~\x7f\x80\x9f\xa0", "~\\x7f\\x80\\x9f\xa0"),  # DEL and C1; their neighbours shown
        ("a\u202eb\u202ac\u2066d\u2069e\u2067", "a\\u202eb\\u202ac\\u2066d\\u2069e\\u2067"),
        ("\u2029\u202f\u2065\u206a", "\u2029\u202f\u2065\u206a"),  # next to the bidi ranges
        ("5[b]Mal[/]ory é ✓", "5[b]Mal[/]ory é ✓"),
    ],
)
def test_visible_writes_out_what_a_terminal_would_act_on(text: str, shown: str) -> None:
    from cli.common import visible

    assert visible(text) == shown


def test_options_named_renames_only_the_fields_it_maps() -> None:
    from cli.common import options_named
    from vocabulary.errors import NotFound, SchemaError

    with pytest.raises(SchemaError) as raised, options_named(reason="--reason"):
        raise SchemaError("SubmissionHeld v1: $.payload.reason: too long",
                          path="$.payload.reason", type="SubmissionHeld", errors=2)
    assert type(raised.value) is SchemaError
    assert raised.value.message == "--reason: too long"
    assert raised.value.context == {"path": "--reason", "type": "SubmissionHeld", "errors": 2}
    # A library parameter's name is mapped too; its message has no path to cut.
    with pytest.raises(InvalidInput) as raised, options_named(submission_id="--submission"):
        raise InvalidInput("a whole id, please", path="submission_id")
    assert (raised.value.message, raised.value.context) == (
        "--submission: a whole id, please", {"path": "--submission"})
    unmapped = [
        SchemaError("X v1: $.payload.block: bad", path="$.payload.block"),
        SchemaError("X v1: $.payload.reason.x: bad", path="$.payload.reason.x"),
        InvalidInput("no path"),
        NotFound("reason", path="reason"),
    ]
    for error in unmapped:
        with pytest.raises(type(error)) as raised, options_named(reason="--reason"):
            raise error
        assert raised.value is error


def test_starting_the_cli_imports_neither_alembic_nor_psycopg_nor_the_bundle_code() -> None:
    # Every command starts the interpreter and imports cli.app; alembic (a fifth of a second
    # on our hosts), psycopg and the bundle and checkpoint code are imported by the commands
    # that use them. The error tuple of the store adds psycopg's once psycopg is loaded.
    import subprocess
    import sys

    probe = (
        "import sys, cli.app, ledger.database as s; "
        "print(sorted(m for m in ('alembic', 'psycopg', 'ledger.bundle', 'ledger.checkpoint',"
        " 'ledger.migrate') if m in sys.modules)); print(s.database_errors()[1:]); "
        "import psycopg; print(psycopg.Error in s.database_errors())"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          check=True, timeout=120)
    assert done.stdout.splitlines() == ["[]", "(<class 'sqlite3.Error'>,)", "True"], done


# A reason is one line, written out as the message is: every control character spelled (also those
# str.split takes for spaces), and one the message already gives is not repeated.


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


def test_a_postgresql_ledger_without_psycopg_names_the_extra_and_exits_5() -> None:
    import subprocess
    import sys

    # psycopg made unimportable, as in an install without the postgres extra.
    probe = (
        "import sys; sys.modules['psycopg'] = None; from cli.app import main; "
        "sys.argv = ['arena-ledger', '--db', 'postgresql://u:secret@127.0.0.1:1/x', 'stats']; "
        "main()"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          check=False, timeout=120)
    assert done.returncode == 5, done.stderr
    assert done.stderr == (
        "error[store_unavailable]: a PostgreSQL ledger needs the psycopg driver, which is not "
        "installed: install the postgres extra (pip install 'arena-ledger[postgres]')\n")

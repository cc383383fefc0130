"""Holds what every CLI command shares: the store URL, error rendering and JSON output."""

from __future__ import annotations

import contextlib
import functools
import os
import re
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NoReturn, ParamSpec, TypeVar

import orjson
import typer
from rich.console import Console, ConsoleOptions
from rich.segment import Segment
from rich.text import Text

from ledger.database import database_errors, store_error
from ledger.store import DEFAULT_URL, EventStore
from vocabulary.errors import InvalidInput, LedgerError
from vocabulary.limits import json_integer_abs_max

if TYPE_CHECKING:
    from rich.table import Table

__all__ = [
    "EXIT_CODES",
    "INT_MAX",
    "State",
    "as_of_option",
    "console",
    "counted",
    "decision_text",
    "emit_json",
    "emit_jsonl",
    "err_console",
    "fail",
    "handle_errors",
    "new_table",
    "options_named",
    "output_width",
    "piped_width",
    "print_as_of",
    "shown",
    "state",
    "visible",
]

#: The largest value of every integer option (positions, blocks, amounts, limits): the
#: largest integer a ledger field holds (JSON's interoperable range, 2**53 - 1). A longer
#: number is then a usage error naming the option, not a database overflow traceback.
INT_MAX = json_integer_abs_max

#: Documented exit codes of every command.
EXIT_CODES = {
    0: "ok",
    1: "refused or invalid input (nothing was written)",
    2: "usage error (bad flags or arguments)",
    3: "concurrency conflict (nothing was written; re-read and retry)",
    4: (
        "integrity failure (chain, proof, signature or replay mismatch; `controls`: the "
        "latest complete control run of the arena, or of any arena, has an unexpected "
        "outcome)"
    ),
    5: "store unavailable or not initialised, or replay's temporary archive file failed",
    6: "engine fault, or no engine here (the `engine` extra is not installed)",
    130: "interrupted (Ctrl-C; an append either committed whole or not at all)",
}


#: The characters a terminal acts on rather than shows: C0 controls but tab and line feed,
#: DEL and C1 (ESC and CSI start cursor moves, screen clears, title changes; CR overwrites),
#: and the bidirectional overrides and isolates (they reorder the text around them).
_CONTROLS = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def _written_out(found: re.Match[str]) -> str:
    code = ord(found.group())
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}"


def visible(text: str) -> str:
    """Returns ``text`` with every control character a terminal would act on written out as
    ``\\xNN`` or ``\\uNNNN`` (tab and line feed kept).

    Why: the CLI prints data recorded by others: a hold or release reason is free text from
    any operator of a shared ledger, and every string of an imported bundle is another
    validator's. Printed raw, an escape sequence in one could clear the screen or move the
    cursor and write "PASS" over "FAIL" in front of an auditor. JSON output escapes them.
    """
    return _CONTROLS.sub(_written_out, text)


class _Console(Console):
    """rich's Console, except that it prints data's control characters visibly (``visible``)
    and that a reader that stops early (``arena-ledger events | head``) ends a table the way
    ``handle_errors`` ends JSON output, exit 0, not rich's exit 1.

    ``plain``: the output goes to a pipe or a file, not a person's terminal; tables are then
    printed without borders (``cli.tables.FittedTable``). ``trim``: no line ends in spaces
    (rich pads a cell, and leaves the space where it wraps a line); not for a console that
    draws a progress bar, whose frames pad lines to overwrite the one before.
    """

    def __init__(self, *args: Any, plain: bool = False, trim: bool = False,
                 **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.plain = plain
        self.trim = trim

    def on_broken_pipe(self) -> None:
        self.quiet = True
        raise BrokenPipeError

    def render_str(self, text: str, **options: Any) -> Text:
        # Every string printed or put in a table cell is made a Text here (and measured so).
        return super().render_str(visible(text), **options)

    def render(self, renderable: Any, options: ConsoleOptions | None = None) -> Iterator[Segment]:
        # What did not pass through render_str (a Text built by hand): rich's own control
        # segments (a progress bar's cursor moves) carry ``control`` and are left alone.
        segments = (
            segment if segment.control or not _CONTROLS.search(segment.text)
            else Segment(visible(segment.text), segment.style)
            for segment in super().render(renderable, options)
        )
        yield from _trimmed(segments) if self.trim else segments


def _trimmed(segments: Iterable[Segment]) -> Iterator[Segment]:
    """Yields ``segments`` without the spaces that end a line (kept where no line end
    follows them, as before a progress bar's cursor move)."""
    pending: list[Segment] = []  # spaces seen since the last text: trailing, if a line ends
    for segment in segments:
        if segment.control:
            yield from pending
            pending.clear()
            yield segment
            continue
        *ended, last = segment.text.split("\n")
        for part in ended:
            part = part.rstrip(" ")
            if part:
                yield from pending
                yield Segment(part, segment.style)
            pending.clear()
            yield Segment("\n")
        text = last.rstrip(" ")
        if text:
            yield from pending
            pending.clear()
            yield Segment(text, segment.style)
        if len(text) < len(last):
            pending.append(Segment(last[len(text):], segment.style))
    yield from pending


#: The width tables are laid out in when stdout is neither a terminal nor sized by COLUMNS
#: (a pipe or a file): wider than any table, so no cell is cut to fit 80 columns.
piped_width = 4096


def output_width(stream: Any, environ: Mapping[str, str]) -> int | None:
    """Returns the width to lay ``stream``'s output out in: None (rich measures the terminal,
    or reads COLUMNS) on a terminal or with COLUMNS set, else ``piped_width``.

    Why: off a terminal rich assumes 80 columns and cuts table cells to fit with "…", so
    ``arena-ledger rewards > report.txt`` lost the end of every hotkey. A table is as wide
    as its widest cells, so a wide width costs nothing; a terminal keeps its own width.
    """
    if "COLUMNS" in environ:
        return None
    try:
        on_terminal = bool(stream.isatty())
    except (AttributeError, ValueError):  # no isatty, or a closed stream
        on_terminal = False
    return None if on_terminal else piped_width


#: markup=False: what the CLI prints is data (hotkeys, hold reasons, fault details, paths),
#: and a hotkey may be any printable ASCII: rich's markup would hide ``[b]`` in one (two
#: hotkeys shown alike) and fail on ``[/]``. Styles are given as ``rich.text.Text``.
_stdout_width = output_width(sys.stdout, os.environ)
console = _Console(soft_wrap=True, markup=False, width=_stdout_width,
                   plain=_stdout_width is not None, trim=True)
err_console = _Console(stderr=True, soft_wrap=True, markup=False)


def as_of_option() -> Any:
    """Returns the ``--as-of N`` option of the query commands (``ArenaLedger.as_of``)."""
    return typer.Option(
        None,
        "--as-of",
        min=0,
        max=INT_MAX,
        help="Answer as the ledger stood at position N (later events unseen; past the head, "
        "the head).",
    )


def print_as_of(as_of: int | None, position: int) -> None:
    """Prints the position a query answered as of, when ``--as-of`` asked for one."""
    if as_of is not None:
        console.print(f"as of position {position}")


def new_table(*headers: str, **options: Any) -> Table:
    """Returns a table in the house style, a title at its left, that fits the width it is
    printed in (``cli.tables.FittedTable``): a cell wraps between words, a word too wide
    for any room left is cut with "…", none is split over two lines; piped, no borders.
    (rich.table is imported here, by the commands that print a table, not by every command.)
    """
    from rich.table import Column

    from cli.tables import FittedTable

    options.setdefault("title_justify", "left")
    return FittedTable(*(Column(header) for header in headers), **options)


P = ParamSpec("P")
R = TypeVar("R")


@dataclass
class State:
    """Carries the global options to each command."""

    db_url: str = DEFAULT_URL
    actor: str = "cli"

    def store(self, *, require: bool = True) -> EventStore:
        """Opens the store at the configured URL, refusing an uninitialised one by default."""
        store = EventStore(self.db_url)
        if require:
            try:
                store.require_initialised()
            except LedgerError:
                store.close()
                raise
        return store


state = State(db_url=os.environ.get("ARENA_LEDGER_DB", DEFAULT_URL))


def fail(error: LedgerError) -> NoReturn:
    """Prints one line for an expected error and exits with its documented code."""
    where = ""
    for key in ("line", "path"):
        if key in error.context:
            where += f" [{key} {visible(str(error.context[key]))}]"
    # Written out before the split: str.split() takes \x0b-\x0d, \x1c-\x1f, \x85 for spaces.
    message = " ".join(visible(error.message).split())  # one line, whatever it held
    reason = error.context.get("reason")
    if isinstance(reason, str):
        reason = " ".join(visible(reason).split())  # compared as the message is printed
        if reason not in message:
            message += f" (reason: {reason})"
    sys.stderr.write(f"error[{error.code}]{where}: {message}\n")
    raise typer.Exit(error.exit_code)


def handle_errors(func: Callable[P, R]) -> Callable[P, R]:
    """Turns LedgerError into one stderr line and its exit code; no traceback."""

    @functools.wraps(func)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return func(*args, **kwargs)
        except LedgerError as error:
            fail(error)
        except database_errors() as exc:
            # The library maps the database's errors where it talks to it; one it did not
            # (a role without privileges, say) is still the store's one line, not a traceback.
            fail(store_error(exc, state.db_url))
        except KeyboardInterrupt:
            err_console.print("interrupted")
            raise typer.Exit(130) from None
        except BrokenPipeError:
            sys.stderr.close()
            raise typer.Exit(0) from None

    return wrapper


@contextlib.contextmanager
def options_named(**options: str) -> Iterator[None]:
    """Names the option a person typed when the library refuses the payload field it fed.

    A command that builds an event from its options (``hold --reason``) hands the library
    fields it names by their place in the event (``$.payload.reason``) or by its own
    parameter's name (``submission_id``); the person typed ``--reason``, so the error names
    that. ``options`` maps field or parameter → option; input errors of other fields, and
    every other error, pass unchanged.
    """
    try:
        yield
    except InvalidInput as error:
        path = error.context.get("path")
        field = path.removeprefix("$.payload.") if isinstance(path, str) else None
        option = options.get(field) if field is not None else None
        if option is None:
            raise
        _, found, detail = error.message.partition(f"{path}: ")
        renamed = type(error)(
            f"{option}: {detail if found else error.message}", **{**error.context, "path": option}
        )
        raise renamed from None


def counted(number: int, noun: str) -> str:
    """Returns "1 settlement", "0 settlements", "2,046 settlements": a count and its noun."""
    return f"{number:,} {noun}" if number == 1 else f"{number:,} {noun}s"


def shown(value: Any) -> str:
    """Returns a value as a human line shows it: "-" for none (a verdict without a speedup,
    a PASS without a reason), else its text."""
    return "-" if value is None else str(value)


def decision_text(decision: Mapping[str, Any]) -> str:
    """Returns a decision in one line: "PASS (COMPLETE) speedup 1.019129 pass line 0.018884",
    "NO_DECISION engine_killed (COMPLETE) speedup - pass line -" (a reason only when there
    is one; the disposition and pass line when the decision carries them)."""
    words = [shown(decision.get("verdict"))]
    if decision.get("reason"):
        words.append(str(decision["reason"]))
    if decision.get("disposition"):
        words.append(f"({decision['disposition']})")
    words.append(f"speedup {shown(decision.get('speedup'))}")
    if "pass_line" in decision:
        words.append(f"pass line {shown(decision['pass_line'])}")
    return " ".join(words)


def emit_json(value: Any) -> None:
    """Writes one JSON document to stdout."""
    sys.stdout.write(orjson.dumps(value, option=orjson.OPT_INDENT_2).decode() + "\n")


def emit_jsonl(values: Iterable[Any]) -> None:
    """Writes JSON Lines to stdout, one object per line, streaming."""
    write = sys.stdout.write
    for value in values:
        write(orjson.dumps(value).decode() + "\n")

"""Defines the ``arena-ledger`` command line: thin commands over the library."""

from __future__ import annotations

import sys
from collections.abc import Iterable, Sequence
from enum import StrEnum
from itertools import islice
from typing import IO

import typer

from cli.common import (
    EXIT_CODES,
    INT_MAX,
    console,
    counted,
    emit_json,
    emit_jsonl,
    handle_errors,
    state,
)
from cli.db import db_app
from cli.help import restyle
from cli.progress import ProgressBar
from cli.projections import projections_app
from cli.tables import cut_cell, fit_widths
from ledger.log import configure_logging
from ledger.records import RecordedEvent
from ledger.store import DEFAULT_URL, EventStore
from services.append import BatchAppended, append_batches
from services.arena_ledger import ArenaLedger
from services.build_info import package_version
from services.draft_lines import read_drafts
from services.event_pages import CLI_NAMES, EventFilter
from services.follow import (
    follow,
    follow_interval_s,
    follow_interval_s_max,
    follow_interval_s_min,
)
from vocabulary import limits
from vocabulary.errors import InvalidInput, open_input, unreadable

__all__ = ["app", "main"]

app = typer.Typer(
    name="arena-ledger",
    help="The system of record for inference-kernel arenas: an append-only, hash-chained, "
    "verifiable event ledger.\n\nExit codes: "
    + "; ".join(f"{code} {text}" for code, text in EXIT_CODES.items()),
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
app.add_typer(db_app, name="db")
app.add_typer(projections_app, name="projections")


class LogLevel(StrEnum):
    """The levels --log-level accepts (any case): a usage error names them otherwise."""

    DEBUG = "DEBUG"
    INFO = "INFO"
    WARNING = "WARNING"
    ERROR = "ERROR"


def _version(asked: bool) -> None:
    """Prints the installed package's version and exits 0 (``--version``)."""
    if not asked:
        return
    console.print(f"arena-ledger {package_version()}")
    raise typer.Exit(0)


@app.callback()
def _global(
    db: str = typer.Option(
        state.db_url, "--db", envvar="ARENA_LEDGER_DB", metavar="<url>", show_default=False,
        help=f"Database URL, sqlite:///FILE or postgresql+psycopg://… (default: "
        f"{DEFAULT_URL}).",
    ),
    log_level: LogLevel = typer.Option(
        LogLevel.WARNING, "--log-level", case_sensitive=False, metavar="<level>",
        show_default=False,
        help="Level of the structured logs on stderr: debug, info, warning (the default) or "
        "error, in any case.",
    ),
    version: bool = typer.Option(
        False, "--version", is_eager=True, callback=_version,
        help="Print the version and exit.",
    ),
) -> None:
    state.db_url = db
    configure_logging(log_level.value)


@app.command()
@handle_errors
def init() -> None:
    """Creates (or upgrades) the ledger's tables at --db; an existing ledger must verify first."""
    from ledger import migrate
    from ledger.store import safe_url
    from services import operations as ops

    ops.upgrade(state.db_url)
    with state.store() as store:
        head = store.head()
    # The URL as it may be shown: a password hidden.
    console.print(f"ledger ready at {safe_url(state.db_url)} (head {head.position}, "
                  f"revision {migrate.current(state.db_url)})")


def _open_input(path: str) -> IO[bytes]:
    if path == "-":
        return sys.stdin.buffer
    return open_input(path, "input file")


@app.command()
@handle_errors
def append(
    file: str = typer.Argument(..., help="JSON Lines of event drafts, or - for stdin."),
    batch: int | None = typer.Option(
        None, "--batch", min=1, max=limits.batch_events_max,
        help="Append in batches of N lines (default: the whole file as one atomic batch).",
    ),
    actor: str = typer.Option("cli", "--actor", help="Who appends (recorded with each event)."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object per batch."),
) -> None:
    """Appends events from JSON Lines drafts; the file (or each --batch) is one atomic append.

    Every line's schema and limits are checked before the first batch is written. Every
    domain event is checked by its stream's state machine; a refused one is reported with its
    line number, nothing of its batch or the later ones is written, and the error says which
    lines earlier batches appended.
    """
    with _open_input(file) as source:
        try:
            lines = list(read_drafts(source))
        except OSError as exc:  # a failing disk, a pipe's writer gone wrong
            raise unreadable(file, "input file", exc) from None
    if not lines:
        raise InvalidInput("the input holds no events", path=file)
    with ArenaLedger(state.db_url, actor=actor) as ledger, \
            ProgressBar(as_json) as progress:
        append_batches(ledger, lines, batch, actor=actor, progress=progress,
                       on_batch=lambda appended: _report_append(appended, as_json))


def _report_append(appended: BatchAppended, as_json: bool) -> None:
    result = appended.result
    if as_json:
        emit_jsonl([{
            "first_line": appended.first_line,
            "last_line": appended.last_line,
            "positions": list(result.positions),
            "already_recorded": result.already_recorded,
        }])
        return
    verb = "already recorded at" if result.already_recorded else "appended"
    first, last = appended.first_line, appended.last_line
    where = (f"position {result.first}" if result.first == result.last
             else f"positions {result.first}..{result.last}")
    lines = f"line {first}" if first == last else f"lines {first}..{last}"
    console.print(f"{verb} {where} ({counted(len(result.positions), 'event')}, {lines})")


@app.command()
@handle_errors
def events(
    stream: str | None = typer.Option(None, "--stream", help="Only this stream."),
    stream_prefix: str | None = typer.Option(None, "--stream-prefix", help="Only streams "
                                             "starting with this, e.g. attempt-."),
    types: list[str] | None = typer.Option(None, "--type", help="Only this type (repeatable)."),
    from_position: int = typer.Option(
        1, "--from-position", min=1, max=INT_MAX, help="First position listed."
    ),
    to_position: int | None = typer.Option(
        None, "--to-position", min=0, max=INT_MAX, help="Last position listed."
    ),
    as_of: int | None = typer.Option(
        None, "--as-of", min=0, max=INT_MAX,
        help="The ledger as of position N (same as --to-position N).",
    ),
    since: str | None = typer.Option(None, "--since", help="recorded_at >= this (RFC 3339, "
                                     "or a date; UTC where it names no offset)."),
    until: str | None = typer.Option(None, "--until", help="recorded_at < this (RFC 3339, "
                                     "or a date; UTC where it names no offset)."),
    limit: int | None = typer.Option(None, "--limit", min=1, max=INT_MAX,
                                     help="Most events listed."),
    follow_on: bool = typer.Option(
        False, "--follow", help="After the listing, keep printing matching events as they "
        "commit, until Ctrl-C (exit 130); not with --to-position, --as-of, --limit or --until.",
    ),
    interval: float | None = typer.Option(
        None, "--interval", min=follow_interval_s_min, max=follow_interval_s_max,
        metavar="<seconds>", show_default=False,
        help=f"With --follow: seconds between looks at the ledger while nothing new has "
        f"committed (default {follow_interval_s}).",
    ),
    as_json: bool = typer.Option(False, "--json", help="JSON Lines, one event per line."),
) -> None:
    """Lists recorded events in position order, with filters; --follow goes on as they commit.

    With --follow the listing does not end: after the events already recorded it prints
    each matching event as it commits (--json: each batch of lines is flushed at once), and
    Ctrl-C ends it (exit 130, nothing more printed on stdout).
    """
    if follow_on:
        _check_follow(to_position=to_position, as_of=as_of, limit=limit, until=until)
    elif interval is not None:
        raise InvalidInput("--interval paces --follow: give --follow too", path="--interval")
    chosen = EventFilter.checked(
        stream, stream_prefix, types, names=CLI_NAMES,
        recorded_from=None if since is None else _recorded_at(since, "--since"),
        recorded_to=None if until is None else _recorded_at(until, "--until"),
    )
    upper = as_of if as_of is not None else to_position
    with state.store() as store:
        if follow_on:
            _follow(store, from_position - 1, chosen, interval, as_json)
            return
        rows = store.read_all(from_position, limit, to_position=upper,
                              **chosen.store_args(), **chosen.time_args())
        if as_json:
            emit_jsonl(r.to_json() for r in rows)
        else:
            head = store.head().position
            _print_events(rows, head if upper is None else min(upper, head))


def _check_follow(**bounds: object) -> None:
    """Refuses --follow with an option that ends the listing: following never ends."""
    given = [f"--{name.replace('_', '-')}" for name, value in bounds.items() if value is not None]
    if given:
        raise InvalidInput(
            f"--follow lists without end, so it takes no --to-position, --as-of, --limit or "
            f"--until; drop {' and '.join(given)}, or --follow",
            path=given[0],
        )


def _follow(store: EventStore, after: int, chosen: EventFilter, interval: float | None,
            as_json: bool) -> None:
    """Prints the matching events after ``after`` as they commit, until Ctrl-C."""
    head = store.head().position
    batches = follow(store, after, chosen,
                     interval_s=follow_interval_s if interval is None else interval)
    if as_json:
        for batch in batches:
            emit_jsonl(r.to_json() for r in batch)
            sys.stdout.flush()  # a reader sees each line now, not when a buffer fills
        return
    table = _EventTable(head)
    for batch in batches:
        table.print(batch)


def _recorded_at(text: str, option: str) -> str:
    """Returns an instant as the ledger spells ``recorded_at`` (UTC, microseconds, ``Z``).

    The filter compares text, so ``2026-11-30T16:00:00+01:00`` must become
    ``2026-11-30T15:00:00.000000Z`` first, and ``notadate`` must be refused, not matched
    against every timestamp.
    """
    from datetime import UTC, datetime

    from ledger.store import recorded_at_text

    try:
        instant = datetime.fromisoformat(text)
        if instant.tzinfo is None:
            instant = instant.replace(tzinfo=UTC)
        return recorded_at_text(instant)
    except (ValueError, OverflowError):  # OverflowError: an offset that leaves years 1-9999
        raise InvalidInput(
            f"{text!r} is not an RFC 3339 date-time such as 2026-11-30T15:00:00Z, or a date "
            "such as 2026-11-30, between the years 1 and 9999 in UTC",
            path=option,
        ) from None


#: Rows of the ``events`` listing laid out and printed at a time. The listing streams: as one
#: rich table, a long listing printed nothing for a long time and held all of it in memory.
events_chunk_rows = 1_000
_EVENT_HEADERS = ("pos", "stream", "ver", "type", "recorded_at", "hash")
#: How far each column of the listing is cut before any is cut further, on a terminal too
#: narrow for it: a stream to its category and an id prefix, a time to its date, a hash to
#: 8 characters; the position, version and type are kept whole the longest.
_EVENT_CUT_FIRST = (INT_MAX, 20, INT_MAX, INT_MAX, 11, 8)


def _print_events(rows: Iterable[RecordedEvent], last_position: int) -> None:
    """Prints the events as aligned columns, a chunk at a time, then how many there were.

    The position column is as wide as ``last_position`` needs, the others as the first chunk
    needs; a longer value later pushes its line out rather than being cut. On a terminal
    narrower than the first chunk's lines, the widest columns are cut with "…" to fit it
    (``cli.tables.fit_widths``), and so is every later cell wider than its column.
    """
    table = _EventTable(last_position)
    count, it = 0, iter(rows)
    while chunk := list(islice(it, events_chunk_rows)):
        table.print(chunk)
        count += len(chunk)
    if table.widths is None:
        console.print(_columns(_EVENT_HEADERS, [len(h) for h in _EVENT_HEADERS]))
    console.print(counted(count, "event"))


class _EventTable:
    """Prints chunks of events as the columns of one listing: the header and the widths
    come with the first chunk (see ``_print_events``), every later chunk keeps them."""

    def __init__(self, last_position: int) -> None:
        self.last_position = last_position
        self.widths: list[int] | None = None
        self.cut = False

    def print(self, chunk: Sequence[RecordedEvent]) -> None:
        """Prints ``chunk``'s rows (and the header, before the first)."""
        cells = [(str(r.position), r.stream, str(r.version), f"{r.type} v{r.schema_version}",
                  r.recorded_at, r.entry_hash[:16]) for r in chunk]
        lines = []
        if self.widths is None:
            widths = [max(len(h), *(len(c[i]) for c in cells))
                      for i, h in enumerate(_EVENT_HEADERS)]
            widths[0] = max(widths[0], len(str(self.last_position)))
            room = console.width - len(_COLUMN_GAP) * (len(widths) - 1)
            floors = [min(w, f) for w, f in zip(widths, _EVENT_CUT_FIRST, strict=True)]
            fitted = fit_widths(widths, floors, room)
            self.cut, self.widths = fitted != widths, fitted
            lines.append(_columns(_EVENT_HEADERS, fitted, self.cut))
        widths_now = self.widths
        lines += [_columns(c, widths_now, self.cut) for c in cells]
        console.print("\n".join(lines), highlight=False)


_COLUMN_GAP = "  "


def _columns(cells: Sequence[str], widths: Sequence[int], cut: bool = False) -> str:
    shown = [cut_cell(cell, width) if cut else cell
             for cell, width in zip(cells, widths, strict=True)]
    return _COLUMN_GAP.join(cell.ljust(width)
                            for cell, width in zip(shown, widths, strict=True)).rstrip()


@app.command()
@handle_errors
def head(as_json: bool = typer.Option(False, "--json", help="Print JSON.")) -> None:
    """Shows the ledger's last position and entry hash."""
    with state.store() as store:
        tip = store.head()
    if as_json:
        emit_json({"position": tip.position, "entry_hash": tip.entry_hash})
        return
    console.print(f"position {tip.position}  entry_hash {tip.entry_hash}")


@app.command()
@handle_errors
def verify(
    from_position: int = typer.Option(
        1, "--from", min=1, max=INT_MAX, help="First position to check."
    ),
    to_position: int | None = typer.Option(
        None, "--to", min=1, max=INT_MAX, help="Last position to check."
    ),
    tree: bool = typer.Option(
        False, "--tree", help="Also hold the stored Merkle tree (what checkpoints sign and "
        "proofs read) to the entry hashes; from position 1 only."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print JSON."),
) -> None:
    """Recomputes the hash chain; exit 4 names the first bad position."""
    with state.store() as store, ProgressBar(as_json) as progress:
        report = store.verify(from_position, to_position, tree=tree, progress=progress)
    if as_json:
        emit_json(report.to_json())
    elif report.ok and report.to_position == 0:  # not "0 events verified (1..0)"
        console.print("ok: the ledger is empty; there is no event to verify")
    elif report.ok:
        console.print(f"ok: {counted(report.checked, 'event')} verified "
                      f"({report.from_position}..{report.to_position}), "
                      f"head {report.head_hash}")
        if report.merkle_root is not None:
            console.print(f"Merkle tree: root {report.merkle_root} at size "
                          f"{report.to_position}, as the entry hashes give it")
    else:
        console.print(f"FAILED at position {report.first_bad_position}: {report.problem}")
    if not report.ok:
        raise typer.Exit(4)


from cli.verifiable import register as _reg_verifiable; _reg_verifiable(app)  # noqa: E402, E702, I001


from cli.arena_commands import register as _register_domain  # noqa: E402  (commands register last)

_register_domain(app)

from cli.settlement_commands import register as _register_settlement  # noqa: E402

_register_settlement(app)

from cli.evaluate import register as _register_evaluate  # noqa: E402

_register_evaluate(app)

from cli.calibrate import register as _register_calibrate  # noqa: E402

_register_calibrate(app)

from cli.demo import register as _register_demo  # noqa: E402

_register_demo(app)

from cli.ops import register as _register_ops  # noqa: E402

_register_ops(app)

from cli.serve import register as _register_serve  # noqa: E402

_register_serve(app)


restyle(app)  # after every command is registered: help panels by role, usage as read


def main() -> None:
    """Runs the CLI (the ``arena-ledger`` console script)."""
    app()


if __name__ == "__main__":
    main()

"""Implements the operator and auditor commands: ``db backup|restore``, ``stats``, ``history``.

Each command parses, calls one function of ``services.operations`` and renders its result; the same
functions serve Python callers with the same behaviour.
"""

from __future__ import annotations

from typing import Any

import typer

from cli.common import (
    as_of_option,
    console,
    counted,
    emit_json,
    emit_jsonl,
    handle_errors,
    new_table,
    options_named,
    print_as_of,
    state,
)
from cli.db import db_app
from cli.progress import ProgressBar
from services import operations as ops

__all__ = ["register"]

_JSON_HELP = "Print JSON."


def _short(digest: str | None) -> str:
    return "-" if not digest else f"{digest[:16]}…"


@handle_errors
def backup(
    path: str = typer.Argument(..., help="The backup file to create (never overwritten)."),
    as_json: bool = typer.Option(False, "--json", help=_JSON_HELP),
) -> None:
    """Backs up the ledger: SQLite online copy + verify; PostgreSQL via pg_dump.

    SQLite: a consistent copy made with SQLite's backup API while validators keep appending,
    whose hash chain is then verified (exit 4 if it fails; the copy is kept as PATH.unverified).
    PostgreSQL: a pg_dump custom-format archive (pg_dump must be on PATH); verify it by
    restoring it into a new database with `db restore`. See docs/operations.md.
    """
    with ProgressBar(as_json) as progress:
        report = ops.backup(state.db_url, path, progress=progress)
    if as_json:
        emit_json(report.to_json())
        return
    console.print(f"wrote {report.path} ({report.bytes:,} bytes, {report.method})")
    if report.verified is not None:
        console.print(f"verified: {counted(report.verified.checked, 'event')}, head position "
                      f"{report.head.position if report.head else '?'} entry_hash "
                      f"{report.verified.head_hash}")
    elif report.head is not None:
        console.print(f"holds head position {report.head.position} entry_hash "
                      f"{report.head.entry_hash} (not verified: {report.note})")
    else:
        console.print(f"not verified: {report.note}")


@handle_errors
def restore(
    path: str = typer.Argument(..., help="A file written by `db backup`."),
    as_json: bool = typer.Option(False, "--json", help=_JSON_HELP),
) -> None:
    """Restores a backup into the empty or new ledger at --db, then verifies its chain.

    A target holding recorded events is refused (exit 1, nothing changed). SQLite: the backup
    is verified before the target is touched (exit 4 if it fails). PostgreSQL: pg_restore
    into a freshly created database, then verify.
    """
    with ProgressBar(as_json) as progress:
        report = ops.restore(state.db_url, path, progress=progress)
    if as_json:
        emit_json(report.to_json())
        return
    console.print(f"restored {path} ({report.method}): "
                  f"{counted(report.verified.checked, 'event')} "
                  f"verified, head position {report.head.position} entry_hash "
                  f"{report.head.entry_hash}")
    if report.pending:
        console.print(f"schema at {report.revision}; run `arena-ledger db upgrade` to apply "
                      + ", ".join(report.pending))


@handle_errors
def stats(
    as_of: int | None = as_of_option(),
    as_json: bool = typer.Option(False, "--json", help=_JSON_HELP),
) -> None:
    """Shows the ledger's vital signs: head, checkpoint age, events, statuses, holds, NO_DECISION.

    Everything is read as of one head position: the head and chain tip, the Merkle root, the
    last checkpoint (age = head position - its size), events by type, submissions by status
    per arena, holds by reason (held now / placed ever) and each arena's NO_DECISION rate
    (NO_DECISION verdicts / decided attempts, 6 places). With --as-of N, as of position N:
    the last checkpoint is then the newest whose tree covers at most N positions.
    """
    document = ops.stats(state.db_url, as_of)
    if as_json:
        emit_json(document)
        return
    print_as_of(as_of, document["head"]["position"])
    _render_stats(document)


def _render_stats(doc: dict[str, Any]) -> None:
    head, merkle, tip = doc["head"], doc["merkle"], doc["tip"]
    console.print(f"{doc['backend']} ledger at revision {doc['revision']}")
    console.print(f"head        position {head['position']}  entry_hash {head['entry_hash']}")
    if tip is not None:
        agree = "matches the head" if doc["tip_matches_head"] else "DIFFERS from the head"
        console.print(f"chain tip   position {tip['position']}  {tip['type']} on {tip['stream']}"
                      f"  recorded {tip['recorded_at']}  ({agree})")
    console.print(f"merkle      size {merkle['tree_size']}  root {merkle['root_hash']}")
    cp = doc["last_checkpoint"]
    if cp is None:
        console.print("checkpoint  none signed yet (`arena-ledger checkpoint --key …`)")
    else:
        age = cp["age_positions"]
        behind = f"{age} position{'' if age == 1 else 's'} behind the head"
        console.print(f"checkpoint  #{cp['id']} size {cp['tree_size']}, {behind}; origin "
                      f"{cp['origin']}, signed {cp['created_at']}")
    if doc["events"]["by_type"]:
        events = new_table("event type", "count", title=f"events: {doc['events']['total']}",
                           box=None)
        for name, count in doc["events"]["by_type"].items():
            events.add_row(name, str(count))
        console.print(events)
    else:  # not a table of headers with nothing under them
        console.print(f"events: {doc['events']['total']}")
    _render_arenas(doc)
    _render_holds(doc)


def _render_arenas(doc: dict[str, Any]) -> None:
    arenas = doc["submissions"]
    if not arenas:
        console.print("no arenas commissioned")
        return
    # Only the statuses that occur, so the table fits a terminal; --json lists them all.
    statuses = [s for s in next(iter(arenas.values()))
                if s != "total" and any(counts[s] for counts in arenas.values())]
    table = new_table("arena", *statuses, "total", "NO_DECISION / decided", "rate",
                      title="submissions by status", box=None)
    for arena, counts in arenas.items():
        nd = doc["no_decision"][arena]
        table.add_row(arena, *(str(counts[s]) for s in statuses), str(counts["total"]),
                      f"{nd['no_decision']}/{nd['decided']}", nd["rate"] or "-")
    console.print(table)


def _render_holds(doc: dict[str, Any]) -> None:
    current, placed = doc["holds"]["current"], doc["holds"]["placed"]
    if not placed and not current:
        console.print("holds: none placed")
        return
    holds = new_table("hold reason", "held now", "placed ever", title="holds", box=None)
    for reason in sorted(set(current) | set(placed)):
        holds.add_row(reason, str(current.get(reason, 0)), str(placed.get(reason, 0)))
    console.print(holds)


@handle_errors
def history(
    hotkey: str = typer.Option(..., "--hotkey", help="The miner's hotkey."),
    as_of: int | None = as_of_option(),
    as_json: bool = typer.Option(False, "--json", help="JSON Lines, one submission a line."),
) -> None:
    """Lists a hotkey's submissions across arenas in arrival order, with cause and next step."""
    with options_named(hotkey="--hotkey"):
        position, rows = ops.history_at(state.db_url, hotkey, as_of)
    if as_json:
        emit_jsonl(rows)
        return
    print_as_of(as_of, position)
    if not rows:
        console.print(f"no submissions from {hotkey}")
        return
    table = new_table("arrival", "arena", "submission", "status", "reason", "cause",
                      "next step", box=None)
    for row in rows:
        block, index, subindex = row["arrival"]
        table.add_row(f"{block}/{index}/{subindex}", row["arena_id"],
                      _short(row["submission_id"]), row["status"], row["reason"] or "-",
                      row["cause"], row["next_step"])
    console.print(table)
    console.print(f"{counted(len(rows), 'submission')} from {hotkey}")


def register(app: typer.Typer) -> None:
    """Adds ``stats`` and ``history`` to the main app and ``backup``/``restore`` to ``db``."""
    db_app.command("backup")(backup)
    db_app.command("restore")(restore)
    app.command("stats")(stats)
    app.command("history")(history)

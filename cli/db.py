"""Implements ``arena-ledger db …``: upgrade (chain verified first), downgrade, current, check.

``db backup`` and ``db restore`` live in cli/ops.py and are added to ``db_app`` there.
"""

from __future__ import annotations

import typer

from cli.common import (
    console,
    counted,
    emit_json,
    emit_jsonl,
    err_console,
    handle_errors,
    state,
)
from cli.progress import ProgressBar

__all__ = ["db_app"]

db_app = typer.Typer(help="Migrate (Alembic revisions), back up and restore the store.",
                     no_args_is_help=True)


@db_app.command("upgrade")
@handle_errors
def upgrade(
    revision: str = typer.Argument("head", help="Target revision."),
    sql: bool = typer.Option(False, "--sql", help="Print the SQL instead of running it."),
    skip_verify: bool = typer.Option(
        False, "--skip-verify", help="Migrate without verifying the hash chain first (for a "
        "ledger you have just verified, or one kept for investigation; see docs/operations.md)."
    ),
) -> None:
    """Upgrades the store's tables to REVISION (head by default), showing pending revisions.

    An existing ledger's hash chain is verified first: one that fails is not migrated (exit 4,
    naming the first bad position). A new, empty database upgrades without a check.
    """
    from ledger import migrate
    from services import operations as ops

    migrate.require_revision(revision)
    if sql:
        typer.echo(migrate.upgrade(state.db_url, revision, sql=True))
        return
    if migrate.current(state.db_url) is None:
        ops.refuse_foreign_sqlite(state.db_url)  # before the pending list is printed
    todo = migrate.pending(state.db_url)
    if not todo:
        console.print(f"already at {migrate.current(state.db_url)}; nothing to do")
        return
    console.print("pending: " + ", ".join(todo))
    with ProgressBar(as_json=False) as progress:
        report = ops.upgrade(state.db_url, revision, skip_verify=skip_verify, progress=progress)
    if report.verified is not None:
        checked = counted(report.verified.checked, "event")
        console.print(f"verified {checked} before migrating (head {report.verified.head_hash})")
    elif report.skipped_verify:
        err_console.print("warning: --skip-verify: the hash chain was not verified before "
                          "migrating")
    console.print(f"now at {report.after}")


@db_app.command("downgrade")
@handle_errors
def downgrade(
    revision: str = typer.Argument(..., help="Target revision, or 'base' to drop everything."),
    sql: bool = typer.Option(False, "--sql", help="Print the SQL instead of running it."),
    discard_recorded: bool = typer.Option(
        False, "--discard-recorded", help="Drop the events or signed checkpoints the "
        "downgrade's tables hold (refused otherwise; back up first)."
    ),
) -> None:
    """Downgrades the store's tables to REVISION.

    A downgrade that would drop recorded events (to base) or signed checkpoints (below the
    revision that made them) is refused, exit 1 and nothing changed, unless
    --discard-recorded is given: those downgrades are for empty and test ledgers.
    """
    from ledger import migrate

    migrate.require_revision(revision)
    output = migrate.downgrade(state.db_url, revision, sql=sql, discard_recorded=discard_recorded)
    if sql:
        typer.echo(output)
        return
    console.print(f"now at {migrate.current(state.db_url) or 'base'}")


@db_app.command("current")
@handle_errors
def current(as_json: bool = typer.Option(False, "--json", help="Print JSON.")) -> None:
    """Shows the revision the store is at (exit 5 when there is no ledger file at --db)."""
    from ledger import migrate

    revision = migrate.current(state.db_url, must_exist=True)
    known = migrate.is_shipped(revision)
    if as_json:
        emit_json({"current": revision, "heads": migrate.heads(), "known": known})
        return
    if not known:
        console.print(f"{revision} (unknown to this release: a newer release migrated it)")
        return
    console.print(revision or "base (not initialised)")


@db_app.command("history")
@handle_errors
def history(
    as_json: bool = typer.Option(False, "--json", help="JSON Lines, one revision a line."),
) -> None:
    """Lists the shipped revisions, newest first."""
    from ledger import migrate

    revisions = migrate.history()
    if as_json:  # a list: JSON Lines, as every list command prints (docs/cli.md)
        emit_jsonl(revisions)
        return
    for rev in revisions:
        console.print(f"{rev['down_revision'] or 'base'} -> {rev['revision']}: {rev['doc']}")


@db_app.command("check")
@handle_errors
def check() -> None:
    """Fails (exit 5) when the store's tables drift from the code's table metadata."""
    from ledger import migrate

    migrate.check(state.db_url)
    console.print("no drift: the database matches the table metadata")

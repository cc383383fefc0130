"""Implements ``arena-ledger db …``: Alembic upgrade, downgrade, current, history and check."""

from __future__ import annotations

import typer

from cli.common import console, emit_json, handle_errors, state
from ledger import migrate

__all__ = ["db_app"]

db_app = typer.Typer(help="Migrate the store's schema (Alembic revisions).", no_args_is_help=True)


@db_app.command("upgrade")
@handle_errors
def upgrade(
    revision: str = typer.Argument("head", help="Target revision."),
    sql: bool = typer.Option(False, "--sql", help="Print the SQL instead of running it."),
) -> None:
    """Upgrades the store's tables to REVISION (head by default), showing pending revisions."""
    if sql:
        typer.echo(migrate.upgrade(state.db_url, revision, sql=True))
        return
    todo = migrate.pending(state.db_url)
    if not todo:
        console.print(f"already at {migrate.current(state.db_url)}; nothing to do")
        return
    console.print("pending: " + ", ".join(todo))
    migrate.upgrade(state.db_url, revision)
    console.print(f"now at {migrate.current(state.db_url)}")


@db_app.command("downgrade")
@handle_errors
def downgrade(
    revision: str = typer.Argument(..., help="Target revision, or 'base' to drop everything."),
    sql: bool = typer.Option(False, "--sql", help="Print the SQL instead of running it."),
) -> None:
    """Downgrades the store's tables to REVISION."""
    output = migrate.downgrade(state.db_url, revision, sql=sql)
    if sql:
        typer.echo(output)
        return
    console.print(f"now at {migrate.current(state.db_url) or 'base'}")


@db_app.command("current")
@handle_errors
def current(as_json: bool = typer.Option(False, "--json", help="Print JSON.")) -> None:
    """Shows the revision the store is at."""
    revision = migrate.current(state.db_url)
    if as_json:
        emit_json({"current": revision, "heads": migrate.heads()})
        return
    console.print(revision or "base (not initialised)")


@db_app.command("history")
@handle_errors
def history(as_json: bool = typer.Option(False, "--json", help="Print JSON.")) -> None:
    """Lists the shipped revisions, newest first."""
    revisions = migrate.history()
    if as_json:
        emit_json(revisions)
        return
    for rev in revisions:
        console.print(f"{rev['down_revision'] or 'base'} -> {rev['revision']}: {rev['doc']}")


@db_app.command("check")
@handle_errors
def check() -> None:
    """Fails (exit 5) when the store's tables drift from the code's table metadata."""
    migrate.check(state.db_url)
    console.print("no drift: the database matches the table metadata")

"""Implements ``arena-ledger projections check|rebuild``: the read models against the events."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

import typer

from cli.common import console, err_console, handle_errors, state
from services import projections

__all__ = ["progress_bar", "projections_app"]

projections_app = typer.Typer(
    help="Check or rebuild the read models (SQL tables of current state) from the events.",
    no_args_is_help=True,
)


@contextmanager
def progress_bar(what: str) -> Iterator[Callable[[int, int], None] | None]:
    """Yields a progress callback drawing a bar on stderr when it is a terminal, else None."""
    if not err_console.is_terminal:
        yield None
        return
    from rich.progress import Progress

    with Progress(console=err_console, transient=True) as bar:
        task = bar.add_task(what, total=None)

        def advance(done: int, total: int) -> None:
            bar.update(task, completed=done, total=total)

        yield advance


@projections_app.command("check")
@handle_errors
def check() -> None:
    """Rebuilds the read models in a scratch copy and compares them row by row with the
    stored ones; exit 4 names the first difference (the events win: run `projections
    rebuild`)."""
    with progress_bar("folding the events") as progress:
        position = projections.check_ledger(state.db_url, progress)
    console.print(f"ok: the read models match the events up to position {position}")


@projections_app.command("rebuild")
@handle_errors
def rebuild() -> None:
    """Rebuilds the read models from the events, in one transaction (appends wait for it)."""
    with progress_bar("folding the events") as progress:
        position = projections.rebuild_ledger(state.db_url, progress)
    console.print(f"rebuilt the read models up to position {position}")

"""Implements ``arena-ledger projections check|rebuild``: the read models against the events."""

from __future__ import annotations

import typer

from cli.common import console, handle_errors, state
from cli.progress import ProgressBar
from services import projections

__all__ = ["projections_app"]

projections_app = typer.Typer(
    help="Check or rebuild the read models (SQL tables of current state) from the events.",
    no_args_is_help=True,
)


@projections_app.command("check")
@handle_errors
def check() -> None:
    """Rebuilds the read models in a scratch copy and compares them row by row with the
    stored ones; exit 4 names the first difference (the events win: run `projections
    rebuild`)."""
    with ProgressBar(as_json=False) as progress:
        position = projections.check_ledger(state.db_url, progress)
    console.print(f"ok: the read models match the events up to position {position}")


@projections_app.command("rebuild")
@handle_errors
def rebuild() -> None:
    """Rebuilds the read models from the events, in one transaction (appends wait for it)."""
    with ProgressBar(as_json=False) as progress:
        position = projections.rebuild_ledger(state.db_url, progress)
    console.print(f"rebuilt the read models up to position {position}")

"""The arenas: the overview at ``/`` and each arena's page (leaderboard, controls, fees),
with their JSON twins; the leaderboard, controls and fees twins are exactly what the CLI's
``rewards --arena``, ``controls`` and ``fees --arena`` print with ``--json``."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse
from markupsafe import Markup

from services.arena_board import arena_detail, arenas_overview
from web.charts import bars
from web.deps import Board
from web.pages import render

router = APIRouter()


@router.get("/api/arenas", tags=["arenas"], summary="Every commissioned arena")
def arenas_json(board: Board) -> dict[str, Any]:
    """Returns every arena's sealed policy, fee, emission share, leader, PASSes by reward
    status, controls' health, fees collected and submissions by status."""
    return arenas_overview(board.ledger())


@router.get("/api/arenas/{arena_id}", tags=["arenas"], summary="One arena")
def arena_json(arena_id: str, board: Board) -> dict[str, Any]:
    """Returns the arena's summary with its leaderboard (``rewards``), controls and fees."""
    return arena_detail(board.ledger(), arena_id)


@router.get("/api/arenas/{arena_id}/rewards", tags=["arenas"],
            summary="The arena's PASSes and their reward status")
def arena_rewards_json(arena_id: str, board: Board) -> list[dict[str, Any]]:
    """Returns the rows ``arena-ledger rewards --arena ARENA --json`` prints."""
    return board.ledger().rewards(arena_id)


@router.get("/api/arenas/{arena_id}/controls", tags=["arenas"],
            summary="The arena's control runs")
def arena_controls_json(arena_id: str, board: Board) -> list[dict[str, Any]]:
    """Returns the rows ``arena-ledger controls ARENA --json`` prints."""
    return board.ledger().controls(arena_id)


@router.get("/api/arenas/{arena_id}/fees", tags=["arenas"], summary="The arena's fees")
def arena_fees_json(arena_id: str, board: Board) -> dict[str, Any]:
    """Returns the document ``arena-ledger fees --arena ARENA --json`` prints."""
    return board.ledger().fees(arena_id)


@router.get("/", response_class=HTMLResponse, include_in_schema=False)
def arenas_page(request: Request, board: Board) -> HTMLResponse:
    return render(request, "arenas.html", title="arenas", doc=arenas_overview(board.ledger()),
                  json_twin="/api/arenas")


@router.get("/arenas/{arena_id}", response_class=HTMLResponse, include_in_schema=False)
def arena_page(request: Request, arena_id: str, board: Board) -> HTMLResponse:
    doc = arena_detail(board.ledger(), arena_id)
    return render(request, "arena.html", title=f"arena {arena_id}", doc=doc,
                  chart=_gains(doc["rewards"]))


def _gains(rows: list[dict[str, Any]]) -> Markup:
    """Returns each PASS's gain over stock, (speedup - 1) in percent, as bars, fastest
    first: bars of the speedups themselves would all stand near 1 and look alike."""
    ranked = sorted(rows, key=lambda row: Decimal(str(row["speedup"])), reverse=True)
    items = [(f"{row['hotkey']} · {str(row['submission_id'])[:8]}",
              float((Decimal(str(row["speedup"])) - 1) * 100)) for row in ranked]
    return bars(items, title="gain over stock of each PASS: (speedup - 1) in percent",
                unit=" %")

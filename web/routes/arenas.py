"""The arenas: the overview at ``/`` and each arena's page (a page of its leaderboard,
controls, fees), with their JSON twins; the leaderboard, controls and fees twins are exactly
what the CLI's ``rewards --arena``, ``controls`` and ``fees --arena`` print with ``--json``,
the leaderboard a page of those rows at a time."""

from __future__ import annotations

from decimal import Decimal
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request, Response
from fastapi.responses import HTMLResponse
from markupsafe import Markup

from services.arena_board import LEADERBOARD_PAGE, arena_detail, arenas_overview, reward_rows
from web.charts import bars
from web.deps import MAX_PAGE, Board, Limit
from web.pages import query_string, render, segment

router = APIRouter()

Offset = Annotated[int, Query(
    ge=0, description="Skip this many PASSes (in arrival order) before the page: the "
    "previous page's next_offset.")]


@router.get("/api/arenas", tags=["arenas"], summary="Every commissioned arena")
def arenas_json(board: Board) -> dict[str, Any]:
    """Returns every arena's sealed policy, fee, emission share, leader, number of PASSes,
    controls' health, fees collected and submissions by status."""
    return arenas_overview(board.ledger())


@router.get("/api/arenas/{arena_id}", tags=["arenas"], summary="One arena")
def arena_json(arena_id: str, board: Board, limit: Limit = LEADERBOARD_PAGE,
               offset: Offset = 0) -> dict[str, Any]:
    """Returns the arena's summary, its PASSes by reward status, a page of its leaderboard
    (``rewards``, placed by ``page``), its controls and fees."""
    return arena_detail(board.ledger(), arena_id, offset=offset, limit=limit)


@router.get("/api/arenas/{arena_id}/rewards", tags=["arenas"],
            summary="The arena's PASSes and their reward status, a page at a time")
def arena_rewards_json(arena_id: str, board: Board, response: Response,
                       limit: Limit = MAX_PAGE, offset: Offset = 0) -> list[dict[str, Any]]:
    """Returns rows ``offset`` to ``offset + limit`` of those
    ``arena-ledger rewards --arena ARENA --json`` prints; the ``Link`` header names the
    next page (``rel="next"``) while there is one, and ``X-Total-Count`` counts them all."""
    rows, page = reward_rows(board.ledger(), arena_id, offset=offset, limit=limit)
    response.headers["X-Total-Count"] = str(page["total"])
    if page["next_offset"] is not None:
        target = f"/api/arenas/{segment(arena_id)}/rewards" + query_string(
            limit=limit, offset=page["next_offset"])
        response.headers["Link"] = f'<{target}>; rel="next"'
    return rows


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
def arena_page(request: Request, arena_id: str, board: Board, limit: Limit = LEADERBOARD_PAGE,
               offset: Offset = 0) -> HTMLResponse:
    doc = arena_detail(board.ledger(), arena_id, offset=offset, limit=limit)
    return render(request, "arena.html", title=f"arena {arena_id}", doc=doc,
                  chart=_gains(doc["rewards"]))


def _gains(rows: list[dict[str, Any]]) -> Markup:
    """Returns each listed PASS's gain over stock, (speedup - 1) in percent, as bars,
    fastest first: bars of the speedups themselves would all stand near 1 and look alike."""
    ranked = sorted(rows, key=lambda row: Decimal(str(row["speedup"])), reverse=True)
    items = [(f"{row['hotkey']} · {str(row['submission_id'])[:8]}",
              float((Decimal(str(row["speedup"])) - 1) * 100)) for row in ranked]
    return bars(items, title="gain over stock of each PASS on this page: (speedup - 1) in "
                "percent", unit=" %")

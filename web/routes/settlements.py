"""Every recorded settlement, newest first, and one settlement in full: its weights charted
and tabled, its claims per arena, the rules versions it used and how to reproduce it."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Path, Query, Request
from fastapi.responses import HTMLResponse

from services.settlement_board import settlement_detail, settlement_page
from web.charts import bars
from web.deps import DEFAULT_PAGE, Board, Limit
from web.pages import render

router = APIRouter(tags=["settlements"])

Before = Annotated[int | None, Query(
    ge=1, description="Show the settlements recorded before this position (the previous "
    "page's next_before).")]
Position = Annotated[int, Path(ge=1, description="The settlement's position in the ledger.")]


@router.get("/api/settlements", summary="Recorded settlements, newest first")
def settlements_json(board: Board, limit: Limit = DEFAULT_PAGE,
                     before: Before = None) -> dict[str, Any]:
    """Returns a page of recorded settlements with their digests, rules versions and totals."""
    return settlement_page(board.ledger().store, limit, before)


@router.get("/settlements", response_class=HTMLResponse, include_in_schema=False)
def settlements_page(request: Request, board: Board, limit: Limit = DEFAULT_PAGE,
                     before: Before = None) -> HTMLResponse:
    page = settlement_page(board.ledger().store, limit, before)
    return render(request, "settlements.html", title="settlements", page=page)


@router.get("/api/settlements/{position}", summary="One recorded settlement")
def settlement_json(board: Board, position: Position) -> dict[str, Any]:
    """Returns the settlement at a position: payload, weights, claims per arena, rules
    versions and the commands that reproduce it (404 when the position holds none)."""
    return settlement_detail(board.ledger().store, position)


@router.get("/settlements/{position}", response_class=HTMLResponse, include_in_schema=False)
def settlement_page_one(request: Request, board: Board, position: Position) -> HTMLResponse:
    found = settlement_detail(board.ledger().store, position)
    chart = bars([(w["hotkey"], w["weight_ppm"]) for w in found["weights"]],
                 title=f"weights of the settlement at position {position} (ppm)", unit=" ppm")
    return render(request, "settlement.html", title=f"settlement at position {position}",
                  settlement=found, chart=chart)

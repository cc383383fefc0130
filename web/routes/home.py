"""The ledger's head: the smallest page, and what every other page's footer links back to."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse

from web.deps import Board
from web.pages import render

router = APIRouter()


@router.get("/api/head", tags=["ledger"], summary="The ledger's head")
def head_json(board: Board) -> dict[str, Any]:
    """Returns the head's position and entry hash."""
    return board.head()


@router.get("/head", response_class=HTMLResponse, include_in_schema=False)
def head_page(request: Request, board: Board) -> HTMLResponse:
    return render(request, "head.html", title="head", head=board.head(), where=board.where())

"""Hands routes the dashboard and the shared query limits."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Query, Request

from services.dashboard import Dashboard

__all__ = ["MAX_PAGE", "Board", "Limit", "board"]

#: The most rows one page or API answer lists; a larger ``limit`` is refused, not cut.
MAX_PAGE = 500
DEFAULT_PAGE = 100


def board(request: Request) -> Dashboard:
    """Returns the app's dashboard."""
    found: Dashboard = request.app.state.dashboard
    return found


Board = Annotated[Dashboard, Depends(board)]
Limit = Annotated[int, Query(ge=1, le=MAX_PAGE, description=f"Rows per page (at most {MAX_PAGE}).")]

"""One submission: its verdict, cause and next step, every attempt's windows, looks, audit and
quality, and the events that recorded them.

The JSON twin is ``arena-ledger explain submission SID --json``'s document plus
``timeline`` (``services.submission_board``); the page draws each attempt's window ratios
against the lines its looks were decided by.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Path, Request
from fastapi.responses import HTMLResponse
from markupsafe import Markup

from services.submission_board import ratio_lines, submission_board
from web.charts import Point, Rule, points
from web.deps import Board
from web.pages import render
from web.routes.hotkeys import hotkey_path

__all__ = ["router", "window_chart"]

router = APIRouter()

Sid = Path(description="The submission's 64-character id, or a prefix of at least 8 "
                       "characters that only it starts with.")


@router.get("/api/submissions/{sid}", tags=["submissions"],
            summary="A submission explained, with its events")
def submission_json(board: Board, sid: str = Sid) -> dict[str, Any]:
    """Returns ``explain submission SID --json``'s document plus ``timeline``: the
    submission's events, its attempts' and its fee's, with positions, types and times."""
    return submission_board(board.ledger(), sid)


@router.get("/submissions/{sid}", response_class=HTMLResponse, include_in_schema=False)
def submission_page(request: Request, board: Board, sid: str = Sid) -> HTMLResponse:
    document = submission_board(board.ledger(), sid)
    full = str(document["submission_id"])
    own = [e for e in document["timeline"] if e["stream"] == f"submission-{full}"]
    attempts = [
        {"lines": ratio_lines(attempt), "chart": window_chart(attempt)}
        for attempt in document["attempts"]
    ]
    return render(
        request, "submission.html", title=f"submission {full[:16]}", doc=document,
        attempts=attempts, latest=own[-1] if own else None,
        hotkey_href=hotkey_path(str(document["hotkey"])),
        json_twin=f"/api/submissions/{full}",
    )


def window_chart(attempt: dict[str, Any]) -> Markup:
    """Returns the chart of an attempt's window cost ratios, one series per orientation,
    against the lines of ``ratio_lines`` (stock, each look's pass line, …)."""
    marks = [
        Point(float(w["window"]), float(w["ratio"]), f"orientation {w['orientation']}",
              f"window {w['window']}: ratio {w['ratio']}")
        for w in attempt["windows"]
    ]
    rules = [Rule(line["y"], line["label"]) for line in ratio_lines(attempt)]
    return points(marks, rules=rules, title=f"attempt {attempt['attempt_id']}: window cost "
                  "ratios (candidate / stock; lower is faster)",
                  x_label="window", y_label="candidate / stock")

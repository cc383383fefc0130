"""One miner's hotkey: its submissions with their status, cause and next step, a page at a
time, its weight in the latest settlements, its latest payments and credits, and the fees
it paid and the credits it was granted in all.

A hotkey is any 1–64 printable ASCII characters, ``/``, ``?``, ``#`` and ``%`` included: the
routes take the rest of the path (URL-decoded, so ``%2F`` is a ``/`` of the hotkey) and
every link to a hotkey is built by ``hotkey_path``, which encodes each of them.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Path, Query, Request
from fastapi.responses import HTMLResponse
from markupsafe import Markup

from services.hotkey_board import hotkey_board
from web.charts import Point, points
from web.deps import DEFAULT_PAGE, Board, Limit
from web.pages import query_string, render, segment, visible

__all__ = ["hotkey_path", "router", "weight_chart"]

router = APIRouter()

Hotkey = Path(description="The hotkey, URL-encoded as one path segment (%2F for a /).")

def hotkey_path(hotkey: str, api: bool = False) -> str:
    """Returns the path of ``hotkey``'s page (or, with ``api``, its JSON twin), the hotkey
    encoded as one path segment: every character but letters, digits and ``_.-~``."""
    return ("/api" if api else "") + "/hotkeys/" + segment(hotkey)


After = Annotated[str | None, Query(
    description="The next page: the submissions after this one (a whole submission id of "
    "the hotkey's) in history order.")]
Before = Annotated[str | None, Query(
    description="The previous page: the submissions before this one (a whole submission id "
    "of the hotkey's).")]


@router.get("/api/hotkeys/{hotkey:path}", tags=["hotkeys"],
            summary="A hotkey's submissions, weights, fees and credits")
def hotkey_json(board: Board, hotkey: str = Hotkey, limit: Limit = DEFAULT_PAGE,
                after: After = None, before: Before = None) -> dict[str, Any]:
    """Returns a page of the hotkey's ``history`` rows (``arena-ledger history --hotkey HK
    --json``) as ``submissions``, its weight and claims in the latest ``limit`` recorded
    settlements, its latest ``limit`` payments and credits, each list's ``totals``, and
    the fee and credit totals ``earnings --hotkey`` reports (over all of them). ``page``
    gives the ids to page on from: ``after=page.next``, ``before=page.previous``."""
    return hotkey_board(board.ledger(), hotkey, limit, after, before)


@router.get("/hotkeys/{hotkey:path}", response_class=HTMLResponse, include_in_schema=False)
def hotkey_page(request: Request, board: Board, hotkey: str = Hotkey,
                limit: Limit = DEFAULT_PAGE, after: After = None,
                before: Before = None) -> HTMLResponse:
    document = hotkey_board(board.ledger(), hotkey, limit, after, before)
    notes = {c["credit_id"]: visible(c["note"]) for c in document["credits"]}
    chart = weight_chart(document) if document["settlements"] else None
    shown = None if limit == DEFAULT_PAGE else limit  # links keep a limit the reader chose
    page = document["page"]
    links = {
        "first": hotkey_path(hotkey) + query_string(limit=shown)
        if page["start"] > 0 else None,
        "previous": hotkey_path(hotkey) + query_string(limit=shown, before=page["previous"])
        if page["previous"] is not None else None,
        "next": hotkey_path(hotkey) + query_string(limit=shown, after=page["next"])
        if page["next"] is not None else None,
    }
    twin = hotkey_path(hotkey, api=True) + query_string(limit=shown, after=after,
                                                        before=before)
    return render(request, "hotkey.html", title=f"hotkey {hotkey}", doc=document,
                  notes=notes, chart=chart, links=links, json_twin=twin)


def weight_chart(document: dict[str, Any]) -> Markup:
    """Returns the line of the hotkey's weight (ppm) in each settlement the document lists
    (the latest), by the settlement's block."""
    marks = [
        Point(float(s["block"]), float(s["weight_ppm"]), "weight",
              f"settlement at position {s['position']}, block {s['block']}: "
              f"{s['weight_ppm']:,} ppm")
        for s in reversed(document["settlements"])  # listed newest first
    ]
    return points(marks, title="weight in each settlement (ppm of the emission)",
                  x_label="settlement block", y_label="weight (ppm)", connect=True)

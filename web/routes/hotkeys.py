"""One miner's hotkey: every submission with its status, cause and next step, its weight in
every settlement, the fees it paid and the credits it was granted.

A hotkey is any 1–64 printable ASCII characters, ``/``, ``?``, ``#`` and ``%`` included: the
routes take the rest of the path (URL-decoded, so ``%2F`` is a ``/`` of the hotkey) and
every link to a hotkey is built by ``hotkey_path``, which encodes each of them.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Path, Request
from fastapi.responses import HTMLResponse
from markupsafe import Markup

from services.hotkey_board import hotkey_board
from web.charts import Point, points
from web.deps import Board
from web.pages import render, segment, visible

__all__ = ["hotkey_path", "router", "weight_chart"]

router = APIRouter()

Hotkey = Path(description="The hotkey, URL-encoded as one path segment (%2F for a /).")

def hotkey_path(hotkey: str, api: bool = False) -> str:
    """Returns the path of ``hotkey``'s page (or, with ``api``, its JSON twin), the hotkey
    encoded as one path segment: every character but letters, digits and ``_.-~``."""
    return ("/api" if api else "") + "/hotkeys/" + segment(hotkey)


@router.get("/api/hotkeys/{hotkey:path}", tags=["hotkeys"],
            summary="A hotkey's submissions, weights, fees and credits")
def hotkey_json(board: Board, hotkey: str = Hotkey) -> dict[str, Any]:
    """Returns the hotkey's ``history`` rows (``arena-ledger history --hotkey HK --json``)
    as ``submissions``, its weight and claims in every recorded settlement, its payments
    and credits, and the fee and credit totals ``earnings --hotkey`` reports."""
    return hotkey_board(board.ledger(), hotkey)


@router.get("/hotkeys/{hotkey:path}", response_class=HTMLResponse, include_in_schema=False)
def hotkey_page(request: Request, board: Board, hotkey: str = Hotkey) -> HTMLResponse:
    document = hotkey_board(board.ledger(), hotkey)
    notes = {c["credit_id"]: visible(c["note"]) for c in document["credits"]}
    chart = weight_chart(document) if document["settlements"] else None
    return render(request, "hotkey.html", title=f"hotkey {hotkey}", doc=document,
                  notes=notes, chart=chart, json_twin=hotkey_path(hotkey, api=True))


def weight_chart(document: dict[str, Any]) -> Markup:
    """Returns the line of the hotkey's weight (ppm) in each recorded settlement, by the
    settlement's block."""
    marks = [
        Point(float(s["block"]), float(s["weight_ppm"]), "weight",
              f"settlement at position {s['position']}, block {s['block']}: "
              f"{s['weight_ppm']:,} ppm")
        for s in document["settlements"]
    ]
    return points(marks, title="weight in each settlement (ppm of the emission)",
                  x_label="settlement block", y_label="weight (ppm)", connect=True)

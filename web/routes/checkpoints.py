"""The stored signed checkpoints, each note as a download, and the inclusion and consistency
proofs a reader checks against them with ``arena-ledger verify-proof``.

(The C2SP tlog-tiles paths, ``/checkpoint`` and ``/tile/...``, are served elsewhere.)
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Path, Query, Request
from fastapi.responses import HTMLResponse, JSONResponse, PlainTextResponse, Response

from services.checkpoint_board import (
    checkpoint_note,
    checkpoint_page,
    consistency_proof,
    inclusion_proof,
)
from web.deps import DEFAULT_PAGE, Board, Limit
from web.pages import render

router = APIRouter(tags=["checkpoints"])

Before = Annotated[int | None, Query(
    ge=1, description="Show the checkpoints stored before the one of this id (the previous "
    "page's next_before).")]
Download = Annotated[bool, Query(description="Answer as a file to save (Content-Disposition: "
                                 "attachment), for verify-proof.")]


@router.get("/api/checkpoints", summary="Stored signed checkpoints, newest first")
def checkpoints_json(board: Board, limit: Limit = DEFAULT_PAGE,
                     before: Before = None) -> dict[str, Any]:
    """Returns a page of stored checkpoints, each as `arena-ledger checkpoints --json` lists it."""
    return checkpoint_page(board.ledger().store, limit, before)


@router.get("/checkpoints", response_class=HTMLResponse, include_in_schema=False)
def checkpoints_page(request: Request, board: Board, limit: Limit = DEFAULT_PAGE,
                     before: Before = None) -> HTMLResponse:
    page = checkpoint_page(board.ledger().store, limit, before)
    return render(request, "checkpoints.html", title="checkpoints", page=page)


# A download, not a page: outside the API's schema like the pages, since its path is not /api.
@router.get("/checkpoints/{size}/note", response_class=PlainTextResponse,
            include_in_schema=False)
def checkpoint_note_file(
    board: Board,
    size: Annotated[int, Path(ge=0, description="The checkpoint's tree size.")],
    origin: Annotated[str | None, Query(description="Only a checkpoint of this origin.")] = None,
) -> Response:
    """Returns the newest stored checkpoint note of a tree size, byte for byte."""
    row = checkpoint_note(board.ledger().store, size, origin)
    return PlainTextResponse(str(row["note"]), media_type="text/plain; charset=utf-8",
                             headers=_attachment(f"checkpoint-{size}.note"))


@router.get("/api/proofs/consistency", summary="A consistency proof between two tree sizes")
def consistency_json(
    board: Board,
    old: Annotated[int, Query(ge=0, description="The older tree size.")],
    new: Annotated[int | None, Query(ge=0, description="The newer tree size (default: the "
                                     "head).")] = None,
    download: Download = False,
) -> Response:
    """Returns `arena-ledger prove consistency --from OLD --to NEW`'s document."""
    document = consistency_proof(board.ledger().store, old, new)
    name = f"consistency-{document['from_size']}-{document['to_size']}.json"
    return _json(document, name if download else None)


@router.get("/api/proofs/inclusion", summary="An inclusion proof of one event")
def inclusion_json(
    board: Board,
    position: Annotated[int, Query(ge=1, description="The event's position.")],
    size: Annotated[int | None, Query(ge=1, description="The tree size to prove against "
                                      "(default: the head; use a checkpoint's).")] = None,
    download: Download = False,
) -> Response:
    """Returns `arena-ledger prove inclusion --position P --size N`'s document."""
    document = inclusion_proof(board.ledger().store, position, size)
    name = f"inclusion-{position}-{document['tree_size']}.json"
    return _json(document, name if download else None)


def _json(document: dict[str, Any], filename: str | None) -> JSONResponse:
    return JSONResponse(document, headers=None if filename is None else _attachment(filename))


def _attachment(filename: str) -> dict[str, str]:
    # The names are built from integers only: nothing to quote or escape.
    return {"content-disposition": f'attachment; filename="{filename}"'}

"""Serves the ledger as a C2SP tlog-tiles log at the root (``/checkpoint``, ``/tile/…``), where
any standard transparency-log client looks for it; ``services.tiles`` says what each holds.

Caching follows the spec: a tile's bytes never change (a partial tile's included: ``.p/W``
fixes its width), so every tile is immutable; the checkpoint moves when a larger one is
signed, so it is cached for seconds; an error is not cached at all, since a tile past the
checkpoint appears once a larger checkpoint is signed.
"""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import PlainTextResponse, Response

from services import tiles
from vocabulary.errors import LedgerError
from web.deps import Board
from web.pages import ledger_problem

router = APIRouter(tags=["tlog-tiles"])

IMMUTABLE = "public, max-age=31536000, immutable"
CHECKPOINT_CACHE = "public, max-age=5"
NO_STORE = "no-store"
OCTETS = "application/octet-stream"
_TILE_RESPONSES: dict[int | str, dict[str, object]] = {
    200: {"content": {OCTETS: {}}, "description": "The tile's bytes."},
    400: {"description": "The path is malformed; the problem names the element at fault."},
    404: {"description": "The served checkpoint's tree does not hold this tile."},
}


def _problem(request: Request, error: LedgerError) -> Response:
    response = ledger_problem(request, error)
    response.headers["cache-control"] = NO_STORE
    return response


@router.get(
    "/checkpoint",
    response_class=PlainTextResponse,
    summary="The log's latest signed checkpoint (C2SP tlog-checkpoint note)",
    responses={200: {"content": {"text/plain": {}}}},
)
def checkpoint(request: Request, board: Board) -> Response:
    """Returns the stored checkpoint of the largest tree size, byte for byte as signed."""
    try:
        note = tiles.served_checkpoint(board.ledger().store)["note"]
    except LedgerError as error:
        return _problem(request, error)
    return PlainTextResponse(note, headers={"cache-control": CHECKPOINT_CACHE})


def _tile(request: Request, board: Board, path: str) -> Response:
    try:
        body = tiles.tile_bytes(board.ledger().store, tiles.parse_tile_path(path))
    except LedgerError as error:
        return _problem(request, error)
    return Response(body, media_type=OCTETS, headers={"cache-control": IMMUTABLE})


# Declared before /tile/{path}, which would otherwise take "entries" for a level.
@router.get(
    "/tile/entries/{index:path}",
    response_class=Response,
    summary="An entry bundle: the entry hashes of 256 leaves, each behind a uint16 length",
    responses=_TILE_RESPONSES,
)
def entry_bundle(request: Request, board: Board, index: str) -> Response:
    """Returns the entry bundle ``<N>[.p/<W>]``: each entry is a leaf's 32-byte entry hash."""
    return _tile(request, board, f"entries/{index}")


@router.get(
    "/tile/{path:path}",
    response_class=Response,
    summary="A Merkle tile: 256 hashes of the tree's nodes at height 8·L",
    responses=_TILE_RESPONSES,
)
def tile(request: Request, board: Board, path: str) -> Response:
    """Returns the tile ``<L>/<N>[.p/<W>]``: its hashes one after the other, 32 bytes each."""
    return _tile(request, board, path)

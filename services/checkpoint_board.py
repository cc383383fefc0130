"""Answers the dashboard's checkpoint pages: the stored signed checkpoints, a checkpoint's
note, and the inclusion and consistency proofs a reader checks against them.

Each answer is the document the CLI prints for the same question (``checkpoints --json``,
``checkpoint show``, ``prove inclusion``, ``prove consistency``): the same functions make
them. Sizes and positions are checked against the head first, so a bad one is refused
naming the dashboard's query parameter (``old``, ``new``, ``position``, ``size``).
"""

from __future__ import annotations

from typing import Any

from ledger.checkpoint import consistency_document, inclusion_document, stored_checkpoint
from ledger.store import EventStore
from vocabulary.errors import InvalidInput, NotFound

__all__ = ["checkpoint_note", "checkpoint_page", "consistency_proof", "inclusion_proof"]


def checkpoint_page(store: EventStore, limit: int, before: int | None = None) -> dict[str, Any]:
    """Returns up to ``limit`` stored checkpoints stored before the one of id ``before``
    (from the newest when None), newest first, as ``arena-ledger checkpoints --json`` lists
    them; ``next_before`` is where the next page starts (None on the last page)."""
    rows = store.checkpoints(limit + 1, id_below=before)
    shown = rows[:limit]
    return {
        "checkpoints": shown,
        "head": store.head().position,
        "limit": limit,
        "before": before,
        "next_before": int(shown[-1]["id"]) if len(rows) > limit else None,
    }


def checkpoint_note(store: EventStore, size: int, origin: str | None = None) -> dict[str, Any]:
    """Returns the newest stored checkpoint of tree ``size`` (and ``origin``), note and all,
    as ``checkpoint show --size`` finds it; NotFound naming the stored sizes otherwise."""
    return stored_checkpoint(store, size, origin)


def consistency_proof(store: EventStore, old: int, new: int | None = None) -> dict[str, Any]:
    """Returns the proof that the tree of size ``old`` is a prefix of the tree of size
    ``new`` (the head when None): ``prove consistency --from OLD --to NEW``'s document."""
    head = store.head().position
    if new is not None and new > head:
        raise InvalidInput(f"new: tree size {new} is beyond the ledger's head {head}",
                           path="new")
    to_size = head if new is None else new
    if old > to_size:
        raise InvalidInput(
            f"old: tree size {old} is larger than new ({to_size}); a consistency proof runs "
            "from an older, smaller tree to a newer one",
            path="old",
        )
    return consistency_document(store, old, new)


def inclusion_proof(store: EventStore, position: int, size: int | None = None) -> dict[str, Any]:
    """Returns the proof that the event at ``position`` is in the tree of ``size`` (the head
    when None): ``prove inclusion --position P --size N``'s document."""
    head = store.head().position
    if size is not None and size > head:
        raise InvalidInput(f"size: tree size {size} is beyond the ledger's head {head}",
                           path="size")
    if position > head:
        raise NotFound(f"position: no event at position {position}; the ledger's head is {head}",
                       path="position")
    tree_size = head if size is None else size
    if position > tree_size:
        raise InvalidInput(
            f"position: {position} is not in the tree of size {tree_size} (it holds positions "
            f"1..{tree_size}); prove it in a tree of size {position} or more",
            path="position",
        )
    return inclusion_document(store, position, size)

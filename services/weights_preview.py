"""Previews a settlement (``arena-ledger weights``): at a block, or at the head's block.

The head's block is the block of the latest event, at or before the position the ledger is
read as of, that carries one: an arena's ``commissioned_block``, an arrival's block, a
claim's ``claimed_block``, a decision's ``decided_block``, a hold's, an expiry's or a
settlement's ``block`` (``block_fields``). The ledger has no clock; these are the finalized
chain blocks the writers stated, so the latest one is where the chain stood when the last
of them was recorded.

A preview's ``settlement_digest`` covers ``as_of_position`` as well as the block, claims,
weights and fees (docs/settlement.md), so a preview at the block of a recorded settlement,
with the same weights, has another digest unless it is read as of that settlement's own
``as_of_position``; the preview names the recorded settlement at its block, if any, and
that position.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ledger import read_models
from machines.settlement_rules import Settlement
from services.arena_ledger import ArenaLedger
from services.limits import head_block_page_positions
from vocabulary.catalogue import CATALOGUE
from vocabulary.errors import InvalidInput

__all__ = [
    "HeadBlock",
    "RecordedSettlement",
    "WeightsPreview",
    "block_fields",
    "head_block",
    "preview_weights",
]

@dataclass(frozen=True, slots=True)
class HeadBlock:
    """Is the head's block and the event that stated it."""

    block: int
    position: int
    type: str


@dataclass(frozen=True, slots=True)
class RecordedSettlement:
    """Is a SettlementComputed on record: where, at which block, as of which position."""

    position: int
    block: int
    as_of_position: int
    settlement_digest: str


@dataclass(frozen=True, slots=True)
class WeightsPreview:
    """Is a previewed settlement; ``head_block`` when its block was the head's (none was
    given), ``recorded`` the latest settlement recorded at the same block, if any."""

    settlement: Settlement
    head_block: HeadBlock | None
    recorded: RecordedSettlement | None


def block_fields() -> dict[str, tuple[str, ...]]:
    """Maps each event type that carries a block to the path of that block in its current
    payload: a field ``block`` or ``*_block``, or a part's ``block`` (an arrival's)."""
    found: dict[str, tuple[str, ...]] = {}
    for event_type in CATALOGUE.types:
        fields = CATALOGUE.model(event_type).model_fields
        for name, info in fields.items():
            part = getattr(info.annotation, "model_fields", None)
            if name == "block" or name.endswith("_block"):
                found[event_type] = (name,)
            elif isinstance(part, dict) and "block" in part:
                found[event_type] = (name, "block")
    return found


_BLOCK_FIELDS = block_fields()


def _block_of(event: Any, path: tuple[str, ...]) -> int:
    value = event
    for name in path:
        value = getattr(value, name)
    return int(value)


def head_block(ledger: ArenaLedger) -> HeadBlock:
    """Returns the head's block as ``ledger`` reads it (as of its ``as_of``); InvalidInput
    naming ``--block`` when no event up to there carries a block."""
    last = ledger.fold.position
    store, types = ledger.store, sorted(_BLOCK_FIELDS)
    high = last
    while high >= 1:
        low = max(1, high - head_block_page_positions + 1)
        page = list(store.read_all(low, to_position=high, types=types))
        if page:
            latest = page[-1]
            block = _block_of(latest.event(), _BLOCK_FIELDS[latest.type])
            return HeadBlock(block, latest.position, latest.type)
        high = low - 1
    raise InvalidInput(
        f"no event up to position {last} carries a block, so there is no head's block to "
        "settle at: give --block B",
        path="--block",
    )


def _recorded_at(ledger: ArenaLedger, block: int) -> RecordedSettlement | None:
    """Returns the latest SettlementComputed at ``block`` up to the ledger's position."""
    up_to = ledger.fold.position
    with read_models.reader(ledger.store) as reader:
        if reader is not None:  # every recorded settlement, by the block index
            at = reader.settlement_at(block, up_to)
            return None if at is None else RecordedSettlement(at[0], block, at[1], at[2])
    found = None
    rows = ledger.store.read_all(1, to_position=up_to,
                                 types=["SettlementComputed"], stream="settlement")
    for row in rows:
        payload = row.payload
        if payload.get("block") == block:
            found = RecordedSettlement(row.position, block, int(payload["as_of_position"]),
                                       str(payload["settlement_digest"]))
    return found


def preview_weights(ledger: ArenaLedger, block: int | None = None) -> WeightsPreview:
    """Computes the settlement at ``block`` (the head's block when None) without appending
    it, and finds the settlement recorded at that block, if any."""
    head = None
    if block is None:
        head = head_block(ledger)
        block = head.block
    return WeightsPreview(ledger.weights(block), head, _recorded_at(ledger, block))

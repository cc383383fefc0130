"""Defines the value types the store takes and returns: drafts, recorded events, results."""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Final, Literal

import orjson

from vocabulary.catalogue import CATALOGUE
from vocabulary.events import Event

__all__ = [
    "ANY",
    "NO_STREAM",
    "AppendResult",
    "EventDraft",
    "ExpectedVersion",
    "Head",
    "RecordedEvent",
    "StreamState",
    "VerifyReport",
]


class StreamState(Enum):
    """Names the expectations that are not an exact version."""

    ANY = "any"
    NO_STREAM = "no_stream"


ANY: Final = StreamState.ANY
NO_STREAM: Final = StreamState.NO_STREAM
ExpectedVersion = StreamState | int


@dataclass(frozen=True, slots=True)
class EventDraft:
    """Describes one event to append: its stream, type, payload and the version it expects."""

    stream: str
    type: str
    payload: dict[str, Any]
    schema_version: int | None = None
    expected_version: ExpectedVersion = ANY

    @classmethod
    def of(cls, stream: str, event: Event, expected_version: ExpectedVersion = ANY) -> EventDraft:
        """Builds a draft from an event model, keeping only the fields that were set."""
        return cls(
            stream=stream,
            type=event.event_type,
            payload=event.model_dump(mode="python", exclude_unset=True),
            schema_version=event.schema_version,
            expected_version=expected_version,
        )


@dataclass(frozen=True, slots=True)
class RecordedEvent:
    """Is one event as stored: its envelope fields, exact payload bytes and entry hash."""

    position: int
    stream: str
    version: int
    type: str
    schema_version: int
    payload_bytes: bytes
    recorded_at: str
    actor: str
    entry_hash: str

    @property
    def payload(self) -> dict[str, Any]:
        """Returns the payload as recorded (its schema version, not upcast)."""
        value: dict[str, Any] = orjson.loads(self.payload_bytes)
        return value

    def event(self) -> Event:
        """Returns the event as a model of the current schema version (upcast on read)."""
        return CATALOGUE.decode(self.type, self.schema_version, self.payload)

    def to_json(self) -> dict[str, Any]:
        """Returns the envelope as a JSON-ready object (payload parsed, hash included)."""
        return {
            "position": self.position,
            "stream": self.stream,
            "version": self.version,
            "type": self.type,
            "schema_version": self.schema_version,
            "payload": self.payload,
            "recorded_at": self.recorded_at,
            "actor": self.actor,
            "hash": self.entry_hash,
        }


@dataclass(frozen=True, slots=True)
class AppendResult:
    """Reports the positions an append wrote, or found already written for its key."""

    positions: tuple[int, ...]
    already_recorded: bool = False
    entry_hashes: tuple[str, ...] = field(default=())

    @property
    def first(self) -> int:
        """Returns the first position of the batch."""
        return self.positions[0]

    @property
    def last(self) -> int:
        """Returns the last position of the batch."""
        return self.positions[-1]


@dataclass(frozen=True, slots=True)
class Head:
    """Is the ledger's tip: the last position (0 when empty) and its entry hash."""

    position: int
    entry_hash: str


@dataclass(frozen=True, slots=True)
class VerifyReport:
    """Reports a chain verification: how far it got and the first bad position, if any."""

    ok: bool
    checked: int
    from_position: int
    to_position: int
    head_hash: str
    first_bad_position: int | None = None
    problem: str | None = None
    kind: Literal["ok", "hash_mismatch", "gap", "head_mismatch", "order", "tree_mismatch"] = "ok"
    #: With ``tree``: the Merkle root of the entry hashes 1..to_position, which the stored
    #: tree (what checkpoints sign and proofs read) was found to give too; else None.
    merkle_root: str | None = None

    def to_json(self) -> dict[str, Any]:
        """Returns the report as a JSON-ready object."""
        return {
            "ok": self.ok,
            "checked": self.checked,
            "from_position": self.from_position,
            "to_position": self.to_position,
            "head_hash": self.head_hash,
            "first_bad_position": self.first_bad_position,
            "problem": self.problem,
            "kind": self.kind,
            "merkle_root": self.merkle_root,
        }

"""Replays a ledger from nothing and re-derives every recorded decision and settlement.

Replay is how a second validator checks a first one: it reads the events in position order
(from a store or an exported bundle), recomputes the hash chain, folds every machine from
an empty state, and compares each recorded AttemptDecided, SubmissionResolved and
SettlementComputed with what the machines derive at that point, field by field. The first
divergence is reported with its position, stream, field, recorded and recomputed values.
"""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from ledger.catalogue import CATALOGUE
from ledger.chain import GENESIS_HASH, envelope_bytes, next_entry_hash
from ledger.codec import loads
from ledger.errors import LedgerError
from ledger.events import (
    AttemptDecided,
    EmissionPolicySet,
    SettlementComputed,
    SubmissionResolved,
)
from ledger.model import RecordedEvent

__all__ = ["Divergence", "ReplayReport", "replay_events"]

_DECISION_FIELDS = ("verdict", "reason", "disposition", "speedup", "pass_line", "look_window")


@dataclass(frozen=True)
class Divergence:
    """Names the first place where the recorded ledger and the recomputation part."""

    position: int
    stream: str
    type: str
    field: str
    recorded: Any
    recomputed: Any
    code: str

    def to_json(self) -> dict[str, Any]:
        """Returns the divergence as a JSON-ready object."""
        return {
            "position": self.position,
            "stream": self.stream,
            "type": self.type,
            "field": self.field,
            "recorded": self.recorded,
            "recomputed": self.recomputed,
            "code": self.code,
        }


@dataclass
class ReplayReport:
    """Sums up a replay: counts, the last settlement digest and the first divergence."""

    events: int = 0
    verdicts_checked: int = 0
    resolutions_checked: int = 0
    settlements_checked: int = 0
    last_position: int = 0
    head_hash: str = GENESIS_HASH
    settlement_digest: str | None = None
    divergence: Divergence | None = None
    expected_digest: str | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """Tells whether everything matched (and the expected digest, when given)."""
        if self.divergence is not None:
            return False
        return self.expected_digest is None or self.expected_digest == self.settlement_digest

    def to_json(self) -> dict[str, Any]:
        """Returns the report as a JSON-ready object."""
        return {
            "ok": self.ok,
            "events": self.events,
            "last_position": self.last_position,
            "head_hash": self.head_hash,
            "verdicts_checked": self.verdicts_checked,
            "resolutions_checked": self.resolutions_checked,
            "settlements_checked": self.settlements_checked,
            "settlement_digest": self.settlement_digest,
            "expected_digest": self.expected_digest,
            "divergence": None if self.divergence is None else self.divergence.to_json(),
        }


class _Replayer:
    def __init__(self, report: ReplayReport) -> None:
        from machines.projection import LedgerFold

        self.fold = LedgerFold()
        self.report = report
        self.policy: EmissionPolicySet | None = None
        self.previous = bytes(32)

    def step(self, r: RecordedEvent) -> Divergence | None:
        expected_position = self.report.last_position + 1
        if r.position != expected_position:
            return Divergence(
                expected_position,
                r.stream,
                r.type,
                "position",
                r.position,
                expected_position,
                "gap",
            )
        envelope = envelope_bytes(
            r.position,
            r.stream,
            r.version,
            r.type,
            r.schema_version,
            r.payload_bytes,
            r.recorded_at,
            r.actor,
        )
        self.previous = next_entry_hash(self.previous, envelope)
        if self.previous.hex() != r.entry_hash:
            return Divergence(
                r.position,
                r.stream,
                r.type,
                "entry_hash",
                r.entry_hash,
                self.previous.hex(),
                "hash_mismatch",
            )
        payload = loads(r.payload_bytes)
        event = CATALOGUE.decode(r.type, r.schema_version, payload)
        divergence = self._check(r, event, payload)
        if divergence is None:
            refusal = self.fold.apply(r.position, r.stream, event, payload)
            if refusal is not None:
                divergence = Divergence(
                    r.position,
                    r.stream,
                    r.type,
                    _field_of(refusal.detail),
                    None,
                    refusal.detail,
                    refusal.code,
                )
        self.report.events += 1
        self.report.last_position = r.position
        self.report.head_hash = r.entry_hash
        return divergence

    def _check(self, r: RecordedEvent, event: Any, payload: Any) -> Divergence | None:
        if isinstance(event, AttemptDecided):
            self.report.verdicts_checked += 1
            derived = self.fold.derive_decision(r.stream.partition("-")[2])
            return _compare(r, event, None if derived is None else derived._asdict())
        if isinstance(event, SubmissionResolved):
            self.report.resolutions_checked += 1
            attempt = self.fold.attempt(event.attempt_id)
            decision = None if attempt is None else attempt.decision
            return _compare(r, event, None if decision is None else decision._asdict())
        if isinstance(event, EmissionPolicySet):
            self.policy = event
        if isinstance(event, SettlementComputed):
            return self._check_settlement(r, event, payload)
        return None

    def _check_settlement(
        self, r: RecordedEvent, event: SettlementComputed, payload: Any
    ) -> Divergence | None:
        from ledger.settle import check_recorded

        self.report.settlements_checked += 1
        try:
            difference = check_recorded(self.fold, self.policy, event, payload)
        except LedgerError as exc:
            return Divergence(
                r.position,
                r.stream,
                r.type,
                "settlement",
                None,
                exc.message,
                exc.context.get("reason", exc.code),
            )
        if difference is not None:
            name, recorded, recomputed = difference
            return Divergence(
                r.position, r.stream, r.type, name, recorded, recomputed, "settlement_mismatch"
            )
        self.report.settlement_digest = event.settlement_digest
        return None


def _compare(r: RecordedEvent, event: Any, derived: dict[str, Any] | None) -> Divergence | None:
    if derived is None:
        return Divergence(
            r.position, r.stream, r.type, "verdict", event.verdict, None, "decision_not_derivable"
        )
    for name in _DECISION_FIELDS:
        if name not in type(event).model_fields:
            continue
        recorded = getattr(event, name)
        if recorded != derived[name]:
            return Divergence(
                r.position, r.stream, r.type, name, recorded, derived[name], "decision_mismatch"
            )
    return None


def _field_of(detail: str) -> str:
    head = detail.split(" ", 1)[0].rstrip(":")
    return head if head.isidentifier() else "event"


def replay_events(
    records: Iterable[RecordedEvent],
    *,
    expect: str | None = None,
    progress: Callable[[int], None] | None = None,
) -> ReplayReport:
    """Replays ``records`` (position order, from 1); stops at the first divergence."""
    report = ReplayReport(expected_digest=expect)
    replayer = _Replayer(report)
    # The fold's state is long-lived and acyclic: freezing it periodically keeps the cyclic
    # garbage collector from rescanning it (a third of replay's time on a 1M ledger).
    frozen_every = 10_000
    try:
        for recorded in records:
            divergence = replayer.step(recorded)
            if progress is not None:
                progress(recorded.position)
            if divergence is not None:
                report.divergence = divergence
                break
            if recorded.position % frozen_every == 0:
                gc.freeze()
    finally:
        gc.unfreeze()
    return report

"""Drives a ``LedgerFold`` the way an appender should: decide, then apply, nothing refused.

``Scenario`` is the write-side pattern in miniature (tests, docs and examples use it):
every event is decided against the fold first and appended only when it is not refused;
intake outcomes and attempt decisions are taken from the fold, never typed by hand.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from machines import samples
from machines.arena import ArenaState, Payload
from machines.arithmetic import Decision
from machines.attempt import AttemptState, AttemptSummary
from machines.intake import Admission
from machines.projection import LedgerFold, Record
from machines.refusal import Refusal
from machines.submission import SubmissionState
from vocabulary.events import (
    CreditGranted,
    CreditSpent,
    Event,
    PaymentConsumed,
    QualificationStarted,
    SubmissionAdmitted,
    SubmissionRejected,
    SubmissionResolved,
)

__all__ = ["Scenario", "ScenarioRefused"]


class ScenarioRefused(ValueError):
    """Reports that a scripted event was refused (the script, not the ledger, is wrong)."""

    def __init__(self, refusal: Refusal) -> None:
        super().__init__(str(refusal))
        self.refusal = refusal


class Scenario:
    """Appends well-formed events to a fold and keeps the records it appended."""

    def __init__(self, fold: LedgerFold | None = None) -> None:
        self.fold = fold if fold is not None else LedgerFold()
        self.records: list[Record] = []

    def try_append(self, batch: Sequence[tuple[str, Event]]) -> Refusal | None:
        """Appends one atomic batch if no event of it is refused; returns the first refusal."""
        decided = self.fold.decide_batch([(stream, event, None) for stream, event in batch])
        for refusal in decided:
            if refusal is not None:
                return refusal
        for stream, event in batch:
            position = self.fold.position + 1
            assert self.fold.apply(position, stream, event) is None
            self.records.append((position, stream, event.event_type, event))
        return None

    def append(self, stream: str, *events: Event, payload: Payload = None) -> None:
        """Appends events of one stream atomically, raising ``ScenarioRefused`` if refused."""
        refusal = self.try_append([(stream, event) for event in events])
        if refusal is not None:
            raise ScenarioRefused(refusal)

    def commission(self, arena_id: str = "mlp-arena", **fields: Any) -> ArenaState:
        """Commissions (or re-commissions) an arena."""
        self.append(f"arena-{arena_id}", samples.commissioned(arena_id, **fields))
        state = self.fold.arena(arena_id)
        assert state is not None
        return state

    def credit(self, credit_id: str, hotkey: str, amount_rao: int = 1_000_000_000) -> None:
        """Grants a credit to a hotkey."""
        grant = CreditGranted(credit_id=credit_id, hotkey=hotkey, amount_rao=amount_rao, note="")
        self.append(f"credit-{credit_id}", grant)

    def arrive(self, *, paid_rao: int | None = None, block: int = 1_000, **fields: Any) -> str:
        """Records an arrival and its intake outcome (admission with its fee, or rejection)."""
        event = samples.arrived(block=block, **fields)
        sid = event.submission_id
        self.append(f"submission-{sid}", event)
        sub = self.fold.submission(sid)
        assert sub is not None
        outcome = self.fold.intake(sid, paid_rao)
        if not isinstance(outcome, Admission):
            self.append(f"submission-{sid}", SubmissionRejected(block=block, reason=outcome.reason))
            return sid
        self.admit(sub, outcome, block)
        return sid

    def admit(self, sub: SubmissionState, fee: Admission, block: int) -> None:
        """Appends SubmissionAdmitted with its PaymentConsumed or CreditSpent, atomically."""
        sid = sub.submission_id
        batch: list[tuple[str, Event]] = [
            (f"submission-{sid}", SubmissionAdmitted.model_validate(
                {"block": block, "fee": {"kind": fee.kind, "ref": fee.ref,
                                         "amount_rao": fee.amount_rao}}
            ))
        ]
        if fee.kind == "payment":
            consumed = PaymentConsumed(
                payment_ref=fee.ref, submission_id=sid, arena_id=sub.arena_id,
                amount_rao=fee.amount_rao,
            )
            batch.append((f"payment-{fee.ref}", consumed))
        elif fee.kind == "credit":
            batch.append((f"credit-{fee.ref}", CreditSpent(submission_id=sid)))
        refusal = self.try_append(batch)
        if refusal is not None:
            raise ScenarioRefused(refusal)

    def claim(
        self, sid: str, attempt_id: str, *, plan: str = "normal", block: int = 1_010
    ) -> None:
        """Claims a QUEUED submission: AttemptClaimed and QualificationStarted, atomically."""
        sub = self.fold.submission(sid)
        assert sub is not None
        arena = self.fold.arena(sub.arena_id)
        assert arena is not None
        claimed = samples.claimed(
            sid, arena.commission_digest, attempt_id=attempt_id, arena_id=sub.arena_id,
            plan=plan, block=block,
        )
        refusal = self.try_append(
            [
                (f"attempt-{attempt_id}", claimed),
                (f"submission-{sid}", QualificationStarted(attempt_id=attempt_id)),
            ]
        )
        if refusal is not None:
            raise ScenarioRefused(refusal)

    def measure(self, attempt_id: str, costs: Sequence[tuple[int, int]]) -> None:
        """Appends windows 1.. with (stock, candidate) costs until speed is decided."""
        for index, (stock, candidate) in enumerate(costs, start=1):
            state = self.attempt(attempt_id)
            if state.speed is not None:
                return
            orientation = state.params.orientation(index)
            measured = samples.window(index, orientation, stock, candidate)
            self.append(f"attempt-{attempt_id}", measured)

    def attempt(self, attempt_id: str) -> AttemptState:
        """Returns the full state of a live attempt."""
        state = self.fold.attempt(attempt_id)
        assert isinstance(state, AttemptState), f"{attempt_id} is not live"
        return state

    def decide(self, attempt_id: str, *, block: int = 1_020) -> Decision:
        """Appends the AttemptDecided the fold derives; returns that decision."""
        decision = self.fold.derive_decision(attempt_id)
        assert decision is not None, f"{attempt_id} has no derived decision yet"
        version = self.attempt(attempt_id).params.rules_version
        self.append(
            f"attempt-{attempt_id}",
            samples.decided(decision, block=block, rules_version=version),
        )
        return decision

    def resolve(self, sid: str) -> SubmissionState:
        """Appends SubmissionResolved copying the current attempt's recorded decision."""
        sub = self.fold.submission(sid)
        assert sub is not None and sub.attempt_id is not None
        summary = self.fold.attempt(sub.attempt_id)
        assert isinstance(summary, (AttemptState, AttemptSummary))
        decision = summary.decision
        assert decision is not None
        self.append(
            f"submission-{sid}",
            SubmissionResolved(
                attempt_id=sub.attempt_id, verdict=decision.verdict,
                reason=decision.reason, disposition=decision.disposition,
            ),
        )
        resolved = self.fold.submission(sid)
        assert resolved is not None
        return resolved

    def evaluate(
        self, sid: str, attempt_id: str, costs: Sequence[tuple[int, int]],
        *extra: Event, plan: str = "normal",
    ) -> SubmissionState:
        """Claims, measures, appends ``extra`` attempt events, decides and resolves."""
        self.claim(sid, attempt_id, plan=plan)
        self.measure(attempt_id, costs)
        if extra:
            self.append(f"attempt-{attempt_id}", *extra)
        self.decide(attempt_id)
        return self.resolve(sid)

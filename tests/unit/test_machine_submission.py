"""Checks the Submission machine: intake edges, resolutions, retry budget, holds and SLA."""

from __future__ import annotations

from typing import Any

import pytest

from machines import samples
from machines import submission as S
from machines.arithmetic import Decision
from machines.refusal import Refusal
from vocabulary.codec import digest
from vocabulary.errors import CanonicalFormError
from vocabulary.events import (
    Event,
    HoldReleased,
    QualificationStarted,
    SubmissionAdmitted,
    SubmissionArrived,
    SubmissionExpired,
    SubmissionHeld,
    SubmissionRejected,
    SubmissionRequeued,
    SubmissionResolved,
)

ARRIVAL_BLOCK = 1_000


def _admitted() -> SubmissionAdmitted:
    return SubmissionAdmitted.model_validate(
        {"block": ARRIVAL_BLOCK, "fee": {"kind": "payment", "ref": "pay-1", "amount_rao": 5}}
    )


def _resolved(attempt: str, verdict: str, reason: str, disposition: str) -> SubmissionResolved:
    return SubmissionResolved.model_validate(
        {"attempt_id": attempt, "verdict": verdict, "reason": reason, "disposition": disposition}
    )


def _ok(state: S.SubmissionState | None, *events: Event, **context: Any) -> S.SubmissionState:
    ctx = S.SubmissionContext(**context) if context else None
    for event in events:
        result = S.step(state, event, ctx)
        assert not isinstance(result, Refusal), str(result)
        state = result
    assert state is not None
    return state


def _refused(state: S.SubmissionState | None, event: Event, **context: Any) -> Refusal:
    ctx = S.SubmissionContext(**context) if context else None
    result = S.step(state, event, ctx)
    assert isinstance(result, Refusal)
    assert S.apply(state, event, ctx) is state
    assert S.decide(state, event, ctx) == result
    return result


def _queued() -> S.SubmissionState:
    return _ok(None, samples.arrived(block=ARRIVAL_BLOCK), _admitted())


def _qualifying(attempt: str = "att-1") -> S.SubmissionState:
    return _ok(_queued(), QualificationStarted(attempt_id=attempt))


def test_arrival_opens_in_arrived_with_its_arrival_key() -> None:
    arrived = samples.arrived(block=7, index=2, subindex=1, hotkey="5Key", content="x")
    state = _ok(None, arrived)
    assert state.status == S.ARRIVED
    assert state.arrival_key == (7, 2, 1, "5Key", samples.hex64("x"))
    assert S.submission_id_of(arrived) == arrived.submission_id
    assert _refused(state, arrived).code == "stream_already_started"
    assert _refused(None, _admitted()).code == "stream_not_started"


def test_admission_and_rejection() -> None:
    state = _queued()
    assert state.status == S.QUEUED and state.fee == S.Fee("payment", "pay-1", 5)
    rejected = _ok(None, samples.arrived(), SubmissionRejected(block=1, reason="arena_retired"))
    assert (rejected.status, rejected.rejection, rejected.terminal) == (
        S.REJECTED, "arena_retired", True,
    )
    assert _refused(rejected, _admitted()).code == "terminal_state"


@pytest.mark.parametrize(
    ("verdict", "reason", "disposition", "status"),
    [
        ("PASS", "", "COMPLETE", S.QUALIFIED),
        ("FAIL", "candidate_slower", "COMPLETE", S.FAILED),
        ("NO_DECISION", "engine_killed", "COMPLETE", S.NO_DECISION),
        ("NO_DECISION", "adapter_start_failed", "REQUEUE", S.QUEUED),
        ("NO_DECISION", "evidence_unavailable", "HOLD", S.HELD),
    ],
)
def test_resolution_targets(verdict: str, reason: str, disposition: str, status: str) -> None:
    state = _ok(_qualifying(), _resolved("att-1", verdict, reason, disposition))
    assert (state.status, state.verdict, state.reason, state.disposition) == (
        status, verdict, reason, disposition,
    )
    if status == S.HELD:
        assert state.hold_reason == reason


def test_resolution_must_name_the_current_attempt_and_a_valid_disposition() -> None:
    state = _qualifying("att-2")
    assert _refused(state, _resolved("att-1", "PASS", "", "COMPLETE")).code == "attempt_mismatch"
    assert _refused(state, _resolved("att-2", "FAIL", "x", "REQUEUE")).code == (
        "disposition_invalid"
    )
    # REQUEUE and HOLD belong to NO_DECISION alone (docs/machines.md): a PASS is COMPLETE too.
    for verdict, reason in (("PASS", ""), ("FAIL", "candidate_slower")):
        for disposition in ("REQUEUE", "HOLD"):
            refusal = _refused(state, _resolved("att-2", verdict, reason, disposition))
            assert refusal.code == "disposition_invalid", (verdict, disposition)


def test_resolution_is_checked_against_the_attempt_decision() -> None:
    state = _qualifying()
    event = _resolved("att-1", "FAIL", "candidate_slower", "COMPLETE")
    assert _refused(state, event, check_resolution=True).code == "attempt_not_decided"
    other = Decision("FAIL", "speed_threshold_not_met", "COMPLETE", "0.99", "0.01", 4)
    refusal = _refused(state, event, check_resolution=True, attempt_decision=other)
    assert refusal.code == "resolution_mismatch" and refusal.detail.startswith("reason:")
    same = Decision("FAIL", "candidate_slower", "COMPLETE", None, None, 4)
    assert _ok(state, event, check_resolution=True, attempt_decision=same).status == S.FAILED
    # The disposition is the decision's too: a REQUEUE decision resolved as HOLD would park
    # a submission the retry budget should have queued again.
    requeue = Decision("NO_DECISION", "adapter_start_failed", "REQUEUE", None, None, None)
    held = _resolved("att-1", "NO_DECISION", "adapter_start_failed", "HOLD")
    refusal = _refused(state, held, check_resolution=True, attempt_decision=requeue)
    assert refusal.code == "resolution_mismatch" and refusal.detail.startswith("disposition:")
    queued = _resolved("att-1", "NO_DECISION", "adapter_start_failed", "REQUEUE")
    assert _ok(state, queued, check_resolution=True, attempt_decision=requeue).status == S.QUEUED


def test_retry_budget_holds_the_fourth_requeue() -> None:
    state = _queued()
    for n in range(1, 4):
        state = _ok(
            state,
            QualificationStarted(attempt_id=f"att-{n}"),
            _resolved(f"att-{n}", "NO_DECISION", "adapter_request_failed", "REQUEUE"),
        )
        assert (state.status, state.requeues) == (S.QUEUED, n)
    state = _ok(
        state,
        QualificationStarted(attempt_id="att-4"),
        _resolved("att-4", "NO_DECISION", "adapter_request_failed", "REQUEUE"),
    )
    assert (state.status, state.hold_reason, state.attempts) == (
        S.HELD, "retry_budget_exhausted", 4,
    )
    assert _refused(state, SubmissionHeld(reason="ops", block=2)).code == "already_held"
    released = _ok(state, HoldReleased(reason="fixed", block=3, operator="5Op"))
    assert (released.status, released.hold_reason) == (S.QUEUED, None)
    again = _ok(
        released,
        QualificationStarted(attempt_id="att-5"),
        _resolved("att-5", "NO_DECISION", "adapter_start_failed", "REQUEUE"),
    )
    assert again.status == S.HELD and again.hold_reason == "retry_budget_exhausted"


def test_other_no_decisions_do_not_spend_the_budget() -> None:
    state = _ok(
        _qualifying(),
        _resolved("att-1", "NO_DECISION", "engine_killed", "COMPLETE"),
        SubmissionRequeued(reason="operator", block=5),
    )
    assert (state.status, state.requeues) == (S.QUEUED, 0)


def test_holds_from_every_live_state_and_release_targets() -> None:
    arrived = _ok(None, samples.arrived())
    parked = _ok(_qualifying(), _resolved("att-1", "NO_DECISION", "engine_killed", "COMPLETE"))
    assert parked.status == S.NO_DECISION  # completed, not terminal (docs/machines.md)
    for state in (arrived, _queued(), _qualifying(), parked):
        held = _ok(state, SubmissionHeld(reason="ops", block=2))
        assert held.status == S.HELD
        released = _ok(held, HoldReleased(reason="ok", block=3, operator="5Op"))
        # A submission held before admission goes back to intake, never straight to the queue.
        assert released.status == (S.ARRIVED if state is arrived else S.QUEUED)


def test_requeue_only_from_completed_no_decision() -> None:
    assert _refused(_queued(), SubmissionRequeued(reason="x", block=2)).code == (
        "transition_not_allowed"
    )


@pytest.mark.parametrize("status", S.LIVE)
def test_sla_expiry_from_every_live_state(status: str) -> None:
    state = _reach(status)
    early = SubmissionExpired(block=ARRIVAL_BLOCK + 499_999, reason="sla_expired")
    assert _refused(state, early).code == "sla_not_reached"
    due = SubmissionExpired(block=ARRIVAL_BLOCK + 500_000, reason="sla_expired")
    expired = _ok(state, due)
    assert (expired.status, expired.expired_block) == (S.EXPIRED, ARRIVAL_BLOCK + 500_000)
    assert _refused(expired, due).code == "terminal_state"


def test_sla_comes_from_the_context() -> None:
    state = _queued()
    short = SubmissionExpired(block=ARRIVAL_BLOCK + 10, reason="sla_expired")
    assert _ok(state, short, sla_blocks=10).status == S.EXPIRED
    assert S.sla_due(state, ARRIVAL_BLOCK + 10, 10)
    assert not S.sla_due(state, ARRIVAL_BLOCK + 9, 10)


def _reach(status: str) -> S.SubmissionState:
    arrived = _ok(None, samples.arrived(block=ARRIVAL_BLOCK))
    return {
        S.ARRIVED: arrived,
        S.QUEUED: _queued(),
        S.QUALIFYING: _qualifying(),
        S.NO_DECISION: _ok(_qualifying(), _resolved("att-1", "NO_DECISION", "x", "COMPLETE")),
        S.HELD: _ok(_queued(), SubmissionHeld(reason="ops", block=2)),
    }[status]


def test_terminals_absorb_every_event() -> None:
    qualified = _ok(_qualifying(), _resolved("att-1", "PASS", "", "COMPLETE"))
    for event in (
        _admitted(),
        QualificationStarted(attempt_id="att-9"),
        SubmissionHeld(reason="x", block=1),
        SubmissionExpired(block=10**9, reason="sla_expired"),
    ):
        assert _refused(qualified, event).code == "terminal_state"


def test_fold_matches_step_by_step() -> None:
    events = [
        samples.arrived(),
        _admitted(),
        QualificationStarted(attempt_id="att-1"),
        _resolved("att-1", "FAIL", "futility", "COMPLETE"),
        SubmissionHeld(reason="late", block=9),  # refused: terminal, so ignored by fold
    ]
    assert S.fold(events) == _ok(None, *events[:4])


# sla_due is false for a terminal submission and defaults to 500,000 blocks (docs/machines.md); a
# NO_DECISION with disposition HOLD spends none of the retry budget (only REQUEUE resolutions
# count); an arrival whose integers lie outside canonical JSON's ±(2**53 − 1) gets the codec's
# refusal, never a digest.


def _queued_with_a_payment() -> S.SubmissionState:
    admitted = SubmissionAdmitted.model_validate(
        {"block": ARRIVAL_BLOCK, "fee": {"kind": "payment", "ref": "pay-1", "amount_rao": 5}}
    )
    return _ok(None, samples.arrived(block=ARRIVAL_BLOCK), admitted)


def _attempt(
    state: S.SubmissionState, attempt: str, reason: str, disposition: str
) -> S.SubmissionState:
    resolved = SubmissionResolved(
        attempt_id=attempt, verdict="NO_DECISION", reason=reason, disposition=disposition
    )
    return _ok(state, QualificationStarted(attempt_id=attempt), resolved)


# --- Submission ------------------------------------------------------------------------


def test_sla_due_is_false_for_a_terminal_submission_however_late() -> None:
    # sla_due "tells whether a live submission may expire": a terminal one absorbs nothing
    # (docs/machines.md), so no block, however late, makes it due.
    qualified = _ok(
        _queued_with_a_payment(),
        QualificationStarted(attempt_id="att-1"),
        SubmissionResolved(attempt_id="att-1", verdict="PASS", reason="", disposition="COMPLETE"),
    )
    assert qualified.status == S.QUALIFIED
    assert S.sla_due(qualified, ARRIVAL_BLOCK + 10**9, 10) is False
    assert S.sla_due(_queued_with_a_payment(), ARRIVAL_BLOCK + 10**9, 10) is True


def test_sla_due_defaults_to_500000_blocks_past_arrival() -> None:
    # docs/machines.md: sla_blocks defaults to 500,000 when the policy names none.
    queued = _queued_with_a_payment()
    assert S.sla_due(queued, ARRIVAL_BLOCK + 500_000) is True
    assert S.sla_due(queued, ARRIVAL_BLOCK + 499_999) is False


def test_a_hold_disposition_spends_none_of_the_retry_budget() -> None:
    # Only NO_DECISION with disposition REQUEUE spends the budget (docs/machines.md): after a
    # HOLD resolution and its release, three REQUEUE resolutions still re-queue.
    held = _attempt(_queued_with_a_payment(), "att-1", "evidence_unavailable", "HOLD")
    assert (held.status, held.hold_reason, held.requeues) == (
        S.HELD, "evidence_unavailable", 0,
    )
    state = _ok(held, HoldReleased(reason="restored", block=2_000, operator="5Op"))
    assert (state.status, state.requeues) == (S.QUEUED, 0)
    for n in (1, 2, 3):
        state = _attempt(state, f"att-{n + 1}", "adapter_start_failed", "REQUEUE")
        assert (state.status, state.requeues, state.hold_reason) == (S.QUEUED, n, None)
    state = _attempt(state, "att-5", "adapter_start_failed", "REQUEUE")
    assert (state.status, state.hold_reason, state.attempts) == (
        S.HELD, "retry_budget_exhausted", 5,
    )


@pytest.mark.parametrize("field", ["block", "event_index", "event_subindex"])
def test_an_arrival_integer_past_the_json_range_gets_the_codecs_refusal(field: str) -> None:
    # submission_id_of spells canonical JSON itself only for JSON-safe integers; anything
    # else goes through vocabulary.codec.digest, which refuses integers past ±(2**53 − 1).
    numbers = {"block": 7, "event_index": 0, "event_subindex": 0, field: 2**53}
    arrival = samples.arrived().arrival.model_construct(**numbers)
    event = SubmissionArrived.model_construct(
        arena_id="mlp-arena", miner_hotkey="5Miner", content_hash="c" * 64, arrival=arrival,
    )
    with pytest.raises(CanonicalFormError):
        S.submission_id_of(event)
    # The largest safe integer is still digested, and equals the codec's digest.
    safe = arrival.model_construct(**{**numbers, field: 2**53 - 1})
    event = SubmissionArrived.model_construct(
        arena_id="mlp-arena", miner_hotkey="5Miner", content_hash="c" * 64, arrival=safe,
    )
    assert S.submission_id_of(event) == digest("arena-ledger.arrival", {
        "arena_id": "mlp-arena", **{**numbers, field: 2**53 - 1},
        "miner_hotkey": "5Miner", "content_hash": "c" * 64,
    })

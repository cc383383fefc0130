"""Pins submission, payment and arena machine rules that a hand-made mutation review of
machines/submission.py, machines/payment.py and machines/arena.py found no test holding.

- Submission: ``sla_due`` is false for a terminal submission and defaults to 500,000 blocks
  (DOMAIN §5); a NO_DECISION with disposition HOLD spends none of the retry budget (only
  REQUEUE resolutions count, docs/machines.md); an arrival whose integers lie outside
  canonical JSON's ±(2**53 − 1) gets the codec's refusal, never a digest.
- Payment and credit: a non-opening event on an unopened stream is refused
  ``stream_not_started``; the folds leave a refused event out, as their docstrings say.
- Arena: the commission digest is the recorded payload's (DOMAIN §3); a re-commission keeps
  every earlier commission by digest, carries its own policy digest, fee and incumbent (a
  new reward group, docs/machines.md); IncumbentAdvanced and ArenaRetired record their
  block (and reason); controls of one delta digest stay in registration order.

Each test fails on a one-line change to those modules that the rest of the suite lets through.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from machines import arena as A
from machines import payment as P
from machines import samples
from machines import submission as S
from machines.refusal import Refusal
from machines.scenario import Scenario
from vocabulary.codec import digest
from vocabulary.errors import CanonicalFormError
from vocabulary.events import (
    ArenaCommissioned,
    ArenaRetired,
    ControlRegistered,
    CreditGranted,
    CreditSpent,
    Event,
    HoldReleased,
    IncumbentAdvanced,
    PaymentConsumed,
    PaymentReleased,
    QualificationStarted,
    SubmissionAdmitted,
    SubmissionArrived,
    SubmissionResolved,
)

ARRIVAL_BLOCK = 1_000
SID = samples.hex64("submission-1")
OTHER_SID = samples.hex64("submission-2")


def _steps(step: Any, state: Any, events: tuple[Event, ...]) -> Any:
    """Applies ``events`` with a machine's ``step``, each accepted; returns the last state."""
    for event in events:
        result = step(state, event)
        assert not isinstance(result, Refusal), str(result)
        state = result
    assert state is not None
    return state


def _ok(state: S.SubmissionState | None, *events: Event) -> S.SubmissionState:
    return _steps(S.step, state, events)


def _queued() -> S.SubmissionState:
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
    # (DOMAIN §5), so no block, however late, makes it due.
    qualified = _ok(
        _queued(),
        QualificationStarted(attempt_id="att-1"),
        SubmissionResolved(attempt_id="att-1", verdict="PASS", reason="", disposition="COMPLETE"),
    )
    assert qualified.status == S.QUALIFIED
    assert S.sla_due(qualified, ARRIVAL_BLOCK + 10**9, 10) is False
    assert S.sla_due(_queued(), ARRIVAL_BLOCK + 10**9, 10) is True


def test_sla_due_defaults_to_500000_blocks_past_arrival() -> None:
    # DOMAIN §5: sla_blocks defaults to 500,000 when the policy names none.
    queued = _queued()
    assert S.sla_due(queued, ARRIVAL_BLOCK + 500_000) is True
    assert S.sla_due(queued, ARRIVAL_BLOCK + 499_999) is False


def test_a_hold_disposition_spends_none_of_the_retry_budget() -> None:
    # Only NO_DECISION with disposition REQUEUE spends the budget (docs/machines.md): after a
    # HOLD resolution and its release, three REQUEUE resolutions still re-queue.
    held = _attempt(_queued(), "att-1", "evidence_unavailable", "HOLD")
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


# --- Payment and credit ----------------------------------------------------------------


def _consumed(sid: str = SID) -> PaymentConsumed:
    return PaymentConsumed(payment_ref="pay-1", submission_id=sid, arena_id="mlp-arena",
                           amount_rao=5)


def test_an_unopened_payment_or_credit_stream_refuses_with_stream_not_started() -> None:
    released = P.payment_step(None, PaymentReleased(submission_id=SID, reason="expired"))
    assert isinstance(released, Refusal)
    assert (released.machine, released.code) == ("payment", "stream_not_started")
    spent = P.credit_step(None, CreditSpent(submission_id=SID))
    assert isinstance(spent, Refusal)
    assert (spent.machine, spent.code) == ("credit", "stream_not_started")


def test_the_payment_and_credit_folds_leave_refused_events_out() -> None:
    # A second PaymentConsumed and a release for another submission are refused, so the
    # fold still holds the consumed payment; a release for its own submission then applies.
    payment = P.fold_payment([
        _consumed(), _consumed(OTHER_SID),
        PaymentReleased(submission_id=OTHER_SID, reason="expired"),
    ])
    assert payment == P.PaymentState("pay-1", SID, "mlp-arena", 5, P.CONSUMED, None)
    refunded = P.fold_payment([
        _consumed(), PaymentReleased(submission_id=SID, reason="expired"),
        PaymentReleased(submission_id=SID, reason="again"),
    ])
    assert refunded == P.PaymentState("pay-1", SID, "mlp-arena", 5, P.RELEASED, "expired")
    grant = CreditGranted(credit_id="cr-1", hotkey="5Miner", amount_rao=9, note="n")
    credit = P.fold_credit([
        grant, grant, CreditSpent(submission_id=SID), CreditSpent(submission_id=OTHER_SID),
    ])
    assert credit == P.CreditState("cr-1", "5Miner", 9, "n", P.SPENT, SID)


# --- Arena -----------------------------------------------------------------------------


def _fold(*events: Event) -> A.ArenaState:
    return _steps(A.step, None, events)


FIRST = samples.commissioned(block=100, incumbent="incumbent-0", fee_rao=1_000_000_000)
SECOND = samples.commissioned(
    block=200, incumbent="incumbent-1", fee_rao=0,
    model={"name": "tiny-llama", "revision": "r2"},
    sealed=samples.policy(window_noise="0.02"),
)


def test_the_recorded_payload_decides_the_commission_digest() -> None:
    # DOMAIN §3: digest("arena-ledger.commission", the payload as recorded). A payload that
    # spells a default the model was not given hashes as recorded, not as rebuilt.
    document = samples.commission_document()
    event = ArenaCommissioned.model_validate(document)
    recorded: dict[str, Any] = copy.deepcopy(document)
    recorded["policy"]["sla_blocks"] = 500_000
    expected = digest("arena-ledger.commission", recorded)
    assert expected != A.commission_digest(event)
    assert A.commission_digest(event, recorded) == expected
    opened = A.step(None, event, recorded)
    assert isinstance(opened, A.ArenaState)
    assert opened.commission_digest == expected
    assert list(opened.commissions) == [expected]


def test_a_recommission_keeps_every_earlier_commission_by_digest() -> None:
    # Attempts stay bound to the commission they were claimed under (DOMAIN §3).
    state = _fold(FIRST, SECOND)
    first, second = A.commission_digest(FIRST), A.commission_digest(SECOND)
    assert first != second
    assert state.commission_digest == second
    assert list(state.commissions) == [first, second]
    assert state.commissions[first].event == FIRST
    assert state.commissions[first].block == 100 and state.commissions[second].block == 200


def test_each_commission_carries_its_own_policy_digest() -> None:
    state = _fold(FIRST, SECOND)
    first, second = A.commission_digest(FIRST), A.commission_digest(SECOND)
    assert state.commissions[first].policy_digest == A.policy_digest(FIRST.policy)
    assert state.commissions[second].policy_digest == A.policy_digest(SECOND.policy)
    assert A.policy_digest(FIRST.policy) != A.policy_digest(SECOND.policy)


def test_the_incumbent_starts_at_the_commission_and_moves_with_a_recommission() -> None:
    # Re-commissioning with another incumbent starts a new reward group (docs/machines.md).
    opened = _fold(FIRST)
    assert (opened.incumbent_digest, opened.incumbent_block) == (samples.hex64("incumbent-0"), 100)
    state = _fold(FIRST, SECOND)
    assert (state.incumbent_digest, state.incumbent_block) == (samples.hex64("incumbent-1"), 200)


def test_incumbent_advanced_records_its_digest_and_block() -> None:
    advanced = IncumbentAdvanced(
        incumbent_digest=samples.hex64("incumbent-2"), block=150, reason="a better kernel"
    )
    state = _fold(FIRST, advanced)
    assert (state.status, state.incumbent_digest, state.incumbent_block) == (
        A.ACTIVE, samples.hex64("incumbent-2"), 150,
    )


def test_retirement_records_its_block_and_reason() -> None:
    state = _fold(FIRST, ArenaRetired(block=300, reason="model withdrawn"))
    assert (state.status, state.retired, state.retired_block, state.retired_reason) == (
        A.RETIRED, True, 300, "model withdrawn",
    )


def test_the_fee_is_the_current_commissions() -> None:
    # Intake reads the arena fee (DOMAIN §5): after a re-commission at fee 0, an arrival
    # naming no payment is admitted waived.
    assert _fold(FIRST, SECOND).fee_rao == 0
    sc = Scenario()
    sc.commission(fee_rao=1_000_000_000)
    sc.commission(fee_rao=0, block=200, model={"name": "tiny-llama", "revision": "r2"})
    sub = sc.fold.submission(sc.arrive(block=1_000))
    assert sub is not None
    assert (sub.status, sub.fee) == (S.QUEUED, S.Fee("waived", "", 0))


def test_controls_of_one_delta_digest_stay_in_registration_order() -> None:
    # Every control of a digest is judged against its submissions, controls in registration
    # order (docs/machines.md); the names are chosen so sorted order differs.
    delta = "d" * 64
    later = ControlRegistered(control_id="zz-first", kind="identity", delta_digest=delta,
                              expected_verdict="PASS")
    earlier = ControlRegistered(control_id="aa-second", kind="honest", delta_digest=delta,
                                expected_verdict="PASS")
    state = _fold(FIRST, later, earlier)
    assert state.controls_by_delta == {delta: ("zz-first", "aa-second")}
    assert list(state.controls) == ["zz-first", "aa-second"]

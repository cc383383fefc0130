"""Holds an archiving LedgerFold to one that keeps everything, where the archive is read back.

Once a submission is terminal the fold moves it out of memory with its attempts, payment,
spent credit and failed-index entry. Every rule that meets one of them again (a late event
on any of its streams, a repeated id, intake's duplicate and per-epoch checks) must read it
back and answer exactly as a fold that kept it: the same refusal, field by field.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from archive_double import (
    MemoryArchive,  # same directory, prepend import mode
)
from fold_scenarios import (  # same directory, prepend import mode
    admitted_alone,
    admitted_with_fee,
    arrived_alone,
)

from machines import samples
from machines.arithmetic import Decision
from machines.intake import Admission, Rejection, admissions_per_epoch_max, epoch_blocks
from machines.projection import LedgerFold
from machines.refusal import Refusal
from machines.scenario import Scenario
from vocabulary.events import (
    ArenaRetired,
    CreditGranted,
    CreditSpent,
    EmissionPolicySet,
    Event,
    HoldReleased,
    PaymentConsumed,
    PaymentReleased,
    QualificationStarted,
    SubmissionAdmitted,
    SubmissionHeld,
    SubmissionRejected,
    SubmissionRequeued,
    SubmissionResolved,
)

FEE = 1_000_000_000
SLOW = ((FEE, 1_040_000_000),) * 4
PASSED = (samples.audit(), samples.quality())


def _both(records: list[Any]) -> tuple[LedgerFold, LedgerFold]:
    """Folds ``records`` into a fold that keeps everything and one that archives."""
    kept, archived = LedgerFold(), LedgerFold(archive=MemoryArchive())
    for position, stream, _, event in records:
        assert kept.apply(position, stream, event) is None
        assert archived.apply(position, stream, event) is None
    return kept, archived


def _finished() -> tuple[Scenario, dict[str, str]]:
    """A PASS paid by a payment and a FAIL paid by a credit (both archived), a queued
    submission and one qualifying."""
    sc = Scenario()
    sc.commission()
    sc.credit("credit-1", "5Bob", FEE)
    passed = sc.arrive(payment_ref="pay-1", paid_rao=FEE, hotkey="5Alice", content="fast")
    sc.evaluate(passed, "att-1", samples.WORKED_EXAMPLE_COSTS, *PASSED)
    failed = sc.arrive(hotkey="5Bob", content="slow", block=1_001)
    sc.evaluate(failed, "att-2", SLOW)
    live = sc.arrive(
        payment_ref="pay-3", paid_rao=FEE, hotkey="5Carol", content="live", block=1_002
    )
    qualifying = sc.arrive(
        payment_ref="pay-4", paid_rao=FEE, hotkey="5Dan", content="q", block=1_003
    )
    sc.claim(qualifying, "att-4")
    return sc, {"passed": passed, "failed": failed, "live": live, "qualifying": qualifying}


def _late(ids: dict[str, str]) -> list[tuple[str, Event]]:
    """Events that meet the finished submissions, attempts, payment and credit again."""
    passed, failed, live, qualifying = ids["passed"], ids["failed"], ids["live"], ids["qualifying"]
    resolved = SubmissionResolved(
        attempt_id="att-1", verdict="PASS", reason="", disposition="COMPLETE"
    )
    admitted = SubmissionAdmitted.model_validate(
        {"block": 1_000, "fee": {"kind": "payment", "ref": "pay-1", "amount_rao": FEE}}
    )
    decided = samples.decided(Decision("PASS", "", "COMPLETE", None, None, 1), block=2_000)
    return [
        (f"submission-{passed}", samples.arrived(hotkey="5Alice", content="fast")),
        (f"submission-{passed}", SubmissionRequeued(reason="ops", block=2_000)),
        (f"submission-{passed}", HoldReleased(reason="ok", block=2_000, operator="5Op")),
        (f"submission-{passed}", QualificationStarted(attempt_id="att-1")),
        (f"submission-{passed}", resolved),
        (f"submission-{passed}", admitted),
        (f"submission-{live}", QualificationStarted(attempt_id="att-1")),  # an archived attempt
        (f"submission-{live}", QualificationStarted(attempt_id="att-2")),
        (f"submission-{live}", resolved),  # an archived attempt, another submission's
        (f"submission-{qualifying}", resolved),  # read back: decided, but not its attempt
        ("attempt-att-1", samples.window(1, 1, FEE, FEE)),
        ("attempt-att-1", decided),
        ("attempt-att-2", samples.audit()),
        ("attempt-att-1", samples.claimed(live, "0" * 64, attempt_id="att-1")),
        ("payment-pay-1", PaymentReleased(submission_id=passed, reason="operator_refund")),
        ("payment-pay-1", PaymentReleased(submission_id=failed, reason="operator_refund")),
        (
            "payment-pay-1",
            PaymentConsumed(
                payment_ref="pay-1", submission_id=live, arena_id="mlp-arena", amount_rao=FEE
            ),
        ),
        ("payment-pay-3", PaymentReleased(submission_id=passed, reason="operator_refund")),
        (
            "payment-pay-9",
            PaymentConsumed(
                payment_ref="pay-9", submission_id=failed, arena_id="mlp-arena", amount_rao=FEE
            ),
        ),
        (
            "payment-pay-9",
            PaymentConsumed(
                payment_ref="pay-9", submission_id=failed, arena_id="attn-arena", amount_rao=FEE
            ),
        ),
        ("credit-credit-1", CreditSpent(submission_id=live)),
        (
            "credit-credit-1",
            CreditGranted(credit_id="credit-1", hotkey="5Bob", amount_rao=1, note=""),
        ),
    ]


def test_late_events_on_archived_streams_are_refused_as_on_a_fold_that_kept_them() -> None:
    sc, ids = _finished()
    kept, archived = _both(sc.records)
    assert archived.live_submissions() == 2 and len(archived._subs) == 2  # two left memory
    accepted = 0
    for stream, event in _late(ids):
        expected = kept.decide(stream, event)
        assert archived.decide(stream, event) == expected, (stream, event.event_type)
        accepted += expected is None
    # Accepted: the refund of the archived PASS's payment. The rest refused; a payment
    # consumed for the archived FAIL, which was admitted with another fee, as fee_mismatch
    # (read back from the archive: the submission left memory).
    assert accepted == 1
    failed = archived.submission(ids["failed"])
    assert failed is not None and failed.fee is not None and failed.fee.ref != "pay-9"
    assert kept.decide("payment-pay-9", PaymentConsumed(
        payment_ref="pay-9", submission_id=ids["failed"], arena_id="mlp-arena", amount_rao=FEE
    )).code == "fee_mismatch"  # type: ignore[union-attr]
    assert archived.snapshot() == kept.snapshot()  # decide changed nothing


def test_archived_attempts_payments_and_credits_read_back_equal() -> None:
    sc, ids = _finished()
    kept, archived = _both(sc.records)
    for attempt_id in ("att-1", "att-2"):
        assert archived.attempt(attempt_id) == kept.attempt(attempt_id) is not None
        assert archived.derive_decision(attempt_id) == kept.derive_decision(attempt_id)
        assert kept.derive_decision(attempt_id) is not None
    assert archived.payment("pay-1") == kept.payment("pay-1") is not None
    credit = kept.credit("credit-1")
    assert credit is not None and credit.status == "SPENT"
    assert archived.credit("credit-1") == credit
    assert archived.resolution(ids["passed"]) == kept.resolution(ids["passed"]) is not None


def test_the_failed_index_leaves_memory_with_its_submission_and_still_rejects_a_duplicate() -> None:
    sc, ids = _finished()
    kept, archived = _both(sc.records)
    assert archived._failed == {} and len(kept._failed) == 1
    again = samples.arrived(hotkey="5Dave", content="slow", block=1_004, payment_ref="pay-5")
    for fold in (kept, archived):
        assert fold.apply(fold.position + 1, f"submission-{again.submission_id}", again) is None
    outcome = kept.intake(again.submission_id, FEE)
    assert isinstance(outcome, Rejection) and outcome.reason.startswith("duplicate_of:")
    assert ids["failed"][:16] in outcome.reason
    assert archived.intake(again.submission_id, FEE) == outcome


def test_intake_counts_admissions_of_epochs_already_archived() -> None:
    # The archiving fold keeps the latest two epochs' admission counts in memory and the
    # older ones in the archive; a late arrival in any epoch is counted from where its
    # epoch's count went, so it is admitted or refused exactly as in a fold that kept all.
    sc = Scenario()
    sc.commission(fee_rao=0)
    limit = admissions_per_epoch_max
    for epoch in (0, 1):
        for n in range(limit):
            sc.arrive(hotkey="5Alice", content=f"e{epoch}-{n}", block=epoch * epoch_blocks + n)
    for epoch in (2, 3):
        sc.arrive(hotkey="5Alice", content=f"e{epoch}", block=epoch * epoch_blocks)
    kept, archived = _both(sc.records)
    outcomes = []
    for epoch in range(4):
        late = samples.arrived(
            hotkey="5Alice", content=f"late-{epoch}", block=epoch * epoch_blocks + 100
        )
        for fold in (kept, archived):
            assert fold.apply(fold.position + 1, f"submission-{late.submission_id}", late) is None
        outcome = kept.intake(late.submission_id)
        assert archived.intake(late.submission_id) == outcome, epoch
        outcomes.append(outcome)
    refused = Rejection("hotkey_epoch_admission_limit")
    waived = Admission("waived", "", 0)
    assert outcomes == [refused, refused, waived, waived]
    assert sorted(epoch for _, epoch in archived._admissions) == [2, 3]  # 0 and 1 archived


@pytest.mark.parametrize("latest", [2, 3])
def test_a_count_in_memory_is_not_read_from_the_archive(latest: int) -> None:
    # Epochs latest and latest - 1 stay in memory whatever the archive holds for them.
    sc = Scenario()
    sc.commission(fee_rao=0)
    for n in range(admissions_per_epoch_max):
        sc.arrive(hotkey="5Alice", content=f"a{n}", block=(latest - 1) * epoch_blocks + n)
    sc.arrive(hotkey="5Bob", content="b", block=latest * epoch_blocks)
    _, archived = _both(sc.records)
    assert archived._admitted.get(("5Alice", latest - 1)) == admissions_per_epoch_max
    assert archived._admitted.get(("5Alice", latest)) is None
    assert archived._admitted.get(("5Bob", latest)) == 1


def test_a_late_admission_into_an_archived_epoch_is_counted_for_the_next() -> None:
    # Epoch 0 is archived holding 15 admissions; a late arrival there is admitted (the
    # 16th, counted in memory again) and the next one is refused, in both folds.
    sc = Scenario()
    sc.commission(fee_rao=0)
    limit = admissions_per_epoch_max
    for n in range(limit - 1):
        sc.arrive(hotkey="5Alice", content=f"e0-{n}", block=n)
    sc.arrive(hotkey="5Alice", content="e2", block=2 * epoch_blocks)
    sc.arrive(hotkey="5Alice", content="late-1", block=100)
    kept, archived = _both(sc.records)
    assert archived._admissions[("5Alice", 0)] == limit  # back in memory, merged
    late = samples.arrived(hotkey="5Alice", content="late-2", block=101)
    for fold in (kept, archived):
        assert fold.apply(fold.position + 1, f"submission-{late.submission_id}", late) is None
    refused = Rejection("hotkey_epoch_admission_limit")
    assert kept.intake(late.submission_id) == archived.intake(late.submission_id) == refused


def test_the_read_through_views_are_mappings_over_memory_and_archive() -> None:
    sc, ids = _finished()
    _, archived = _both(sc.records)
    failures = archived._failures
    (key,) = failures.keys()  # the FAIL's (commission, content hash), from the archive
    assert failures[key].submission_id == ids["failed"] and key in failures
    missing = (key[0], "0" * 64)
    assert missing not in failures and failures.get(missing) is None
    with pytest.raises(KeyError):
        failures[missing]
    admitted = archived._admitted
    assert ("5Alice", 2) in admitted and admitted[("5Alice", 2)] == 1
    with pytest.raises(KeyError):
        admitted[("5Nobody", 2)]


def test_a_failure_decided_but_never_appended_leaves_nothing_in_the_failed_index() -> None:
    # A guard decides a FAIL resolution that is then not appended (the batch is refused,
    # or the operator holds the submission instead); the submission later passes and is
    # archived. Nothing of the undone failure may remain: no index entry, no duplicate.
    fold = LedgerFold(archive=MemoryArchive())
    sc = Scenario(fold)
    sc.commission()
    sid = sc.arrive(payment_ref="pay-1", paid_rao=FEE, hotkey="5Bob", content="flaky")
    sc.claim(sid, "att-1")
    sc.measure("att-1", SLOW)
    decision = sc.decide("att-1")
    assert decision.verdict == "FAIL"
    failed = SubmissionResolved(
        attempt_id="att-1", verdict="FAIL", reason=decision.reason, disposition="COMPLETE"
    )
    assert fold.decide(f"submission-{sid}", failed) is None  # would be accepted; not appended
    sc.append(f"submission-{sid}", SubmissionHeld(reason="operator review", block=1_100))
    sc.append(f"submission-{sid}", HoldReleased(reason="ok", block=1_101, operator="5Op"))
    passed = sc.evaluate(sid, "att-2", samples.WORKED_EXAMPLE_COSTS, *PASSED)
    assert passed.status == "QUALIFIED" and fold.live_submissions() == 0
    assert dict(fold._failures) == {}
    again = sc.arrive(
        payment_ref="pay-2", paid_rao=FEE, hotkey="5Eve", content="flaky", block=1_200
    )
    assert fold.submission(again).status == "QUEUED"  # type: ignore[union-attr]


# LedgerFold's money, verdict, archive and query rules at their edges, most on a fold that keeps
# everything and on one that archives (the sc fixture): a fee taken ahead of its admission leaves
# nothing owed; a payment ref and a credit id of one name never pay twice; a failure is indexed
# under the commission its attempt ran on; admissions count in the arrival's epoch; an archived
# record carries only its own payment and nothing of a finished submission stays in memory;
# expirable lists in arrival-key order.


POLICY = EmissionPolicySet(half_life_blocks=7_200, burn_hotkey="5Burn", validator_hotkey="5Val")


FOLDS: dict[str, Callable[[], LedgerFold]] = {
    "in_memory": LedgerFold,
    "archived": lambda: LedgerFold(archive=MemoryArchive()),
}


@pytest.fixture(params=sorted(FOLDS))
def sc(request: pytest.FixtureRequest) -> Scenario:
    """A scenario over a fold that keeps finished submissions, or one that archives them."""
    return Scenario(FOLDS[str(request.param)]())


def _consumed(sid: str, ref: str = "pay-1") -> PaymentConsumed:
    return PaymentConsumed(payment_ref=ref, submission_id=sid, arena_id="mlp-arena",
                           amount_rao=FEE)


def _refusal(sc: Scenario, stream: str, event: Event) -> Refusal | None:
    return sc.fold.decide(stream, event)


def test_a_failure_is_indexed_under_the_commission_its_attempt_ran_on(sc: Scenario) -> None:
    # The attempt was claimed under r1 and fails after the arena moved to r2: the failure
    # belongs to r1, so the same content under r2 is a fresh submission, not a duplicate.
    old = sc.commission(fee_rao=0)
    first = sc.arrive(content="same")
    sc.claim(first, "att-1")
    new = sc.commission(fee_rao=0, block=200, model={"name": "tiny-llama", "revision": "r2"})
    assert new.commission_digest != old.commission_digest
    sc.measure("att-1", SLOW)
    sc.decide("att-1")
    assert sc.resolve(first).status == "FAILED"
    key = (old.commission_digest, samples.arrived(content="same").content_hash)
    assert list(sc.fold.snapshot()["failed"]) == [key]
    again = sc.arrive(content="same", block=1_001)
    sub = sc.fold.submission(again)
    assert sub is not None and (sub.status, sub.rejection) == ("QUEUED", None)


def test_a_payment_consumed_ahead_of_its_admission_is_owed_by_nobody_after_it(
    sc: Scenario,
) -> None:
    state = sc.commission()
    sid = arrived_alone(sc, payment_ref="pay-1")
    sc.append("payment-pay-1", _consumed(sid))  # the fee first: an order intake allows
    sc.append(f"submission-{sid}", admitted_with_fee("payment", "pay-1"))
    assert sc.fold.snapshot()["owed"] == {"payments": {}, "credits": {}}
    claim = samples.claimed(sid, state.commission_digest, attempt_id="att-1")
    assert _refusal(sc, "attempt-att-1", claim) is None  # not fee_unpaid: it was paid


def test_a_credit_spent_ahead_of_its_admission_is_owed_by_nobody_after_it(sc: Scenario) -> None:
    state = sc.commission()
    sc.credit("cr-1", "5Miner")
    sc.credit("cr-2", "5Miner")
    sid = arrived_alone(sc, hotkey="5Miner")
    sc.append("credit-cr-1", CreditSpent(submission_id=sid))
    sc.append(f"submission-{sid}", admitted_with_fee("credit", "cr-1"))
    assert sc.fold.snapshot()["owed"] == {"payments": {}, "credits": {}}
    assert sc.fold.snapshot()["unspent"] == {"5Miner": {"cr-2": FEE}}
    claim = samples.claimed(sid, state.commission_digest, attempt_id="att-1")
    assert _refusal(sc, "attempt-att-1", claim) is None
    later = arrived_alone(sc, hotkey="5Miner", content="later")
    assert sc.fold.intake(later) == Admission("credit", "cr-2", FEE)


def test_a_credit_spent_ahead_of_the_intake_refuses_a_rejection(sc: Scenario) -> None:
    # The credit was taken for the submission; rejecting it would keep the credit spent
    # for a submission never evaluated. A rejected submission must have paid nothing.
    sc.commission()
    sc.credit("cr-1", "5Miner")
    sid = arrived_alone(sc, hotkey="5Miner")
    sc.append("credit-cr-1", CreditSpent(submission_id=sid))
    sc.append("arena-mlp-arena", ArenaRetired(block=500, reason="done"))
    assert sc.fold.intake(sid) == Rejection("arena_retired")
    rejected = SubmissionRejected(block=1_000, reason="arena_retired")
    refusal = _refusal(sc, f"submission-{sid}", rejected)
    assert refusal is not None
    taken = "credit 'cr-1' was taken for it first"
    assert (refusal.code, refusal.detail) == ("fee_mismatch", taken)


def test_a_rejected_submission_keeps_out_of_its_record_the_payment_another_consumed() -> None:
    # The second arrival names a payment the first consumed: it is rejected and archived at
    # once, and must not take the first one's payment with it.
    sc = Scenario(FOLDS["archived"]())
    sc.commission()
    owner = sc.arrive(payment_ref="pay-1", paid_rao=FEE, content="owner")
    reuser = sc.arrive(payment_ref="pay-1", paid_rao=FEE, content="reuser", block=1_001)
    rejected = sc.fold.finished_record("submission", reuser)
    assert rejected is not None and rejected.state.rejection == "eval_cost_payment_used"
    assert rejected.payment is None
    assert sc.fold.finished_record("payment", "pay-1") is None
    assert sc.fold.held_payment_refs() == ["pay-1"]
    sc.evaluate(owner, "att-1", samples.WORKED_EXAMPLE_COSTS, *PASSED)
    record = sc.fold.finished_record("payment", "pay-1")
    assert record is not None and record.state.submission_id == owner
    assert record.payment is not None and record.payment.submission_id == owner


def test_an_archived_fold_keeps_nothing_of_a_finished_credit_paid_submission() -> None:
    sc = Scenario(FOLDS["archived"]())
    sc.commission()
    sc.credit("cr-1", "5Miner")
    sid = sc.arrive(hotkey="5Miner")
    sc.evaluate(sid, "att-1", samples.WORKED_EXAMPLE_COSTS, *PASSED)
    fold = sc.fold
    held = (fold._subs, fold._attempts, fold._credits, fold._credit_of, fold._group,
            fold._attempts_of)
    assert held == ({}, {}, {}, {}, {}, {})
    assert fold.reward_group(sid) == samples.hex64("incumbent-0")
    credit = fold.credit("cr-1")
    assert credit is not None and (credit.status, credit.submission_id) == ("SPENT", sid)


def test_admissions_count_in_the_epoch_of_the_arrival_not_of_the_admission(
    sc: Scenario,
) -> None:
    # Arrivals in epoch 0 admitted at a block of epoch 2 (an appender behind the chain):
    # the limit is per arrival epoch, so the 17th arrival of epoch 0 is rejected.
    sc.commission(fee_rao=0)
    waived = SubmissionAdmitted.model_validate(
        {"block": 2 * epoch_blocks, "fee": {"kind": "waived", "ref": "", "amount_rao": 0}})
    for index in range(admissions_per_epoch_max):
        sid = arrived_alone(sc, hotkey="5Miner", content=f"c{index}", block=100 + index)
        sc.append(f"submission-{sid}", waived)
    assert sc.fold.snapshot()["admissions"] == {("5Miner", 0): admissions_per_epoch_max}
    last = arrived_alone(sc, hotkey="5Miner", content="last", block=200)
    assert sc.fold.intake(last) == Rejection("hotkey_epoch_admission_limit")
    refusal = _refusal(sc, f"submission-{last}", waived)
    assert refusal is not None and refusal.code == "intake_mismatch"


@pytest.mark.parametrize(("paid", "again"), [("credit", "payment"), ("payment", "credit")])
def test_a_fee_is_not_taken_again_as_the_other_kind_under_the_same_name(
    sc: Scenario, paid: str, again: str
) -> None:
    # Credit ids and payment refs are separate names: a submission that paid with credit
    # "x-1" has paid, and a PaymentConsumed "x-1" for it would take its fee a second time
    # (and a CreditSpent "x-1" for one that paid with payment "x-1" likewise).
    sc.commission()
    sc.credit("x-1", "5Miner")
    ref = {"payment_ref": "x-1", "paid_rao": FEE} if paid == "payment" else {}
    sid = sc.arrive(hotkey="5Miner", **ref)  # type: ignore[arg-type]
    sub = sc.fold.submission(sid)
    assert sub is not None and sub.fee is not None and tuple(sub.fee) == (paid, "x-1", FEE)
    event = _consumed(sid, "x-1") if again == "payment" else CreditSpent(submission_id=sid)
    refusal = _refusal(sc, f"{again}-x-1", event)
    assert refusal is not None and (refusal.code, refusal.detail) == (
        "fee_mismatch", f"the submission was admitted with fee {paid} 'x-1' of 1000000000 rao")
    unspent = {"5Miner": {"x-1": FEE}} if paid == "payment" else {}
    assert sc.fold.snapshot()["unspent"] == unspent


def test_a_spent_credit_spent_again_is_refused_as_terminal_whoever_names_it(
    sc: Scenario,
) -> None:
    sc.commission()
    sc.credit("cr-1", "5Miner")
    owner = sc.arrive(hotkey="5Miner")
    other = arrived_alone(sc, hotkey="5Other", content="other")
    for sid in (owner, other):
        refusal = _refusal(sc, "credit-cr-1", CreditSpent(submission_id=sid))
        assert refusal is not None and (refusal.state, refusal.code) == ("SPENT", "terminal_state")


def test_expirable_lists_due_submissions_in_arrival_key_order_not_recording_order(
    sc: Scenario,
) -> None:
    sc.commission(fee_rao=0)
    late = sc.arrive(block=2_000, content="late")
    early = sc.arrive(block=1_000, content="early")
    due = sc.fold.expirable(10**9)
    assert [sub.submission_id for sub in due] == [early, late]


def test_a_payment_released_after_its_submission_was_archived_lists_as_released() -> None:
    # The refund is the newer state: fees count it as released, not as consumed.
    sc = Scenario(FOLDS["archived"]())
    sc.commission()
    sid = sc.arrive(payment_ref="pay-1", paid_rao=FEE)
    sc.evaluate(sid, "att-1", SLOW)
    assert sc.fold.held_payment_refs() == []
    sc.append("payment-pay-1", PaymentReleased(submission_id=sid, reason="operator_refund"))
    released = ("pay-1", sid, "mlp-arena", FEE, "RELEASED", "operator_refund")
    assert [tuple(payment) for payment in sc.fold.payments()] == [released]
    assert sc.fold.snapshot()["payments"] == {"pay-1": released}
    kept = LedgerFold()
    kept.consume(sc.records)
    assert kept.payments() == sc.fold.payments()


def test_the_settlement_stream_is_the_one_named_exactly_settlement() -> None:
    fold = LedgerFold()
    assert fold.decide("settlement", POLICY) is None
    refusal = fold.decide("settlement-x", POLICY)
    assert refusal is not None
    assert (refusal.machine, refusal.code, refusal.detail) == (
        "settlement", "stream_id_mismatch", "x")


def test_a_payment_consumed_by_an_archived_submission_refuses_a_second_admission() -> None:
    sc = Scenario(FOLDS["archived"]())
    sc.commission()
    first = sc.arrive(payment_ref="pay-1", paid_rao=FEE)
    sc.evaluate(first, "att-1", SLOW)
    assert sc.fold.held_payment_refs() == []
    again = arrived_alone(sc, payment_ref="pay-1", content="again", block=1_001)
    assert sc.fold.intake(again, FEE) == Rejection("eval_cost_payment_used")
    refusal = _refusal(sc, f"submission-{again}", admitted_with_fee("payment", "pay-1"))
    assert refusal is not None and refusal.code == "intake_mismatch"
    used = SubmissionRejected(block=1_001, reason="eval_cost_payment_used")
    assert _refusal(sc, f"submission-{again}", used) is None


def test_a_credit_admission_of_an_arrival_that_names_a_payment_is_refused_with_intakes_answer(
    sc: Scenario,
) -> None:
    # The admission records a credit, so no chain amount is known for the named payment:
    # intake, asked without one, finds the payment invalid.
    sc.commission()
    sc.credit("cr-1", "5Miner")
    sid = arrived_alone(sc, hotkey="5Miner", payment_ref="pay-1")
    refusal = _refusal(sc, f"submission-{sid}", admitted_with_fee("credit", "cr-1"))
    assert refusal is not None and refusal.code == "intake_mismatch"
    assert refusal.detail == "intake gives Rejection(reason='eval_cost_payment_invalid')"


def test_consume_archives_what_finishes_as_apply_does() -> None:
    sc = Scenario()
    sc.commission()
    finished = sc.arrive(payment_ref="pay-1", paid_rao=FEE)
    sc.evaluate(finished, "att-1", SLOW)
    live = sc.arrive(payment_ref="pay-2", paid_rao=FEE, content="live", block=1_001)
    fold = FOLDS["archived"]()
    assert fold.consume(sc.records) == 0
    assert [sub.submission_id for sub in fold.held_submissions("mlp-arena")] == [live]
    assert fold.held_payment_refs() == ["pay-2"]
    record = fold.finished_record("payment", "pay-1")
    assert record is not None and record.state.submission_id == finished
    assert fold.snapshot() == sc.fold.snapshot()


def test_an_admission_decided_alone_leaves_its_payment_unowed_and_free(sc: Scenario) -> None:
    # decide journals the debt an admission opens and rolls it back: left behind, it would
    # refuse the payment to a submission the ledger never saw it admit.
    sc.commission()
    first = arrived_alone(sc, payment_ref="pay-1", content="first")
    assert _refusal(sc, f"submission-{first}", admitted_with_fee("payment", "pay-1")) is None
    assert sc.fold.snapshot()["owed"] == {"payments": {}, "credits": {}}
    other = arrived_alone(sc, payment_ref="pay-1", content="other")
    assert sc.fold.intake(other, FEE) == Admission("payment", "pay-1", FEE)


def test_a_submission_admitted_with_a_credit_not_yet_spent_is_not_claimed(sc: Scenario) -> None:
    state = sc.commission()
    sc.credit("cr-1", "5Miner")
    sid = admitted_alone(sc, "credit", "cr-1", hotkey="5Miner")
    claim = samples.claimed(sid, state.commission_digest, attempt_id="att-1")
    refusal = _refusal(sc, "attempt-att-1", claim)
    assert refusal is not None and (refusal.code, refusal.detail) == ("fee_unpaid", sid[:16])
    sc.append("credit-cr-1", CreditSpent(submission_id=sid))
    assert _refusal(sc, "attempt-att-1", claim) is None


def test_intake_of_a_finished_credit_paid_submission_is_the_same_archived_or_kept(
    sc: Scenario,
) -> None:
    # The archived record carries the credit it spent; intake must offer it back to that
    # submission as a fold that keeps everything does (LedgerFold.intake's promise).
    sc.commission()
    sc.credit("cr-1", "5Miner")
    sid = sc.arrive(hotkey="5Miner", content="fast")
    assert sc.evaluate(sid, "att-1", samples.WORKED_EXAMPLE_COSTS, *PASSED).status == (
        "QUALIFIED")
    assert sc.fold.intake(sid) == Admission("credit", "cr-1", FEE)

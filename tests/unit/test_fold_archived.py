"""Holds an archiving LedgerFold to one that keeps everything, where the archive is read back.

Once a submission is terminal the fold moves it out of memory with its attempts, payment,
spent credit and failed-index entry. Every rule that meets one of them again (a late event
on any of its streams, a repeated id, intake's duplicate and per-epoch checks) must read it
back and answer exactly as a fold that kept it: the same refusal, field by field.
"""

from __future__ import annotations

from typing import Any

import pytest
from archive_double import MemoryArchive  # same directory, prepend import mode

from machines import samples
from machines.arithmetic import Decision
from machines.intake import Admission, Rejection, admissions_per_epoch_max, epoch_blocks
from machines.projection import LedgerFold
from machines.scenario import Scenario
from vocabulary.events import (
    CreditGranted,
    CreditSpent,
    Event,
    HoldReleased,
    PaymentConsumed,
    PaymentReleased,
    QualificationStarted,
    SubmissionAdmitted,
    SubmissionHeld,
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

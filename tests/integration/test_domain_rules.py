"""Pins rules of ``ArenaLedger``'s write API that a mutation review of services/arena_ledger.py found
no test held, on SQLite and PostgreSQL.

Each test fails on one hand-made mutant of services/arena_ledger.py that the rest of the suite let
through: the arrival digest keeps event_index and event_subindex apart; malformed input is
the documented error class (SchemaError, InvalidInput), never a stray TypeError or
AttributeError; a view as of a position (position 0 included) writes nothing and says so,
even where a write would have found nothing to do.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from test_domain_enforcement import ARENA, FEE, Desk, open_desk, payload_of

from ledger.records import EventDraft
from machines import samples
from services.arena_ledger import ArenaLedger
from vocabulary.codec import digest
from vocabulary.errors import InvalidInput, NotFound, SchemaError


@pytest.fixture
def desk(store_url: str) -> Iterator[Desk]:
    yield from open_desk(store_url)


def _read_only(error: InvalidInput, as_of: int) -> None:
    """Asserts ``error`` is the refusal of a write through a view as of ``as_of``."""
    assert type(error) is InvalidInput
    assert error.context == {"path": "as_of"}
    assert error.message.startswith(
        f"this is the ledger as of position {as_of}, a view for reading: it appends nothing")


# --- the arrival digest ----------------------------------------------------------------------


def test_the_submission_id_digests_event_index_and_event_subindex_each_under_its_own_name(
    desk: Desk,
) -> None:
    # DOMAIN §3: submission_id = digest(arena-ledger.arrival, {arena_id, block, event_index,
    # event_subindex, miner_hotkey, content_hash}). The samples use 0 for both indices, where
    # swapping them changes nothing; two arrivals that differ only by the swap are two
    # submissions with two ids.
    desk.commission()
    outcomes = []
    for index, subindex in ((3, 1), (1, 3)):
        arrival = desk.arrival(content="swap", index=index, subindex=subindex,
                               payment_ref=f"pay-{index}-{subindex}")
        expected = digest("arena-ledger.arrival", {
            "arena_id": ARENA, "block": 1_000, "event_index": index, "event_subindex": subindex,
            "miner_hotkey": "5Miner", "content_hash": samples.hex64("swap"),
        })
        outcome = desk.ledger.intake(arrival, payment_amount_rao=FEE)
        assert (outcome.submission_id, outcome.admitted) == (expected, True)
        recorded = desk.ledger.read_stream(f"submission-{expected}")[0]
        assert recorded.payload["submission_id"] == expected
        assert recorded.payload["arrival"] == {
            "block": 1_000, "event_index": index, "event_subindex": subindex}
        outcomes.append(outcome)
    assert outcomes[0].submission_id != outcomes[1].submission_id
    assert outcomes[1].positions[0] == outcomes[0].positions[-1] + 1


# --- malformed input is the documented error class -------------------------------------------


@pytest.mark.parametrize("arena_id", [5, ["mlp-arena"], None])
def test_a_commission_whose_arena_id_is_not_a_string_is_invalid_input_naming_it(
    desk: Desk, arena_id: Any
) -> None:
    # Checked before anything is read: a number would otherwise name the stream "arena-5"
    # and surface as another class (a SchemaError about the payload, or a TypeError).
    document = {**samples.commission_document(), "arena_id": arena_id}
    with pytest.raises(InvalidInput) as caught:
        desk.ledger.commission(document)
    assert type(caught.value) is InvalidInput
    assert caught.value.message == "the commission needs an arena_id"
    assert caught.value.context == {"path": "$.arena_id"}
    assert desk.head == 0


@pytest.mark.parametrize("arrival", [[("arena_id", ARENA)], "mlp-arena", None, 7])
def test_intake_of_an_arrival_that_is_not_an_object_is_a_schema_error_at_the_root(
    desk: Desk, arrival: Any
) -> None:
    desk.commission()
    head = desk.head
    with pytest.raises(SchemaError) as caught:
        desk.ledger.intake(arrival, payment_amount_rao=FEE)
    assert caught.value.message == "the arrival must be a JSON object"
    assert caught.value.context == {"path": "$"}
    assert desk.head == head


@pytest.mark.parametrize("key", [[1_000, 0, 0], "1000:0:0", 1_000])
def test_intake_of_an_arrival_key_that_is_not_an_object_is_a_schema_error_naming_it(
    desk: Desk, key: Any
) -> None:
    # The id cannot be derived from such an arrival (indexing it raises TypeError); the
    # schema must name the field, as for any other malformed arrival.
    desk.commission()
    head = desk.head
    arrival = {**desk.arrival(content="bad-key", payment_ref="pay-bad-key"), "arrival": key}
    with pytest.raises(SchemaError) as caught:
        desk.ledger.intake(arrival, payment_amount_rao=FEE)
    assert caught.value.context["path"] == "$.payload.arrival"
    assert caught.value.context["type"] == "SubmissionArrived"
    assert desk.head == head


# --- a view writes nothing -------------------------------------------------------------------


def test_a_view_refuses_the_current_commission_sent_again_rather_than_answer_it_recorded(
    desk: Desk, store_url: str,
) -> None:
    # The current commission sent again is answered with the recorded one (nothing
    # appended); through a view it must still be the view's refusal, like every write.
    desk.commission()
    head = desk.head
    with ArenaLedger(store_url, as_of=head) as view, pytest.raises(InvalidInput) as caught:
        view.commission(samples.commission_document())
    _read_only(caught.value, head)
    assert desk.head == head


def test_a_view_as_of_position_zero_writes_nothing_and_says_it_is_a_view(
    desk: Desk, store_url: str,
) -> None:
    # 0 is a position (the empty ledger), not "no as_of": every write through it is the
    # view's InvalidInput, never the NotFound or the empty answer of an empty ledger.
    desk.commission()
    sid = desk.admitted("d1", block=500)  # due for expiry at 500 + 500,000
    head = desk.head
    with ArenaLedger(store_url, as_of=0) as view:
        arrival = desk.arrival(content="late", payment_ref="pay-late")
        writes = [
            lambda: view.intake(arrival, payment_amount_rao=FEE),
            lambda: view.expire(10**7),
            lambda: view.expire(10**7, sid),
            lambda: view.conclude("att-1", 1_020),
            lambda: view.claim(attempt_id="att-1", pair_id="pair-1", validator_hotkey="5V",
                               block=1_010, arena_id=ARENA),
            lambda: view.grant_credit("cr-0", "5Dan", 1, "note"),
            lambda: view.commission(samples.commission_document("other-arena")),
        ]
        for write in writes:
            with pytest.raises(InvalidInput) as caught:
                write()
            _read_only(caught.value, 0)
    assert desk.head == head


def test_the_guard_of_a_view_as_of_position_zero_decides_no_batch(
    desk: Desk, store_url: str,
) -> None:
    # Raw drafts on the view's store (what `arena-ledger append` does) meet the view's
    # guard: at position 0 it would otherwise fold nothing and accept a new arena.
    desk.commission()
    head = desk.head
    drafts = [
        EventDraft("arena-other-arena", "ArenaCommissioned",
                   samples.commission_document("other-arena")),
        EventDraft("credit-cr-0", "CreditGranted", {
            "credit_id": "cr-0", "hotkey": "5Dan", "amount_rao": 1, "note": ""}),
    ]
    with ArenaLedger(store_url, as_of=0) as view:
        for draft in drafts:
            with pytest.raises(InvalidInput) as caught:
                view.store.append([draft], actor="test")
            _read_only(caught.value, 0)
    assert desk.head == head
    with ArenaLedger(store_url) as ledger:
        assert ledger.fold.arena("other-arena") is None


def test_intake_for_an_unknown_arena_is_not_found_only_on_a_writable_ledger(
    desk: Desk, store_url: str,
) -> None:
    # The NotFound of an uncommissioned arena is for a ledger that could write the intake.
    arrival = desk.arrival("nowhere", content="d1", payment_ref="pay-d1")
    with pytest.raises(NotFound) as missing:
        desk.ledger.intake(arrival, payment_amount_rao=FEE)
    assert missing.value.context == {"arena_id": "nowhere"}
    with ArenaLedger(store_url, as_of=0) as view, pytest.raises(InvalidInput) as caught:
        view.intake(arrival, payment_amount_rao=FEE)
    _read_only(caught.value, 0)
    assert desk.head == 0


# --- intake of an arrival recorded on its own ------------------------------------------------


def _arrival_alone(desk: Desk, content: str) -> tuple[str, dict[str, Any]]:
    """Appends a SubmissionArrived raw (no intake outcome); returns its id and intake's input."""
    event = samples.arrived(content=content, payment_ref=f"pay-{content}")
    sid = event.submission_id
    desk.raw(EventDraft(f"submission-{sid}", "SubmissionArrived", payload_of(event)))()
    return sid, desk.arrival(content=content, payment_ref=f"pay-{content}")


def test_intake_decides_an_arrival_recorded_on_its_own_and_its_retry_answers_it(
    desk: Desk,
) -> None:
    # It re-appended the arrival (no stream expected) and answered ConcurrencyConflict,
    # "re-read and retry", on every retry: such a submission could never be admitted.
    desk.commission()
    sid, arrival = _arrival_alone(desk, "alone")
    assert desk.head == 2
    first = desk.ledger.intake(arrival, payment_amount_rao=FEE)
    assert (first.submission_id, first.admitted, first.positions, first.already_recorded) == (
        sid, True, (3, 4), False)
    assert desk.types(f"submission-{sid}") == ["SubmissionArrived", "SubmissionAdmitted"]
    assert desk.types("payment-pay-alone") == ["PaymentConsumed"]
    again = desk.ledger.intake(arrival, payment_amount_rao=FEE)
    assert (again.admitted, again.positions, again.already_recorded) == (True, (3, 4), True)
    assert desk.head == 4
    sub = desk.ledger.fold.submission(sid)
    assert sub is not None and sub.status == "QUEUED"


def test_an_arrival_held_before_intake_is_refused_intake_until_released(desk: Desk) -> None:
    desk.commission()
    sid, arrival = _arrival_alone(desk, "held")
    desk.ledger.hold(sid, "check the payment first", 1_000)
    desk.refused(lambda: desk.ledger.intake(arrival, payment_amount_rao=FEE),
                 machine="submission", state="HELD", event_type="SubmissionAdmitted",
                 reason="transition_not_allowed")
    desk.ledger.release(sid, "payment checked", 1_001, "5Operator")
    outcome = desk.ledger.intake(arrival, payment_amount_rao=FEE)
    assert (outcome.admitted, outcome.positions) == (True, (5, 6))


def _decided_raw(desk: Desk, content: str, *, fee_event: bool = True) -> tuple[str, dict[str, Any]]:
    """Records an arrival, its admission and (unless not ``fee_event``) its PaymentConsumed by
    raw appends, without intake's keys; returns the id and intake's input for that arrival."""
    sid, arrival = _arrival_alone(desk, content)
    fee = {"kind": "payment", "ref": f"pay-{content}", "amount_rao": FEE}
    drafts = [EventDraft(f"submission-{sid}", "SubmissionAdmitted", {"block": 1_000, "fee": fee})]
    if fee_event:
        drafts.append(EventDraft(f"payment-pay-{content}", "PaymentConsumed", {
            "payment_ref": f"pay-{content}", "submission_id": sid, "arena_id": ARENA,
            "amount_rao": FEE}))
    desk.raw(*drafts)()
    return sid, arrival


def test_an_intake_of_a_submission_decided_by_raw_appends_answers_what_is_recorded(
    desk: Desk,
) -> None:
    # No intake key exists for it. It answered ConcurrencyConflict ("re-read and retry")
    # on the arrival's stream, and the same on every retry: a runner that retries on a
    # conflict looped. The recorded events are what this intake records: they answer it.
    desk.commission()
    sid, arrival = _decided_raw(desk, "raw")
    head = desk.head
    for _ in range(2):
        outcome = desk.ledger.intake(arrival, payment_amount_rao=FEE)
        assert (outcome.submission_id, outcome.admitted, outcome.reason) == (sid, True, "")
        assert outcome.fee == {"kind": "payment", "ref": "pay-raw", "amount_rao": FEE}
        assert (outcome.positions, outcome.already_recorded) == ((2, 3, 4), True)
    assert desk.head == head
    # A rejection recorded raw answers likewise (nothing else to write for it).
    rejected = samples.arrived(content="rejected", block=1_001)  # no payment named
    rid = rejected.submission_id
    desk.raw(
        EventDraft(f"submission-{rid}", "SubmissionArrived", payload_of(rejected)),
        EventDraft(f"submission-{rid}", "SubmissionRejected",
                   {"block": 1_001, "reason": "missing_eval_cost_payment"}),
    )()
    again = desk.ledger.intake(desk.arrival(content="rejected", block=1_001))
    assert (again.submission_id, again.admitted, again.reason) == (
        rid, False, "missing_eval_cost_payment")
    assert (again.positions, again.already_recorded) == ((head + 1, head + 2), True)
    assert desk.head == head + 2


def test_an_intake_that_differs_from_the_raw_recorded_one_names_the_event_and_writes_nothing(
    desk: Desk,
) -> None:
    desk.commission()
    sid, arrival = _decided_raw(desk, "raw")
    _, dangling = _decided_raw(desk, "dangling", fee_event=False)
    head = desk.head
    cases = [  # (call, the event named, how)
        (lambda: desk.ledger.intake(arrival, payment_amount_rao=FEE, block=1_005),
         f"SubmissionAdmitted in stream 'submission-{sid}' is recorded with other fields"),
        (lambda: desk.ledger.intake(dangling, payment_amount_rao=FEE),
         "PaymentConsumed in stream 'payment-pay-dangling' is recorded nowhere"),
    ]
    for call, named in cases:
        with pytest.raises(InvalidInput) as caught:
            call()
        assert "recorded by appends without intake's key" in caught.value.message
        assert named in caught.value.message and "nothing was written" in caught.value.message
    assert desk.head == head

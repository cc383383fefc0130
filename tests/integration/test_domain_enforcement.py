"""Checks that ArenaLedger enforces the machines inside the append, on SQLite and PostgreSQL.

Every refusal is checked three ways: ``Refused`` carries the machine, state, event type and
stable reason code; nothing was written (the head and the stream did not move); and the
same event is refused whether it comes through ``ArenaLedger.append`` (event models) or as a
raw ``EventDraft`` on ``ArenaLedger.store`` (what ``arena-ledger append`` does).

``Desk`` below is the shared helper of the ``test_domain_*`` modules: a migrated ledger plus
short-hands for the writes a validator makes (commission, intake, claim, windows).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from desk import (
    ARENA,
    FEE,
    SLOWER,
    WORKED,
    Desk,
    open_desk,
    payload_of,
)

from ledger.records import NO_STREAM, EventDraft
from machines import samples
from services.arena_ledger import ArenaLedger
from vocabulary.codec import digest
from vocabulary.errors import ConcurrencyConflict, InvalidInput, NotFound, Refused, SchemaError
from vocabulary.events import (
    ArenaRetired,
    AttemptDecided,
    QualificationStarted,
    SubmissionAdmitted,
)


@pytest.fixture
def desk(store_url: str) -> Iterator[Desk]:
    """Yields a Desk on a migrated ledger (SQLite and PostgreSQL)."""
    yield from open_desk(store_url)


def window_draft(attempt_id: str, index: int, orientation: int, *, tokens: int = 512,
                 candidate_tokens: int = 512) -> EventDraft:
    return EventDraft(f"attempt-{attempt_id}", "WindowMeasured", {
        "window": index, "orientation": orientation, "stock_cost_ns": 1_000_000_000,
        "candidate_cost_ns": 990_000_000, "stock_output_tokens": tokens,
        "candidate_output_tokens": candidate_tokens,
    })


# --- windows ---------------------------------------------------------------------------------


@pytest.mark.parametrize("path", ["model", "raw"])
def test_windows_out_of_order_repeated_or_past_w_are_refused_and_not_recorded(
    desk: Desk, path: str
) -> None:
    desk.commission()
    sid = desk.admitted("d1")
    desk.claim(sid, "att-1")

    def attempt(index: int, orientation: int) -> Callable[[], object]:
        if path == "raw":
            return desk.raw(window_draft("att-1", index, orientation))
        return desk.model("attempt-att-1", samples.window(index, orientation, 10**9, 99 * 10**7))

    common = {"machine": "attempt", "event_type": "WindowMeasured"}
    desk.refused(attempt(2, 1), state="CLAIMED", reason="window_gap", **common)
    desk.refused(attempt(5, 2), state="CLAIMED", reason="window_past_limit", **common)
    attempt(1, 1)()
    assert desk.version("attempt-att-1") == 2
    desk.refused(attempt(1, 1), state="SPEED", reason="window_repeated", **common)
    desk.refused(attempt(3, 2), state="SPEED", reason="window_gap", **common)
    desk.refused(attempt(2, 2), state="SPEED", reason="window_orientation_wrong", **common)
    attempt(2, 1)()
    assert desk.types("attempt-att-1") == ["AttemptClaimed", "WindowMeasured", "WindowMeasured"]


def test_a_window_after_speed_passed_is_refused(desk: Desk) -> None:
    desk.commission()
    desk.passed_speed("d1", "att-1")
    state = desk.ledger.fold.attempt("att-1")
    assert state is not None and state.status == "AUDIT"
    desk.refused(desk.model("attempt-att-1", samples.window(4, 2, 10**9, 98 * 10**7)),
                 machine="attempt", state="AUDIT", event_type="WindowMeasured",
                 reason="window_after_speed_decided")
    desk.refused(desk.raw(window_draft("att-1", 4, 2)), machine="attempt", state="AUDIT",
                 event_type="WindowMeasured", reason="window_after_speed_decided")


def test_differing_token_counts_become_work_mismatch_and_decide_no_decision(desk: Desk) -> None:
    desk.commission()
    sid = desk.admitted("d1")
    desk.claim(sid, "att-1")
    desk.windows("att-1", WORKED[:1])
    # Raw, the window is refused: a token mismatch is never a speed signal.
    desk.refused(desk.raw(window_draft("att-1", 2, 1, tokens=512, candidate_tokens=511)),
                 machine="attempt", state="SPEED", event_type="WindowMeasured",
                 reason="output_tokens_differ")
    recorded = desk.ledger.record("att-1", samples.window(2, 1, 10**9, 985 * 10**6,
                                                          tokens=512, candidate_tokens=511))
    assert recorded.event_type == "InfrastructureFault"
    assert payload_of(recorded) == {
        "code": "work_mismatch", "stage": "speed",
        "detail": "window 2: stock produced 512 output tokens, candidate 511",
    }
    assert desk.types("attempt-att-1")[-1] == "InfrastructureFault"
    decided = desk.ledger.conclude("att-1", 1_020)
    assert (decided.verdict, decided.reason, decided.disposition) == (
        "NO_DECISION", "work_mismatch", "COMPLETE")
    assert (decided.speedup, decided.pass_line, decided.look_window) == (None, None, None)
    sub = desk.ledger.fold.submission(sid)
    assert sub is not None and (sub.status, sub.reason) == ("NO_DECISION", "work_mismatch")


# --- claims ----------------------------------------------------------------------------------


def test_claiming_a_submission_that_is_not_queued_is_refused(desk: Desk) -> None:
    desk.commission()
    rejected = desk.intake(None, content="nopay")  # no payment, no credit
    assert (rejected.admitted, rejected.reason) == (False, "missing_eval_cost_payment")
    desk.refused(lambda: desk.claim(rejected.submission_id, "att-0"), machine="attempt",
                 state="NONE", event_type="AttemptClaimed", reason="submission_not_queued")
    sid = desk.admitted("d1")
    claimed = desk.claim(sid, "att-1")
    second = claimed.model_copy(update={"attempt_id": "att-2"})
    error = desk.refused(
        desk.raw(EventDraft("attempt-att-2", "AttemptClaimed", payload_of(second))),
        machine="attempt", state="NONE", event_type="AttemptClaimed",
        reason="submission_not_queued")
    assert error.context["detail"] == "submission is QUALIFYING"
    assert desk.version("attempt-att-2") == 0


def test_a_claim_under_another_commission_digest_is_refused(desk: Desk) -> None:
    old = desk.commission()
    sid = desk.admitted("d1")
    new = desk.commission(block=200, fee_rao=2 * FEE)
    assert new != old
    stale = samples.claimed(sid, old, attempt_id="att-1", arena_id=ARENA)
    started = QualificationStarted(attempt_id="att-1")
    error = desk.refused(
        lambda: desk.ledger.append([("attempt-att-1", stale, NO_STREAM),
                                    (f"submission-{sid}", started)]),
        machine="attempt", state="NONE", event_type="AttemptClaimed",
        reason="commission_not_current")
    assert error.context["detail"] == f"current is {new}"
    assert error.context["index"] == 0
    forged = samples.claimed(sid, samples.hex64("no such commission"), attempt_id="att-1")
    desk.refused(desk.raw(EventDraft("attempt-att-1", "AttemptClaimed", payload_of(forged))),
                 machine="attempt", state="NONE", event_type="AttemptClaimed",
                 reason="commission_not_current")
    # The claim the ledger builds carries the current digest and is accepted.
    assert desk.claim(sid, "att-1").commission_digest == new


def test_calibration_observation_needs_a_listed_delta(desk: Desk) -> None:
    listed = samples.hex64("delta:control")
    desk.commission(sealed=samples.policy(audit_control_delta_digests=[listed]))
    plain = desk.admitted("d1")
    error = desk.refused(lambda: desk.claim(plain, "att-1", plan="calibration_observation"),
                         machine="attempt", state="NONE", event_type="AttemptClaimed",
                         reason="calibration_observation_not_listed")
    assert error.context["detail"] == f"delta_digest {samples.hex64('delta:d1')}"
    control = desk.admitted("control", delta_digest=listed)
    desk.claim(control, "att-2", plan="calibration_observation")
    # A speed FAIL under calibration_observation still runs the audit, and stays FAIL.
    desk.windows("att-2", SLOWER)
    state = desk.ledger.fold.attempt("att-2")
    assert state is not None and state.status == "AUDIT"
    desk.ledger.record("att-2", samples.audit())
    decided = desk.ledger.conclude("att-2", 1_020)
    assert (decided.verdict, decided.reason, decided.disposition, decided.look_window) == (
        "FAIL", "candidate_slower", "COMPLETE", 4)


# --- decisions -------------------------------------------------------------------------------


def test_an_attempt_decided_that_differs_from_the_derivation_is_refused(desk: Desk) -> None:
    desk.commission()
    desk.passed_speed("d1", "att-1")
    desk.ledger.record("att-1", samples.audit())
    desk.ledger.record("att-1", samples.quality())
    derived = desk.ledger.fold.derive_decision("att-1")
    assert derived is not None
    forged = samples.decided(derived._replace(speedup="1.019130"))
    error = desk.refused(desk.model("attempt-att-1", forged), machine="attempt",
                         state="QUALITY", event_type="AttemptDecided", reason="decision_mismatch")
    assert error.context["detail"] == "speedup: derived '1.019129', event has '1.019130'"
    wrong_verdict = payload_of(samples.decided(derived._replace(verdict="FAIL",
                                                                reason="quality_regression")))
    desk.refused(desk.raw(EventDraft("attempt-att-1", "AttemptDecided", wrong_verdict)),
                 machine="attempt", state="QUALITY", event_type="AttemptDecided",
                 reason="decision_mismatch")
    desk.model("attempt-att-1", samples.decided(derived))()
    assert desk.types("attempt-att-1")[-1] == "AttemptDecided"


def test_an_attempt_decided_before_the_evidence_decides_is_refused(desk: Desk) -> None:
    desk.commission()
    sid = desk.admitted("d1")
    desk.claim(sid, "att-1")
    desk.windows("att-1", WORKED[:2])
    early = AttemptDecided(verdict="FAIL", reason="candidate_slower", disposition="COMPLETE",
                           speedup=None, pass_line=None, look_window=2, decided_block=1_020,
                           rules_version="paired-windows.v1")
    desk.refused(desk.model("attempt-att-1", early), machine="attempt", state="SPEED",
                 event_type="AttemptDecided", reason="decision_not_derived")
    with pytest.raises(Refused) as caught:
        desk.ledger.conclude("att-1", 1_020)
    assert caught.value.context["reason"] == "attempt_not_decidable"


# --- intake ----------------------------------------------------------------------------------


def test_a_submission_admitted_against_the_intake_rules_is_refused_atomically(desk: Desk) -> None:
    desk.commission()
    arrived = samples.arrived(ARENA, content="d1", payment_ref="pay-1")
    stream = f"submission-{arrived.submission_id}"
    waived = SubmissionAdmitted.model_validate(
        {"block": 1_000, "fee": {"kind": "waived", "ref": "", "amount_rao": 0}})
    error = desk.refused(lambda: desk.ledger.append([(stream, arrived), (stream, waived)]),
                         machine="submission", state="ARRIVED",
                         event_type="SubmissionAdmitted", reason="intake_mismatch")
    assert error.context["index"] == 1
    assert desk.version(stream) == 0  # the arrival of the same batch was not written either
    desk.ledger.append([(stream, arrived)])
    short = {"block": 1_000, "fee": {"kind": "payment", "ref": "pay-1", "amount_rao": FEE - 1}}
    desk.refused(desk.raw(EventDraft(stream, "SubmissionAdmitted", short)),
                 machine="submission", state="ARRIVED", event_type="SubmissionAdmitted",
                 reason="intake_mismatch")
    assert desk.types(stream) == ["SubmissionArrived"]


def test_a_payment_is_consumed_once_and_reuse_is_rejected_through_intake(desk: Desk) -> None:
    desk.commission()
    first = desk.intake(FEE, content="d1", payment_ref="pay-1")
    assert first.admitted and first.fee == {"kind": "payment", "ref": "pay-1", "amount_rao": FEE}
    assert first.positions == (2, 3, 4)
    payment = list(desk.ledger.store.read_stream("payment-pay-1"))
    head = desk.head
    again = desk.intake(FEE, content="d2", payment_ref="pay-1")
    assert (again.admitted, again.reason, again.fee) == (False, "eval_cost_payment_used", None)
    assert again.positions == (head + 1, head + 2)
    assert list(desk.ledger.store.read_stream("payment-pay-1")) == payment
    assert payment[0].payload["submission_id"] == first.submission_id
    assert desk.types(f"submission-{again.submission_id}") == [
        "SubmissionArrived", "SubmissionRejected"]
    # Consuming it again by hand is refused too, whatever the expectation.
    consumed = {"payment_ref": "pay-1", "submission_id": again.submission_id,
                "arena_id": ARENA, "amount_rao": FEE}
    desk.refused(desk.raw(EventDraft("payment-pay-1", "PaymentConsumed", consumed)),
                 machine="payment", state="CONSUMED", event_type="PaymentConsumed",
                 reason="stream_already_started")
    with pytest.raises(ConcurrencyConflict):
        desk.ledger.store.append([EventDraft("payment-pay-1", "PaymentConsumed", consumed,
                                             expected_version=NO_STREAM)])
    assert desk.head == head + 2


def test_a_short_or_missing_payment_is_rejected(desk: Desk) -> None:
    desk.commission()
    short = desk.intake(FEE - 1, content="d1", payment_ref="pay-1")
    assert (short.admitted, short.reason) == (False, "eval_cost_payment_invalid")
    unseen = desk.intake(None, content="d2", payment_ref="pay-2")
    assert (unseen.admitted, unseen.reason) == (False, "eval_cost_payment_invalid")
    assert desk.version("payment-pay-1") == 0 and desk.version("payment-pay-2") == 0


def test_the_seventeenth_admission_of_a_hotkey_in_an_epoch_is_rejected(desk: Desk) -> None:
    desk.commission(fee_rao=0)
    epoch2 = range(720, 1_080)  # block // 360 == 2
    for i in range(16):
        assert desk.intake(None, content=f"c{i}", block=epoch2[i]).admitted
    seventeenth = desk.intake(None, content="c16", block=epoch2[-1])
    assert (seventeenth.admitted, seventeenth.reason) == (False, "hotkey_epoch_admission_limit")
    other = desk.intake(None, content="c17", block=epoch2[-1], hotkey="5Other")
    assert other.admitted
    next_epoch = desk.intake(None, content="c18", block=1_080)
    assert next_epoch.admitted
    rows = desk.ledger.submissions(hotkey="5Miner", status="REJECTED")
    assert [r["reason"] for r in rows] == ["hotkey_epoch_admission_limit"]


def test_a_failed_content_is_rejected_as_duplicate_until_the_arena_is_recommissioned(
    desk: Desk,
) -> None:
    desk.commission()
    failed = desk.admitted("same", block=1_000)
    desk.claim(failed, "att-1")
    desk.windows("att-1", SLOWER)
    assert desk.ledger.conclude("att-1", 1_020).reason == "candidate_slower"
    again = desk.intake(FEE, content="same", block=1_100, payment_ref="pay-2")
    assert (again.admitted, again.reason) == (
        False, f"duplicate_of:{failed[:16]}:candidate_slower")
    assert desk.version("payment-pay-2") == 0
    row = desk.ledger.explain_submission(again.submission_id)
    assert row["status"] == "REJECTED" and row["reason"] == again.reason
    assert row["cause"] == (
        "This exact delta already failed on this commission; it would fail again.")
    desk.commission(block=1_200, incumbent="incumbent-1")
    fresh = desk.intake(FEE, content="same", block=1_300, payment_ref="pay-3")
    assert fresh.admitted and fresh.reason == ""


def test_a_passed_content_is_never_rejected_as_duplicate(desk: Desk) -> None:
    desk.commission()
    sid = desk.passed_speed("same", "att-1")
    desk.ledger.record("att-1", samples.audit())
    desk.ledger.record("att-1", samples.quality())
    assert desk.ledger.conclude("att-1", 1_020).verdict == "PASS"
    again = desk.intake(FEE, content="same", block=1_100, payment_ref="pay-2")
    assert again.admitted and again.submission_id != sid


def test_intake_into_a_retired_arena_is_rejected(desk: Desk) -> None:
    desk.commission()
    desk.ledger.append([(f"arena-{ARENA}", ArenaRetired(block=900, reason="superseded"))])
    outcome = desk.intake(FEE, content="d1", payment_ref="pay-1")
    assert (outcome.admitted, outcome.reason) == (False, "arena_retired")
    assert desk.version("payment-pay-1") == 0
    desk.refused(desk.raw(EventDraft(f"arena-{ARENA}", "ArenaRetired",
                                     {"block": 901, "reason": "again"})),
                 machine="arena", state="RETIRED", event_type="ArenaRetired",
                 reason="terminal_state")


def test_intake_spends_a_credit_when_no_payment_is_named(desk: Desk) -> None:
    desk.commission()
    desk.ledger.grant_credit("cr-1", "5Miner", FEE, "welcome")
    outcome = desk.intake(None, content="d1")
    assert outcome.admitted
    assert outcome.fee == {"kind": "credit", "ref": "cr-1", "amount_rao": FEE}
    assert desk.types("credit-cr-1") == ["CreditGranted", "CreditSpent"]
    spent = list(desk.ledger.store.read_stream("credit-cr-1"))[-1]
    assert spent.payload == {"submission_id": outcome.submission_id}
    assert spent.position == outcome.positions[-1]
    credit = desk.ledger.fold.credit("cr-1")
    assert credit is not None and (credit.status, credit.submission_id) == (
        "SPENT", outcome.submission_id)
    second = desk.intake(None, content="d2")
    assert (second.admitted, second.reason) == (False, "missing_eval_cost_payment")
    other = desk.intake(None, content="d3", hotkey="5Other")
    assert (other.admitted, other.reason) == (False, "missing_eval_cost_payment")


def test_a_zero_fee_arena_waives_the_fee(desk: Desk) -> None:
    desk.commission(fee_rao=0)
    outcome = desk.intake(None, content="d1", payment_ref="pay-1")
    assert outcome.admitted
    assert outcome.fee == {"kind": "waived", "ref": "", "amount_rao": 0}
    assert len(outcome.positions) == 2
    assert desk.version("payment-pay-1") == 0  # a named payment is not consumed
    sub = desk.ledger.fold.submission(outcome.submission_id)
    assert sub is not None and sub.status == "QUEUED"
    assert sub.fee is not None and tuple(sub.fee) == ("waived", "", 0)


def test_an_arrival_for_an_unknown_arena_or_with_a_forged_id_is_refused(desk: Desk) -> None:
    desk.commission()
    stranger = samples.arrived("other-arena", content="d1")
    desk.refused(desk.model(f"submission-{stranger.submission_id}", stranger),
                 machine="submission", state="NONE", event_type="SubmissionArrived",
                 reason="arena_unknown")
    real = samples.arrived(ARENA, content="d1")
    forged = payload_of(real) | {"miner_hotkey": "5Thief"}
    desk.refused(desk.raw(EventDraft(f"submission-{real.submission_id}", "SubmissionArrived",
                                     forged)),
                 machine="submission", state="NONE", event_type="SubmissionArrived",
                 reason="submission_id_mismatch")
    # WindowMeasured on a stream nobody claimed.
    desk.refused(desk.model("attempt-ghost", samples.window(1, 1, 10**9, 10**9)),
                 machine="attempt", state="NONE", event_type="WindowMeasured",
                 reason="stream_not_started")


# The write API's edges: the arrival digest keeps event_index and event_subindex apart, malformed
# input is the documented error class (never a stray TypeError), and a view as of a position
# (position 0 included) writes nothing and says so.


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
    # docs/concepts.md: submission_id = digest(arena-ledger.arrival, {arena_id, block, event_index,
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

"""Checks LedgerFold: cross-stream rules, projections, decide without side effects."""

from __future__ import annotations

import pytest
from archive_double import MemoryArchive  # same directory, prepend import mode
from fold_scenarios import (
    BILLION,
    FEE,
    admitted_alone,
)

from machines import samples
from machines import scenario as scenario_module
from machines.arithmetic import Decision
from machines.attempt import AttemptState, AttemptSummary
from machines.intake import Admission, Rejection
from machines.projection import LedgerFold
from machines.scenario import Scenario, ScenarioRefused
from vocabulary.events import (
    ControlRegistered,
    CreditGranted,
    CreditSpent,
    Event,
    HoldReleased,
    InfrastructureFault,
    PaymentConsumed,
    PaymentReleased,
    QualificationStarted,
    SubmissionAdmitted,
    SubmissionExpired,
    SubmissionHeld,
    SubmissionRejected,
    SubmissionResolved,
)

WORKED = samples.WORKED_EXAMPLE_COSTS
SLOW = ((BILLION, 1_040_000_000),) * 4
FLAT = ((BILLION, 998_000_000),) * 4  # 0.2 % faster: not enough


def _archived_fold(*, detail: bool = False) -> LedgerFold:
    return LedgerFold(detail=detail, archive=MemoryArchive())


@pytest.fixture(autouse=True, params=["in_memory", "archived"])
def fold_kind(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Runs every test twice: a Scenario's fold keeps finished submissions, or archives them.

    The archived fold must answer every rule and query alike (duplicates, payment reuse,
    a repeated attempt, settlement's reads), with finished submissions out of memory.
    """
    if request.param == "archived":
        monkeypatch.setattr(scenario_module, "LedgerFold", _archived_fold)
    return str(request.param)


def _paid(sc: Scenario, ref: str, **fields: object) -> str:
    return sc.arrive(payment_ref=ref, paid_rao=FEE, **fields)  # type: ignore[arg-type]


def _ordered(value: object) -> object:
    """Returns ``value`` with every dict as the list of its items: a dict's order is state
    too (a hotkey's unspent credits are offered in grant order)."""
    if isinstance(value, dict):
        return [(key, _ordered(inner)) for key, inner in value.items()]
    return value


def _code(sc: Scenario, stream: str, event: Event) -> str | None:
    before = _ordered(sc.fold.snapshot())
    refusal = sc.fold.decide(stream, event)
    assert _ordered(sc.fold.snapshot()) == before
    return None if refusal is None else refusal.code


def test_full_pass_flow_and_replay() -> None:
    sc = Scenario()
    sc.commission()
    sid = _paid(sc, "pay-1")
    sub = sc.evaluate(sid, "att-1", WORKED, samples.audit(), samples.quality())
    assert (sub.status, sub.verdict, sub.fee and sub.fee.kind) == ("QUALIFIED", "PASS", "payment")
    attempt = sc.fold.attempt("att-1")
    assert isinstance(attempt, AttemptSummary) and attempt.decision is not None
    assert attempt.decision.speedup == "1.019129"
    replay = LedgerFold()
    assert replay.consume(sc.records) == 0
    assert replay.snapshot() == sc.fold.snapshot()
    assert sc.fold.payment("pay-1") is not None


def test_an_archived_fold_holds_only_live_submissions(fold_kind: str) -> None:
    sc = Scenario()
    sc.commission()
    passed = _paid(sc, "pay-1")
    sc.evaluate(passed, "att-1", WORKED, samples.audit(), samples.quality())
    failed = _paid(sc, "pay-2", content="slow", block=1_001)
    sc.evaluate(failed, "att-2", SLOW)
    live = _paid(sc, "pay-3", content="live", block=1_002)
    in_memory = set(sc.fold._subs)
    if fold_kind == "archived":
        assert in_memory == {live}
        assert set(sc.fold._attempts) == set() and set(sc.fold._payments) == {"pay-3"}
    else:
        assert in_memory == {passed, failed, live}
    every = LedgerFold()
    every.consume(sc.records)
    assert sc.fold.snapshot() == every.snapshot()
    assert sc.fold.submissions("mlp-arena") == every.submissions("mlp-arena")
    assert sorted(sc.fold.payments()) == sorted(every.payments())
    for sid in (passed, failed, live):
        assert sc.fold.submission(sid) == every.submission(sid)
        assert sc.fold.resolution(sid) == every.resolution(sid)
        assert sc.fold.reward_group(sid) == every.reward_group(sid)
    assert sc.fold.attempt("att-2") == every.attempt("att-2")
    # history still refuses: a second arrival, a reused attempt id, a consumed payment
    again = samples.arrived(content="slow", block=1_001, payment_ref="pay-2")
    assert _code(sc, f"submission-{failed}", again) == "stream_already_started"
    arena = sc.fold.arena("mlp-arena")
    assert arena is not None
    reclaimed = samples.claimed(live, arena.commission_digest, attempt_id="att-1")
    assert _code(sc, "attempt-att-1", reclaimed) == "stream_already_started"
    payment = PaymentConsumed(
        payment_ref="pay-1", submission_id=live, arena_id="mlp-arena", amount_rao=FEE
    )
    assert _code(sc, "payment-pay-1", payment) == "stream_already_started"


def test_queue_is_in_arrival_key_order() -> None:
    sc = Scenario()
    sc.commission(fee_rao=0)
    late = sc.arrive(block=2_000, content="late")
    tie_b = sc.arrive(block=1_000, index=3, hotkey="5B", content="b")
    tie_a = sc.arrive(block=1_000, index=3, hotkey="5A", content="a")
    early = sc.arrive(block=1_000, index=1, content="early")
    expected = [early, tie_a, tie_b, late]
    assert [s.submission_id for s in sc.fold.queue("mlp-arena")] == expected
    assert [s.submission_id for s in sc.fold.submissions("mlp-arena")] == expected
    next_up = sc.fold.next_claimable("mlp-arena")
    assert next_up is not None and next_up.submission_id == early
    sc.claim(early, "att-1")
    assert [s.submission_id for s in sc.fold.queue("mlp-arena")] == expected[1:]
    assert sc.fold.next_claimable("nowhere") is None


def test_decide_batch_sees_earlier_events_and_changes_nothing() -> None:
    sc = Scenario()
    state = sc.commission(fee_rao=0)
    sid = sc.arrive()
    claim = samples.claimed(sid, state.commission_digest, attempt_id="att-1")
    window = samples.window(1, 1, BILLION, BILLION)
    before = sc.fold.snapshot()
    assert sc.fold.decide("attempt-att-1", window) is not None  # no claim yet
    batch: list[tuple[str, Event, None]] = [
        ("attempt-att-1", claim, None),
        ("submission-" + sid, QualificationStarted(attempt_id="att-1"), None),
        ("attempt-att-1", window, None),
    ]
    assert sc.fold.decide_batch(batch) == [None, None, None]
    assert _ordered(sc.fold.snapshot()) == _ordered(before)


def test_a_decided_credit_spend_leaves_the_credits_in_grant_order() -> None:
    # decide takes the credit out and puts it back. Put back at the end of the hotkey's
    # credits, intake would offer cr-2 next: this fold would admit with a credit that a
    # replay of the same events refuses (intake_mismatch).
    sc = Scenario()
    sc.commission()
    sc.credit("cr-1", "5Miner")
    sc.credit("cr-2", "5Miner")
    sc.credit("cr-3", "5Miner")
    arrived = samples.arrived(hotkey="5Miner", content="d1")
    sid = arrived.submission_id
    sc.append(f"submission-{sid}", arrived)
    offered = sc.fold.intake(sid)
    assert isinstance(offered, Admission) and offered.ref == "cr-1"
    assert _code(sc, "credit-cr-1", CreditSpent(submission_id=sid)) is None
    assert _code(sc, "credit-cr-2", CreditSpent(submission_id=sid)) is None
    before = _ordered(sc.fold.snapshot())
    sc.fold.decide_batch([("credit-cr-1", CreditSpent(submission_id=sid), None),
                          ("credit-cr-2", CreditSpent(submission_id=sid), None)])
    assert _ordered(sc.fold.snapshot()) == before
    assert sc.fold.intake(sid) == offered
    replayed = LedgerFold()
    replayed.consume(sc.records)
    assert replayed.intake(sid) == offered


def test_refused_apply_changes_nothing_and_is_kept() -> None:
    sc = Scenario()
    sc.commission()
    before = sc.fold.snapshot()
    refusal = sc.fold.apply(2, "attempt-att-9", samples.window(1, 1, 1, 1))
    assert refusal is not None and refusal.code == "stream_not_started"
    after = sc.fold.snapshot()
    assert after.pop("position") == 2 and before.pop("position") == 1
    assert after == before
    assert sc.fold.refusals == [(2, "attempt-att-9", refusal)]
    with pytest.raises(ValueError, match="not after"):
        sc.fold.apply(2, "arena-x", samples.commissioned("x"))


def test_consume_checks_the_declared_type() -> None:
    event = samples.commissioned()
    with pytest.raises(ValueError, match="type"):
        LedgerFold().consume([(1, "arena-mlp-arena", "ArenaRetired", event)])


def test_consume_refuses_a_position_that_does_not_increase() -> None:
    fold = LedgerFold()
    assert fold.consume([(1, "arena-mlp-arena", "ArenaCommissioned", samples.commissioned())]) == 0
    control = ControlRegistered(control_id="c1", kind="identity", delta_digest="d" * 64,
                                expected_verdict="PASS")
    with pytest.raises(ValueError, match="position 1 is not after 1"):
        fold.consume([(1, "arena-mlp-arena", "ControlRegistered", control)])
    assert fold.position == 1 and fold.controls("mlp-arena") == []


def test_refusals_name_the_machine_state_and_id_they_concern() -> None:
    sc = Scenario()
    sc.commission(fee_rao=0)
    sid = sc.arrive()
    # An event on another category's stream: the event's own machine refuses it.
    wrong = sc.fold.decide("payment-" + sid, QualificationStarted(attempt_id="att-1"))
    assert wrong is not None
    assert (wrong.machine, wrong.state, wrong.code) == ("submission", "NONE", "wrong_stream")
    # An arrival on a stream named for another id: the first 16 hex digits of the stream's.
    other = samples.arrived(content="other")
    stray = sc.fold.decide("submission-" + sid[:8] + other.submission_id[8:], other)
    assert stray is not None and stray.code == "stream_id_mismatch"
    assert stray.detail == sid[:8] + other.submission_id[8:16]
    # Another submission's attempt: refused in the state the submission is in.
    mine = sc.arrive(content="mine")
    sc.claim(sid, "att-1")
    taken = sc.fold.decide("submission-" + mine, QualificationStarted(attempt_id="att-1"))
    assert taken is not None and (taken.state, taken.code) == ("QUEUED", "attempt_mismatch")
    # A credit granted on a stream named for another id.
    grant = CreditGranted(credit_id="cr-2", hotkey="5Miner", amount_rao=FEE, note="")
    misnamed = sc.fold.decide("credit-cr-1", grant)
    assert misnamed is not None
    assert (misnamed.code, misnamed.detail) == ("stream_id_mismatch", "cr-2")


def test_a_payment_is_consumed_only_by_a_known_submission_of_its_arena() -> None:
    sc = Scenario()
    sc.commission()
    sid = samples.arrived(payment_ref="pay-1").submission_id
    sc.append("submission-" + sid, samples.arrived(payment_ref="pay-1"))

    def consumed(ref: str, submission_id: str, arena_id: str) -> tuple[str, str] | None:
        event = PaymentConsumed(payment_ref=ref, submission_id=submission_id, arena_id=arena_id,
                                amount_rao=FEE)
        refusal = sc.fold.decide("payment-pay-1", event)
        return None if refusal is None else (refusal.code, refusal.detail)

    assert consumed("pay-2", sid, "mlp-arena") == ("stream_id_mismatch", "pay-2")
    assert consumed("pay-1", "f" * 64, "mlp-arena") == ("submission_unknown", "")
    assert consumed("pay-1", sid, "attn-arena") == ("arena_mismatch", "mlp-arena")
    assert consumed("pay-1", sid, "mlp-arena") is None


def test_a_credit_this_submission_already_spent_comes_before_the_hotkeys_other_credits() -> None:
    # Intake lets a submission spend a credit before its admission (in another append);
    # the admission must then name that credit, not the hotkey's first unspent one.
    sc = Scenario()
    sc.commission()
    sc.credit("cr-1", "5Miner")
    sc.credit("cr-2", "5Miner")
    arrived = samples.arrived()
    sid = arrived.submission_id
    sc.append("submission-" + sid, arrived)
    sc.append("credit-cr-2", CreditSpent(submission_id=sid))
    assert sc.fold.intake(sid) == Admission("credit", "cr-2", FEE)
    admitted = SubmissionAdmitted.model_validate(
        {"block": 1_000, "fee": {"kind": "credit", "ref": "cr-2", "amount_rao": FEE}}
    )
    sc.append("submission-" + sid, admitted)
    assert sc.fold.submission(sid).status == "QUEUED"  # type: ignore[union-attr]


def test_an_admission_whose_fee_event_is_still_to_come_holds_its_payment_or_credit() -> None:
    # One payment admitted two submissions when their PaymentConsumed never came: intake
    # counted a payment as used only once consumed. It is used once an admission names it.
    sc = Scenario()
    sc.commission()
    first = admitted_alone(sc, "payment", "pay-1", payment_ref="pay-1", content="a")
    again = samples.arrived(payment_ref="pay-1", content="b")
    sc.append("submission-" + again.submission_id, again)
    assert sc.fold.intake(again.submission_id, FEE) == Rejection("eval_cost_payment_used")
    admitted = SubmissionAdmitted.model_validate(
        {"block": 1_000, "fee": {"kind": "payment", "ref": "pay-1", "amount_rao": FEE}})
    assert _code(sc, "submission-" + again.submission_id, admitted) == "intake_mismatch"
    # The fee event must pay what the admission recorded; then the payment is consumed.
    short = PaymentConsumed(payment_ref="pay-1", submission_id=first, arena_id="mlp-arena",
                            amount_rao=FEE - 1)
    assert _code(sc, "payment-pay-1", short) == "fee_mismatch"
    # Nor can the other submission consume it first (the fee-first order intake allows).
    theirs = short.model_copy(update={"submission_id": again.submission_id, "amount_rao": FEE})
    assert _code(sc, "payment-pay-1", theirs) == "fee_mismatch"
    sc.append("payment-pay-1", short.model_copy(update={"amount_rao": FEE}))
    assert sc.fold.snapshot()["owed"] == {"payments": {}, "credits": {}}
    assert sc.fold.intake(again.submission_id, FEE) == Rejection("eval_cost_payment_used")

    # A credit named by an admission is not offered again before its CreditSpent.
    sc.credit("cr-1", "5Miner")
    sc.credit("cr-2", "5Miner")
    owner = admitted_alone(sc, "credit", "cr-1", hotkey="5Miner", content="c")
    later = samples.arrived(hotkey="5Miner", content="d")
    sc.append("submission-" + later.submission_id, later)
    assert sc.fold.intake(later.submission_id) == Admission("credit", "cr-2", FEE)
    assert sc.fold.snapshot()["owed"] == {"payments": {}, "credits": {"cr-1": owner}}
    assert _code(sc, "credit-cr-2", CreditSpent(submission_id=owner)) == "fee_mismatch"
    # Nor can another submission spend it first (the fee-first order intake allows).
    assert _code(sc, "credit-cr-1", CreditSpent(submission_id=later.submission_id)) \
        == "fee_mismatch"
    sc.append("credit-cr-1", CreditSpent(submission_id=owner))
    assert sc.fold.snapshot()["owed"] == {"payments": {}, "credits": {}}


def test_an_admission_whose_fee_never_came_is_not_evaluated() -> None:
    # Without this, an admission with no PaymentConsumed went on to a claim, a PASS and a
    # reward while the fees showed nothing paid.
    sc = Scenario()
    state = sc.commission()
    sid = admitted_alone(sc, "payment", "pay-1", payment_ref="pay-1")
    claim = samples.claimed(sid, state.commission_digest, attempt_id="att-1")
    assert _code(sc, "attempt-att-1", claim) == "fee_unpaid"
    sc.append("payment-pay-1", PaymentConsumed(payment_ref="pay-1", submission_id=sid,
                                               arena_id="mlp-arena", amount_rao=FEE))
    assert _code(sc, "attempt-att-1", claim) is None


def test_a_fee_taken_before_the_admission_must_be_the_fee_it_records() -> None:
    # Intake allows the fee event first; the admission must then record exactly that fee,
    # and only the payment the arrival names (or, naming none, a credit) can be taken.
    sc = Scenario()
    sc.commission()
    sc.credit("cr-1", "5Miner")
    short = samples.arrived(payment_ref="pay-1", content="short")
    sc.append("submission-" + short.submission_id, short)
    one_rao = PaymentConsumed(payment_ref="pay-1", submission_id=short.submission_id,
                              arena_id="mlp-arena", amount_rao=1)
    sc.append("payment-pay-1", one_rao)
    claims_the_fee = SubmissionAdmitted.model_validate(
        {"block": 1_000, "fee": {"kind": "payment", "ref": "pay-1", "amount_rao": FEE}})
    assert _code(sc, "submission-" + short.submission_id, claims_the_fee) == "fee_mismatch"
    rejected = SubmissionRejected(block=1_000, reason="eval_cost_payment_invalid")
    assert _code(sc, "submission-" + short.submission_id, rejected) == "fee_mismatch"

    bare = samples.arrived(hotkey="5Miner", content="bare")  # names no payment
    sc.append("submission-" + bare.submission_id, bare)
    other = PaymentConsumed(payment_ref="pay-x", submission_id=bare.submission_id,
                            arena_id="mlp-arena", amount_rao=FEE)
    assert _code(sc, "payment-pay-x", other) == "fee_mismatch"
    named = samples.arrived(hotkey="5Miner", payment_ref="pay-2", content="named")
    sc.append("submission-" + named.submission_id, named)
    assert _code(sc, "credit-cr-1", CreditSpent(submission_id=named.submission_id)) \
        == "fee_mismatch"
    sc.append("credit-cr-1", CreditSpent(submission_id=bare.submission_id))
    admitted = SubmissionAdmitted.model_validate(
        {"block": 1_000, "fee": {"kind": "credit", "ref": "cr-1", "amount_rao": FEE}})
    sc.append("submission-" + bare.submission_id, admitted)  # the fee taken first: accepted


def test_a_fee_event_for_a_submission_admitted_with_another_fee_is_refused() -> None:
    sc = Scenario()
    sc.commission()
    sc.credit("cr-1", "5Miner")
    paid = _paid(sc, "pay-1", hotkey="5Miner", content="paid")
    assert _code(sc, "credit-cr-1", CreditSpent(submission_id=paid)) == "fee_mismatch"
    waived_arena = Scenario()
    waived_arena.commission(fee_rao=0)
    waived = waived_arena.arrive()
    consumed = PaymentConsumed(payment_ref="pay-2", submission_id=waived, arena_id="mlp-arena",
                               amount_rao=FEE)
    assert _code(waived_arena, "payment-pay-2", consumed) == "fee_mismatch"


def test_intake_is_enforced_on_admission_and_rejection() -> None:
    sc = Scenario()
    sc.commission()
    sid = samples.arrived(payment_ref="pay-1").submission_id
    sc.append("submission-" + sid, samples.arrived(payment_ref="pay-1"))
    assert sc.fold.intake(sid, FEE) == Admission("payment", "pay-1", FEE)
    assert sc.fold.intake(sid, FEE - 1) == Rejection("eval_cost_payment_invalid")
    waived = SubmissionAdmitted.model_validate(
        {"block": 1, "fee": {"kind": "waived", "ref": "", "amount_rao": 0}}
    )
    assert _code(sc, "submission-" + sid, waived) == "intake_mismatch"
    wrong = SubmissionRejected(block=1, reason="arena_retired")
    assert _code(sc, "submission-" + sid, wrong) == "intake_mismatch"
    short = SubmissionRejected(block=1, reason="eval_cost_payment_invalid")
    assert _code(sc, "submission-" + sid, short) is None


def test_payment_reuse_and_release() -> None:
    sc = Scenario()
    sc.commission()
    first = _paid(sc, "pay-1")
    second = _paid(sc, "pay-1", content="other")
    sub = sc.fold.submission(second)
    assert sub is not None and sub.rejection == "eval_cost_payment_used"
    wrong = PaymentReleased(submission_id=second, reason="refund")
    assert _code(sc, "payment-pay-1", wrong) == "payment_submission_mismatch"
    refusal = sc.fold.decide("payment-pay-1", wrong)
    assert refusal is not None  # both ids named by their first 16 hex digits
    assert refusal.detail == f"submission_id: paid for {first[:16]}, event names {second[:16]}"
    sc.append("payment-pay-1", PaymentReleased(submission_id=first, reason="refund"))
    payment = sc.fold.payment("pay-1")
    assert payment is not None and payment.status == "RELEASED"
    again = PaymentConsumed(payment_ref="pay-1", submission_id=first, arena_id="mlp-arena",
                            amount_rao=FEE)
    assert _code(sc, "payment-pay-1", again) == "terminal_state"


def test_credits_pay_once_and_only_for_their_hotkey() -> None:
    sc = Scenario()
    sc.commission()
    sc.credit("cr-1", "5Miner")
    sid = sc.arrive()
    sub = sc.fold.submission(sid)
    assert sub is not None and sub.fee is not None and sub.fee.kind == "credit"
    credit = sc.fold.credit("cr-1")
    assert credit is not None and (credit.status, credit.submission_id) == ("SPENT", sid)
    second = sc.arrive(content="two")
    sub = sc.fold.submission(second)
    assert sub is not None and sub.rejection == "missing_eval_cost_payment"
    sc.credit("cr-2", "5Other")
    third = sc.arrive(content="three")
    assert _code(sc, "credit-cr-2", CreditSpent(submission_id=third)) == "credit_hotkey_mismatch"


def test_epoch_limit_through_the_fold() -> None:
    sc = Scenario()
    sc.commission(fee_rao=0)
    for n in range(16):
        sid = sc.arrive(block=720 + n, content=f"c{n}")
        assert sc.fold.submission(sid).status == "QUEUED"  # type: ignore[union-attr]
    over = sc.arrive(block=1_079, content="c16")
    assert sc.fold.submission(over).rejection == "hotkey_epoch_admission_limit"  # type: ignore[union-attr]
    next_epoch = sc.arrive(block=1_080, content="c17")
    assert sc.fold.submission(next_epoch).status == "QUEUED"  # type: ignore[union-attr]


def test_a_late_arrival_counts_against_its_own_epoch(fold_kind: str) -> None:
    sc = Scenario()
    sc.commission(fee_rao=0)
    for n in range(15):
        sc.arrive(block=720 + n, content=f"c{n}")  # epoch 2: 15 of 16
    for n in range(16):
        sc.arrive(block=740 + n, content=f"o{n}", hotkey="5Full")  # epoch 2: full
    sc.arrive(block=3_600, content="later")  # epoch 10: an archived fold moves epoch 2 out
    if fold_kind == "archived":
        assert all(epoch >= 9 for _, epoch in sc.fold._admissions)
    sixteenth = sc.arrive(block=1_000, content="late-1")  # read back from the archive
    assert sc.fold.submission(sixteenth).status == "QUEUED"  # type: ignore[union-attr]
    sc.arrive(block=7_200, content="much-later")  # epoch 20: epoch 2 is archived again
    seventeenth = sc.arrive(block=1_001, content="late-2")
    assert sc.fold.submission(seventeenth).rejection == "hotkey_epoch_admission_limit"  # type: ignore[union-attr]
    full = sc.arrive(block=1_003, content="o16", hotkey="5Full")  # its count was kept
    assert sc.fold.submission(full).rejection == "hotkey_epoch_admission_limit"  # type: ignore[union-attr]
    other = sc.arrive(block=1_002, content="other", hotkey="5Other")
    assert sc.fold.submission(other).status == "QUEUED"  # type: ignore[union-attr]
    every = LedgerFold()
    every.consume(sc.records)
    assert sc.fold.snapshot() == every.snapshot()


def test_duplicate_of_a_failure_until_recommission() -> None:
    sc = Scenario()
    sc.commission(fee_rao=0)
    first = sc.arrive(content="same")
    assert sc.evaluate(first, "att-1", SLOW).status == "FAILED"
    again = sc.arrive(content="same", block=1_001)
    sub = sc.fold.submission(again)
    assert sub is not None and sub.rejection == f"duplicate_of:{first[:16]}:candidate_slower"
    sc.commission(fee_rao=0, block=200, model={"name": "tiny-llama", "revision": "r2"})
    fresh = sc.arrive(content="same", block=1_002)
    assert sc.fold.submission(fresh).status == "QUEUED"  # type: ignore[union-attr]


@pytest.mark.parametrize("late_first", [True, False])
def test_a_duplicate_names_the_earliest_arriving_failure_not_the_first_recorded(
    late_first: bool,
) -> None:
    # Two submissions of one content fail, in either order. "Earlier" goes by
    # arrival key, never by when something was recorded (intake.FailedRef), so a third
    # copy names the earlier arrival and its reason, however the attempts interleaved; an
    # archiving fold (fold_kind), which archives the first failure at once, must not let the
    # later failure take its place in the index.
    sc = Scenario()
    sc.commission(fee_rao=0)
    early = sc.arrive(content="same", block=1_000)
    late = sc.arrive(content="same", block=1_001)
    order = [(late, "att-late", SLOW), (early, "att-early", FLAT)]
    for sid, attempt, costs in order if late_first else order[::-1]:
        assert sc.evaluate(sid, attempt, costs).status == "FAILED"
    third = sc.arrive(content="same", block=1_002)
    sub = sc.fold.submission(third)
    assert sub is not None and sub.rejection == (
        f"duplicate_of:{early[:16]}:speed_threshold_not_met")


def test_a_pass_is_never_replayed_as_a_duplicate() -> None:
    sc = Scenario()
    sc.commission(fee_rao=0)
    first = sc.arrive(content="same")
    sc.evaluate(first, "att-1", WORKED, samples.audit(), samples.quality())
    again = sc.arrive(content="same", block=1_001)
    assert sc.fold.submission(again).status == "QUEUED"  # type: ignore[union-attr]


def test_attempts_stay_bound_to_their_commission() -> None:
    sc = Scenario()
    sc.commission(fee_rao=0)
    sid = sc.arrive()
    sc.claim(sid, "att-1")
    old = sc.attempt("att-1").commission_digest
    sc.commission(fee_rao=0, block=300, sealed=samples.policy(windows=2, z={"2": "1"}))
    assert sc.attempt("att-1").params.windows == 4  # still the claimed commission's policy
    sc.measure("att-1", WORKED)
    assert sc.fold.derive_decision("att-1") is not None
    assert sc.attempt("att-1").commission_digest == old
    other = sc.arrive(content="other")
    stale = samples.claimed(other, old, attempt_id="att-2")
    assert _code(sc, "attempt-att-2", stale) == "commission_not_current"


def test_retry_budget_through_the_fold() -> None:
    sc = Scenario()
    sc.commission(fee_rao=0)
    sid = sc.arrive()
    fault = InfrastructureFault(code="adapter_start_failed", stage="start", detail="")
    for n in range(1, 5):
        sub = sc.evaluate(sid, f"att-{n}", (), fault)
    assert (sub.status, sub.hold_reason, sub.attempts) == ("HELD", "retry_budget_exhausted", 4)
    assert sc.fold.queue("mlp-arena") == []


def test_resolution_must_copy_the_decision() -> None:
    sc = Scenario()
    sc.commission(fee_rao=0)
    sid = sc.arrive()
    sc.claim(sid, "att-1")
    sc.measure("att-1", SLOW)
    resolved = SubmissionResolved(attempt_id="att-1", verdict="FAIL", reason="candidate_slower",
                                  disposition="COMPLETE")
    assert _code(sc, "submission-" + sid, resolved) == "attempt_not_decided"
    sc.decide("att-1")
    wrong = resolved.model_copy(update={"reason": "speed_threshold_not_met"})
    assert _code(sc, "submission-" + sid, wrong) == "resolution_mismatch"
    with pytest.raises(ScenarioRefused, match="resolution_mismatch"):
        sc.append("submission-" + sid, wrong)
    assert sc.resolve(sid).status == "FAILED"


def test_controls_report() -> None:
    sc = Scenario()
    sc.commission(fee_rao=0)
    bad = ControlRegistered(control_id="wrong-mlp", kind="wrong_mlp", delta_digest="d" * 64,
                            expected_verdict="FAIL", expected_reason="slot_audit_failed")
    sc.append("arena-mlp-arena", bad)
    assert [r.outcome for r in sc.fold.controls("mlp-arena")] == ["pending"]
    sid = sc.arrive(delta_digest="d" * 64)
    assert [r.outcome for r in sc.fold.controls("mlp-arena")] == ["pending"]
    sc.evaluate(sid, "att-1", WORKED, samples.audit(violations=3))
    rows = sc.fold.controls("mlp-arena")
    assert [(r.submission_id, r.outcome) for r in rows] == [(sid, "as_expected")]
    other = sc.arrive(delta_digest="d" * 64, content="x")
    sc.evaluate(other, "att-2", SLOW)
    assert [r.outcome for r in sc.fold.controls("mlp-arena")] == ["as_expected", "unexpected"]
    assert sc.fold.controls("nowhere") == []


def test_controls_sharing_a_delta_digest_are_each_judged_against_its_submissions() -> None:
    """docs/machines.md judges every registered control of a digest against every submission of
    it: the first of two controls on one digest is not left pending behind the second."""
    sc = Scenario()
    sc.commission(fee_rao=0)
    for control_id, verdict, reason in (("bad", "FAIL", "slot_audit_failed"),
                                        ("same-delta", "PASS", None)):
        sc.append("arena-mlp-arena", ControlRegistered(
            control_id=control_id, kind="custom", delta_digest="d" * 64,
            expected_verdict=verdict, expected_reason=reason))
    assert [(r.control_id, r.outcome) for r in sc.fold.controls("mlp-arena")] == [
        ("bad", "pending"), ("same-delta", "pending")]
    sid = sc.arrive(delta_digest="d" * 64)
    sc.evaluate(sid, "att-1", WORKED, samples.audit(violations=3))
    rows = sc.fold.controls("mlp-arena")
    assert [(r.control_id, r.submission_id, r.verdict, r.outcome) for r in rows] == [
        ("bad", sid, "FAIL", "as_expected"), ("same-delta", sid, "FAIL", "unexpected")]


def test_expirable_and_expiry_use_the_arena_sla() -> None:
    sc = Scenario()
    sc.commission(fee_rao=0, sealed=samples.policy(sla_blocks=100))
    sid = sc.arrive(block=1_000)
    assert sc.fold.expirable(1_099) == []
    assert [s.submission_id for s in sc.fold.expirable(1_100)] == [sid]
    early = SubmissionExpired(block=1_099, reason="sla_expired")
    assert _code(sc, "submission-" + sid, early) == "sla_not_reached"
    sc.append("submission-" + sid, SubmissionExpired(block=1_100, reason="sla_expired"))
    assert sc.fold.live_submissions() == 0 and sc.fold.expirable(10**6) == []


def test_detail_keeps_decided_attempts_and_refold_rebuilds_them() -> None:
    lean, full = Scenario(), Scenario(LedgerFold(detail=True))
    for sc in (lean, full):
        sc.commission(fee_rao=0)
        sid = sc.arrive()
        sc.evaluate(sid, "att-1", WORKED, samples.audit(), samples.quality())
    kept = full.fold.attempt("att-1")
    assert isinstance(kept, AttemptState) and len(kept.looks) == 1
    stream = [r[3] for r in lean.records if r[1] == "attempt-att-1"]
    assert lean.fold.refold_attempt(stream) == kept
    with pytest.raises(ValueError, match="AttemptClaimed"):
        lean.fold.refold_attempt(stream[1:])


def test_an_attempt_is_claimed_before_it_starts_so_no_other_verdict_resolves_it() -> None:
    # Started unclaimed, "att-x" could then be claimed for another submission, and that
    # one's FAIL would resolve (and index as a failed duplicate) this one.
    sc = Scenario()
    state = sc.commission(fee_rao=0)
    mine, other = sc.arrive(content="mine"), sc.arrive(content="other")
    early = QualificationStarted(attempt_id="att-x")
    assert _code(sc, "submission-" + mine, early) == "attempt_not_claimed"
    sc.claim(other, "att-x")  # claims and starts it for the other submission
    assert _code(sc, "submission-" + mine, early) == "attempt_mismatch"
    claim = samples.claimed(mine, state.commission_digest, attempt_id="att-y")
    assert sc.fold.decide_batch([("attempt-att-y", claim, None),
                                 ("submission-" + mine, QualificationStarted(attempt_id="att-y"),
                                  None)]) == [None, None]


def test_a_decided_attempt_cannot_be_started_again() -> None:
    sc = Scenario()
    sc.commission(fee_rao=0)
    sid = sc.arrive()
    fault = InfrastructureFault(code="adapter_start_failed", stage="start", detail="")
    sc.evaluate(sid, "att-1", (), fault)
    assert sc.fold.submission(sid).status == "QUEUED"  # type: ignore[union-attr]
    again = QualificationStarted(attempt_id="att-1")
    assert _code(sc, "submission-" + sid, again) == "attempt_mismatch"


def test_resolution_and_reward_group_for_settlement() -> None:
    sc = Scenario()
    state = sc.commission(fee_rao=0)
    sid = sc.arrive()
    assert sc.fold.resolution(sid) is None
    sc.evaluate(sid, "att-1", WORKED, samples.audit(), samples.quality())
    resolved = sc.fold.resolution(sid)
    assert resolved is not None and (resolved.verdict, resolved.speedup) == ("PASS", "1.019129")
    assert sc.fold.reward_group(sid) == state.incumbent_digest
    assert sc.fold.resolution("nope") is None and sc.fold.reward_group("nope") is None


def test_counts_tally_accepted_decisions_and_holds_placed_and_a_decide_changes_none() -> None:
    """``counts`` is what stats reports: decided attempts and NO_DECISION verdicts per arena,
    and every entry into HELD by its reason (released holds included); a refused event and
    a decide_batch (journaled, rolled back) count nothing."""
    sc = Scenario()
    sc.commission(fee_rao=0)
    sc.commission("other-arena", fee_rao=0)
    passed = sc.arrive(content="pass")
    sc.evaluate(passed, "att-1", WORKED, samples.audit(), samples.quality())
    killed = InfrastructureFault(code="engine_killed", stage="speed", detail="")
    parked = sc.arrive(content="parked", block=1_001)
    sc.evaluate(parked, "att-2", (), killed)
    budget = InfrastructureFault(code="adapter_start_failed", stage="start", detail="")
    retried = sc.arrive(content="retried", block=1_002, arena_id="other-arena")
    for n in range(3, 7):  # the fourth requeue holds: retry_budget_exhausted
        sc.evaluate(retried, f"att-{n}", (), budget)
    held = sc.arrive(content="held", block=1_003)
    sc.append(f"submission-{held}", SubmissionHeld(reason="operator review", block=1_004))
    sc.append(f"submission-{held}", HoldReleased(reason="ok", block=1_005, operator="5Op"))
    sc.append(f"submission-{held}", SubmissionHeld(reason="operator review", block=1_006))

    expected = {
        "decided": {"mlp-arena": 2, "other-arena": 4},
        "no_decision": {"mlp-arena": 1, "other-arena": 4},
        "holds_placed": {"operator review": 2, "retry_budget_exhausted": 1},
    }
    assert sc.fold.counts()._asdict() == expected
    # Refused (already held; an attempt decided twice) and decided-only events count nothing.
    assert _code(sc, f"submission-{held}", SubmissionHeld(reason="again", block=1_007))
    decided_twice = samples.decided(sc.fold.attempt("att-1").decision)  # type: ignore[union-attr]
    assert sc.fold.apply(sc.fold.position + 1, "attempt-att-1", decided_twice) is not None
    arena = sc.fold.arena("mlp-arena")
    assert arena is not None
    waiting = sc.arrive(content="waiting", block=1_008)
    queued = sc.arrive(content="queued", block=1_009)
    no_decision = Decision("NO_DECISION", "engine_killed", "COMPLETE", None, None, None)
    batch: list[tuple[str, Event, None]] = [
        ("attempt-att-9", samples.claimed(waiting, arena.commission_digest, attempt_id="att-9"),
         None),
        (f"submission-{waiting}", QualificationStarted(attempt_id="att-9"), None),
        ("attempt-att-9", killed, None),
        ("attempt-att-9", samples.decided(no_decision), None),
        (f"submission-{queued}", SubmissionHeld(reason="operator review", block=1_010), None),
    ]
    assert sc.fold.decide_batch(batch) == [None] * 5  # each would be accepted
    assert sc.fold.counts()._asdict() == expected  # and none was kept
    # A fold of the same records counts the same (the replay's and a restored command's).
    again = LedgerFold()
    assert again.consume(sc.records) == 0
    assert again.counts() == sc.fold.counts()

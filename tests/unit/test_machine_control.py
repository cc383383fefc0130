"""Checks how control submissions are judged (machines.control; docs/machines.md).

A control submission is ``pending`` while it waits for a verdict of its current attempt:
QUEUED or QUALIFYING again after an automatic requeue, and HELD before any verdict. A HELD
submission that has its verdict (disposition HOLD) and a parked NO_DECISION are judged by that
verdict; REJECTED, and EXPIRED before any verdict, are ``unexpected``, while a submission that
expired after its verdict is judged by that verdict. The reason is compared only when the
control registered one (an empty one included). The report keeps controls in registration
order and submissions in the order given, each row carrying its own control and submission.
"""

from __future__ import annotations

from machines import samples
from machines.control import ControlRow, control_rows, latest_complete_run
from machines.scenario import Scenario
from vocabulary.events import (
    ControlRegistered,
    InfrastructureFault,
    SubmissionExpired,
    SubmissionHeld,
)

BILLION = 1_000_000_000
SLOW = ((BILLION, 1_040_000_000),) * 4  # candidate 4 % slower everywhere
WORKED = samples.WORKED_EXAMPLE_COSTS
ARENA = "mlp-arena"
DELTA = samples.hex64("control-delta")


def _control(
    control_id: str,
    verdict: str,
    reason: str | None = None,
    *,
    kind: str = "custom",
    delta: str = DELTA,
) -> ControlRegistered:
    return ControlRegistered(
        control_id=control_id,
        kind=kind,
        delta_digest=delta,
        expected_verdict=verdict,
        expected_reason=reason,
    )


def _arena(*controls: ControlRegistered, fee: int = 0, sla_blocks: int = 100) -> Scenario:
    """Returns a scenario with the arena commissioned and ``controls`` registered."""
    sc = Scenario()
    sc.commission(fee_rao=fee, sealed=samples.policy(sla_blocks=sla_blocks))
    if controls:
        sc.append(f"arena-{ARENA}", *controls)
    return sc


def _outcomes(sc: Scenario) -> list[tuple[str, str | None, str]]:
    return [(r.control_id, r.submission_id, r.outcome) for r in sc.fold.controls(ARENA)]


def _status(sc: Scenario, sid: str) -> str:
    sub = sc.fold.submission(sid)
    assert sub is not None
    return sub.status


def _fault(code: str) -> InfrastructureFault:
    return InfrastructureFault(code=code, stage="speed", detail="")


def test_a_requeued_control_submission_is_pending_until_its_next_attempt_decides() -> None:
    sc = _arena(_control("honest", "PASS", kind="honest"))
    sid = sc.arrive(delta_digest=DELTA)
    sub = sc.evaluate(sid, "att-1", (), _fault("adapter_start_failed"))
    assert (sub.status, sub.verdict) == ("QUEUED", "NO_DECISION")  # requeued automatically
    assert _outcomes(sc) == [("honest", sid, "pending")]
    sc.claim(sid, "att-2")
    assert _outcomes(sc) == [("honest", sid, "pending")]  # QUALIFYING again
    sc.measure("att-2", WORKED)
    sc.append("attempt-att-2", samples.audit(), samples.quality())
    sc.decide("att-2")
    assert sc.resolve(sid).status == "QUALIFIED"
    assert _outcomes(sc) == [("honest", sid, "as_expected")]


def test_a_held_control_submission_is_pending_before_a_verdict_and_judged_after() -> None:
    sc = _arena(_control("lost", "NO_DECISION", "evidence_unavailable"))
    waiting = sc.arrive(delta_digest=DELTA, content="waiting")
    sc.append(f"submission-{waiting}", SubmissionHeld(reason="operator", block=1_001))
    held = sc.arrive(delta_digest=DELTA, content="held", block=1_002)
    sub = sc.evaluate(held, "att-1", WORKED[:1], _fault("evidence_unavailable"))
    assert (sub.status, sub.verdict) == ("HELD", "NO_DECISION")  # disposition HOLD
    assert _outcomes(sc) == [("lost", waiting, "pending"), ("lost", held, "as_expected")]


def test_a_parked_no_decision_control_is_judged_by_its_verdict() -> None:
    sc = _arena(_control("kill", "NO_DECISION", "engine_killed", kind="engine_kill"))
    sid = sc.arrive(delta_digest=DELTA)
    sub = sc.evaluate(sid, "att-1", WORKED[:1], _fault("engine_killed"))
    assert sub.status == "NO_DECISION"  # disposition COMPLETE: parked, not terminal
    assert _outcomes(sc) == [("kill", sid, "as_expected")]


def test_rejected_and_expired_before_a_verdict_are_unexpected() -> None:
    sc = _arena(_control("honest", "PASS", kind="honest"), fee=BILLION)
    rejected = sc.arrive(delta_digest=DELTA, content="unpaid")
    expired = sc.arrive(
        delta_digest=DELTA, content="late", payment_ref="pay-1", paid_rao=BILLION, block=1_001
    )
    sc.append(f"submission-{expired}", SubmissionExpired(block=1_101, reason="sla_expired"))
    assert [_status(sc, sid) for sid in (rejected, expired)] == ["REJECTED", "EXPIRED"]
    assert _outcomes(sc) == [("honest", rejected, "unexpected"), ("honest", expired, "unexpected")]


def test_a_control_that_expired_after_its_verdict_is_judged_by_that_verdict() -> None:
    # An engine_kill control parks in NO_DECISION, which is not terminal: the SLA sweep
    # expires it. It produced the verdict it was registered for (docs/machines.md: as_expected when
    # its verdict matches); it must not turn unexpected when it expires.
    sc = _arena(_control("kill", "NO_DECISION", "engine_killed", kind="engine_kill"))
    sid = sc.arrive(delta_digest=DELTA)
    sc.evaluate(sid, "att-1", WORKED[:1], _fault("engine_killed"))
    assert [s.submission_id for s in sc.fold.expirable(1_100)] == [sid]
    sc.append(f"submission-{sid}", SubmissionExpired(block=1_100, reason="sla_expired"))
    assert _status(sc, sid) == "EXPIRED"
    assert _outcomes(sc) == [("kill", sid, "as_expected")]


def test_the_reason_is_compared_only_when_the_control_registered_one() -> None:
    sc = _arena(_control("any-fail", "FAIL"), _control("fail-without-reason", "FAIL", ""))
    sid = sc.arrive(delta_digest=DELTA)
    assert sc.evaluate(sid, "att-1", SLOW).reason == "candidate_slower"
    assert _outcomes(sc) == [
        ("any-fail", sid, "as_expected"),
        ("fail-without-reason", sid, "unexpected"),
    ]


def test_the_report_keeps_registration_order_and_the_order_submissions_are_given() -> None:
    other = samples.hex64("other-delta")
    sc = _arena(_control("zz-first", "FAIL", delta=other), _control("aa-second", "FAIL"))
    sids = [sc.arrive(delta_digest=DELTA, content=f"c{n}", block=1_000 + n) for n in range(3)]
    arena = sc.fold.arena(ARENA)
    assert arena is not None
    subs = sc.fold.submissions(ARENA)
    assert [s.submission_id for s in subs] == sids
    for given in (subs, subs[::-1], sorted(subs, key=lambda s: s.submission_id, reverse=True)):
        rows = control_rows(arena, given)
        assert [(r.control_id, r.submission_id) for r in rows] == [("zz-first", None)] + [
            ("aa-second", s.submission_id) for s in given
        ]


def test_each_row_carries_its_own_control_and_its_submission() -> None:
    judged = _control("wrong-mlp", "FAIL", "slot_audit_failed", kind="wrong_mlp")
    waiting = _control(
        "skip-mlp", "FAIL", "quality_regression", kind="skip_mlp", delta=samples.hex64("skip")
    )
    sc = _arena(judged, waiting)
    sid = sc.arrive(delta_digest=DELTA)
    sub = sc.evaluate(sid, "att-1", WORKED, samples.audit(violations=3))
    assert (sub.verdict, sub.reason, sub.hold_reason) == ("FAIL", "slot_audit_failed", None)
    assert sc.fold.controls(ARENA) == [
        ControlRow(
            judged.control_id,
            judged.kind,
            judged.delta_digest,
            judged.expected_verdict,
            judged.expected_reason,
            sid,
            sub.verdict,
            sub.reason,
            "as_expected",
            sub.arrival_block,  # which run the row is: its block and attempt
            "att-1",
        ),
        ControlRow(
            waiting.control_id,
            waiting.kind,
            waiting.delta_digest,
            waiting.expected_verdict,
            waiting.expected_reason,
            None,
            None,
            None,
            "pending",
            None,
            None,
        ),
    ]


def _row(control_id: str, block: int | None, outcome: str) -> ControlRow:
    return ControlRow(control_id, "custom", DELTA, "FAIL", None, None, None, None, outcome,
                      block, None if block is None else f"ctl-{control_id}-{block}")


def test_the_latest_complete_run_is_the_latest_block_none_of_whose_rows_is_pending() -> None:
    rows = [
        _row("a", 1_200, "unexpected"), _row("b", 1_200, "as_expected"),
        _row("a", 1_300, "as_expected"), _row("b", 1_300, "as_expected"),
        _row("a", 1_400, "as_expected"), _row("b", 1_400, "pending"),  # interrupted
        _row("c", None, "pending"),  # registered, never run
    ]
    assert latest_complete_run(rows) == rows[2:4]
    # Without 1,300, the last run that finished is 1,200's, unexpected outcome and all.
    assert latest_complete_run(rows[:2] + rows[4:]) == rows[:2]
    # In any order (rows come grouped by control).
    assert latest_complete_run(sorted(rows, key=lambda r: r.control_id, reverse=True)) == [
        rows[3], rows[2]]


def test_no_run_is_complete_while_every_run_has_a_pending_row() -> None:
    assert latest_complete_run([]) == []
    assert latest_complete_run([_row("a", None, "pending")]) == []
    assert latest_complete_run([_row("a", 1_200, "pending"), _row("b", 1_200, "unexpected")]) == []

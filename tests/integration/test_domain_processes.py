"""Runs the arena's processes end to end through ArenaLedger, on SQLite and PostgreSQL.

Intake → claim → windows → audit → quality → conclude, and the other ways an attempt ends
(futility, infrastructure faults, the retry budget), operator holds, requeues and SLA
expiry, idempotent repeats, and the fold the ledger caches against a fresh one.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from desk import ARENA, FEE, SLOWER, WORKED, Desk, open_desk

from machines import samples
from services.arena_ledger import ArenaLedger
from vocabulary.errors import InvalidInput, NotFound, Refused


@pytest.fixture
def desk(store_url: str) -> Iterator[Desk]:
    yield from open_desk(store_url)


def qualified(desk: Desk, content: str, attempt_id: str) -> str:
    """Runs the worked example to a PASS and returns the submission id."""
    sid = desk.passed_speed(content, attempt_id)
    desk.ledger.record(attempt_id, samples.audit())
    desk.ledger.record(attempt_id, samples.quality())
    desk.ledger.conclude(attempt_id, 1_020)
    return sid


def faulted(desk: Desk, sid: str, attempt_id: str, code: str, windows: int = 0) -> Any:
    """Claims, records ``windows`` worked-example windows and a fault, and concludes."""
    desk.claim(sid, attempt_id)
    desk.windows(attempt_id, WORKED[:windows])
    desk.ledger.fault(attempt_id, code, "speed", f"{code} during the test")
    return desk.ledger.conclude(attempt_id, 1_020)


# --- PASS, FAIL ------------------------------------------------------------------------------


def test_the_worked_example_passes_end_to_end(desk: Desk) -> None:
    desk.commission()
    sid = desk.admitted("d1")
    claimed = desk.claim(sid, "att-1")
    assert claimed.commission_digest == desk.ledger.fold.arena(ARENA).commission_digest  # type: ignore[union-attr]
    assert desk.ledger.fold.submission(sid).status == "QUALIFYING"  # type: ignore[union-attr]
    desk.windows("att-1", WORKED[:2])
    with pytest.raises(Refused) as early:  # speed is still undecided after orientation 1
        desk.ledger.conclude("att-1", 1_020)
    assert early.value.context["reason"] == "attempt_not_decidable"
    desk.windows("att-1", WORKED[2:], first=3)
    # In AUDIT the derivation judges what was graded so far: nothing yet is not covered.
    pending = desk.ledger.fold.derive_decision("att-1")
    assert pending is not None and (pending.verdict, pending.reason) == (
        "NO_DECISION", "audit_not_covered")
    desk.ledger.record("att-1", samples.audit(calls=64))
    desk.ledger.record("att-1", samples.quality())
    decided = desk.ledger.conclude("att-1", 1_020)
    assert decided.model_dump() == {
        "verdict": "PASS", "reason": "", "disposition": "COMPLETE", "speedup": "1.019129",
        "pass_line": "0.018884", "look_window": 3, "decided_block": 1_020,
        "rules_version": "paired-windows.v1",
    }
    assert desk.types("attempt-att-1") == [
        "AttemptClaimed", "WindowMeasured", "WindowMeasured", "WindowMeasured",
        "AuditNodeGraded", "QualityGraded", "AttemptDecided"]
    assert desk.types(f"submission-{sid}")[-1] == "SubmissionResolved"
    sub = desk.ledger.fold.submission(sid)
    assert sub is not None and (sub.status, sub.verdict, sub.reason) == ("QUALIFIED", "PASS", "")

    explained = desk.ledger.explain_attempt("att-1")
    assert (explained["verdict"], explained["reason"], explained["disposition"]) == (
        "PASS", "", "COMPLETE")
    assert (explained["speedup"], explained["pass_line"], explained["look_window"]) == (
        "1.019129", "0.018884", 3)
    assert explained["recorded"]["speedup"] == "1.019129"
    assert [w["ratio"] for w in explained["windows"]] == ["0.99", "0.985", "0.975"]
    assert explained["r1"] == "0.9875"
    [look] = explained["looks"]
    assert (look["window"], look["n1"], look["n2"], look["r1"], look["r2"], look["z"],
            look["outcome"]) == (3, 2, 1, "0.9875", "0.975", "2", "pass")
    assert look["speedup"].startswith("1.01912895")
    assert look["se"].startswith("0.00935414")
    assert look["pass_line"].startswith("0.01888438")
    assert explained["audit"]["model.layers.0.mlp"]["outcome"] == "PASS"

    row = desk.ledger.explain_submission(sid)
    assert (row["status"], row["verdict"], row["cause"], row["next_step"]) == (
        "QUALIFIED", "PASS", "passed", "nothing: rewards follow at settlement")
    assert (row["speedup"], row["pass_line"], row["look_window"]) == ("1.019129", "0.018884", 3)
    assert [a["attempt_id"] for a in row["attempts"]] == ["att-1"]


def test_a_slow_candidate_fails_on_futility_after_orientation_one(desk: Desk) -> None:
    desk.commission(sealed=samples.policy(futility_margin="0.01"))
    sid = desk.admitted("slow")
    desk.claim(sid, "att-1")
    desk.windows("att-1", SLOWER[:2])
    decided = desk.ledger.conclude("att-1", 1_020)
    assert (decided.verdict, decided.reason, decided.disposition) == ("FAIL", "futility",
                                                                      "COMPLETE")
    assert (decided.speedup, decided.pass_line, decided.look_window) == (None, None, 2)
    sub = desk.ledger.fold.submission(sid)
    assert sub is not None and (sub.status, sub.reason) == ("FAILED", "futility")
    explained = desk.ledger.explain_attempt("att-1")
    assert (explained["r1"], explained["futility_limit"], explained["looks"]) == (
        "1.02", "1.01", [])
    [row] = desk.ledger.submissions(status="failed")
    assert row["submission_id"] == sid and row["reason"] == "futility"
    assert row["next_step"] == "Profile the delta; the remaining windows were not run."


def test_a_slower_candidate_fails_at_the_last_window(desk: Desk) -> None:
    desk.commission()
    sid = desk.admitted("slow")
    desk.claim(sid, "att-1")
    desk.windows("att-1", SLOWER)
    decided = desk.ledger.conclude("att-1", 1_020)
    assert (decided.verdict, decided.reason, decided.look_window) == (
        "FAIL", "candidate_slower", 4)
    assert decided.speedup == "0.980392" and decided.pass_line is not None
    assert [k["outcome"] for k in desk.ledger.explain_attempt("att-1")["looks"]] == [
        "continue", "candidate_slower"]


def test_a_failed_audit_fails_the_submission(desk: Desk) -> None:
    desk.commission()
    sid = desk.passed_speed("d1", "att-1")
    desk.ledger.record("att-1", samples.audit(violations=1))
    decided = desk.ledger.conclude("att-1", 1_020)
    assert (decided.verdict, decided.reason, decided.speedup) == (
        "FAIL", "slot_audit_failed", "1.019129")
    assert desk.ledger.fold.submission(sid).status == "FAILED"  # type: ignore[union-attr]


def test_explain_shows_each_audited_nodes_lowest_score(desk: Desk) -> None:
    # explain states every number behind a verdict; the audit's scores are recorded per
    # rank (AuditNodeGraded.min_score) and the node's lowest one must be shown.
    desk.commission()
    desk.passed_speed("d1", "att-1")
    desk.ledger.record("att-1", samples.audit(rank=0))
    desk.ledger.record("att-1", samples.audit(rank=1).model_copy(
        update={"min_score": "0.999991"}))
    node = desk.ledger.explain_attempt("att-1")["audit"]["model.layers.0.mlp"]
    assert (node["calls"], node["violations"], node["outcome"]) == (128, 0, "PASS")
    assert node.get("min_score") == "0.999991", node


# --- infrastructure faults and the retry budget ----------------------------------------------


def test_engine_killed_decides_no_decision_and_keeps_the_windows(desk: Desk) -> None:
    desk.commission()
    sid = desk.admitted("d1")
    decided = faulted(desk, sid, "att-1", "engine_killed", windows=2)
    assert (decided.verdict, decided.reason, decided.disposition) == (
        "NO_DECISION", "engine_killed", "COMPLETE")
    assert (decided.speedup, decided.pass_line, decided.look_window) == (None, None, None)
    explained = desk.ledger.explain_attempt("att-1")
    assert [w["window"] for w in explained["windows"]] == [1, 2]
    assert explained["r1"] == "0.9875"
    assert explained["fault"] == {"code": "engine_killed", "stage": "speed",
                                  "detail": "engine_killed during the test"}
    row = desk.ledger.explain_submission(sid)
    assert (row["status"], row["verdict"], row["reason"]) == (
        "NO_DECISION", "NO_DECISION", "engine_killed")
    # A completed NO_DECISION goes back to the queue only when someone requeues it.
    assert desk.ledger.fold.next_claimable(ARENA) is None
    desk.ledger.requeue(sid, "engine replaced", 1_030)
    assert desk.ledger.fold.submission(sid).status == "QUEUED"  # type: ignore[union-attr]
    # Requeued, it waits: the killed attempt's cause and "requeue it" no longer apply.
    row = desk.ledger.explain_submission(sid)
    assert (row["status"], row["reason"], row["cause"], row["next_step"]) == (
        "QUEUED", "", "admitted and waiting for a validator",
        "wait: the queue runs in arrival order")
    desk.refused(lambda: desk.ledger.requeue(sid, "again", 1_031), machine="submission",
                 state="QUEUED", event_type="SubmissionRequeued",
                 reason="transition_not_allowed")
    decided = faulted(desk, sid, "att-2", "pod_service_restart")
    assert (decided.verdict, decided.reason, decided.disposition) == (
        "NO_DECISION", "pod_service_restart", "COMPLETE")


def test_after_a_fault_only_the_decision_is_accepted(desk: Desk) -> None:
    desk.commission()
    sid = desk.admitted("d1")
    desk.claim(sid, "att-1")
    desk.windows("att-1", WORKED[:1])
    desk.ledger.fault("att-1", "adapter_timeout", "speed", "no answer in 600 s")
    desk.refused(desk.model("attempt-att-1", samples.window(2, 1, 10**9, 10**9)),
                 machine="attempt", state="SPEED", event_type="WindowMeasured",
                 reason="fault_recorded")


def test_adapter_start_failed_requeues_the_submission(desk: Desk) -> None:
    desk.commission()
    sid = desk.admitted("d1")
    decided = faulted(desk, sid, "att-1", "adapter_start_failed")
    assert (decided.verdict, decided.reason, decided.disposition) == (
        "NO_DECISION", "adapter_start_failed", "REQUEUE")
    sub = desk.ledger.fold.submission(sid)
    assert sub is not None and (sub.status, sub.attempts, sub.requeues) == ("QUEUED", 1, 1)
    nxt = desk.ledger.fold.next_claimable(ARENA)
    assert nxt is not None and nxt.submission_id == sid
    desk.claim(sid, "att-2")  # claimed again: being evaluated, whatever the last attempt said
    row = desk.ledger.explain_submission(sid)
    assert (row["status"], row["reason"], row["cause"]) == ("QUALIFYING", "", "being evaluated")


@pytest.mark.parametrize("code", ["evidence_unavailable", "unproven_infrastructure_failure"])
def test_an_unproven_fault_holds_the_submission(desk: Desk, code: str) -> None:
    desk.commission()
    sid = desk.admitted("d1")
    decided = faulted(desk, sid, "att-1", code, windows=1)
    assert (decided.verdict, decided.reason, decided.disposition) == ("NO_DECISION", code,
                                                                      "HOLD")
    sub = desk.ledger.fold.submission(sid)
    assert sub is not None and (sub.status, sub.hold_reason) == ("HELD", code)


def test_the_fourth_requeue_resolution_holds_with_retry_budget_exhausted(desk: Desk) -> None:
    desk.commission()
    sid = desk.admitted("d1")
    for n in (1, 2, 3):
        faulted(desk, sid, f"att-{n}", "adapter_request_failed")
        sub = desk.ledger.fold.submission(sid)
        assert sub is not None and (sub.status, sub.requeues, sub.attempts) == ("QUEUED", n, n)
    faulted(desk, sid, "att-4", "adapter_request_failed")
    sub = desk.ledger.fold.submission(sid)
    assert sub is not None
    assert (sub.status, sub.hold_reason, sub.requeues, sub.attempts) == (
        "HELD", "retry_budget_exhausted", 3, 4)
    row = desk.ledger.explain_submission(sid)
    assert (row["status"], row["reason"]) == ("HELD", "retry_budget_exhausted")
    assert [a["attempt_id"] for a in row["attempts"]] == ["att-1", "att-2", "att-3", "att-4"]
    desk.refused(lambda: desk.claim(sid, "att-5"), machine="attempt", state="NONE",
                 event_type="AttemptClaimed", reason="submission_not_queued")
    desk.ledger.release(sid, "adapter fixed", 1_040, "5Operator")
    # The budget stays spent: one more REQUEUE resolution holds again.
    faulted(desk, sid, "att-5", "adapter_start_failed")
    sub = desk.ledger.fold.submission(sid)
    assert sub is not None and (sub.status, sub.hold_reason) == ("HELD", "retry_budget_exhausted")


# --- holds, requeues, expiry -----------------------------------------------------------------


def test_hold_and_release_by_an_operator(desk: Desk) -> None:
    desk.commission()
    sid = desk.admitted("d1")
    desk.ledger.hold(sid, "suspicious delta", 1_005)
    sub = desk.ledger.fold.submission(sid)
    assert sub is not None and (sub.status, sub.hold_reason) == ("HELD", "suspicious delta")
    assert desk.ledger.fold.next_claimable(ARENA) is None
    desk.refused(lambda: desk.ledger.hold(sid, "twice", 1_006), machine="submission",
                 state="HELD", event_type="SubmissionHeld", reason="already_held")
    desk.refused(lambda: desk.claim(sid, "att-1"), machine="attempt", state="NONE",
                 event_type="AttemptClaimed", reason="submission_not_queued")
    [row] = desk.ledger.submissions(status="held")
    assert (row["submission_id"], row["status"], row["reason"]) == (
        sid, "HELD", "suspicious delta")
    desk.ledger.release(sid, "looked fine", 1_007, "5Operator")
    released = list(desk.ledger.store.read_stream(f"submission-{sid}"))[-1]
    assert (released.type, released.payload) == (
        "HoldReleased", {"reason": "looked fine", "block": 1_007, "operator": "5Operator"})
    assert desk.ledger.fold.submission(sid).status == "QUEUED"  # type: ignore[union-attr]
    desk.refused(lambda: desk.ledger.release(sid, "again", 1_008, "5Operator"),
                 machine="submission", state="QUEUED", event_type="HoldReleased",
                 reason="transition_not_allowed")
    assert desk.claim(sid, "att-1").submission_id == sid


def test_an_operator_hold_states_a_cause_and_next_step(desk: Desk) -> None:
    # An operator's free-text reason is no reason code, so the row must state the cause of
    # the HELD status itself (docs/concepts.md: every submission with its stated cause).
    desk.commission()
    sid = desk.admitted("d1")
    desk.ledger.hold(sid, "suspicious delta", 1_005)
    row = desk.ledger.explain_submission(sid)
    assert (row["status"], row["reason"]) == ("HELD", "suspicious delta")
    assert row["cause"] != "" and row["next_step"] != "", row


def test_submissions_expire_by_sla_block(desk: Desk) -> None:
    desk.commission(sealed=samples.policy(sla_blocks=1_000))
    done = qualified(desk, "passed", "att-1")
    queued = desk.admitted("queued", block=1_000)
    held = desk.admitted("held", block=1_050)
    desk.ledger.hold(held, "operator", 1_060)
    assert desk.ledger.expire(1_999) == []
    desk.refused(lambda: desk.ledger.expire(1_999, queued), machine="submission",
                 state="QUEUED", event_type="SubmissionExpired", reason="sla_not_reached")
    assert desk.ledger.expire(2_000) == [queued]
    assert desk.ledger.expire(2_049) == []
    assert desk.ledger.expire(2_050) == [held]
    for sid in (queued, held):
        sub = desk.ledger.fold.submission(sid)
        assert sub is not None and sub.status == "EXPIRED"
    desk.refused(lambda: desk.ledger.expire(3_000, done), machine="submission",
                 state="QUALIFIED", event_type="SubmissionExpired", reason="terminal_state")
    rows = {r["submission_id"]: r for r in desk.ledger.submissions(status="EXPIRED")}
    assert set(rows) == {queued, held}
    assert rows[queued]["reason"] == "sla_expired"
    assert desk.ledger.expire(5_000) == []


# --- idempotency -----------------------------------------------------------------------------


def test_repeating_intake_claim_and_conclude_returns_what_was_recorded(desk: Desk) -> None:
    desk.commission()
    arrival = desk.arrival(content="d1", payment_ref="pay-1")
    first = desk.ledger.intake(arrival, payment_amount_rao=FEE)
    again = desk.ledger.intake(arrival, payment_amount_rao=FEE)
    assert (first.already_recorded, again.already_recorded) == (False, True)
    assert again.positions == first.positions == (2, 3, 4)
    assert again.fee == first.fee
    sid = first.submission_id
    desk.claim(sid, "att-1")
    head = desk.head
    desk.claim(sid, "att-1")
    assert desk.head == head
    desk.windows("att-1", WORKED)
    desk.ledger.record("att-1", samples.audit())
    desk.ledger.record("att-1", samples.quality())
    decided = desk.ledger.conclude("att-1", 1_020)
    head = desk.head
    assert desk.ledger.conclude("att-1", 1_020) == decided
    assert desk.head == head
    rejected = desk.arrival(content="d2", payment_ref="pay-1")
    no = desk.ledger.intake(rejected, payment_amount_rao=FEE)
    no_again = desk.ledger.intake(rejected, payment_amount_rao=FEE)
    assert (no_again.positions, no_again.reason, no_again.already_recorded) == (
        no.positions, "eval_cost_payment_used", True)
    assert desk.head == head + 2


def test_repeating_a_rejected_intake_returns_the_rejection_not_a_new_derivation(
    desk: Desk,
) -> None:
    # The retry brings a payment that would now suffice; intake was decided (rejected) when
    # the arrival was recorded, and a retry gets that record back, not a second decision.
    desk.commission()
    arrival = desk.arrival(content="d1", payment_ref="pay-1")
    first = desk.ledger.intake(arrival, payment_amount_rao=FEE - 1)
    assert (first.admitted, first.reason) == (False, "eval_cost_payment_invalid")
    head = desk.head
    again = desk.ledger.intake(arrival, payment_amount_rao=FEE)
    assert (again.admitted, again.reason, again.fee, again.positions, again.already_recorded) == (
        False, "eval_cost_payment_invalid", None, first.positions, True)
    assert desk.head == head


def test_repeating_the_intake_of_an_epochs_sixteenth_admission_returns_it(desk: Desk) -> None:
    # A validator retrying an intake whose answer it lost must get the original positions,
    # even though the submission's own admission now counts toward the epoch limit.
    desk.commission(fee_rao=0)
    for i in range(15):
        assert desk.intake(None, content=f"c{i}", block=720 + i).admitted
    sixteenth = desk.arrival(content="c15", block=735)
    first = desk.ledger.intake(sixteenth)
    assert first.admitted
    head = desk.head
    again = desk.ledger.intake(sixteenth)
    assert (again.admitted, again.positions, again.already_recorded) == (
        True, first.positions, True)
    assert desk.head == head


def test_repeating_the_intake_of_a_submission_that_since_failed_returns_it(desk: Desk) -> None:
    desk.commission()
    arrival = desk.arrival(content="d1", payment_ref="pay-1")
    first = desk.ledger.intake(arrival, payment_amount_rao=FEE)
    desk.claim(first.submission_id, "att-1")
    desk.windows("att-1", SLOWER)
    desk.ledger.conclude("att-1", 1_020)
    head = desk.head
    again = desk.ledger.intake(arrival, payment_amount_rao=FEE)
    assert (again.admitted, again.positions, again.already_recorded) == (
        True, first.positions, True)
    assert desk.head == head


def test_explain_takes_a_unique_prefix_of_a_submission_id(
    desk: Desk, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The tables show a submission id's first 16 characters; an auditor copies those.
    from collections import Counter

    from services import arena_ledger as domain
    desk.commission(fee_rao=0)
    sids = [desk.intake(None, content=f"p{i}", block=720 + i).submission_id for i in range(17)]
    head = desk.head
    full = desk.ledger.explain_submission(sids[0])
    assert desk.ledger.explain_submission(sids[0][:16]) == full
    assert desk.ledger.explain_submission(sids[0][:8].upper()) == full
    assert desk.ledger.explain_submission(sids[0].upper()) == full
    with pytest.raises(InvalidInput) as caught:  # shorter than any prefix taken: said so,
        desk.ledger.explain_submission(sids[0][:7])  # not "does not exist"
    assert caught.value.message == (
        f"{sids[0][:7]!r} is 7 characters, shorter than a submission id prefix may be: give "
        "at least 8 characters of the id (the tables show 16), or all 64")
    assert caught.value.context["path"] == "submission_id"
    with pytest.raises(NotFound) as caught_missing:  # long enough, and no id starts with it
        desk.ledger.explain_submission(
            next(p for p in ("0" * 8, "f" * 8) if not any(s.startswith(p) for s in sids)))
    assert "or a prefix of at least 8 characters" in caught_missing.value.message
    # 17 ids over 16 hex digits: two share a first character, so that prefix names none.
    monkeypatch.setattr(domain, "submission_prefix_min", 1)
    shared, count = Counter(sid[0] for sid in sids).most_common(1)[0]
    assert count >= 2
    with pytest.raises(InvalidInput) as ambiguous:
        desk.ledger.explain_submission(shared)
    assert ambiguous.value.message == (
        f"{count} submissions start with {shared!r}; give more of the id")
    assert ambiguous.value.context["path"] == "submission_id"
    assert desk.head == head


def test_a_write_names_a_submission_by_its_whole_id_and_is_told_which_a_prefix_means(
    desk: Desk,
) -> None:
    # A write acts on exactly what it names: a prefix copied from a table is refused at
    # submission_id, naming the submission it stands for, not as a malformed stream name.
    desk.commission()
    sid = desk.ledger.intake(desk.arrival(content="d1", payment_ref="pay-1"),
                             payment_amount_rao=FEE).submission_id
    head = desk.head
    writes = [
        lambda named: desk.ledger.hold(named, "review", 1_010),
        lambda named: desk.ledger.release(named, "reviewed", 1_010, "5Operator"),
        lambda named: desk.ledger.requeue(named, "again", 1_010),
        lambda named: desk.ledger.expire(1_010, named),
        lambda named: desk.ledger.claim(attempt_id="att-1", pair_id="p", block=1_010,
                                        validator_hotkey="5V", submission_id=named),
    ]
    for write in writes:
        for named in (sid[:16], sid.upper()):
            with pytest.raises(InvalidInput) as meant:
                write(named)
            assert meant.value.message == (
                "a submission is named here by its whole id, 64 lowercase hex characters; "
                f"{named!r} stands for submission {sid}")
            assert meant.value.context["path"] == "submission_id"
        for named in ("nope", sid + "0", "F" * 64):  # capitals of no submission: no hint
            with pytest.raises(InvalidInput) as malformed:
                write(named)
            assert malformed.value.message == (
                "a submission is named here by its whole id, 64 lowercase hex characters")
    assert desk.head == head
    desk.ledger.hold(sid, "review", 1_010)  # the whole id is written as before
    assert desk.head == head + 1


def test_intake_for_an_arena_that_does_not_exist_writes_nothing(desk: Desk) -> None:
    with pytest.raises(NotFound) as caught:
        desk.intake(FEE, arena_id="nowhere", content="d1")
    assert caught.value.context == {"arena_id": "nowhere"}
    assert desk.head == 0


# --- projections -----------------------------------------------------------------------------


def realistic_history(desk: Desk) -> dict[str, str]:
    """Writes a history touching every projection; returns the submission ids by name."""
    listed = samples.hex64("delta:control")
    desk.commission(sealed=samples.policy(futility_margin="0.01", sla_blocks=100_000,
                                          audit_control_delta_digests=[listed]))
    desk.commission("cache-arena", fee_rao=0)
    desk.ledger.register_control(ARENA, {"control_id": "ctl-1", "kind": "wrong_mlp",
                                         "delta_digest": listed, "expected_verdict": "FAIL"})
    desk.ledger.grant_credit("cr-1", "5Credit", FEE, "welcome")
    desk.ledger.grant_credit("cr-2", "5Unused", FEE, "never spent")
    ids = {"passed": qualified(desk, "passed", "att-1")}
    ids["futile"] = desk.admitted("futile")
    desk.claim(ids["futile"], "att-2")
    desk.windows("att-2", SLOWER[:2])
    desk.ledger.conclude("att-2", 1_020)
    ids["duplicate"] = desk.intake(FEE, content="futile", block=1_100,
                                   payment_ref="pay-dup").submission_id
    ids["credit"] = desk.intake(None, content="credit", hotkey="5Credit").submission_id
    ids["requeued"] = desk.admitted("requeued")
    faulted(desk, ids["requeued"], "att-3", "adapter_start_failed")
    ids["killed"] = desk.admitted("killed")
    faulted(desk, ids["killed"], "att-4", "engine_killed", windows=2)
    ids["held"] = desk.admitted("held")
    desk.ledger.hold(ids["held"], "operator", 1_030)
    ids["control"] = desk.admitted("control", delta_digest=listed)
    desk.claim(ids["control"], "att-5", plan="calibration_observation")
    desk.windows("att-5", WORKED[:1])  # left live, mid-speed
    ids["free"] = desk.intake(None, arena_id="cache-arena", content="free").submission_id
    ids["expired"] = desk.admitted("expired", block=500)
    desk.ledger.expire(100_500, ids["expired"])
    return ids


def test_the_cached_fold_equals_a_fresh_fold(desk: Desk, store_url: str) -> None:
    ids = realistic_history(desk)
    cached = desk.ledger.fold
    with ArenaLedger(store_url) as fresh:
        rebuilt = fresh.fold
        assert rebuilt.snapshot() == cached.snapshot()
        assert (rebuilt.position, rebuilt.events) == (cached.position, cached.events)
        assert rebuilt.refusals == cached.refusals == []
        assert fresh.submissions() == desk.ledger.submissions()
        assert fresh.controls(ARENA) == desk.ledger.controls(ARENA)
    snapshot = cached.snapshot()
    assert snapshot["position"] == desk.head
    status = {name: snapshot["submissions"][sid].status for name, sid in ids.items()}
    assert status == {
        "passed": "QUALIFIED", "futile": "FAILED", "duplicate": "REJECTED", "credit": "QUEUED",
        "requeued": "QUEUED", "killed": "NO_DECISION", "held": "HELD",
        "control": "QUALIFYING", "free": "QUEUED", "expired": "EXPIRED",
    }
    assert set(snapshot["queued"][ARENA]) == {ids["credit"], ids["requeued"]}
    assert snapshot["unspent"] == {"5Unused": {"cr-2": FEE}}
    assert snapshot["attempts"]["att-5"].status == "SPEED"
    assert snapshot["attempts"]["att-1"].decision.speedup == "1.019129"
    [control] = desk.ledger.controls(ARENA)
    assert (control["control_id"], control["submission_id"], control["outcome"]) == (
        "ctl-1", ids["control"], "pending")


def test_a_fold_caught_up_in_steps_equals_one_caught_up_at_once(
    desk: Desk, store_url: str
) -> None:
    realistic_history(desk)
    head = desk.head
    with ArenaLedger(store_url) as stepwise, ArenaLedger(store_url) as whole:
        from machines.projection import LedgerFold

        stepwise.guard.fold = LedgerFold()
        for upto in range(1, head + 1, 7):
            for recorded in stepwise.store.read_all(stepwise.guard.fold.position + 1,
                                                    to_position=upto):
                stepwise.guard.fold.apply(recorded.position, recorded.stream,
                                          recorded.event(), recorded.payload)
        assert stepwise.fold.snapshot() == whole.fold.snapshot()
        assert whole.fold.position == head


@pytest.mark.parametrize("ticks", [3, 10_000])  # 3: the collector-paused path on this history
def test_catch_up_folds_what_the_recorded_events_decode_to(
    desk: Desk, store_url: str, ticks: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The guard reads raw rows and decodes them with ``services.replay.decoder``; the fold it
    builds equals one built from ``read_all`` and ``CATALOGUE.decode``, event for event."""
    import gc

    import services.gc_pause
    import services.replay
    from machines.projection import LedgerFold
    from vocabulary.catalogue import CATALOGUE

    realistic_history(desk)
    policy = desk.ledger.set_emission_policy(360, "5Burn", "5Validator")
    desk.intake(arena_id=ARENA, content="after-the-policy")
    monkeypatch.setattr(services.replay, "ticks_between_freezes", ticks)
    ticked: list[int] = []
    tick = services.gc_pause.CollectorPaused.tick
    monkeypatch.setattr(services.gc_pause.CollectorPaused, "tick",
                        lambda self: (ticked.append(gc.get_freeze_count()), tick(self)))
    collecting = gc.isenabled()
    # The whole-ledger fold (what the guard falls back to when the read models are behind).
    with ArenaLedger(store_url, seed_from_read_models=False) as fresh:
        caught_up = fresh.guard.catch_up(fresh.store)
        reference = LedgerFold()
        for recorded in fresh.store.read_all():
            payload = recorded.payload
            event = CATALOGUE.decode(recorded.type, recorded.schema_version, payload)
            reference.apply(recorded.position, recorded.stream, event, payload)
        assert caught_up == desk.head == reference.position
        assert fresh.guard.fold.snapshot() == reference.snapshot()
        assert fresh.guard.fold.events == reference.events
        assert fresh.guard.fold.refusals == reference.refusals == []
        [recorded_policy] = fresh.store.read_stream("settlement")
        assert recorded_policy.position == policy.first
        assert fresh.guard.emission_policy == recorded_policy.event()
        assert fresh.guard.catch_up(fresh.store) == 0  # nothing after the head
    # The paused path ticked every 3 events (freezing) and left the collector as it was.
    assert len(ticked) == (caught_up // 3 if ticks == 3 else 0)
    assert gc.isenabled() == collecting and gc.get_freeze_count() == 0


@pytest.mark.parametrize("seeded", [False, True], ids=["whole-fold", "seeded"])
def test_catch_up_inside_an_append_reads_through_its_transaction(
    desk: Desk, store_url: str, seeded: bool
) -> None:
    """A second ledger's guard catches up inside its own append (``conn``): it sees the
    first one's events, and its own append lands after them. A guard seeded from the read
    models starts at the head and folds its own batch as it accepts it; a whole fold folds
    up to the head and reads its batch at the next catch-up."""
    realistic_history(desk)
    before = desk.head
    with ArenaLedger(store_url, actor="second", seed_from_read_models=seeded) as second:
        assert second.guard.fold.position == 0
        result = second.set_emission_policy(360, "5Burn", "5Validator")
        assert result.first == before + 1
        assert second.guard.fold.position == before + seeded  # caught up in the append
        assert second.fold.snapshot() == desk.ledger.fold.snapshot()


def test_claim_takes_the_arenas_next_and_explain_reads_the_latest_attempt(desk: Desk) -> None:
    desk.commission()
    sid = desk.admitted("retried")
    ledger = desk.ledger
    with pytest.raises(InvalidInput) as unnamed:
        ledger.claim(attempt_id="att-0", pair_id="p", validator_hotkey="5V", block=1_010)
    assert unnamed.value.context["path"] == "submission_id"
    first = ledger.claim(attempt_id="att-1", pair_id="p", validator_hotkey="5V", block=1_010,
                         arena_id=ARENA)
    assert first.submission_id == sid
    with pytest.raises(NotFound, match="has no claimable submission"):
        ledger.claim(attempt_id="att-9", pair_id="p", validator_hotkey="5V", block=1_010,
                     arena_id=ARENA)
    ledger.fault("att-1", "adapter_start_failed", "start", "")
    assert ledger.conclude("att-1", 1_020).verdict == "NO_DECISION"
    desk.claim(sid, "att-2")
    desk.windows("att-2", SLOWER)
    second = ledger.conclude("att-2", 1_030)
    assert second.verdict == "FAIL" and second.speedup is not None

    row = ledger.explain_submission(sid)
    assert [a["attempt_id"] for a in row["attempts"]] == ["att-1", "att-2"]
    assert (row["speedup"], row["pass_line"], row["look_window"]) == (
        second.speedup, second.pass_line, second.look_window)
    arrival = Desk.arrival(content="retried", payment_ref="pay-retried")["arrival"]
    assert row["arrival"] == [arrival["block"], arrival["event_index"], arrival["event_subindex"]]

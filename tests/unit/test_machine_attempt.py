"""Checks the Attempt machine: window order, speed, audit, quality, faults, decisions."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from machines import arena, samples, submission
from machines import attempt as A
from machines.arithmetic import Decision, compile_policy
from machines.refusal import Refusal
from vocabulary.events import FAULT_CODES, Event, InfrastructureFault, Policy

BILLION = 1_000_000_000
WORKED = samples.WORKED_EXAMPLE_COSTS
SLOW = ((BILLION, 1_040_000_000),) * 4  # candidate 4 % slower everywhere
FLAT = ((BILLION, 998_000_000),) * 4  # 0.2 % faster: not enough


def _claimed(sealed: Policy | None = None, plan: str = "normal") -> A.AttemptState:
    params = compile_policy(sealed or samples.policy())
    claim = samples.claimed("a" * 64, "c" * 64, plan=plan)
    return A.claim(claim, params)


def _ok(state: A.AttemptState, *events: Event) -> A.AttemptState:
    for event in events:
        result = A.step(state, event)
        assert not isinstance(result, Refusal), str(result)
        state = result
    return state


def _refused(state: A.AttemptState, event: Event) -> Refusal:
    result = A.step(state, event)
    assert isinstance(result, Refusal), f"{event.event_type} was accepted"
    assert A.apply(state, event) is state
    return result


def _measured(state: A.AttemptState, costs: Sequence[tuple[int, int]]) -> A.AttemptState:
    for index, (stock, cand) in enumerate(costs, start=1):
        if state.speed is not None:
            break
        state = _ok(state, samples.window(index, state.params.orientation(index), stock, cand))
    return state


def _decided(state: A.AttemptState) -> A.AttemptState:
    decision = A.derive_decision(state)
    assert decision is not None
    return _ok(state, samples.decided(decision))


# --- speed -------------------------------------------------------------------------------


def test_worked_example_passes_speed_at_look_3() -> None:
    state = _measured(_claimed(), WORKED)
    assert state.status == A.AUDIT and state.last_window == 3
    assert state.speed is not None
    assert (state.speed.speedup, state.speed.pass_line, state.speed.look_window) == (
        "1.019129", "0.018884", 3,
    )
    assert [k.outcome for k in state.looks] == ["pass"]


def test_full_pass_records_the_speed_numbers() -> None:
    state = _measured(_claimed(), WORKED)
    state = _ok(state, samples.audit(), samples.quality())
    assert A.derive_decision(state) == Decision("PASS", "", "COMPLETE", "1.019129", "0.018884", 3)
    final = _decided(state)
    assert final.status == A.DECIDED
    assert _refused(final, samples.quality()).code == "terminal_state"


def test_slow_candidate_fails_candidate_slower_at_w() -> None:
    state = _measured(_claimed(), SLOW)
    assert state.status == A.SPEED and state.last_window == 4
    decision = A.derive_decision(state)
    assert decision is not None
    assert (decision.verdict, decision.reason, decision.look_window) == (
        "FAIL", "candidate_slower", 4,
    )
    assert decision.speedup is not None and decision.speedup < "1"
    assert [k.outcome for k in state.looks] == ["continue", "candidate_slower"]


def test_flat_candidate_fails_threshold_not_met() -> None:
    decision = A.derive_decision(_measured(_claimed(), FLAT))
    assert decision is not None
    assert (decision.verdict, decision.reason) == ("FAIL", "speed_threshold_not_met")
    assert decision.pass_line == "0.013075"  # exp(1.5 * sqrt(0.000075)) - 1


def test_futility_fails_after_orientation_one_with_null_numbers() -> None:
    state = _measured(_claimed(samples.policy(futility_margin="0.02")), SLOW)
    assert state.last_window == 2 and state.looks == ()
    assert A.derive_decision(state) == Decision("FAIL", "futility", "COMPLETE", None, None, 2)
    assert _refused(state, samples.window(3, 2, BILLION, BILLION)).code == (
        "window_after_speed_decided"
    )


def test_speed_fail_refuses_audit_and_quality_under_normal_plan() -> None:
    state = _measured(_claimed(), SLOW)
    assert _refused(state, samples.audit()).code == "audit_out_of_stage"
    assert _refused(state, samples.quality()).code == "quality_out_of_stage"


@pytest.mark.parametrize(
    ("event", "code"),
    [
        (samples.window(2, 1, BILLION, BILLION), "window_gap"),
        (samples.window(1, 1, BILLION, BILLION), "window_repeated"),
        (samples.window(2, 2, BILLION, BILLION), "window_orientation_wrong"),
        (samples.window(5, 2, BILLION, BILLION), "window_past_limit"),
        (samples.window(2, 1, BILLION, BILLION, candidate_tokens=7), "output_tokens_differ"),
    ],
)
def test_window_refusals(event: Event, code: str) -> None:
    state = _ok(_claimed(), samples.window(1, 1, BILLION, BILLION))
    if code == "window_gap":
        event = samples.window(3, 2, BILLION, BILLION)
    assert _refused(state, event).code == code


@pytest.mark.parametrize(
    ("orientation", "candidate_tokens", "code"),
    [(1, None, "window_orientation_wrong"), (2, 7, "output_tokens_differ")],
)
def test_the_last_window_is_refused_for_what_is_wrong_with_it(
    orientation: int, candidate_tokens: int | None, code: str
) -> None:
    # Window W is within the limit: a fault in it is named, not taken for "past the limit".
    state = _measured(_claimed(), FLAT[:3])
    assert state.speed is None and state.last_window == 3
    tokens = {} if candidate_tokens is None else {"candidate_tokens": candidate_tokens}
    last = samples.window(4, orientation, BILLION, BILLION, **tokens)
    assert _refused(state, last).code == code


def test_first_window_must_be_one() -> None:
    assert _refused(_claimed(), samples.window(2, 1, BILLION, BILLION)).code == "window_gap"


def test_window_after_speed_pass() -> None:
    state = _measured(_claimed(), WORKED)
    refusal = _refused(state, samples.window(4, 2, BILLION, 980_000_000))
    assert refusal.code == "window_after_speed_decided"
    assert (refusal.machine, refusal.state, refusal.event_type) == (
        "attempt", "AUDIT", "WindowMeasured",
    )


def test_work_mismatch_is_a_fault_not_a_speed_signal() -> None:
    state = _ok(_claimed(), samples.window(1, 1, BILLION, BILLION))
    mismatch = samples.window(2, 1, BILLION, 500_000_000, candidate_tokens=100)
    assert _refused(state, mismatch).code == "output_tokens_differ"
    fault = A.work_mismatch_fault(mismatch)
    assert (fault.code, fault.stage) == ("work_mismatch", "speed")
    faulted = _ok(state, fault)
    assert A.derive_decision(faulted) == Decision(
        "NO_DECISION", "work_mismatch", "COMPLETE", None, None, None
    )
    assert faulted.last_window == 1  # the measured windows stay


# --- audit and quality -------------------------------------------------------------------


def test_audit_violation_fails_slot_audit() -> None:
    state = _ok(_measured(_claimed(), WORKED), samples.audit(violations=1))
    assert A.derive_decision(state) == Decision(
        "FAIL", "slot_audit_failed", "COMPLETE", "1.019129", "0.018884", 3
    )
    assert _refused(state, samples.quality()).code == "audit_not_passed"


def test_audit_thin_coverage_is_no_decision() -> None:
    state = _ok(_measured(_claimed(), WORKED), samples.audit(calls=3))
    decision = A.derive_decision(state)
    assert decision is not None
    assert (decision.verdict, decision.reason, decision.disposition) == (
        "NO_DECISION", "audit_not_covered", "COMPLETE",
    )


def test_audit_with_no_node_is_not_covered() -> None:
    decision = A.derive_decision(_measured(_claimed(), WORKED))
    assert decision is not None and decision.reason == "audit_not_covered"


def test_audit_sums_ranks_and_refuses_repeats() -> None:
    state = _measured(_claimed(), WORKED)
    state = _ok(state, samples.audit(rank=0, calls=4), samples.audit(rank=1, calls=4))
    assert state.audit is not None and state.audit["model.layers.0.mlp"].calls == 8
    assert A.derive_decision(state) is None  # audit passes: quality must run
    assert _refused(state, samples.audit(rank=1)).code == "audit_node_repeated"
    assert _refused(state, samples.audit(rank=2, calls=1, violations=2)).code == (
        "audit_counts_inconsistent"
    )


@pytest.mark.parametrize(
    ("counts", "consistent"),
    [
        ({"violations": 8}, True),  # every call a violation: as many as there were calls
        ({"violations": 4, "near_misses": 3, "uncomparable": 1}, True),
        ({"violations": 1, "near_misses": 8}, False),
        ({"near_misses": 8, "uncomparable": 1}, False),
        ({"violations": 8, "uncomparable": 1}, False),
    ],
)
def test_audit_counts_may_reach_the_calls_but_not_exceed_them(
    counts: dict[str, int], consistent: bool
) -> None:
    state = _measured(_claimed(), WORKED)
    graded = samples.audit(calls=8, **counts)
    if consistent:
        assert _ok(state, graded).audit is not None
    else:
        assert _refused(state, graded).code == "audit_counts_inconsistent"


@pytest.mark.parametrize(
    ("counts", "min_score", "consistent"),
    [
        ({}, "0.99999", True),  # every comparable call at the bar
        ({}, "0.999989", False),  # a call below the bar, yet no near miss or violation
        ({"near_misses": 1}, "0.96999", True),  # exactly bar - band: a near miss
        ({"near_misses": 1}, "0.969989", False),  # below bar - band: that is a violation
        ({"near_misses": 1}, "0.999999", False),  # a near miss scores below the bar
        ({"near_misses": 1}, "0.99999", False),  # ... so not at a six-place bar either
        ({"violations": 1}, "0.969989", True),
        ({"violations": 1}, "0.96999", False),  # a violation scores below bar - band
        ({"uncomparable": 8}, "0", True),  # no comparable call: min_score says nothing
    ],
)
def test_the_lowest_score_must_be_one_the_counts_allow(
    counts: dict[str, int], min_score: str, consistent: bool
) -> None:
    # Without this, "no violation" beside min_score "0" (or any bar the grader liked)
    # audited a wrong kernel as a PASS.
    state = _measured(_claimed(), WORKED)
    graded = samples.audit(calls=8, **counts).model_copy(update={"min_score": min_score})
    if consistent:
        assert _ok(state, graded).audit is not None
    else:
        assert _refused(state, graded).code == "audit_counts_inconsistent"


def test_an_audit_graded_against_another_bar_is_refused() -> None:
    state = _measured(_claimed(), WORKED)
    lax = samples.audit().model_copy(update={"bar": "0", "min_score": "0"})
    refusal = _refused(state, lax)
    assert (refusal.code, refusal.detail) == ("audit_bar_mismatch",
                                              "bar: 0 is not the sealed 0.99999")
    assert _ok(state, samples.audit()).audit is not None  # the sealed bar, spelt as sealed


def test_audit_near_misses_above_rate_fail() -> None:
    state = _ok(_measured(_claimed(), WORKED), samples.audit(calls=100, near_misses=2))
    decision = A.derive_decision(state)
    assert decision is not None and decision.reason == "slot_audit_failed"


def test_a_thin_node_with_too_many_near_misses_fails_rather_than_goes_uncovered() -> None:
    # docs/machines.md checks the FAIL conditions first: 1 near miss in 4 calls (25% > 1%) fails
    # the audit although 4 calls are fewer than min_calls (8), which alone would leave the
    # node uncovered (NO_DECISION, never the miner's fault).
    state = _ok(_measured(_claimed(), WORKED), samples.audit(calls=4, near_misses=1))
    assert A.derive_decision(state) == Decision(
        "FAIL", "slot_audit_failed", "COMPLETE", "1.019129", "0.018884", 3
    )


def test_the_lowest_score_is_held_to_a_bar_of_more_than_six_places_as_it_floors() -> None:
    # min_score is recorded floored to six places. Under the bar 0.9999995 the violation
    # edge (bar - band) is 0.9699995: an honest violation at 0.96999949 is recorded as
    # "0.969999", which must be taken, and an honest near miss cannot floor to "0.999999"
    # (at most 0.99999949 → "0.999999" is possible) nor to the bar's own "1".
    sealed = samples.policy(audit={"bar": "0.9999995", "min_calls": 8})
    state = _measured(_claimed(sealed), WORKED)
    violation = samples.audit(calls=8, violations=1).model_copy(
        update={"min_score": "0.969999", "bar": "0.9999995"})
    decision = A.derive_decision(_ok(state, violation))
    assert decision is not None and decision.reason == "slot_audit_failed"
    near = samples.audit(calls=8, near_misses=1).model_copy(update={"bar": "0.9999995"})
    assert _ok(state, near.model_copy(update={"min_score": "0.999999"})).audit is not None
    refused = _refused(state, near.model_copy(update={"min_score": "1"}))
    assert refused.code == "audit_counts_inconsistent"


@pytest.mark.parametrize(
    ("drift_ok", "regression", "verdict", "reason"),
    [
        (True, False, "PASS", ""),
        (True, True, "FAIL", "quality_regression"),
        (False, False, "NO_DECISION", "quality_drift"),
        (False, True, "NO_DECISION", "quality_drift"),
    ],
)
def test_quality_outcomes(drift_ok: bool, regression: bool, verdict: str, reason: str) -> None:
    state = _ok(
        _measured(_claimed(), WORKED),
        samples.audit(),
        samples.quality(drift_within_envelope=drift_ok, regression=regression),
    )
    decision = A.derive_decision(state)
    assert decision is not None and (decision.verdict, decision.reason) == (verdict, reason)
    assert decision.speedup == "1.019129"
    assert _refused(state, samples.quality()).code == "quality_repeated"
    assert _refused(state, samples.audit(rank=5)).code == "audit_out_of_stage"


# --- calibration observation -------------------------------------------------------------


def _calibration(costs: Sequence[tuple[int, int]], *audits: Event) -> A.AttemptState:
    sealed = samples.policy(futility_margin="0.02", audit_control_delta_digests=["d" * 64])
    return _ok(_measured(_claimed(sealed, plan="calibration_observation"), costs), *audits)


def test_calibration_keeps_the_speed_fail_when_the_audit_passes() -> None:
    state = _calibration(SLOW, samples.audit())
    assert state.status == A.AUDIT
    assert A.derive_decision(state) == Decision("FAIL", "futility", "COMPLETE", None, None, 2)
    refusal = _refused(state, samples.quality())
    assert refusal.code == "quality_out_of_stage"


def test_calibration_audit_failure_overrides_the_speed_reason() -> None:
    state = _calibration(SLOW, samples.audit(uncomparable=1))
    decision = A.derive_decision(state)
    assert decision is not None and (decision.verdict, decision.reason) == (
        "FAIL", "slot_audit_failed",
    )


def test_calibration_uncovered_audit_is_no_decision() -> None:
    decision = A.derive_decision(_calibration(SLOW))
    assert decision is not None and (decision.verdict, decision.reason) == (
        "NO_DECISION", "audit_not_covered",
    )


def _claim_context(plan: str, listed: list[str]) -> tuple[Any, A.ClaimContext]:
    arena_state = arena.start(
        samples.commissioned(sealed=samples.policy(audit_control_delta_digests=listed))
    )
    arrived = samples.arrived(delta_digest="d" * 64)
    admitted = submission.apply(submission.start(arrived), samples_admitted())
    assert admitted is not None
    sub = admitted
    claim = samples.claimed(sub.submission_id, arena_state.commission_digest, plan=plan)
    return claim, A.ClaimContext(sub, arena_state)


def samples_admitted() -> Event:
    from vocabulary.events import SubmissionAdmitted

    return SubmissionAdmitted.model_validate(
        {"block": 1, "fee": {"kind": "waived", "ref": "", "amount_rao": 0}}
    )


def test_calibration_observation_must_be_listed() -> None:
    claim, context = _claim_context("calibration_observation", [])
    refusal = A.decide(None, claim, context)
    assert refusal is not None and refusal.code == "calibration_observation_not_listed"
    claim, context = _claim_context("calibration_observation", ["d" * 64])
    assert A.decide(None, claim, context) is None
    claim, context = _claim_context("normal", [])
    assert A.decide(None, claim, context) is None


def test_claim_checks_submission_and_commission() -> None:
    claim, context = _claim_context("normal", [])
    stale = claim.model_copy(update={"commission_digest": "e" * 64})
    assert A.decide_claim(stale, context) == A.TABLE.refuse(
        "NONE", "AttemptClaimed", "commission_not_current",
        f"current is {context.arena.commission_digest}",  # type: ignore[union-attr]
    )
    other_arena = claim.model_copy(update={"arena_id": "other"})
    refusal = A.decide_claim(other_arena, context)
    assert refusal is not None and refusal.code == "arena_mismatch"
    nobody = A.ClaimContext(None, context.arena)
    refusal = A.decide_claim(claim, nobody)
    assert refusal is not None and refusal.code == "submission_unknown"
    # A submission under qualification takes no second attempt; its own claim, seen again
    # once the submission moved on (QualificationStarted names it), still holds.
    from vocabulary.events import QualificationStarted

    qualifying = submission.apply(context.submission, QualificationStarted(
        attempt_id=claim.attempt_id))
    assert qualifying is not None and qualifying.status == submission.QUALIFYING
    under_way = A.ClaimContext(qualifying, context.arena)
    assert A.decide_claim(claim, under_way) is None
    second = claim.model_copy(update={"attempt_id": "att-second"})
    refusal = A.decide_claim(second, under_way)
    assert refusal is not None and (refusal.code, refusal.detail) == (
        "submission_not_queued", "submission is QUALIFYING")
    with pytest.raises(ValueError, match="ClaimContext"):
        A.decide(None, claim)


# --- faults and decisions ----------------------------------------------------------------


@pytest.mark.parametrize("code", FAULT_CODES)
def test_every_fault_code_decides_no_decision_with_its_disposition(code: str) -> None:
    expected = {
        "adapter_start_failed": "REQUEUE",
        "adapter_request_failed": "REQUEUE",
        "evidence_unavailable": "HOLD",
        "unproven_infrastructure_failure": "HOLD",
    }.get(code, "COMPLETE")
    for state in (_claimed(), _measured(_claimed(), WORKED[:1]), _measured(_claimed(), WORKED)):
        fault = InfrastructureFault(code=code, stage="speed", detail="")
        faulted = _ok(state, fault)
        assert faulted.status == state.status
        no_decision = Decision("NO_DECISION", code, expected, None, None, None)
        assert A.derive_decision(faulted) == no_decision
        assert _refused(faulted, samples.window(4, 2, 1, 1)).code == "fault_recorded"
        assert _refused(faulted, fault).code == "fault_recorded"
        assert _decided(faulted).status == A.DECIDED


def test_a_fault_after_quality_still_decides_no_decision() -> None:
    state = _ok(_measured(_claimed(), WORKED), samples.audit(), samples.quality())
    faulted = _ok(state, InfrastructureFault(code="engine_killed", stage="teardown", detail=""))
    decision = A.derive_decision(faulted)
    assert decision is not None and decision.reason == "engine_killed"


def test_decided_must_equal_the_derivation() -> None:
    state = _measured(_claimed(), SLOW)
    derived = A.derive_decision(state)
    assert derived is not None
    wrong = samples.decided(Decision("FAIL", "speed_threshold_not_met", "COMPLETE",
                                     derived.speedup, derived.pass_line, 4))
    refusal = _refused(state, wrong)
    assert refusal.code == "decision_mismatch" and refusal.detail.startswith("reason:")
    wrong_line = samples.decided(Decision("FAIL", "candidate_slower", "COMPLETE",
                                          derived.speedup, "0.000000", 4))
    assert _refused(state, wrong_line).detail.startswith("pass_line:")
    early = samples.decided(derived, block=5)
    assert _refused(state, early).code == "decided_before_claim"
    at_claim = samples.decided(derived, block=state.claimed_block)  # the same block will do
    assert _ok(state, at_claim).decided_block == state.claimed_block


def test_decided_before_evidence_is_refused() -> None:
    state = _measured(_claimed(), WORKED[:2])
    fake = samples.decided(Decision("FAIL", "futility", "COMPLETE", None, None, 2))
    assert _refused(state, fake).code == "decision_not_derived"
    assert _refused(_claimed(), fake).code == "decision_not_derived"
    # The detail says what the decision waits for (replay reports it as the recomputed value).
    assert _refused(state, fake).detail == "speed undecided after window 2 of 4"
    audited = _ok(_measured(_claimed(), WORKED), samples.audit())
    assert _refused(audited, fake).detail == "audit passes so far: append QualityGraded"


def test_stream_opening_rules() -> None:
    state = _claimed()
    claim = samples.claimed("a" * 64, "c" * 64)
    assert _refused(state, claim).code == "stream_already_started"
    assert A.decide(state, claim) == A.step(state, claim)  # no claim context is needed
    refusal = A.step(None, samples.window(1, 1, 1, 1))
    assert isinstance(refusal, Refusal) and refusal.code == "stream_not_started"


def test_fold_equals_step_by_step_and_explain_shows_every_number() -> None:
    params = compile_policy(samples.policy())
    claim = samples.claimed("a" * 64, "c" * 64)
    events = [samples.window(i, 1 if i <= 2 else 2, s, c) for i, (s, c) in enumerate(WORKED, 1)]
    folded = A.fold(claim, params, events)
    assert folded == _measured(A.claim(claim, params), WORKED)
    shown = A.explain(folded)
    assert shown["looks"][0]["speedup"].startswith("1.01912895")
    assert shown["looks"][0]["pass_line"].startswith("0.01888438")
    assert [w["ratio"] for w in shown["windows"]] == ["0.99", "0.985", "0.975"]
    assert shown["decision"]["reason"] == "audit_not_covered"
    assert folded.summary().decision is None


# Rules at the edges of the machine: a claim is checked against the arena and submission it names,
# a window wrong in two ways is refused for its orientation first, the audit's repeat rule is per
# (node, rank) and compares the bar by value, a decision keeps its own block and the numbers of
# the look that decided it, and explain and summary report what the state holds. Expected numbers
# are worked by hand from docs/machines.md.


LISTED = ["d" * 64]


# SLOW: every window ratio is 1.04, so R1 = R2 = 1.04 and S = exp(-ln 1.04) = 1/1.04
# = 0.9615384615… → "0.961538". Look 4 (n1 = n2 = 2, z = 1.5, σw = σb = 0.01):
# SE = sqrt((1e-4·(1/2 + 1/2) + 2·1e-4) / 4) = sqrt(7.5e-5) = 0.0086602540…,
# L = exp(1.5 · 0.0086602540) − 1 = exp(0.0129903811) − 1 = 0.0130751… → "0.013075";
# S ≤ 1 / (1 + L) = 0.98709… → candidate_slower at look 4.
SLOW_AT_4 = Decision("FAIL", "candidate_slower", "COMPLETE", "0.961538", "0.013075", 4)


# --- claims ------------------------------------------------------------------------------


def test_a_claim_checked_against_another_arena_is_refused_arena_unknown() -> None:
    claim, context = _claim_context("normal", [])
    other = arena.start(samples.commissioned("other-arena"))
    # The claim even carries the other arena's commission digest: only the arena id tells.
    claim = claim.model_copy(update={"commission_digest": other.commission_digest})
    refusal = A.decide_claim(claim, A.ClaimContext(context.submission, other))
    assert refusal is not None and (refusal.code, refusal.detail) == (
        "arena_unknown", "mlp-arena",
    )


def test_a_claim_checked_against_another_submission_is_refused_submission_unknown() -> None:
    claim, context = _claim_context("normal", [])
    neighbour = submission.apply(
        submission.start(samples.arrived(content="delta-2")), samples_admitted()
    )
    assert neighbour is not None and neighbour.status == submission.QUEUED
    assert neighbour.submission_id != claim.submission_id
    refusal = A.decide_claim(claim, A.ClaimContext(neighbour, context.arena))
    assert refusal is not None and (refusal.code, refusal.detail) == (
        "submission_unknown", claim.submission_id,
    )


# --- windows -----------------------------------------------------------------------------


def test_a_window_wrong_in_orientation_and_tokens_is_refused_for_its_orientation() -> None:
    # docs/machines.md orders the codes: … window_orientation_wrong, output_tokens_differ.
    state = _measured(_claimed(), WORKED[:1])
    both = samples.window(2, 2, BILLION, BILLION, candidate_tokens=7)
    refusal = _refused(state, both)
    assert (refusal.code, refusal.detail) == ("window_orientation_wrong", "orientation: expected 1")
    state = _measured(_claimed(), WORKED[:2])
    both = samples.window(3, 1, BILLION, BILLION, candidate_tokens=7)
    assert _refused(state, both).code == "window_orientation_wrong"


def test_the_work_mismatch_fault_names_each_arms_token_count() -> None:
    mismatch = samples.window(2, 1, BILLION, BILLION, tokens=512, candidate_tokens=500)
    fault = A.work_mismatch_fault(mismatch)
    assert (fault.code, fault.stage, fault.detail) == (
        "work_mismatch", "speed", "window 2: stock produced 512 output tokens, candidate 500",
    )


# --- audit -------------------------------------------------------------------------------


def test_two_nodes_graded_at_the_same_rank_are_both_kept() -> None:
    state = _ok(
        _measured(_claimed(), WORKED),
        samples.audit("model.layers.0.mlp", rank=0, calls=64),
        samples.audit("model.layers.1.mlp", rank=0, calls=32),
    )
    assert state.audit is not None
    assert {node: t.calls for node, t in state.audit.items()} == {
        "model.layers.0.mlp": 64, "model.layers.1.mlp": 32,
    }
    assert A.derive_decision(state) is None  # both nodes pass: quality must run
    assert _refused(state, samples.audit("model.layers.1.mlp", rank=0)).code == (
        "audit_node_repeated"
    )


def test_the_bar_is_compared_by_value_whatever_its_exponent() -> None:
    # Decimal("0.0000001") prints as "1E-7"; the event spells it canonically, as sealed.
    sealed = samples.policy(audit={"bar": "0.0000001", "min_calls": 8})
    state = _measured(_claimed(sealed), WORKED)
    graded = samples.audit().model_copy(update={"bar": "0.0000001"})
    after = _ok(state, graded)
    assert after.audit is not None and after.audit["model.layers.0.mlp"].calls == 64


# --- decisions ---------------------------------------------------------------------------


def test_a_calibration_fail_at_w_keeps_the_numbers_of_its_look() -> None:
    # No futility margin: speed runs to look 4 and FAILs there (SLOW_AT_4); the audit passes,
    # so the speed FAIL stands with the speedup, pass line and look that decided it.
    sealed = samples.policy(audit_control_delta_digests=LISTED)
    state = _ok(_measured(_claimed(sealed, plan="calibration_observation"), SLOW),
                samples.audit())
    assert state.status == A.AUDIT and state.last_window == 4
    assert A.derive_decision(state) == SLOW_AT_4
    assert A.derive_decision(_ok(state, samples.audit(rank=1, violations=1))) == Decision(
        "FAIL", "slot_audit_failed", "COMPLETE", "0.961538", "0.013075", 4,
    )


def test_a_decision_keeps_its_own_block() -> None:
    state = _measured(_claimed(), SLOW)
    assert state.claimed_block == 1_010
    decided = _ok(state, samples.decided(SLOW_AT_4, block=1_020))
    assert decided.decided_block == 1_020
    assert decided.summary().decided_block == 1_020
    assert decided.summary().decision == SLOW_AT_4


def test_a_decision_one_block_before_the_claim_is_refused() -> None:
    state = _measured(_claimed(), SLOW)
    refusal = _refused(state, samples.decided(SLOW_AT_4, block=1_009))
    assert (refusal.code, refusal.detail) == (
        "decided_before_claim", "decided_block: 1009 < claimed_block 1010",
    )


def test_a_mismatch_names_the_first_differing_field() -> None:
    # reason and look_window both differ: the detail names reason, first in event order.
    state = _measured(_claimed(), SLOW)
    wrong = SLOW_AT_4._replace(reason="speed_threshold_not_met", look_window=3)
    refusal = _refused(state, samples.decided(wrong))
    assert (refusal.code, refusal.detail) == (
        "decision_mismatch",
        "reason: derived 'candidate_slower', event has 'speed_threshold_not_met'",
    )


def test_a_decided_attempt_with_a_fault_refuses_further_events_as_terminal() -> None:
    faulted = _ok(
        _measured(_claimed(), WORKED[:3]),
        InfrastructureFault(code="engine_killed", stage="speed", detail=""),
    )
    decided = _ok(faulted, samples.decided(
        Decision("NO_DECISION", "engine_killed", "COMPLETE", None, None, None)
    ))
    assert decided.status == A.DECIDED
    assert _refused(decided, samples.audit()).code == "terminal_state"
    assert _refused(decided, samples.quality()).code == "terminal_state"


def test_a_decision_asked_of_a_bare_claim_says_no_window_was_measured() -> None:
    fake = samples.decided(Decision("FAIL", "futility", "COMPLETE", None, None, 2))
    refusal = _refused(_claimed(), fake)
    assert (refusal.code, refusal.detail) == (
        "decision_not_derived", "speed undecided after window 0 of 4",
    )


# --- reporting ---------------------------------------------------------------------------


def test_explain_shows_the_futility_limit_one_plus_f() -> None:
    params = compile_policy(samples.policy(futility_margin="0.02"))
    state = A.claim(samples.claimed("a" * 64, "c" * 64), params)
    assert A.explain(state)["futility_limit"] == "1.02"  # 1 + 0.02
    assert A.explain(_claimed())["futility_limit"] is None  # no margin sealed


def test_a_summary_carries_the_attempts_status() -> None:
    state = _measured(_claimed(), WORKED)
    assert state.summary().status == A.AUDIT
    assert _measured(_claimed(), SLOW).summary().status == A.SPEED

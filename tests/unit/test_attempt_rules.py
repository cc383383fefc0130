"""Pins Attempt machine rules that a hand-made mutation review of machines/attempt.py found
no test holding.

- Claims: a context whose arena or submission is another one than the claim names is
  refused (`arena_unknown`, `submission_unknown`), never taken for the claimed one.
- Windows: a window wrong in orientation and in token counts is refused for its
  orientation, the first code in docs/machines.md's order.
- Audit: the repeat rule is per (node, rank): two nodes graded at one rank are both summed;
  the bar is compared by value, whatever exponent its Decimal carries.
- Decisions: a calibration FAIL at window W keeps the numbers of the look that decided it
  (DOMAIN §4); AttemptDecided keeps its own decided_block, is refused one block before the
  claim, and a mismatch names the first differing field; a decided attempt that had a fault
  refuses further events as terminal.
- Reporting: explain shows the futility limit 1 + f, the mismatch fault's detail names
  each arm's tokens, a summary carries the attempt's status, and a decision asked of a bare
  claim says no window was measured.

Expected numbers are worked by hand from DOMAIN §6 (the arithmetic is in a comment).
Each test fails on a one-line change to machines/attempt.py that the rest of the suite lets
through.
"""

from __future__ import annotations

from test_machine_attempt import (  # same directory, prepend import mode
    BILLION,
    SLOW,
    WORKED,
    _claim_context,
    _claimed,
    _measured,
    _ok,
    _refused,
    samples_admitted,
)

from machines import arena, samples, submission
from machines import attempt as A
from machines.arithmetic import Decision, compile_policy
from vocabulary.events import InfrastructureFault

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

"""Lists every reason code the machines emit, with its meaning, stated cause and next step.

This is the one table of codes: intake rejections, verdict reasons, infrastructure fault codes,
hold and expiry reasons, the refusal codes the machines give when they refuse an event, and
why settlement-rules.v2 suspends an arena.
The CLI and docs/machines.md render it; ``Refusal`` refuses to carry a code missing here.
Codes are stable: never renamed, never reused for another meaning.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

__all__ = [
    "CONTROLS_STALE",
    "CONTROL_UNEXPECTED",
    "DUPLICATE_PREFIX",
    "KINDS",
    "NOISE_ABOVE_SEAL",
    "REASONS",
    "VERDICT_DISPOSITIONS",
    "ReasonCode",
    "codes_of_kind",
    "describe",
    "duplicate_reason",
    "verdict_disposition",
]

#: Kinds of code, in the order docs list them.
KINDS = ("rejection", "verdict", "fault", "hold", "expiry", "refusal", "suspension")

#: Prefix of the parametrised rejection ``duplicate_of:<first 16 hex>:<its reason>``.
DUPLICATE_PREFIX = "duplicate_of"

#: paired-windows.v2's noise guard verdict: the windows spread wider than the sealed σw.
NOISE_ABOVE_SEAL = "noise_above_seal"

#: The disposition of a verdict reason's NO_DECISION where it is not COMPLETE: the noise
#: guard found the host noisier than sealed, which says nothing of the delta, so it queues
#: the submission again (within the retry budget).
VERDICT_DISPOSITIONS: Mapping[str, str] = {NOISE_ABOVE_SEAL: "REQUEUE"}

#: Why settlement-rules.v2 suspends an arena (a SettlementComputed's ``suspensions``).
CONTROL_UNEXPECTED = "control_unexpected"
CONTROLS_STALE = "controls_stale"


@dataclass(frozen=True)
class ReasonCode:
    """Describes one stable code: what it means, what the miner is told, what to do next."""

    code: str
    kind: str
    meaning: str
    cause: str
    next_step: str


def _r(code: str, kind: str, meaning: str, cause: str, next_step: str) -> ReasonCode:
    return ReasonCode(code, kind, meaning, cause, next_step)


_REJECTIONS = (
    _r("missing_eval_cost_payment", "rejection",
       "The submission names no payment and its hotkey holds no unspent credit.",
       "No evaluation fee was paid for this submission.",
       "Pay the arena's fee_rao and resubmit naming the payment, or ask for a credit."),
    _r("eval_cost_payment_used", "rejection",
       "The named payment already paid for another submission.",
       "The payment you named was already consumed by an earlier submission.",
       "Make a new payment; a payment pays for exactly one submission."),
    _r("eval_cost_payment_invalid", "rejection",
       "The named payment is not on chain or its amount is below the arena's fee.",
       "Your payment was missing or smaller than the arena's evaluation fee.",
       "Pay at least the arena's fee_rao (see `arena-ledger events --type "
       "ArenaCommissioned`) and resubmit."),
    _r("hotkey_epoch_admission_limit", "rejection",
       "The hotkey already has 16 admissions in this admission epoch (block // 360).",
       "Too many submissions from your hotkey in one epoch of 360 blocks.",
       "Wait for the next epoch (the next multiple of 360 blocks) and resubmit."),
    _r(DUPLICATE_PREFIX, "rejection",
       "The same content_hash already FAILED under the arena's current commission; written "
       "duplicate_of:<first 16 hex of that submission>:<its reason>.",
       "This exact delta already failed on this commission; it would fail again.",
       "Change the delta, or wait for a re-commissioned arena. A PASS is never replayed."),
    _r("arena_retired", "rejection",
       "The arena was retired before the submission was admitted.",
       "The arena no longer takes submissions.",
       "Submit to an active arena (see `arena-ledger events --type ArenaCommissioned`)."),
)

_VERDICTS = (
    _r("futility", "verdict",
       "FAIL: after orientation 1 the candidate/stock cost ratio R1 exceeded 1 + futility_margin.",
       "Your candidate was clearly slower than stock in the first orientation.",
       "Profile the delta; the remaining windows were not run."),
    _r("candidate_slower", "verdict",
       "FAIL at the last window: speedup S <= 1 / (1 + pass line L).",
       "Your candidate was measurably slower than stock.",
       "Profile the delta against stock on the arena's hardware and resubmit a faster one."),
    _r("speed_threshold_not_met", "verdict",
       "FAIL at the last window: S - 1 stayed below the pass line L, but not significantly slower.",
       "Your candidate was not measurably faster than the sealed pass line.",
       "Find a larger speedup; the gain must clear the noise-derived pass line."),
    _r("slot_audit_failed", "verdict",
       "FAIL: an audited node had a violation, an uncomparable output (NaN, Inf, shape), or "
       "near misses above near_miss_rate_max of its calls.",
       "Your delta changed the node's outputs beyond the sealed audit bar.",
       "Make the node numerically faithful to stock (see `explain` for the node and counts)."),
    _r("audit_not_covered", "verdict",
       "NO_DECISION: no node was graded, or a node had fewer than min_calls calls.",
       "The audit did not observe enough calls to decide; this is not your failure.",
       "Nothing for the miner; an operator may requeue the submission."),
    _r("quality_drift", "verdict",
       "NO_DECISION: the pristine quality check drifted outside its envelope.",
       "The quality check could not establish authority; this is not your failure.",
       "Nothing for the miner; an operator investigates the grader and may requeue."),
    _r(NOISE_ABOVE_SEAL, "verdict",
       "NO_DECISION (REQUEUE), paired-windows.v2 only: the windows' log-ratios spread wider "
       "within their orientations than the sealed window_noise allows (chi-square statistic "
       "T above its 1 − noise_guard_alpha quantile), checked where speed could be decided.",
       "The measuring host was noisier than the arena's sealed noise; this is not your "
       "failure.",
       "Nothing for the miner; it is queued again automatically (at most 3 requeues). An "
       "operator whose host stays this noisy re-commissions with a calibrated window_noise."),
    _r("quality_regression", "verdict",
       "FAIL: the pristine quality check found a regression against stock.",
       "Your delta changed the model's outputs (argmax agreement regressed).",
       "Fix the delta so generations match stock."),
)

_FAULTS = (
    _r("engine_killed", "fault",
       "NO_DECISION (COMPLETE): an engine process was killed during the attempt.",
       "The evaluation was interrupted by infrastructure; this is not your failure.",
       "An operator inspects the pair; requeue with `arena-ledger requeue` if appropriate."),
    _r("pod_service_restart", "fault",
       "NO_DECISION (COMPLETE): the pod's service restarted during the attempt.",
       "The evaluation was interrupted by infrastructure; this is not your failure.",
       "An operator inspects the pod; requeue with `arena-ledger requeue` if appropriate."),
    _r("adapter_start_failed", "fault",
       "NO_DECISION (REQUEUE): the engine adapter did not start; nothing ran.",
       "The evaluation could not start; it is queued again automatically.",
       "Nothing; the submission is requeued (at most 3 automatic requeues)."),
    _r("adapter_request_failed", "fault",
       "NO_DECISION (REQUEUE): a request to the engine adapter failed; nothing ran.",
       "The evaluation could not run; it is queued again automatically.",
       "Nothing; the submission is requeued (at most 3 automatic requeues)."),
    _r("adapter_timeout", "fault",
       "NO_DECISION (COMPLETE): the engine adapter timed out.",
       "The evaluation timed out in infrastructure; this is not your failure.",
       "An operator checks the pair's health and may requeue."),
    _r("work_mismatch", "fault",
       "NO_DECISION (COMPLETE): stock and candidate produced different output token counts in "
       "a window, so the costs are not comparable; never a speed signal.",
       "The two engines did not do the same work; no speed verdict was possible.",
       "Check that the delta does not change generation length; an operator may requeue."),
    _r("evidence_unavailable", "fault",
       "NO_DECISION (HOLD): evidence needed to decide is unavailable.",
       "The evaluation evidence was lost; the submission is held for an operator.",
       "An operator restores evidence or releases the hold."),
    _r("unproven_infrastructure_failure", "fault",
       "NO_DECISION (HOLD): a failure was suspected but not proven to be infrastructure.",
       "The evaluation failed in a way not yet attributed; the submission is held.",
       "An operator investigates and releases the hold (or keeps it)."),
)

_HOLDS = (
    _r("retry_budget_exhausted", "hold",
       "HELD: the 4th NO_DECISION with disposition REQUEUE; 3 automatic requeues were used.",
       "Infrastructure failed repeatedly on your submission; it waits for an operator.",
       "An operator releases the hold (HoldReleased), which grants one more attempt."),
    _r("sla_expired", "expiry",
       "EXPIRED: the finalized block is at least sla_blocks past the arrival block.",
       "Your submission was not decided within the arena's SLA; the fee may be released.",
       "Resubmit if the delta is still relevant."),
)

_REFUSALS = (
    _r("stream_not_started", "refusal",
       "The stream has no opening event yet (e.g. a WindowMeasured before AttemptClaimed).",
       "-", "Append the stream's opening event first."),
    _r("stream_already_started", "refusal",
       "The stream already has its opening event; it cannot be opened twice.",
       "-", "Use a new stream id (attempt_id, payment_ref...)."),
    _r("terminal_state", "refusal",
       "The stream is in a terminal state, which absorbs nothing.",
       "-", "Nothing can be appended to this stream; start a new one if needed."),
    _r("transition_not_allowed", "refusal",
       "The event is not allowed in the stream's current state.",
       "-", "Check the state diagram in docs/machines.md for what may follow."),
    _r("wrong_stream", "refusal",
       "The event belongs to another stream category than the stream named.",
       "-", "Append it to a stream of its category (arena-, submission-, attempt-...)."),
    _r("stream_id_mismatch", "refusal",
       "The id in the stream name differs from the id the event carries.",
       "-", "Name the stream after the event's id (e.g. attempt-<attempt_id>)."),
    _r("event_type_unknown", "refusal",
       "The machines know no rule for this event type.",
       "-", "Upcast the event to a current schema version first."),
    _r("arena_unknown", "refusal",
       "The event names an arena that was never commissioned.",
       "-", "Commission the arena first (ArenaCommissioned)."),
    _r("arena_id_mismatch", "refusal",
       "A re-commission names another arena_id than the arena stream's.",
       "-", "Append ArenaCommissioned to the arena's own stream."),
    _r("reward_margin_negative", "refusal",
       "ArenaCommissioned seals a negative policy.reward_margin, which every settlement "
       "would refuse.",
       "-", "Seal a reward_margin of 0 or more (the default is 0.015)."),
    _r("pass_line_out_of_range", "refusal",
       "ArenaCommissioned seals a z whose pass line (1 + g)·exp(z·SE) − 1 has 28 or more "
       "integer digits (or overflows the 34-digit arithmetic): a look failing against it "
       "could never record its FAIL.",
       "-", "Seal critical values of a usual size (z of a few units; see docs/machines.md)."),
    _r("control_id_reused", "refusal",
       "A control with this control_id is already registered on the arena.",
       "-", "Choose a new control_id."),
    _r("submission_id_mismatch", "refusal",
       "submission_id is not digest(arena-ledger.arrival, arrival fields).",
       "-", "Compute submission_id from the arrival (machines.submission.submission_id_of)."),
    _r("intake_mismatch", "refusal",
       "SubmissionAdmitted/SubmissionRejected differs from what the intake rules derive.",
       "-", "Append what machines.intake.intake returns for the submission."),
    _r("already_held", "refusal",
       "The submission is already HELD.",
       "-", "Release the hold first, or leave it."),
    _r("sla_not_reached", "refusal",
       "SubmissionExpired names a block less than sla_blocks past the arrival block.",
       "-", "Expire only once block - arrival.block >= sla_blocks."),
    _r("attempt_mismatch", "refusal",
       "The event names an attempt other than the submission's current one.",
       "-", "Resolve the submission with its current attempt_id."),
    _r("attempt_not_claimed", "refusal",
       "QualificationStarted names an attempt that no AttemptClaimed has opened.",
       "-", "Append the attempt's AttemptClaimed (naming this submission) first."),
    _r("attempt_not_decided", "refusal",
       "SubmissionResolved arrived before its attempt's AttemptDecided.",
       "-", "Append AttemptDecided to the attempt stream first."),
    _r("resolution_mismatch", "refusal",
       "SubmissionResolved differs from the attempt's AttemptDecided (field named in detail).",
       "-", "Copy verdict, reason and disposition from AttemptDecided."),
    _r("disposition_invalid", "refusal",
       "A PASS or FAIL carries a disposition other than COMPLETE.",
       "-", "PASS and FAIL are always COMPLETE."),
    _r("submission_unknown", "refusal",
       "AttemptClaimed names a submission the ledger does not hold.",
       "-", "Claim only submissions that arrived and were admitted."),
    _r("arena_mismatch", "refusal",
       "AttemptClaimed names another arena than the submission's.",
       "-", "Claim under the submission's arena."),
    _r("submission_not_queued", "refusal",
       "AttemptClaimed for a submission that is not QUEUED.",
       "-", "Claim only QUEUED submissions (see the queue)."),
    _r("commission_not_current", "refusal",
       "AttemptClaimed names a commission_digest other than the arena's current one.",
       "-", "Claim under the current commission; attempts are never regraded."),
    _r("calibration_observation_not_listed", "refusal",
       "Plan calibration_observation for a delta not in audit_control_delta_digests.",
       "-", "Use plan normal, or list the delta in the sealed policy."),
    _r("window_past_limit", "refusal",
       "WindowMeasured with a window index past the policy's W.",
       "-", "Measure windows 1..W only."),
    _r("window_after_speed_decided", "refusal",
       "WindowMeasured after the speed stage was decided (PASS, FAIL or futility).",
       "-", "Stop measuring; go on to the audit or AttemptDecided."),
    _r("window_repeated", "refusal",
       "WindowMeasured repeats a window already measured.",
       "-", "Measure the next window index."),
    _r("window_gap", "refusal",
       "WindowMeasured skips a window index.",
       "-", "Measure windows in order 1, 2, 3..."),
    _r("window_orientation_wrong", "refusal",
       "WindowMeasured's orientation is not the one the policy prescribes for its index.",
       "-", "Orientation 1 for windows 1..W//2, orientation 2 for the rest."),
    _r("output_tokens_differ", "refusal",
       "WindowMeasured whose stock and candidate output token counts differ: a work mismatch "
       "is never a speed signal.",
       "-", "Append InfrastructureFault code=work_mismatch instead "
       "(machines.attempt.work_mismatch_fault builds it)."),
    _r("audit_out_of_stage", "refusal",
       "AuditNodeGraded outside the audit stage (before a speed PASS, or after quality).",
       "-", "Audit only after a speed PASS (or a calibration_observation speed FAIL)."),
    _r("audit_node_repeated", "refusal",
       "AuditNodeGraded repeats a (node, rank) already graded.",
       "-", "Append one AuditNodeGraded per node and rank."),
    _r("audit_counts_inconsistent", "refusal",
       "AuditNodeGraded with violations + near_misses + uncomparable above calls, or a "
       "min_score the counts rule out (e.g. no violation yet a score below bar - band).",
       "-", "Fix the bridge's counting."),
    _r("audit_bar_mismatch", "refusal",
       "AuditNodeGraded names another bar than the commission's sealed audit bar.",
       "-", "Grade against the sealed policy's audit.bar."),
    _r("audit_not_passed", "refusal",
       "QualityGraded although the audit so far fails or is not covered.",
       "-", "Append AttemptDecided with the audit's outcome instead."),
    _r("quality_out_of_stage", "refusal",
       "QualityGraded before the audit stage, or under calibration_observation after a speed "
       "FAIL (quality never runs then).",
       "-", "Run quality only after the audit passes."),
    _r("quality_repeated", "refusal",
       "A second QualityGraded in the same attempt.",
       "-", "Append AttemptDecided."),
    _r("fault_recorded", "refusal",
       "An event other than AttemptDecided after an InfrastructureFault.",
       "-", "Append AttemptDecided with the fault's NO_DECISION."),
    _r("decision_not_derived", "refusal",
       "AttemptDecided before the recorded evidence decides the attempt.",
       "-", "Append the missing windows, audits or quality first."),
    _r("decision_mismatch", "refusal",
       "AttemptDecided differs from the decision the fold derived (field named in detail).",
       "-", "Append exactly machines.attempt.derive_decision(state)."),
    _r("rules_version_mismatch", "refusal",
       "AttemptDecided names another rules_version than the policy_version of the commission "
       "the attempt was claimed under.",
       "-", "Record the sealed policy's version (machines.arithmetic.PolicyParams.rules_version)."),
    _r("decided_before_claim", "refusal",
       "AttemptDecided's decided_block is before the attempt's claimed_block.",
       "-", "Use the finalized block at decision time."),
    _r("credit_hotkey_mismatch", "refusal",
       "CreditSpent for a submission of another hotkey than the credit's.",
       "-", "Spend a credit only on its own hotkey's submission."),
    _r("fee_mismatch", "refusal",
       "PaymentConsumed or CreditSpent does not pay the fee its submission was admitted "
       "with (another kind, ref or amount).",
       "-", "Append the fee event intake gives with the admission, in the same append."),
    _r("fee_unpaid", "refusal",
       "AttemptClaimed for a submission whose admission's PaymentConsumed or CreditSpent has "
       "not been recorded.",
       "-", "Append the fee event the admission names first (intake appends them together)."),
    _r("payment_submission_mismatch", "refusal",
       "PaymentReleased names another submission than the one the payment paid for.",
       "-", "Release the payment for the submission that consumed it."),
    _r("calibration_target_mismatch", "refusal",
       "CalibrationStarted whose measured_digest is not the digest of its engine, model and "
       "hardware, or not its arena's current commission's.",
       "-", "Measure the arena's current engine (machines.calibration.measured_digest)."),
    _r("calibration_window_out_of_order", "refusal",
       "CalibrationWindowMeasured that is not the next planned (boot, window, orientation).",
       "-", "Measure boot rounds 1..boots, each windows 1..W, orientations as in an attempt."),
    _r("calibration_incomplete", "refusal",
       "CalibrationConcluded before every planned window is measured.",
       "-", "Append the missing CalibrationWindowMeasured events first."),
    _r("calibration_mismatch", "refusal",
       "CalibrationConcluded differs from what the calibration rules derive from its windows "
       "(field named in detail), or its block precedes the start's.",
       "-", "Append exactly machines.calibration.derive_conclusion(state)."),
)

_SUSPENSIONS = (
    _r(CONTROL_UNEXPECTED, "suspension",
       "settlement-rules.v2: the arena's latest complete control run at or before the "
       "settlement block has an unexpected outcome; its pool goes to the burn hotkey.",
       "The validator's own controls did not behave as registered, so its verdicts in this "
       "arena are not trusted for rewards until they do.",
       "The operator finds what broke the grader (`arena-ledger controls ARENA`), fixes it "
       "and runs the controls again (`run-controls`)."),
    _r(CONTROLS_STALE, "suspension",
       "settlement-rules.v2: the arena has no complete control run within the policy's "
       "control_max_age_blocks blocks before the settlement block.",
       "The validator has not shown recently that its grader still tells good from bad "
       "kernels in this arena.",
       "The operator runs the arena's controls (`run-controls --block B`) before settling."),
)

#: Every code by name, in the order docs list them.
REASONS: Mapping[str, ReasonCode] = {
    r.code: r
    for r in (*_REJECTIONS, *_VERDICTS, *_FAULTS, *_HOLDS, *_REFUSALS, *_SUSPENSIONS)
}


def codes_of_kind(kind: str) -> tuple[str, ...]:
    """Returns the codes of one kind in table order."""
    return tuple(code for code, entry in REASONS.items() if entry.kind == kind)


def duplicate_reason(submission_id: str, reason: str) -> str:
    """Spells the rejection ``duplicate_of:<first 16 hex of submission_id>:<reason>``."""
    return f"{DUPLICATE_PREFIX}:{submission_id[:16]}:{reason}"


def verdict_disposition(reason: str) -> str:
    """Returns the disposition of a NO_DECISION verdict with ``reason`` (COMPLETE unless
    ``VERDICT_DISPOSITIONS`` names another)."""
    return VERDICT_DISPOSITIONS.get(reason, "COMPLETE")


def describe(reason: str) -> ReasonCode | None:
    """Returns the table entry of a recorded reason (``duplicate_of:…`` included), or None."""
    entry = REASONS.get(reason)
    if entry is None and reason.startswith(DUPLICATE_PREFIX + ":"):
        return REASONS[DUPLICATE_PREFIX]
    return entry

"""Folds an ``attempt-<attempt_id>`` stream through the Attempt machine (docs/machines.md).

``CLAIMED`` → ``SPEED`` → ``AUDIT`` → ``QUALITY`` → ``DECIDED``, under the sealed policy of
the commission the attempt was claimed under. The fold keeps every window, from which
``AttemptState.looks`` recomputes every number of every look at full precision, so
``explain`` can show them, and ``derive_decision`` returns what AttemptDecided must carry;
AttemptDecided is refused unless it equals that derivation.

Speed: each look is decided from a float estimate of S (exact integer products, one
correctly rounded division and square root) whenever that estimate is clearly away from the
pass line, the FAIL split and a 6-place rounding tie; otherwise by the Decimal look of
``machines.arithmetic``. Both give the same verdict and the same recorded digits; the float
is never recorded (``_speed_of``, tested against the Decimal look in
tests/unit/test_machine_fast_paths.py).

Rules this module fixes beyond the transition table (see docs/machines.md):

- A WindowMeasured whose output token counts differ is refused with
  ``output_tokens_differ``: a mismatch is never a speed signal, so the appender records
  ``work_mismatch_fault(window)`` (an InfrastructureFault ``work_mismatch``) instead.
- After an InfrastructureFault only AttemptDecided is accepted (``fault_recorded``); the
  fault decides NO_DECISION even if the evidence had already decided (a fault counts
  in any non-terminal state).
- A speed FAIL under plan ``normal`` stays in ``SPEED`` with its decision derived; the
  next event must be AttemptDecided (or a fault). Under ``calibration_observation`` it
  moves to ``AUDIT``; quality never runs there.
- The audit is judged on what was graded so far: QualityGraded is accepted only while the
  audit passes, and AttemptDecided in ``AUDIT`` must carry the audit's outcome.
- Under ``paired-windows.v2`` the noise guard (``machines.arithmetic.noise_check``, always
  exact Decimal) runs first at every window where v1 could decide; when it trips, speed is
  decided NO_DECISION ``noise_above_seal`` (REQUEUE) and the attempt stays in ``SPEED``
  under either plan. Only when it does not trip does the look (quick or exact) run, so the
  quick path decides nothing the guard could have changed.
- AttemptDecided must carry the sealed policy's version as ``rules_version``
  (``rules_version_mismatch``).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from decimal import ROUND_FLOOR, Decimal
from functools import lru_cache, partial
from typing import Any, NamedTuple

from machines.arena import ArenaState
from machines.arithmetic import (
    CONTEXT,
    Decision,
    Look,
    NodeTally,
    NoiseCheck,
    PolicyParams,
    SpeedResult,
    audit_outcome,
    fault_disposition,
    futile,
    futility_limit,
    ln,
    look,
    node_outcome,
    noise_check,
    noise_checks,
    quality_outcome,
    quick_fixed,
    quick_outcome,
    quick_speedup,
    ratio,
)
from machines.refusal import ABSENT, Refusal
from machines.submission import QUALIFYING, QUEUED, SubmissionState
from machines.table import Guard, Table, build, evolve
from vocabulary.codec import canonical_decimal
from vocabulary.events import (
    AttemptClaimed,
    AttemptDecided,
    AuditNodeGraded,
    Event,
    InfrastructureFault,
    QualityGraded,
    WindowMeasured,
)

__all__ = [
    "AUDIT",
    "CLAIMED",
    "DECIDED",
    "LIVE",
    "QUALITY",
    "SPEED",
    "STATES",
    "TABLE",
    "AttemptState",
    "AttemptSummary",
    "ClaimContext",
    "Decision",
    "Fault",
    "Quality",
    "Window",
    "apply",
    "claim",
    "decide",
    "decide_claim",
    "derive_decision",
    "explain",
    "fold",
    "record_decision",
    "step",
    "work_mismatch_fault",
]

#: ``tuple.__new__(Cls, values)`` builds a named tuple without its Python-level ``__new__``.
_new_tuple = tuple.__new__

CLAIMED = "CLAIMED"
SPEED = "SPEED"
AUDIT = "AUDIT"
QUALITY = "QUALITY"
DECIDED = "DECIDED"
STATES = (CLAIMED, SPEED, AUDIT, QUALITY, DECIDED)
LIVE = (CLAIMED, SPEED, AUDIT, QUALITY)


class Window(NamedTuple):
    """Is one measured window as the fold keeps it (costs in ns)."""

    window: int
    orientation: int
    stock_cost_ns: int
    candidate_cost_ns: int
    output_tokens: int


class Quality(NamedTuple):
    """Is the recorded quality check."""

    tokens_scored: int
    argmax_agreement: str
    drift_within_envelope: bool
    regression: bool


class Fault(NamedTuple):
    """Is the infrastructure fault that took the attempt's authority away."""

    code: str
    stage: str
    detail: str


@dataclass(frozen=True)
class AttemptState:
    """Is an attempt's folded state, with every window, look and audit count it saw."""

    attempt_id: str
    submission_id: str
    arena_id: str
    commission_digest: str
    pair_id: str
    validator_hotkey: str
    claimed_block: int
    plan: str
    params: PolicyParams
    status: str = CLAIMED
    windows: tuple[Window, ...] = ()
    sums: tuple[int, int, int, int] = (0, 0, 0, 0)
    #: v2 only: y_i = ln r_i of every window, for the noise guard (empty under v1).
    logs: tuple[Decimal, ...] = ()
    r1: Decimal | None = None
    speed: SpeedResult | None = None
    audit: Mapping[str, NodeTally] | None = None
    audit_ranks: frozenset[tuple[str, int]] = frozenset()
    quality: Quality | None = None
    fault: Fault | None = None
    decision: Decision | None = None
    decided_block: int | None = None

    @property
    def ln_r1(self) -> Decimal | None:
        """Returns ln R1 once looks have begun (None before), at full precision."""
        if self.r1 is None or len(self.windows) <= self.params.orientation1_windows:
            return None
        return ln(self.r1)

    @property
    def looks(self) -> tuple[Look, ...]:
        """Returns every look taken so far, each number at full precision (docs/machines.md).

        Why a property: a look follows from the windows alone (one after every
        orientation-2 window), and the fold decides looks from a float estimate of S
        (``_speed_of``), so the correctly rounded ``ln`` and ``exp`` run only when someone
        reads the looks (``explain``, the docs), not once per window of the replay.
        """
        r1 = self.r1
        n1 = self.params.orientation1_windows
        if r1 is None or len(self.windows) <= n1:
            return ()
        ln_r1 = ln(r1)
        stock = candidate = 0
        seen = []
        for measured in self.windows[n1:]:
            stock += measured.stock_cost_ns
            candidate += measured.candidate_cost_ns
            seen.append(look(self.params, measured.window, r1, ln_r1, ratio(candidate, stock)))
        speed = self.speed
        if speed is not None and speed.verdict == "NO_DECISION" and speed.look_window > n1:
            # v2's guard decided this look before its S was compared with anything.
            seen[-1] = seen[-1]._replace(outcome=speed.reason)
        return tuple(seen)

    @property
    def noise_checks(self) -> tuple[NoiseCheck, ...]:
        """Returns every check v2's noise guard made so far (none under v1), full precision."""
        return noise_checks(self.params, self.logs)

    @property
    def last_window(self) -> int:
        """Returns the index of the last measured window (0 before any)."""
        return len(self.windows)

    def summary(self) -> AttemptSummary:
        """Returns the compact record the ledger fold keeps once the attempt is decided."""
        # tuple.__new__: the named tuple without its Python-level __new__ (once per attempt).
        return _new_tuple(AttemptSummary, (
            self.attempt_id,
            self.submission_id,
            self.arena_id,
            self.commission_digest,
            self.plan,
            self.claimed_block,
            self.status,
            self.decision,
            self.decided_block,
        ))


class AttemptSummary(NamedTuple):
    """Is a decided attempt without its per-window detail (refold the stream to explain).

    A named tuple rather than a dataclass: the fold keeps one per decided attempt for the
    ledger's whole history, and a tuple is about a third of the memory.
    """

    attempt_id: str
    submission_id: str
    arena_id: str
    commission_digest: str
    plan: str
    claimed_block: int
    status: str
    decision: Decision | None
    decided_block: int | None


class ClaimContext(NamedTuple):
    """Carries the submission and arena an AttemptClaimed is checked against.

    A named tuple: the fold builds one per claim, and a frozen dataclass's ``__init__``
    costs several times as much.
    """

    submission: SubmissionState | None
    arena: ArenaState | None


def decide_claim(event: AttemptClaimed, context: ClaimContext) -> Refusal | None:
    """Returns the refusal of a claim, or None: submission queued, commission current, plan."""
    sub, arena = context
    fields = event.__dict__  # pydantic's __getattr__ makes attribute reads slow
    if (
        sub is not None
        and sub.submission_id == fields["submission_id"]
        and sub.arena_id == fields["arena_id"]
        and sub.status == QUEUED
        and arena is not None
        and arena.arena_id == fields["arena_id"]
        and fields["commission_digest"] == arena.commission.digest  # arena.commission_digest
        and fields["plan"] == "normal"
    ):
        return None  # the common claim, which no rule below refuses
    no = partial(TABLE.refuse, ABSENT, event.event_type)
    if sub is None or sub.submission_id != event.submission_id:
        return no("submission_unknown", event.submission_id)
    if sub.arena_id != event.arena_id:
        return no("arena_mismatch", f"arena_id: submission is in {sub.arena_id!r}")
    claimed_here = sub.status == QUALIFYING and sub.attempt_id == event.attempt_id
    if sub.status != QUEUED and not claimed_here:
        return no("submission_not_queued", f"submission is {sub.status}")
    if arena is None or arena.arena_id != event.arena_id:
        return no("arena_unknown", event.arena_id)
    if event.commission_digest != arena.commission_digest:
        return no("commission_not_current", f"current is {arena.commission_digest}")
    listed = arena.params.calibration_digests
    if event.plan == "calibration_observation" and sub.delta_digest not in listed:
        return no("calibration_observation_not_listed", f"delta_digest {sub.delta_digest}")
    return None


def claim(event: AttemptClaimed, params: PolicyParams) -> AttemptState:
    """Opens an attempt stream in ``CLAIMED`` under the claimed commission's policy."""
    fields = event.__dict__  # pydantic's __getattr__ makes attribute reads slow
    return build(
        AttemptState,
        attempt_id=fields["attempt_id"],
        submission_id=fields["submission_id"],
        arena_id=fields["arena_id"],
        commission_digest=fields["commission_digest"],
        pair_id=fields["pair_id"],
        validator_hotkey=fields["validator_hotkey"],
        claimed_block=fields["claimed_block"],
        plan=fields["plan"],
        params=params,
    )


def work_mismatch_fault(window: WindowMeasured) -> InfrastructureFault:
    """Returns the InfrastructureFault to append instead of a window whose tokens differ."""
    return InfrastructureFault(
        code="work_mismatch",
        stage="speed",
        detail=(
            f"window {window.window}: stock produced {window.stock_output_tokens} output "
            f"tokens, candidate {window.candidate_output_tokens}"
        ),
    )


def _window_refusal(state: AttemptState, event: WindowMeasured) -> Refusal | None:
    params, index, last = state.params, event.window, state.last_window
    code = ""
    if index > params.windows:
        code, detail = "window_past_limit", f"window: {index} > W = {params.windows}"
    elif state.speed is not None:
        code, detail = "window_after_speed_decided", f"window: {index}"
    elif index <= last:
        code, detail = "window_repeated", f"window: {index} already measured"
    elif index > last + 1:
        code, detail = "window_gap", f"window: expected {last + 1}, got {index}"
    elif event.orientation != params.orientation(index):
        expected = params.orientation(index)
        code, detail = "window_orientation_wrong", f"orientation: expected {expected}"
    elif event.stock_output_tokens != event.candidate_output_tokens:
        code = "output_tokens_differ"
        detail = "append InfrastructureFault code=work_mismatch instead"
    return TABLE.refuse(state.status, event.event_type, code, detail) if code else None


def _speed_of(
    params: PolicyParams, window: int, sums: tuple[int, int, int, int], r1: Decimal
) -> SpeedResult | None:
    """Returns the speed result of the look after orientation-2 ``window`` (None: continue).

    The look is decided from a float estimate of S when that is clearly away from every
    threshold and from a rounding tie of its 6-place spelling (``quick_outcome``,
    ``quick_fixed``); otherwise from the Decimal look itself. Either way the result is the
    one the Decimal arithmetic of paired-windows.v1 gives, digit for digit.
    """
    stock1, candidate1, stock2, candidate2 = sums
    quick = params.quick[window] if params.quick else None
    if quick is not None:
        estimate = quick_speedup(stock1, candidate1, stock2, candidate2)
        outcome = quick_outcome(quick, estimate, window == params.windows)
        if outcome == "continue":
            return None
        text = None if outcome is None else quick_fixed(estimate)
        if text is not None:
            if outcome == "pass":
                return _new_tuple(SpeedResult, ("PASS", "", text, quick.line_text, window))
            return _new_tuple(SpeedResult, ("FAIL", outcome or "", text, quick.line_text, window))
    seen = look(params, window, r1, ln(r1), ratio(candidate2, stock2))
    return None if seen.outcome == "continue" else SpeedResult.of_look(seen)


def _measure(
    state: AttemptState, event: WindowMeasured, _: None
) -> AttemptState | Refusal:
    # The fields through ``__dict__``: pydantic models define ``__getattr__``, which puts
    # every attribute read on CPython's slow path, and this is the most frequent event.
    fields = event.__dict__
    index, orientation = fields["window"], fields["orientation"]
    tokens = fields["stock_output_tokens"]
    params = state.params
    n1 = params.orientation1_windows
    if (
        index != len(state.windows) + 1
        or index > params.windows
        or state.speed is not None
        or orientation != (1 if index <= n1 else 2)
        or tokens != fields["candidate_output_tokens"]
    ):
        # Exactly the cases _window_refusal names, in its order of precedence.
        refusal = _window_refusal(state, event)
        assert refusal is not None
        return refusal
    stock, candidate = fields["stock_cost_ns"], fields["candidate_cost_ns"]
    a, b, c, d = state.sums
    r1, speed = state.r1, None
    logs, noisy = state.logs, False
    if params.noise_lines:  # paired-windows.v2: the guard, exact, before anything decides
        logs = (*logs, ln(ratio(candidate, stock)))
        check = noise_check(params, index, logs)
        noisy = check is not None and check.trips
    if orientation == 1:
        sums = (a + stock, b + candidate, c, d)
        if index == n1:
            r1 = ratio(sums[1], sums[0])
            if noisy:
                speed = SpeedResult.noise_above_seal(index)
            elif futile(params, r1):
                speed = SpeedResult.futility(params)
    else:
        sums = (a, b, c + stock, d + candidate)
        assert r1 is not None
        speed = SpeedResult.noise_above_seal(index) if noisy else _speed_of(
            params, index, sums, r1
        )
    status = SPEED
    if speed is not None and (
        speed.verdict == "PASS"
        or (speed.verdict == "FAIL" and state.plan == "calibration_observation")
    ):
        status = AUDIT
    # Window(...) without its Python-level __new__: the same tuple, built once per window.
    window = _new_tuple(Window, (index, orientation, stock, candidate, tokens))
    if logs:
        return evolve(
            state, status=status, windows=(*state.windows, window), sums=sums, logs=logs,
            r1=r1, speed=speed,
        )
    return evolve(
        state, status=status, windows=(*state.windows, window), sums=sums, r1=r1, speed=speed
    )


_NO_TALLY = NodeTally()


#: The places ``min_score`` is recorded to (floored): the bridge's ``fixed6`` of a float.
_SCORE_PLACES = Decimal("0.000001")


def _floor6(value: Decimal) -> Decimal:
    return value.quantize(_SCORE_PLACES, rounding=ROUND_FLOOR, context=CONTEXT)


@lru_cache(maxsize=64)
def _audit_bounds(
    bar: str, sealed: Decimal, band: Decimal
) -> tuple[bool, Decimal, Decimal, Decimal]:
    """Returns (the bar is the sealed one, bar − band, both bounds floored to six places)
    for a bar as an event spells it (a few spellings recur: computed once each)."""
    edge = sealed - band
    return Decimal(bar) == sealed, edge, _floor6(edge), _floor6(sealed)


def _audit_score_problem(params: PolicyParams, fields: dict[str, Any]) -> tuple[str, str] | None:
    """Returns (code, detail) when a node's grades cannot be true under the sealed audit policy.

    The bar must be the commission's own. With a comparable call, the counts bound the
    lowest score (a violation scores below bar − band, a near miss below bar): the recorded
    ``min_score`` is floored to six places, and flooring keeps each bound when the bound is
    floored too, so these checks never refuse honest grades. Without them an event with
    ``bar "0"`` and no violations audited anything as a PASS.
    """
    sealed = params.audit_bar
    same, edge, low, top = _audit_bounds(fields["bar"], sealed, params.near_miss_band)
    if not same:
        return "audit_bar_mismatch", f"bar: {fields['bar']} is not the sealed {sealed}"
    if fields["calls"] == fields["uncomparable"]:
        return None  # no comparable call: min_score says nothing
    score = Decimal(fields["min_score"])
    violations, near = fields["violations"], fields["near_misses"]
    # Below a bound of six places, a floored score is below it too; below one of more
    # places, it may floor onto the bound's own floor.
    if violations:  # some call scored below bar − band
        bound_broken = score >= low if low == edge else score > low
    elif near:  # every call at or above bar − band, some below the bar
        bound_broken = score < low or (score >= top if top == sealed else score > top)
    else:  # every comparable call at or above the bar
        bound_broken = score < top
    if not bound_broken:
        return None
    return "audit_counts_inconsistent", (
        f"min_score: {fields['min_score']} with {violations} violations and {near} near "
        f"misses (bar {sealed}, band {params.near_miss_band})"
    )


def _grade_audit(
    state: AttemptState, event: AuditNodeGraded, _: None
) -> AttemptState | Refusal:
    fields = event.__dict__  # pydantic's __getattr__ makes attribute reads slow
    node, calls = fields["node"], fields["calls"]
    key = (node, fields["rank"])
    if key in state.audit_ranks:
        return TABLE.refuse(
            state.status, event.event_type, "audit_node_repeated",
            f"node {node} rank {event.rank}",
        )
    if fields["violations"] + fields["near_misses"] + fields["uncomparable"] > calls:
        return TABLE.refuse(
            state.status, event.event_type, "audit_counts_inconsistent",
            f"calls: {calls} < violations + near_misses + uncomparable",
        )
    problem = _audit_score_problem(state.params, fields)
    if problem is not None:
        return TABLE.refuse(state.status, event.event_type, *problem)
    tallies = dict(state.audit or {})
    tallies[node] = tallies.get(node, _NO_TALLY).add(event)
    return evolve(state, audit=tallies, audit_ranks=state.audit_ranks | {key})


def _grade_quality(state: AttemptState, event: QualityGraded, _: None) -> AttemptState | Refusal:
    assert state.speed is not None
    if state.speed.verdict != "PASS":
        return TABLE.refuse(
            state.status, event.event_type, "quality_out_of_stage",
            "calibration_observation after a speed FAIL: quality never runs",
        )
    outcome = audit_outcome(state.params, state.audit or {})
    if outcome:
        return TABLE.refuse(state.status, event.event_type, "audit_not_passed", outcome)
    quality = Quality(
        event.tokens_scored, event.argmax_agreement, event.drift_within_envelope, event.regression
    )
    return evolve(state, status=QUALITY, quality=quality)


def _record_fault(state: AttemptState, event: InfrastructureFault, _: None) -> AttemptState:
    return evolve(state, fault=Fault(event.code, event.stage, event.detail))


#: The verdict of a quality outcome; any other outcome FAILs.
_QUALITY_VERDICTS = {"": "PASS", "quality_drift": "NO_DECISION"}


def derive_decision(state: AttemptState) -> Decision | None:
    """Returns what AttemptDecided must carry now, or None while evidence is still due."""
    if state.decision is not None:
        return state.decision
    if state.fault is not None:
        code = state.fault.code
        return Decision("NO_DECISION", code, fault_disposition(code), None, None, None)
    speed = state.speed
    if speed is None:
        return None
    if state.status == SPEED:  # a speed FAIL, or v2's guard NO_DECISION
        return Decision.of_speed_stage(speed)
    if state.status == AUDIT:
        outcome = audit_outcome(state.params, state.audit or {})
        if outcome == "slot_audit_failed":
            return Decision.of_speed("FAIL", outcome, speed)
        if outcome == "audit_not_covered":
            return Decision.of_speed("NO_DECISION", outcome, speed)
        if speed.verdict == "FAIL":
            return Decision.of_speed("FAIL", speed.reason, speed)
        return None
    assert state.quality is not None
    outcome = quality_outcome(state.quality.drift_within_envelope, state.quality.regression)
    return Decision.of_speed(_QUALITY_VERDICTS.get(outcome, "FAIL"), outcome, speed)



def _decide_attempt(
    state: AttemptState, event: AttemptDecided, _: None
) -> AttemptState | Refusal:
    return record_decision(state, event, derive_decision(state))


def record_decision(
    state: AttemptState, event: AttemptDecided, derived: Decision | None
) -> AttemptState | Refusal:
    """Returns the attempt after AttemptDecided, given ``derived = derive_decision(state)``.

    For a live attempt without a fault (the table's AttemptDecided rule). Why a separate
    entry: a caller that has just derived the decision (the replay checks it before
    applying) passes it in instead of deriving it twice.
    """
    if derived is None:
        return TABLE.refuse(
            state.status, event.event_type, "decision_not_derived", _awaiting(state)
        )
    decided_block = event.decided_block
    if decided_block < state.claimed_block:
        return TABLE.refuse(
            state.status, event.event_type, "decided_before_claim",
            f"decided_block: {decided_block} < claimed_block {state.claimed_block}",
        )
    version = event.__dict__["rules_version"]
    if version != state.params.rules_version:
        return TABLE.refuse(
            state.status, event.event_type, "rules_version_mismatch",
            f"rules_version: the commission seals {state.params.rules_version!r}, event has "
            f"{version!r}",
        )
    recorded = Decision.of_event(event)
    if recorded != derived:
        name = derived.differences(recorded)[0]
        return TABLE.refuse(
            state.status, event.event_type, "decision_mismatch",
            f"{name}: derived {getattr(derived, name)!r}, event has {getattr(recorded, name)!r}",
        )
    return evolve(state, status=DECIDED, decision=derived, decided_block=decided_block)


def _awaiting(state: AttemptState) -> str:
    if state.status in (CLAIMED, SPEED):
        return f"speed undecided after window {state.last_window} of {state.params.windows}"
    return "audit passes so far: append QualityGraded"


_WINDOW = Guard((SPEED, AUDIT), _measure, "window in order")

#: The Attempt machine (docs/machines.md).
TABLE: Table[AttemptState, None] = Table(
    machine="attempt",
    states=STATES,
    initial=CLAIMED,
    opening="AttemptClaimed",
    terminals=frozenset({DECIDED}),
    rules={
        (CLAIMED, "WindowMeasured"): _WINDOW,
        (SPEED, "WindowMeasured"): _WINDOW,
        (AUDIT, "AuditNodeGraded"): Guard((AUDIT,), _grade_audit, "new node, rank"),
        (AUDIT, "QualityGraded"): Guard((QUALITY,), _grade_quality, "audit passes"),
        **{(s, "InfrastructureFault"): Guard((s,), _record_fault, "NO_DECISION") for s in LIVE},
        **{(s, "AttemptDecided"): Guard((DECIDED,), _decide_attempt, "= derived") for s in LIVE},
    },
    refusals={
        (AUDIT, "WindowMeasured"): "window_after_speed_decided",
        (QUALITY, "WindowMeasured"): "window_after_speed_decided",
        (CLAIMED, "AuditNodeGraded"): "audit_out_of_stage",
        (SPEED, "AuditNodeGraded"): "audit_out_of_stage",
        (QUALITY, "AuditNodeGraded"): "audit_out_of_stage",
        (CLAIMED, "QualityGraded"): "quality_out_of_stage",
        (SPEED, "QualityGraded"): "quality_out_of_stage",
        (QUALITY, "QualityGraded"): "quality_repeated",
    },
)


def step(state: AttemptState | None, event: Event) -> AttemptState | Refusal:
    """Returns the attempt after ``event``, or the refusal of it (claims: see ``claim``)."""
    if state is None:
        return TABLE.refuse(ABSENT, event.event_type, "stream_not_started")
    if isinstance(event, AttemptClaimed):
        return TABLE.refuse(state.status, event.event_type, "stream_already_started")
    fault = state.fault
    if fault is not None and state.status != DECIDED and not isinstance(event, AttemptDecided):
        return TABLE.refuse(state.status, event.event_type, "fault_recorded", fault.code)
    return TABLE.step(state, event, None)


def decide(
    state: AttemptState | None, event: Event, context: ClaimContext | None = None
) -> Refusal | None:
    """Returns the refusal of ``event``, or None; an AttemptClaimed needs ``context``."""
    if state is None and isinstance(event, AttemptClaimed):
        if context is None:
            raise ValueError("an AttemptClaimed is decided against a ClaimContext")
        return decide_claim(event, context)
    result = step(state, event)
    return result if isinstance(result, Refusal) else None


def apply(state: AttemptState, event: Event) -> AttemptState:
    """Returns the attempt after ``event``; a refused event leaves it unchanged."""
    result = step(state, event)
    return state if isinstance(result, Refusal) else result


def fold(claimed: AttemptClaimed, params: PolicyParams, events: Iterable[Event]) -> AttemptState:
    """Folds a whole attempt stream: its claim under ``params``, then the rest."""
    state = claim(claimed, params)
    for event in events:
        state = apply(state, event)
    return state


def _text(value: Decimal | None) -> str | None:
    return None if value is None else canonical_decimal(value)


def explain(state: AttemptState) -> dict[str, Any]:
    """Returns every number behind the attempt's (derived) decision, JSON-ready."""
    params = state.params
    decision = derive_decision(state)
    return {
        "attempt_id": state.attempt_id,
        "state": state.status,
        "plan": state.plan,
        "commission_digest": state.commission_digest,
        "rules_version": params.rules_version,
        "windows": [
            {
                "window": w.window,
                "orientation": w.orientation,
                "stock_cost_ns": w.stock_cost_ns,
                "candidate_cost_ns": w.candidate_cost_ns,
                "ratio": canonical_decimal(ratio(w.candidate_cost_ns, w.stock_cost_ns)),
            }
            for w in state.windows
        ],
        "r1": _text(state.r1),
        "futility_limit": _text(futility_limit(params)),
        "looks": [
            {
                "window": k.window, "n1": k.n1, "n2": k.n2, "r1": _text(k.r1), "r2": _text(k.r2),
                "speedup": _text(k.speedup), "se": _text(k.se), "z": _text(k.z),
                "pass_line": _text(k.pass_line), "outcome": k.outcome,
            }
            for k in state.looks
        ],
        "noise_guard": None if params.noise_guard_alpha is None else {
            "alpha": _text(params.noise_guard_alpha),
            "window_noise": _text(params.window_noise),
            "checks": [
                {
                    "window": c.window, "dof": c.dof, "statistic": _text(c.statistic),
                    "critical": _text(c.critical), "trips": c.trips,
                }
                for c in state.noise_checks
            ],
        },
        "audit": {
            node: {**tally._asdict(), "outcome": node_outcome(params, tally) or "PASS"}
            for node, tally in sorted((state.audit or {}).items())
        },
        "quality": None if state.quality is None else state.quality._asdict(),
        "fault": None if state.fault is None else state.fault._asdict(),
        "decision": None if decision is None else decision._asdict(),
    }

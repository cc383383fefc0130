"""Checks fold properties on random event sequences (hypothesis).

Random sequences mix well-formed events (intake outcomes and decisions taken from the fold)
with arbitrary ones, so both accepted and refused paths are exercised. Properties: folding
never raises; a refused event changes nothing; ``decide`` agrees with ``apply``; a guard only
picks a target it declares; folding is deterministic; all at once equals event by event.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from archive_double import MemoryArchive  # same directory, prepend import mode
from hypothesis import example, given
from hypothesis import strategies as st

from machines import attempt, samples, submission
from machines.arithmetic import CONTEXT, Decision, compile_policy, ln, look, ratio
from machines.intake import Admission
from machines.projection import LedgerFold, Record
from machines.refusal import Refusal
from machines.table import Guard, Table
from vocabulary.events import (
    FAULT_CODES,
    ArenaRetired,
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
    SubmissionRequeued,
    SubmissionResolved,
)

ARENA = "a1"
HOTKEYS = ("5A", "5B")
STREAMS = ("arena-a1", "attempt-t0", "payment-p0", "credit-k0", "settlement")
#: (emission_share_ppm, reward_margin) a re-commission may set: settlement reads both, so a
#: tracker that kept the old ones would disagree with the full recomputation.
SHARES = ((500_000, None), (250_000, "0.05"), (1_000_000, "0"))

op = st.one_of(
    st.tuples(st.just("commission"), st.sampled_from([0, 0, 5]), st.integers(2, 5),
              st.sampled_from([None, "0.01"]), st.sampled_from([20, 500_000]),
              st.integers(0, len(SHARES) - 1)),
    st.tuples(st.just("arrive"), st.sampled_from(HOTKEYS), st.integers(0, 3),
              st.integers(0, 800), st.sampled_from([None, None, "p0", "p1"])),
    st.tuples(st.just("intake"), st.integers(0, 9), st.sampled_from([None, 5, 1])),
    st.tuples(st.just("claim"), st.integers(0, 9), st.booleans(), st.booleans()),
    *[st.tuples(st.just("window"), st.integers(0, 3), st.booleans(), st.integers(1, 5),
                st.integers(1, 2), st.integers(80, 110), st.booleans())] * 4,
    *[st.tuples(st.just("decide"), st.integers(0, 3), st.booleans())] * 2,
    *[st.tuples(st.just("resolve"), st.integers(0, 9), st.booleans())] * 2,
    *[st.tuples(st.just("audit"), st.integers(0, 3), st.integers(0, 1), st.integers(0, 12),
                st.integers(0, 1))] * 2,
    *[st.tuples(st.just("quality"), st.integers(0, 3), st.booleans(), st.booleans())] * 2,
    st.tuples(st.just("fault"), st.integers(0, 3), st.sampled_from(FAULT_CODES)),
    st.tuples(st.just("decide"), st.integers(0, 3), st.booleans()),
    st.tuples(st.just("resolve"), st.integers(0, 9), st.booleans()),
    st.tuples(st.just("ops"), st.integers(0, 9),
              st.sampled_from(["hold", "release", "requeue", "expire"]), st.integers(0, 10**6)),
    st.tuples(st.just("money"), st.integers(0, 9),
              st.sampled_from(["pay", "unpay", "grant", "spend"])),
    st.tuples(st.just("misc"), st.sampled_from(["retire", "control", "stray"]),
              st.sampled_from(STREAMS)),
)

Built = list[tuple[str, Event]]


class _World:
    """Turns ops into (stream, event) pairs, reading the fold for well-formed choices."""

    def __init__(self, fold: LedgerFold) -> None:
        self.fold = fold
        self.subs: list[str] = []
        self.attempts: list[str] = []

    def sid(self, index: int) -> str | None:
        return self.subs[index % len(self.subs)] if self.subs else None

    def attempt_id(self, index: int) -> str:
        # Index 0 may pick any attempt (decided ones included); others prefer live ones.
        live = [a for a in self.attempts if isinstance(self.fold.attempt(a), attempt.AttemptState)]
        pool = self.attempts if index == 0 or not live else live
        return pool[index % len(pool)] if pool else "t9"

    def build(self, item: tuple[Any, ...]) -> Built:
        kind = item[0]
        return getattr(self, "_" + kind)(*item[1:])  # type: ignore[no-any-return]

    def _commission(
        self, fee: int, windows: int, futility: str | None, sla: int, shares: int = 0
    ) -> Built:
        z = {str(k): "1.5" for k in range(windows // 2 + 1, windows + 1)}
        share, margin = SHARES[shares]
        sealed = samples.policy(windows=windows, z=z, futility_margin=futility, sla_blocks=sla,
                                audit={"bar": "0.99", "min_calls": 4},
                                audit_control_delta_digests=[samples.hex64("delta:c0")],
                                **({} if margin is None else {"reward_margin": margin}))
        return [(f"arena-{ARENA}", samples.commissioned(ARENA, fee_rao=fee, sealed=sealed,
                                                        emission_share_ppm=share))]

    def _arrive(self, hotkey: str, content: int, block: int, ref: str | None) -> Built:
        event = samples.arrived(ARENA, hotkey=hotkey, content=f"c{content}", block=block,
                                payment_ref=ref)
        self.subs.append(event.submission_id)
        return [(f"submission-{event.submission_id}", event)]

    def _intake(self, index: int, paid: int | None) -> Built:
        sid = self.sid(index)
        if sid is None or self.fold.submission(sid) is None or self.fold.arena(ARENA) is None:
            return []
        outcome = self.fold.intake(sid, paid)
        if isinstance(outcome, Admission):
            fee = {"kind": outcome.kind, "ref": outcome.ref, "amount_rao": outcome.amount_rao}
            event: Event = SubmissionAdmitted.model_validate({"block": 900, "fee": fee})
        else:
            event = SubmissionRejected(block=900, reason=outcome.reason)
        return [(f"submission-{sid}", event)]

    def _claim(self, index: int, guided: bool, calibrate: bool) -> Built:
        state = self.fold.arena(ARENA)
        queued = self.fold.queue(ARENA)
        if state is None:
            return []
        sid = queued[index % len(queued)].submission_id if guided and queued else self.sid(index)
        if sid is None:
            return []
        attempt_id = f"t{len(self.attempts)}"
        self.attempts.append(attempt_id)
        plan = "calibration_observation" if calibrate else "normal"
        claim = samples.claimed(sid, state.commission_digest, attempt_id=attempt_id,
                                arena_id=ARENA, plan=plan)
        built: Built = [(f"attempt-{attempt_id}", claim)]
        if guided or index % 2:
            built.append((f"submission-{sid}", QualificationStarted(attempt_id=attempt_id)))
        return built

    def _window(
        self, index: int, guided: bool, window: int, orientation: int, cost: int, same: bool
    ) -> Built:
        attempt_id = self.attempt_id(index)
        state = self.fold.attempt(attempt_id)
        if guided and isinstance(state, attempt.AttemptState):
            window = state.last_window + 1
            orientation = state.params.orientation(min(window, 5))
        tokens = None if same or guided else 1
        cost = cost - 10 if guided else cost
        event = samples.window(min(window, 5), orientation, 100, cost, candidate_tokens=tokens)
        return [(f"attempt-{attempt_id}", event)]

    def _audit(self, index: int, rank: int, calls: int, violations: int) -> Built:
        event = samples.audit(rank=rank, calls=calls, violations=min(violations, calls))
        return [(f"attempt-{self.attempt_id(index)}", event)]

    def _quality(self, index: int, drift_ok: bool, regression: bool) -> Built:
        event = samples.quality(drift_within_envelope=drift_ok, regression=regression)
        return [(f"attempt-{self.attempt_id(index)}", event)]

    def _fault(self, index: int, code: str) -> Built:
        fault = InfrastructureFault(code=code, stage="speed", detail="")
        return [(f"attempt-{self.attempt_id(index)}", fault)]

    def _decide(self, index: int, derived: bool) -> Built:
        attempt_id = self.attempt_id(index)
        decision = self.fold.derive_decision(attempt_id) if derived else None
        if decision is None:
            decision = Decision("FAIL", "futility", "COMPLETE", None, None, 1)
        return [(f"attempt-{attempt_id}", samples.decided(decision, block=2_000))]

    def _resolve(self, index: int, derived: bool) -> Built:
        sid = self.sid(index)
        sub = None if sid is None else self.fold.submission(sid)
        if sub is None or sub.attempt_id is None:
            return []
        decision = self.fold.derive_decision(sub.attempt_id) if derived else None
        fields = ("PASS", "", "COMPLETE") if decision is None else (
            decision.verdict, decision.reason, decision.disposition
        )
        event = SubmissionResolved.model_validate(
            dict(zip(("attempt_id", "verdict", "reason", "disposition"),
                     (sub.attempt_id, *fields), strict=True))
        )
        return [(f"submission-{sid}", event)]

    def _ops(self, index: int, what: str, block: int) -> Built:
        sid = self.sid(index)
        if sid is None:
            return []
        event: Event = {
            "hold": SubmissionHeld(reason="ops", block=block),
            "release": HoldReleased(reason="ok", block=block, operator="5Op"),
            "requeue": SubmissionRequeued(reason="ops", block=block),
            "expire": SubmissionExpired(block=block, reason="sla_expired"),
        }[what]
        return [(f"submission-{sid}", event)]

    def _money(self, index: int, what: str) -> Built:
        sid = self.sid(index) or "0" * 64
        if what == "pay":
            return [("payment-p0", PaymentConsumed(payment_ref="p0", submission_id=sid,
                                                   arena_id=ARENA, amount_rao=5))]
        if what == "unpay":
            return [("payment-p0", PaymentReleased(submission_id=sid, reason="refund"))]
        if what == "grant":
            grant = CreditGranted(credit_id="k0", hotkey=HOTKEYS[index % 2], amount_rao=5, note="")
            return [("credit-k0", grant)]
        return [("credit-k0", CreditSpent(submission_id=sid))]

    def _misc(self, what: str, stream: str) -> Built:
        if what == "retire":
            return [(f"arena-{ARENA}", ArenaRetired(block=5, reason="done"))]
        if what == "control":
            return [(f"arena-{ARENA}", ControlRegistered(
                control_id="ctl", kind="identity", delta_digest=samples.hex64("delta:c1"),
                expected_verdict="PASS"))]
        return [(stream, samples.window(1, 1, 1, 1))]


def _without_position(snapshot: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in snapshot.items() if k != "position"}


def _status(fold: LedgerFold, stream: str) -> str | None:
    category, _, ident = stream.partition("-")
    found: Any = None
    if category == "submission":
        found = fold.submission(ident)
    elif category == "attempt":
        found = fold.attempt(ident)
    return None if found is None else str(found.status)


def _check_target(before: str | None, after: str | None, stream: str, event: Event) -> None:
    tables: dict[str, Table[Any, Any]] = {"submission": submission.TABLE, "attempt": attempt.TABLE}
    table = tables.get(stream.split("-")[0])
    if table is None or before is None:
        return
    rule = table.rules[(before, event.event_type)]
    targets = rule.targets if isinstance(rule, Guard) else (rule,)
    assert after in targets, (before, event.event_type, after)


#: Every sequence starts from a commissioned arena with a few queued submissions and a claim,
#: so the random part mostly exercises later states rather than "stream not started".
PRELUDE: list[tuple[Any, ...]] = [
    ("commission", 0, 4, None, 500_000),
    *[("arrive", HOTKEYS[n % 2], n, 100 + n, None) for n in range(3)],
    *[("intake", n, None) for n in range(3)],
    ("claim", 0, True, False),
]


def _run(
    ops: list[tuple[Any, ...]], fold: LedgerFold | None = None
) -> tuple[LedgerFold, list[Record]]:
    fold = LedgerFold() if fold is None else fold
    world = _World(fold)
    records: list[Record] = []
    for item in [*PRELUDE, *ops]:
        for stream, event in world.build(item):
            _step(fold, stream, event, records)
    return fold, records


def _step(fold: LedgerFold, stream: str, event: Event, records: list[Record]) -> None:
    before = fold.snapshot()
    status = _status(fold, stream)
    predicted = fold.decide(stream, event)
    assert _without_position(fold.snapshot()) == _without_position(before)
    refusal = fold.apply(fold.position + 1, stream, event)
    assert refusal == predicted
    if refusal is None:
        _check_target(status, _status(fold, stream), stream, event)
    else:
        assert _without_position(fold.snapshot()) == _without_position(before)
    records.append((fold.position, stream, event.event_type, event))


@given(st.lists(op, max_size=60))
def test_random_sequences_fold_without_crashing_and_refusals_change_nothing(
    ops: list[tuple[Any, ...]],
) -> None:
    fold, records = _run(ops)
    assert fold.events == len(records)


@given(st.lists(op, max_size=60))
def test_folding_is_deterministic_and_all_at_once_equals_one_by_one(
    ops: list[tuple[Any, ...]],
) -> None:
    fold, records = _run(ops)
    at_once = LedgerFold()
    at_once.consume(records)
    # consume returns how many of its records were refused; in two calls, each its own.
    split, half = LedgerFold(), len(records) // 2
    refused = split.consume(records[:half]) + split.consume(records[half:])
    assert refused == len(split.refusals) == len(fold.refusals)
    assert split.events == at_once.events == len(records)
    again = LedgerFold()
    for position, stream, _, event in records:
        again.apply(position, stream, event)
    archived = LedgerFold(archive=MemoryArchive())  # finished submissions leave memory
    archived.consume(records)
    assert at_once.snapshot() == fold.snapshot() == again.snapshot() == archived.snapshot()
    assert at_once.refusals == fold.refusals == again.refusals == archived.refusals


@given(st.lists(op, max_size=60))
# Intake asked of a submission that expired (so was archived) before it was admitted.
@example([("commission", 0, 2, None, 20), ("ops", 0, "expire", 120), ("intake", 0, None)])
def test_an_archived_fold_decides_and_folds_like_one_that_keeps_everything(
    ops: list[tuple[Any, ...]],
) -> None:
    kept, records = _run(ops)
    archived, again = _run(ops, LedgerFold(archive=MemoryArchive()))  # decide == apply inside
    assert again == records
    assert archived.snapshot() == kept.snapshot()
    assert archived.refusals == kept.refusals
    assert set(archived._subs) == set(kept._live)  # only live submissions stay in memory


@given(st.lists(op, max_size=40))
def test_stream_folds_equal_step_by_step(ops: list[tuple[Any, ...]]) -> None:
    _, records = _run(ops)
    streams: dict[str, list[Event]] = {}
    for _, stream, _, event in records:
        if stream.startswith("submission-"):
            streams.setdefault(stream, []).append(event)
    for events in streams.values():
        state: submission.SubmissionState | None = None
        for event in events:
            state = submission.apply(state, event)
        assert submission.fold(events) == state


costs = st.integers(500_000_000, 2_000_000_000)


@given(st.lists(st.tuples(costs, costs), min_size=4, max_size=4))
def test_speedup_is_the_inverse_geometric_mean_of_the_ratios(
    windows: list[tuple[int, int]],
) -> None:
    params = compile_policy(samples.policy())
    r1 = ratio(windows[0][1] + windows[1][1], windows[0][0] + windows[1][0])
    r2 = ratio(windows[2][1] + windows[3][1], windows[2][0] + windows[3][0])
    seen = look(params, 4, r1, ln(r1), r2)
    closed_form = CONTEXT.divide(1, CONTEXT.sqrt(CONTEXT.multiply(r1, r2)))
    assert abs(seen.speedup - closed_form) < Decimal("1e-30")
    assert seen.outcome in {"pass", "candidate_slower", "speed_threshold_not_met"}


attempt_op = st.one_of(
    *[st.tuples(st.just("window"), st.integers(70, 115), st.booleans())] * 4,
    st.tuples(st.just("audit"), st.sampled_from(["n0", "n1"]), st.integers(0, 2),
              st.integers(0, 80), st.integers(0, 1), st.integers(0, 2)),
    st.tuples(st.just("quality"), st.booleans(), st.booleans()),
    st.tuples(st.just("fault"), st.sampled_from(FAULT_CODES), st.integers(0, 9)),
    st.tuples(st.just("decide"), st.booleans()),
)


def _attempt_event(state: attempt.AttemptState, item: tuple[Any, ...]) -> Event | None:
    kind = item[0]
    if kind == "window":
        index = min(state.last_window + 1, 5)
        tokens = None if item[2] else 7
        return samples.window(index, state.params.orientation(index), 100, item[1],
                              candidate_tokens=tokens)
    if kind == "audit":
        _, node, rank, calls, violations, near = item
        return samples.audit(node, rank, calls, violations=min(violations, calls),
                             near_misses=min(near, calls))
    if kind == "quality":
        return samples.quality(drift_within_envelope=item[1], regression=item[2])
    if kind == "fault":
        # Faults are rare in practice; keep them rare so later stages get exercised.
        return None if item[2] else InfrastructureFault(code=item[1], stage="s", detail="")
    derived = attempt.derive_decision(state) if item[1] else None
    return samples.decided(derived or Decision("PASS", "", "COMPLETE", None, None, None))


@given(st.sampled_from(["normal", "calibration_observation"]), st.integers(2, 5),
       st.lists(attempt_op, max_size=30))
def test_attempt_steps_stay_within_their_table(
    plan: str, windows: int, ops: list[tuple[Any, ...]]
) -> None:
    z = {str(k): "1" for k in range(windows // 2 + 1, windows + 1)}
    params = compile_policy(samples.policy(windows=windows, z=z, futility_margin="0.1"))
    state = attempt.claim(samples.claimed("a" * 64, "c" * 64, plan=plan), params)
    for item in ops:
        event = _attempt_event(state, item)
        if event is None:
            continue
        result = attempt.step(state, event)
        if isinstance(result, Refusal):
            assert attempt.apply(state, event) is state
            assert result.state == state.status
            continue
        _check_target(state.status, result.status, "attempt-x", event)
        if result.status == attempt.DECIDED:
            assert result.decision == attempt.derive_decision(state)
        state = result
    decision = attempt.derive_decision(state)
    if decision is not None and decision.verdict == "PASS" and state.fault is None:
        assert state.quality is not None
        assert state.speed is not None and state.speed.verdict == "PASS"

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
from machine_world import (
    PRELUDE,
    World,
    op,
)

from machines import attempt, samples, submission
from machines.arithmetic import CONTEXT, Decision, compile_policy, ln, look, ratio
from machines.projection import LedgerFold, Record
from machines.refusal import Refusal
from machines.table import Guard, Table
from vocabulary.events import (
    FAULT_CODES,
    Event,
    InfrastructureFault,
)


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


def _run(
    ops: list[tuple[Any, ...]], fold: LedgerFold | None = None
) -> tuple[LedgerFold, list[Record]]:
    fold = LedgerFold() if fold is None else fold
    world = World(fold)
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

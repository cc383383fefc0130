"""Checks the fold's fast paths against the straightforward computations they replace.

- Looks decided from a float estimate of S (``quick_*``) must give, digit for digit, what
  the Decimal look of docs/machines.md gives: the reference (fast_path_reference.py) is the plain
  per-window computation (``ln``/``exp`` at precision 34 at every look).
- ``AttemptState.looks`` and ``ln_r1``, now derived from the windows, must equal the looks
  the reference took.
- ``submission_id_of`` spells canonical JSON directly for plain arrivals; it must equal
  ``vocabulary.codec.digest`` for any arrival.
- ``Table.moves`` must be exactly the compiled ``rules``.
- ``LedgerFold``'s plain dict writes (the replay) must build what its journaled writes
  (``decide_batch``) build.
- ``LedgerFold.apply`` reuses the decision ``derive_decision`` has just derived for the
  same attempt state: refusals and projections must equal those of deriving it again.
"""

from __future__ import annotations

import math
from decimal import Decimal
from typing import Any

import pytest
from fast_path_reference import (
    machine_looks,
    reference_looks,
)
from hypothesis import example, given
from hypothesis import strategies as st

from machines import arena, attempt, payment, projection, samples, submission
from machines.arithmetic import (
    CONTEXT,
    PolicyParams,
    compile_policy,
    quick_fixed,
    quick_outcome,
    quick_speedup,
)
from machines.projection import LedgerFold
from machines.refusal import Refusal
from machines.scenario import Scenario
from machines.table import Table
from vocabulary.codec import digest, fixed6
from vocabulary.events import (
    AttemptDecided,
    HoldReleased,
    InfrastructureFault,
    SubmissionArrived,
    SubmissionHeld,
    SubmissionResolved,
)

BILLION = 1_000_000_000


def _policy(windows: int, z: str, noise: str, gain: str, futility: str | None) -> PolicyParams:
    n1 = windows // 2
    zs = {str(k): z for k in range(n1 + 1, windows + 1)}
    return compile_policy(samples.policy(
        windows=windows, z=zs, window_noise=noise, boot_noise=noise, required_gain=gain,
        futility_margin=futility,
    ))


_COST = st.integers(min_value=1, max_value=2**53 - 1)
_NEAR = st.integers(min_value=900_000_000, max_value=1_100_000_000)


@given(
    windows=st.integers(min_value=2, max_value=5),
    z=st.sampled_from(["0", "1.645", "2", "-1", "3.5"]),
    noise=st.sampled_from(["0.01", "0.02", "0.001"]),
    gain=st.sampled_from(["0", "0.01"]),
    futility=st.sampled_from([None, "0.03", "0"]),
    costs=st.lists(st.tuples(_NEAR, _NEAR), min_size=5, max_size=5)
    | st.lists(st.tuples(_COST, _COST), min_size=5, max_size=5),
)
def test_quick_looks_equal_the_decimal_looks(
    windows: int, z: str, noise: str, gain: str, futility: str | None,
    costs: list[tuple[int, int]],
) -> None:
    params = _policy(windows, z, noise, gain, futility)
    assert machine_looks(params, costs) == reference_looks(params, costs)


def _costs_for(target: float, windows: int) -> list[tuple[int, int]]:
    """Returns costs whose S is within about 1e-16 of ``target`` (R1 = 1, R2 = 1 / S²)."""
    n1 = windows // 2
    scale = 10**15
    costs = [(BILLION, BILLION)] * n1
    costs.append((scale, round(scale / (target * target))))
    return costs + [(BILLION, BILLION)] * (windows - n1 - 1)


@given(
    windows=st.integers(min_value=2, max_value=5),
    offset=st.floats(min_value=-1e-12, max_value=1e-12),
    which=st.sampled_from(["gate", "slower"]),
)
@example(windows=2, offset=0.0, which="gate")
@example(windows=4, offset=0.0, which="slower")
@example(windows=3, offset=2e-16, which="gate")
@example(windows=5, offset=-2e-16, which="gate")
@example(windows=2, offset=-4e-16, which="slower")
def test_looks_next_to_a_threshold_still_equal_the_decimal_looks(
    windows: int, offset: float, which: str
) -> None:
    params = _policy(windows, "1.645", "0.01", "0", None)
    n1 = windows // 2
    quick = params.quick[n1 + 1]
    assert quick is not None and quick.gate is not None
    threshold = quick.gate if which == "gate" else quick.slower
    costs = _costs_for(threshold * (1 + offset), windows)
    assert machine_looks(params, costs) == reference_looks(params, costs)


def test_an_estimate_too_close_to_call_is_left_to_the_decimal_look() -> None:
    params = _policy(2, "1.645", "0.01", "0", None)
    quick = params.quick[2]
    assert quick is not None and quick.gate is not None
    for nudge in (0.0, 1e-13, -1e-13, 5e-12, -5e-12):  # within the estimate's error budget
        assert quick_outcome(quick, quick.gate * (1 + nudge), last=True) is None
        assert quick_outcome(quick, quick.slower * (1 + nudge), last=True) is None
    assert quick_outcome(quick, quick.gate * (1 + 1e-9), last=True) == "pass"
    assert quick_outcome(quick, quick.slower * (1 - 1e-9), last=True) == "candidate_slower"
    between = (quick.gate + quick.slower) / 2
    assert quick_outcome(quick, between, last=True) == "speed_threshold_not_met"
    assert quick_outcome(quick, between, last=False) == "continue"


def test_a_rounding_tie_of_the_speedup_takes_the_decimal_path() -> None:
    # S = sqrt(1.00000100000025) = 1.0000005 exactly: a tie at the 7th place.
    assert quick_fixed(quick_speedup(100_000_100_000_025, 10**14, 1, 1)) is None
    for nudge in (1e-13, -1e-13, 5e-12, -5e-12):
        assert quick_fixed(1.0000005 + nudge) is None
    assert quick_fixed(1.0000005 + 1e-9) == "1.000001"
    assert quick_fixed(1.0000005 - 1e-9) == "1.000000"
    params = _policy(2, "-1", "0.01", "0", None)  # z < 0: S = 1.0000005 passes at look 2
    costs = [(100_000_100_000_025, 10**14), (1, 1)]
    reference = reference_looks(params, costs)
    assert reference[-1][0] is not None and reference[-1][0].verdict == "PASS"
    assert machine_looks(params, costs) == reference


@given(st.floats(min_value=1e-6, max_value=1e3))
def test_quick_fixed_spells_what_fixed6_spells(value: float) -> None:
    text = quick_fixed(value)
    exact = Decimal(value)  # the float's exact value: fixed6 of it is the reference
    if text is None:  # only next to a tie at the 7th place
        scaled = CONTEXT.multiply(exact, Decimal(1_000_000))
        fraction = CONTEXT.subtract(scaled, scaled.to_integral_value(rounding="ROUND_FLOOR"))
        assert abs(fraction - Decimal("0.5")) < Decimal("0.01")
    else:
        assert text == fixed6(exact)


def test_quick_speedup_is_the_inverse_geometric_mean() -> None:
    estimate = quick_speedup(2_000_000_000, 1_975_000_000, 1_000_000_000, 975_000_000)
    assert math.isclose(estimate, 1.019128953289989, rel_tol=1e-15)


def test_an_extreme_pass_line_has_no_quick_line() -> None:
    params = _policy(2, "2300", "0.02", "0", None)  # L = exp(2300 · 0.02) − 1 ≈ 1e20
    assert params.quick[2] is None
    costs = [(BILLION, BILLION // 2), (BILLION, BILLION // 2)]
    assert machine_looks(params, costs) == reference_looks(params, costs)


_TEXT = st.text(min_size=1, max_size=12)


@given(
    arena_id=_TEXT | st.integers(), hotkey=_TEXT, content=_TEXT,
    block=st.integers(min_value=-(2**60), max_value=2**53 + 5),
    index=st.integers(min_value=0, max_value=2**53 - 1) | st.booleans(),
    subindex=st.integers(min_value=0, max_value=2**53 + 5),
)
@example(arena_id="a", hotkey='5"Miner\\', content="x", block=1, index=0, subindex=0)
@example(arena_id="a", hotkey="5Minér", content="x", block=1, index=0, subindex=0)
def test_submission_id_equals_the_codec_digest(
    arena_id: str | int, hotkey: str, content: str, block: int, index: int, subindex: int
) -> None:
    arrival = samples.arrived().arrival.model_construct(
        block=block, event_index=index, event_subindex=subindex
    )
    event = SubmissionArrived.model_construct(
        arena_id=arena_id, miner_hotkey=hotkey, content_hash=content, arrival=arrival,
    )
    payload = {
        "arena_id": arena_id, "block": block, "event_index": index, "event_subindex": subindex,
        "miner_hotkey": hotkey, "content_hash": content,
    }
    try:
        expected: Any = digest("arena-ledger.arrival", payload)
    except Exception as exc:  # the codec refuses some values; so must the fast path
        with pytest.raises(type(exc)):
            submission.submission_id_of(event)
        return
    assert submission.submission_id_of(event) == expected


def test_a_real_arrival_keeps_its_submission_id() -> None:
    event = samples.arrived("mlp-arena", hotkey="5Miner", content="delta-9", block=7)
    assert submission.submission_id_of(event) == event.submission_id


@pytest.mark.parametrize(
    "table",
    [attempt.TABLE, submission.TABLE, arena.TABLE, payment.PAYMENT_TABLE, payment.CREDIT_TABLE],
)
def test_moves_are_the_compiled_rules(table: Table[Any, Any]) -> None:
    assert set(table.moves) == set(table.rules)
    for key, rule in table.rules.items():
        if not isinstance(rule, str):
            assert table.moves[key] == rule.choose


def test_a_plain_move_runs_its_effect_with_the_target() -> None:
    seen: list[tuple[Any, Any, str]] = []

    def effect(state: Any, event: Any, target: str) -> Any:
        seen.append((state, event, target))
        return target

    table: Table[Any, Any] = Table(
        machine="attempt", states=("A", "B"), initial="A", opening="X",
        terminals=frozenset({"B"}), rules={("A", "Y"): "B", ("A", "Z"): "B"},
        effects={"Y": effect},
    )
    state, event = arena.TABLE, samples.window(1, 1, 1, 1)  # any objects will do
    assert table.moves["A", "Y"](state, event, None) == "B"
    assert seen == [(state, event, "B")]
    with pytest.raises(KeyError):
        table.moves["A", "Z"](state, event, None)  # no effect for Z: fails as step did


def _busy_scenario() -> Scenario:
    """Returns a scenario whose submissions visit every status the fold indexes."""
    sc = Scenario()
    sc.commission(fee_rao=0)
    slow = ((BILLION, 1_040_000_000),) * 4
    passed = sc.arrive(content="pass")
    sc.evaluate(passed, "att-1", samples.WORKED_EXAMPLE_COSTS, samples.audit(), samples.quality())
    failed = sc.arrive(content="slow", block=1_001)
    sc.evaluate(failed, "att-2", slow)
    sc.arrive(content="slow", block=1_002, hotkey="5Other")  # rejected: duplicate of a FAIL
    requeued = sc.arrive(content="requeue", block=1_003)
    fault = InfrastructureFault(code="adapter_start_failed", stage="start", detail="")
    sc.evaluate(requeued, "att-3", (), fault)
    held = sc.arrive(content="held", block=1_004)
    sc.append(f"submission-{held}", SubmissionHeld(reason="operator", block=1_005))
    sc.append(f"submission-{held}", HoldReleased(reason="ok", block=1_006, operator="5Op"))
    sc.arrive(content="waiting", block=1_007)
    return sc


def test_journaled_writes_build_the_same_projections_as_plain_ones() -> None:
    sc = _busy_scenario()
    plain, journaled = LedgerFold(), LedgerFold()
    # A journal that is never rolled back: every write takes the journaled path
    # (_put, _pop, _store_journaled) instead of the plain dict writes of the replay.
    journaled._journal = []
    assert plain.consume(sc.records) == 0
    assert journaled.consume(sc.records) == 0
    journaled._journal = None
    assert journaled.snapshot() == plain.snapshot() == sc.fold.snapshot()
    statuses = {s.status for s in plain.submissions("mlp-arena")}
    assert {"QUALIFIED", "FAILED", "REJECTED", "QUEUED"} <= statuses
    assert plain.submissions("mlp-arena") == journaled.submissions("mlp-arena")
    assert plain.queue("mlp-arena") == journaled.queue("mlp-arena")
    assert plain.live_submissions() == journaled.live_submissions() > 0


def _decided_variants(event: AttemptDecided) -> list[AttemptDecided]:
    """Returns wrong copies of a recorded AttemptDecided (each refused), then the event."""
    wrong = [
        {"speedup": "9.999999"},
        {"reason": "futility"},
        {"look_window": 99},
        {"decided_block": 0},
    ]
    return [event.model_copy(update=change) for change in wrong] + [event]


def _fold_with_derivations(records: list[Any], derive_before: set[str]) -> LedgerFold:
    """Applies ``records`` (AttemptDecided as its variants), calling ``derive_decision``
    before each event whose type is in ``derive_before``, as the replay does."""
    fold = LedgerFold()
    position = 0
    for _, stream, kind, event in records:
        events = _decided_variants(event) if kind == "AttemptDecided" else [event]
        for candidate in events:
            if kind in derive_before:
                fold.derive_decision(stream.partition("-")[2])
            position += 1
            fold.apply(position, stream, candidate)
    return fold


def test_apply_after_derive_decision_refuses_and_records_as_without() -> None:
    # LedgerFold.apply reuses the decision derive_decision has just derived for the same
    # attempt state; with it, without it, and with a stale one (derived before the last
    # window or audit changed the state), every refusal and projection must be the same.
    records = _busy_scenario().records
    plain = _fold_with_derivations(records, set())
    checked = _fold_with_derivations(records, {"AttemptDecided"})
    stale = _fold_with_derivations(records, {"WindowMeasured", "AuditNodeGraded"})
    codes = {refusal.code for _, _, refusal in plain.refusals}
    assert {"decision_mismatch", "decided_before_claim"} <= codes
    assert checked.refusals == stale.refusals == plain.refusals
    assert checked.snapshot() == stale.snapshot() == plain.snapshot()


def test_the_folds_attempt_moves_are_the_tables_keyed_by_class() -> None:
    # LedgerFold looks attempt moves up by event class, in the table's own cache; keyed by
    # class, it must give every move of the table.
    assert projection._ATTEMPT_MOVES is attempt.TABLE.by_class
    for (status, event_type), move in attempt.TABLE.moves.items():
        for kind in projection._ATTEMPT_EVENTS:
            if kind.event_type == event_type:
                assert attempt.TABLE.move_of(status, kind) is move
    by_type = {
        (status, kind.event_type): move
        for (status, kind), move in projection._ATTEMPT_MOVES.items()
        if move is not None
    }
    assert by_type == dict(attempt.TABLE.moves)



@pytest.mark.parametrize(
    "table",
    [attempt.TABLE, submission.TABLE, arena.TABLE, payment.PAYMENT_TABLE, payment.CREDIT_TABLE],
)
def test_steps_look_moves_up_by_class_as_the_table_has_them(table: Table[Any, Any]) -> None:
    # Table.step caches moves by (state, event class); folding a busy ledger fills the
    # caches, and every entry must be the table's move for that class's event type (None
    # where there is none, which step refuses).
    assert LedgerFold().consume(_busy_scenario().records) == 0
    for (status, kind), move in table.by_class.items():
        assert move is table.moves.get((status, kind.event_type))


def test_a_step_refuses_the_same_from_the_class_cache() -> None:
    state = submission.start(samples.arrived("mlp-arena", content="cache", block=3))
    event = SubmissionResolved(
        attempt_id="att-x", verdict="PASS", reason="", disposition="COMPLETE"
    )
    first = submission.TABLE.step(state, event, submission.SubmissionContext())
    assert (state.status, SubmissionResolved) in submission.TABLE.by_class
    again = submission.TABLE.step(state, event, submission.SubmissionContext())
    assert isinstance(first, Refusal) and again == first
    assert first.code == submission.TABLE.missing_code(state.status, "SubmissionResolved")

"""Holds replay's incremental settlement to the full recomputation (hypothesis).

``RewardScan`` must give the ``rewarded`` assessments ``assess_rewards`` gives for the same
submissions, after any sequence of puts (arrivals before the walked prefix, status
changes, removals), whenever it is asked. ``SettlementTracker`` must give, at every point
of a random ledger, the payload ``settle.compute`` gives from the whole fold, or raise the
same error; a tracker that rebuilds at every check must agree too.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from archive_double import (
    MemoryArchive,  # same directory, prepend import mode
)
from hypothesis import given
from hypothesis import strategies as st
from log_events import LogEvents, captured
from machine_world import PRELUDE, World, op  # same directory, prepend import mode
from settlement_inputs import drawn_input

from machines import samples
from machines.projection import LedgerFold
from machines.scenario import Scenario
from machines.settlement_rules import (
    SUBMISSION_STATUSES,
    ArenaInput,
    RewardScan,
    SubmissionInput,
    assess_rewards,
    settlement_payload,
)
from services.arena_ledger import CONTROL_HOTKEY
from services.settlements import (
    SettlementTracker,
    check_recorded,
    compute,
    fee_summary,
    settlement_input,
)
from vocabulary.errors import LedgerError
from vocabulary.events import (
    CreditSpent,
    EmissionPolicySet,
    IncumbentAdvanced,
    InfrastructureFault,
    QualificationStarted,
    SettlementComputed,
    SubmissionAdmitted,
    SubmissionExpired,
    SubmissionHeld,
)

SPEEDUPS = ("0.990000", "1.000000", "1.010000", "1.015000", "1.020000", "1.030000", "1.050000")
GROUPS = (samples.hex64("group:1"), samples.hex64("group:2"))


def _input(
    index: int, block: int, order: int, status: str, group: int, speedup: int, verdict: str
) -> SubmissionInput:
    return drawn_input(index, block, order, status, GROUPS[group], SPEEDUPS[speedup], verdict,
                       hotkeys=3)


puts = st.lists(
    st.tuples(
        st.integers(0, 11),  # which submission
        st.one_of(
            st.none(),  # removed (or never relevant)
            st.tuples(
                st.integers(0, 6),
                st.integers(0, 2),
                st.sampled_from(SUBMISSION_STATUSES),
                st.integers(0, 1),
                st.integers(0, len(SPEEDUPS) - 1),
                st.sampled_from(["PASS", "FAIL", "NO_DECISION"]),
            ),
        ),
        st.booleans(),  # ask for the rewards right after this put
    ),
    max_size=40,
)


def _follow(
    changes: list[tuple[int, Any, bool]], margin: str, every: int, keep: int | None
) -> None:
    """Puts ``changes`` into a scan, asking for the rewards where a change says so; they
    must equal ``assess_rewards`` of the submissions as they stand then.

    With ``keep`` (the scan drops its walked prefix) a QUALIFIED input never changes again,
    as in a ledger (it is terminal: what dropping relies on), and a scan that turns stale is
    built anew from every submission, as its owner does.
    """
    header = ArenaInput(arena_id="a1", emission_share_ppm=500_000, reward_margin=margin)
    scan = RewardScan(header, mark_every_walked=every, keep_walked=keep)
    current: dict[str, SubmissionInput] = {}
    for index, fields, ask in [*changes, (0, None, True)]:
        sid = samples.hex64(f"sub:{index}")
        if keep is not None and sid in current and current[sid].status == "QUALIFIED":
            continue
        sub = None if fields is None else _input(index, *fields)
        scan.put(sid, sub)
        if sub is None:
            current.pop(sid, None)
        else:
            current[sid] = sub
        if scan.stale:
            assert keep is not None  # a scan that keeps everything never turns stale
            with pytest.raises(ValueError, match="stale"):
                scan.rewarded()
            scan = RewardScan(header, mark_every_walked=every, keep_walked=keep)
            for held in current.values():
                scan.put(held.submission_id, held)
        if ask:
            full = ArenaInput("a1", 500_000, margin, list(current.values()))
            expected = tuple(a for a in assess_rewards([full]) if a.status == "rewarded")
            assert scan.rewarded() == expected
            if keep is None:
                assert len(scan) == len(current)
            else:
                assert len(scan) <= len(current)


@given(puts, st.sampled_from(["0.015", "0", "0.5"]), st.sampled_from([1, 2, 3, 64]))
def test_a_reward_scan_equals_assess_rewards_after_every_change(
    changes: list[tuple[int, Any, bool]], margin: str, every: int
) -> None:
    _follow(changes, margin, every, None)


@given(puts, st.sampled_from(["0.015", "0"]), st.sampled_from([1, 2, 3]), st.integers(0, 3))
def test_a_scan_that_drops_its_walked_prefix_equals_assess_rewards_or_says_stale(
    changes: list[tuple[int, Any, bool]], margin: str, every: int, keep: int
) -> None:
    _follow(changes, margin, every, keep)


def test_a_scan_drops_what_it_walked_and_turns_stale_when_a_change_reaches_it() -> None:
    scan = RewardScan(ArenaInput("a1", 1, "0.01"), mark_every_walked=2, keep_walked=2)
    subs = [_input(n, 10 + n, 0, "QUALIFIED", 0, 3, "PASS") for n in range(12)]
    for sub in subs:
        scan.put(sub.submission_id, sub)
    first = scan.rewarded()
    assert [a.submission_id for a in first] == [subs[0].submission_id]  # the rest: not better
    assert scan.dropped >= 6 and len(scan) == 12 - scan.dropped and not scan.stale
    late = _input(20, 30, 0, "QUALIFIED", 0, 6, "PASS")  # after everything: walks on
    scan.put(late.submission_id, late)
    assert [a.submission_id for a in scan.rewarded()] == [subs[0].submission_id, late.submission_id]
    early = _input(21, 10, 1, "QUEUED", 0, 0, "PASS")  # inside the dropped prefix
    scan.put(early.submission_id, early)
    assert scan.stale
    with pytest.raises(ValueError, match="stale"):
        scan.rewarded()


def test_a_scan_that_dropped_its_prefix_turns_stale_on_a_new_margin() -> None:
    scan = RewardScan(ArenaInput("a1", 1, "0"), mark_every_walked=1, keep_walked=0)
    for n in range(4):
        sub = _input(n, n, 0, "QUALIFIED", 0, 2, "PASS")
        scan.put(sub.submission_id, sub)
    scan.rewarded()
    assert scan.dropped > 0
    scan.set_arena(ArenaInput("a1", 1, "0.5"))
    assert scan.stale


def test_a_new_margin_restarts_the_walk() -> None:
    scan = RewardScan(ArenaInput("a1", 1, "0"), mark_every_walked=1)
    subs = [_input(n, n, 0, "QUALIFIED", 0, speedup, "PASS") for n, speedup in enumerate([2, 3])]
    for sub in subs:
        scan.put(sub.submission_id, sub)
    assert [a.submission_id for a in scan.rewarded()] == [s.submission_id for s in subs]
    scan.set_arena(ArenaInput("a1", 1, "0.5"))  # 1.015 x 1.5 > 1.02: the second one is lost
    assert [a.submission_id for a in scan.rewarded()] == [subs[0].submission_id]


def test_a_reward_scan_refuses_an_input_under_another_id() -> None:
    scan = RewardScan(ArenaInput(arena_id="a1", emission_share_ppm=1, reward_margin="0"))
    with pytest.raises(ValueError, match="put as"):
        scan.put(samples.hex64("other"), _input(1, 1, 0, "QUEUED", 0, 0, "PASS"))


POLICY = EmissionPolicySet(half_life_blocks=7_200, burn_hotkey="5Burn", validator_hotkey="5Val")


def _outcome(call: Any) -> tuple[Any, ...]:
    try:
        return ("payload", call())
    except LedgerError as exc:
        return ("raised", type(exc), exc.message, exc.context.get("reason"))


def _compare(fold: LedgerFold, trackers: list[SettlementTracker], block: int) -> None:
    expected = _outcome(lambda: settlement_payload(compute(fold, POLICY, block)))
    for tracker in trackers:
        assert _outcome(lambda t=tracker: t.payload(POLICY, block)) == expected  # type: ignore[misc]


@given(
    st.lists(op, max_size=60),
    st.integers(1, 7),
    st.sampled_from([3_000_000, 400]),
    st.sampled_from([None, 0, 1, 4096]),
)
def test_the_tracker_equals_a_full_recomputation_at_every_point(
    ops: list[tuple[Any, ...]], every: int, block: int, keep_walked: int | None
) -> None:
    # None: the fold keeps everything; else it archives finished submissions, and the
    # trackers take them as they leave and keep ``keep_walked`` behind each scan's walk.
    fold = LedgerFold(archive=None if keep_walked is None else MemoryArchive())
    world = World(fold)
    incremental = SettlementTracker(fold)
    rebuilding = SettlementTracker(fold)
    if keep_walked is not None:
        incremental.keep_walked = rebuilding.keep_walked = keep_walked
    rebuilding.dirty_entries_max = 0  # forgets at every note: rebuilds at every check
    steps = 0
    for item in [*PRELUDE, *ops]:
        for stream, event in world.build(item):
            # Noted before it is folded, as a replay does; a refused one too (harmless).
            incremental.note(stream, event)
            rebuilding.note(stream, event)
            fold.apply(fold.position + 1, stream, event)
            steps += 1
            if steps % every == 0:
                _compare(fold, [incremental, rebuilding], block)
    _compare(fold, [incremental, rebuilding], block)
    _compare(fold, [incremental], 3_000_000)


FEE = 1_000_000_000


@pytest.mark.parametrize("archived", [False, True])
def test_reward_groups_follow_the_incumbent_and_control_runs_earn_nothing(archived: bool) -> None:
    # docs/settlement.md: a reward group is (arena, incumbent_digest) as it stood at the arrival; a
    # control run is never rewarded and blocks nothing. Checked through the full
    # recomputation and through a tracker that takes finished submissions as they are
    # archived (``_finished_input``), on a fold that keeps them and on one that archives.
    faster = ((1_000_000_000, 950_000_000),) * 3  # S = 1/0.95: well past the margin
    passed = (samples.audit(), samples.quality())
    sc = Scenario()
    sc.commission("mlp-arena")
    first = sc.arrive(payment_ref="pay-1", paid_rao=FEE, hotkey="5Alice", content="a")
    sc.evaluate(first, "att-1", samples.WORKED_EXAMPLE_COSTS, *passed)
    control = sc.arrive(
        payment_ref="pay-2", paid_rao=FEE, hotkey=CONTROL_HOTKEY, content="c", block=1_001
    )
    sc.evaluate(control, "att-c", faster, *passed)
    advanced = IncumbentAdvanced(
        incumbent_digest=samples.hex64("incumbent-1"), block=1_002, reason="a better kernel"
    )
    sc.append("arena-mlp-arena", advanced)
    # The same speedup as the first PASS: lost_potential in its group, rewarded in a new one.
    second = sc.arrive(payment_ref="pay-3", paid_rao=FEE, hotkey="5Bob", content="b", block=1_003)
    sc.evaluate(second, "att-2", samples.WORKED_EXAMPLE_COSTS, *passed)
    # The same events again, into the fold under test with its tracker beside it.
    fold = LedgerFold(archive=MemoryArchive() if archived else None)
    tracker = SettlementTracker(fold)
    for position, stream, _, event in sc.records:
        tracker.note(stream, event)  # before the fold applies it, as a replay does
        assert fold.apply(position, stream, event) is None
    expected = [
        (first, samples.hex64("incumbent-0"), "5Alice"),
        (second, samples.hex64("incumbent-1"), "5Bob"),
    ]
    claims = compute(fold, POLICY, 2_000).claims
    assert [(c.submission_id, c.incumbent_digest, c.hotkey) for c in claims] == expected
    tracked = tracker.payload(POLICY, 2_000)["claims"]
    assert [(c["submission_id"], c["incumbent_digest"], c["hotkey"]) for c in tracked] == expected


# --- the tracker's own bookkeeping: when it rebuilds, what it keeps, what it says ---------

PASSED = (samples.audit(), samples.quality())
FAULT = InfrastructureFault(code="adapter_start_failed", stage="start", detail="")


def _feed(fold: LedgerFold, tracker: SettlementTracker | None, records: list[Any]) -> None:
    """Folds scenario records into ``fold``, each noted first by ``tracker`` (a replay's order)."""
    for _, stream, _, event in records:
        if tracker is not None:
            tracker.note(stream, event)
        assert fold.apply(fold.position + 1, stream, event) is None


def _full(fold: LedgerFold, block: int = 2_000) -> dict[str, Any]:
    return settlement_payload(compute(fold, POLICY, block))


def _two_passes() -> Scenario:
    """Two paid PASSes from two hotkeys in one arena (600,000 ppm of the emission)."""
    sc = Scenario()
    sc.commission("mlp-arena", emission_share_ppm=600_000)
    for n, hotkey in enumerate(("5Alice", "5Bob"), start=1):
        sid = sc.arrive(
            payment_ref=f"pay-{n}", paid_rao=FEE, hotkey=hotkey, content=hotkey, block=1_000 + n
        )
        sc.evaluate(sid, f"att-{n}", samples.WORKED_EXAMPLE_COSTS, *PASSED)
    return sc


@pytest.mark.parametrize("archived", [False, True])
def test_a_tracker_attached_to_a_fold_that_has_folded_events_starts_from_all_of_it(
    archived: bool,
) -> None:
    # A tracker trusts nothing it has not seen: until its first check it rebuilds from the
    # fold, so a fold that already holds paid (and, archiving, finished) submissions
    # settles the same through it. One that started from an empty catch-up would miss
    # their fees.
    records = _two_passes().records
    # Attached right after the first submission's resolution (archived, when archiving).
    split = 1 + next(n for n, r in enumerate(records) if r[2] == "SubmissionResolved")
    fold = LedgerFold(archive=MemoryArchive() if archived else None)
    _feed(fold, None, records[:split])
    assert fold.live_submissions() == 0
    assert len(list(fold.finished_records())) == (1 if archived else 0)
    tracker = SettlementTracker(fold)
    _feed(fold, tracker, records[split:])
    expected = _full(fold)
    assert expected["fees"]["arenas"]["mlp-arena"]["consumed_rao"] == 2 * FEE
    assert tracker.payload(POLICY, 2_000) == expected


def test_a_tracker_forgets_and_rebuilds_only_past_dirty_entries_max() -> None:
    # Touched entries are kept between checks up to dirty_entries_max of one kind (here 3);
    # one more, noted or found by bound() (the replay's own size check), makes the next
    # check rebuild every arena from the fold. Either way the payload is the full one.
    sc = _two_passes()
    first = len(sc.records)
    for n, hotkey in enumerate(("5Carol", "5Dave", "5Erin"), start=3):
        sc.arrive(
            payment_ref=f"pay-{n}", paid_rao=FEE, hotkey=hotkey, content=hotkey, block=1_010 + n
        )
    fold = LedgerFold()
    tracker = SettlementTracker(fold)
    _feed(fold, tracker, sc.records[:first])
    assert tracker.payload(POLICY, 2_000) == _full(fold)
    assert tracker.arena_builds == 1  # the first check builds the one arena
    tracker.dirty_entries_max = 3
    _feed(fold, tracker, sc.records[first:])  # three submissions and three payments touched
    tracker.bound()
    assert tracker.payload(POLICY, 2_000) == _full(fold)
    assert tracker.arena_builds == 1  # 3 is not past the bound: caught up incrementally

    late = sc.arrive(
        payment_ref="pay-6", paid_rao=FEE, hotkey="5Finn", content="5Finn", block=1_020
    )
    _feed(fold, tracker, sc.records[-3:])  # one submission and one payment touched
    tracker.dirty_entries_max = 0
    tracker.bound()  # one is past 0: forgotten
    assert tracker.payload(POLICY, 2_000) == _full(fold)
    assert tracker.arena_builds == 2

    tracker.dirty_entries_max = 1
    before = len(sc.records)
    sc.evaluate(late, "att-6", samples.WORKED_EXAMPLE_COSTS, *PASSED)
    _feed(fold, tracker, sc.records[before:])  # its own submission stream alone: 1 entry
    assert tracker.payload(POLICY, 2_000) == _full(fold)
    assert tracker.arena_builds == 2
    before = len(sc.records)
    sc.arrive(payment_ref="pay-7", paid_rao=FEE, hotkey="5Gus", content="5Gus", block=1_030)
    sc.arrive(payment_ref="pay-8", paid_rao=FEE, hotkey="5Hal", content="5Hal", block=1_031)
    _feed(fold, tracker, sc.records[before:])  # the second submission noted is past 1
    assert tracker.payload(POLICY, 2_000) == _full(fold)
    assert tracker.arena_builds == 3


@pytest.fixture
def settle_log() -> Iterator[LogEvents]:
    with captured("arena_ledger.settle") as events:
        yield events


def test_check_recorded_keeps_its_inputs_when_it_agrees_and_says_when_only_the_full_check_does(
    settle_log: LogEvents,
) -> None:
    sc = _two_passes()
    fold = LedgerFold()
    tracker = SettlementTracker(fold)
    _feed(fold, tracker, sc.records)
    payload = _full(fold)
    event = SettlementComputed.model_validate(payload)
    # Agreeing checks answer from the tracker: nothing is forgotten, nothing rebuilt.
    assert tracker.check_recorded(POLICY, event, payload) is None
    assert tracker.check_recorded(POLICY, event, payload) is None
    tracker.payload(POLICY, 2_000)
    assert tracker.arena_builds == 1
    assert settle_log.events == []

    # A real divergence is the full check's answer, and no tracker trouble is logged.
    forged = {**payload, "weights_ppm": {"5Mallory": 1_000_000}}
    difference = tracker.check_recorded(POLICY, SettlementComputed.model_validate(forged), forged)
    assert difference is not None and difference[0] == "weights_ppm"
    assert settle_log.events == []

    # A tracker that disagrees with a settlement the full recomputation accepts is a bug in
    # the tracker: the recorded settlement stands, and the disagreement is logged with the
    # position the settlement would take. (Its running fee sums are bent by hand: the
    # compiled build allows no method to be replaced.)
    assert tracker.check_recorded(POLICY, event, payload) is None
    builds = tracker.arena_builds
    tracker._fees["mlp-arena"][0] += 1
    assert tracker.payload(POLICY, 2_000) != payload
    assert tracker.check_recorded(POLICY, event, payload) is None
    assert [(e["event"], e["position"], e["level"]) for e in settle_log.events] == [
        ("settlement_tracker_disagreed", fold.position + 1, "warning")
    ]
    # "after any error or mismatch, it rebuilds from the fold": the next check agrees again
    # from a rebuilt state, without a second warning.
    assert tracker.check_recorded(POLICY, event, payload) is None
    assert len(settle_log.events) == 1
    assert tracker.arena_builds == builds + 1
    assert tracker.payload(POLICY, 2_000) == payload


@pytest.mark.parametrize("archived", [False, True])
def test_an_arena_commissioned_after_a_check_is_built_at_the_next(archived: bool) -> None:
    # The second arena is unknown to the tracker when its first submission finishes (and,
    # archiving, leaves the fold): the next check builds the arena's scan from the fold.
    sc = Scenario()
    sc.commission("mlp-arena", emission_share_ppm=600_000)
    first = sc.arrive(payment_ref="pay-1", paid_rao=FEE, hotkey="5Alice", content="a")
    sc.evaluate(first, "att-1", samples.WORKED_EXAMPLE_COSTS, *PASSED)
    checked = len(sc.records)
    sc.commission("attn-arena", emission_share_ppm=300_000)
    second = sc.arrive(
        arena_id="attn-arena",
        payment_ref="pay-2",
        paid_rao=FEE,
        hotkey="5Bob",
        content="b",
        block=1_001,
    )
    sc.evaluate(second, "att-2", samples.WORKED_EXAMPLE_COSTS, *PASSED)
    tracker, expected = _checked_at_and_after(sc, checked, archived)
    assert [c["submission_id"] for c in expected["claims"]] == [second, first]
    assert tracker.arena_builds == 2


def _checked_at_and_after(
    sc: Scenario, checked: int, archived: bool
) -> tuple[SettlementTracker, dict[str, Any]]:
    """Folds ``sc``'s records with a tracker, holding it to the full recomputation after the
    first ``checked`` and after all; returns the tracker and the last full payload."""
    fold = LedgerFold(archive=MemoryArchive() if archived else None)
    tracker = SettlementTracker(fold)
    _feed(fold, tracker, sc.records[:checked])
    assert tracker.payload(POLICY, 2_000) == _full(fold)
    _feed(fold, tracker, sc.records[checked:])
    expected = _full(fold)
    assert tracker.payload(POLICY, 2_000) == expected
    return tracker, expected


@pytest.mark.parametrize("archived", [False, True])
def test_a_recommission_changes_the_share_and_margin_a_built_scan_applies(
    archived: bool,
) -> None:
    # The arena's scan is built at the first check; a re-commission then sets another share
    # and reward margin, which the next check must apply as the full recomputation does.
    sc = Scenario()
    sc.commission("mlp-arena", emission_share_ppm=600_000)
    first = sc.arrive(payment_ref="pay-1", paid_rao=FEE, hotkey="5Alice", content="a")
    sc.evaluate(first, "att-1", samples.WORKED_EXAMPLE_COSTS, *PASSED)  # S 1.019129
    checked = len(sc.records)
    sc.commission("mlp-arena", emission_share_ppm=250_000,
                  sealed=samples.policy(reward_margin="0"), block=200)
    second = sc.arrive(payment_ref="pay-2", paid_rao=FEE, hotkey="5Bob", content="b",
                       block=1_001)
    sc.evaluate(second, "att-2", ((1_000_000_000, 975_000_000),) * 3, *PASSED)  # S 1.025641
    _, expected = _checked_at_and_after(sc, checked, archived)
    assert expected["weights_ppm"]["5Burn"] == 750_000  # the new share; the rest burns
    # Under the old margin 1.025641 < 1.019129 × 1.015 would be lost_potential.
    assert {c["submission_id"] for c in expected["claims"]} == {first, second}


def test_a_credit_spent_before_the_admission_counts_once_the_admission_is_folded() -> None:
    # Intake lets a credit be spent by a submission before its SubmissionAdmitted (the
    # credit counts as available to it); settled in between, the credit is spent on nothing
    # that has a fee yet. The admission touches only the submission: the tracker must
    # bring the credit it spent back in, whose amount is now the submission's fee.
    sc = Scenario()
    sc.commission("mlp-arena", emission_share_ppm=600_000)
    sc.credit("credit-1", "5Alice", FEE)
    arrived = samples.arrived(block=1_000, hotkey="5Alice", content="a")
    sid = arrived.submission_id
    sc.append(f"submission-{sid}", arrived)
    sc.append("credit-credit-1", CreditSpent(submission_id=sid))
    fold = LedgerFold()
    tracker = SettlementTracker(fold)
    _feed(fold, tracker, sc.records)
    assert tracker.payload(POLICY, 2_000) == _full(fold)
    admitted = SubmissionAdmitted.model_validate(
        {"block": 1_000, "fee": {"kind": "credit", "ref": "credit-1", "amount_rao": FEE}}
    )
    sc.append(f"submission-{sid}", admitted)
    _feed(fold, tracker, sc.records[-1:])
    expected = _full(fold)
    assert expected["fees"]["total"]["credits_spent_rao"] == FEE
    assert tracker.payload(POLICY, 2_000) == expected


def test_fees_list_every_arena_and_inputs_carry_the_latest_verdict() -> None:
    # fee_summary: an arena without a fee record appears with zeros (docs/settlement.md's fees per
    # arena), and one arena asked for is that arena alone. A submission requeued after a
    # NO_DECISION carries that verdict into settlement's input (it still blocks later ones).
    sc = Scenario()
    sc.commission("mlp-arena", emission_share_ppm=600_000)
    sc.commission("attn-arena", emission_share_ppm=300_000)
    sid = sc.arrive(payment_ref="pay-1", paid_rao=FEE, hotkey="5Alice", content="a")
    requeued = sc.evaluate(sid, "att-1", (), FAULT)
    assert (requeued.status, requeued.verdict) == ("QUEUED", "NO_DECISION")
    zero = {"consumed_rao": 0, "released_rao": 0, "credits_spent_rao": 0, "net_rao": 0}
    paid = {"consumed_rao": FEE, "released_rao": 0, "credits_spent_rao": 0, "net_rao": FEE}
    summary = fee_summary(sc.fold)
    assert summary["arenas"] == {"attn-arena": zero, "mlp-arena": paid}
    assert fee_summary(sc.fold, "attn-arena")["arenas"] == {"attn-arena": zero}
    (arena,) = [
        a for a in settlement_input(sc.fold, POLICY, 2_000).arenas if a.arena_id == "mlp-arena"
    ]
    assert [(s.submission_id, s.status, s.verdict) for s in arena.submissions] == [
        (sid, "QUEUED", "NO_DECISION")
    ]


# The tracker's bookkeeping at its edges: credit rows on a rebuild, a refused note among real
# changes, the bound on touched entries, archived credit-paid submissions, earlier arrivals
# blocking a later PASS, and which field a divergence names first.


@pytest.mark.parametrize("archived", [False, True])
def test_a_rebuild_after_a_check_counts_a_spent_credit_again(archived: bool) -> None:
    # The first check keeps a fee row for the credit Alice's live submission spent. Past
    # dirty_entries_max the tracker forgets; the rebuild empties the running sums and must
    # empty the per-credit rows with them, or the credit (unchanged since, so equal to its
    # old row) never goes back into the sums: credits_spent_rao would read 0.
    sc = Scenario()
    sc.commission("mlp-arena", emission_share_ppm=600_000)
    sc.credit("credit-1", "5Alice", FEE)
    sc.arrive(hotkey="5Alice", content="a")  # no payment: intake spends the credit
    fold = LedgerFold(archive=MemoryArchive() if archived else None)
    tracker = SettlementTracker(fold)
    _feed(fold, tracker, sc.records)
    expected = _full(fold)
    assert expected["fees"]["total"]["credits_spent_rao"] == FEE
    assert tracker.payload(POLICY, 2_000) == expected
    assert tracker.arena_builds == 1

    before = len(sc.records)
    sc.arrive(payment_ref="pay-2", paid_rao=FEE, hotkey="5Bob", content="b", block=1_001)
    tracker.dirty_entries_max = 0  # the next note is past the bound: the tracker forgets
    _feed(fold, tracker, sc.records[before:])
    expected = _full(fold)
    assert expected["fees"]["total"]["credits_spent_rao"] == FEE
    assert expected["fees"]["total"]["consumed_rao"] == FEE
    assert tracker.payload(POLICY, 2_000) == expected
    assert tracker.arena_builds == 2  # it did rebuild


def _faster(n: int) -> tuple[tuple[int, int], ...]:
    """Window costs for a PASS more than reward_margin (1.5%) faster than the one before."""
    return ((FEE, FEE - 20_000_000 * (n + 1)),) * 3


def test_a_refused_note_among_real_changes_costs_only_itself() -> None:
    # note's contract: a noted event the fold refuses costs nothing but a recomputation.
    # Ten refused events on submissions the fold never saw are noted among ten PASSes, each
    # faster than the last by more than the margin (each one a claim). The check must skip
    # the unknown ids and still take every PASS; stopping at the first unknown id would drop
    # the PASSes the touched set yields after it (all ten survive that only if every PASS
    # comes first in the set's order: 1 in 184,756).
    sc = Scenario()
    sc.commission("mlp-arena", emission_share_ppm=600_000)
    fold = LedgerFold()
    tracker = SettlementTracker(fold)
    _feed(fold, tracker, sc.records)
    assert tracker.payload(POLICY, 2_000) == _full(fold)

    before = len(sc.records)
    for n in range(10):
        sid = sc.arrive(
            payment_ref=f"pay-{n}", paid_rao=FEE, hotkey=f"5Miner{n}", content=f"c{n}",
            block=1_000 + n,
        )
        sc.evaluate(sid, f"att-{n}", _faster(n), *PASSED)
    _feed(fold, tracker, sc.records[before:])
    for n in range(10):
        ghost = f"submission-{samples.hex64(f'ghost:{n}')}"
        event = QualificationStarted(attempt_id=f"ghost-{n}")
        tracker.note(ghost, event)
        assert fold.apply(fold.position + 1, ghost, event) is not None  # refused: no such one

    expected = _full(fold)
    assert len(expected["claims"]) == 10
    assert tracker.payload(POLICY, 2_000) == expected


def test_touched_entries_never_exceed_dirty_entries_max() -> None:
    # dirty_entries_max bounds the tracker's memory between two checks: once one kind holds
    # more, it forgets every touched entry (the next check rebuilds), so no kind ever holds
    # more than the bound, however many events are noted before a check.
    sc = Scenario()
    sc.commission("mlp-arena", emission_share_ppm=600_000)
    for n in range(8):
        sc.arrive(
            payment_ref=f"pay-{n}", paid_rao=FEE, hotkey=f"5Miner{n}", content=f"c{n}",
            block=1_000 + n,
        )
    fold = LedgerFold()
    tracker = SettlementTracker(fold)
    tracker.dirty_entries_max = 2
    touched = (tracker._subs, tracker._arenas, tracker._payment_refs, tracker._credit_ids)
    for _, stream, _, event in sc.records:
        tracker.note(stream, event)
        assert fold.apply(fold.position + 1, stream, event) is None
        assert max(len(entries) for entries in touched) <= tracker.dirty_entries_max
    assert tracker.payload(POLICY, 2_000) == _full(fold)

    # The replay touches the sets itself and calls bound() now and then: the same bound.
    before = len(sc.records)
    for n in range(8, 12):
        sc.arrive(
            payment_ref=f"pay-{n}", paid_rao=FEE, hotkey=f"5Miner{n}", content=f"c{n}",
            block=1_000 + n,
        )
    for _, stream, _, event in sc.records[before:]:
        found = tracker.touches.get(type(event))
        assert found is not None
        found[1].add(stream[found[0] :])
        assert fold.apply(fold.position + 1, stream, event) is None
    tracker.bound()
    assert max(len(entries) for entries in touched) <= tracker.dirty_entries_max
    assert tracker.payload(POLICY, 2_000) == _full(fold)


@pytest.mark.parametrize("archived", [False, True])
@pytest.mark.parametrize("blocker", ["ARRIVED", "HELD"])
def test_an_earlier_arrival_not_yet_admitted_or_held_blocks_a_later_pass(
    blocker: str, archived: bool
) -> None:
    # docs/settlement.md: a PASS is reward-assessable once every earlier arrival of its arena is
    # terminal or a completed NO_DECISION. An earlier arrival still waiting for intake
    # (ARRIVED) or parked (HELD) keeps a later PASS pending: no claim, the pool burns. Once
    # the blocker ends (expired), the PASS is rewarded. Through the full recomputation and
    # through a tracker checked before and after.
    sc = Scenario()
    sc.commission("mlp-arena", emission_share_ppm=600_000)
    if blocker == "ARRIVED":
        early = samples.arrived(block=1_000, hotkey="5Carol", content="early")
        first = early.submission_id
        sc.append(f"submission-{first}", early)  # no intake outcome yet
    else:
        first = sc.arrive(payment_ref="pay-0", paid_rao=FEE, hotkey="5Carol", content="early")
        sc.append(f"submission-{first}", SubmissionHeld(reason="operator review", block=1_001))
    state = sc.fold.submission(first)
    assert state is not None and state.status == blocker
    later = sc.arrive(
        payment_ref="pay-1", paid_rao=FEE, hotkey="5Alice", content="a", block=1_002
    )
    sc.evaluate(later, "att-1", samples.WORKED_EXAMPLE_COSTS, *PASSED)
    fold = LedgerFold(archive=MemoryArchive() if archived else None)
    tracker = SettlementTracker(fold)
    _feed(fold, tracker, sc.records)
    pending = _full(fold)
    assert pending["claims"] == []
    assert pending["weights_ppm"] == {"5Burn": 1_000_000}
    assert tracker.payload(POLICY, 2_000) == pending

    before = len(sc.records)
    sc.append(f"submission-{first}", SubmissionExpired(block=1_000_000, reason="sla"))
    _feed(fold, tracker, sc.records[before:])
    rewarded = _full(fold)
    assert [c["submission_id"] for c in rewarded["claims"]] == [later]
    assert tracker.payload(POLICY, 2_000) == rewarded


def _one_pass(hotkey: str) -> Scenario:
    sc = Scenario()
    sc.commission("mlp-arena", emission_share_ppm=600_000)
    sid = sc.arrive(payment_ref="pay-1", paid_rao=FEE, hotkey=hotkey, content="a")
    sc.evaluate(sid, "att-1", samples.WORKED_EXAMPLE_COSTS, *PASSED)
    return sc


def test_a_divergence_names_the_substance_before_the_digest_that_follows_it() -> None:
    # A recorded settlement that differs in substance differs in its digest too: the
    # divergence names the substance (here the claims, first in field order), never the
    # digest, through the full check and through the tracker (which answers with it).
    honest, other = _one_pass("5Alice"), _one_pass("5Bob")
    assert len(honest.records) == len(other.records)
    recorded = _full(other.fold)  # as of the same position, with Bob's claim
    event = SettlementComputed.model_validate(recorded)
    fold = LedgerFold()
    tracker = SettlementTracker(fold)
    _feed(fold, tracker, honest.records)
    expected = _full(fold)
    assert recorded["settlement_digest"] != expected["settlement_digest"]
    difference = ("claims", recorded["claims"], expected["claims"])
    assert check_recorded(fold, POLICY, event, recorded) == difference
    assert tracker.check_recorded(POLICY, event, recorded) == difference


def test_a_settlement_as_of_another_position_is_named_so_before_any_policy() -> None:
    # A SettlementComputed is checked as of the position right before it first: one computed
    # as of another position is that difference, whatever else the ledger lacks (here the
    # EmissionPolicySet, whose absence refuses a settlement that stands at the right place).
    sc = _one_pass("5Alice")
    recorded = _full(sc.fold)  # as of the position before the last event below
    event = SettlementComputed.model_validate(recorded)
    fold = LedgerFold()
    tracker = SettlementTracker(fold)
    _feed(fold, tracker, sc.records)
    sc.commission("attn-arena", emission_share_ppm=100_000)
    _feed(fold, tracker, sc.records[-1:])
    stale = ("as_of_position", fold.position - 1, fold.position)
    assert check_recorded(fold, None, event, recorded) == stale
    assert tracker.check_recorded(None, event, recorded) == stale


def test_a_credit_paid_submission_leaves_the_tracker_with_its_record() -> None:
    # On an archiving fold the tracker holds what the fold holds in memory: once a
    # credit-paid submission finishes and is archived, its credit's amount lives on in the
    # arena's sums only; no per-credit row and no submission-to-credit entry stays behind
    # (else they would grow with the ledger's history, which the fold's memory does not).
    sc = Scenario()
    sc.commission("mlp-arena", emission_share_ppm=600_000)
    sc.credit("credit-1", "5Alice", FEE)
    sid = sc.arrive(hotkey="5Alice", content="a")  # intake spends the credit
    fold = LedgerFold(archive=MemoryArchive())
    tracker = SettlementTracker(fold)
    _feed(fold, tracker, sc.records)
    assert tracker.payload(POLICY, 2_000) == _full(fold)  # the credit's row is taken here
    assert tracker._credit_of == {sid: "credit-1"}

    before = len(sc.records)
    sc.evaluate(sid, "att-1", samples.WORKED_EXAMPLE_COSTS, *PASSED)
    _feed(fold, tracker, sc.records[before:])
    assert fold.live_submissions() == 0 and fold.held_credit_ids() == []  # archived
    expected = _full(fold)
    assert expected["fees"]["total"]["credits_spent_rao"] == FEE
    assert tracker.payload(POLICY, 2_000) == expected
    assert tracker._credits == {} and tracker._credit_of == {}

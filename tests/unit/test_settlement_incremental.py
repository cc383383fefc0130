"""Holds replay's incremental settlement to the full recomputation (hypothesis).

``RewardScan`` must give the ``rewarded`` assessments ``assess_rewards`` gives for the same
submissions, after any sequence of puts (arrivals before the walked prefix, status
changes, removals), whenever it is asked. ``SettlementTracker`` must give, at every point
of a random ledger, the payload ``settle.compute`` gives from the whole fold, or raise the
same error; a tracker that rebuilds at every check must agree too.
"""

from __future__ import annotations

from typing import Any

import pytest
from archive_double import MemoryArchive  # same directory, prepend import mode
from hypothesis import given
from hypothesis import strategies as st
from test_machine_properties import PRELUDE, _World, op  # same directory, prepend import mode

from ledger.domain import CONTROL_HOTKEY
from ledger.errors import LedgerError
from ledger.events import EmissionPolicySet, IncumbentAdvanced
from ledger.settle import SettlementTracker, compute
from machines import samples
from machines.projection import LedgerFold
from machines.scenario import Scenario
from machines.settlement import (
    SUBMISSION_STATUSES,
    ArenaInput,
    RewardScan,
    SubmissionInput,
    assess_rewards,
    settlement_payload,
)

SPEEDUPS = ("0.990000", "1.000000", "1.010000", "1.015000", "1.020000", "1.030000", "1.050000")
GROUPS = (samples.hex64("group:1"), samples.hex64("group:2"))


def _input(
    index: int, block: int, order: int, status: str, group: int, speedup: int, verdict: str
) -> SubmissionInput:
    passed = status == "QUALIFIED"
    return SubmissionInput(
        submission_id=samples.hex64(f"sub:{index}"),
        hotkey=f"5H{index % 3}",
        content_hash=samples.hex64(f"content:{index}"),
        block=block,
        event_index=order,
        event_subindex=0,
        status=status,
        incumbent_digest=GROUPS[group],
        verdict="PASS" if passed else (None if verdict == "PASS" else verdict),
        speedup=SPEEDUPS[speedup] if passed else None,
    )


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
    world = _World(fold)
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
    # DOMAIN §7: a reward group is (arena, incumbent_digest) as it stood at the arrival; a
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

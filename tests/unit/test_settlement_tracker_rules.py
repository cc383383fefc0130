"""Holds ``services.settlements`` to rules a mutation review of it found untested.

Each test pins one behaviour the module's docstrings or DOMAIN §7 promise and the other
tests let slip: credit rows forgotten on a rebuild, a refused note among real changes, the
memory bound on touched entries, entries left behind by an archived credit-paid submission,
an ARRIVED or HELD earlier arrival blocking a later PASS, and which field a divergence
names first (the rebuild after a check the tracker got wrong is held in
test_settlement_incremental.py, at the end of the test that bends its sums).
Like tests/unit/test_settlement_incremental.py, it drives a ``LedgerFold`` (archiving into
the in-memory ``MemoryArchive`` double, or not) with a tracker noting every event first.
"""

from __future__ import annotations

import pytest
from archive_double import MemoryArchive  # same directory, prepend import mode
from test_settlement_incremental import (  # same directory, prepend import mode
    FEE,
    PASSED,
    POLICY,
    _feed,
    _full,
)

from machines import samples
from machines.projection import LedgerFold
from machines.scenario import Scenario
from services.settlements import SettlementTracker, check_recorded
from vocabulary.events import (
    QualificationStarted,
    SettlementComputed,
    SubmissionExpired,
    SubmissionHeld,
)


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
    # DOMAIN §7: a PASS is reward-assessable once every earlier arrival of its arena is
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

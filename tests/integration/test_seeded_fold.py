"""Holds the guard's fold seeded from the read models to the fold of every event: the same
state (live and archived), the same decision for every event, on both backends.

A write decides from a fold started at the head from the read models (``services.
seeded_fold``): the live submissions in memory, everything finished read back from the
tables. If it held anything else than a fold of the whole ledger holds, a rule would
decide differently: an intake would be refused ``intake_mismatch``, a repeated id accepted,
a fee taken twice. Generated ledgers (payments, credits, rejections, repeated content,
holds, requeues, expiries) are appended batch by batch with a fresh ledger each time, so
each batch is decided by a newly seeded fold.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Any

import pytest
from generated_ledger import batches, generated

from ledger import migrate
from machines import samples
from machines.calibration import derive_conclusion
from machines.intake import Rejection
from machines.submission import SubmissionState, submission_id_of
from services.arena_ledger import ArenaLedger
from vocabulary.errors import Refused
from vocabulary.events import (
    CalibrationConcluded,
    CreditGranted,
    Event,
    IncumbentAdvanced,
    SubmissionArrived,
    SubmissionHeld,
    SubmissionRequeued,
)


@pytest.fixture
def ledger_url(store_url: str) -> Iterator[str]:
    migrate.upgrade(store_url)
    yield store_url


def _same_state(url: str) -> None:
    with ArenaLedger(url) as seeded, ArenaLedger(url, seed_from_read_models=False) as whole:
        assert seeded.guard.seeded and not whole.guard.seeded
        assert seeded.fold.snapshot() == whole.fold.snapshot()


def test_every_batch_is_decided_by_a_newly_seeded_fold_as_by_the_whole_fold(
    ledger_url: str,
) -> None:
    items = generated(1_500, seed=31)
    compared = 0
    for number, batch in enumerate(batches(items, random.Random(31), 25)):
        with ArenaLedger(ledger_url, actor="test") as ledger:
            ledger.append(batch)  # refused, it would raise: the seeded fold derives each intake
            assert ledger.guard.seeded
        if number % 15 == 0:
            _same_state(ledger_url)
            compared += 1
    _same_state(ledger_url)
    assert compared >= 3


def _variants(items: list[tuple[str, Event]], rng: random.Random) -> list[tuple[str, Event]]:
    """Events to decide against the finished ledger: every kind of earlier event appended
    again (a repeated arrival, payment, credit, claim, window, decision, resolution)."""
    by_type: dict[str, list[tuple[str, Event]]] = {}
    for stream, event in items:
        by_type.setdefault(event.event_type, []).append((stream, event))
    chosen = []
    for found in by_type.values():
        chosen += rng.sample(found, min(4, len(found)))
    return chosen


def test_a_seeded_fold_refuses_what_the_whole_fold_refuses(ledger_url: str) -> None:
    items = generated(1_200, seed=32)
    with ArenaLedger(ledger_url, actor="test") as ledger:
        for batch in batches(items, random.Random(32), 40):
            ledger.append(batch)
    variants = _variants(items, random.Random(5))
    with ArenaLedger(ledger_url) as seeded, ArenaLedger(
        ledger_url, seed_from_read_models=False
    ) as whole:
        decided: list[tuple[Any, Any]] = []
        for stream, event in variants:
            mine, theirs = seeded.fold.decide(stream, event), whole.fold.decide(stream, event)
            decided.append((mine, theirs))
        assert [m for m, _ in decided] == [t for _, t in decided]
        codes = {t.code for _, t in decided if t is not None}
        assert len(codes) >= 4, codes  # not vacuous: many rules refused something
        assert seeded.fold.snapshot() == whole.fold.snapshot()  # decide changed nothing


def test_a_head_moved_by_another_writer_seeds_the_fold_again(ledger_url: str) -> None:
    items = generated(600, seed=33)
    half = len(items) // 2
    with ArenaLedger(ledger_url, actor="one") as one, ArenaLedger(ledger_url, actor="two") as two:
        for batch in batches(items[:half], random.Random(1), 30):
            one.append(batch)
        two.append(items[half:half + 10])  # seeded at one's head, inside its append
        for batch in batches(items[half + 10:], random.Random(2), 30):
            one.append(batch)  # seeded again: two moved the head
        assert one.fold.position == two.fold.position or two.fold.position < one.fold.position
    _same_state(ledger_url)


def _again(arrived: SubmissionArrived, **changes: Any) -> SubmissionArrived:
    """Returns a new arrival like ``arrived`` with ``changes`` (and its own id)."""
    fields = {**arrived.model_dump(exclude_unset=True), **changes}
    draft = SubmissionArrived.model_validate({**fields, "submission_id": "0" * 64})
    return SubmissionArrived.model_validate({**fields, "submission_id": submission_id_of(draft)})


def test_intake_reads_what_finished_as_the_whole_fold_does(ledger_url: str) -> None:
    """Arrivals that only history can decide: the content of a FAILED submission again, a
    payment a finished submission consumed, the busiest hotkey's next admission, a hotkey
    with credits. A fresh (seeded) ledger derives each intake as the whole fold does."""
    items = generated(2_500, seed=34)
    with ArenaLedger(ledger_url, actor="test") as ledger:
        for batch in batches(items, random.Random(34), 40):
            ledger.append(batch)
    with ArenaLedger(ledger_url, seed_from_read_models=False) as whole:
        fold = whole.fold
        subs = [s for arena in fold.arenas() for s in fold.submissions(arena.arena_id)]
        head_block = max(s.arrival_block for s in subs)
        failed = next(s for s in subs if s.status == "FAILED")
        paid = next(s for s in subs if s.terminal and s.fee is not None
                    and s.fee.kind == "payment")
        busiest = max({s.hotkey for s in subs}, key=lambda h: sum(s.hotkey == h for s in subs))
        with_credit = next(c.hotkey for c in fold.credits() if c.submission_id is None)
    arrivals = {e.submission_id: e for _, e in items if isinstance(e, SubmissionArrived)}
    base = arrivals[failed.submission_id]
    crafted = {
        "failed content": _again(base, arrival={"block": head_block, "event_index": 1,
                                                "event_subindex": 0}, payment_ref="pay-new-1"),
        "used payment": _again(arrivals[paid.submission_id], miner_hotkey="5Other", arrival={
            "block": head_block, "event_index": 2, "event_subindex": 0}),
        "busiest hotkey": _again(base, miner_hotkey=busiest, content_hash="ab" * 32, arrival={
            "block": head_block, "event_index": 3, "event_subindex": 0},
            payment_ref="pay-new-3"),
        "credit": _again(base, miner_hotkey=with_credit, content_hash="cd" * 32, arrival={
            "block": head_block, "event_index": 4, "event_subindex": 0}, payment_ref=None),
    }
    outcomes = {}
    for name, arrived in crafted.items():
        with ArenaLedger(ledger_url, actor="test") as fresh:
            fresh.append([(f"submission-{arrived.submission_id}", arrived)])
        with ArenaLedger(ledger_url) as seeded, ArenaLedger(
            ledger_url, seed_from_read_models=False
        ) as whole:
            mine = seeded.fold.intake(arrived.submission_id, 500_000_000)
            assert mine == whole.fold.intake(arrived.submission_id, 500_000_000), name
            outcomes[name] = mine
    assert type(outcomes["failed content"]).__name__ == "Rejection"
    assert outcomes["used payment"] == Rejection("eval_cost_payment_used")
    assert getattr(outcomes["credit"], "kind", None) == "credit"


def test_a_settlement_from_the_read_models_is_the_whole_folds_byte_for_byte(
    ledger_url: str,
) -> None:
    """weights, settle and rewards compute from the read models (only PASSes and live
    submissions, fee sums): the same payload, digest and reward statuses as a fold of every
    event, and a settlement recorded that way replays."""
    from machines.settlement_rules import settlement_payload
    from services.replay import replay_store

    items = generated(2_500, seed=35)
    half = len(items) // 2
    with ArenaLedger(ledger_url, actor="test") as ledger:
        for batch in batches(items[:half], random.Random(35), 50):
            ledger.append(batch)
        # A new incumbent in every arena: later arrivals rank in a reward group of their own.
        for arena in ledger.fold.arenas():
            ledger.append([(f"arena-{arena.arena_id}", IncumbentAdvanced(
                incumbent_digest="ee" * 32, block=arena.incumbent_block + 1,
                reason="operator_reset"))])
        for batch in batches(items[half:], random.Random(36), 50):
            ledger.append(batch)
        groups = {ledger.fold.reward_group(s.submission_id) for a in ledger.fold.arenas()
                  for s in ledger.fold.submissions(a.arena_id) if s.status == "QUALIFIED"}
        assert len(groups) > 1, groups  # not vacuous: PASSes in more than one group
        block = max(s.arrival_block for a in ledger.fold.arenas()
                    for s in ledger.fold.submissions(a.arena_id)) + 5
        ledger.settle(block)  # the guard checks it from the read models too
    with ArenaLedger(ledger_url) as seeded, ArenaLedger(
        ledger_url, seed_from_read_models=False
    ) as whole:
        for at in (block, block + 7_200):
            assert settlement_payload(seeded.weights(at)) == settlement_payload(whole.weights(at))
        assert seeded.rewards() == whole.rewards()
        statuses = {row["status"] for row in seeded.rewards()}
        assert {"rewarded", "lost_potential"} <= statuses, statuses  # not vacuous
        arena = seeded.fold.arenas()[0].arena_id
        assert seeded.rewards(arena) == whole.rewards(arena)
    with ArenaLedger(ledger_url) as ledger:
        report = replay_store(ledger.store)
    assert report.ok and report.settlements_checked == 1


def test_a_batch_accepted_but_not_committed_makes_the_next_append_seed_again(
    ledger_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The guard folds a batch as it accepts it; when the transaction then fails, the fold
    is ahead of the ledger, so the next append seeds it again instead of trusting it."""
    import ledger.store as store_module
    from vocabulary.errors import StoreError

    items = generated(400, seed=37)
    with ArenaLedger(ledger_url, actor="test") as ledger:
        ledger.append(items[:300])
        head = ledger.store.head().position
        failing = store_module.chain_rows

        def broken(*args: Any, **kwargs: Any) -> Any:
            raise store_module.OperationalError("INSERT", None, Exception("disk I/O error"))

        monkeypatch.setattr(store_module, "chain_rows", broken)
        with pytest.raises(StoreError):
            ledger.append(items[300:320])
        assert ledger.store.head().position == head  # nothing was written...
        assert ledger.guard.fold.position == head + 20  # ...but the fold took the batch
        monkeypatch.setattr(store_module, "chain_rows", failing)
        # Another writer appends as many other events: the head is where the fold is, but
        # the fold holds a batch the ledger does not.
        with ArenaLedger(ledger_url, actor="other") as other:
            other.append([(f"credit-other-{n}", CreditGranted(
                credit_id=f"other-{n}", hotkey="5Other", amount_rao=1, note="meanwhile"))
                for n in range(20)])
        assert ledger.store.head().position == ledger.guard.fold.position
        ledger.append(items[300:320])  # decided from a fold seeded anew: accepted again
        assert ledger.store.head().position == head + 40
        for batch in batches(items[320:], random.Random(37), 20):
            ledger.append(batch)
    _same_state(ledger_url)


# --- live submissions seeded unloaded ---------------------------------------------------------
#
# The guard's fold holds no live submission after seeding: each is loaded when a rule first
# reads it, and the queries that list live submissions (the queue, claim's next, expire's
# due ones) read the unloaded ones from rm_submissions. Parked NO_DECISION submissions are
# most of the live state of a long ledger; these tests touch them after seeding.


def _appended(url: str, events: int, seed: int) -> None:
    with ArenaLedger(url, actor="test") as ledger:
        for batch in batches(generated(events, seed), random.Random(seed), 40):
            ledger.append(batch)


def _live_by_arena(url: str) -> dict[str, list[SubmissionState]]:
    """Returns the whole fold's live submissions per arena, in arrival-key order."""
    with ArenaLedger(url, seed_from_read_models=False) as whole:
        fold = whole.fold
        return {
            arena.arena_id: [s for s in fold.submissions(arena.arena_id) if not s.terminal]
            for arena in fold.arenas()
        }


def _whole_queue(url: str, arena_id: str) -> tuple[str | None, list[str]]:
    """Returns the whole fold's next claimable submission of an arena and its queue."""
    with ArenaLedger(url, seed_from_read_models=False) as whole:
        found = whole.fold.next_claimable(arena_id)
        queue = [s.submission_id for s in whole.fold.queue(arena_id)]
    return (None if found is None else found.submission_id), queue


def _queue_of(ledger: ArenaLedger, arena_id: str) -> tuple[str | None, list[str]]:
    found = ledger.fold.next_claimable(arena_id)
    queue = [s.submission_id for s in ledger.fold.queue(arena_id)]
    return (None if found is None else found.submission_id), queue


def test_a_parked_submission_is_loaded_when_a_write_first_touches_it(ledger_url: str) -> None:
    _appended(ledger_url, 2_500, 38)
    live = _live_by_arena(ledger_url)
    parked = [s for subs in live.values() for s in subs if s.status == "NO_DECISION"]
    assert len(parked) >= 3, [s.status for subs in live.values() for s in subs]
    block = max(s.arrival_block for subs in live.values() for s in subs) + 1
    requeued, held = parked[0].submission_id, parked[1].submission_id
    with ArenaLedger(ledger_url, actor="test") as ledger:
        fold = ledger.fold
        assert ledger.guard.seeded and fold._subs == {}  # seeded without a live submission
        ledger.requeue(requeued, "operator_retry", block)
        ledger.hold(held, "operator_review", block)
        assert ledger.guard.fold is fold  # the same fold decided both: loaded on first touch
        assert set(fold._subs) == {requeued, held}
        assert fold.submission(requeued).status == "QUEUED"  # type: ignore[union-attr]
        # Decided again from what the first write loaded: refused as the whole fold refuses.
        again = SubmissionRequeued(reason="operator_retry", block=block)
        with ArenaLedger(ledger_url, seed_from_read_models=False) as whole:
            expected = whole.fold.decide(f"submission-{requeued}", again)
        assert expected is not None and expected.code == "transition_not_allowed"
        assert fold.decide(f"submission-{requeued}", again) == expected
    _same_state(ledger_url)


def test_a_decided_batch_that_loads_a_submission_leaves_it_loaded_as_it_was(
    ledger_url: str,
) -> None:
    """decide_batch journals every write and rolls it back; the submission a rule loaded
    in it stays loaded, indexed as the whole fold indexes it, and unchanged."""
    _appended(ledger_url, 2_500, 39)
    live = _live_by_arena(ledger_url)
    parked = next(s for subs in live.values() for s in subs if s.status == "NO_DECISION")
    block = max(s.arrival_block for subs in live.values() for s in subs) + 1
    stream = f"submission-{parked.submission_id}"
    with ArenaLedger(ledger_url) as seeded, ArenaLedger(
        ledger_url, seed_from_read_models=False
    ) as whole:
        batch = [(stream, SubmissionRequeued(reason="retry", block=block), None),
                 (stream, SubmissionHeld(reason="review", block=block), None)]
        assert seeded.fold.decide_batch(batch) == whole.fold.decide_batch(batch) == [None, None]
        assert parked.submission_id in seeded.fold._subs
        assert seeded.fold.snapshot() == whole.fold.snapshot()
        assert seeded.fold.submission(parked.submission_id) == parked


def test_claim_takes_the_earliest_queued_submission_loaded_or_not(ledger_url: str) -> None:
    _appended(ledger_url, 2_500, 40)
    live = _live_by_arena(ledger_url)
    arena_id, subs = max(live.items(), key=lambda item: sum(
        s.status == "NO_DECISION" for s in item[1]))
    first, second = [s.submission_id for s in subs if s.status == "NO_DECISION"][:2]
    block = max(s.arrival_block for found in live.values() for s in found) + 1
    with ArenaLedger(ledger_url, actor="test") as ledger:
        ledger.requeue(second, "retry", block)  # queued ahead of every recent arrival
    with ArenaLedger(ledger_url, actor="test") as ledger:
        assert ledger.guard.fold._subs == {}
        expected = _whole_queue(ledger_url, arena_id)
        assert expected[0] == second  # not vacuous: the unloaded one is the next
        assert _queue_of(ledger, arena_id) == expected
        ledger.requeue(first, "retry", block)  # loaded, and now ahead of `second`
        expected = _whole_queue(ledger_url, arena_id)
        assert expected[0] == first and first in ledger.guard.fold._subs
        assert second not in ledger.guard.fold._subs
        assert _queue_of(ledger, arena_id) == expected
        ledger.hold(first, "review", block)  # loaded, no longer queued: `second` is next
        expected = _whole_queue(ledger_url, arena_id)
        assert expected[0] == second
        assert _queue_of(ledger, arena_id) == expected
        claimed = ledger.claim(attempt_id="lazy-claim", pair_id="pair-1",
                               validator_hotkey="5Validator", block=block, arena_id=arena_id)
        assert claimed.submission_id == second
        assert _queue_of(ledger, arena_id) == _whole_queue(ledger_url, arena_id)
    _same_state(ledger_url)


def test_expire_finds_the_due_submissions_loaded_or_not(ledger_url: str) -> None:
    _appended(ledger_url, 2_500, 41)
    live = _live_by_arena(ledger_url)
    with ArenaLedger(ledger_url, seed_from_read_models=False) as whole:
        sla = {a.arena_id: a.params.sla_blocks for a in whole.fold.arenas()}
    # The median live submission's deadline: some are due, some not.
    deadlines = sorted(s.arrival_block + sla[s.arena_id] for subs in live.values() for s in subs)
    block = deadlines[len(deadlines) // 2]
    with ArenaLedger(ledger_url, seed_from_read_models=False) as whole:
        due = whole.fold.expirable(block)
    assert 0 < len(due) < len(deadlines)
    assert {s.status for s in due} >= {"NO_DECISION"}, {s.status for s in due}
    with ArenaLedger(ledger_url, actor="test") as ledger:
        fold = ledger.fold
        assert fold.expirable(block) == due
        touched = due[len(due) // 2].submission_id
        ledger.hold(touched, "review", block)  # loaded, still live and due
        assert touched in fold._subs and len(fold._subs) == 1
        with ArenaLedger(ledger_url, seed_from_read_models=False) as whole:
            due = whole.fold.expirable(block)
        assert fold.expirable(block) == due
        assert ledger.expire(block) == [s.submission_id for s in due]
        assert fold.expirable(block) == []
    _same_state(ledger_url)


def test_a_seeded_fold_holds_calibrations_and_decides_their_windows(ledger_url: str) -> None:
    # A calibration's state lives in no read model: the seeded fold folds its stream with
    # the arenas', so a window or a conclusion appended later is decided as the whole fold
    # decides it (a re-commission in between changes nothing already started).
    arena = samples.commissioned()
    windows = samples.calibration_windows()
    with ArenaLedger(ledger_url, actor="test") as ledger:
        ledger.append([("arena-mlp-arena", arena)])
        ledger.append([("calibration-cal-1", samples.calibration_started(arena=arena)),
                       *[("calibration-cal-1", w) for w in windows[:5]]])
        ledger.append([("arena-mlp-arena", samples.commissioned(fee_rao=7))])
    _same_state(ledger_url)
    with ArenaLedger(ledger_url, actor="test") as ledger:
        assert ledger.guard.seeded
        with pytest.raises(Refused, match="calibration_window_out_of_order"):
            ledger.append([("calibration-cal-1", windows[4])])
        ledger.append([("calibration-cal-1", w) for w in windows[5:]])
    with ArenaLedger(ledger_url, actor="test") as ledger:
        state = ledger.fold.calibration("cal-1")
        assert state is not None
        derived = derive_conclusion(state)
        assert derived is not None
        ledger.append([("calibration-cal-1", CalibrationConcluded.model_validate(
            {**derived, "concluded_block": 300}))])
    _same_state(ledger_url)

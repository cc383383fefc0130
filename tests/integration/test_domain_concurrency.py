"""Races validators for one submission: the machines decide inside the append transaction.

Two ArenaLedger instances in separate processes (multiprocessing ``spawn``, so nothing is
shared but the database) claim the same QUEUED submission at the same moment. Exactly one
claim is recorded; the other gets ``Refused`` (``submission_not_queued``: its guard caught
up with the winner inside its own transaction) or ``ConcurrencyConflict``. A deterministic
variant shows why: a ledger whose cached fold is stale still cannot act on it.
"""

from __future__ import annotations

import multiprocessing
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from desk import FEE, Desk, open_desk

from ledger import migrate
from ledger.records import NO_STREAM
from machines import samples
from services.arena_ledger import ArenaLedger
from vocabulary.errors import Refused
from vocabulary.events import QualificationStarted


@pytest.fixture
def desk(store_url: str) -> Iterator[Desk]:
    yield from open_desk(store_url)

ROUNDS = 4
CONTENDERS = 2


def claim_in_race(url: str, me: int, sids: list[str], barrier: Any, results: Any) -> None:
    """Runs in a spawned process: per round, catch up, wait for the start, claim, report."""
    with ArenaLedger(url, actor=f"validator-{me}") as ledger:
        for n, sid in enumerate(sids):
            attempt_id = f"att-{n}-{me}"

            def claim(sid: str = sid, attempt_id: str = attempt_id) -> tuple[str, str]:
                assert ledger.fold.submission(sid) is not None
                barrier.wait(timeout=60)
                ledger.claim(attempt_id=attempt_id, pair_id="pair-1",
                             validator_hotkey=f"5Validator{me}", block=1_010,
                             submission_id=sid)
                return ("claimed", "")

            results.put((n, attempt_id, *outcome_of(claim)))


def outcome_of(action: Callable[[], tuple[str, str]]) -> tuple[str, str]:
    """Runs a contender's action: its own outcome, or how the ledger stopped it (refused,
    conflict), or the error the parent fails with."""
    from vocabulary.errors import ConcurrencyConflict

    try:
        return action()
    except Refused as exc:
        return ("refused", str(exc.context.get("reason")))
    except ConcurrencyConflict:
        return ("conflict", "")
    except BaseException as exc:  # reported, so the parent fails with the reason
        return ("error", repr(exc))


def race(url: str, sids: list[str]) -> dict[int, list[tuple[str, str, str]]]:
    """Runs CONTENDERS processes claiming each of ``sids`` in turn; outcomes by round."""
    context = multiprocessing.get_context("spawn")
    barrier = context.Barrier(CONTENDERS)
    results = context.Queue()
    workers = [context.Process(target=claim_in_race, args=(url, me, sids, barrier, results))
               for me in range(CONTENDERS)]
    for worker in workers:
        worker.start()
    rounds: dict[int, list[tuple[str, str, str]]] = {n: [] for n in range(len(sids))}
    for _ in range(CONTENDERS * len(sids)):
        n, *found = results.get(timeout=120)
        rounds[n].append(tuple(found))  # type: ignore[arg-type]
    for worker in workers:
        worker.join(timeout=60)
        assert worker.exitcode == 0
    return {n: sorted(found) for n, found in rounds.items()}


def test_two_processes_racing_to_claim_record_exactly_one_claim(desk: Desk,
                                                                 store_url: str) -> None:
    desk.commission()
    sids = [desk.admitted(f"raced-{n}") for n in range(ROUNDS)]
    for n, found in race(store_url, sids).items():
        sid = sids[n]
        assert not [f for f in found if f[1] == "error"], found
        winners = [a for a, outcome, _ in found if outcome == "claimed"]
        assert len(winners) == 1, found
        losers = [(outcome, reason) for a, outcome, reason in found if a not in winners]
        assert len(losers) == CONTENDERS - 1
        assert all(loser in {("refused", "submission_not_queued"), ("conflict", "")}
                   for loser in losers), found
        assert [desk.version(f"attempt-{a}") for a, _, _ in found] == [
            1 if a in winners else 0 for a, _, _ in found]
        started = [r.payload["attempt_id"] for r in desk.ledger.store.read_stream(
            f"submission-{sid}") if r.type == "QualificationStarted"]
        assert started == winners
        sub = desk.ledger.fold.submission(sid)
        assert sub is not None
        assert (sub.status, sub.attempts, sub.attempt_id) == ("QUALIFYING", 1, winners[0])
    assert desk.head == 1 + 3 * ROUNDS + 2 * ROUNDS
    assert desk.ledger.store.verify().ok


def test_a_ledger_with_a_stale_fold_cannot_claim_what_another_claimed(store_url: str) -> None:
    migrate.upgrade(store_url)
    with ArenaLedger(store_url, actor="a") as first, ArenaLedger(store_url, actor="b") as second:
        Desk(first).commission()
        sid = Desk(first).admitted("d1")
        stale = second.fold  # caught up: the submission is QUEUED here
        arena = stale.arena("mlp-arena")
        assert arena is not None and stale.submission(sid).status == "QUEUED"  # type: ignore[union-attr]
        Desk(first).claim(sid, "att-a")
        assert second.guard.fold.submission(sid).status == "QUEUED"  # type: ignore[union-attr]
        claimed = samples.claimed(sid, arena.commission_digest, attempt_id="att-b")
        head = second.store.head()
        with pytest.raises(Refused) as caught:
            second.append([("attempt-att-b", claimed, NO_STREAM),
                           (f"submission-{sid}", QualificationStarted(attempt_id="att-b"))])
        assert (caught.value.context["reason"], caught.value.context["state"]) == (
            "submission_not_queued", "NONE")
        assert second.store.head() == head
        assert second.fold.submission(sid).attempt_id == "att-a"  # type: ignore[union-attr]
        assert first.fold.payment("pay-d1").amount_rao == FEE  # type: ignore[union-attr]


def act_in_race(url: str, me: int, action: str, argument: Any, barrier: Any,
                results: Any) -> None:
    """Runs in a spawned process: wait for the start, do ``action`` once, report how it went."""
    with ArenaLedger(url, actor=f"validator-{me}") as ledger:

        def act() -> tuple[str, str]:
            assert ledger.fold.position  # seeded before the start: both decide from one head
            barrier.wait(timeout=60)
            if action == "intake":
                outcome = ledger.intake(argument[me], payment_amount_rao=FEE)
                return ("admitted" if outcome.admitted else "rejected", outcome.reason)
            ledger.conclude(argument, 1_020)
            return ("concluded", "")

        results.put((me, *outcome_of(act)))


def race_once(url: str, action: str, argument: Any) -> list[tuple[int, str, str]]:
    """Runs CONTENDERS processes doing ``action`` at the same moment; their outcomes."""
    context = multiprocessing.get_context("spawn")
    barrier, results = context.Barrier(CONTENDERS), context.Queue()
    workers = [context.Process(target=act_in_race,
                               args=(url, me, action, argument, barrier, results))
               for me in range(CONTENDERS)]
    for worker in workers:
        worker.start()
    found = sorted(results.get(timeout=120) for _ in workers)
    for worker in workers:
        worker.join(timeout=60)
        assert worker.exitcode == 0
    return found


def test_two_writers_racing_for_one_payment_and_one_decision_leave_one_and_true_read_models(
    desk: Desk, store_url: str
) -> None:
    from services import projections

    desk.commission()
    # Two arrivals naming one payment: one admission consumes it.
    arrivals = [Desk.arrival(content=f"rival-{me}", hotkey=f"5Rival{me}", payment_ref="pay-1")
                for me in range(CONTENDERS)]
    outcomes = race_once(store_url, "intake", arrivals)
    assert not [o for o in outcomes if o[1] == "error"], outcomes
    assert [o[1] for o in outcomes].count("admitted") == 1, outcomes
    assert all(o[1:] in {("admitted", ""), ("rejected", "eval_cost_payment_used"),
                         ("refused", "intake_mismatch"), ("conflict", "")}
               for o in outcomes), outcomes
    assert desk.types("payment-pay-1") == ["PaymentConsumed"]
    # One attempt, two validators concluding it: one AttemptDecided.
    sid = desk.admitted("concluded")
    desk.claim(sid, "att-race")
    desk.ledger.fault("att-race", "engine_killed", "speed", "raced")
    outcomes = race_once(store_url, "conclude", "att-race")
    assert not [o for o in outcomes if o[1] == "error"], outcomes
    assert desk.types("attempt-att-race").count("AttemptDecided") == 1
    assert [o[1] for o in outcomes].count("concluded") >= 1, outcomes
    # The read models agree with the events, after both races, on the ledger they share.
    assert projections.check_ledger(store_url) == desk.head

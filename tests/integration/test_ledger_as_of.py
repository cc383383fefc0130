"""Reads the ledger as it stood at a position (``ArenaLedger(url, as_of=N)``), on both backends.

An auditor asks what a settlement saw, why a submission was pending then, what the fees
were at a position. The view folds the events up to N only, so every query answers what
those events say; it appends nothing. The ledger is the settlement scenario of
tests/integration/settled_ledger.py (hold at 25, policy at 80, settlements at 81,
91 and 92, b1 released at 82 and failed by 90).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from settled_ledger import (  # same directory, prepend import mode
    ARENA_A,
    ARENA_B,
    FEES_A,
    FEES_B,
    FEES_TOTAL,
    HEAD_BEFORE_POLICY,
    OPERATOR,
    Settled,
    build_settled,
    open_ledger,
)

from ledger.records import EventDraft
from ledger.store import EventStore
from machines import samples
from machines.settlement_rules import settlement_payload
from services import operations as ops
from services.arena_ledger import ArenaLedger
from vocabulary.errors import InvalidInput, NotFound


@pytest.fixture
def built(store_url: str) -> Iterator[tuple[str, Settled]]:
    ledger = open_ledger(store_url)
    try:
        yield store_url, build_settled(ledger)
    finally:
        ledger.close()


def _view(url: str, as_of: int) -> ArenaLedger:
    return ArenaLedger(url, as_of=as_of)


def test_each_recorded_settlement_is_computed_again_as_of_its_position(
    built: tuple[str, Settled],
) -> None:
    url, settled = built
    for payload, _ in settled.settlements:
        with _view(url, payload["as_of_position"]) as view:
            again = settlement_payload(view.weights(payload["block"]))
        assert again == payload  # every field, the digest included
    # At the head the first settlement's block gives another vector: b1 failed since, so
    # mlp-b's pool is no longer burnt. The view is what reproduces the record.
    first = settled.settlements[0][0]
    with ArenaLedger(url) as ledger:
        now = settlement_payload(ledger.weights(first["block"]))
    assert now["settlement_digest"] != first["settlement_digest"]
    assert now["as_of_position"] == 92


def test_queries_answer_what_the_events_up_to_the_position_say(
    built: tuple[str, Settled],
) -> None:
    url, settled = built
    b1, b2 = settled.sids["b1"], settled.sids["b2"]
    with _view(url, HEAD_BEFORE_POLICY) as before, ArenaLedger(url) as head:
        # Before b1's release b2 waits on it; at the head b1 has failed and b2 is rewarded.
        then = {r["submission_id"]: r for r in before.rewards(ARENA_B)}
        now = {r["submission_id"]: r for r in head.rewards(ARENA_B)}
        assert (then[b2]["status"], then[b2]["blocked_by"]) == ("pending", [b1])
        assert (now[b2]["status"], now[b2]["blocked_by"]) == ("rewarded", [])
        assert [r["status"] for r in before.submissions(ARENA_B)] == ["HELD", "QUALIFIED"]
        assert [r["status"] for r in head.submissions(ARENA_B)] == ["FAILED", "QUALIFIED"]
        assert before.fees() == {"arenas": {ARENA_A: FEES_A, ARENA_B: FEES_B},
                                 "total": FEES_TOTAL}
        assert before.explain_submission(b1)["attempts"] == []
        assert [a["attempt_id"] for a in head.explain_submission(b1)["attempts"]] == ["att-b1"]
        assert before.guard.fold.position == HEAD_BEFORE_POLICY
        assert before.controls(ARENA_A) == head.controls(ARENA_A)
    with _view(url, 82) as released:  # the release is at 82; b1's claim comes after it
        with pytest.raises(NotFound) as missing:  # asked first: nothing folded yet
            released.explain_attempt("att-b1")
        assert missing.value.message == "attempt att-b1 does not exist as of position 82"
        assert released.explain_submission(b1)["status"] == "QUEUED"
    history = ops.history(url, "5Carol", as_of=24)  # b1 arrived; its hold is at 25
    assert [(r["submission_id"], r["status"]) for r in history][:1] == [(b1, "QUEUED")]
    assert all(r["latest_position"] <= 24 for r in history)
    assert [r["status"] for r in ops.history(url, "5Carol")][:1] == ["FAILED"]
    # history_at names the position it answered as of, from the same read (past the head,
    # the head).
    with EventStore(url) as store:
        top = store.head().position
    assert ops.history_at(url, "5Carol", as_of=24) == (24, history)
    assert ops.history_at(url, "5Carol", as_of=top + 5) == (top, ops.history(url, "5Carol"))


def test_a_view_past_the_head_is_the_head_and_as_of_zero_is_empty(
    built: tuple[str, Settled],
) -> None:
    url, _ = built
    with _view(url, 10**9) as past, ArenaLedger(url) as head:
        assert past.guard.fold.position == 0  # nothing folded before the first query
        assert past.submissions() == head.submissions()
        assert past.guard.fold.position == head.store.head().position == 92
    with _view(url, 0) as empty:
        assert empty.submissions() == []
        with pytest.raises(NotFound) as missing:
            empty.rewards(ARENA_A)
        assert missing.value.message == "arena 'mlp-a' is not commissioned as of position 0"


def _writes(view: ArenaLedger, sid: str) -> list[Any]:
    arrival = samples.arrived(ARENA_A, hotkey="5Dan", content="late", block=5_000,
                              payment_ref="pay-late").model_dump(mode="json",
                                                                 exclude_unset=True)
    del arrival["submission_id"]
    return [
        lambda: view.hold(sid, "review", 5_000),
        lambda: view.release(sid, "ok", 5_000, OPERATOR),
        lambda: view.settle(5_000),
        lambda: view.grant_credit("cr-late", "5Dan", 1, ""),
        lambda: view.commission(samples.commission_document()),
        lambda: view.intake(arrival, payment_amount_rao=1),
        lambda: view.expire(10**7),
        lambda: view.conclude("att-a1", 5_000),  # decided before 50: a retry answers it
        lambda: view.claim(attempt_id="att-late", pair_id="pair-1", validator_hotkey="5V",
                           block=5_000, arena_id=ARENA_A),
        # The store itself: its guard is the view's, and decides no batch either.
        lambda: view.store.append([EventDraft("credit-cr-x", "CreditGranted", {
            "credit_id": "cr-x", "hotkey": "5Dan", "amount_rao": 1, "note": ""})]),
    ]


def test_a_view_appends_nothing(built: tuple[str, Settled]) -> None:
    url, settled = built
    with _view(url, 50) as view:
        for write in _writes(view, settled.sids["a5"]):
            with pytest.raises(InvalidInput) as refused:
                write()
            assert refused.value.context["path"] == "as_of"
            assert refused.value.message.startswith(
                "this is the ledger as of position 50, a view for reading")
        assert view.store.head().position == 92


@pytest.mark.parametrize("as_of", [-1, 2**53, True, 1.0, "5"])
def test_as_of_must_be_a_position(store_url: str, as_of: Any) -> None:
    with pytest.raises(InvalidInput) as refused:
        ArenaLedger(store_url, as_of=as_of)
    assert refused.value.context["path"] == "as_of"
    assert "as_of is a position, an integer from 0 to 2**53 - 1" in refused.value.message

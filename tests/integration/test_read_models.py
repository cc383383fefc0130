"""Holds the read models (SQL tables of current state, kept in the append transaction) to the
events: after every guarded append they equal a rebuild from the events, every query answers
from them what the fold answers, a ledger migrated from the previous revision is backfilled,
and a read model that differs from the events is found, named, and rebuilt. Both backends.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Any

import pytest
from generated_ledger import answers, batches, generated, reward_statuses
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from settled_ledger import ARENA_A, build_before_policy, evaluate, open_ledger, set_policy
from sqlalchemy import inspect, text

from ledger import migrate, read_models
from ledger.records import EventDraft
from ledger.store import EventStore
from machines.settlement_rules import settlement_payload
from services import projections
from services.arena_ledger import ArenaLedger
from vocabulary.errors import IntegrityError, InvalidInput, SchemaNotInitialised
from vocabulary.events import ControlRegistered

PREVIOUS_REVISION = "0004_pg_recorded_at_brin"


@pytest.fixture
def ledger_url(store_url: str) -> Iterator[str]:
    migrate.upgrade(store_url)
    yield store_url


def _append_all(url: str, items: list[Any], seed: int, largest: int = 40) -> int:
    """Appends ``items`` through the guard in random batches; returns how many batches."""
    count = 0
    with ArenaLedger(url, actor="test") as ledger:
        for batch in batches(items, random.Random(seed), largest):
            ledger.append(batch)
            count += 1
    return count


def _check(url: str) -> projections.Difference | None:
    with EventStore(url) as store, store.reading() as conn:
        return projections.check(conn)


def _with_controls_and_settlements(url: str) -> None:
    """Registers a control on a delta digest that already has submissions (so the report has
    rows with verdicts) and settles twice."""
    with ArenaLedger(url, actor="test") as ledger:
        arena = ledger.fold.arenas()[0]
        subs = ledger.fold.submissions(arena.arena_id)
        digest = next(s.delta_digest for s in subs if s.verdict is not None)
        ledger.append([(f"arena-{arena.arena_id}", ControlRegistered(
            control_id="identity-1", kind="identity", delta_digest=digest,
            expected_verdict="FAIL"))])
        block = max(s.arrival_block for s in subs)
        ledger.settle(block + 10)
        ledger.settle(block + 20)


def test_a_generated_ledger_answers_from_the_read_models_what_the_fold_answers(
    ledger_url: str,
) -> None:
    items = generated(2_500, seed=5)
    assert _append_all(ledger_url, items, seed=1) > 50
    _with_controls_and_settlements(ledger_url)
    assert _check(ledger_url) is None
    with EventStore(ledger_url) as store:
        head = store.head().position
        with store.reading() as conn:
            assert read_models.position(conn) == head
            settled = conn.execute(text("SELECT COUNT(*) FROM rm_settlements")).scalar()
            windows = conn.execute(text("SELECT COUNT(*) FROM rm_windows")).scalar()
    assert settled == 2 and windows
    _claims_weights_and_hotkeys_match(ledger_url)
    stored, assessed = reward_statuses(ledger_url)
    assert stored == assessed and {"rewarded", "lost_potential"} <= set(stored.values())
    from_models, from_fold = answers(ledger_url), answers(ledger_url, as_of=head)
    assert from_models == from_fold
    # Not vacuous: the ledger has every kind of row the answers read.
    statuses = {row["status"] for row in from_models["submissions"]}
    assert {"QUALIFIED", "FAILED", "REJECTED", "QUEUED"} <= statuses, statuses
    assert from_models["fees"]["total"]["consumed_rao"] > 0
    assert any(row["outcome"] != "pending"
               for arena in from_models["per_arena"].values() for row in arena["controls"])
    assert from_models["stats"]["holds"]["placed"]


@settings(max_examples=4, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 10_000), largest=st.integers(8, 40))
def test_the_read_models_equal_a_rebuild_after_every_batch(
    ledger_url: str, seed: int, largest: int
) -> None:
    # A fresh ledger per example (the fixture's database outlives the examples).
    migrate.downgrade(ledger_url, "base", discard_recorded=True)
    migrate.upgrade(ledger_url)
    checked = 0
    with ArenaLedger(ledger_url, actor="test") as ledger:
        for batch in batches(generated(240, seed=seed), random.Random(seed), largest):
            ledger.append(batch)
            difference = _check(ledger_url)
            assert difference is None, difference.describe()
            checked += 1
            if checked % 5 == 0:
                # The reward statuses, kept batch by batch, equal the rebuild's (a walk of
                # every PASS) above; here also the fold's own assessment (the 2,500-event
                # ledger above and the requeue below hold every status).
                stored, assessed = reward_statuses(ledger_url)
                assert stored == assessed
    assert checked >= 240 // largest
    stored, assessed = reward_statuses(ledger_url)
    assert stored == assessed


def test_a_ledger_of_the_previous_revision_is_backfilled_by_the_upgrade(store_url: str) -> None:
    migrate.upgrade(store_url, PREVIOUS_REVISION)
    items = generated(1_200, seed=9)
    # Written as the previous release wrote it: no guard, no read models.
    with EventStore(store_url, schema_revision=PREVIOUS_REVISION) as old:
        for at in range(0, len(items), 500):
            old.append([EventDraft.of(s, e) for s, e in items[at:at + 500]])
        head = old.head().position
    seen: list[tuple[str, int, int]] = []
    with pytest.raises(SchemaNotInitialised, match="no read models"):
        projections.check_ledger(store_url)
    migrate.upgrade(store_url, progress=lambda *report: seen.append(report))
    assert seen[0] == ("building the read models", 0, head)
    assert seen[-1] == ("building the read models", head, head) and len(seen) > 2
    assert projections.check_ledger(store_url) == head
    assert answers(store_url) == answers(store_url, as_of=head)
    # Downgrading drops the read models and keeps every event.
    migrate.downgrade(store_url, PREVIOUS_REVISION)
    with EventStore(store_url, schema_revision=PREVIOUS_REVISION) as old:
        assert old.head().position == head
        with old.reading() as conn:
            tables = conn.execute(text(
                "SELECT COUNT(*) FROM information_schema.tables WHERE table_name LIKE 'rm_%'"
                if old.backend == "postgresql" else
                "SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND name LIKE 'rm_%'"
            )).scalar()
    assert tables == 0


def test_a_ledger_of_revision_0006_gets_its_reward_statuses_from_the_upgrade(
    store_url: str,
) -> None:
    # 0007 adds the reward status and frontiers; the upgrade fills them from the events and
    # the downgrade drops them alone (the other read models stay, as 0006 reads them).
    migrate.upgrade(store_url, "0006_read_model_claims")
    items = generated(1_500, seed=21)
    with EventStore(store_url, schema_revision="0006_read_model_claims") as old:
        for at in range(0, len(items), 500):
            old.append([EventDraft.of(s, e) for s, e in items[at:at + 500]])
        head = old.head().position
    migrate.upgrade(store_url)
    assert projections.check_ledger(store_url) == head
    stored, assessed = reward_statuses(store_url)
    assert stored == assessed and {"rewarded", "lost_potential"} <= set(stored.values())
    migrate.downgrade(store_url, "0006_read_model_claims")
    with (EventStore(store_url, schema_revision="0006_read_model_claims") as old,
          old.reading() as conn):
        assert read_models.position(conn) == head
        columns = {c["name"] for c in inspect(conn).get_columns("rm_submissions")}
        assert "reward_status" not in columns and "reward_group" in columns
        assert not inspect(conn).has_table("rm_reward_frontiers")
    migrate.upgrade(store_url)
    assert reward_statuses(store_url)[0] == stored


def test_a_changed_read_model_row_is_found_named_and_rebuilt(ledger_url: str) -> None:
    _append_all(ledger_url, generated(600, seed=3), seed=2)
    with EventStore(ledger_url) as store, store.writing() as conn:
        sid = conn.execute(text(
            "SELECT submission_id FROM rm_submissions WHERE status = 'FAILED' "
            "ORDER BY submission_id LIMIT 1")).scalar()
        conn.execute(text("UPDATE rm_submissions SET status = 'QUALIFIED' "
                          "WHERE submission_id = :s"), {"s": sid})
    with pytest.raises(IntegrityError) as caught:
        projections.check_ledger(ledger_url)
    assert caught.value.exit_code == 4
    assert caught.value.message.startswith(
        f"the read models differ from the events: rm_submissions row ('{sid}'): column status "
        "is 'QUALIFIED' stored, 'FAILED' from the events")
    assert caught.value.context["reason"] == "read_model_mismatch"
    head = projections.rebuild_ledger(ledger_url)
    assert projections.check_ledger(ledger_url) == head
    with ArenaLedger(ledger_url) as ledger:
        assert ledger.explain_submission(sid)["status"] == "FAILED"


def _stored_statuses(url: str, sids: dict[str, str]) -> dict[str, str | None]:
    stored, assessed = reward_statuses(url)
    assert stored == assessed  # the fold of every event judges them so
    return {name: stored.get(sid) for name, sid in sids.items()}


def test_a_requeued_no_decision_makes_the_later_passes_pending_until_it_is_decided(
    store_url: str,
) -> None:
    # settled_ledger: a2 (NO_DECISION, COMPLETE) arrived before a3 (lost_potential) and a4
    # (rewarded). Requeued, it blocks them again; its PASS then outranks both.
    ledger = open_ledger(store_url)
    with ledger:
        sids = build_before_policy(ledger)
        set_policy(ledger)
        passes = {k: sids[k] for k in ("a1", "a3", "a4", "b2")}
        assert _stored_statuses(store_url, passes) == {
            "a1": "rewarded", "a3": "lost_potential", "a4": "rewarded", "b2": "pending"}
        ledger.requeue(sids["a2"], "operator_retry", 1_300)
        assert _stored_statuses(store_url, passes) == {
            "a1": "rewarded", "a3": "pending", "a4": "pending", "b2": "pending"}
        with ledger.store.reading() as conn:
            frontier = conn.execute(text(
                "SELECT submission_id FROM rm_reward_frontiers WHERE arena_id = :a"),
                {"a": ARENA_A}).scalar()
        assert frontier == sids["a2"]
        evaluate(ledger, sids["a2"], "att-a2-again", 940_000_000)  # PASS "1.063830"
        passes["a2"] = sids["a2"]
        assert _stored_statuses(store_url, passes) == {
            "a1": "rewarded", "a2": "rewarded", "a3": "lost_potential", "a4": "lost_potential",
            "b2": "pending"}
        head = ledger.store.head().position
        preview = ledger.weights(3_000)
    with ArenaLedger(store_url, seed_from_read_models=False) as whole:
        assert settlement_payload(preview) == settlement_payload(whole.weights(3_000))
        assert [c.submission_id for c in preview.claims] == [sids["a1"], sids["a2"]]
    assert projections.check_ledger(store_url) == head


def test_a_wrong_reward_status_is_found_named_and_rebuilt(store_url: str) -> None:
    ledger = open_ledger(store_url)
    with ledger:
        sids = build_before_policy(ledger)
    with EventStore(store_url) as store, store.writing() as conn:
        conn.execute(text("UPDATE rm_submissions SET reward_status = 'rewarded' "
                          "WHERE submission_id = :s"), {"s": sids["a3"]})
    with pytest.raises(IntegrityError) as caught:
        projections.check_ledger(store_url)
    assert caught.value.message.startswith(
        f"the read models differ from the events: rm_submissions row ('{sids['a3']}'): column "
        "reward_status is 'rewarded' stored, 'lost_potential' from the events")
    head = projections.rebuild_ledger(store_url)
    assert projections.check_ledger(store_url) == head
    assert _stored_statuses(store_url, {"a3": sids["a3"]}) == {"a3": "lost_potential"}


def test_a_missing_and_an_extra_row_are_each_named(ledger_url: str) -> None:
    _append_all(ledger_url, generated(400, seed=4), seed=4)
    with EventStore(ledger_url) as store, store.writing() as conn:
        aid = conn.execute(text("SELECT MIN(attempt_id) FROM rm_attempts")).scalar()
        conn.execute(text("DELETE FROM rm_attempts WHERE attempt_id = :a"), {"a": aid})
    with pytest.raises(IntegrityError, match=rf"rm_attempts row \('{aid}'\) is missing"):
        projections.check_ledger(ledger_url)
    projections.rebuild_ledger(ledger_url)
    with EventStore(ledger_url) as store, store.writing() as conn:
        conn.execute(text("INSERT INTO rm_counters (counter, key, value) "
                          "VALUES ('decided', 'no-such-arena', 1)"))
    with pytest.raises(IntegrityError, match=r"rm_counters row .* is stored, but the events"):
        projections.check_ledger(ledger_url)


def test_events_appended_without_the_guard_leave_the_read_models_behind_and_the_queries_fold(
    ledger_url: str,
) -> None:
    items = generated(700, seed=6)
    _append_all(ledger_url, items[:500], seed=6)
    with EventStore(ledger_url) as bare:  # no guard: what an import or a raw script does
        bare.append([EventDraft.of(s, e) for s, e in items[500:]])
        head = bare.head().position
    with pytest.raises(IntegrityError, match="reflect position 500, but the head is"):
        projections.check_ledger(ledger_url)
    with ArenaLedger(ledger_url) as ledger:
        with ledger._view() as view:
            assert view is None  # the models cannot answer: the queries fold instead
        assert len(ledger.submissions()) == len(answers(ledger_url, as_of=head)["submissions"])
        # A guarded append does not advance models that are behind.
        arena = ledger.fold.arenas()[0].arena_id
        ledger.append([(f"arena-{arena}", ControlRegistered(
            control_id="late", kind="identity", delta_digest="ab" * 32,
            expected_verdict="FAIL"))])
    with pytest.raises(IntegrityError, match="reflect position 500"):
        projections.check_ledger(ledger_url)
    assert projections.rebuild_ledger(ledger_url) == head + 1
    assert answers(ledger_url) == answers(ledger_url, as_of=head + 1)


def test_a_view_as_of_a_position_is_read_only_and_folds(ledger_url: str) -> None:
    _append_all(ledger_url, generated(300, seed=8), seed=8)
    with ArenaLedger(ledger_url, as_of=100) as past:
        with past._view() as view:
            assert view is None
        assert all(row["submission_id"] for row in past.submissions())
        with pytest.raises(InvalidInput, match="as of position 100"):
            past.append([])


def test_the_read_models_order_ids_in_byte_order_on_a_punctuation_blind_database(
    punctuation_blind_pg_database: str,
) -> None:
    url = punctuation_blind_pg_database
    migrate.upgrade(url)
    _append_all(url, generated(400, seed=12), seed=12)
    assert projections.check_ledger(url) > 0
    with EventStore(url) as store:
        head = store.head().position
    assert answers(url) == answers(url, as_of=head)


def _claims_weights_and_hotkeys_match(url: str) -> None:
    """What settlements paid and the per-hotkey view say what the events and queries say."""
    with EventStore(url) as store:
        recorded = [r for r in store.read_all(types=["SettlementComputed"])]
        with store.reading() as conn:
            claims = conn.execute(text(
                "SELECT position, submission_id, hotkey, credit FROM rm_claims "
                "ORDER BY position, submission_id")).all()
            weights = conn.execute(text(
                "SELECT position, hotkey, weight_ppm FROM rm_weights")).all()
            hotkeys = {row[0]: row[1:] for row in conn.execute(text(
                "SELECT hotkey, submissions, qualified, live FROM rm_hotkeys")).all()}
    expected = sorted(
        (r.position, c["submission_id"], c["hotkey"], c["credit"])
        for r in recorded for c in r.payload["claims"]
    )
    assert [tuple(row) for row in claims] == expected and expected
    assert sorted(map(tuple, weights)) == sorted(
        (r.position, hotkey, ppm) for r in recorded
        for hotkey, ppm in r.payload["weights_ppm"].items()
    )
    with ArenaLedger(url) as ledger:
        rows = ledger.submissions()
    for hotkey in {row["hotkey"] for row in rows}:
        mine = [row for row in rows if row["hotkey"] == hotkey]
        live = sum(row["status"] in ("ARRIVED", "QUEUED", "QUALIFYING", "NO_DECISION", "HELD")
                   for row in mine)
        qualified = sum(row["status"] == "QUALIFIED" for row in mine)
        assert tuple(hotkeys[hotkey]) == (len(mine), qualified, live), hotkey

"""Replays one settled ledger from every source and holds the fast paths to the full checks.

``replay_store`` (raw driver pages), ``replay_bundle`` (an exported bundle's rows) and
``replay_events`` (RecordedEvents) must give the same report on SQLite and PostgreSQL, and
catch a forged settlement or decision at its position with the same divergence. The
incremental settlement check (``SettlementTracker``) must equal the full recomputation
(``settle.compute``) after every event of the ledger, and a replay whose tracker rebuilds
at every check must report exactly what the incremental one does.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from replay_forgery import HEAD, forge_weights, replay  # same directory, prepend import mode
from settled_ledger import Settled, build_settled, open_ledger

from ledger.archive import DiskArchive
from ledger.bundle import export_bundle, read_bundle_events, read_bundle_rows
from ledger.records import EventDraft
from ledger.store import EventStore
from machines.projection import LedgerFold
from machines.settlement_rules import settlement_payload
from services.arena_ledger import ArenaLedger, DomainGuard
from services.replay import (
    ReplayReport,
    replay_bundle,
    replay_events,
    replay_rows,
    replay_store,
)
from services.settlements import SettlementTracker, compute
from vocabulary.events import EmissionPolicySet


@pytest.fixture
def settled(store_url: str) -> Iterator[tuple[ArenaLedger, Settled]]:
    """Yields the fully built and settled ledger (92 events) on each backend."""
    ledger = open_ledger(store_url)
    try:
        yield ledger, build_settled(ledger)
    finally:
        ledger.close()


def _every_source(url: str, bundle: Path, as_of: int | None = None) -> list[ReplayReport]:
    """Replays from every source, with finished submissions archived (the default) or kept."""
    with EventStore(url) as store:
        head = store.head().position
        to = head if as_of is None else min(as_of, head)
        from_records = replay_events(store.read_all(1, to_position=to))
        from_store = replay_store(store, as_of)
        kept_store = replay_store(store, as_of, archive_finished=False)
    from_bundle = replay_bundle(bundle, as_of)
    kept_bundle = replay_bundle(bundle, as_of, archive_finished=False)
    records, _ = read_bundle_events(bundle, as_of)
    from_bundle_records = replay_events(records, archive_finished=False)
    return [from_records, from_store, kept_store, from_bundle, kept_bundle, from_bundle_records]


def test_store_bundle_and_records_replay_to_one_report(
    settled: tuple[ArenaLedger, Settled], store_url: str, tmp_path: Path
) -> None:
    ledger, built = settled
    bundle = tmp_path / "bundle"
    export_bundle(ledger.store, bundle)
    last_digest = built.settlements[-1][0]["settlement_digest"]
    for as_of in (None, 80, 81, 91, HEAD):
        reports = _every_source(store_url, bundle, as_of)
        first = reports[0].to_json()
        assert all(r.to_json() == first for r in reports), as_of
        assert first["ok"] and first["divergence"] is None
    full = _every_source(store_url, bundle)[0]
    assert (full.events, full.settlements_checked, full.settlement_digest) == (HEAD, 3, last_digest)
    assert full.head_hash == ledger.store.head().entry_hash


def test_every_replay_entry_point_archives_finished_submissions_unless_told_not_to(
    settled: tuple[ArenaLedger, Settled],
    store_url: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Replay's memory follows live state: called without archive_finished, every entry
    # point moves each finished submission out through a DiskArchive, once; False keeps
    # them in memory and writes none.
    ledger, _ = settled
    bundle = tmp_path / "bundle"
    export_bundle(ledger.store, bundle)
    fold = ledger.fold
    finished = sum(len(fold.submissions(a.arena_id)) for a in fold.arenas())
    finished -= fold.live_submissions()
    assert finished > 0
    archived: list[str] = []
    put = DiskArchive.put

    def counted(self: DiskArchive, space: str, key: str, *args: Any, **kwargs: Any) -> None:
        if space == "submission":
            archived.append(key)
        put(self, space, key, *args, **kwargs)

    monkeypatch.setattr(DiskArchive, "put", counted)
    with EventStore(store_url) as store:
        entry_points: list[Callable[..., ReplayReport]] = [
            lambda **kw: replay_store(store, **kw),
            lambda **kw: replay_events(store.read_all(1), **kw),
            lambda **kw: replay_bundle(bundle, **kw),
            lambda **kw: replay_rows(read_bundle_rows(bundle)[0], **kw),
        ]
        for number, replay_from in enumerate(entry_points):
            archived.clear()
            report = replay_from()
            assert (report.ok, report.events) == (True, HEAD), number
            assert sorted(archived) == sorted(set(archived)) and len(archived) == finished, number
            archived.clear()
            report = replay_from(archive_finished=False)
            assert (report.ok, report.events) == (True, HEAD), number
            assert archived == [], number


@pytest.mark.parametrize("digest", ["kept", "recomputed"])
def test_a_forged_settlement_is_caught_at_its_position_from_every_source(
    settled: tuple[ArenaLedger, Settled], store_url: str, tmp_path: Path, digest: str
) -> None:
    ledger, built = settled
    honest = settlement_payload(ledger.weights(4_000))
    forged = forge_weights(honest, digest)
    with EventStore(store_url) as unguarded:
        unguarded.append([EventDraft("settlement", "SettlementComputed", forged)])
    bundle = tmp_path / "bundle"
    export_bundle(ledger.store, bundle)

    reports = _every_source(store_url, bundle)

    assert all(r.to_json() == reports[0].to_json() for r in reports)
    divergence = reports[0].divergence
    assert divergence is not None
    assert (divergence.position, divergence.field, divergence.code) == (
        HEAD + 1,
        "weights_ppm",
        "settlement_mismatch",
    )
    assert divergence.recorded == forged["weights_ppm"]
    assert divergence.recomputed == honest["weights_ppm"]
    assert reports[0].settlement_digest == built.settlements[-1][0]["settlement_digest"]
    assert reports[0].to_json() == replay(store_url).to_json()


def test_a_replay_whose_tracker_always_rebuilds_reports_the_same(
    settled: tuple[ArenaLedger, Settled], store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    incremental = replay(store_url)
    monkeypatch.setattr(SettlementTracker, "dirty_entries_max", 0)
    rebuilding = replay(store_url)
    assert rebuilding.to_json() == incremental.to_json()
    assert incremental.ok and incremental.settlements_checked == 3


def test_the_tracker_equals_the_full_settlement_after_every_event(
    settled: tuple[ArenaLedger, Settled],
) -> None:
    ledger, _ = settled
    fold = LedgerFold()
    tracker = SettlementTracker(fold)
    policy = None
    compared = claims = 0
    for recorded in ledger.store.read_all():
        event = recorded.event()
        tracker.note(recorded.stream, event)  # before the fold folds it
        assert fold.apply(recorded.position, recorded.stream, event, recorded.payload) is None
        if isinstance(event, EmissionPolicySet):
            policy = event
        if policy is None:
            continue
        for block in (2_000, 4_000):
            expected = settlement_payload(compute(fold, policy, block))
            assert tracker.payload(policy, block) == expected, recorded.position
            compared += 1
            claims += len(expected["claims"])
    assert compared == 2 * (HEAD - 79) and claims > 0


def test_an_archived_fold_settles_and_explains_like_one_that_keeps_everything(
    settled: tuple[ArenaLedger, Settled],
) -> None:
    from ledger.archive import DiskArchive
    from services.settlements import fee_summary, rewards

    ledger, _ = settled
    kept = LedgerFold()
    with DiskArchive(flush_entries=3) as archive:  # flushes all the time
        archived = LedgerFold(archive=archive)
        tracker = SettlementTracker(archived)
        policy = None
        for recorded in ledger.store.read_all():
            event = recorded.event()
            tracker.note(recorded.stream, event)  # before the fold folds it
            for fold in (kept, archived):
                position, stream, payload = recorded.position, recorded.stream, recorded.payload
                assert fold.apply(position, stream, event, payload) is None
            if isinstance(event, EmissionPolicySet):
                policy = event
            if policy is not None:
                expected = settlement_payload(compute(kept, policy, 3_000))
                assert settlement_payload(compute(archived, policy, 3_000)) == expected
                assert tracker.payload(policy, 3_000) == expected, recorded.position
        assert archived.snapshot() == kept.snapshot()
        assert len(archived._subs) == archived.live_submissions() < len(kept._subs)
        assert rewards(archived) == rewards(kept)
        assert fee_summary(archived) == fee_summary(kept)
        for arena in kept.arenas():
            assert archived.controls(arena.arena_id) == kept.controls(arena.arena_id)


def test_a_ledger_that_archives_finished_submissions_answers_alike(
    settled: tuple[ArenaLedger, Settled], store_url: str
) -> None:
    with (
        ArenaLedger(store_url, archive_finished=True) as archived,
        ArenaLedger(store_url, seed_from_read_models=False) as kept,  # everything in memory
    ):
        assert archived.fold.snapshot() == kept.fold.snapshot()
        assert len(archived.fold._subs) == archived.fold.live_submissions()
        assert len(kept.fold._subs) > archived.fold.live_submissions()
        assert archived.submissions() == kept.submissions()
        for row in kept.submissions():
            sid = row["submission_id"]
            assert archived.explain_submission(sid) == kept.explain_submission(sid)
        for arena in kept.fold.arenas():
            assert archived.controls(arena.arena_id) == kept.controls(arena.arena_id)


def test_replay_store_names_a_database_failure_without_a_driver_traceback(
    settled: tuple[ArenaLedger, Settled], store_url: str
) -> None:
    # ``settled`` built the ledger (and closes its own store afterwards).
    from sqlalchemy import text

    from vocabulary.errors import LedgerError, SchemaNotInitialised

    with EventStore(store_url) as store:
        with store.engine.begin() as conn:  # the head row stays; the events table is gone
            conn.execute(text("ALTER TABLE events RENAME TO events_moved"))
        try:
            with pytest.raises(LedgerError) as caught:
                replay_store(store)
            assert isinstance(caught.value, SchemaNotInitialised), caught.value
            assert "arena-ledger init" in caught.value.message
        finally:
            with store.engine.begin() as conn:
                conn.execute(text("ALTER TABLE events_moved RENAME TO events"))


def test_decoded_rows_name_a_database_failure_without_a_driver_traceback(
    settled: tuple[ArenaLedger, Settled], store_url: str
) -> None:
    """The guard's catch-up and stats read through ``decoded_rows``: a failing read is the
    store's error, not the driver's, and the collector is left as it was."""
    import gc

    from sqlalchemy import text

    from services.replay import decoded_rows
    from vocabulary.errors import LedgerError, SchemaNotInitialised

    with EventStore(store_url) as store:
        head = store.head().position
        assert [row[0] for row, _, _ in decoded_rows(store, 1, head)] == list(range(1, head + 1))
        with store.engine.begin() as conn:
            conn.execute(text("ALTER TABLE events RENAME TO events_moved"))
        collecting = gc.isenabled()
        try:
            with pytest.raises(LedgerError) as caught:
                list(decoded_rows(store, 1, head))
            assert isinstance(caught.value, SchemaNotInitialised), caught.value
            with pytest.raises(SchemaNotInitialised):
                DomainGuard().catch_up(store)  # a guard alone, on the same store
            assert gc.isenabled() == collecting and gc.get_freeze_count() == 0
        finally:
            with store.engine.begin() as conn:
                conn.execute(text("ALTER TABLE events_moved RENAME TO events"))

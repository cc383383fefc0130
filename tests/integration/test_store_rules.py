"""Pins event store rules of ledger.store that the store contract suite leaves loose.

Found by a hand-made mutation review of ledger/store.py: each test here fails on one small
change to the module that the other tests let through. Like ``test_store_contract``, every
test that takes ``store`` runs on SQLite and PostgreSQL. They pin, from the module's
docstrings, docs/concepts.md and DOMAIN §2:

* ``recorded_at_text`` spells an aware instant in UTC with microseconds and a ``Z``, and the
  store's own clock stamps events in that spelling, so a bound spelled by it selects them;
* ``get`` returns the event at exactly the position asked for: positions start at 1, so 0
  and a negative position are NotFound, never the first event;
* ``entry_hash_at`` answers the genesis hash for 0 only: a negative position has no entry
  hash and is NotFound;
* ``stored_entry_hash``, like every store read, turns a database error into the store's
  LedgerError (an un-migrated database is SchemaNotInitialised, not SQLAlchemy's error);
* a bare ``postgresql://`` URL means psycopg 3 (docs/storage.md), never SQLAlchemy's default
  driver;
* a SQLite URL with query arguments SQLite ignores without ``uri=true`` (``mode=ro``) is
  refused naming them, and accepted with ``uri=true``;
* a new (empty) SQLite file is switched to WAL as soon as it is connected to
  (docs/storage.md), not at its first writer;
* ``database_identity`` names a SQLite file by its absolute path, so a relative and an
  absolute spelling of one file are one database;
* a read by stream prefix returns exactly the streams that start with it on a PostgreSQL
  database whose default collation ignores punctuation (the range is compared in byte
  order, ``COLLATE "C"``).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import pytest

from ledger import migrate
from ledger.chain import GENESIS_HASH
from ledger.records import EventDraft
from ledger.store import EventStore, database_identity, make_engine, recorded_at_text
from vocabulary.errors import InvalidInput, NotFound, SchemaNotInitialised

Draft = Callable[..., EventDraft]

#: The spelling docs/concepts.md and ``recorded_at_text`` give ``recorded_at``.
_RECORDED_AT = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z")


def test_recorded_at_text_is_utc_with_microseconds_and_z() -> None:
    # The same instant, given in three zones: one spelling, in UTC, every microsecond kept.
    instant = datetime(2030, 1, 2, 3, 4, 5, 6, tzinfo=UTC)
    for zone in (UTC, timezone(timedelta(hours=5, minutes=30)), timezone(-timedelta(hours=7))):
        spelled = recorded_at_text(instant.astimezone(zone))
        assert _RECORDED_AT.fullmatch(spelled), spelled
        assert datetime.strptime(spelled, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC) == instant


def test_the_default_clock_stamps_events_so_a_bound_it_spells_selects_them(
    store: EventStore, draft: Draft
) -> None:
    before = datetime.now(UTC) - timedelta(microseconds=1)
    store.append([draft("arena-t", 1)])
    after = datetime.now(UTC) + timedelta(microseconds=1)
    recorded = store.get(1).recorded_at
    assert _RECORDED_AT.fullmatch(recorded), recorded
    # Bounds given in another zone, spelled by recorded_at_text, as read_all asks.
    east = timezone(timedelta(hours=9))
    window = {
        "recorded_from": recorded_at_text(before.astimezone(east)),
        "recorded_to": recorded_at_text(after.astimezone(east)),
    }
    assert [e.position for e in store.read_all(**window)] == [1]
    later = {"recorded_from": recorded_at_text(after.astimezone(east))}
    assert list(store.read_all(**later)) == []


@pytest.mark.parametrize("position", [0, -1])
def test_get_below_the_first_position_is_not_found(
    store: EventStore, draft: Draft, position: int
) -> None:
    store.append([draft("arena-g", 1), draft("arena-g", 2)])
    with pytest.raises(NotFound) as caught:
        store.get(position)
    assert caught.value.context["position"] == position
    assert store.get(1).position == 1  # the ledger does have a first event


def test_only_position_0_has_the_genesis_hash(store: EventStore, draft: Draft) -> None:
    store.append([draft("arena-g", 1)])
    assert store.entry_hash_at(0) == GENESIS_HASH
    with pytest.raises(NotFound) as caught:
        store.entry_hash_at(-1)
    assert caught.value.context["position"] == -1


def test_stored_entry_hash_reads_a_row_or_none(store: EventStore, draft: Draft) -> None:
    written = store.append([draft("arena-s", 1)])
    assert store.stored_entry_hash(1) == written.entry_hashes[0]
    assert store.stored_entry_hash(2) is None


def test_stored_entry_hash_on_an_unmigrated_database_is_schema_not_initialised(
    store_url: str,
) -> None:
    with EventStore(store_url) as bare, pytest.raises(SchemaNotInitialised) as caught:
        bare.stored_entry_hash(1)
    assert caught.value.code == "store_not_initialised"


# -- URLs and files ----------------------------------------------------------------------------


def test_a_bare_postgresql_url_means_psycopg_3() -> None:
    # Creating an engine connects to nothing: no database is opened here.
    engine = make_engine("postgresql://postgres@127.0.0.1:5432/arena_ledger_never_opened")
    try:
        assert engine.dialect.driver == "psycopg"
    finally:
        engine.dispose()


def test_sqlite_query_arguments_that_need_uri_true_are_refused_without_it(
    tmp_path: Path,
) -> None:
    path = tmp_path / "ledger.db"
    with pytest.raises(InvalidInput) as caught:
        make_engine(f"sqlite:///{path}?mode=ro")
    assert "(mode)" in caught.value.message and "uri=true" in caught.value.message
    assert not path.exists()
    make_engine(f"sqlite:///{path}?mode=rwc&uri=true").dispose()  # a SQLite URI: accepted


def test_a_new_sqlite_file_is_in_wal_mode_from_its_first_connection(tmp_path: Path) -> None:
    engine = make_engine(f"sqlite:///{tmp_path / 'new.db'}")
    try:
        with engine.connect() as conn:  # a reader: no BEGIN IMMEDIATE
            assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
    finally:
        engine.dispose()


def test_a_sqlite_file_has_one_identity_however_its_path_is_spelt(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    absolute = database_identity(f"sqlite:///{tmp_path / 'ledger.db'}")
    assert database_identity("sqlite:///ledger.db") == absolute
    assert database_identity("sqlite:///./sub/../ledger.db") == absolute
    assert str(tmp_path / "ledger.db") in absolute.splitlines()


@pytest.mark.postgres
def test_a_stream_prefix_read_is_a_prefix_under_any_database_collation(
    punctuation_blind_pg_database: str, draft: Draft
) -> None:
    # Under a collation that ignores punctuation, "payment-a.b" sorts between "payment-a-b"
    # and "payment-a0" by its letters: a range read in that order would return them all.
    url = punctuation_blind_pg_database
    migrate.upgrade(url)
    names = [
        "payment-a",
        "payment-a-b",
        "payment-a.b",
        "payment-a_b",
        "payment-a-c",
        "payment-a0",
        "payment-ab",
        "payment-b",
        "arena-a",
        "arena-a-b",
        "arena-a0",
    ]
    with EventStore(url) as store:
        for name in names:
            store.append([draft(name)])
        prefixes = "payment-a payment-a- payment-a. payment-a_ payment- arena-a- arena-a."
        for prefix in prefixes.split():
            found = sorted({e.stream for e in store.read_all(stream_prefix=prefix)})
            assert found == sorted(n for n in names if n.startswith(prefix)), prefix

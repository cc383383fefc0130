"""Proves that storage faults refuse appends cleanly and corrupt nothing.

SQLite: a full disk (a 2 MiB tmpfs filled up; without root, RLIMIT_FSIZE in a child stands
in for it), read-only media (a tmpfs remounted read-only; without root, chmod), and a write
lock held past the busy timeout. PostgreSQL (the real server): a database switched to
read-only, and the append's connection killed by the server mid-transaction. Each refusal
is a StoreUnavailable with a message that says what is wrong, writes nothing, and leaves a
ledger that verifies, reads, and takes appends again once the fault is gone. Mounts are
always undone (``tmpfs`` unmounts in a finally block).
"""

from __future__ import annotations

import os
import random
import sqlite3
import stat
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import psycopg
import pytest
from reliability_harness import (
    append_and_die,
    audit_ledger,
    crash_batch,
    disk_full_by_rlimit,
    disk_full_on_tmpfs,
    mount_available,
    remount,
    seed,
    tmpfs,
)
from sqlalchemy import Connection
from sqlalchemy.engine import make_url

import ledger.store
from ledger import migrate
from ledger.store import EventStore, PreparedEvent
from vocabulary.errors import StoreError, StoreUnavailable

#: Size of the small disk the full-disk and read-only tests mount, in bytes.
small_disk_bytes = 2 * 1024 * 1024
PG_ADMIN_URL = os.environ.get(
    "ARENA_LEDGER_PG_ADMIN_URL", "postgresql://postgres@127.0.0.1:5432/postgres"
)


def _sqlite_url(directory: Path) -> str:
    return f"sqlite:///{directory / 'ledger.db'}"


def _seed_ledger(url: str, batches: int = 3) -> None:
    migrate.upgrade(url)
    with EventStore(url) as store:
        for index in range(batches):
            key, drafts = crash_batch("seed", index)
            store.append(drafts, idempotency_key=key)


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """Mounts a 2 MiB tmpfs for the test and unmounts it afterwards (skips without root)."""
    reason = mount_available()
    if reason is not None:
        pytest.skip(reason)
    try:
        with tmpfs(tmp_path / "disk", small_disk_bytes) as disk:
            yield disk
    except OSError as exc:
        pytest.skip(f"cannot mount a tmpfs here ({exc}); the RLIMIT_FSIZE test covers a "
                    "full disk without one")


# ---------------------------------------------------------------------------- full disk


def test_a_full_disk_refuses_appends_cleanly_and_the_ledger_recovers(small_disk: Path) -> None:
    _seed_ledger(_sqlite_url(small_disk))
    report = disk_full_on_tmpfs(small_disk, random.Random(seed).randrange(0, 256 * 1024))
    assert report.refused == 3
    assert "full" in report.refusal, report.refusal
    assert report.events_lost == 0
    assert report.integrity_check == "ok"


def test_a_file_size_limit_refuses_appends_cleanly_and_the_ledger_recovers(
    tmp_path: Path,
) -> None:
    # The fallback when no tmpfs can be mounted; it runs everywhere, so CI covers it too.
    report = disk_full_by_rlimit(_sqlite_url(tmp_path))
    assert report.refused == 3
    assert report.events_lost == 0
    assert report.integrity_check == "ok"


# ---------------------------------------------------------------------------- read-only


def _make_read_only(directory: Path) -> tuple[str, Any]:
    """Makes ``directory`` read-only (remount as root, else chmod); returns how and an undo."""
    if mount_available() is None:
        remount(directory, "ro")
        return "read-only mount", lambda: remount(directory, "rw")
    modes = {p: p.stat().st_mode for p in [directory, *directory.iterdir()]}
    for path in modes:
        path.chmod(stat.S_IMODE(modes[path]) & ~0o222)

    def undo() -> None:
        for path, mode in modes.items():
            path.chmod(stat.S_IMODE(mode))

    return "chmod a-w", undo


@pytest.fixture
def ro_disk(tmp_path: Path) -> Iterator[Path]:
    """Yields a directory that can be made read-only: a tmpfs as root, else a plain one."""
    if mount_available() is None:
        try:
            with tmpfs(tmp_path / "disk", small_disk_bytes) as disk:
                yield disk
            return
        except OSError as exc:
            pytest.skip(f"cannot mount a tmpfs here ({exc})")
    if os.geteuid() == 0:
        pytest.skip("as root, chmod does not stop writes and no tmpfs could be mounted")
    directory = tmp_path / "disk"
    directory.mkdir()
    yield directory


@pytest.mark.parametrize("closed", ["after_a_crash", "after_a_clean_close"])
def test_a_read_only_database_refuses_appends_and_still_reads(ro_disk: Path, closed: str) -> None:
    url = _sqlite_url(ro_disk)
    _seed_ledger(url)
    with EventStore(url) as store:
        expected = audit_ledger(store).head
    if closed == "after_a_crash":
        append_and_die(url)  # one more event, and ledger.db-wal and -shm stay behind
        expected += 1
        assert (ro_disk / "ledger.db-wal").exists() and (ro_disk / "ledger.db-shm").exists()
    how, undo = _make_read_only(ro_disk)
    try:
        with EventStore(url) as store:
            assert store.head().position == expected, how
            assert store.verify().ok
            assert len(list(store.read_all())) == expected
            key, drafts = crash_batch("ro", 0)
            with pytest.raises(StoreUnavailable, match="read"):
                store.append(drafts, idempotency_key=key)
            assert store.head().position == expected
    finally:
        undo()
    with EventStore(url) as store:
        assert audit_ledger(store).head == expected
        assert not store.append(drafts, idempotency_key=key).already_recorded
        assert store.verify().ok


# ------------------------------------------------------------------------ a held lock


def test_a_write_lock_held_past_the_busy_timeout_is_a_clean_refusal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = _sqlite_url(tmp_path)
    _seed_ledger(url, 1)
    monkeypatch.setattr(ledger.store, "sqlite_busy_timeout_ms", 200)
    holder = sqlite3.connect(tmp_path / "ledger.db", isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    try:
        with EventStore(url) as store:
            before = store.head()
            key, drafts = crash_batch("locked", 0)
            with pytest.raises(StoreUnavailable, match="locked"):
                store.append(drafts, idempotency_key=key)
            assert store.head() == before
    finally:
        holder.rollback()
        holder.close()
    with EventStore(url) as store:
        assert not store.append(drafts, idempotency_key=key).already_recorded
        assert audit_ledger(store).head == before.position + len(drafts)


def test_a_migration_that_meets_a_held_write_lock_is_a_clean_refusal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The connection opens (WAL lets it), then the first DDL waits past the busy timeout:
    the store's StoreUnavailable, not SQLAlchemy's OperationalError, and nothing migrated."""
    url = _sqlite_url(tmp_path)
    monkeypatch.setattr(ledger.store, "sqlite_busy_timeout_ms", 200)
    holder = sqlite3.connect(tmp_path / "ledger.db", isolation_level=None)
    holder.execute("PRAGMA journal_mode = WAL")
    holder.execute("BEGIN IMMEDIATE")
    try:
        with pytest.raises(StoreUnavailable, match="locked"):
            migrate.upgrade(url)
    finally:
        holder.rollback()
        holder.close()
    assert migrate.current(url) is None
    migrate.upgrade(url)
    assert migrate.current(url) == migrate.heads()[0]


def _rollback_mode_file_locked(path: Path) -> sqlite3.Connection:
    """A ledger file still in rollback mode (as a second ``init`` finds a new one) whose
    write lock another connection holds: switching it to WAL is refused at once."""
    seed = sqlite3.connect(path)
    seed.execute("CREATE TABLE other_tool (x INTEGER)")
    seed.commit()
    seed.close()
    holder = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    holder.execute("BEGIN IMMEDIATE")
    return holder


def test_opening_a_file_whose_wal_switch_is_refused_waits_for_the_writer(
    tmp_path: Path,
) -> None:
    """SQLite skips the busy handler for the WAL switch under another's write lock, so the
    connection retries it itself: it opens once the writer commits, in WAL mode. (It used
    to fail at once with "database is locked": concurrent `init`s of a new SQLite ledger.)"""
    path = tmp_path / "ledger.db"
    holder = _rollback_mode_file_locked(path)
    release = threading.Timer(0.3, lambda: holder.execute("COMMIT"))
    release.start()
    started = time.monotonic()
    try:
        migrate.upgrade(_sqlite_url(tmp_path))
        waited = time.monotonic() - started
    finally:
        release.join()
        holder.close()
    assert waited >= 0.25
    assert migrate.current(_sqlite_url(tmp_path)) == migrate.heads()[0]
    check = sqlite3.connect(path)
    try:
        assert check.execute("PRAGMA journal_mode").fetchone() == ("wal",)
    finally:
        check.close()


def test_a_wal_switch_refused_past_the_busy_timeout_is_a_clean_refusal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "ledger.db"
    monkeypatch.setattr(ledger.store, "sqlite_busy_timeout_ms", 200)
    holder = _rollback_mode_file_locked(path)
    started = time.monotonic()
    try:
        with pytest.raises(StoreUnavailable, match="locked"):
            migrate.upgrade(_sqlite_url(tmp_path))
        assert time.monotonic() - started >= 0.2
    finally:
        holder.rollback()
        holder.close()
    assert migrate.current(_sqlite_url(tmp_path)) is None  # nothing migrated
    migrate.upgrade(_sqlite_url(tmp_path))
    assert migrate.current(_sqlite_url(tmp_path)) == migrate.heads()[0]


# -------------------------------------------------------------------------- PostgreSQL


@pytest.fixture
def pg_store(pg_database: str) -> Iterator[EventStore]:
    migrate.upgrade(pg_database)
    _seed_ledger(pg_database)
    with EventStore(pg_database) as store:
        yield store


@pytest.mark.postgres
def test_a_read_only_postgres_database_refuses_appends_and_still_reads(
    pg_store: EventStore,
) -> None:
    name = make_url(pg_store.url).database
    expected = audit_ledger(pg_store)
    key, drafts = crash_batch("ro", 0)
    with psycopg.connect(PG_ADMIN_URL, autocommit=True) as admin:
        admin.execute(f'ALTER DATABASE "{name}" SET default_transaction_read_only = on')
        try:
            with EventStore(pg_store.url) as store:  # new sessions pick the setting up
                assert audit_ledger(store).head == expected.head
                with pytest.raises(StoreUnavailable, match="read-only"):
                    store.append(drafts, idempotency_key=key)
                assert store.head().position == expected.head
        finally:
            admin.execute(f'ALTER DATABASE "{name}" RESET default_transaction_read_only')
    with EventStore(pg_store.url) as store:
        assert not store.append(drafts, idempotency_key=key).already_recorded
        assert store.verify().ok


class _Terminator:
    """Is an AppendGuard that has the server kill the append's own connection mid-transaction."""

    def __init__(self) -> None:
        self.fired = 0

    def __call__(
        self, store: EventStore, conn: Connection, batch: Sequence[PreparedEvent]
    ) -> None:
        pid = conn.exec_driver_sql("SELECT pg_backend_pid()").scalar()
        with psycopg.connect(PG_ADMIN_URL, autocommit=True) as admin:
            admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
        self.fired += 1


@pytest.mark.postgres
def test_a_connection_killed_mid_append_writes_nothing_and_the_retry_records_once(
    pg_store: EventStore,
) -> None:
    before = audit_ledger(pg_store)
    terminator = _Terminator()
    key, drafts = crash_batch("terminated", 4)
    with EventStore(pg_store.url, guard=terminator) as doomed:
        with pytest.raises(StoreUnavailable, match=r"terminat|connection"):
            doomed.append(drafts, idempotency_key=key)
        assert terminator.fired == 1
        after = audit_ledger(pg_store)
        assert after.head == before.head and key not in after.batches
        doomed.guard = None  # the same store (its pool pings out the dead connection)
        result = doomed.append(drafts, idempotency_key=key)
        assert not result.already_recorded
        assert doomed.append(drafts, idempotency_key=key).already_recorded
    assert audit_ledger(pg_store).positions(key) == result.positions


def _copy_sized_batch(tag: str) -> tuple[str, list[Any]]:
    """Returns the first crash batch of ``tag``'s series big enough to go through COPY."""
    for index in range(200):
        key, drafts = crash_batch(tag, index)
        if len(drafts) >= ledger.store._copy_threshold_rows:
            return key, drafts
    raise AssertionError("no batch of 64 events or more in 200 tries")


@pytest.mark.postgres
def test_a_server_error_inside_the_copy_is_a_clean_refusal(pg_store: EventStore) -> None:
    # The COPY talks to psycopg below SQLAlchemy; a server error there must still be a
    # StoreError naming it, not a driver traceback, and write nothing.
    before = audit_ledger(pg_store)
    key, drafts = _copy_sized_batch("refused-copy")
    with psycopg.connect(pg_store.url.replace("postgresql+psycopg", "postgresql"),
                         autocommit=True) as admin:
        admin.execute(
            "CREATE FUNCTION refuse_insert() RETURNS trigger LANGUAGE plpgsql AS "
            "$$ BEGIN RAISE EXCEPTION 'simulated refusal of the insert'; END $$"
        )
        admin.execute("CREATE TRIGGER refuse_insert BEFORE INSERT ON events "
                      "FOR EACH ROW EXECUTE FUNCTION refuse_insert()")
        try:
            with pytest.raises(StoreError, match="simulated refusal"):
                pg_store.append(drafts, idempotency_key=key)
            assert audit_ledger(pg_store).head == before.head
        finally:
            admin.execute("DROP TRIGGER refuse_insert ON events")
    assert not pg_store.append(drafts, idempotency_key=key).already_recorded
    assert pg_store.verify().ok

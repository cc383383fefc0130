"""Runs the store's Alembic revisions up and down on both backends (docs/storage.md).

The tests read the revision list from ``ledger.migrate`` rather than naming revisions, so a
new revision is covered the day it is added: each one must upgrade, downgrade, leave
recorded event rows untouched and produce a schema ``check`` finds no drift in.
"""

from __future__ import annotations

import hashlib
import itertools
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import inspect, text

from ledger import migrate
from ledger.checkpoint import sign_tree
from ledger.note import Signer
from ledger.records import EventDraft
from ledger.store import EventStore, make_engine, safe_url
from ledger.tables import SCHEMA_REVISION, metadata
from vocabulary.errors import (
    InvalidInput,
    Refused,
    SchemaNotInitialised,
    StoreError,
    StoreUnavailable,
)

#: SHA-256 of each revision file as it shipped. Applied revisions are never edited
#: (STYLE.md); add a revision here in the commit that ships it.
SHIPPED_REVISION_SHA256 = {
    "0001_initial.py": "6305a57d634eca7900e2125182c1dbe3dd492fdbe398e3a9789a70f0be16d96a",
    "0002_merkle_checkpoints.py": (
        "ddbbc3d1de76310d11573a91fc76d4df2386fbe759777ba2ba8a9a60e189715f"
    ),
    "0003_sqlite_position_rowid.py": (
        "e75bc4630b93180db5b504bab23f1edd89aab4136333e97a66a4d2ebbf26d525"
    ),
    "0004_pg_recorded_at_brin.py": (
        "cd41467c46a74bab56aca454c723ecc897f47cc0938ff83fba35d03bf58d889a"
    ),
    "0005_read_models.py": (
        "980cbe0663ef85318153f46c41e994d912200bbfb415e289a816798089cbd4dc"
    ),
    "0006_read_model_claims.py": (
        "9e56fc3283e32d172bc3747db5eebbe5d134d79ed2ca3cb50b4d2fa1daf33e4a"
    ),
    "0007_reward_status.py": (
        "93f8f3588d8b99ec662bc6b4326bb92f86eb649d5fcf1d34b6d01da77246cd2b"
    ),
}

MIGRATIONS_DIR = Path(migrate._script_location())


def _tables(url: str) -> set[str]:
    engine = make_engine(url)
    try:
        with engine.connect() as conn:
            return set(inspect(conn).get_table_names())
    finally:
        engine.dispose()


def _revisions_oldest_first() -> list[str]:
    return [r["revision"] for r in reversed(migrate.history())]  # type: ignore[misc]


def _event_rows(url: str) -> list[tuple[Any, ...]]:
    engine = make_engine(url)
    try:
        with engine.connect() as conn:
            rows = conn.execute(text("SELECT * FROM events ORDER BY position")).all()
    finally:
        engine.dispose()
    return [tuple(bytes(v) if isinstance(v, memoryview) else v for v in row) for row in rows]


def _append_some(url: str) -> None:
    """Appends five events at whatever revision the ledger is (a store at an older one
    appends only when told that revision: EventStore(schema_revision=…))."""
    revision = migrate.current(url)
    assert revision is not None
    with EventStore(url, schema_revision=revision) as store:
        store.append([EventDraft("arena-m", "ArenaRetired", {"block": i, "reason": f"r{i}"})
                      for i in range(5)], idempotency_key="migration-test")
        assert store.verify().ok


def test_the_store_writes_at_the_shipped_head() -> None:
    assert migrate.heads() == [SCHEMA_REVISION]


def stamp(url: str, revision: str) -> None:
    """Sets the ledger's recorded schema revision by hand (as a newer release, or an
    interrupted migration, would have left it), touching nothing else."""
    engine = make_engine(url)
    try:
        with engine.begin() as conn:
            conn.execute(text("UPDATE alembic_version SET version_num = :r"), {"r": revision})
    finally:
        engine.dispose()


@pytest.mark.parametrize("revision", ["0002_merkle_checkpoints", "0009_from_a_newer_release"])
def test_appending_to_a_ledger_at_another_revision_is_refused_and_writes_nothing(
    tmp_path: Path, revision: str
) -> None:
    # operations.md: new code refuses to append to an old schema (stop, back up, upgrade),
    # and a revision it does not know was made by a newer release.
    url = f"sqlite:///{tmp_path / 'old.db'}"
    migrate.upgrade(url, "0002_merkle_checkpoints")
    _append_some(url)
    if revision != "0002_merkle_checkpoints":
        stamp(url, revision)
    before = _event_rows(url)
    with EventStore(url) as store, pytest.raises(SchemaNotInitialised) as err:
        store.append([EventDraft("arena-m", "ArenaRetired", {"block": 9, "reason": "late"})])
    assert err.value.exit_code == 5
    assert err.value.context["revision"] == revision
    assert f"is at schema revision {revision}, not {SCHEMA_REVISION}" in err.value.message
    assert "Nothing was written" in err.value.message
    assert _event_rows(url) == before


def test_the_revisions_form_one_linear_chain() -> None:
    history = migrate.history()
    assert len(migrate.heads()) == 1
    assert history[0]["revision"] == migrate.heads()[0]
    assert history[-1]["down_revision"] is None
    for newer, older in itertools.pairwise(history):
        assert newer["down_revision"] == older["revision"]


def test_current_is_none_before_and_the_head_after_an_upgrade(store_url: str) -> None:
    assert migrate.current(store_url) is None
    assert migrate.pending(store_url) == _revisions_oldest_first()

    migrate.upgrade(store_url)

    assert migrate.current(store_url) == migrate.heads()[0]
    assert migrate.pending(store_url) == []
    assert set(metadata.tables) <= _tables(store_url)
    with EventStore(store_url) as store:
        assert store.is_initialised()
        assert store.head().position == 0


def _upgrade_worker(url: str, barrier: Any, results: Any) -> None:
    """Upgrades ``url`` to the head once the others are ready; puts "ok" or the error."""
    try:
        barrier.wait(timeout=60)
        migrate.upgrade(url)
        results.put(("ok", migrate.current(url)))
    except Exception as exc:  # reported to the test, which names it
        results.put((type(exc).__name__, str(exc)))


def test_concurrent_upgrades_of_a_new_database_all_succeed_and_migrate_once(
    store_url: str,
) -> None:
    """Several `init`s at once (validators started together), each its own process: on
    PostgreSQL they take turns under an advisory lock, on SQLite under its write lock. Each
    ends at the head, none fails on a table another is creating, and there is no drift."""
    import multiprocessing

    spawn = multiprocessing.get_context("spawn")  # alembic's context is one per process
    runners = 4
    barrier, results = spawn.Barrier(runners), spawn.Queue()
    processes = [spawn.Process(target=_upgrade_worker, args=(store_url, barrier, results))
                 for _ in range(runners)]
    for process in processes:
        process.start()
    outcomes = [results.get(timeout=120) for _ in processes]
    for process in processes:
        process.join(timeout=60)
    assert outcomes == [("ok", migrate.heads()[0])] * runners, outcomes
    assert migrate.check(store_url) == ""  # every table once, as the code declares it


def test_a_sqlite_upgrade_that_fails_midway_leaves_the_revision_it_started_from(
    tmp_path: Path,
) -> None:
    """The whole upgrade is one transaction on SQLite too (env.py's transactional_ddl): a
    revision that fails rolls back the ones before it in the same run, so the database is
    never left between revisions. Here 0003 cannot create its rebuilt table."""
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    migrate.upgrade(url, "0001_initial")
    engine = make_engine(url)
    with engine.begin() as conn:
        conn.execute(text("CREATE TABLE events_rebuilt (x INTEGER)"))
    with pytest.raises(StoreError, match="events_rebuilt"):
        migrate.upgrade(url)
    assert migrate.current(url) == "0001_initial"
    tables = set(inspect(engine).get_table_names())
    assert "merkle_nodes" not in tables and "checkpoints" not in tables  # 0002 rolled back
    with engine.begin() as conn:
        conn.execute(text("DROP TABLE events_rebuilt"))
    engine.dispose()
    migrate.upgrade(url)
    assert migrate.current(url) == migrate.heads()[0]


def test_an_append_to_a_ledger_at_an_old_revision_says_to_upgrade_and_writes_nothing(
    store_url: str,
) -> None:
    """0001 has no Merkle frontier: the package is newer than the database's tables."""
    migrate.upgrade(store_url, "0001_initial")
    drafts = [EventDraft("arena-a", "ArenaRetired", {"block": 1, "reason": "x"})]
    with EventStore(store_url) as store:
        with pytest.raises(SchemaNotInitialised, match=r"not at the latest revision; run "
                           r"`arena-ledger db upgrade`") as caught:
            store.append(drafts)
        assert caught.value.code == "store_not_initialised"
        assert store.head().position == 0
    migrate.upgrade(store_url)
    with EventStore(store_url) as store:
        assert store.append(drafts).last == 1


def test_upgrade_downgrade_to_base_and_upgrade_again(store_url: str) -> None:
    migrate.upgrade(store_url)
    _append_some(store_url)

    migrate.downgrade(store_url, "base", discard_recorded=True)

    assert migrate.current(store_url) is None
    assert not set(metadata.tables) & _tables(store_url)

    migrate.upgrade(store_url)

    assert migrate.current(store_url) == migrate.heads()[0]
    with EventStore(store_url) as store:
        assert store.head().position == 0  # a fresh ledger, genesis head
        assert store.append([EventDraft("arena-m", "ArenaRetired",
                                        {"block": 1, "reason": "x"})]).positions == (1,)
        assert store.verify().ok


def test_every_revision_upgrades_and_downgrades_one_step_at_a_time(store_url: str) -> None:
    revisions = _revisions_oldest_first()
    for revision in revisions:
        migrate.upgrade(store_url, revision)
        assert migrate.current(store_url) == revision
    for expected in [*reversed(revisions[:-1]), None]:
        migrate.downgrade(store_url, "-1")
        assert migrate.current(store_url) == expected
    assert not set(metadata.tables) & _tables(store_url)


def test_revisions_never_touch_recorded_event_rows(store_url: str) -> None:
    first = _revisions_oldest_first()[0]
    migrate.upgrade(store_url)
    _append_some(store_url)
    recorded = _event_rows(store_url)
    assert len(recorded) == 5

    migrate.downgrade(store_url, first)  # every later revision down...
    assert _event_rows(store_url) == recorded
    migrate.upgrade(store_url)  # ...and up again over existing events
    assert _event_rows(store_url) == recorded

    with EventStore(store_url) as store:
        report = store.verify()
        assert report.ok and report.checked == 5
        assert store.append([EventDraft("arena-m", "ArenaRetired",
                                        {"block": 9, "reason": "after"})]).positions == (6,)
        assert store.verify().ok


def _schema(url: str) -> tuple[str | None, set[str], list[tuple[Any, ...]]]:
    return migrate.current(url), _tables(url), _event_rows(url)


@pytest.mark.parametrize("target", ["base", "-7", "0001_initial", "0001", "-6"])
def test_a_downgrade_that_would_drop_records_is_refused_and_changes_nothing(
    store_url: str, target: str
) -> None:
    migrate.upgrade(store_url)
    _append_some(store_url)
    with EventStore(store_url) as store:
        sign_tree(store, Signer.generate("ops.example"))
        sign_tree(store, Signer.generate("ops.example"))
    before = _schema(store_url)

    with pytest.raises(Refused) as refused:
        migrate.downgrade(store_url, target)

    held = {
        "base": "the events table and its 5 recorded events and the checkpoints table and "
        "its 2 signed checkpoints",
        "-7": "the events table and its 5 recorded events and the checkpoints table and its "
        "2 signed checkpoints",
        "0001_initial": "the checkpoints table and its 2 signed checkpoints",
        "0001": "the checkpoints table and its 2 signed checkpoints",  # a prefix names it
        "-6": "the checkpoints table and its 2 signed checkpoints",
    }[target]
    assert refused.value.message.startswith(
        f"downgrading to {target} would drop {held}; nothing was changed. Back up first"
    )
    assert refused.value.context == {"path": "revision"}
    assert _schema(store_url) == before
    with EventStore(store_url) as store:
        assert store.verify().ok and len(store.checkpoints()) == 2

    migrate.downgrade(store_url, target, discard_recorded=True)  # an operator's choice
    assert migrate.current(store_url) in (None, "0001_initial")


@pytest.mark.parametrize(
    ("target", "refusal"),
    [
        ("0009_nope", "unknown revision '0009_nope'; the revisions are 0007_reward_status, "
         "0006_read_model_claims, 0005_read_models, "
         "0004_pg_recorded_at_brin, 0003_sqlite_position_rowid, 0002_merkle_checkpoints, "
         "0001_initial (or head, base, -N)"),
        ("+1", "cannot downgrade to '+1': name a shipped revision, base or -N (steps back "
         "from the database's revision)"),
        ("-9", "migration refused: Relative revision -9 didn't produce 9 migrations"),
        # Relative to a name: alembic resolves these; the check of recorded tables could not
        # place them, and let "0003_sqlite_position_rowid-3" drop the events unasked.
        ("head-3", "unknown revision 'head-3'; the revisions are 0007_reward_status, "
         "0006_read_model_claims, 0005_read_models, "
         "0004_pg_recorded_at_brin, 0003_sqlite_position_rowid, 0002_merkle_checkpoints, "
         "0001_initial (or head, base, -N)"),
        ("0003_sqlite_position_rowid-3", "unknown revision '0003_sqlite_position_rowid-3'; "
         "the revisions are 0007_reward_status, 0006_read_model_claims, 0005_read_models, "
         "0004_pg_recorded_at_brin, "
         "0003_sqlite_position_rowid, 0002_merkle_checkpoints, 0001_initial (or head, base, "
         "-N)"),
    ],
)
def test_a_downgrade_to_no_revision_of_a_ledger_is_a_refusal_not_a_crash(
    store_url: str, target: str, refusal: str
) -> None:
    migrate.upgrade(store_url)
    _append_some(store_url)
    before = _schema(store_url)
    with pytest.raises(InvalidInput) as refused:
        migrate.downgrade(store_url, target)
    assert type(refused.value) is InvalidInput
    assert refused.value.message == refusal
    for same_place in ("head", "heads"):
        migrate.downgrade(store_url, same_place)  # already there: nothing to do
    assert _schema(store_url) == before


def test_a_downgrade_that_drops_only_empty_tables_or_none_runs(store_url: str) -> None:
    migrate.upgrade(store_url)
    _append_some(store_url)
    recorded = _event_rows(store_url)
    migrate.downgrade(store_url, "0001_initial")  # no checkpoint signed: nothing is lost
    assert migrate.current(store_url) == "0001_initial" and _event_rows(store_url) == recorded
    # From there only the events are at stake (no checkpoints table to count).
    with pytest.raises(Refused, match="drop the events table and its 5 recorded events; no"):
        migrate.downgrade(store_url, "base")
    migrate.upgrade(store_url)
    with EventStore(store_url) as store:
        sign_tree(store, Signer.generate("ops.example"))
    migrate.downgrade(store_url, "0002_merkle_checkpoints")  # keeps the checkpoints table
    assert migrate.current(store_url) == "0002_merkle_checkpoints"
    # One checkpoint, said in the singular (was "its 1 signed checkpoints").
    with pytest.raises(Refused, match="the checkpoints table and its 1 signed checkpoint;"):
        migrate.downgrade(store_url, "-1")  # from there, one step reverses the checkpoints
    assert migrate.current(store_url) == "0002_merkle_checkpoints"
    migrate.upgrade(store_url)
    with pytest.raises(Refused):
        migrate.downgrade(store_url, "base")
    migrate.downgrade(store_url, "base", discard_recorded=True)
    migrate.upgrade(store_url)
    migrate.downgrade(store_url, "base")  # an empty ledger: nothing to refuse
    assert migrate.current(store_url) is None
    migrate.downgrade(store_url, "base")  # no revision at all: nothing to do
    assert migrate.current(store_url) is None


def test_check_finds_no_drift_after_upgrade_and_finds_a_stray_table(store_url: str) -> None:
    migrate.upgrade(store_url)
    migrate.check(store_url)  # raises StoreError on drift

    engine = make_engine(store_url)
    try:
        with engine.begin() as conn:
            conn.execute(text("CREATE TABLE stray_table (id INTEGER PRIMARY KEY)"))
    finally:
        engine.dispose()
    with pytest.raises(StoreError, match="drift"):
        migrate.check(store_url)


def test_upgrade_with_sql_returns_the_script_and_touches_nothing(
    store_url: str, backend: str
) -> None:
    script = migrate.upgrade(store_url, sql=True)

    assert "CREATE TABLE events" in script
    assert "CREATE TABLE ledger_head" in script
    assert "CREATE TABLE idempotency_keys" in script
    assert "append-only" in script  # the triggers are part of the schema
    if backend == "postgres":
        assert "FOR UPDATE" not in script and "BYTEA" in script
        assert "CREATE FUNCTION arena_ledger_refuse_change" in script
    else:
        assert "CREATE TRIGGER trg_events_no_update" in script
    assert migrate.current(store_url) is None
    assert not set(metadata.tables) & _tables(store_url)


def test_downgrade_with_sql_returns_the_script_and_touches_nothing(store_url: str) -> None:
    migrate.upgrade(store_url)
    script = migrate.downgrade(store_url, "base", sql=True)
    assert "DROP TABLE events" in script
    assert migrate.current(store_url) == migrate.heads()[0]
    assert set(metadata.tables) <= _tables(store_url)


def test_an_unknown_revision_is_refused(store_url: str) -> None:
    with pytest.raises(InvalidInput):
        migrate.upgrade(store_url, "no_such_revision")
    assert migrate.current(store_url) is None


@pytest.mark.parametrize("name", sorted(SHIPPED_REVISION_SHA256))
def test_shipped_revisions_are_never_edited(name: str) -> None:
    data = (MIGRATIONS_DIR / "versions" / name).read_bytes()
    assert hashlib.sha256(data).hexdigest() == SHIPPED_REVISION_SHA256[name], (
        f"{name} was edited after it shipped; add a new revision instead"
    )


def _sqlite_events_shape(path: Path) -> tuple[str, set[str]]:
    """Returns events.position's declared type and the names of the table's indexes."""
    import sqlite3

    conn = sqlite3.connect(path)
    try:
        declared = {row[1]: row[2] for row in conn.execute("PRAGMA table_info(events)")}
        indexes = {row[1] for row in conn.execute("PRAGMA index_list(events)")}
    finally:
        conn.close()
    return declared["position"], indexes


def test_sqlite_position_becomes_the_rowid_and_stays_append_only(tmp_path: Path) -> None:
    path = tmp_path / "rowid.db"
    url = f"sqlite:///{path}"
    migrate.upgrade(url, "0002_merkle_checkpoints")
    _append_some(url)
    before = _event_rows(url)
    declared, indexes = _sqlite_events_shape(path)
    assert declared == "BIGINT" and len(indexes) == 4  # pk index beside the rowid

    migrate.upgrade(url, "0003_sqlite_position_rowid")
    declared, indexes = _sqlite_events_shape(path)
    assert declared == "INTEGER"
    # the primary key is the rowid now: one autoindex (stream, version) and the two named
    assert indexes == {"sqlite_autoindex_events_1", "ix_events_type_position",
                       "ix_events_recorded_at"}
    assert _event_rows(url) == before
    engine = make_engine(url)
    try:
        with engine.connect() as conn:
            assert conn.execute(text("SELECT COUNT(*) FROM events WHERE rowid <> position")
                                ).scalar() == 0
            for statement in ("UPDATE events SET actor = 'x' WHERE position = 1",
                              "DELETE FROM events WHERE position = 5"):
                with pytest.raises(Exception, match="append-only"):
                    conn.execute(text(statement))
    finally:
        engine.dispose()
    with EventStore(url, schema_revision="0003_sqlite_position_rowid") as store:
        assert store.verify().ok
        assert store.append([EventDraft("arena-m", "ArenaRetired",
                                        {"block": 7, "reason": "after"})]).positions == (6,)

    migrate.downgrade(url, "0002_merkle_checkpoints")
    declared, _ = _sqlite_events_shape(path)
    assert declared == "BIGINT"
    assert _event_rows(url)[:5] == before
    with EventStore(url) as store:
        assert store.verify().ok


def _recorded_at_index(url: str, backend: str) -> str:
    """Returns how events.recorded_at is indexed: the access method (PostgreSQL) or DDL."""
    engine = make_engine(url)
    try:
        with engine.connect() as conn:
            if backend == "postgres":
                sql = ("SELECT am.amname FROM pg_class c JOIN pg_am am ON am.oid = c.relam "
                       "WHERE c.relname = 'ix_events_recorded_at'")
            else:
                sql = "SELECT sql FROM sqlite_master WHERE name = 'ix_events_recorded_at'"
            return str(conn.execute(text(sql)).scalar())
    finally:
        engine.dispose()


def test_pg_recorded_at_becomes_brin_and_the_filter_and_triggers_still_hold(
    store_url: str, backend: str
) -> None:
    migrate.upgrade(store_url, "0003_sqlite_position_rowid")
    _append_some(store_url)
    before = _event_rows(store_url)
    was = _recorded_at_index(store_url, backend)
    assert was == "btree" if backend == "postgres" else "(recorded_at)" in was

    migrate.upgrade(store_url, "0004_pg_recorded_at_brin")
    now = _recorded_at_index(store_url, backend)
    assert now == ("brin" if backend == "postgres" else was)  # SQLite keeps its B-tree
    assert _event_rows(store_url) == before
    migrate.upgrade(store_url)  # the later revisions leave the index as it is
    assert _recorded_at_index(store_url, backend) == now
    migrate.check(store_url)  # no drift (alembic does not compare index methods, so:)
    declared = {ix.name: ix for ix in metadata.tables["events"].indexes}["ix_events_recorded_at"]
    assert declared.dialect_options["postgresql"]["using"] == "brin"
    engine = make_engine(store_url)
    try:
        for statement in ("UPDATE events SET actor = 'x' WHERE position = 1",
                          "DELETE FROM events WHERE position = 5"):
            with engine.connect() as conn, pytest.raises(Exception, match="append-only"):
                conn.execute(text(statement))
    finally:
        engine.dispose()
    with EventStore(store_url, clock=lambda: "2040-01-01T00:00:00.000000Z") as store:
        assert store.append([EventDraft("arena-m", "ArenaRetired",
                                        {"block": 7, "reason": "after"})]).positions == (6,)
        later = store.read_all(recorded_from="2039-01-01T00:00:00.000000Z")
        assert [e.position for e in later] == [6]
        earlier = store.read_all(recorded_to="2039-01-01T00:00:00.000000Z")
        assert [e.position for e in earlier] == [1, 2, 3, 4, 5]
        assert store.verify().ok

    migrate.downgrade(store_url, "0003_sqlite_position_rowid")
    assert _recorded_at_index(store_url, backend) == was
    assert _event_rows(store_url)[:5] == before
    with EventStore(store_url) as store:
        assert store.verify().ok


@pytest.mark.parametrize("name", ["head", "heads", "base", "0001_initial", "0001", "-1", "+2"])
def test_a_shipped_revision_name_prefix_or_step_is_accepted(name: str) -> None:
    migrate.require_revision(name)  # raises for anything else


@pytest.mark.parametrize("name", ["nope", "0009", "", " ", "+x", "head2"])
def test_an_unknown_revision_is_refused_listing_the_shipped_ones(name: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        migrate.require_revision(name)
    shipped = [rev["revision"] for rev in migrate.history()]
    assert caught.value.message == (
        f"unknown revision {name!r}; the revisions are {', '.join(shipped)} (or head, base, -N)")
    assert caught.value.context["path"] == "revision"


def test_only_an_upgrade_creates_a_missing_sqlite_file(tmp_path: Path) -> None:
    """A downgrade or a drift check of a mistyped path says there is no ledger there and
    leaves no empty database file behind; an upgrade (`init`) is what creates one."""
    missing = tmp_path / "typo.db"
    url = f"sqlite:///{missing}"
    for action in (lambda: migrate.downgrade(url, "base"), lambda: migrate.check(url)):
        with pytest.raises(SchemaNotInitialised):
            action()
        assert not missing.exists()
    migrate.upgrade(url)
    assert missing.is_file() and migrate.current(url) == migrate.heads()[0]


# Migration edges (docs/operations.md): a ledger at a newer release's revision is refused and left
# unchanged, URLs holding a percent sign migrate, a database that does not open is unavailable by
# name, offline SQL needs no database, and an unknown revision is refused alike with or without
# --sql.


# -- migrations ------------------------------------------------------------------------------

NEWER = "0009_from_a_newer_release"


def _tables_and_events(url: str) -> tuple[set[str], list[tuple[Any, ...]]]:
    from sqlalchemy import inspect

    engine = make_engine(url)
    try:
        with engine.connect() as conn:
            rows = conn.execute(text("SELECT position, entry_hash FROM events")).all()
            return set(inspect(conn).get_table_names()), [tuple(r) for r in rows]
    finally:
        engine.dispose()


def test_a_ledger_at_a_newer_releases_revision_is_refused_and_nothing_changes(
    store: EventStore, draft: Any
) -> None:
    # operations.md, Migrations 1: "a revision it does not ship was made by a newer
    # release, so init, db upgrade, db check, db downgrade … exit 5 (unknown_revision) and
    # change nothing".
    store.append([draft("arena-a", n) for n in range(3)])
    stamp(store.url, NEWER)
    before = _tables_and_events(store.url)
    actions = {
        "upgrade": lambda: migrate.upgrade(store.url),
        "downgrade": lambda: migrate.downgrade(store.url, "0001_initial"),
        "downgrade base": lambda: migrate.downgrade(store.url, "base", discard_recorded=True),
        "pending": lambda: migrate.pending(store.url),
        "check": lambda: migrate.check(store.url),
    }
    for name, action in actions.items():
        with pytest.raises(StoreError) as caught:
            action()
        assert type(caught.value) is StoreError, name
        assert caught.value.context["reason"] == "unknown_revision", name
        assert caught.value.context["revision"] == NEWER, name
        assert caught.value.exit_code == 5, name
        assert caught.value.message.startswith(
            f"the ledger is at schema revision {NEWER!r}, which this release does not know"
        ), name
        assert migrate.current(store.url) == NEWER, name
        assert _tables_and_events(store.url) == before, name


def test_a_url_holding_a_percent_sign_migrates(
    backend: str, store_url: str, tmp_path: Path
) -> None:
    if backend == "sqlite":
        (tmp_path / "100%").mkdir()
        url = f"sqlite:///{tmp_path / '100%' / 'ledger.db'}"
    else:
        url = f"{store_url}?application_name=arena%20ledger"
    assert "CREATE TABLE events" in migrate.upgrade(url, sql=True)
    assert migrate.current(url) is None
    migrate.upgrade(url)
    assert migrate.current(url) == migrate.heads()[0]
    assert "DROP TABLE events" in migrate.downgrade(url, "base", sql=True)
    migrate.downgrade(url, "base")
    assert migrate.current(url) is None


def test_a_database_that_does_not_open_is_unavailable_naming_it(
    backend: str, tmp_path: Path
) -> None:
    if backend == "sqlite":
        junk = tmp_path / "junk.db"
        junk.write_bytes(b"this is not a SQLite database " * 200)
        url = f"sqlite:///{junk}"
    else:  # a server that does not answer (nothing listens on port 1)
        url = "postgresql+psycopg://postgres@127.0.0.1:1/no_ledger"
    for action in (lambda: migrate.current(url), lambda: migrate.upgrade(url)):
        with pytest.raises(StoreUnavailable) as caught:
            action()
        assert f"cannot open the database {safe_url(url)}: " in caught.value.message
        assert caught.value.exit_code == 5
    if backend == "sqlite":
        assert junk.read_bytes() == b"this is not a SQLite database " * 200


def test_current_of_a_missing_file_that_must_exist_says_there_is_no_ledger(
    tmp_path: Path,
) -> None:
    missing = tmp_path / "typo.db"
    url = f"sqlite:///{missing}"
    assert migrate.current(url) is None
    with pytest.raises(SchemaNotInitialised, match="there is no ledger at"):
        migrate.current(url, must_exist=True)
    assert not missing.exists()


@pytest.mark.postgres
@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
def test_a_postgres_downgrade_counts_records_only_once_writers_are_locked_out(
    store: EventStore, draft: Any
) -> None:
    # downgrade(): "PostgreSQL: the tables are locked against writers first", so no append
    # lands between the count and the drop. A writer's open transaction makes it wait.
    store.append([draft("arena-a", 1)])
    outcome: dict[str, Exception] = {}

    def downgrade() -> None:
        try:
            migrate.downgrade(store.url, "base")
        except Exception as exc:  # reported to the test below
            outcome["error"] = exc

    engine = make_engine(store.url)
    try:
        with engine.connect() as writer:
            writer.execute(text("LOCK TABLE events IN ROW EXCLUSIVE MODE"))  # as an INSERT
            worker = threading.Thread(target=downgrade)
            worker.start()
            waiting = 0
            deadline = time.monotonic() + 30
            while not waiting and worker.is_alive() and time.monotonic() < deadline:
                time.sleep(0.05)
                waiting = writer.execute(
                    text(
                        "SELECT count(*) FROM pg_locks WHERE NOT granted "
                        "AND relation = 'events'::regclass"
                    )
                ).scalar_one()
            assert waiting and worker.is_alive(), outcome
            writer.rollback()
        worker.join(timeout=60)
    finally:
        engine.dispose()
    assert isinstance(outcome.get("error"), Refused)
    assert migrate.current(store.url) == migrate.heads()[0]


def test_the_sql_of_an_upgrade_or_downgrade_needs_no_database(backend: str, tmp_path: Path) -> None:
    # operations.md: "The SQL is offline": it is written without opening the database.
    if backend == "sqlite":
        junk = tmp_path / "junk.db"
        junk.write_bytes(b"this is not a SQLite database " * 200)
        url = f"sqlite:///{junk}"
    else:
        url = "postgresql+psycopg://postgres@127.0.0.1:1/no_ledger"
    assert "CREATE TABLE events" in migrate.upgrade(url, sql=True)
    assert "DROP TABLE events" in migrate.downgrade(url, "base", sql=True)
    if backend == "sqlite":
        assert junk.read_bytes() == b"this is not a SQLite database " * 200


@pytest.mark.parametrize("name", ["nope", ""])
def test_an_unknown_revision_is_refused_alike_with_or_without_sql(
    name: str, tmp_path: Path
) -> None:
    # require_revision(): "asked first, the answer is the same whatever the ledger holds".
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    with pytest.raises(InvalidInput) as asked:
        migrate.require_revision(name)
    for sql in (True, False):
        with pytest.raises(InvalidInput) as caught:
            migrate.upgrade(url, name, sql=sql)
        assert caught.value.message == asked.value.message
        with pytest.raises(InvalidInput) as caught:
            migrate.downgrade(url, name, sql=sql)
        assert caught.value.message == asked.value.message
    assert not (tmp_path / "ledger.db").exists()

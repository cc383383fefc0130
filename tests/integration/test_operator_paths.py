"""Checks the operator paths' edge cases: backup, restore, bundle import and upgrade.

Each expectation comes from docs/verification.md, docs/operations.md or the function's
docstring. The fixtures are the suite's (store, spare_store, draft, store_url) and
fresh_pg_database.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from operator_ledger import (
    Draft,
    fill,
)
from sqlalchemy import text
from tampering import triggers_bypassed

from ledger.bundle import CHECKPOINT_FILE, export_bundle, verify_bundle
from ledger.checkpoint import sign_tree
from ledger.note import Checkpoint, Signer, sign_checkpoint
from ledger.store import EventStore
from vocabulary.errors import IntegrityError


@pytest.fixture(scope="module")
def signer() -> Signer:
    return Signer.generate("ops.example")


# ---------------------------------------------------------------- export


def test_export_with_a_key_and_a_prefix_signs_the_prefix_size(
    store: EventStore, draft: Draft, signer: Signer, tmp_path: Path
) -> None:
    # verification.md: checkpoint.note is "a checkpoint at exactly the bundle's size: signed
    # during the export with --key"; `--to-position N` exports 1..N.
    fill(store, draft, 8)
    report = export_bundle(store, tmp_path / "b", signer=signer, to_position=5)
    assert report.events == 5
    assert verify_bundle(tmp_path / "b", signer.verifier()).events == 5
    stored = store.checkpoints(1)[0]
    assert stored["tree_size"] == 5
    assert stored["note"] == (tmp_path / "b" / CHECKPOINT_FILE).read_text()


def test_export_without_a_key_includes_the_latest_stored_checkpoint_of_that_size(
    store: EventStore, draft: Draft, signer: Signer, tmp_path: Path
) -> None:
    # verification.md: "or else the latest stored checkpoint of that size and root".
    fill(store, draft, 8)
    sign_tree(store, signer, size=5)
    newer = sign_tree(store, Signer.generate("rotated.example"), size=5).note
    export_bundle(store, tmp_path / "b", to_position=5)
    assert (tmp_path / "b" / CHECKPOINT_FILE).read_text() == newer


def test_export_without_a_key_leaves_out_a_stored_checkpoint_of_another_root(
    store: EventStore, draft: Draft, signer: Signer, tmp_path: Path
) -> None:
    # "the latest stored checkpoint of that size *and root*": a note of the same size over
    # another tree (a fork, a damaged row) must not be shipped as the bundle's checkpoint.
    fill(store, draft, 8)
    good = sign_tree(store, signer, size=5).note
    other = sign_checkpoint(Checkpoint("arena-ledger/ops.example", 5, b"\x07" * 32), signer)
    store.add_checkpoint(5, (b"\x07" * 32).hex(), "arena-ledger/ops.example", signer.name, other)
    report = export_bundle(store, tmp_path / "b", to_position=5)
    assert (tmp_path / "b" / CHECKPOINT_FILE).read_text() == good
    assert report.checkpoint_included
    assert verify_bundle(tmp_path / "b", signer.verifier()).events == 5


def test_export_report_says_a_stored_checkpoint_was_included(
    store: EventStore, draft: Draft, signer: Signer, tmp_path: Path
) -> None:
    # verification.md: --json gives `checkpoint_included`; an unsigned export that ships
    # the stored checkpoint of its size includes one.
    fill(store, draft, 8)
    sign_tree(store, signer, size=8)
    report = export_bundle(store, tmp_path / "b")
    assert (tmp_path / "b" / CHECKPOINT_FILE).is_file()
    assert report.checkpoint_included is True
    assert report.to_json()["checkpoint_included"] is True


@pytest.mark.parametrize("signed", [False, True])
def test_export_refuses_a_damaged_stored_merkle_tree_and_signs_nothing(
    store: EventStore, draft: Draft, signer: Signer, tmp_path: Path, signed: bool
) -> None:
    # verification.md: export "re-checks the hash chain and the stored Merkle root on the
    # way" and the bundle "appears only when complete"; errors: tree damage is tree_mismatch.
    fill(store, draft, 40)
    with triggers_bypassed(store) as conn:
        changed = conn.execute(
            text("UPDATE merkle_nodes SET hash = :h WHERE level = 5 AND idx = 0"),
            {"h": b"\x09" * 32},
        ).rowcount
    assert changed == 1
    before = len(store.checkpoints(100))
    with pytest.raises(IntegrityError) as err:
        export_bundle(store, tmp_path / "b", signer=signer if signed else None, to_position=32)
    assert err.value.context["reason"] == "tree_mismatch"
    assert not (tmp_path / "b").exists()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []
    assert len(store.checkpoints(100)) == before


# ---------------------------------------------------------------- import


def test_import_refuses_an_events_file_cut_short_between_the_passes(
    store: EventStore, spare_store: EventStore, draft: Draft, signer: Signer, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # verification.md: in the transaction import "reads the file again, re-checks every
    # line ...  Any failure — a bad line, a file changed between the passes ... — rolls
    # everything back". A prefix is a valid chain line by line, so only the comparison with
    # the first pass (or the rebuilt root) can catch it.
    import ledger.bundle as bundle_module
    from ledger.bundle import EVENTS_FILE, import_bundle

    fill(store, draft, 12)
    export_bundle(store, tmp_path / "b", signer=signer)
    original = bundle_module._check_totals

    def then_cut(scan: Any, manifest: Any) -> None:
        original(scan, manifest)
        events = tmp_path / "b" / EVENTS_FILE
        events.write_bytes(b"".join(events.read_bytes().splitlines(keepends=True)[:8]))

    monkeypatch.setattr(bundle_module, "_check_totals", then_cut)
    with pytest.raises(IntegrityError):
        import_bundle(spare_store, tmp_path / "b", signer.verifier())
    assert spare_store.head().position == 0
    with spare_store.engine.connect() as conn:
        assert conn.execute(text("SELECT COUNT(*) FROM events")).scalar() == 0
        assert conn.execute(text("SELECT COUNT(*) FROM checkpoints")).scalar() == 0


def test_import_lets_a_fault_that_is_not_the_databases_through_unrenamed(
    store: EventStore, spare_store: EventStore, draft: Draft, signer: Signer, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Errors table: only a database error becomes StoreError ("the database refused the
    # import"); `_is_database_error` "tells an error raised by the database layer from a
    # bug", and a bug must not be reported to the operator as the database's refusal.
    import ledger.bundle as bundle_module
    from ledger.bundle import import_bundle
    from vocabulary.errors import StoreError

    fill(store, draft, 6)
    export_bundle(store, tmp_path / "b", signer=signer)

    def broken(self: Any, rows: Any, entries: Any) -> None:
        raise ZeroDivisionError("a bug, not the database")

    monkeypatch.setattr(bundle_module._Inserter, "__call__", broken)
    with pytest.raises(ZeroDivisionError):
        try:
            import_bundle(spare_store, tmp_path / "b", signer.verifier())
        except StoreError as exc:  # pragma: no cover - only a wrong mapping lands here
            pytest.fail(f"a programming error was reported as the database's: {exc.message}")
    assert spare_store.head().position == 0


# ---------------------------------------------------------------- ops: backup / restore


@pytest.fixture
def sqlite_source(tmp_path: Path, draft: Draft) -> str:
    from ledger import migrate

    url = f"sqlite:///{tmp_path / 'source.db'}"
    migrate.upgrade(url)
    with EventStore(url) as source:
        fill(source, draft, 5)
    return url


def test_a_restore_into_an_initialised_empty_ledger_leaves_no_scratch_file(
    sqlite_source: str, tmp_path: Path
) -> None:
    # operations.md: "The backup is copied next to the target and verified before the
    # target is touched"; the copy is scratch: once restored, nothing but the ledger (and
    # its live WAL side files) is left beside it.
    from ledger import migrate
    from services import operations as ops

    ops.backup(sqlite_source, tmp_path / "backup.db")
    folder = tmp_path / "target"
    folder.mkdir()
    target = f"sqlite:///{folder / 'empty.db'}"
    migrate.upgrade(target)
    report = ops.restore(target, tmp_path / "backup.db")
    assert report.head.position == 5
    left = sorted(p.name for p in folder.iterdir())
    assert [n for n in left if n not in ("empty.db", "empty.db-wal", "empty.db-shm")] == []


# ---------------------------------------------------------------- ops: PostgreSQL restore





def _public_tables(url: str) -> int:
    with EventStore(url) as target, target.engine.connect() as conn:
        return int(conn.exec_driver_sql(
            "SELECT count(*) FROM pg_tables WHERE schemaname = 'public'").scalar_one())


@pytest.mark.postgres
@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
def test_a_postgres_restore_refuses_a_tampered_archive(
    store: EventStore, draft: Draft, tmp_path: Path, fresh_pg_database: str
) -> None:
    # operations.md: `db restore` "runs pg_restore ... and then verifies the chain ... If
    # the restored chain fails, it exits 4 and tells you to drop the database".
    from services import operations as ops
    fill(store, draft, 6)
    with triggers_bypassed(store) as conn:
        conn.execute(text("UPDATE events SET actor = 'mallory' WHERE position = 3"))
    ops.backup(store.url, tmp_path / "tampered.dump")  # a pg_dump archive is not verified
    with pytest.raises(IntegrityError, match="drop the database") as caught:
        ops.restore(fresh_pg_database, tmp_path / "tampered.dump")
    assert caught.value.context["first_bad_position"] == 3


@pytest.mark.postgres
@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
def test_a_postgres_restore_refuses_a_pg_dump_archive_of_another_database(
    store_url: str, tmp_path: Path, fresh_pg_database: str
) -> None:
    # operations.md: restore refuses what is not an arena ledger archive before anything
    # reaches the target; a real pg_dump archive of another application's database must
    # not be loaded into the target.
    import shutil
    import subprocess

    from sqlalchemy.engine import make_url

    from services import operations as ops
    from vocabulary.errors import InvalidInput

    with EventStore(store_url) as other, other.engine.begin() as conn:
        conn.exec_driver_sql("CREATE TABLE widgets (id integer PRIMARY KEY, name text)")
        conn.exec_driver_sql("INSERT INTO widgets VALUES (1, 'gear')")
    url = make_url(store_url)
    archive = tmp_path / "widgets.dump"
    subprocess.run([shutil.which("pg_dump") or "pg_dump", "--format=custom", f"--file={archive}",
                    f"--dbname=host={url.host} port={url.port or 5432} user={url.username} "
                    f"dbname={url.database}"], check=True, capture_output=True)
    with pytest.raises(InvalidInput, match="not a pg_dump archive of an arena ledger"):
        ops.restore(fresh_pg_database, archive)
    assert _public_tables(fresh_pg_database) == 0


@pytest.mark.postgres
@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
def test_a_postgres_backup_reports_no_head_when_the_head_moved_during_the_dump(
    store: EventStore, draft: Draft, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # operations.md: "The head is reported when it did not move during the dump; otherwise
    # only the restore tells."
    from services import operations as ops
    fill(store, draft, 4)
    original = ops._run_tool

    def dump_then_append(argv: list[str], env: dict[str, str], error: Any) -> str:
        out = original(argv, env, error)
        store.append([draft("arena-late", 1)])  # a validator appended while pg_dump ran
        return out

    monkeypatch.setattr(ops, "_run_tool", dump_then_append)
    report = ops.backup(store.url, tmp_path / "moving.dump")
    assert store.head().position == 5
    assert report.head is None


# ---------------------------------------------------------------- ops / migrate: upgrade


def test_a_sqlite_file_left_by_downgrade_base_can_be_initialised_again(tmp_path: Path) -> None:
    # operations.md: `db downgrade base` "drops everything" of an empty ledger; the file
    # keeps only Alembic's (empty) version table, which is not another application's:
    # `db upgrade` / init must create the ledger in it again.
    from ledger import migrate
    from services import operations as ops

    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    migrate.upgrade(url)
    migrate.downgrade(url, "base")
    assert migrate.current(url) is None
    report = ops.upgrade(url)
    assert report.after == migrate.heads()[0]
    with EventStore(url) as again:
        assert again.is_initialised() and again.head().position == 0


def test_import_into_a_missing_or_uninitialised_sqlite_ledger_is_refused_and_creates_nothing(
    store: EventStore, draft: Draft, signer: Signer, tmp_path: Path
) -> None:
    # operations.md: every command but init / db upgrade / db restore answers "there is no
    # ledger at PATH" for a path that does not exist and leaves no file behind; import
    # needs an initialised ledger ("`init` it first").
    from ledger.bundle import import_bundle
    from vocabulary.errors import SchemaNotInitialised

    fill(store, draft, 3)
    export_bundle(store, tmp_path / "b", signer=signer)
    missing = tmp_path / "nowhere.db"
    with EventStore(f"sqlite:///{missing}") as target, pytest.raises(SchemaNotInitialised):
        import_bundle(target, tmp_path / "b", signer.verifier())
    assert not missing.exists()
    (tmp_path / "blank.db").touch()
    with (
        EventStore(f"sqlite:///{tmp_path / 'blank.db'}") as blank,
        pytest.raises(SchemaNotInitialised),
    ):
        import_bundle(blank, tmp_path / "b", signer.verifier())


def test_a_sqlite_restore_of_an_older_backup_reports_the_pending_revisions(
    sqlite_source: str, tmp_path: Path
) -> None:
    # operations.md: "If the backup was taken by an older release, the report says which
    # revisions are pending. Run `db upgrade` next."
    from ledger import migrate
    from services import operations as ops

    previous = str(migrate.history()[1]["revision"])
    migrate.downgrade(sqlite_source, previous)
    ops.backup(sqlite_source, tmp_path / "older.db")
    report = ops.restore(f"sqlite:///{tmp_path / 'restored.db'}", tmp_path / "older.db")
    assert report.revision == previous
    assert report.pending == [migrate.heads()[0]]
    assert report.to_json()["pending"] == [migrate.heads()[0]]


def test_a_sqlite_backup_of_a_newer_releases_ledger_is_refused_and_no_target_appears(
    sqlite_source: str, tmp_path: Path
) -> None:
    # operations.md: old code refuses a newer schema: `db restore` of such a backup exits 5
    # (`unknown_revision`) and changes nothing.
    from services import operations as ops
    from vocabulary.errors import StoreError

    ops.backup(sqlite_source, tmp_path / "newer.db")
    import sqlite3

    with sqlite3.connect(tmp_path / "newer.db") as raw:
        raw.execute("UPDATE alembic_version SET version_num = '0009_from_a_newer'")
    raw.close()
    with pytest.raises(StoreError) as caught:
        ops.restore(f"sqlite:///{tmp_path / 'restored.db'}", tmp_path / "newer.db")
    assert caught.value.context["reason"] == "unknown_revision"
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("restored")) == []


def test_db_check_of_a_ledger_behind_head_says_to_upgrade_first(store_url: str) -> None:
    # operations.md: `db check` exits 5 "on a ledger not yet at the latest revision, which
    # it says to upgrade first" (migrate.check: SchemaNotInitialised, nothing compared).
    from ledger import migrate
    from vocabulary.errors import SchemaNotInitialised

    previous = str(migrate.history()[1]["revision"])
    migrate.upgrade(store_url, previous)
    with pytest.raises(SchemaNotInitialised, match="db upgrade") as caught:
        migrate.check(store_url)
    assert caught.value.context["reason"] == "schema_revision"
    assert migrate.current(store_url) == previous

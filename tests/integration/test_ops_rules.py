"""Pins operator-path rules of services.operations that the main ops tests leave loose.

Found by a hand-made mutation review of services/operations.py: each test here fails on one small
change to the module that the other tests let through. They pin, from docs/operations.md,
DOMAIN §6 and the module's docstrings:

* a backup or a restore that finds a scratch file left by an interrupted run (``PATH.partial``,
  ``TARGET.restore-partial``) replaces it and succeeds, leaving no scratch file behind;
* a SQLite backup, and a restore into a new file, fsync the copy under its scratch name before
  it takes its final name, and fsync the directory once it has (as does a pg_dump backup);
* a SQLite restore copies the backup next to the target, not next to the backup;
* a restore refuses, as ``InvalidInput`` and creating nothing, a SQLite file that holds no
  ledger tables, and it refuses a target file holding any schema object (a view alone);
* pg_dump and pg_restore get the URL's password through ``PGPASSWORD`` only, never on the
  command line, and the URL's host, port (or its absence) and query options, quoted;
* a missing pg_dump or pg_restore is ``InvalidInput`` (exit 1) pointing to the manual
  procedure, and a failing tool's stderr is quoted cut to ``tool_message_chars_max``;
* a SQLite backup that fails verification names the ``PATH.unverified`` copy it kept (in its
  message and its ``path`` context), and that copy fails at the same position;
* ``db upgrade`` of a ledger already at head runs nothing, verifies nothing and reports the
  revision it is at; one run with ``skip_verify`` says so in its JSON report;
* a SQLite file holding the ledger's tables but no schema revision is a damaged store
  (``StoreError``, exit 5), not another application's file, and is left unchanged; a file
  that is no database at all is refused as ``InvalidInput`` (the library's own error);
* a NO_DECISION rate is rounded half-even to 6 places (DOMAIN §6);
* ``history`` lists a submission's attempts as its QualificationStarted events name them, in
  order: a requeued submission's every attempt, and one still qualifying its current one.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.engine import make_url
from test_operator_paths import fill  # same directory, prepend import mode
from test_ops import ARENA_A, Builder, _sqlite_file, _tamper

from ledger import migrate
from ledger.records import EventDraft
from ledger.store import EventStore
from services import operations as ops
from services.arena_ledger import ArenaLedger
from vocabulary.errors import IntegrityError, InvalidInput, StoreError

Draft = Callable[..., EventDraft]

sqlite_only = pytest.mark.parametrize("backend", ["sqlite"], indirect=True)


def _leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if "partial" in p.name)


# -- scratch files ---------------------------------------------------------------------------


@sqlite_only
def test_a_backup_and_a_restore_replace_a_scratch_file_an_interrupted_run_left(
    store: EventStore,
    draft: Draft,
    tmp_path: Path,
) -> None:
    fill(store, draft, 5)
    target = tmp_path / "backup.db"
    torn = b"half a page of an interrupted copy" * 100
    for stale in ("backup.db.partial", "backup.db.partial-journal"):
        (tmp_path / stale).write_bytes(torn)
    report = ops.backup(store.url, target)
    assert report.verified is not None and report.verified.ok and report.head == store.head()

    restored = tmp_path / "restored.db"
    (tmp_path / "restored.db.restore-partial").write_bytes(torn)
    assert ops.restore(f"sqlite:///{restored}", target).head == store.head()
    assert _leftovers(tmp_path) == []


@sqlite_only
def test_a_backup_that_fails_verification_names_the_copy_it_kept(
    store: EventStore, draft: Draft, tmp_path: Path
) -> None:
    # operations.md: the command exits 4 naming the first bad position and "keeps the copy as
    # PATH.unverified for investigation"; the error carries where (its context, as --json).
    fill(store, draft, 4)
    _tamper(store.url, 3)
    target = tmp_path / "backup.db"
    with pytest.raises(IntegrityError) as caught:
        ops.backup(store.url, target)
    kept = tmp_path / "backup.db.unverified"
    assert caught.value.context["path"] == str(kept) and str(kept) in caught.value.message
    with EventStore(f"sqlite:///{kept}") as copy:
        assert copy.verify().first_bad_position == caught.value.context["first_bad_position"] == 3


# -- durability ------------------------------------------------------------------------------


@pytest.fixture
def fsynced(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, list[str]]]:
    """Records every fsync: the path the descriptor names and the folder's listing then."""
    calls: list[tuple[str, list[str]]] = []
    real = os.fsync

    def spy(fd: int) -> None:
        path = os.readlink(f"/proc/self/fd/{fd}")
        folder = path if os.path.isdir(path) else os.path.dirname(path)
        calls.append((path, sorted(os.listdir(folder))))
        real(fd)

    monkeypatch.setattr(os, "fsync", spy)
    return calls


def _assert_durable(calls: list[tuple[str, list[str]]], scratch: Path, final: Path) -> None:
    """The copy's bytes reach the disk under the scratch name, before the rename; the
    directory entry of the final name reaches it after."""
    assert any(path == str(scratch) for path, _ in calls), calls
    assert any(
        path == str(final.parent) and final.name in listing and scratch.name not in listing
        for path, listing in calls
    ), calls


@pytest.mark.parametrize(
    "backend", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)], indirect=True
)
def test_a_backup_is_fsynced_before_and_after_it_takes_its_name(
    store: EventStore,
    draft: Draft,
    tmp_path: Path,
    fsynced: list[tuple[str, list[str]]],
) -> None:
    fill(store, draft, 3)
    target = tmp_path / "backup.db"
    ops.backup(store.url, target)
    _assert_durable(fsynced, tmp_path / "backup.db.partial", target)


@sqlite_only
def test_a_restore_into_a_new_file_is_fsynced_before_and_after_it_takes_its_name(
    store: EventStore,
    draft: Draft,
    tmp_path: Path,
    fsynced: list[tuple[str, list[str]]],
) -> None:
    fill(store, draft, 3)
    ops.backup(store.url, tmp_path / "backup.db")
    fsynced.clear()
    restored = tmp_path / "restored.db"
    ops.restore(f"sqlite:///{restored}", tmp_path / "backup.db")
    _assert_durable(fsynced, tmp_path / "restored.db.restore-partial", restored)


# -- SQLite restore --------------------------------------------------------------------------


@sqlite_only
def test_a_restore_copies_the_backup_next_to_the_target(
    store: EventStore,
    draft: Draft,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # operations.md: "The backup is copied next to the target and verified before the
    # target is touched" (the same file system, so the verified copy is renamed in place).
    fill(store, draft, 3)
    (tmp_path / "backups").mkdir()
    (tmp_path / "live").mkdir()
    backup = tmp_path / "backups" / "backup.db"
    ops.backup(store.url, backup)
    verified: list[Path] = []
    real = ops._verify_file

    def spy(file: Path) -> Any:
        verified.append(file)
        return real(file)

    monkeypatch.setattr(ops, "_verify_file", spy)
    ops.restore(f"sqlite:///{tmp_path / 'live' / 'ledger.db'}", backup)
    assert [file.parent for file in verified] == [tmp_path / "live"]
    assert _leftovers(tmp_path / "backups") == [] and _leftovers(tmp_path / "live") == []


@sqlite_only
@pytest.mark.parametrize(
    "statements",
    [
        ("CREATE TABLE accounts (id INTEGER PRIMARY KEY, balance INTEGER)",),
        ("CREATE TABLE events (position INTEGER PRIMARY KEY)",),  # a name alone is no ledger
    ],
    ids=["another-application", "events-table-only"],
)
def test_a_restore_refuses_a_sqlite_file_without_ledger_tables_and_creates_nothing(
    store_url: str,
    tmp_path: Path,
    statements: tuple[str, ...],
) -> None:
    foreign = _sqlite_file(tmp_path / "foreign.db", *statements)
    target = tmp_path / "restored.db"
    with pytest.raises(InvalidInput, match="holds no arena-ledger tables"):
        ops.restore(f"sqlite:///{target}", foreign)
    assert not target.exists() and _leftovers(tmp_path) == []


@sqlite_only
def test_a_restore_refuses_a_target_holding_any_schema_object(
    store: EventStore,
    draft: Draft,
    tmp_path: Path,
) -> None:
    # operations.md: the target "must be a new file, an empty file, or an initialised ledger
    # with no events"; a database whose only object is a view is none of them.
    fill(store, draft, 3)
    ops.backup(store.url, tmp_path / "backup.db")
    viewed = _sqlite_file(tmp_path / "viewed.db", "CREATE VIEW answer AS SELECT 42 AS value")
    before = viewed.read_bytes()
    with pytest.raises(InvalidInput, match="is not an arena-ledger database"):
        ops.restore(f"sqlite:///{viewed}", tmp_path / "backup.db")
    assert viewed.read_bytes() == before and _leftovers(tmp_path) == []


# -- PostgreSQL client tools -----------------------------------------------------------------


@pytest.fixture
def tool_calls(monkeypatch: pytest.MonkeyPatch) -> list[tuple[list[str], dict[str, str]]]:
    """Records the argv and environment of every client tool run (the tools still run)."""
    calls: list[tuple[list[str], dict[str, str]]] = []
    real = subprocess.run

    def spy(argv: list[str], **kwargs: Any) -> Any:
        calls.append((list(argv), dict(kwargs.get("env") or {})))
        return real(argv, **kwargs)

    monkeypatch.setattr(subprocess, "run", spy)
    return calls


@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
@pytest.mark.postgres
def test_the_client_tools_get_the_url_but_never_its_password_on_the_command_line(
    store: EventStore,
    draft: Draft,
    tmp_path: Path,
    fresh_pg_database: str,
    tool_calls: list[tuple[list[str], dict[str, str]]],
) -> None:
    # operations.md: "db backup / db restore pass the URL's password to pg_dump / pg_restore
    # through PGPASSWORD, never on their command line" (trust authentication ignores it).
    fill(store, draft, 3)
    password = "s3cret pass'word"
    url = make_url(store.url).set(password=password, query={"application_name": "o'ops rules"})
    url_str = url.render_as_string(hide_password=False)
    ops.backup(url_str, tmp_path / "with-options.dump")
    plain = make_url(store.url)
    no_port = f"postgresql+psycopg://{plain.username}@{plain.host}/{plain.database}"
    ops.backup(no_port, tmp_path / "default-port.dump")  # libpq's default port, 5432 here
    target = make_url(fresh_pg_database).set(password=password)
    ops.restore(target.render_as_string(hide_password=False), tmp_path / "with-options.dump")

    assert [Path(argv[0]).name for argv, _ in tool_calls] == [
        "pg_dump",
        "pg_dump",
        "pg_restore",
        "pg_restore",
        "pg_restore",
    ]
    for argv, _ in tool_calls:
        assert not any("s3cret" in arg for arg in argv), argv
    (dumped, env), restored = tool_calls[0], tool_calls[-1]
    assert env["PGPASSWORD"] == password and restored[1]["PGPASSWORD"] == password
    assert "application_name='o\\'ops rules'" in dumped[-1]
    assert "port=" not in tool_calls[1][0][-1]
    assert migrate.current(fresh_pg_database) == migrate.heads()[0]


@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
@pytest.mark.postgres
def test_a_missing_client_tool_is_invalid_input_pointing_to_the_manual_procedure(
    store: EventStore,
    draft: Draft,
    tmp_path: Path,
    fresh_pg_database: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # operations.md: "If pg_dump is missing, db backup exits 1 with a message that points here."
    fill(store, draft, 2)
    archive = tmp_path / "ledger.dump"
    ops.backup(store.url, archive)
    monkeypatch.setenv("PATH", str(tmp_path / "no-tools"))
    for call, tool in (
        (lambda: ops.backup(store.url, tmp_path / "b.dump"), "pg_dump"),
        (lambda: ops.restore(fresh_pg_database, archive), "pg_restore"),
    ):
        with pytest.raises(InvalidInput, match=r"docs/operations\.md") as caught:
            call()
        assert caught.value.exit_code == 1 and caught.value.context["tool"] == tool
    assert not (tmp_path / "b.dump").exists() and _leftovers(tmp_path) == []
    assert migrate.current(fresh_pg_database) is None


@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
@pytest.mark.postgres
def test_a_failing_tools_message_is_quoted_cut_to_the_limit(
    store_url: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    tools = tmp_path / "tools"
    tools.mkdir()
    fake = tools / "pg_restore"
    fake.write_text("#!/bin/sh\nprintf 'pg_restore: error: %0900d\\n' 0 >&2\nexit 2\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tools}{os.pathsep}{os.environ['PATH']}")
    archive = tmp_path / "ledger.dump"
    archive.write_bytes(b"PGDMP")
    with pytest.raises(InvalidInput) as caught:
        ops.restore(store_url, archive)
    prefix = "pg_restore failed (exit 2): "
    assert caught.value.message.startswith(prefix)
    quoted = caught.value.message.removeprefix(prefix)
    assert len(quoted) == ops.tool_message_chars_max
    assert quoted.startswith("pg_restore: error: 000")
    assert caught.value.context["tool"] == "pg_restore"


# -- upgrade and stats -----------------------------------------------------------------------


def test_an_upgrade_with_nothing_pending_runs_and_verifies_nothing(
    store: EventStore,
    draft: Draft,
) -> None:
    # operations.md: "A ledger already at head prints `already at …; nothing to do`": the
    # chain is verified before pending revisions run, and none are pending.
    fill(store, draft, 3)
    head = migrate.heads()[0]
    report = ops.upgrade(store.url)
    assert (report.before, report.after, report.applied) == (head, head, [])
    assert report.verified is None and not report.skipped_verify


def test_an_upgrade_without_the_check_says_so_in_its_json(store: EventStore, draft: Draft) -> None:
    # operations.md: "--skip-verify migrates without the check and prints a warning"; the
    # JSON report (`db upgrade --json`) carries the same fact.
    fill(store, draft, 3)
    previous = str(migrate.history()[1]["revision"])
    migrate.downgrade(store.url, previous)
    document = ops.upgrade(store.url, skip_verify=True).to_json()
    assert (document["before"], document["after"]) == (previous, migrate.heads()[0])
    assert document["skipped_verify"] is True and document["verified"] is None


@sqlite_only
def test_ledger_tables_without_a_revision_are_a_damaged_store_not_another_application(
    store: EventStore,
    draft: Draft,
) -> None:
    # The file holds the ledger's own tables, so "check --db" would be the wrong advice:
    # StoreError (exit 5) says the store is damaged and to restore a backup; nothing changes.
    fill(store, draft, 2)
    with store.engine.begin() as conn:
        conn.exec_driver_sql("DROP TABLE alembic_version")
    store.close()
    file = Path(make_url(store.url).database or "")
    before = file.read_bytes()
    with pytest.raises(StoreError, match="no schema revision: the store is damaged") as caught:
        ops.upgrade(store.url)
    assert caught.value.exit_code == 5
    assert file.read_bytes() == before and migrate.current(store.url) is None


def test_a_file_that_is_no_database_is_refused_as_invalid_input(tmp_path: Path) -> None:
    # init and `db upgrade` create a ledger "in a new or empty file only"; a file that is not
    # a SQLite database at all is refused with the library's own error, and left as it was.
    notes = tmp_path / "notes.db"
    notes.write_bytes(b"keep me, I am not a database" * 200)
    with pytest.raises(InvalidInput, match=r"notes\.db is not an arena-ledger database"):
        ops.refuse_foreign_sqlite(f"sqlite:///{notes}")
    assert notes.read_bytes() == b"keep me, I am not a database" * 200


@pytest.mark.parametrize(
    ("part", "whole", "rate"),
    [
        (1, 128, "0.007812"),  # 0.0078125: the tie goes to the even digit
        (3, 128, "0.023438"),  # 0.0234375
        (1, 3, "0.333333"),
        (2, 3, "0.666667"),
        (0, 5, "0.000000"),
        (5, 5, "1.000000"),
    ],
)
def test_a_no_decision_rate_is_rounded_half_even_to_six_places(
    part: int, whole: int, rate: str
) -> None:
    assert ops._rate(part, whole) == rate
    assert ops._rate(part, 0) is None


# -- history ---------------------------------------------------------------------------------


def test_history_lists_every_attempt_a_qualification_started_in_order(store_url: str) -> None:
    # One attempt that never ran (adapter_start_failed: REQUEUE), then a second one still
    # qualifying: two attempts, though only the first has been resolved.
    migrate.upgrade(store_url)
    with ArenaLedger(store_url, actor="tester") as ledger:
        b = Builder(ledger)
        b.commission(ARENA_A)
        sid = b.intake(ARENA_A, "5Alice", "d1", 1_000)
        b.claim(sid, "att-first")
        ledger.fault("att-first", "adapter_start_failed", "speed", "the lane never started")
        ledger.conclude("att-first", 1_011)
        b.claim(sid, "att-second")
    [row] = ops.history(store_url, "5Alice")
    assert (row["status"], row["attempts"]) == ("QUALIFYING", 2)
    assert row["attempt_ids"] == ["att-first", "att-second"]

"""Runs the operator's and auditor's tasks: a verified upgrade, backup, restore, stats, history.

Every function takes the database URL and returns data (a report or JSON-ready rows); the
``arena-ledger db upgrade|backup|restore``, ``stats`` and ``history`` commands only render it.

Backups. SQLite is copied online with SQLite's backup API (a consistent snapshot even while
validators append), then the copy's hash chain is verified before it takes its final name.
PostgreSQL is dumped with ``pg_dump --format=custom`` and restored with ``pg_restore`` into a
freshly created database, which is then verified. The SQLite backup API is not part of
SQLAlchemy, so this module reaches the driver through the store's engine
(``engine.raw_connection()`` and ``engine.dialect.dbapi``) instead of importing it: driver
imports stay in the store modules (tests/unit/test_layers.py).

Alembic is imported by the functions that migrate, not at every start of the CLI.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from decimal import ROUND_HALF_EVEN, Context, Decimal
from pathlib import Path
from typing import Any

from ledger import tables as schema
from ledger.progress import Progress
from ledger.records import Head, VerifyReport
from ledger.store import EventStore, safe_url
from machines.projection import FoldCounts, LedgerFold
from machines.submission import STATES
from services.arena_ledger import ArenaLedger
from services.limits import tool_message_chars_max
from services.read_view import read_view
from vocabulary.errors import (
    IntegrityError,
    InvalidInput,
    LedgerError,
    SchemaNotInitialised,
    StoreError,
    require_file,
)
from vocabulary.fields import require_as_of, require_hotkey

__all__ = [
    "BackupReport",
    "RestoreReport",
    "UpgradeReport",
    "backup",
    "history",
    "history_at",
    "refuse_foreign_sqlite",
    "restore",
    "stats",
    "upgrade",
    "verify_before_upgrade",
]

#: Decimal places of a reported rate (the fixed 6-place form of machine results).
rate_places = 6

_RATE = Context(prec=34)


# -- upgrade ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class UpgradeReport:
    """Reports a guarded upgrade: revisions before and after, what ran, what was verified."""

    before: str | None
    after: str | None
    applied: list[str]
    verified: VerifyReport | None
    skipped_verify: bool = False

    def to_json(self) -> dict[str, Any]:
        """Returns the report as a JSON-ready object."""
        return {
            "before": self.before,
            "after": self.after,
            "applied": self.applied,
            "verified": None if self.verified is None else self.verified.to_json(),
            "skipped_verify": self.skipped_verify,
        }


def upgrade(
    url: str, revision: str = "head", *, skip_verify: bool = False,
    progress: Progress | None = None,
) -> UpgradeReport:
    """Verifies the hash chain, then upgrades the store's tables to ``revision``.

    A ledger that fails verification is not migrated (IntegrityError, exit 4, naming the first
    bad position); a database without ledger tables upgrades without a check. With
    ``skip_verify`` the check is left out (see docs/operations.md for when that is right).
    ``progress`` hears how far the check has got.
    """
    # alembic: imported by the commands that need it, not at every CLI start
    from ledger import migrate

    before = migrate.current(url)
    if before is None:
        refuse_foreign_sqlite(url)
    todo = migrate.pending(url)
    if not todo:
        return UpgradeReport(before, before, [], None)
    checked = None if skip_verify else verify_before_upgrade(url, progress)
    migrate.upgrade(url, revision, progress=progress)
    after = migrate.current(url)
    applied = todo[: todo.index(after) + 1] if after in todo else todo
    return UpgradeReport(before, after, applied, checked, skip_verify)


def refuse_foreign_sqlite(url: str) -> None:
    """Refuses to create ledger tables in a SQLite file that already holds another
    application's tables (a --db that names the wrong file): init and ``db upgrade`` create
    a ledger in a new or empty file only, as ``db restore`` restores into one."""
    with EventStore(url) as store:
        if store.backend != "sqlite":
            return
        file = _sqlite_file(store)
        if not file.exists() or file.stat().st_size == 0:
            return
        with _driver_errors(f"{file} is not an arena-ledger database"):
            tables = _sqlite_tables(store) - {"alembic_version"}  # left by `downgrade base`
        if tables & set(schema.metadata.tables):
            raise StoreError(
                f"{file} holds the ledger's tables ({', '.join(sorted(tables))}) but no schema "
                "revision: the store is damaged; restore a backup. Nothing was changed",
                url=safe_url(url),
            )
        if tables:
            raise InvalidInput(
                f"{file} holds tables of another application ({', '.join(sorted(tables))}) "
                "and no ledger: init creates a ledger in a new or empty file only; check "
                "--db. Nothing was changed",
                url=safe_url(url),
            )


def verify_before_upgrade(url: str, progress: Progress | None = None) -> VerifyReport | None:
    """Verifies an existing ledger's chain (None when the database holds no ledger yet)."""
    with EventStore(url) as store:
        if not store.is_initialised():
            return None
        report = store.verify(progress=progress)
    if not report.ok:
        raise IntegrityError(
            f"the ledger fails verification at position {report.first_bad_position} "
            f"({report.problem}); nothing was migrated. Investigate with `arena-ledger verify` "
            "before migrating (docs/operations.md)",
            first_bad_position=report.first_bad_position,
            kind=report.kind,
        )
    return report


# -- backup and restore ----------------------------------------------------------------------


@dataclass(frozen=True)
class BackupReport:
    """Reports a backup: where it went, how it was made and what it holds."""

    path: str
    method: str
    bytes: int
    head: Head | None
    verified: VerifyReport | None
    note: str = ""

    def to_json(self) -> dict[str, Any]:
        """Returns the report as a JSON-ready object."""
        return {
            "path": self.path,
            "method": self.method,
            "bytes": self.bytes,
            "head": None if self.head is None else _head_json(self.head),
            "verified": None if self.verified is None else self.verified.to_json(),
            "note": self.note,
        }


@dataclass(frozen=True)
class RestoreReport:
    """Reports a restore: the target, the verified chain and the schema revision."""

    url: str
    method: str
    head: Head
    verified: VerifyReport
    revision: str | None
    pending: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        """Returns the report as a JSON-ready object."""
        return {
            "url": self.url,
            "method": self.method,
            "head": _head_json(self.head),
            "verified": self.verified.to_json(),
            "revision": self.revision,
            "pending": self.pending,
        }


def backup(url: str, path: str | Path, *, progress: Progress | None = None) -> BackupReport:
    """Copies the ledger at ``url`` to the new file ``path`` (never overwrites one).

    SQLite: an online, consistent copy whose chain is then verified (IntegrityError when it
    fails; the copy is kept as ``PATH.unverified`` for investigation; ``progress`` hears how
    far that check has got). PostgreSQL: a ``pg_dump --format=custom`` archive; verify it
    by restoring it (``restore``).
    """
    target = Path(path)
    if target.exists():
        raise InvalidInput(f"{target} already exists; a backup never overwrites a file",
                           path=str(target))
    if not target.parent.is_dir():
        raise InvalidInput(f"directory {target.parent} does not exist", path=str(target))
    with EventStore(url) as store:
        if store.backend == "sqlite":
            _require_sqlite_file(store)
            store.require_initialised()
            return _backup_sqlite(store, target, progress)
        store.require_initialised()
        return _backup_postgres(store, target)


def restore(url: str, path: str | Path, *, progress: Progress | None = None) -> RestoreReport:
    """Restores the backup at ``path`` into the empty or new ledger at ``url``, then verifies.

    A target that holds recorded events is refused (InvalidInput, nothing changed). A backup
    whose chain fails verification is refused on SQLite before the target is touched; on
    PostgreSQL the verification follows ``pg_restore`` (IntegrityError either way).
    ``progress`` hears how far the verification has got.
    """
    source = Path(path)
    require_file(source, "backup file", regular=True)
    with EventStore(url) as store:
        if store.backend == "sqlite":
            return _restore_sqlite(store, source, progress)
        return _restore_postgres(store, source, progress)


def _head_json(head: Head) -> dict[str, Any]:
    return {"position": head.position, "entry_hash": head.entry_hash}


def _sqlite_file(store: EventStore) -> Path:
    # The file the URL names: a ledger this user may not write opens through a read-only
    # file: URI (ledger.store), and a backup of it is still a backup of that file.
    database = store.sqlite_file or store.engine.url.database
    if not database or database == ":memory:" or database.startswith("file:"):
        raise InvalidInput("backup and restore need a SQLite file URL (sqlite:///PATH)",
                           url=safe_url(store.url))
    return Path(database)


def _require_sqlite_file(store: EventStore) -> None:
    # Opening a missing SQLite file would create an empty one; say what is wrong instead.
    file = _sqlite_file(store)
    if not file.is_file():
        raise SchemaNotInitialised(f"there is no ledger at {file}", url=safe_url(store.url))


def _dbapi(store: EventStore) -> Any:
    return store.engine.dialect.dbapi


@contextmanager
def _driver_errors(what: str) -> Iterator[None]:
    try:
        yield
    except LedgerError:
        raise
    except Exception as exc:  # the driver's errors (sqlite3.Error), bare or wrapped by SQLAlchemy
        orig = getattr(exc, "orig", None) or exc
        if type(orig).__module__ != "sqlite3":
            raise
        raise InvalidInput(f"{what}: {orig}") from None


def _sqlite_copy(source: Any, target: Path, dbapi: Any) -> None:
    """Copies an open SQLite connection's database into a new file (one consistent step)."""
    destination = dbapi.connect(str(target))
    try:
        source.backup(destination)
        destination.execute("PRAGMA journal_mode = DELETE")  # one self-contained file
    finally:
        destination.close()


def _live_ledger_file(target: Path, dbapi: Any) -> None:
    """Switches a restored copy to WAL, as every live ledger is (a backup is one
    rollback-journal file; reading it, as the verification did, never switched it)."""
    connection = dbapi.connect(str(target))
    try:
        connection.execute("PRAGMA journal_mode = WAL")
    finally:
        connection.close()


@contextmanager
def _scratch(path: Path) -> Iterator[Path]:
    """Yields a scratch file name of ours; removes what is left of it if the block fails."""
    for stale in (path, *_sidecars(path)):
        stale.unlink(missing_ok=True)  # left by an interrupted run
    try:
        yield path
    except BaseException:
        for leftover in (path, *_sidecars(path)):
            leftover.unlink(missing_ok=True)
        raise


def _sidecars(path: Path) -> tuple[Path, ...]:
    return tuple(path.with_name(path.name + suffix) for suffix in ("-wal", "-shm", "-journal"))


def _fsync(path: Path) -> None:
    with path.open("rb") as file:
        os.fsync(file.fileno())
    directory = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)


def _verify_file(file: Path, progress: Progress | None) -> tuple[VerifyReport, Head]:
    """Verifies the ledger in a SQLite file; returns the report and its head."""
    with EventStore(f"sqlite:///{file}") as copy:
        copy.require_initialised()
        report = copy.verify(progress=progress)
        head = copy.head()
    return report, head


def _backup_sqlite(store: EventStore, target: Path, progress: Progress | None) -> BackupReport:
    with _scratch(target.with_name(target.name + ".partial")) as partial:
        raw = store.engine.raw_connection()
        try:
            with _driver_errors("the SQLite backup failed"):
                _sqlite_copy(raw.driver_connection, partial, _dbapi(store))
        finally:
            raw.close()
        report, head = _verify_file(partial, progress)
        _fsync(partial)
        if not report.ok:
            kept = target.with_name(target.name + ".unverified")
            os.replace(partial, kept)
            raise IntegrityError(
                f"the copy fails verification at position {report.first_bad_position} "
                f"({report.problem}): the source ledger is damaged. The copy was kept as "
                f"{kept} for investigation; {target} was not written",
                first_bad_position=report.first_bad_position, kind=report.kind,
                path=str(kept),
            )
        os.replace(partial, target)
    _fsync(target)
    return BackupReport(str(target), "sqlite-backup-api", target.stat().st_size, head, report)


def _open_backup(store: EventStore, source: Path) -> Any:
    """Opens a SQLite backup read-only and checks it holds a ledger."""
    uri = source.resolve().as_uri() + "?mode=ro"
    with _driver_errors(f"{source} is not a readable SQLite ledger backup"):
        connection = _dbapi(store).connect(uri, uri=True)
        try:
            names = {row[0] for row in connection.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table'")}
        except BaseException:
            connection.close()
            raise
    if not {"events", "ledger_head"} <= names:
        connection.close()
        raise InvalidInput(f"{source} holds no arena-ledger tables", path=str(source))
    return connection


def _sqlite_target_is_empty(store: EventStore) -> bool:
    """Tells whether the target file is new (True) or an empty ledger (False); else refuses."""
    file = _sqlite_file(store)
    if not file.exists() or file.stat().st_size == 0:
        return True
    with _driver_errors(f"{file} is not an arena-ledger database"):
        initialised = store.is_initialised()
        head = store.head() if initialised else None
    if head is not None:
        if head.position > 0:
            raise InvalidInput(
                f"the ledger at {file} is not empty (head position {head.position}); restore "
                "never overwrites recorded events: restore into a new file",
                url=safe_url(store.url), position=head.position,
            )
        return False
    if _sqlite_objects(store) == 0:
        return False  # an empty database file (opening a missing file creates one)
    raise InvalidInput(f"{file} exists and is not an arena-ledger database; restore into a "
                       "new file", url=safe_url(store.url))


def _sqlite_tables(store: EventStore) -> set[str]:
    """Returns the names of the tables in the SQLite file (SQLite's own excluded)."""
    raw = store.engine.raw_connection()
    try:
        cursor = raw.cursor()
        cursor.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"
        )
        return {str(row[0]) for row in cursor.fetchall()}
    finally:
        raw.close()


def _sqlite_objects(store: EventStore) -> int:
    raw = store.engine.raw_connection()
    try:
        cursor = raw.cursor()
        cursor.execute("SELECT COUNT(*) FROM sqlite_master")
        row: Any = cursor.fetchone()
        return int(row[0])
    finally:
        raw.close()


def _restore_sqlite(
    store: EventStore, source: Path, progress: Progress | None
) -> RestoreReport:

    # alembic: imported by the commands that need it, not at every CLI start
    from ledger import migrate
    new_file = _sqlite_target_is_empty(store)
    file = _sqlite_file(store)
    with _scratch(file.with_name(file.name + ".restore-partial")) as partial:
        backup_conn = _open_backup(store, source)
        try:
            with _driver_errors(f"reading {source} failed"):
                _sqlite_copy(backup_conn, partial, _dbapi(store))
        finally:
            backup_conn.close()
        report, head = _verify_file(partial, progress)
        # A backup a newer release migrated: this release could neither write to it nor
        # say what it needs; refused before anything is installed.
        migrate.require_known(f"sqlite:///{partial}")
        if not report.ok:
            raise IntegrityError(
                f"the backup {source} fails verification at position "
                f"{report.first_bad_position} ({report.problem}); nothing was restored",
                first_bad_position=report.first_bad_position, kind=report.kind,
                path=str(source),
            )
        _install(store, partial, file, new_file)
    if store.head() != head:
        raise StoreError(f"the restored ledger at {file} does not hold the backup's head; "
                         "was another process writing to it?", url=safe_url(store.url))
    return RestoreReport(safe_url(store.url), "sqlite-backup-api", head, report,
                         migrate.current(store.url), migrate.pending(store.url))


def _install(store: EventStore, partial: Path, file: Path, new_file: bool) -> None:
    """Moves the verified copy into place: a rename for a new file, else the backup API."""
    if new_file:
        _live_ledger_file(partial, _dbapi(store))
        _fsync(partial)
        os.replace(partial, file)
        _fsync(file)
        return
    # An existing (empty) ledger may be open elsewhere; SQLite replaces its pages safely.
    store.engine.dispose()
    source = _dbapi(store).connect(str(partial))
    raw = store.engine.raw_connection()
    try:
        with _driver_errors(f"writing {file} failed"):
            source.backup(raw.driver_connection)
    finally:
        raw.close()
        source.close()
        store.engine.dispose()
    partial.unlink()


def _conninfo(store: EventStore) -> tuple[str, dict[str, str]]:
    """Returns a libpq conninfo for the store's URL and the environment carrying its password."""
    url = store.engine.url
    parts: dict[str, Any] = {"host": url.host, "port": url.port, "user": url.username,
                             "dbname": url.database}
    parts.update({k: v for k, v in url.query.items() if isinstance(v, str)})
    conninfo = " ".join(f"{k}={_quote(str(v))}" for k, v in parts.items() if v is not None)
    env = dict(os.environ)
    if url.password is not None:
        env["PGPASSWORD"] = str(url.password)  # never on the command line (ps shows it)
    return conninfo, env


def _quote(value: str) -> str:
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _tool(name: str) -> str:
    found = shutil.which(name)
    if found is None:
        raise InvalidInput(
            f"{name} is not on PATH: PostgreSQL ledgers are backed up and restored with the "
            "PostgreSQL client tools (pg_dump, pg_restore); install them, or follow the manual "
            "procedure in docs/operations.md", tool=name,
        )
    return found


def _run_tool(argv: list[str], env: dict[str, str], error: type[LedgerError]) -> str:
    done = subprocess.run(argv, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        message = " ".join(done.stderr.split())[:tool_message_chars_max]
        raise error(f"{Path(argv[0]).name} failed (exit {done.returncode}): {message}",
                    tool=Path(argv[0]).name)
    return done.stdout


def _backup_postgres(store: EventStore, target: Path) -> BackupReport:
    tool = _tool("pg_dump")
    conninfo, env = _conninfo(store)
    with _scratch(target.with_name(target.name + ".partial")) as partial:
        before = store.head()
        _run_tool([tool, "--format=custom", "--no-password", f"--file={partial}",
                   f"--dbname={conninfo}"], env, StoreError)
        after = store.head()
        _fsync(partial)
        os.replace(partial, target)
    _fsync(target)
    # pg_dump's snapshot lies between the two reads; when they agree it holds exactly that head.
    head = before if before == after else None
    note = ("a pg_dump archive is verified by restoring it: `arena-ledger --db URL-OF-A-NEW-"
            "DATABASE db restore PATH` runs pg_restore and verifies the chain")
    return BackupReport(str(target), "pg_dump", target.stat().st_size, head, None, note)


def _restore_postgres(
    store: EventStore, source: Path, progress: Progress | None
) -> RestoreReport:

    # alembic: imported by the commands that need it, not at every CLI start
    from ledger import migrate
    tool = _tool("pg_restore")
    if store.is_initialised() or migrate.current(store.url) is not None:
        raise InvalidInput(
            "the target database already holds ledger tables; restore a pg_dump archive into "
            "a freshly created, empty database (createdb NAME)", url=safe_url(store.url),
        )
    listing = _run_tool([tool, "--list", str(source)], dict(os.environ), InvalidInput)
    if "TABLE DATA public events" not in listing:
        raise InvalidInput(f"{source} is not a pg_dump archive of an arena ledger",
                           path=str(source))
    for archived in _archived_revisions(tool, source):
        if not migrate.is_shipped(archived):  # refused before anything is restored
            raise StoreError(
                f"the backup is at schema revision {archived!r}, which this release does not "
                "know (a newer release migrated it): restore it with that release. Nothing "
                "was restored", url=safe_url(store.url), revision=archived,
                reason="unknown_revision",
            )
    conninfo, env = _conninfo(store)
    _drop_leftover_version_table(store)
    try:
        _run_tool([tool, "--no-owner", "--no-privileges", "--exit-on-error",
                   "--single-transaction", "--no-password", f"--dbname={conninfo}", str(source)],
                  env, StoreError)
    except StoreError as exc:
        raise _collision_named(exc, store) from None
    report = store.verify(progress=progress)
    if not report.ok:
        raise IntegrityError(
            f"the restored ledger fails verification at position {report.first_bad_position} "
            f"({report.problem}); do not use it: drop the database",
            first_bad_position=report.first_bad_position, kind=report.kind,
        )
    revision = migrate.current(store.url)
    if not migrate.is_shipped(revision):  # an archive _archived_revisions could not read
        raise StoreError(
            f"the backup was restored and verifies, but it is at schema revision {revision!r}, "
            "which this release does not know (a newer release migrated it): use that "
            "release, or drop the database", url=safe_url(store.url), revision=revision,
            reason="unknown_revision",
        )
    return RestoreReport(safe_url(store.url), "pg_restore", store.head(), report,
                         migrate.current(store.url), migrate.pending(store.url))


def _drop_leftover_version_table(store: EventStore) -> None:
    """Drops the empty ``alembic_version`` table ``db downgrade base`` leaves behind.

    A downgrade to base drops every ledger table but Alembic's own, which it empties; the
    archive creates that table, so pg_restore stopped at "relation alembic_version already
    exists" and the operator had to drop and recreate the database. Empty, it records no
    revision (the caller has checked ``migrate.current`` is None): dropping it changes
    nothing a ledger holds. It is locked and counted again first, so a revision stamped
    meanwhile is refused, never dropped.
    """
    with store.engine.begin() as conn:
        found = conn.exec_driver_sql("SELECT to_regclass('public.alembic_version')").scalar()
        if found is None:
            return
        conn.exec_driver_sql("LOCK TABLE public.alembic_version IN ACCESS EXCLUSIVE MODE")
        rows = conn.exec_driver_sql("SELECT count(*) FROM public.alembic_version").scalar()
        if rows:
            raise InvalidInput(
                "the target database records a schema revision (alembic_version is not "
                "empty); restore a pg_dump archive into a freshly created, empty database "
                "(createdb NAME)", url=safe_url(store.url),
            )
        conn.exec_driver_sql("DROP TABLE public.alembic_version")


_ALREADY_EXISTS = re.compile(r"ERROR: +(.{1,200}?) already exists")


def _collision_named(error: StoreError, store: EventStore) -> StoreError:
    """Says what to do when pg_restore met an object of the archive already in the target
    (the restore runs in one transaction: nothing of it stays)."""
    found = _ALREADY_EXISTS.search(error.message)
    if found is None:
        return error
    held = found.group(1)
    return StoreError(
        f"pg_restore stopped: the target database already holds {held}, which the backup "
        "creates; nothing was restored. Restore into a freshly created, empty database "
        f"(createdb NAME), or drop {held} first",
        url=safe_url(store.url), tool="pg_restore",
    )


def _archived_revisions(tool: str, source: Path) -> list[str]:
    """Returns the schema revisions (``alembic_version`` rows) a pg_dump archive holds.

    pg_restore prints the table's data as a COPY block without touching a database; a
    revision row is plain text (no COPY escapes). An archive without that block gives none
    (the restored database is checked again).
    """
    text = _run_tool([tool, "--data-only", "--table=alembic_version", "--file=-", str(source)],
                     dict(os.environ), InvalidInput)
    lines = text.splitlines()
    try:
        start = lines.index("COPY public.alembic_version (version_num) FROM stdin;")
    except ValueError:
        return []
    rows: list[str] = []
    for line in lines[start + 1:]:
        if line == "\\.":
            return rows
        rows.append(line)
    return []


# -- stats -----------------------------------------------------------------------------------


def _rate(part: int, whole: int) -> str | None:
    if whole == 0:
        return None
    value = _RATE.divide(Decimal(part), Decimal(whole))
    return str(value.quantize(Decimal(1).scaleb(-rate_places), rounding=ROUND_HALF_EVEN))


def _tip(store: EventStore, position: int) -> dict[str, Any] | None:
    """Returns the event at ``position`` (None at 0): the chain's tip as stats reports it."""
    if position == 0:
        return None
    last = store.get(position)
    return {"position": last.position, "entry_hash": last.entry_hash, "type": last.type,
            "stream": last.stream, "recorded_at": last.recorded_at}


def _snapshot(store: EventStore, as_of: int | None) -> tuple[Head, int, str]:
    """Reads the head and the Merkle root at the same size: the head's, or ``as_of``'s
    (the head when ``as_of`` is past it)."""
    size, root = store.merkle_root(doing="reported")
    head = store.head()
    if as_of is not None and as_of < head.position:
        size, root = store.merkle_root(as_of)
        head = Head(as_of, store.entry_hash_at(as_of))
    elif head.position != size:  # an append landed in between: take the root at the head
        size, root = store.merkle_root(head.position)
    return head, size, root.hex()


def _last_checkpoint(store: EventStore, head: Head) -> dict[str, Any] | None:
    """Returns the newest checkpoint whose tree the ledger up to ``head`` holds, or None."""
    found = store.checkpoints(limit=1, tree_size_max=head.position)
    if not found:
        return None
    row = {k: v for k, v in found[0].items() if k != "note"}
    row["age_positions"] = head.position - int(row["tree_size"])
    return row


def stats(url: str, as_of: int | None = None) -> dict[str, Any]:
    """Returns the ledger's vital signs as of its head.

    Head and chain tip, Merkle root, the last checkpoint and its age in positions, events by
    type, submissions by status per arena, holds by reason (now held, and every hold ever
    placed), and each arena's NO_DECISION rate (NO_DECISION verdicts / decided attempts).
    The machines' figures (only events the machines accepted count) come from the read
    models, or from the fold (``LedgerFold.counts``) for a view ``as_of`` a position or
    read models behind the head; events by type from the same positions.

    With ``as_of`` (past the head, the head) every figure is the ledger's as it stood at
    that position: the head is that position and its entry hash, the Merkle root is the
    tree of that size, and the last checkpoint is the newest one whose tree that ledger
    holds (it may have been signed later); ``as_of_position`` names the position.
    """
    # alembic: imported by the commands that need it, not at every CLI start
    from ledger import migrate

    require_as_of(as_of)
    with ArenaLedger(url, actor="stats", as_of=as_of) as ledger:
        store = ledger.store
        # The head row is held to the tables first: a damaged one stops stats before the fold.
        head, size, root = _snapshot(store, as_of)
        figures = _read_model_figures(ledger) if as_of is None else None
        if figures is None:
            fold = ledger.fold
            figures = (fold.position, store.type_counts(fold.position), *_fold_figures(fold))
        answered, types, counts, arenas, statuses_of, held = figures
        if answered != size:  # an append landed in between: report as of the figures
            head, size, root = _snapshot(store, answered)
        tip = _tip(store, size)
        checkpoint = _last_checkpoint(store, head)
        backend = store.backend
    by_status: dict[str, dict[str, int]] = {}
    for arena in sorted(set(arenas) | set(counts.decided)):
        statuses = {**dict.fromkeys(STATES, 0), **statuses_of.get(arena, {})}
        by_status[arena] = {**statuses, "total": sum(statuses.values())}
    return {
        "backend": backend,
        "revision": migrate.current(url),
        "as_of_position": None if as_of is None else head.position,
        "head": _head_json(head),
        "tip": tip,
        "tip_matches_head": tip is None or tip["entry_hash"] == head.entry_hash,
        "merkle": {"tree_size": size, "root_hash": root},
        "last_checkpoint": checkpoint,
        "events": {"total": sum(types.values()), "by_type": types},
        "submissions": by_status,
        "holds": {"current": dict(sorted(held.items())), "placed": counts.holds_placed},
        "no_decision": {
            arena: {"no_decision": counts.no_decision.get(arena, 0),
                    "decided": counts.decided.get(arena, 0),
                    "rate": _rate(counts.no_decision.get(arena, 0), counts.decided.get(arena, 0))}
            for arena in arenas
        },
    }


#: What stats reads of the machines: the position, events by type, the fold's counts, the
#: arenas, submissions per status per arena, submissions held now per reason.
_Figures = tuple[
    int, dict[str, int], FoldCounts, list[str], dict[str, dict[str, int]], Counter[str]
]


def _fold_figures(
    fold: LedgerFold,
) -> tuple[FoldCounts, list[str], dict[str, dict[str, int]], Counter[str]]:
    """Returns stats' machine figures from the fold: counts, arenas, submissions per status
    per arena, and submissions held now per reason."""
    counts = fold.counts()
    arenas = [a.arena_id for a in fold.arenas()]
    statuses_of: dict[str, dict[str, int]] = {}
    held: Counter[str] = Counter()
    for arena in sorted(set(arenas) | set(counts.decided)):
        statuses: Counter[str] = Counter()
        for sub in fold.submissions(arena):
            statuses[sub.status] += 1
            if sub.status == "HELD":
                held[str(sub.hold_reason)] += 1
        statuses_of[arena] = dict(statuses)
    return counts, arenas, statuses_of, held


def _read_model_figures(ledger: ArenaLedger) -> _Figures | None:
    """Returns stats' figures from the read models, with the position they answer as of,
    or None when the read models cannot answer (``services.read_view``)."""
    with read_view(ledger.store) as view:
        if view is None:
            return None
        statuses_of: dict[str, dict[str, int]] = {}
        for arena, status, count in view.status_counts():
            statuses_of.setdefault(arena, {})[status] = count
        return (
            view.position, view.event_types(), view.counts(), view.arena_ids(), statuses_of,
            Counter(view.held_reasons()),
        )


# -- history ---------------------------------------------------------------------------------


def history(url: str, hotkey: str, as_of: int | None = None) -> list[dict[str, Any]]:
    """Returns every submission of ``hotkey`` across arenas in arrival-key order.

    Each row carries the status, reason, stated cause and next step (``ArenaLedger.submissions``
    with ``machines.reasons.describe``), the fee, the attempts and the positions of the
    submission's first and latest events (for ``prove inclusion``); as of position
    ``as_of`` when given (``ArenaLedger.as_of``).
    """
    return history_at(url, hotkey, as_of)[1]


def history_at(
    url: str, hotkey: str, as_of: int | None = None
) -> tuple[int, list[dict[str, Any]]]:
    """Returns ``history``'s rows with the position they answer as of: the head, or
    ``as_of`` when given (the head when ``as_of`` is past it), from the same read."""
    require_hotkey(hotkey)  # before the fold catches up: a typo fails at once

    with ArenaLedger(url, actor="history", as_of=as_of) as ledger:
        return ledger.history(hotkey)

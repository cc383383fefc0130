"""Stores events append-only on SQLite or PostgreSQL through one SQLAlchemy Core implementation.

Positions are gapless and in commit order by construction: every append locks the single
``ledger_head`` row (``SELECT … FOR UPDATE`` on PostgreSQL, ``BEGIN IMMEDIATE`` on SQLite)
before it reads the tip, so appends are serialised and a tailing reader that reads positions
in order can never skip one that commits later. Everything an append writes — events, the
new head, the idempotency key — commits in one transaction or not at all.
"""

from __future__ import annotations

import functools
import hashlib
import json
import operator
import os
import sqlite3
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, NamedTuple, Protocol, TypeVar, cast
from urllib.parse import quote

from sqlalchemy import Connection, Engine, create_engine, event, inspect, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError, DatabaseError, OperationalError, SQLAlchemyError

from ledger.chain import GENESIS_HASH, Row, chain_rows
from ledger.database import (
    cannot_open,
    database_errors,
    driver_errors,
    password_hidden,
    safe_url,
    sqlite_write_denied,
    store_error,
    writable,
)
from ledger.limits import sqlite_insert_rows_max
from ledger.log import get_logger
from ledger.merkle import right_edge
from ledger.progress import Progress
from ledger.records import (
    ANY,
    NO_STREAM,
    AppendResult,
    EventDraft,
    ExpectedVersion,
    Head,
    RecordedEvent,
    StreamState,
    VerifyReport,
)
from ledger.sqlite_rows import insert_rows
from ledger.stored_tree import (
    StoredTree,
    advance_frontier,
    check_frontier,
    frontier_root,
    frontier_tail_first,
    stored_level_min,
)
from ledger.tables import SCHEMA_REVISION
from ledger.verify import verify_chain
from vocabulary import limits
from vocabulary.catalogue import CATALOGUE, Catalogue, check_stream_name
from vocabulary.codec import canonical_bytes
from vocabulary.errors import (
    ConcurrencyConflict,
    IdempotencyKeyReused,
    IntegrityError,
    InvalidInput,
    LedgerError,
    LimitExceeded,
    NotFound,
    SchemaError,
    SchemaNotInitialised,
    StoreUnavailable,
    head_row_missing,
)

__all__ = [
    "DEFAULT_URL",
    "AppendGuard",
    "EventStore",
    "PreparedEvent",
    "database_identity",
    "make_engine",
    "missing_sqlite_file",
    "no_ledger_file",
    "parse_expected_version",
    "recorded_at_text",
    "safe_url",
]

#: The embedded default database: a SQLite file in the working directory.
DEFAULT_URL = "sqlite:///arena-ledger.db"
#: How long a SQLite writer waits for the write lock before giving up, in milliseconds.
sqlite_busy_timeout_ms = 30_000
#: Page size of a new SQLite ledger. An event row is ~450 bytes: 16 KiB pages split a quarter
#: as often as 4 KiB ones, a commit writes a quarter as many WAL frames, and the automatic
#: checkpoint (every 1,000 frames) comes a quarter as often.
sqlite_page_bytes = 16_384

_COLUMNS = (
    "position, stream, version, type, schema_version, payload, recorded_at, actor, entry_hash"
)
_EVENTS_INTO = f"events ({_COLUMNS})"
_log = get_logger("arena_ledger.store")


class PreparedEvent(NamedTuple):
    """Is a validated draft: canonical payload bytes, ready for a position and a hash."""

    stream: str
    type: str
    schema_version: int
    payload_bytes: bytes
    expected_version: ExpectedVersion


class AppendGuard(Protocol):
    """Checks a batch inside the append transaction; raises ``Refused`` to write nothing."""

    def __call__(self, store: EventStore, conn: Connection, batch: Sequence[PreparedEvent]) -> None:
        """Raises to refuse the batch; returns to let it be written."""


def parse_expected_version(value: Any, where: str = "expected_version") -> ExpectedVersion:
    """Turns ``"any"``, ``"no_stream"`` or a non-negative integer into an expectation."""
    if value is None or value == "any":
        return ANY
    if value == "no_stream":
        return NO_STREAM
    if isinstance(value, StreamState):
        return value
    if type(value) is int and value >= 0:
        return value
    raise SchemaError(
        f'{where} must be "any", "no_stream" or a non-negative integer, not {value!r}',
        path=where,
    )


def recorded_at_text(instant: datetime) -> str:
    """Spells an aware instant as ``recorded_at`` holds it: UTC, microseconds, ``Z``. The
    time filters of ``read_all`` compare this text, so a bound must be spelled the same way."""
    return instant.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _utc_now() -> str:
    return recorded_at_text(datetime.now(UTC))


#: Key of a pooled SQLite connection's ``info``: its file was switched to WAL (or found so).
_WAL_READY = "arena_ledger_wal_ready"


def _on_sqlite_connect(dbapi_conn: Any, record: Any) -> None:
    # Autocommit at the driver level: SQLAlchemy's "begin" hook below emits BEGIN itself, so
    # writers can take the write lock up front (IMMEDIATE) instead of upgrading mid-way.
    dbapi_conn.isolation_level = None
    cursor = dbapi_conn.cursor()
    cursor.execute(f"PRAGMA busy_timeout = {sqlite_busy_timeout_ms}")
    # Takes effect only while the file is still empty (a new ledger), so before WAL mode,
    # which writes the header; an existing ledger keeps the page size it was made with.
    cursor.execute(f"PRAGMA page_size = {sqlite_page_bytes}")
    # WAL mode is a property of the file, written into its header. A new (empty) file gets
    # it now; any other file only when a writer begins (``_on_sqlite_begin``), so reading
    # never changes a file: a backup stays one rollback-journal file through `verify`, and
    # a URL that names another application's database by mistake leaves it byte for byte.
    if cursor.execute("PRAGMA page_count").fetchone()[0] == 0:
        _enter_wal(cursor)
        record.info[_WAL_READY] = True
    cursor.execute("PRAGMA synchronous = FULL")  # money: a committed append survives power loss
    cursor.close()


def _enter_wal(cursor: sqlite3.Cursor) -> None:
    """Switches the file to WAL, retrying a refusal for as long as the busy timeout allows.

    The switch needs the file's exclusive lock, and SQLite does not call the busy handler
    for it while another connection holds the write lock of a file still in rollback mode
    (a new ledger being created by a second ``init``): that is SQLITE_BUSY at once, which
    the busy timeout alone never waits out. A file already in WAL mode answers at once.
    """
    deadline = time.monotonic() + sqlite_busy_timeout_ms / 1000
    pause = 0.001
    while True:
        try:
            cursor.execute("PRAGMA journal_mode = WAL")
            return
        except sqlite3.OperationalError as exc:
            if exc.sqlite_errorcode != sqlite3.SQLITE_BUSY or time.monotonic() >= deadline:
                raise
        time.sleep(pause)
        pause = min(pause * 2, 0.05)


def _on_sqlite_begin(conn: Connection) -> None:
    mode = conn.get_execution_options().get("sqlite_begin", "DEFERRED")
    if mode == "IMMEDIATE":  # a writer: the file becomes a WAL file first, once a connection
        pooled = conn.connection
        if not pooled.info.get(_WAL_READY):
            cursor = cast(sqlite3.Connection, pooled.dbapi_connection).cursor()
            try:
                _enter_wal(cursor)
            except sqlite3.DatabaseError as exc:  # the store's error mapping expects these
                raise OperationalError("PRAGMA journal_mode = WAL", None, exc) from None
            finally:
                cursor.close()
            pooled.info[_WAL_READY] = True
    conn.exec_driver_sql(f"BEGIN {mode}")


#: The URL schemes the store runs on: Python's sqlite3 and psycopg 3 (a bare
#: ``postgresql://`` means psycopg 3 here, not SQLAlchemy's default psycopg2).
_DRIVERS = {"sqlite", "sqlite+pysqlite", "postgresql", "postgresql+psycopg"}


def make_engine(url: str, **kwargs: Any) -> Engine:
    """Creates a SQLAlchemy engine configured for the ledger's backend (WAL, busy timeout)."""
    try:
        parsed = make_url(url)
    except (ArgumentError, ValueError) as exc:  # ValueError: e.g. a port that is not a number
        shown = password_hidden(url)
        problem = str(exc).replace(url, shown)
        if isinstance(exc, ValueError) and "int()" in problem:
            problem = "its port is not a number"
        elif "://" not in url:  # a bare file name: the user meant a SQLite file
            problem = f"it is not a URL; for a SQLite file give sqlite:///{shown}"
        raise InvalidInput(f"database URL {shown!r} is not valid: {problem}", url=shown) from None
    if parsed.drivername == "postgres":  # the spelling Heroku and libpq tools use
        parsed = parsed.set(drivername="postgresql+psycopg")
        url = parsed.render_as_string(hide_password=False)
    backend = parsed.get_backend_name()
    if parsed.drivername not in _DRIVERS and backend in ("sqlite", "postgresql"):
        raise InvalidInput(
            f"database driver {parsed.drivername!r} is not supported: the ledger talks to "
            "SQLite through Python's sqlite3 (sqlite:///PATH) and to PostgreSQL through "
            "psycopg 3 (postgresql://… or postgresql+psycopg://…)",
            url=safe_url(url),
        )
    if backend == "sqlite":
        if _in_memory(parsed.database, parsed.query):
            raise InvalidInput(
                f"database URL {url!r} names an in-memory SQLite database: every connection "
                "gets its own, empty one, and it is gone when the process ends, so no "
                "ledger can live there; give a file, e.g. sqlite:///arena-ledger.db",
                url=url,
            )
        # Without uri=true, SQLAlchemy passes only the driver's own arguments and ignores
        # the rest (a mode=ro that does not make the ledger read-only, with a warning).
        ignored = [] if "uri" in parsed.query else sorted(set(parsed.query) - _PYSQLITE_ARGS)
        if ignored:
            raise InvalidInput(
                f"database URL {url!r} has query arguments ({', '.join(ignored)}) that SQLite "
                "ignores unless the URL also says uri=true: give sqlite:///PATH, or a SQLite "
                "URI with uri=true", url=url,
            )
        url = _read_only_url(parsed.database) or url
        engine = create_engine(url, **kwargs)
        event.listen(engine, "connect", _on_sqlite_connect)
        event.listen(engine, "begin", _on_sqlite_begin)
        return engine
    if backend == "postgresql":
        if parsed.drivername == "postgresql":
            url = parsed.set(drivername="postgresql+psycopg").render_as_string(hide_password=False)
        try:
            return create_engine(url, pool_pre_ping=True, **kwargs)
        except ImportError:  # psycopg is the `postgres` extra, not a base dependency
            raise StoreUnavailable(
                "a PostgreSQL ledger needs the psycopg driver, which is not installed: "
                "install the postgres extra (pip install 'arena-ledger[postgres]')",
                url=safe_url(url),
            ) from None
    raise InvalidInput(
        f"database backend {backend!r} is not supported (use sqlite:/// or postgresql://)", url=url
    )


#: The query arguments SQLAlchemy's pysqlite dialect passes to sqlite3.connect.
_PYSQLITE_ARGS = frozenset(
    ("timeout", "isolation_level", "detect_types", "check_same_thread", "cached_statements")
)


def _in_memory(path: str | None, query: Mapping[str, Any]) -> bool:
    """Tells whether a SQLite URL's database is in memory: no path, ``:memory:``, or a
    ``file:`` URI with ``mode=memory`` (SQLAlchemy's query holds a string or a tuple)."""
    if not path or path == ":memory:":
        return True
    mode = query.get("mode")
    modes = (mode,) if isinstance(mode, str) else tuple(mode or ())
    return path.startswith("file:") and "memory" in modes


def _read_only_url(path: str | None) -> str | None:
    """Returns a read-only SQLite URI for a database file this process cannot write, else
    None (the file opens as named).

    Why: SQLite opens a file it may not write read-only by itself, but a WAL file only when
    its -shm file exists or can be created (https://sqlite.org/wal.html#readonly); in a
    directory the reader may not write either, ``verify`` failed with "attempt to write a
    readonly database", though it only reads. The choice, in order:

    - read-only media: ``mode=ro&immutable=1``. Nothing can change a file there, so
      immutable is exact, unless a -wal file holds frames: then -shm exists too, and the
      ordinary open reads them (None).
    - a file this user may not write: ``mode=ro``, so SQLite never tries to write it and a
      write is refused at once. A reader reads a WAL file's committed frames through its
      -shm: one that exists (a writer has the file open, or left it) is read as it is, and a
      writable directory lets SQLite create one. Only when neither is possible and no -wal
      file exists is ``immutable=1`` added: everything committed is then in the file itself,
      and no writer has it open (a WAL writer keeps a -shm beside it). A -wal file without
      a -shm in such a directory cannot be read by this user; the open fails, and
      ``store_error`` names the directory.
    (An in-memory URL never gets here: ``make_engine`` refuses it first.)
    """
    if not path or path.startswith("file:") or not os.path.exists(path):
        return None
    directory = os.path.dirname(os.path.abspath(path))
    wal, shm = os.path.exists(path + "-wal"), os.path.exists(path + "-shm")
    try:
        media_read_only = bool(os.statvfs(directory).f_flag & os.ST_RDONLY)
    except (OSError, AttributeError):  # AttributeError: no statvfs (Windows)
        media_read_only = False
    if media_read_only:
        query = None if wal else "mode=ro&immutable=1"
    elif writable(path):
        query = None
    elif not shm and not wal and not writable(directory) and _is_wal_file(path):
        query = "mode=ro&immutable=1"
    else:
        query = "mode=ro"
    if query is None:
        return None
    return f"sqlite:///file:{quote(os.path.abspath(path))}?{query}&uri=true"


def _named_sqlite_file(url: str) -> str | None:
    """Returns the file a ``sqlite:///PATH`` URL names; None for a ``file:`` URI or none."""
    try:
        path = make_url(url).database
    except (ArgumentError, ValueError):
        return None
    return None if not path or path.startswith("file:") or path == ":memory:" else path


def _is_wal_file(path: str) -> bool:
    """Tells whether a SQLite file's header marks it WAL (read and write versions 2)."""
    try:
        with open(path, "rb") as file:
            header = file.read(20)
    except OSError:  # unreadable: SQLite's own open says so
        return False
    return header[18:20] == b"\x02\x02"


def missing_sqlite_file(engine: Engine) -> str | None:
    """Returns the path of the SQLite file ``engine`` opens when that file does not exist;
    None for PostgreSQL, an in-memory database, a ``file:`` URI or a file that exists."""
    url = engine.url
    path = url.database
    if url.get_backend_name() != "sqlite" or not path or path == ":memory:":
        return None
    if path.startswith("file:") or os.path.exists(path):
        return None
    return path


def no_ledger_file(path: str, url: str) -> SchemaNotInitialised:
    """Returns the error for a SQLite ``path`` that does not exist (never opened: SQLite
    would create it, and a mistyped ``--db`` would leave an empty database behind)."""
    return SchemaNotInitialised(
        f"there is no ledger at {path} (no such file); check --db, or run `arena-ledger "
        "init` to create one there",
        url=safe_url(url),
    )


_M = TypeVar("_M", bound=Callable[..., Any])


def _store_errors(method: _M) -> _M:
    """Raises the store's LedgerError (``store_error``) for a database error of ``method``,
    never the driver's or SQLAlchemy's; for methods that return, not generators."""

    @functools.wraps(method)
    def mapped(self: EventStore, *args: Any, **kwargs: Any) -> Any:
        try:
            return method(self, *args, **kwargs)
        except database_errors() as exc:
            raise store_error(exc, self.url) from None

    return cast(_M, mapped)


class EventStore:
    """Appends and reads hash-chained events; one implementation for SQLite and PostgreSQL."""

    def __init__(
        self,
        url: str = DEFAULT_URL,
        *,
        catalogue: Catalogue = CATALOGUE,
        clock: Callable[[], str] = _utc_now,
        guard: AppendGuard | None = None,
        engine: Engine | None = None,
        schema_revision: str = SCHEMA_REVISION,
    ) -> None:
        self.url = url
        self.engine = engine if engine is not None else make_engine(url)
        #: The SQLite file ``url`` names (None for PostgreSQL or a ``file:`` URI): the
        #: engine's own URL may name it as a read-only URI instead (``_read_only_url``).
        self.sqlite_file = _named_sqlite_file(url) if self.engine.dialect.name == "sqlite" else None
        self.catalogue = catalogue
        self.clock = clock
        self.guard = guard
        self.backend = self.engine.dialect.name
        # The schema revision appends require (a migration test building a ledger at an
        # older one names it); checked by the first append (_check_revision).
        self.schema_revision = schema_revision
        self._revision_checked = False

    # -- lifecycle -------------------------------------------------------------------------

    def close(self) -> None:
        """Releases the connection pool."""
        self.engine.dispose()

    def __enter__(self) -> EventStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def is_initialised(self) -> bool:
        """Tells whether the ledger's tables exist in the database.

        A SQLite file that does not exist is not opened (SQLite would create it, and a
        mistyped ``--db`` would leave an empty database file behind): the answer is False.
        """
        if missing_sqlite_file(self.engine) is not None:
            return False
        try:
            with self.engine.connect() as conn:
                return bool(inspect(conn).has_table("ledger_head"))
        except DatabaseError as exc:
            raise cannot_open(exc, self.url) from None

    def require_initialised(self) -> None:
        """Raises SchemaNotInitialised with a hint when the tables are missing."""
        missing = missing_sqlite_file(self.engine)
        if missing is not None:
            raise no_ledger_file(missing, self.url)
        if not self.is_initialised():
            raise SchemaNotInitialised(
                "the ledger's tables do not exist; run `arena-ledger init` (or `db upgrade`)",
                url=self.url,
            )

    def require_writable(self) -> None:
        """Raises StoreUnavailable naming the file and its permission when this process may
        not write the SQLite ledger (``ledger.database.sqlite_write_denied``): said before
        an append folds the ledger and reaches the write, which would fail the same way.
        PostgreSQL says so itself, at the write."""
        if self.sqlite_file is None:
            return
        denied = sqlite_write_denied(self.url)
        if denied is not None:
            raise StoreUnavailable(denied, url=safe_url(self.url))

    # -- append ----------------------------------------------------------------------------

    def prepare(self, drafts: Sequence[EventDraft]) -> list[PreparedEvent]:
        """Validates drafts against the catalogue and limits, returning canonical payloads."""
        if not drafts:
            raise InvalidInput("an append needs at least one event", path="$")
        if len(drafts) > limits.batch_events_max:
            raise LimitExceeded(
                f"a batch holds at most {limits.batch_events_max} events, not {len(drafts)}",
                path="$",
            )
        # One loop with its lookups hoisted: this is the append's per-event hot path.
        checked: set[str] = set()  # a batch repeats few streams: check each name once
        catalogue = self.catalogue
        validate, current = catalogue.validate, catalogue.types
        prepared: list[PreparedEvent] = []
        add, new = prepared.append, tuple.__new__  # the named tuple without its __new__ call
        for index, draft in enumerate(drafts):
            stream, kind, version = draft.stream, draft.type, draft.schema_version
            try:
                if type(stream) is not str or stream not in checked:
                    check_stream_name(stream)
                    checked.add(stream)
                if type(kind) is not str:
                    raise SchemaError("type must be a string", path="$.type")
                if version is None:
                    version = current.get(kind) or catalogue.current_version(kind)
                elif type(version) is not int or version < 1:
                    raise SchemaError(
                        "schema_version must be a positive integer", path="$.schema_version"
                    )
                data = validate(kind, version, draft.payload, stream)
                expected = draft.expected_version
                if expected is not ANY:
                    expected = parse_expected_version(expected)
            except LedgerError as exc:
                exc.context.setdefault("index", index)
                exc.index = index  # type: ignore[attr-defined]
                raise
            add(new(PreparedEvent, (stream, kind, version, data, expected)))
        return prepared

    def append(
        self,
        drafts: Sequence[EventDraft],
        *,
        idempotency_key: str | None = None,
        actor: str = "local",
    ) -> AppendResult:
        """Appends a batch atomically across its streams and returns the positions written.

        Each draft's ``expected_version`` is checked against its stream's version just before
        that event (so two events of one stream in a batch expect n and n+1, or ANY). A
        mismatch raises ConcurrencyConflict and writes nothing. With ``idempotency_key``, a
        repeat with the same content returns the original positions (``already_recorded``);
        with other content it raises IdempotencyKeyReused.
        """
        _check_actor_and_key(actor, idempotency_key)
        batch = self.prepare(drafts)
        content = _batch_digest(batch) if idempotency_key is not None else ""
        started = time.perf_counter()
        try:
            result = self._append_tx(batch, idempotency_key, content, actor)
        except database_errors() as exc:
            raise store_error(exc, self.url) from None
        _log.info(
            "append_batch",
            first_position=result.first,
            last_position=result.last,
            events=len(batch),
            streams=sorted({p.stream for p in batch})[:8],
            already_recorded=result.already_recorded,
            duration_ms=round((time.perf_counter() - started) * 1000, 3),
        )
        return result

    def _append_tx(
        self, batch: list[PreparedEvent], key: str | None, content: str, actor: str
    ) -> AppendResult:
        with self._write_connection() as conn, conn.begin():
            # The hot path talks to the driver's cursor inside SQLAlchemy's transaction:
            # each Core execute adds compiling and result wrapping that a large append
            # would pay per statement. Errors are translated by append() alike.
            cursor = conn.connection.driver_connection.cursor()  # type: ignore[union-attr]
            try:
                return self._append_rows(conn, cursor, batch, key, content, actor)
            finally:
                cursor.close()

    def _append_rows(
        self,
        conn: Connection,
        cursor: Any,
        batch: list[PreparedEvent],
        key: str | None,
        content: str,
        actor: str,
    ) -> AppendResult:
        """Writes one batch through ``cursor`` inside the open transaction of ``conn``."""
        sql = _SQL[self.backend]
        head, frontier, versions = self._lock_head(cursor, sql, batch)
        if not self._revision_checked:
            self._check_revision(cursor)
        if key is not None:
            found = self._lookup_key(conn, key, content)
            if found is not None:
                return found
        _check_expected(batch, versions)
        self._check_head(cursor, sql, head, frontier, "written")
        if self.guard is not None:
            self.guard(self, conn, batch)
        previous, recorded_at = bytes.fromhex(head.entry_hash), self.clock()
        if self.backend == "postgresql" and len(batch) >= _copy_threshold_rows:
            rows, _, frontier, nodes = _copy_rows(
                cursor, batch, versions, head, previous, recorded_at, actor, frontier
            )
        else:
            rows, entries = chain_rows(previous, head.position, versions, batch, recorded_at, actor)
            if self.backend == "sqlite":
                insert_rows(cursor, _EVENTS_INTO, rows, sqlite_insert_rows_max)
            else:
                cursor.executemany(sql.insert_events, rows)
            frontier, nodes = advance_frontier(frontier, head.position, entries)
        last, tip = rows[-1][0], rows[-1][8]
        if self.backend == "postgresql":
            # Nodes and head in one statement over three arrays: executemany would send one
            # INSERT per node, a second statement one more round trip.
            columns = [[node[i] for node in nodes] for i in range(3)]
            cursor.execute(sql.write_head, (*columns, last, tip, frontier))
        else:
            if nodes:
                cursor.executemany(sql.insert_nodes, nodes)
            cursor.execute(sql.write_head, (last, tip, frontier))
        if key is not None:
            conn.execute(
                text(
                    "INSERT INTO idempotency_keys (key, content_digest, first_position, "
                    "last_position) VALUES (:k, :d, :f, :l)"
                ),
                {"k": key, "d": content, "f": rows[0][0], "l": last},
            )
        return AppendResult(
            positions=tuple(range(rows[0][0], last + 1)),
            entry_hashes=tuple(map(_entry_hash_of, rows)),
        )

    def _check_revision(self, cursor: Any) -> None:
        """Refuses to write to a ledger whose tables are not at ``SCHEMA_REVISION``: an
        older one needs ``db upgrade``, a newer one was made by a newer release (once per
        store: a revision changes only while its writers are stopped, operations.md)."""
        try:
            row = cursor.execute("SELECT version_num FROM alembic_version").fetchone()
        except driver_errors():
            row = None
        revision = None if row is None else str(row[0])
        if revision != self.schema_revision:
            raise SchemaNotInitialised(
                f"the ledger is at schema revision {revision or 'none'}, not "
                f"{self.schema_revision}, the one this release writes: run `arena-ledger db "
                "upgrade` if it is older; one this release does not know was made by a newer "
                "release, which must do the writing. Nothing was written",
                url=safe_url(self.url), revision=revision, reason="schema_revision",
            )
        self._revision_checked = True

    def _check_head(
        self, cursor: Any, sql: _Statements, head: Head, frontier: bytes, doing: str
    ) -> None:
        """Holds the head row (read in this transaction) to the append-only tables before
        anything is written from it or signed (``tree.check_frontier``): one statement
        reads the frontier's stored nodes and the last entry hashes. A writer, which holds
        the head lock, also looks one position past the head: an event there means the head
        row was moved back, and the append would collide with it."""
        keys = [key for key in right_edge(head.position) if key[0] >= stored_level_min]
        first = frontier_tail_first(head.position)
        last = head.position + 1 if doing == "written" else head.position
        if self.backend == "postgresql":
            params: tuple[Any, ...] = ([k[0] for k in keys], [k[1] for k in keys], first, last)
        else:
            params = (json.dumps(keys), first, last)
        stored: dict[tuple[int, int], bytes] = {}
        tail: dict[int, str] = {}
        for level, index, value in cursor.execute(sql.head_check, params).fetchall():
            if level < 0:
                tail[int(index)] = str(value)
            else:
                stored[(int(level), int(index))] = bytes.fromhex(value)
        if head.position + 1 in tail:
            raise IntegrityError(
                f"events exist past the head (position {head.position + 1}; the ledger_head "
                f"row says {head.position}): the head row was moved back outside arena-ledger "
                "or the store is damaged; nothing was written. Run `arena-ledger verify`",
                reason="head_mismatch", position=head.position + 1,
            )
        check_frontier(frontier, head.position, head.entry_hash, stored, tail, doing)

    def _write_connection(self) -> Connection:
        conn = self.engine.connect()
        if self.backend == "sqlite":
            return conn.execution_options(sqlite_begin="IMMEDIATE")
        return conn

    def _lock_head(
        self, cursor: Any, sql: _Statements, batch: list[PreparedEvent]
    ) -> tuple[Head, bytes, dict[str, int]]:
        """Locks the head row, then reads the version of each stream ``batch`` writes.

        One fixed statement reads the versions whatever the batch (an IN list of n
        parameters is a new statement per n, planned anew and kept by every statement
        cache), with one index seek per stream for its last version (MAX(version) … GROUP
        BY read every version of a stream, so a long stream made each append slower). The
        read is a statement of its own, after the lock: on PostgreSQL it then has a snapshot
        of its own (READ COMMITTED) that sees every append committed before ours. (A psycopg
        pipeline of the two measured slower than two round trips on a local server.)
        """
        streams = sorted({p.stream for p in batch})
        # PostgreSQL: one text split by the server, which psycopg sends at half the cost of a
        # text[] of 100 names; a valid stream name never holds a comma (check_stream_name).
        argument = ",".join(streams) if self.backend == "postgresql" else json.dumps(streams)
        try:
            row = cursor.execute(sql.lock_head).fetchone()
            found = cursor.execute(sql.stream_versions, (argument,)).fetchall()
        except driver_errors() as exc:
            if "ledger_head" in str(exc) or "frontier" in str(exc):
                raise SchemaNotInitialised(
                    "the ledger's tables are missing or not at the latest revision; run "
                    "`arena-ledger db upgrade`",
                    url=safe_url(self.url),
                ) from None
            raise
        if row is None:
            raise head_row_missing()
        versions = dict.fromkeys(streams, 0)
        for stream, version in found:
            if version is not None:
                versions[str(stream)] = int(version)
        return Head(int(row[0]), str(row[1])), bytes(row[2]), versions

    def _lookup_key(self, conn: Connection, key: str, content: str) -> AppendResult | None:
        row = conn.execute(
            text(
                "SELECT content_digest, first_position, last_position FROM idempotency_keys "
                "WHERE key = :k"
            ),
            {"k": key},
        ).first()
        if row is None:
            return None
        if row[0] != content:
            raise IdempotencyKeyReused(
                f"idempotency key {key!r} was used for other content (positions "
                f"{row[1]}..{row[2]}); nothing was written",
                key=key,
                first_position=int(row[1]),
            )
        hashes = conn.execute(
            text(
                "SELECT entry_hash FROM events WHERE position BETWEEN :f AND :l ORDER BY position"
            ),
            {"f": row[1], "l": row[2]},
        ).scalars()
        return AppendResult(
            positions=tuple(range(int(row[1]), int(row[2]) + 1)),
            already_recorded=True,
            entry_hashes=tuple(str(h) for h in hashes),
        )

    # -- read ------------------------------------------------------------------------------

    @contextmanager
    def writing(self) -> Iterator[Connection]:
        """Yields a connection inside a write transaction that holds the head lock, as an
        append does, so no append lands until it commits (a rebuild of the read models);
        the ledger must be at ``SCHEMA_REVISION``."""
        try:
            with self._write_connection() as conn, conn.begin():
                cursor = conn.connection.driver_connection.cursor()  # type: ignore[union-attr]
                try:
                    cursor.execute(_SQL[self.backend].lock_head).fetchone()
                    self._check_revision(cursor)
                finally:
                    cursor.close()
                yield conn
        except database_errors() as exc:
            raise store_error(exc, self.url) from None

    @contextmanager
    def reading(self) -> Iterator[Connection]:
        """Yields a connection whose reads all see one snapshot of the ledger (a deferred
        transaction on SQLite, REPEATABLE READ on PostgreSQL), for a query that reads the
        read models and the head together; nothing is written through it."""
        try:
            with self.engine.connect() as conn:
                if self.backend == "postgresql":
                    conn = conn.execution_options(isolation_level="REPEATABLE READ")
                with conn.begin():
                    yield conn
        except database_errors() as exc:
            raise store_error(exc, self.url) from None

    @_store_errors
    def head(self, conn: Connection | None = None) -> Head:
        """Returns the last position (0 when empty) and its entry hash; read through
        ``conn``, inside its transaction, when given."""
        sql = text("SELECT position, entry_hash FROM ledger_head WHERE id = 1")
        if conn is not None:
            row = conn.execute(sql).first()
        else:
            with self.engine.connect() as own:
                row = own.execute(sql).first()
        if row is None:
            raise head_row_missing()
        return Head(int(row[0]), str(row[1]))

    def _scalar(self, sql: str, params: dict[str, Any], conn: Connection | None) -> Any:
        """Returns the first column of the first row of ``sql`` (None when no row), read
        through ``conn``, inside its transaction, when given, else on a connection of its own."""
        if conn is not None:
            return conn.execute(text(sql), params).scalar()
        with self.engine.connect() as own:
            return own.execute(text(sql), params).scalar()

    @_store_errors
    def stream_version(self, stream: str, conn: Connection | None = None) -> int:
        """Returns the stream's current version (0 when it does not exist)."""
        value = self._scalar(
            "SELECT MAX(version) FROM events WHERE stream = :s", {"s": stream}, conn
        )
        return int(value or 0)

    def read_stream(
        self, stream: str, from_version: int = 1, conn: Connection | None = None
    ) -> Iterator[RecordedEvent]:
        """Yields a stream's events in version order, a page at a time (constant memory)."""
        return self._paged(
            "stream = :s AND version >= :lo", {"s": stream}, "version", from_version, conn
        )

    def read_all(
        self,
        from_position: int = 1,
        limit: int | None = None,
        *,
        to_position: int | None = None,
        types: Iterable[str] | None = None,
        stream_prefix: str | None = None,
        stream: str | None = None,
        recorded_from: str | None = None,
        recorded_to: str | None = None,
        conn: Connection | None = None,
    ) -> Iterator[RecordedEvent]:
        """Yields events in position order with optional filters, a page at a time.

        With ``conn``, pages are read through that connection (inside its transaction).
        """
        found = self._filters(types, stream_prefix, stream, recorded_from, recorded_to)
        if found is None:
            return iter(())
        where, params = found
        if to_position is not None:
            where.append("position <= :hi")
            params["hi"] = to_position
        # A limit smaller than a page is the page: a listing of 10 fetches 10 rows, not 2,000.
        page = limits.read_page_events
        if limit is not None:
            page = max(1, min(limit, page))
        rows = self._paged(" AND ".join(["position >= :lo", *where]), params, "position",
                           from_position, conn, page)
        if limit is None:
            return rows
        return _take(rows, limit)

    @_store_errors
    def read_back(
        self,
        to_position: int,
        limit: int,
        *,
        types: Iterable[str] | None = None,
        stream_prefix: str | None = None,
        stream: str | None = None,
    ) -> list[RecordedEvent]:
        """Returns up to ``limit`` events at or below ``to_position``, newest first, with
        ``read_all``'s filters: one query down an index, so the newest page of a ledger of
        millions costs what its first does. ``limit`` must be a page, not a ledger.
        """
        found = self._filters(types, stream_prefix, stream, None, None)
        if found is None or limit < 1:
            return []
        where, params = found
        sql = text(f"SELECT {_COLUMNS} FROM events WHERE "
                   + " AND ".join(["position <= :hi", *where])
                   + " ORDER BY position DESC LIMIT :n")
        return [_recorded(row)
                for row in self._fetch(sql, {**params, "hi": to_position, "n": limit}, None)]

    def _filters(
        self,
        types: Iterable[str] | None,
        stream_prefix: str | None,
        stream: str | None,
        recorded_from: str | None,
        recorded_to: str | None,
    ) -> tuple[list[str], dict[str, Any]] | None:
        """Returns the WHERE terms and parameters of the reads' filters; None when no event
        can match (an empty list of types)."""
        where: list[str] = []
        params: dict[str, Any] = {}
        if types is not None:
            names = sorted(set(types))
            if not names:
                return None
            where.append("type IN (" + ", ".join(f":t{i}" for i in range(len(names))) + ")")
            params.update({f"t{i}": n for i, n in enumerate(names)})
        if stream is not None:
            where.append("stream = :stream")
            params["stream"] = stream
        if stream_prefix is not None:
            # A range, not LIKE: it uses the (stream, version) index and needs no escaping.
            # COLLATE "C" on PostgreSQL: a range is a prefix only under byte order.
            column = "stream" if self.backend == "sqlite" else 'stream COLLATE "C"'
            where.append(f"{column} >= :sp_lo AND {column} < :sp_hi")
            params.update({"sp_lo": stream_prefix, "sp_hi": stream_prefix + "\U0010ffff"})
        if recorded_from is not None:
            where.append("recorded_at >= :ra_lo")
            params["ra_lo"] = recorded_from
        if recorded_to is not None:
            where.append("recorded_at < :ra_hi")
            params["ra_hi"] = recorded_to
        return where, params

    def get(self, position: int) -> RecordedEvent:
        """Returns the event at ``position`` or raises NotFound."""
        for recorded in self.read_all(position, 1, to_position=position):
            return recorded
        raise NotFound(f"no event at position {position}", position=position)

    def _paged(
        self,
        where: str,
        params: dict[str, Any],
        key: str,
        start: int,
        conn: Connection | None,
        page: int | None = None,
    ) -> Iterator[RecordedEvent]:
        page = limits.read_page_events if page is None else page
        sql = text(f"SELECT {_COLUMNS} FROM events WHERE {where} ORDER BY {key} LIMIT {page}")
        cursor = start
        while True:
            rows = self._fetch(sql, {**params, "lo": cursor}, conn)
            for row in rows:
                yield _recorded(row)
            if len(rows) < page:
                return
            cursor = int(rows[-1][0 if key == "position" else 2]) + 1

    @_store_errors
    def _fetch(self, sql: Any, params: dict[str, Any], conn: Connection | None) -> list[Any]:
        if conn is not None:
            return list(conn.execute(sql, params))
        with self.engine.connect() as own:
            return list(own.execute(sql, params))

    # -- Merkle tree and checkpoints --------------------------------------------------------

    @contextmanager
    def tree(self) -> Iterator[StoredTree]:
        """Yields the stored Merkle tree at the head, read in one consistent snapshot."""
        try:
            with self.engine.connect() as conn, conn.begin():
                row = conn.execute(text("SELECT position FROM ledger_head WHERE id = 1")).first()
                if row is None:
                    raise head_row_missing()
                yield StoredTree(self, conn, int(row[0]))
        except SQLAlchemyError as exc:
            raise store_error(exc, self.url) from None

    @_store_errors
    def merkle_root(self, size: int | None = None, *, doing: str = "signed") -> tuple[int, bytes]:
        """Returns (size, root hash) of the Merkle tree at ``size`` (the head when None).

        The head's root comes from the head row's frontier once that is held to the stored
        nodes and events (IntegrityError otherwise: ``tree.check_frontier``, whose message
        says "nothing was ``doing``": signed for a checkpoint, reported for ``stats``).
        """
        if size is None:
            # The head's frontier, once it is held to the stored nodes and events
            # (_check_head): what a checkpoint of the head signs.
            with self.engine.connect() as conn, conn.begin():
                cursor = conn.connection.driver_connection.cursor()  # type: ignore[union-attr]
                try:
                    row = cursor.execute(_READ_HEAD).fetchone()
                    if row is None:
                        raise head_row_missing()
                    head, frontier = Head(int(row[0]), str(row[1])), bytes(row[2])
                    self._check_head(cursor, _SQL[self.backend], head, frontier, doing)
                finally:
                    cursor.close()
            return head.position, frontier_root(frontier)
        with self.tree() as tree:
            return size, tree.root(size)

    @_store_errors
    def add_checkpoint(
        self, tree_size: int, root_hash: str, origin: str, key_name: str, note: str
    ) -> int:
        """Stores a signed checkpoint note (its own table, append-only) and returns its id."""
        # PostgreSQL says which id it gave (RETURNING): MAX(id) after the INSERT, under READ
        # COMMITTED, could be another writer's checkpoint committed in between. SQLite
        # writes one at a time and its lastrowid is this row's.
        returning = "" if self.backend == "sqlite" else " RETURNING id"
        with self.engine.begin() as conn:
            result = conn.execute(
                text(
                    "INSERT INTO checkpoints (tree_size, root_hash, origin, key_name, note, "
                    f"created_at) VALUES (:s, :r, :o, :k, :n, :c){returning}"
                ),
                {
                    "s": tree_size,
                    "r": root_hash,
                    "o": origin,
                    "k": key_name,
                    "n": note,
                    "c": self.clock(),
                },
            )
            return int(result.lastrowid or 0) if not returning else int(result.scalar_one())

    @_store_errors
    def checkpoints(
        self,
        limit: int = 20,
        *,
        tree_size_max: int | None = None,
        tree_size: int | None = None,
        origin: str | None = None,
        id_below: int | None = None,
    ) -> list[dict[str, Any]]:
        """Returns stored checkpoints, newest first; with ``tree_size_max``, only those whose
        tree covers at most that many positions (the checkpoints of the ledger as of it);
        with ``tree_size`` or ``origin``, only those of exactly that size or origin; with
        ``id_below``, only those stored before the one of that id (the next page)."""
        params = {"m": tree_size_max, "s": tree_size, "o": origin, "b": id_below}
        tests = {"m": "tree_size <= :m", "s": "tree_size = :s", "o": "origin = :o",
                 "b": "id < :b"}
        bounds = [tests[name] for name, value in params.items() if value is not None]
        where = f"WHERE {' AND '.join(bounds)} " if bounds else ""
        with self.engine.connect() as conn:
            rows = conn.execute(
                text(
                    "SELECT id, tree_size, root_hash, origin, key_name, note, created_at "
                    f"FROM checkpoints {where}ORDER BY id DESC LIMIT :n"
                ),
                {"n": limit, **params},
            ).all()
        keys = ("id", "tree_size", "root_hash", "origin", "key_name", "note", "created_at")
        return [dict(zip(keys, row, strict=True)) for row in rows]

    @_store_errors
    def largest_checkpoint(self) -> dict[str, Any] | None:
        """Returns the stored checkpoint of the largest tree size (the newest of that size),
        as ``checkpoints`` lists one, or None when none is stored: the log's latest state,
        which a later checkpoint of an older size (an export of a prefix) does not roll back."""
        with self.engine.connect() as conn:
            row = conn.execute(
                text(
                    "SELECT id, tree_size, root_hash, origin, key_name, note, created_at "
                    "FROM checkpoints ORDER BY tree_size DESC, id DESC LIMIT 1"
                )
            ).first()
        keys = ("id", "tree_size", "root_hash", "origin", "key_name", "note", "created_at")
        return None if row is None else dict(zip(keys, row, strict=True))

    # -- verify ----------------------------------------------------------------------------

    @_store_errors
    def verify(
        self, from_position: int = 1, to_position: int | None = None, *, tree: bool = False,
        progress: Progress | None = None,
    ) -> VerifyReport:
        """Streams the ledger, recomputes every entry hash, and names the first bad position;
        with ``tree``, also holds the stored Merkle tree to the entry hashes; ``progress``
        hears how far it has got (``ledger.verify.verify_chain``)."""

        started = time.perf_counter()
        report = verify_chain(self, from_position, to_position, tree=tree, progress=progress)
        _log.info(
            "verify",
            ok=report.ok,
            checked=report.checked,
            from_position=report.from_position,
            to_position=report.to_position,
            first_bad_position=report.first_bad_position,
            duration_ms=round((time.perf_counter() - started) * 1000, 3),
        )
        return report

    @_store_errors
    def type_counts(self, last: int, conn: Connection | None = None) -> dict[str, int]:
        """Returns how many events of each type positions 1 to ``last`` hold, by type name in
        code-point order (one pass over the (type, position) index; through ``conn`` when
        given). Sorted here, not by the database, whose collation may order otherwise."""
        sql = text("SELECT type, COUNT(*) FROM events WHERE position <= :last GROUP BY type")
        rows = self._fetch(sql, {"last": last}, conn)
        return {str(kind): int(count) for kind, count in sorted(rows, key=lambda r: str(r[0]))}

    @_store_errors
    def stored_entry_hash(self, position: int, conn: Connection | None = None) -> str | None:
        """Returns the entry hash stored at ``position``, or None when there is no such row;
        read through ``conn``, inside its transaction, when given."""
        value = self._scalar(
            "SELECT entry_hash FROM events WHERE position = :p", {"p": position}, conn
        )
        return None if value is None else str(value)

    @_store_errors
    def entry_hash_at(self, position: int) -> str:
        """Returns the recorded entry hash at ``position`` (genesis hash for 0)."""
        if position == 0:
            return GENESIS_HASH
        value = self.stored_entry_hash(position)
        if value is None:
            raise NotFound(f"no event at position {position}", position=position)
        return value


def _copy_rows(
    cursor: Any,
    batch: list[PreparedEvent],
    versions: dict[str, int],
    head: Head,
    previous: bytes,
    recorded_at: str,
    actor: str,
    frontier: bytes,
) -> tuple[list[Row], list[bytes], bytes, list[tuple[int, int, bytes]]]:
    """Chains and streams events into PostgreSQL by binary COPY; advances the Merkle frontier.

    Each row is written as soon as it is chained, so the server digests the stream while the
    client hashes the rest, and the frontier is advanced before the COPY ends, while the
    server finishes the tail: the client's and the server's work overlap instead of adding.
    """
    # Binary COPY: bytea and integers travel without text encoding on either side.
    with cursor.copy(f"COPY events ({_COLUMNS}) FROM STDIN (FORMAT BINARY)") as copy:
        copy.set_types(_COPY_TYPES)
        rows, entries = chain_rows(
            previous, head.position, versions, batch, recorded_at, actor, copy.write_row
        )
        frontier, nodes = advance_frontier(frontier, head.position, entries)
    return rows, entries, frontier, nodes


class _Statements(NamedTuple):
    """Is the SQL of an append's hot path in one backend's driver dialect."""

    lock_head: str
    stream_versions: str
    insert_events: str
    insert_nodes: str
    write_head: str
    head_check: str


_SQL = {
    "sqlite": _Statements(
        lock_head="SELECT position, entry_hash, frontier FROM ledger_head WHERE id = 1",
        stream_versions=(
            "SELECT value, (SELECT version FROM events WHERE stream = value ORDER BY "
            "version DESC LIMIT 1) FROM json_each(?)"
        ),
        insert_events="",  # multi-row statements, written by sqlite_rows.insert_rows
        insert_nodes="INSERT INTO merkle_nodes (level, idx, hash) VALUES (?, ?, ?)",
        write_head="UPDATE ledger_head SET position = ?, entry_hash = ?, frontier = ? WHERE id = 1",
        head_check=(
            "SELECT level, idx, lower(hex(hash)) FROM merkle_nodes WHERE (level, idx) IN "
            "(SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]') FROM "
            "json_each(?)) UNION ALL SELECT -1, position, entry_hash FROM events WHERE "
            "position >= ? AND position <= ?"
        ),
    ),
    "postgresql": _Statements(
        lock_head="SELECT position, entry_hash, frontier FROM ledger_head WHERE id = 1 FOR UPDATE",
        stream_versions=(
            "SELECT s.stream, (SELECT version FROM events WHERE events.stream = s.stream "
            "ORDER BY version DESC LIMIT 1) FROM unnest(string_to_array(%s, ',')) AS s(stream)"
        ),
        insert_events=f"INSERT INTO events ({_COLUMNS}) VALUES ({', '.join(['%s'] * 9)})",
        insert_nodes="",  # written by write_head, in the same statement
        write_head=(
            "WITH nodes AS (INSERT INTO merkle_nodes (level, idx, hash) SELECT * FROM "
            "unnest(%s::smallint[], %s::bigint[], %s::bytea[])) "
            "UPDATE ledger_head SET position = %s, entry_hash = %s, frontier = %s WHERE id = 1"
        ),
        head_check=(
            "SELECT level, idx, encode(hash, 'hex') FROM merkle_nodes WHERE (level, idx) IN "
            "(SELECT * FROM unnest(%s::smallint[], %s::bigint[])) UNION ALL SELECT -1, "
            "position, entry_hash FROM events WHERE position >= %s AND position <= %s"
        ),
    ),
}
_READ_HEAD = "SELECT position, entry_hash, frontier FROM ledger_head WHERE id = 1"
_copy_threshold_rows = 64
_entry_hash_of = operator.itemgetter(8)
#: PostgreSQL types of ``_COLUMNS``, for binary COPY (binary input is not cast: exact types).
_COPY_TYPES = (
    "int8",
    "varchar",
    "int4",
    "varchar",
    "int4",
    "bytea",
    "varchar",
    "varchar",
    "varchar",
)


def _recorded(row: Any) -> RecordedEvent:
    """Returns an ``events`` row (``_COLUMNS``, in order) as a RecordedEvent."""
    return RecordedEvent(int(row[0]), row[1], int(row[2]), row[3], int(row[4]), bytes(row[5]),
                         row[6], row[7], row[8])


def _take(rows: Iterator[RecordedEvent], limit: int) -> Iterator[RecordedEvent]:
    # Stops at the limit without asking ``rows`` for one more (that would read a page more).
    if limit <= 0:
        return
    for index, recorded in enumerate(rows, 1):
        yield recorded
        if index >= limit:
            return


def _check_expected(batch: list[PreparedEvent], versions: dict[str, int]) -> None:
    """Raises ConcurrencyConflict for the first event whose stream is not where it expects."""
    if all(p.expected_version is ANY for p in batch):
        return  # nothing to check: skip the per-event walk
    running = dict(versions)
    for index, prepared in enumerate(batch):
        _expect(prepared, running[prepared.stream], index)
        running[prepared.stream] += 1


def _expect(prepared: PreparedEvent, actual: int, index: int) -> None:
    expected = prepared.expected_version
    if expected is ANY:
        return
    if expected is NO_STREAM:
        ok = actual == 0
        wanted: Any = "no_stream"
    else:
        ok = actual == expected
        wanted = expected
    if not ok:
        raise ConcurrencyConflict(
            f"stream {prepared.stream!r} is at version {actual}, expected {wanted}; "
            "nothing was written",
            stream=prepared.stream,
            expected=wanted,
            actual=actual,
            index=index,
        )


def _check_actor_and_key(actor: str, key: str | None) -> None:
    if not isinstance(actor, str) or not 1 <= len(actor) <= limits.actor_chars_max:
        raise InvalidInput(f"actor must be 1..{limits.actor_chars_max} characters", path="actor")
    if not actor.isprintable():
        raise InvalidInput("actor must be printable text", path="actor")
    if key is not None:
        if not isinstance(key, str) or not 1 <= len(key) <= limits.idempotency_key_chars_max:
            raise InvalidInput(
                f"idempotency_key must be 1..{limits.idempotency_key_chars_max} characters",
                path="idempotency_key",
            )
        if not key.isprintable():
            raise InvalidInput("idempotency_key must be printable text", path="idempotency_key")


def _batch_digest(batch: list[PreparedEvent]) -> str:
    h = hashlib.sha256()
    for p in batch:
        expected = p.expected_version
        marker: Any = expected.value if isinstance(expected, StreamState) else expected
        h.update(canonical_bytes([p.stream, p.type, p.schema_version, marker]))
        h.update(len(p.payload_bytes).to_bytes(8, "big"))
        h.update(p.payload_bytes)
    return h.hexdigest()


def database_identity(url: str) -> str:
    """Returns what names the database ``url`` opens, whatever its spelling: backend, host,
    port, user and database (a SQLite file's path made absolute), one per line, without the
    password; "" for an in-memory SQLite database (no two processes share one)."""
    parsed = make_url(url)
    database = parsed.database or ""
    if parsed.get_backend_name() == "sqlite":
        if database in ("", ":memory:") or database.startswith("file::memory:"):
            return ""
        database = str(Path(database).resolve())
    return "\n".join(
        (parsed.get_backend_name(), parsed.host or "", str(parsed.port or ""),
         parsed.username or "", database)
    )

"""Benchmarks the event store's append, read and verify paths against peers in the same run.

Contenders, each on its own database, all writing the same ~300-byte ``WindowMeasured``
payloads to ``attempt-…`` streams (ten windows per attempt):

- ours: ``EventStore.append`` (catalogue validation, canonical bytes, hash chain, Merkle
  frontier, one transaction) in batches of 1, 100 and 1,000; ``store.verify()``, ``read_all``.
- eventsourcing (v9): the Application/Aggregate save path (1,000 events per ``save``),
  its bare ``ApplicationRecorder.insert_events``, and its notification-log read with
  mapping to domain events as the read peer.
- ceilings: a raw ``sqlite3`` multi-row INSERT / psycopg binary ``COPY`` loop doing the same
  work (validation, canonical bytes, chain, Merkle frontier) with nothing else in the way,
  and a raw-driver read that recomputes the chain.

``--profile`` prints cProfile of our append and verify instead of the comparison.

Contenders run interleaved in rounds (bench/_common.py) and the report prints ratios
against peers measured in the same run; nothing gates on absolute time.

    python bench/store.py [--events N] [--backends sqlite,postgres] [--write-docs]
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import os
import pstats
import secrets
import shlex
import sqlite3
import sys
import tempfile
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

_ROOT = Path(__file__).resolve().parents[1]
if str(_ROOT) not in sys.path:
    sys.path.append(str(_ROOT))  # appended, so an installed or overlaid `ledger` still wins

import orjson  # noqa: E402  (after the path fix above)
import psycopg  # noqa: E402
from eventsourcing.application import Application  # noqa: E402
from eventsourcing.domain import Aggregate, event  # noqa: E402
from eventsourcing.persistence import StoredEvent  # noqa: E402

from bench._common import (  # noqa: E402
    MemoryProbe,
    Tally,
    describe_machine,
    fmt_kib,
    fmt_rate,
    fmt_ratio,
    machine_markdown,
    parse_backends,
    probe_memory,
    render_markdown_table,
    replace_doc_section,
    run_in_fresh_process,
    run_interleaved,
    verdict,
)
from ledger import migrate  # noqa: E402
from ledger.chain import envelope_bytes, next_entry_hash  # noqa: E402
from ledger.records import EventDraft  # noqa: E402
from ledger.store import EventStore  # noqa: E402
from ledger.stored_tree import advance_frontier  # noqa: E402
from vocabulary import limits  # noqa: E402
from vocabulary.catalogue import CATALOGUE  # noqa: E402

#: Events per contender and configuration, unless --events says otherwise.
events_default = 20_000
#: Batch-of-one appends commit (and fsync) once per event; this caps them to keep runs short.
single_append_events_max = 2_000
#: Rounds the append contenders are interleaved over; each round appends 1/rounds of the events.
append_rounds = 20
#: Rounds the read contenders are interleaved over (each reads the whole ledger): as many as
#: fit in ``read_events_max`` per contender, within ``read_rounds_min``..``read_rounds_max``.
read_rounds_max = 10
read_rounds_min = 2
read_events_max = 400_000
#: Windows recorded per attempt stream (five windows, two orientations).
windows_per_attempt = 10
#: The small ledger for the memory check holds 1/this of the large one's events.
memory_small_fraction = 4
#: Memory counts as flat when the large ledger's peak stays within this factor of the small one…
memory_flat_factor = 1.25
#: …plus this allowance, in KiB, for allocator and page-cache jitter.
memory_flat_allowance_kib = 512
#: Targets: ratios of ours to a peer, and the absolute SQLite verify rate in events/s.
target_sqlite_vs_es_app = 2.0
target_sqlite_vs_raw = 0.70
target_pg_vs_es_app = 3.0
target_sqlite_verify_rate = 150_000
target_verify_vs_es_read = 3.0

_PG_DSN_DEFAULT = "host=127.0.0.1 port=5432 user=postgres dbname=postgres"
_ACTOR = "bench"
_COLUMNS = (
    "position, stream, version, type, schema_version, payload, recorded_at, actor, entry_hash"
)
_RECORDED_AT = "2026-01-01T00:00:00.000000Z"

# Contender labels, as they appear in the tables.
_OURS_APPEND = "arena-ledger EventStore.append"
_OURS_VERIFY = "arena-ledger store.verify() (read + chain)"
_OURS_READ = "arena-ledger read_all"
_ES_SAVE = "eventsourcing Application.save"
_ES_INSERT = "eventsourcing recorder.insert_events"
_ES_READ = "eventsourcing notification log + mapper"
_ES_READ_RAW = "eventsourcing notification log, unmapped"
_RAW_SQLITE = "raw sqlite3 multi-row INSERT (same validation + chain)"
_RAW_COPY = "raw psycopg binary COPY (same validation + chain)"
_RAW_VERIFY_SQLITE = "raw sqlite3 read + chain (ceiling)"
_RAW_VERIFY_PG = "raw psycopg binary read + chain (ceiling)"
#: PostgreSQL types of the events columns, for binary COPY.
_COPY_TYPES = ("int8", "varchar", "int4", "varchar", "int4", "bytea", "varchar", "varchar",
               "varchar")


# -- the workload ---------------------------------------------------------------------------


def window_payload(index: int) -> dict[str, Any]:
    """Returns a realistic WindowMeasured payload (~300 canonical bytes) for event ``index``."""
    slot = index % windows_per_attempt
    return {
        "window": slot % 5 + 1,
        "orientation": 1 + slot // 5,
        "stock_cost_ns": 1_234_567_890_123 + index * 7,
        "candidate_cost_ns": 1_198_765_432_101 + index * 5,
        "stock_output_tokens": 4096,
        "candidate_output_tokens": 4096 + index % 17,
        "stock_decode_tps": _decimal(1843, index),
        "candidate_decode_tps": _decimal(1901, index + 1),
        "stock_ttft_ms": _decimal(41, index + 2),
        "candidate_ttft_ms": _decimal(39, index + 3),
    }


def _decimal(whole: int, index: int) -> str:
    # Canonical spelling: the last fractional digit is never 0.
    return f"{whole}.{index % 9_973:05d}7"


def stream_of(index: int) -> str:
    """Returns the attempt stream event ``index`` belongs to."""
    return f"attempt-bench.{index // windows_per_attempt:08d}"


def make_drafts(count: int) -> list[EventDraft]:
    """Builds ``count`` drafts ahead of timing (building them is the caller's cost, not ours)."""
    return [EventDraft(stream_of(i), "WindowMeasured", window_payload(i)) for i in range(count)]


def _sqlite_default_synchronous() -> str:
    with tempfile.TemporaryDirectory() as tmp:
        conn = sqlite3.connect(Path(tmp) / "probe.db")
        conn.execute("PRAGMA journal_mode = WAL")
        level = conn.execute("PRAGMA synchronous").fetchone()[0]
        conn.close()
    return {0: "OFF", 1: "NORMAL", 2: "FULL", 3: "EXTRA"}.get(level, str(level))


def payload_size_bytes() -> int:
    """Returns the canonical size of a typical payload."""
    return len(CATALOGUE.validate("WindowMeasured", 1, window_payload(12_345)))


# -- databases ------------------------------------------------------------------------------


@dataclass
class Backend:
    """Hands out fresh, empty databases of one kind and removes them afterwards."""

    name: str
    pg_dsn: str
    tmp: Path
    _made: list[str] = field(default_factory=list)

    def new(self, label: str) -> str:
        """Creates an empty database and returns its name (a file path on SQLite)."""
        if self.name == "sqlite":
            path = self.tmp / f"{label}.db"
            self._made.append(str(path))
            return str(path)
        name = f"al_bench_{secrets.token_hex(4)}_{label}"
        with psycopg.connect(self.pg_dsn, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        self._made.append(name)
        return name

    def url(self, db: str) -> str:
        """Returns the SQLAlchemy URL of a database made here."""
        if self.name == "sqlite":
            return f"sqlite:///{db}"
        params = _dsn_params(self.pg_dsn)
        host, port = params.get("host", "127.0.0.1"), params.get("port", "5432")
        return f"postgresql+psycopg://{params['user']}@{host}:{port}/{db}"

    def dsn(self, db: str) -> str:
        """Returns a psycopg connection string for a PostgreSQL database made here."""
        params = {**_dsn_params(self.pg_dsn), "dbname": db}
        return " ".join(f"{k}={v}" for k, v in params.items())

    def es_env(self, db: str) -> dict[str, str]:
        """Returns the environment that points an eventsourcing Application at ``db``."""
        if self.name == "sqlite":
            return {"PERSISTENCE_MODULE": "eventsourcing.sqlite", "SQLITE_DBNAME": db}
        params = _dsn_params(self.pg_dsn)
        return {
            "PERSISTENCE_MODULE": "eventsourcing.postgres",
            "POSTGRES_DBNAME": db,
            "POSTGRES_HOST": params.get("host", "127.0.0.1"),
            "POSTGRES_PORT": params.get("port", "5432"),
            "POSTGRES_USER": params["user"],
            "POSTGRES_PASSWORD": params.get("password", ""),
        }

    def drop_all(self) -> None:
        """Drops every PostgreSQL database made here (SQLite files go with the temp dir)."""
        if self.name != "postgresql":
            return
        with psycopg.connect(self.pg_dsn, autocommit=True) as conn:
            for name in self._made:
                conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    def version(self) -> str:
        """Returns the server version (PostgreSQL) or library version (SQLite)."""
        if self.name == "sqlite":
            return sqlite3.sqlite_version
        with psycopg.connect(self.pg_dsn) as conn:
            row = conn.execute("SHOW server_version").fetchone()
        return str(row[0]) if row else "?"


def _dsn_params(dsn: str) -> dict[str, str]:
    return dict(part.split("=", 1) for part in shlex.split(dsn))


# -- contenders: ours -----------------------------------------------------------------------


class OursAppend:
    """Appends through ``EventStore.append`` in fixed-size batches."""

    def __init__(self, backend: Backend, db: str, drafts: list[EventDraft], batch: int) -> None:
        url = backend.url(db)
        migrate.upgrade(url)
        self.store = EventStore(url)
        self.drafts, self.batch, self.done = drafts, batch, 0

    def step(self, events: int) -> int:
        """Appends the next ``events`` drafts, ``batch`` at a time."""
        end = min(self.done + events, len(self.drafts))
        for start in range(self.done, end, self.batch):
            self.store.append(self.drafts[start : min(start + self.batch, end)], actor=_ACTOR)
        handled, self.done = end - self.done, end
        return handled

    def close(self) -> None:
        """Releases the store's connections."""
        self.store.close()


# -- contenders: eventsourcing --------------------------------------------------------------


class Attempt(Aggregate):
    """Is one attempt as an eventsourcing aggregate: its creation carries the first window."""

    @event("Claimed")
    def __init__(
        self, window: int, orientation: int, stock_cost_ns: int, candidate_cost_ns: int,
        stock_output_tokens: int, candidate_output_tokens: int, stock_decode_tps: str,
        candidate_decode_tps: str, stock_ttft_ms: str, candidate_ttft_ms: str,
    ) -> None:
        self.windows = 1

    @event("WindowMeasured")
    def measure(
        self, window: int, orientation: int, stock_cost_ns: int, candidate_cost_ns: int,
        stock_output_tokens: int, candidate_output_tokens: int, stock_decode_tps: str,
        candidate_decode_tps: str, stock_ttft_ms: str, candidate_ttft_ms: str,
    ) -> None:
        """Triggers one WindowMeasured event."""
        self.windows += 1


class Arena(Application[uuid.UUID]):
    """Is the eventsourcing Application the peer saves through and reads from."""

    log_section_size = limits.read_page_events  # same page as our reads


class EsAppSave:
    """Saves aggregates through ``Application.save``: 100 attempts of 10 events per call."""

    def __init__(self, backend: Backend, db: str, total: int) -> None:
        self.app = Arena(env=backend.es_env(db))
        self.payloads = [window_payload(i) for i in range(total)]
        self.done = 0

    def step(self, events: int) -> int:
        """Saves the next ``events`` events, 1,000 (100 aggregates) per ``save`` call."""
        end = min(self.done + events, len(self.payloads))
        per_save = 1_000
        for start in range(self.done, end, per_save):
            chunk = self.payloads[start : min(start + per_save, end)]
            attempts = []
            for first in range(0, len(chunk), windows_per_attempt):
                attempt = Attempt(**chunk[first])
                for window in chunk[first + 1 : first + windows_per_attempt]:
                    attempt.measure(**window)
                attempts.append(attempt)
            self.app.save(*attempts)
        handled, self.done = end - self.done, end
        return handled

    def close(self) -> None:
        """Closes the application's recorder."""
        self.app.close()


class EsRecorderInsert:
    """Inserts StoredEvents through the bare ``ApplicationRecorder.insert_events``."""

    topic = "bench:WindowMeasured"

    def __init__(self, backend: Backend, db: str, total: int) -> None:
        self.app = Arena(env=backend.es_env(db))
        self.payloads = [window_payload(i) for i in range(total)]
        self.ids = [uuid.uuid4() for _ in range(total // windows_per_attempt + 1)]
        self.done = 0

    def step(self, events: int) -> int:
        """Inserts the next ``events`` events, 1,000 per call."""
        end = min(self.done + events, len(self.payloads))
        for start in range(self.done, end, 1_000):
            stored = [
                StoredEvent(
                    originator_id=self.ids[i // windows_per_attempt],
                    originator_version=i % windows_per_attempt + 1,
                    topic=self.topic,
                    state=orjson.dumps(self.payloads[i]),
                )
                for i in range(start, min(start + 1_000, end))
            ]
            self.app.recorder.insert_events(stored)
        handled, self.done = end - self.done, end
        return handled

    def close(self) -> None:
        """Closes the application's recorder."""
        self.app.close()


# -- contenders: raw-driver ceilings --------------------------------------------------------


class _Chainer:
    """Does the work every ledger append must do: validate, canonical bytes, chain, Merkle.

    The Merkle frontier (``ledger.stored_tree``) is part of an append since revision 0002, so the
    ceilings maintain it too; otherwise they would not be doing the same work.
    """

    def __init__(self) -> None:
        self.versions: dict[str, int] = {}

    def rows(
        self, drafts: Sequence[EventDraft], position: int, tip_hex: str, frontier: bytes
    ) -> tuple[list[tuple[Any, ...]], bytes, list[tuple[int, int, bytes]]]:
        """Returns insert rows after ``position``, the new frontier and Merkle nodes to store."""
        validate, previous, size = CATALOGUE.validate, bytes.fromhex(tip_hex), position
        out: list[tuple[Any, ...]] = []
        digests: list[bytes] = []
        for d in drafts:
            data = validate(d.type, 1, d.payload, d.stream)
            position += 1
            version = self.versions[d.stream] = self.versions.get(d.stream, 0) + 1
            previous = next_entry_hash(
                previous,
                envelope_bytes(position, d.stream, version, d.type, 1, data, _RECORDED_AT, _ACTOR),
            )
            digests.append(previous)
            out.append((position, d.stream, version, d.type, 1, data, _RECORDED_AT, _ACTOR,
                        previous.hex()))
        frontier, nodes = advance_frontier(frontier, size, digests)
        return out, frontier, nodes


_HEAD_SQL = "SELECT position, entry_hash, frontier FROM ledger_head WHERE id = 1"
_NODES_SQL = "INSERT INTO merkle_nodes (level, idx, hash) VALUES ({p}, {p}, {p})"
_PG_NODES_SQL = (
    "INSERT INTO merkle_nodes (level, idx, hash) SELECT * FROM "
    "unnest(%s::smallint[], %s::bigint[], %s::bytea[])"
)
_UPDATE_HEAD_SQL = (
    "UPDATE ledger_head SET position = {p}, entry_hash = {p}, frontier = {p} WHERE id = 1"
)


def _multi_insert(rows: int) -> str:
    row = "(" + ", ".join("?" * 9) + ")"
    return f"INSERT INTO events ({_COLUMNS}) VALUES " + ", ".join([row] * rows)


class RawSqlite:
    """Is the SQLite ceiling: sqlite3 multi-row INSERTs of validated, chained rows.

    256 rows a statement (the store's own path, too): ``executemany`` of a one-row INSERT
    spends a third of the insert reopening and seeking the table's cursors for every row.
    """

    def __init__(self, backend: Backend, db: str, drafts: list[EventDraft]) -> None:
        migrate.upgrade(backend.url(db))  # the same tables, indexes and triggers as ours
        self.conn = sqlite3.connect(db, isolation_level=None)
        self.conn.execute("PRAGMA journal_mode = WAL")
        self.conn.execute("PRAGMA synchronous = FULL")
        self.chainer, self.drafts, self.done = _Chainer(), drafts, 0

    def step(self, events: int) -> int:
        """Appends the next ``events`` drafts, 1,000 per transaction."""
        end = min(self.done + events, len(self.drafts))
        for start in range(self.done, end, 1_000):
            self.conn.execute("BEGIN IMMEDIATE")
            position, tip, frontier = self.conn.execute(_HEAD_SQL).fetchone()
            rows, frontier, nodes = self.chainer.rows(
                self.drafts[start : min(start + 1_000, end)], position, tip, frontier
            )
            for first in range(0, len(rows), 256):
                chunk = rows[first : first + 256]
                self.conn.execute(_multi_insert(len(chunk)), [v for row in chunk for v in row])
            self.conn.executemany(_NODES_SQL.format(p="?"), nodes)
            self.conn.execute(_UPDATE_HEAD_SQL.format(p="?"), (rows[-1][0], rows[-1][8], frontier))
            self.conn.execute("COMMIT")
        handled, self.done = end - self.done, end
        return handled

    def close(self) -> None:
        """Closes the connection."""
        self.conn.close()


class RawCopy:
    """Is the PostgreSQL ceiling: psycopg binary ``COPY`` of validated, chained rows."""

    def __init__(self, backend: Backend, db: str, drafts: list[EventDraft]) -> None:
        migrate.upgrade(backend.url(db))
        self.conn = psycopg.connect(backend.dsn(db))
        self.chainer, self.drafts, self.done = _Chainer(), drafts, 0

    def step(self, events: int) -> int:
        """Appends the next ``events`` drafts, 1,000 per transaction."""
        end = min(self.done + events, len(self.drafts))
        for start in range(self.done, end, 1_000):
            with self.conn.transaction(), self.conn.cursor() as cur:
                position, tip, frontier = cur.execute(_HEAD_SQL + " FOR UPDATE").fetchone()  # type: ignore[misc]
                rows, frontier, nodes = self.chainer.rows(
                    self.drafts[start : min(start + 1_000, end)], position, tip, frontier
                )
                with cur.copy(f"COPY events ({_COLUMNS}) FROM STDIN (FORMAT BINARY)") as copy:
                    copy.set_types(_COPY_TYPES)
                    for row in rows:
                        copy.write_row(row)
                if nodes:  # one statement over arrays, as the store does on PostgreSQL
                    cur.execute(_PG_NODES_SQL, tuple(list(c) for c in zip(*nodes, strict=True)))
                cur.execute(_UPDATE_HEAD_SQL.format(p="%s"), (rows[-1][0], rows[-1][8], frontier))
        handled, self.done = end - self.done, end
        return handled

    def close(self) -> None:
        """Closes the connection."""
        self.conn.close()


# -- reads ----------------------------------------------------------------------------------


def ours_verify(store: EventStore) -> int:
    """Verifies the whole chain; returns the events checked."""
    report = store.verify()
    if not report.ok:
        raise SystemExit(f"bench ledger failed verification: {report.problem}")
    return report.checked


def ours_read_all(store: EventStore) -> int:
    """Streams every event through ``read_all``; returns the count."""
    return sum(1 for _ in store.read_all())


def es_read_mapped(app: Application[Any], map_events: bool = True) -> int:
    """Reads the notification log page by page, mapping each notification to a domain event."""
    log, to_event, start, count = app.notification_log, app.mapper.to_domain_event, 1, 0
    page = app.log_section_size
    while True:
        items = log.select(start, page)
        if map_events:
            for item in items:
                to_event(item)
        count += len(items)
        if len(items) < page:
            return count
        start = items[-1].id + 1


def raw_verify(backend: Backend, db: str) -> int:
    """Is the read ceiling: raw driver pages (binary on PostgreSQL), the same envelope and hash.

    Pages are position windows, so a plan PostgreSQL caches for the prepared statement can
    never scan more than one page (an open ``position > ?`` range can, once it goes generic).
    """
    if backend.name == "sqlite":
        conn: Any = sqlite3.connect(db)
        cursor, mark = conn.cursor(), "?"
    else:
        conn = psycopg.connect(backend.dsn(db))
        cursor, mark = conn.cursor(binary=True), "%s"
    sql = (f"SELECT {_COLUMNS} FROM events WHERE position >= {mark} AND position <= {mark} "
           "ORDER BY position")
    page, previous, checked = limits.read_page_events, bytes(32), 0
    try:
        last = cursor.execute("SELECT position FROM ledger_head").fetchone()[0]
        for lo in range(1, last + 1, page):
            for r in cursor.execute(sql, (lo, min(lo + page - 1, last))).fetchall():
                previous = next_entry_hash(
                    previous, envelope_bytes(r[0], r[1], r[2], r[3], r[4], r[5], r[6], r[7])
                )
                if previous.hex() != r[8]:
                    raise SystemExit(f"raw verify mismatch at {r[0]}")
                checked += 1
        return checked
    finally:
        conn.close()


# -- memory (runs in a fresh process) -------------------------------------------------------


def memory_child(url: str, operation: str) -> MemoryProbe:
    """Measures one full read or verify of the ledger at ``url``, after a one-page warm-up."""
    with EventStore(url) as store:
        next(iter(store.read_all()))  # connects, fills driver caches, imports lazily
        store.verify(1, 1)
        reader = ours_verify if operation == "verify" else ours_read_all
        call: Callable[[], object] = lambda: reader(store)  # noqa: E731 (a closure over store)
        return probe_memory(call)


# -- the run --------------------------------------------------------------------------------


@dataclass
class Row:
    """Is one measured figure: what ran, how many events, how fast."""

    backend: str
    operation: str
    contender: str
    batch: str
    tally: Tally


@dataclass
class BackendResult:
    """Holds everything measured on one backend."""

    name: str
    version: str
    total: int
    rows: list[Row] = field(default_factory=list)
    memory: list[tuple[str, int, MemoryProbe]] = field(default_factory=list)

    def rate(self, contender: str, operation: str = "append", batch: str | None = None) -> float:
        """Returns the events/s of one contender (0 when it did not run)."""
        for row in self.rows:
            if row.contender == contender and row.operation == operation and (
                batch is None or row.batch == batch
            ):
                return row.tally.rate
        return 0.0


@contextlib.contextmanager
def closing_all(contenders: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Closes every contender on the way out."""
    try:
        yield contenders
    finally:
        for contender in contenders.values():
            contender.close()


def bench_appends(backend: Backend, total: int, result: BackendResult) -> dict[str, str]:
    """Runs every append contender interleaved; returns the database of each (for reads)."""
    drafts = make_drafts(total)
    singles = min(total, single_append_events_max)
    ceiling = RawSqlite if backend.name == "sqlite" else RawCopy
    dbs = {key: backend.new(key) for key in ("b1", "b100", "b1000", "esapp", "esrec", "raw")}
    contenders = {
        "b1": OursAppend(backend, dbs["b1"], drafts[:singles], 1),
        "b100": OursAppend(backend, dbs["b100"], drafts, 100),
        "b1000": OursAppend(backend, dbs["b1000"], drafts, 1_000),
        "esapp": EsAppSave(backend, dbs["esapp"], total),
        "esrec": EsRecorderInsert(backend, dbs["esrec"], total),
        "raw": ceiling(backend, dbs["raw"], drafts),
    }
    sizes = {key: (singles if key == "b1" else total) for key in contenders}
    with closing_all(contenders):
        steps = {
            key: (lambda c=c, n=max(1, sizes[key] // append_rounds): c.step(n))
            for key, c in contenders.items()
        }
        tallies = run_interleaved(steps, append_rounds)
    labels = {
        "b1": (_OURS_APPEND, "1"),
        "b100": (_OURS_APPEND, "100"),
        "b1000": (_OURS_APPEND, "1,000"),
        "esapp": (_ES_SAVE, "1,000"),
        "esrec": (_ES_INSERT, "1,000"),
        "raw": (_RAW_SQLITE if backend.name == "sqlite" else _RAW_COPY, "1,000"),
    }
    for key, (contender, batch) in labels.items():
        result.rows.append(Row(backend.name, "append", contender, batch, tallies[key]))
    return dbs


def bench_reads(backend: Backend, dbs: dict[str, str], result: BackendResult) -> None:
    """Runs the read contenders interleaved over the ledgers the appends left behind."""
    store = EventStore(backend.url(dbs["b1000"]))
    app = Arena(env=backend.es_env(dbs["esapp"]))
    steps: dict[str, Callable[[], int]] = {
        "verify": lambda: ours_verify(store),
        "read_all": lambda: ours_read_all(store),
        "es_mapped": lambda: es_read_mapped(app),
        "es_raw": lambda: es_read_mapped(app, map_events=False),
    }
    steps["raw_verify"] = lambda: raw_verify(backend, dbs["b1000"])
    try:
        tallies = run_interleaved(steps, read_rounds(result.total))
    finally:
        store.close()
        app.close()
    labels = {
        "verify": ("verify", _OURS_VERIFY),
        "read_all": ("read", _OURS_READ),
        "es_mapped": ("read", _ES_READ),
        "es_raw": ("read", _ES_READ_RAW),
        "raw_verify": ("verify", _RAW_VERIFY_PG if backend.name == "postgresql"
                       else _RAW_VERIFY_SQLITE),
    }
    for key, tally in tallies.items():
        operation, contender = labels[key]
        result.rows.append(Row(backend.name, operation, contender, "page 2,000", tally))


def read_rounds(total: int) -> int:
    """Returns how many whole-ledger reads each read contender makes."""
    return max(read_rounds_min, min(read_rounds_max, read_events_max // max(1, total)))


def bench_memory(backend: Backend, dbs: dict[str, str], total: int, result: BackendResult) -> None:
    """Measures read and verify memory at two ledger sizes, each in a fresh process."""
    small_total = max(1, total // memory_small_fraction)
    small_db = backend.new("small")
    small = OursAppend(backend, small_db, make_drafts(small_total), 1_000)
    small.step(small_total)
    small.close()
    for db, size in ((small_db, small_total), (dbs["b1000"], total)):
        for operation in ("verify", "read_all"):
            probe = run_in_fresh_process(memory_child, backend.url(db), operation)
            result.memory.append((operation, size, probe))


def run_backend(name: str, total: int, pg_dsn: str, tmp: Path) -> BackendResult:
    """Runs appends, reads and memory on one backend and drops what it created."""
    backend = Backend(name, pg_dsn, tmp)
    result = BackendResult(name, backend.version(), total)
    try:
        print(f"[{name}] appends: {total:,} events per contender …", file=sys.stderr, flush=True)
        dbs = bench_appends(backend, total, result)
        print(f"[{name}] reads …", file=sys.stderr, flush=True)
        bench_reads(backend, dbs, result)
        print(f"[{name}] memory …", file=sys.stderr, flush=True)
        bench_memory(backend, dbs, total, result)
    finally:
        backend.drop_all()
    return result


# -- report ---------------------------------------------------------------------------------


def throughput_table(results: Sequence[BackendResult]) -> str:
    """Renders every throughput figure with its ratio to the eventsourcing peer."""
    rows = []
    for res in results:
        es_app, es_read = res.rate(_ES_SAVE), res.rate(_ES_READ, "read")
        for row in res.rows:
            peer = es_app if row.operation == "append" else es_read
            ratio = fmt_ratio(row.tally.rate / peer) if peer else "–"
            rows.append([res.name, row.operation, row.contender, row.batch,
                         f"{row.tally.events:,}", fmt_rate(row.tally.rate), ratio])
    headers = ["Backend", "Operation", "Contender", "Batch", "Events", "Events/s",
               "vs. eventsourcing"]
    return render_markdown_table(headers, rows, numeric=(4, 5, 6))


def _flat(small: MemoryProbe, large: MemoryProbe) -> bool:
    limit = small.traced_peak_kib * memory_flat_factor + memory_flat_allowance_kib
    return large.traced_peak_kib <= limit


def memory_table(results: Sequence[BackendResult]) -> str:
    """Renders the memory of read and verify at each ledger size."""
    rows = [
        [res.name, op, f"{size:,}", fmt_kib(p.rss_delta_kib) + ("" if p.rss_exact else " (≈)"),
         fmt_kib(p.traced_peak_kib)]
        for res in results
        for op, size, p in res.memory
    ]
    headers = ["Backend", "Operation", "Ledger events", "Peak RSS Δ", "tracemalloc peak"]
    return render_markdown_table(headers, rows, numeric=(2, 3, 4))


@dataclass(frozen=True)
class Target:
    """Is one goal: the measured figure, what the raw ceiling reaches on the same bar, verdict."""

    backend: str
    goal: str
    measured: str
    ceiling: str
    ok: bool | None  # None: not judged (the run was too small to say)


def _ratio_target(res: BackendResult, goal: str, ours: float, ceiling: float, peer: float,
                  bar: float) -> Target:
    if peer <= 0:
        return Target(res.name, goal, "–", "–", False)
    return Target(res.name, goal, fmt_ratio(ours / peer),
                  fmt_ratio(ceiling / peer) if ceiling else "–", ours >= bar * peer)


def _memory_targets(res: BackendResult) -> list[Target]:
    targets = []
    for op in ("verify", "read_all"):
        probes = [(size, p) for o, size, p in res.memory if o == op]
        if len(probes) != 2:
            continue
        (small_size, small), (_, large) = probes
        growth = large.traced_peak_kib / max(1, small.traced_peak_kib)
        judged = small_size >= 2 * limits.read_page_events  # both ledgers span several pages
        targets.append(Target(
            res.name, f"{op} memory flat as the ledger grows ×{memory_small_fraction}",
            f"peak ×{growth:.2f}" + ("" if judged else " (ledger too small to judge)"), "–",
            _flat(small, large) if judged else None,
        ))
    return targets


def targets(res: BackendResult) -> list[Target]:
    """Evaluates every target on one backend."""
    ours_1000, es_app = res.rate(_OURS_APPEND, batch="1,000"), res.rate(_ES_SAVE)
    raw = res.rate(_RAW_SQLITE if res.name == "sqlite" else _RAW_COPY)
    verify, es_read = res.rate(_OURS_VERIFY, "verify"), res.rate(_ES_READ, "read")
    raw_verify = res.rate(_RAW_VERIFY_SQLITE if res.name == "sqlite" else _RAW_VERIFY_PG, "verify")
    bar = target_sqlite_vs_es_app if res.name == "sqlite" else target_pg_vs_es_app
    out = [_ratio_target(res, f"append ×1,000 ≥ {bar:g}× eventsourcing Application.save",
                         ours_1000, raw, es_app, bar)]
    if res.name == "sqlite":
        out.append(Target(res.name, f"append ×1,000 ≥ {target_sqlite_vs_raw:.0%} of the raw "
                          "sqlite3 ceiling", f"{ours_1000 / raw:.0%}" if raw else "–", "100%",
                          ours_1000 >= target_sqlite_vs_raw * raw > 0))
        out.append(Target(res.name, f"read + verify ≥ {target_sqlite_verify_rate:,} events/s",
                          fmt_rate(verify), fmt_rate(raw_verify),
                          verify >= target_sqlite_verify_rate))
    out.append(_ratio_target(
        res, f"read + verify ≥ {target_verify_vs_es_read:g}× eventsourcing mapped read",
        verify, raw_verify, es_read, target_verify_vs_es_read))
    return out + _memory_targets(res)


def targets_table(results: Sequence[BackendResult]) -> str:
    """Renders every target with the measured figure, the ceiling's, and PASS or MISS."""
    rows = [[t.backend, t.goal, t.measured, t.ceiling, "n/a" if t.ok is None else verdict(t.ok)]
            for res in results for t in targets(res)]
    headers = ["Backend", "Target", "Measured", "Raw ceiling", "Result"]
    return render_markdown_table(headers, rows, numeric=(2, 3))


def command_line(argv: Sequence[str]) -> str:
    """Returns the command that reproduces this run."""
    shown = [a for a in argv if a != "--write-docs"]
    return "python bench/store.py" + ("" if not shown else " " + " ".join(shown))


def _contenders_text() -> str:
    """Returns the Markdown that says what each contender does."""
    return f"""
### What each contender does

- **arena-ledger EventStore.append**: catalogue validation (the type's pydantic model),
  canonical JSON, stream-version check, hash chain, Merkle frontier and nodes, events +
  head row in one transaction. SQLite: file database, WAL, `synchronous=FULL`,
  `BEGIN IMMEDIATE`. PostgreSQL: head row `SELECT … FOR UPDATE`, `COPY` from 64 events up.
- **eventsourcing Application.save**: one `save()` of 100 `Aggregate`s with 10 events each
  (creation + 9 triggered), mapped by its JSON transcoder; SQLite through its WAL file
  database (`synchronous` left at the build default: {_sqlite_default_synchronous()}),
  PostgreSQL through its table lock + `INSERT … unnest`. No validation, no hash chain.
- **eventsourcing recorder.insert_events**: 1,000 `StoredEvent`s per call, straight to its
  `ApplicationRecorder`.
- **raw … (same validation + chain)**: the ceiling. The driver alone doing the same work
  (`catalogue.validate`, canonical bytes, chain hashing, Merkle frontier via `ledger.stored_tree`)
  into the same schema, versions kept in memory, no version query, no SQLAlchemy.
- **store.verify()**: reads every event, recomputes each entry hash, checks the head.
  **read_all**: streams `RecordedEvent`s. The read ceiling is the bare driver doing the
  hash recomputation.
- **eventsourcing notification log + mapper**: `notification_log.select` in pages of
  {limits.read_page_events:,}, each notification mapped to a domain event; "unmapped"
  stops at the notifications.

A "Raw ceiling" above the bar while ours misses means the gap is in our code; a ceiling
below the bar means the bar cannot be met with this schema and work on this machine.
""".strip("\n")


def report(results: Sequence[BackendResult], argv: Sequence[str], total: int) -> str:
    """Renders the Store section: command, machine, tables and how to read them."""
    extra: dict[str, str] = {}
    for res in results:
        if res.name == "postgresql":
            extra["PostgreSQL"] = res.version
    extra["Load average at the end (1/5/15 min)"] = " / ".join(
        f"{x:.2f}" for x in os.getloadavg()
    )
    machine = machine_markdown(describe_machine(extra))
    return f"""
Append, read and verify throughput of `EventStore` beside the `eventsourcing` library (v9)
and raw-driver ceilings, all in one run, interleaved in {append_rounds} rounds (reads in
{read_rounds(total)}) so that noise falls on every contender alike; Events/s is the median
round's rate, so a burst of load on one round does not decide a figure. Every contender writes the
same WindowMeasured payloads ({payload_size_bytes()} canonical bytes) to `attempt-…`
streams of {windows_per_attempt} events, each into its own fresh database. Batch-of-one
appends stop at {single_append_events_max:,} events (each one commits and fsyncs).

Command (default size, a few minutes on 2 cores):

    {command_line(argv)}

Larger run, about ten minutes on 2 cores (batch-of-one stays capped, reads drop to
{read_rounds(200_000)} rounds): `python bench/store.py --events 200000`.

Machine:

{machine}

### Targets

{targets_table(results)}

### Throughput

{throughput_table(results)}

### Memory of read and verify

Each figure comes from a fresh process after a one-page warm-up. The small ledger holds
1/{memory_small_fraction} of the large one's {total:,} events; reads stream pages of
{limits.read_page_events:,} events, so the peak should not grow with the ledger.

{memory_table(results)}

{_contenders_text()}
""".strip("\n")


def profile_ours(total: int, pg_dsn: str, tmp: Path) -> None:
    """Prints where ``append`` (batches of 1,000) and ``verify`` spend time on SQLite."""
    backend = Backend("sqlite", pg_dsn, tmp)
    contender = OursAppend(backend, backend.new("profile"), make_drafts(total), 1_000)
    for label, call in (("append ×1,000", lambda: contender.step(total)),
                        ("verify", lambda: ours_verify(contender.store))):
        profiler = cProfile.Profile()
        profiler.runcall(call)
        print(f"\n== cProfile: {label} ({total:,} events) ==")
        pstats.Stats(profiler).sort_stats("tottime").print_stats(18)
    contender.close()


def parse_args(argv: Sequence[str]) -> argparse.Namespace:
    """Parses the command line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=events_default,
                        help=f"events per contender (default {events_default:,})")
    parser.add_argument("--backends", default="sqlite,postgres",
                        help="comma-separated: sqlite, postgres (default both)")
    parser.add_argument("--pg-dsn", default=_PG_DSN_DEFAULT,
                        help="libpq DSN of a server where databases may be created")
    parser.add_argument("--write-docs", action="store_true",
                        help="rewrite the '## Store' section of docs/benchmarks.md")
    parser.add_argument("--profile", action="store_true",
                        help="print cProfile of append and verify on SQLite instead")
    args = parser.parse_args(argv)
    if args.events < append_rounds * memory_small_fraction:
        parser.error(f"--events must be at least {append_rounds * memory_small_fraction}")
    try:
        args.backends = parse_backends(args.backends)
    except ValueError as exc:
        parser.error(str(exc))
    return args


def main(argv: Sequence[str] | None = None) -> int:
    """Runs the benchmark, prints the tables, and optionally rewrites the docs section."""
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="al_bench_") as tmp:
        if args.profile:
            profile_ours(args.events, args.pg_dsn, Path(tmp))
            return 0
        results = [run_backend(b, args.events, args.pg_dsn, Path(tmp)) for b in args.backends]
    text = report(results, argv, args.events)
    print(text)
    if args.write_docs:
        path = replace_doc_section("Store", text)
        print(f"\nwrote the Store section of {path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

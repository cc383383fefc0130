"""Verifies the hash chain by streaming stored rows and recomputing every entry hash.

The check reads raw rows a page at a time (memory stays flat as the ledger grows), splices
the stored payload bytes into the envelope, and compares each recomputed hash with the
stored one. It names the first bad position: a changed byte, a swapped or missing row, or
a head that disagrees with the last event (a truncated tail).
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from sqlalchemy import text

from ledger.chain import GENESIS_HASH, chained
from ledger.database import Database, database_errors, store_error
from ledger.merkle import node_hash
from ledger.progress import Progress, ticker
from ledger.records import Head, VerifyReport
from ledger.stored_tree import advance_frontier, frontier_root, stored_level_min
from vocabulary import limits
from vocabulary.errors import InvalidInput, head_row_missing

if TYPE_CHECKING:
    from sqlalchemy import Connection


__all__ = ["head_and_last_position", "raw_rows", "verify_chain"]

_SQL = (
    "SELECT position, stream, version, type, schema_version, payload, recorded_at, actor, "
    "entry_hash FROM events WHERE position >= {p} AND position <= {p} ORDER BY position "
    f"LIMIT {limits.read_page_events}"
)


def verify_chain(
    store: Database,
    from_position: int = 1,
    to_position: int | None = None,
    *,
    tree: bool = False,
    progress: Progress | None = None,
) -> VerifyReport:
    """Recomputes entry hashes from ``from_position`` to ``to_position`` (default: head).

    InvalidInput for a range that ends before it starts or starts past the head: reported
    as a gap instead, a mistyped number would read as a broken chain. With ``tree`` (only
    from position 1), it also rebuilds the Merkle tree from the entry hashes as it goes and
    holds every stored node under the last position, and the head row's frontier when the
    last position is the head, to it (``tree_mismatch``, naming the first node that
    differs): the stored tree is what checkpoints sign and proofs read, and the chain does
    not cover it. ``progress`` hears how many of the range's events are checked.
    """
    if tree and from_position != 1:
        raise InvalidInput(
            "the tree check covers positions 1..N: it cannot start at "
            f"{from_position}", path="--from",
        )
    rebuilt = _RebuiltTree() if tree else None
    if to_position is not None and to_position < from_position:
        raise InvalidInput(
            f"the range {from_position}..{to_position} ends before it starts", path="--to"
        )
    # The head and the last stored position in one statement, so one snapshot: an append
    # that commits while the chain is read moves both, and is not mistaken for events
    # written past the head (the chain is checked up to this head).
    head, stored_max = head_and_last_position(store)
    if from_position > max(head.position, 1):
        raise InvalidInput(
            f"the range starts at {from_position}, past the head (position {head.position})",
            path="--from",
        )
    last = head.position if to_position is None else min(to_position, head.position)
    start = max(1, from_position)
    previous_hex = GENESIS_HASH if start == 1 else _stored_hash(store, start - 1)
    if previous_hex is None:
        return _bad(
            start,
            start - 1,
            last,
            0,
            GENESIS_HASH,
            "gap",
            f"position {start - 1} (the one before the range) is missing",
        )
    previous = bytes.fromhex(previous_hex)
    expected_position = start
    checked = 0
    tick = ticker(progress, "verifying", max(last - start + 1, 0))
    for row, computed in chained(previous, raw_rows(store, start, last)):
        position, stored = row[0], row[8]
        if position != expected_position:
            return _bad(
                start,
                expected_position,
                last,
                checked,
                previous.hex(),
                "gap",
                f"position {expected_position} is missing (next stored is {position})",
            )
        previous = computed
        if rebuilt is not None:
            rebuilt.add(computed)
        if previous.hex() != stored:
            return _bad(
                start,
                position,
                last,
                checked,
                previous.hex(),
                "hash_mismatch",
                f"entry hash at position {position} does not match its content "
                "and the chain before it",
            )
        checked += 1
        expected_position += 1
        if tick is not None:
            tick(checked)
    if expected_position <= last:
        return _bad(
            start,
            expected_position,
            last,
            checked,
            previous.hex(),
            "gap",
            f"events end at position {expected_position - 1} but the head says {last}",
        )
    at_head = to_position is None and last == head.position and last >= start
    if at_head and previous.hex() != head.entry_hash:
        return _bad(
            start,
            last,
            last,
            checked,
            previous.hex(),
            "head_mismatch",
            "the ledger head's hash differs from the last event's hash",
        )
    if to_position is None:
        beyond = stored_max
        if beyond > head.position:
            return _bad(
                start,
                head.position + 1,
                last,
                checked,
                previous.hex(),
                "head_mismatch",
                f"events exist past the head (up to position {beyond})",
            )
    if rebuilt is None:
        return VerifyReport(True, checked, start, last, previous.hex())
    found = rebuilt.compare(store, last)
    if found is not None:
        report = _bad(start, found[0], last, checked, previous.hex(), "tree_mismatch", found[1])
        return dataclasses.replace(report, merkle_root=rebuilt.root)
    return VerifyReport(True, checked, start, last, previous.hex(), merkle_root=rebuilt.root)


class _RebuiltTree:
    """Rebuilds the stored Merkle tree from the entry hashes as ``verify_chain`` reads them,
    and holds the stored one to it: every node of ``merkle_nodes`` (a proof or an earlier
    checkpoint reads them) and the head row's frontier (a checkpoint of the head signs it).

    It keeps one hash per 2**stored_level_min events (a few MiB for millions of events) and the
    frontier; the higher levels are computed from those, one level at a time, as they are
    compared.
    """

    _batch = 4096

    def __init__(self) -> None:
        self.edge, self.size, self.root = b"", 0, ""
        self.pending: list[bytes] = []
        self.lowest: list[bytes] = []  # nodes of level stored_level_min, in index order

    def add(self, entry: bytes) -> None:
        """Takes the next entry hash (raw bytes)."""
        self.pending.append(entry)
        if len(self.pending) >= self._batch:
            self._flush()

    def _flush(self) -> None:
        self.edge, nodes = advance_frontier(self.edge, self.size, self.pending)
        self.size += len(self.pending)
        self.pending.clear()
        self.lowest.extend(value for level, _, value in nodes if level == stored_level_min)

    def compare(self, store: Database, last: int) -> tuple[int, str] | None:
        """Returns (first position under it, problem) for the first stored node or head
        frontier that differs from the rebuilt tree of positions 1..``last``, or None."""
        self._flush()
        self.root = frontier_root(self.edge).hex()
        with store.engine.connect() as conn:
            level, expected = stored_level_min, self.lowest
            while expected:
                rows = conn.execute(
                    text(
                        "SELECT idx, hash FROM merkle_nodes WHERE level = :l AND idx < :n "
                        "ORDER BY idx"
                    ),
                    {"l": level, "n": len(expected)},
                ).all()
                stored = {int(index): bytes(value) for index, value in rows}
                for index, want in enumerate(expected):
                    have = stored.get(index)
                    if have != want:
                        first = (index << level) + 1
                        shown = "missing" if have is None else have.hex()
                        return first, (
                            f"the stored Merkle tree's node ({level}, {index}), over positions "
                            f"{first}-{first + (1 << level) - 1}, is {shown}, but the entry "
                            f"hashes give {want.hex()}: proofs and checkpoints read from it "
                            "are wrong"
                        )
                expected = [
                    node_hash(expected[i], expected[i + 1]) for i in range(0, len(expected) - 1, 2)
                ]
                level += 1
            head = conn.execute(
                text("SELECT position, frontier FROM ledger_head WHERE id = 1")
            ).first()
        if head is not None and int(head[0]) == last and bytes(head[1]) != self.edge:
            return last, (
                f"the stored Merkle head's frontier gives root "
                f"{frontier_root(bytes(head[1])).hex()} at size {last}, but the entry hashes "
                f"give {self.root}: a checkpoint of the head would sign it"
            )
        return None


def raw_rows(
    store: Database, first: int, last: int, conn: Connection | None = None
) -> Iterator[tuple[Any, ...]]:
    """Yields the driver's rows for positions ``first`` to ``last``, in position order.

    Each row is (position, stream, version, type, schema_version, payload, recorded_at,
    actor, entry_hash) as the store keeps them (``ledger.chain.Row``; the payload is bytes
    from SQLite and psycopg 3; replay also accepts a driver's memoryview). Verify, export,
    replay, the guard's catch-up and ``stats`` all read the ledger through this. A database
    failure raises the LedgerError the store raises for it (``SchemaNotInitialised``,
    ``StoreUnavailable``, ...), never the driver's exception. Rows are not checked: a
    missing position is simply absent, and the caller's position check names the gap.
    """
    return itertools.chain.from_iterable(_pages(store, first, last, conn))


def _pages(
    store: Database, start: int, last: int, conn: Connection | None = None
) -> Iterator[list[tuple[Any, ...]]]:
    """Yields raw driver rows one position window of a page at a time, over one connection
    (``conn``, inside its transaction, when given; else one of the store's own).

    Each query asks for one window ``[lo, lo + page - 1]``, not "from lo to the head": once
    psycopg prepares the statement, PostgreSQL's generic plan for an open range is a bitmap
    scan of everything left plus a top-N sort, so each page cost O(ledger). A window bounds
    every plan to one page. The DBAPI cursor returns plain tuples (no SQLAlchemy Row per
    event); on PostgreSQL it asks for binary results, so bytea and integers arrive without
    text decoding. A whole page is fetched at once (``raw_rows`` chains the pages in C, no
    Python frame per row), and a failure is mapped to the store's error here, where every
    database call of the read happens.
    """
    sql = _SQL.format(p="%s" if store.backend == "postgresql" else "?")
    page = limits.read_page_events
    try:
        with contextlib.ExitStack() as stack:
            if conn is None:
                conn = stack.enter_context(store.engine.connect())
            driver: Any = conn.connection.driver_connection
            cursor = (
                driver.cursor(binary=True) if store.backend == "postgresql" else driver.cursor()
            )
            try:
                for lo in range(start, last + 1, page):
                    cursor.execute(sql, (lo, min(lo + page - 1, last)))
                    yield cursor.fetchall()
            finally:
                cursor.close()
    except database_errors() as exc:  # named as the store names it, not a driver traceback
        raise store_error(exc, store.url) from None


def _bad(
    start: int, position: int, last: int, checked: int, head_hash: str, kind: str, problem: str
) -> VerifyReport:
    return VerifyReport(
        False,
        checked,
        start,
        last,
        head_hash,
        first_bad_position=position,
        problem=problem,
        kind=kind,  # type: ignore[arg-type]
    )


def _stored_hash(store: Database, position: int) -> str | None:
    with store.engine.connect() as conn:
        value = conn.execute(
            text("SELECT entry_hash FROM events WHERE position = :p"), {"p": position}
        ).scalar()
    return None if value is None else str(value)


def head_and_last_position(store: Database) -> tuple[Head, int]:
    """Returns the head and the largest stored position, read by one statement (so an
    append that commits meanwhile moves both: only a head row moved back makes the second
    larger). A database failure raises the store's error for it."""
    try:
        with store.engine.connect() as conn:
            row = conn.execute(text(
                "SELECT h.position, h.entry_hash, (SELECT MAX(position) FROM events) "
                "FROM ledger_head h WHERE h.id = 1"
            )).first()
    except database_errors() as exc:
        raise store_error(exc, store.url) from None
    if row is None:
        raise head_row_missing()
    return Head(int(row[0]), str(row[1])), int(row[2] or 0)

"""Keeps what a long fold no longer touches on disk, so its memory follows live state.

A fold of the whole ledger must still answer for every finished submission: a second
SubmissionArrived for it is refused, a duplicate content hash names it, a query lists it.
Kept in memory, that is about 2 KB per submission ever recorded. ``DiskArchive`` holds such
values in a private temporary SQLite file instead (deleted when closed), behind two things
that keep the fold fast:

- a write buffer of ``flush_entries`` records and links, written with multi-row INSERTs
  when full;
- one Bloom filter per space (10 bits per key at most, three probes from the key's own
  hash), so the common question "was this new id ever archived?" is answered "no" in
  memory; a "maybe" reads the file, so an answer is never wrong, only sometimes slower.

Records are bytes: the fold encodes its own states (``machines.projection`` knows their
types; a generic pickle of them cost 11 µs a record). It is an adapter for
``machines.projection.Archive``, which is why it lives here: machines/ holds no database.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from typing import Any

from ledger.sqlite_rows import insert_rows

__all__ = ["DiskArchive"]

#: Records and links held in memory before they are written to the file together.
flush_entries_default = 4096
#: Bloom filter bits per expected key (three probes: about 1% false "maybe" when full).
bloom_bits_per_key = 10
#: Keys a space's first filter is sized for; it grows fourfold whenever it is full.
bloom_keys_initial = 1 << 16
#: Most rows one INSERT statement writes (a power of two; ``ledger.sqlite_rows``).
insert_rows_max = 128
#: SQLite page cache of the archive file, KiB (its memory, whatever the file's size).
cache_kib = 4096


class _Bloom:
    """Answers "certainly absent" or "maybe present" for string keys, in memory."""

    def __init__(self, keys: int) -> None:
        bits = 1 << max(10, (keys * bloom_bits_per_key - 1).bit_length())
        self.capacity = bits // bloom_bits_per_key
        self.mask = bits - 1
        self.bits = bytearray(bits >> 3)
        self.count = 0

    def add(self, key: str) -> bool:
        """Adds ``key``; tells whether it may have been added before (False: certainly not)."""
        h = hash(key)
        step = (h >> 32) | 1
        bits, mask = self.bits, self.mask
        i, j, k = h & mask, (h + step) & mask, (h + 2 * step) & mask
        held = (
            bits[i >> 3] & (1 << (i & 7))
            and bits[j >> 3] & (1 << (j & 7))
            and bits[k >> 3] & (1 << (k & 7))
        )
        bits[i >> 3] |= 1 << (i & 7)
        bits[j >> 3] |= 1 << (j & 7)
        bits[k >> 3] |= 1 << (k & 7)
        self.count += 1
        return bool(held)

    def might_hold(self, key: str) -> bool:
        """Tells whether ``key`` may have been added (False: it certainly was not)."""
        h = hash(key)
        step = (h >> 32) | 1
        bits, mask = self.bits, self.mask
        i = h & mask
        if not bits[i >> 3] & (1 << (i & 7)):
            return False
        i = (h + step) & mask
        if not bits[i >> 3] & (1 << (i & 7)):
            return False
        i = (h + 2 * step) & mask
        return bool(bits[i >> 3] & (1 << (i & 7)))


class DiskArchive:
    """Holds records and links by (space, key) in a private temporary file.

    ``put`` keeps a record (bytes, with an optional ``tag`` to list it by), replacing any
    earlier one; ``get`` returns it or None.
    ``link`` names another key under which a record can be found (an attempt id → its
    submission's key); ``target`` returns it or None. ``values(space, tag)`` yields a
    space's records, or those put with ``tag``, in key order. Not thread-safe; one fold
    owns one archive.
    """

    def __init__(self, *, flush_entries: int = flush_entries_default) -> None:
        if flush_entries < 1:
            raise ValueError(f"flush_entries must be at least 1, not {flush_entries}")
        self.flush_entries = flush_entries
        # "" names a private temporary database: SQLite deletes its file on close.
        self._db = sqlite3.connect("", isolation_level=None)
        self._cursor = self._db.cursor()
        for pragma in ("journal_mode = OFF", "synchronous = OFF", f"cache_size = -{cache_kib}"):
            self._db.execute(f"PRAGMA {pragma}")  # scratch data: nothing to recover
        # Rowid tables, appended to, with the key's in-process hash (an integer) in the
        # index: a row costs 2-4 us to write, where a text primary key (a WITHOUT ROWID
        # B-tree of 64-character keys and whole rows) cost 5-30 us. Hashes may collide, so
        # a lookup compares the key of every row with the hash.
        for table, payload in (("records", "tag TEXT NOT NULL, value BLOB NOT NULL"),
                               ("links", "target TEXT NOT NULL")):
            self._db.execute(
                f"CREATE TABLE {table} (id INTEGER PRIMARY KEY, space INTEGER NOT NULL, "
                f"h INTEGER NOT NULL, key TEXT NOT NULL, {payload})"
            )
            self._db.execute(f"CREATE INDEX {table}_h ON {table} (space, h)")
        self._spaces: dict[str, int] = {}
        self._blooms: dict[str, _Bloom] = {}
        self._records: dict[tuple[str, str], tuple[str, bytes]] = {}
        self._links: dict[tuple[str, str], str] = {}
        #: Buffered (table, space, key) that may also be in the file: replaced on flush.
        self._replacing: set[tuple[str, str, str]] = set()

    def __enter__(self) -> DiskArchive:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def close(self) -> None:
        """Drops everything (the file is deleted)."""
        self._records.clear()
        self._links.clear()
        self._db.close()

    def put(self, space: str, key: str, value: bytes, tag: str = "") -> None:
        """Keeps ``value`` under (space, key), replacing an earlier one."""
        if type(value) is not bytes:
            raise TypeError(f"an archived record is bytes, not {type(value).__name__}")
        self._buffer("records", self._records, space, key, (tag, value))

    def link(self, space: str, key: str, target: str) -> None:
        """Records that (space, key) names the record ``target`` (of another space)."""
        self._buffer("links", self._links, space, key, target)

    def get(self, space: str, key: str) -> bytes | None:
        """Returns the record kept under (space, key), or None."""
        pending = self._records.get((space, key))
        if pending is not None:
            return pending[1]
        found = self._stored("records", "value", space, key)
        return None if found is None else bytes(found)

    def target(self, space: str, key: str) -> str | None:
        """Returns the key a link (space, key) names, or None."""
        pending = self._links.get((space, key))
        if pending is not None:
            return pending
        found = self._stored("links", "target", space, key)
        return None if found is None else str(found)

    def values(self, space: str, tag: str | None = None) -> Iterator[bytes]:
        """Yields the space's records (only those put with ``tag`` when given) in key order."""
        number = self._spaces.get(space)
        if number is None:
            return
        self.flush()
        rows = self._db.execute(
            "SELECT tag, value FROM records WHERE space = ? ORDER BY key", (number,)
        )
        for found, blob in rows:
            if tag is None or found == tag:
                yield bytes(blob)

    def flush(self) -> None:
        """Writes the buffered records and links to the file."""
        spaces, db = self._spaces, self._db
        for table, space, key in self._replacing:
            db.execute(
                f"DELETE FROM {table} WHERE space = ? AND h = ? AND key = ?",
                (spaces[space], hash(key), key),
            )
        self._replacing.clear()
        if self._records:
            insert_rows(
                self._cursor,
                "records (space, h, key, tag, value)",
                [
                    (spaces[space], hash(key), key, tag, value)
                    for (space, key), (tag, value) in self._records.items()
                ],
                insert_rows_max,
            )
            self._records.clear()
        if self._links:
            insert_rows(
                self._cursor,
                "links (space, h, key, target)",
                [
                    (spaces[space], hash(key), key, target)
                    for (space, key), target in self._links.items()
                ],
                insert_rows_max,
            )
            self._links.clear()

    def _buffer(
        self, table: str, buffer: dict[tuple[str, str], Any], space: str, key: str, entry: Any
    ) -> None:
        """Buffers one record or link; writes the buffers to the file when they are full."""
        if self._admit(space, key) and (space, key) not in buffer:
            self._replacing.add((table, space, key))  # may be in the file: replaced on flush
        buffer[(space, key)] = entry
        if len(self._records) + len(self._links) >= self.flush_entries:
            self.flush()

    def _stored(self, table: str, column: str, space: str, key: str) -> Any:
        """Returns ``column`` of the row the file holds under (space, key), or None.

        The space's Bloom filter answers "certainly absent" (most questions) without a read.
        """
        bloom = self._blooms.get(space)
        if bloom is None or not bloom.might_hold(key):
            return None
        rows = self._db.execute(
            f"SELECT key, {column} FROM {table} WHERE space = ? AND h = ?",
            (self._spaces[space], hash(key)),
        )
        for found, value in rows:
            if found == key:  # hashes may collide
                return value
        return None

    def _admit(self, space: str, key: str) -> bool:
        """Adds ``key`` to its space's filter; tells whether it may have been there already."""
        bloom = self._blooms.get(space)
        if bloom is None:
            bloom = self._blooms[space] = _Bloom(bloom_keys_initial)
            self._spaces[space] = len(self._spaces)
        elif bloom.count >= bloom.capacity:
            bloom = self._grow(space)
        return bloom.add(key)

    def _grow(self, space: str) -> _Bloom:
        """Replaces a full filter with one four times larger, holding every key again."""
        self.flush()
        bloom = _Bloom(self._blooms[space].capacity * 4)
        number = self._spaces[space]
        for table in ("records", "links"):
            for (key,) in self._db.execute(f"SELECT key FROM {table} WHERE space = ?", (number,)):
                bloom.add(key)
        self._blooms[space] = bloom
        return bloom

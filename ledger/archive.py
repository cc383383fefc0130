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
#: SQLite page size of the archive file, bytes. Larger pages split less often under the
#: index's random inserts: a record row cost 1.8 µs to write with 4 KiB pages, 1.7 with
#: 16 KiB (1.4 with 64 KiB, but then a "maybe" read fetches 64 KiB pages).
page_bytes = 16384


class _Bloom:
    """Answers "certainly absent" or "maybe present" for string keys, in memory.

    Keys go in by their ``hash()``: the archive computes it once per key, for the filter
    and for the key's row.
    """

    def __init__(self, keys: int, space: int = 0) -> None:
        #: The number the file stores for the filter's space.
        self.space = space
        bits = 1 << max(10, (keys * bloom_bits_per_key - 1).bit_length())
        self.capacity = bits // bloom_bits_per_key
        self.mask = bits - 1
        self.bits = bytearray(bits >> 3)
        self.count = 0

    def add(self, h: int) -> bool:
        """Adds a key by its ``hash``; tells whether it may have been added before (False:
        certainly not)."""
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

    def might_hold(self, h: int) -> bool:
        """Tells whether a key of hash ``h`` may have been added (False: certainly not)."""
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
        pragmas = (
            "journal_mode = OFF",  # scratch data: nothing to recover
            "synchronous = OFF",
            f"cache_size = -{cache_kib}",
            f"page_size = {page_bytes}",  # before the first table: it sets the file's pages
        )
        for pragma in pragmas:
            self._db.execute(f"PRAGMA {pragma}")
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
        #: Buffered rows by (space, key), as ``flush`` writes them: (space number, hash,
        #: key, tag, value) and (space number, hash, key, target).
        self._records: dict[tuple[str, str], tuple[int, int, str, str, bytes]] = {}
        self._links: dict[tuple[str, str], tuple[int, int, str, str]] = {}
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
        # _buffer, inlined into put and link (a finished submission makes 2-3 of these
        # calls), building the row flush writes.
        records, entry, h = self._records, (space, key), hash(key)
        bloom = self._blooms.get(space)
        if bloom is None or bloom.count >= bloom.capacity:
            bloom = self._filter(space)
        if bloom.add(h) and entry not in records:
            self._replacing.add(("records", space, key))  # may be in the file: replaced on flush
        records[entry] = (bloom.space, h, key, tag, value)
        if len(records) + len(self._links) >= self.flush_entries:
            self.flush()

    def link(self, space: str, key: str, target: str) -> None:
        """Records that (space, key) names the record ``target`` (of another space)."""
        links, entry, h = self._links, (space, key), hash(key)
        bloom = self._blooms.get(space)
        if bloom is None or bloom.count >= bloom.capacity:
            bloom = self._filter(space)
        if bloom.add(h) and entry not in links:
            self._replacing.add(("links", space, key))
        links[entry] = (bloom.space, h, key, target)
        if len(self._records) + len(links) >= self.flush_entries:
            self.flush()

    def get(self, space: str, key: str) -> bytes | None:
        """Returns the record kept under (space, key), or None."""
        # The filter first: it holds buffered keys too, and most questions are about keys
        # never archived (a new id), answered here without building a (space, key) tuple.
        bloom = self._blooms.get(space)
        if bloom is None or not bloom.might_hold(hash(key)):
            return None
        pending = self._records.get((space, key))
        if pending is not None:
            return pending[4]
        found = self._stored("records", "value", bloom.space, key)
        return None if found is None else bytes(found)

    def target(self, space: str, key: str) -> str | None:
        """Returns the key a link (space, key) names, or None."""
        bloom = self._blooms.get(space)
        if bloom is None or not bloom.might_hold(hash(key)):
            return None
        pending = self._links.get((space, key))
        if pending is not None:
            return pending[3]
        found = self._stored("links", "target", bloom.space, key)
        return None if found is None else str(found)

    def might_hold(self, space: str, key: str) -> bool:
        """Tells whether (space, key) may name a record or link (False: certainly not)."""
        bloom = self._blooms.get(space)
        return bloom is not None and bloom.might_hold(hash(key))

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
            rows = list(self._records.values())
            insert_rows(self._cursor, "records (space, h, key, tag, value)", rows, insert_rows_max)
            self._records.clear()
        if self._links:
            links = list(self._links.values())
            insert_rows(self._cursor, "links (space, h, key, target)", links, insert_rows_max)
            self._links.clear()

    def _stored(self, table: str, column: str, space: int, key: str) -> Any:
        """Returns ``column`` of the row the file holds under (space number, key), or None.

        Asked only when the space's Bloom filter answers "maybe" (``get``, ``target``).
        """
        rows = self._db.execute(
            f"SELECT key, {column} FROM {table} WHERE space = ? AND h = ?", (space, hash(key))
        )
        for found, value in rows:
            if found == key:  # hashes may collide
                return value
        return None

    def _filter(self, space: str) -> _Bloom:
        """Returns the space's filter for one more key: a new one, or a full one grown."""
        bloom = self._blooms.get(space)
        if bloom is None:
            number = self._spaces[space] = len(self._spaces)
            bloom = self._blooms[space] = _Bloom(bloom_keys_initial, number)
        elif bloom.count >= bloom.capacity:
            bloom = self._grow(space)
        return bloom

    def _grow(self, space: str) -> _Bloom:
        """Replaces a full filter with one four times larger, holding every key again."""
        self.flush()
        number = self._spaces[space]
        bloom = _Bloom(self._blooms[space].capacity * 4, number)
        for table in ("records", "links"):
            for (h,) in self._db.execute(f"SELECT h FROM {table} WHERE space = ?", (number,)):
                bloom.add(h)
        self._blooms[space] = bloom
        return bloom

"""Keeps what a long fold no longer touches on disk, so its memory follows live state.

A fold of the whole ledger must still answer for every finished submission: a second
SubmissionArrived for it is refused, a duplicate content hash names it, a query lists it.
Kept in memory, that is about 2 KB per submission ever recorded. ``DiskArchive`` holds such
values in a private temporary SQLite file instead (deleted when closed). The fold writes far
more than it reads (a finished submission is put and linked once; almost every question is
about a new id), so the layout makes writing cheap and lets a rare read do more work:

- ``rows``, a rowid table only ever appended to, with no index kept per row: a record
  (space, key, tag, value) holds ``names``, the links given with it or made right after it
  to its key (an attempt id, a payment ref, a failed content hash → the submission), so a
  finished submission is one row and one ``put``; a link
  made otherwise (to a key already written, or replacing a link) is a row of its own
  (value NULL, its target in ``tag``). Rows are written ``flush_entries`` at a time, with
  multi-row INSERTs. A key put or linked again is a newer
  row: the newest one answers, and ``values`` skips the older.
- an index per space, ``index_<n>`` (hash, row id) WITHOUT ROWID, for each record key and
  link name: its entries wait in memory (a dict by hash, which answers for them) and are
  written ``index_entries`` at a time, sorted by hash, so a batch touches each leaf page of
  the B-tree once rather than once per entry. The previous layout, rowid tables with an
  index on (space, hash) kept row by row, cost several times as much per row, a link being
  a row too (docs/benchmarks.md, "Design figures").
- one Bloom filter per space (10 bits per key at most, three bits of one 64-bit word
  picked by the key's own hash), so the common question "was this new id ever archived?"
  is answered "no" in memory; a "maybe" reads the index entries under the key's hash, in
  memory and in the file, newest first, and compares keys (hashes may collide), so an
  answer is never wrong, only sometimes slower.

The archive calls recorded from a 1M-event replay (148k puts, 147k links, 510k questions,
all but 1,340 answered by the filters) take 0.67 s of CPU with this layout, 0.94 s with the
previous one (best of three, the replaying loop's own time taken off).
Memory is bounded by the buffers (rows and index entries) and the filters, not by the
number of keys archived. Records are bytes: the fold encodes its own states
(``machines.projection`` knows their types; a generic pickle of them cost 11 µs a record).
It is an adapter for ``machines.projection.Archive``, which is why it lives here: machines/
holds no database.
"""

from __future__ import annotations

import functools
import sqlite3
from array import array
from collections.abc import Callable, Iterator, Sequence
from functools import lru_cache
from itertools import chain
from typing import Any, TypeVar, cast

from ledger.limits import (
    archive_index_insert_rows_max,
    archive_insert_rows_max,
    archive_names_chars_max,
)
from ledger.sqlite_rows import insert_rows
from vocabulary.errors import ArchiveUnavailable

__all__ = ["DiskArchive"]

_F = TypeVar("_F", bound=Callable[..., Any])


def _named_failures(method: _F) -> _F:
    """Raises ArchiveUnavailable, naming the temporary file, for a SQLite error of ``method``.

    Every method that touches the file is wrapped, except ``put`` and ``link`` (the hot
    path), which touch it only through ``flush`` and ``_space``, both wrapped.
    """

    @functools.wraps(method)
    def named(self: DiskArchive, *args: Any, **kwargs: Any) -> Any:
        try:
            return method(self, *args, **kwargs)
        except sqlite3.Error as exc:
            raise _unavailable(exc) from None

    return cast(_F, named)


def _unavailable(exc: sqlite3.Error) -> ArchiveUnavailable:
    return ArchiveUnavailable(
        f"the archive's temporary file failed: {exc}. SQLite keeps it in SQLITE_TMPDIR, else "
        "TMPDIR, else /var/tmp or /tmp; free space there or point SQLITE_TMPDIR at a "
        "directory with room (about 1.2 KB per finished submission). The ledger itself is "
        "untouched",
        reason=str(exc),
    )

#: Rows (records and links) held in memory before they are written to the file together.
flush_entries_default = 4096
#: Index entries held in memory before they are written, sorted, to the file together
#: (a few MB of dict; a wide range of sizes around this one cost alike in a long replay).
index_entries_default = 1 << 16
#: Bloom filter bits per expected key (three probes in one word; its false "maybe" rate
#: when full is in docs/benchmarks.md, "Design figures").
bloom_bits_per_key = 10
#: Keys a space's first filter is sized for; it grows fourfold whenever it is full.
bloom_keys_initial = 1 << 16
#: SQLite page cache of the archive file, KiB (its memory, whatever the file's size).
cache_kib = 4096
#: SQLite page size of the archive file, bytes.
page_bytes = 16384

#: A row as the buffer holds it: (space number, key, tag or a link's target, value or None
#: for a link, names), a list so that a link can add to ``names``; the file adds its id.
_SPACE, _KEY, _TAG, _VALUE, _NAMES = range(5)
#: Rows are written without their id: SQLite gives each the largest id so far plus one (the
#: table is only appended to, from empty), which is ``_base`` plus its place in the buffer,
#: so it need not be bound per row.
_COLUMNS = "rows (space, key, tag, value, names)"
_ROW = "SELECT space, key, tag, value, names FROM rows"


def _probes(count: int) -> list[int]:
    """Returns ``count`` 64-bit masks of three distinct bits each (a fixed, spread choice)."""
    masks: list[int] = []
    state = 0x9E3779B97F4A7C15
    while len(masks) < count:
        state = (state * 6364136223846793005 + 1442695040888963407) % (1 << 64)
        bits = {(state >> shift) & 63 for shift in (40, 48, 56)}
        if len(bits) == 3:
            masks.append(sum(1 << bit for bit in bits))
    return masks


#: A key's probes, by 12 bits of its hash: three bits of one 64-bit word of its filter.
_PROBES = _probes(4096)


@lru_cache(maxsize=16)
def _pairs_insert(into: str, rows: int) -> str:
    return f"INSERT INTO {into} VALUES " + ", ".join(["(?, ?)"] * rows)


class _Space:
    """Is one space's Bloom filter and its index entries not yet written to the file.

    Keys go in by their ``hash()``: the archive computes it once per key, for the filter
    and for the index. The filter is blocked: a key's three bits lie in one 64-bit word
    (its low hash bits pick the word, 12 others the bits), one read and one write where
    three bits in three bytes cost three of each: faster on a long fold, for a slightly
    higher false "maybe" rate when full (docs/benchmarks.md, "Design figures").
    """

    __slots__ = ("capacity", "indexed", "mask", "number", "older", "pending", "prefix", "words")

    def __init__(self, number: int, keys: int) -> None:
        #: The number the file stores for the space (its index table is ``index_<number>``).
        self.number = number
        words = 1 << max(0, (keys * bloom_bits_per_key - 1).bit_length() - 6)
        self.capacity = words * 64 // bloom_bits_per_key
        self.mask = words - 1
        self.words = array("Q", bytes(8 * words))
        #: Index entries in the file.
        self.indexed = 0
        #: Index entries not yet written: hash → newest row id; ``older`` keeps the earlier
        #: row ids of a hash seen again (a key put or linked again, or a collision).
        self.pending: dict[int, int] = {}
        self.older: dict[int, list[int]] = {}
        #: How a row's ``names`` spell a link of this space: f"{prefix}{key}\n".
        self.prefix = f"{number}:"

    def keys(self) -> int:
        """Returns how many index entries the space has (its keys, a repeated one twice)."""
        return self.indexed + len(self.pending) + sum(map(len, self.older.values()))

    def add(self, h: int) -> None:
        """Adds a key to the filter by its ``hash``."""
        self.words[h & self.mask] |= _PROBES[(h >> 40) & 4095]

    def enter(self, key: str, ref: int) -> None:
        """Adds ``key`` to the filter and its index entry (hash, row ``ref``) to the pending."""
        h = hash(key)
        self.words[h & self.mask] |= _PROBES[(h >> 40) & 4095]
        pending = self.pending
        if h in pending:
            self.note(h, ref)
        else:
            pending[h] = ref

    def might_hold(self, h: int) -> bool:
        """Tells whether a key of hash ``h`` may have been added (False: certainly not)."""
        probes = _PROBES[(h >> 40) & 4095]
        return self.words[h & self.mask] & probes == probes

    def note(self, h: int, ref: int) -> None:
        """Adds the index entry (h, ref) when its hash is already pending (rare)."""
        newest = self.pending[h]
        if newest != ref:  # a link named in the row it was just indexed for needs no entry
            self.older.setdefault(h, []).append(newest)
            self.pending[h] = ref

    def refs(self, h: int) -> list[int]:
        """Returns the row ids of the pending index entries under ``h``, newest first."""
        newest = self.pending.get(h)
        if newest is None:
            return []
        return [newest, *reversed(self.older.get(h, ()))]


class DiskArchive:
    """Holds records and links by (space, key) in a private temporary file.

    ``put`` keeps a record (bytes, with an optional ``tag`` to list it by), replacing any
    earlier one; ``get`` returns it or None.
    ``link`` names another key under which a record can be found (an attempt id → its
    submission's key), replacing an earlier link; ``target`` returns it or None.
    ``values(space, tag)`` yields a space's records, or those put with ``tag``, in key
    order. Not thread-safe; one fold owns one archive.
    """

    @_named_failures
    def __init__(
        self,
        *,
        flush_entries: int = flush_entries_default,
        index_entries: int = index_entries_default,
    ) -> None:
        for name, given in (("flush_entries", flush_entries), ("index_entries", index_entries)):
            if given < 1:
                raise ValueError(f"{name} must be at least 1, not {given}")
        self.flush_entries, self.index_entries = flush_entries, index_entries
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
        self._db.execute(
            "CREATE TABLE rows (id INTEGER PRIMARY KEY, space INTEGER NOT NULL, "
            "key TEXT NOT NULL, tag TEXT NOT NULL, value BLOB, names TEXT NOT NULL)"
        )
        self._spaces: dict[str, _Space] = {}
        #: Rows not yet written, from id ``_base`` on; ``_last`` is the newest one while it
        #: is a record a link may still be named in (None otherwise).
        self._rows: list[list[Any]] = []
        self._base = 1
        self._last: list[Any] | None = None

    def __enter__(self) -> DiskArchive:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    @_named_failures
    def close(self) -> None:
        """Drops everything (the file is deleted)."""
        self._rows.clear()
        self._spaces.clear()
        self._db.close()

    def put(
        self,
        space: str,
        key: str,
        value: bytes,
        tag: str = "",
        links: Sequence[tuple[str, str]] = (),
    ) -> None:
        """Keeps ``value`` under (space, key), replacing an earlier one; each (space, name)
        of ``links`` then names it, as ``link(space, name, key)`` would."""
        if type(value) is not bytes:
            raise TypeError(f"an archived record is bytes, not {type(value).__name__}")
        # A finished submission is one call: a list, a dict entry per key and the link
        # names spelled into the row (the file comes later, in bulk).
        spaces = self._spaces
        try:
            spaced = spaces[space]
        except KeyError:
            spaced = self._space(space)
        # Written when the next row comes, not now: links that follow may name this one.
        rows = self._rows
        count = len(rows)
        if count >= self.flush_entries:
            self.flush()
            rows, count = self._rows, 0
        ref = self._base + count
        row = self._last = [spaced.number, key, tag, value, ""]
        rows.append(row)
        spaced.enter(key, ref)  # after any flush: a flush may grow the filter
        if not links:
            return
        names, spelled, rest = [], 0, links[:0]
        for index, (link_space, name) in enumerate(links):
            if "\n" in name or spelled >= archive_names_chars_max:
                rest = links[index:]  # what a row does not spell: rows of their own
                break
            linked = spaces.get(link_space)
            if linked is None:
                linked = self._space(link_space)
            line = f"{linked.prefix}{name}\n"
            names.append(line)
            spelled += len(line)
            linked.enter(name, ref)
        row[_NAMES] = "".join(names)
        for link_space, name in rest:
            self.link(link_space, name, key)

    def link(self, space: str, key: str, target: str) -> None:
        """Records that (space, key) names the record ``target`` (of another space)."""
        try:
            spaced = self._spaces[space]
        except KeyError:
            spaced = self._space(space)
        rows, last = self._rows, self._last
        if (
            last is not None
            and last[_KEY] == target
            and "\n" not in key
            and len(last[_NAMES]) < archive_names_chars_max
        ):
            # Named in the row just put (still the newest): no row of its own.
            last[_NAMES] += f"{spaced.prefix}{key}\n"
            ref = self._base + len(rows) - 1
        else:
            count = len(rows)
            if count >= self.flush_entries:
                self.flush()
                rows, count = self._rows, 0
            ref = self._base + count
            rows.append([spaced.number, key, target, None, ""])
            self._last = None  # a later link named in an older row would be older than this
        spaced.enter(key, ref)  # after any flush: a flush may grow the filter

    @_named_failures
    def get(self, space: str, key: str) -> bytes | None:
        """Returns the record kept under (space, key), or None."""
        # The filter first: it holds buffered keys too, and most questions are about keys
        # never archived (a new id), answered here without reading anything else.
        spaced = self._spaces.get(space)
        h = hash(key)
        if spaced is None or not spaced.might_hold(h):
            return None
        number = spaced.number
        for row in self._rows_under(spaced, h):
            value = row[_VALUE]
            if value is not None and row[_SPACE] == number and row[_KEY] == key:
                return bytes(value)
        return None

    @_named_failures
    def target(self, space: str, key: str) -> str | None:
        """Returns the key a link (space, key) names, or None."""
        spaced = self._spaces.get(space)
        h = hash(key)
        if spaced is None or not spaced.might_hold(h):
            return None
        number, name = spaced.number, f"\n{spaced.prefix}{key}\n"
        for row in self._rows_under(spaced, h):
            if row[_VALUE] is None:
                if row[_SPACE] == number and row[_KEY] == key:
                    return str(row[_TAG])
            elif name in f"\n{row[_NAMES]}":
                return str(row[_KEY])
        return None

    def might_hold(self, space: str, key: str) -> bool:
        """Tells whether (space, key) may name a record or link (False: certainly not)."""
        spaced = self._spaces.get(space)
        if spaced is None:
            return False
        h = hash(key)  # _Space.might_hold, inlined: the fold asks this of most new ids
        probes = _PROBES[(h >> 40) & 4095]
        return spaced.words[h & spaced.mask] & probes == probes

    def values(self, space: str, tag: str | None = None) -> Iterator[bytes]:
        """Yields the space's records (only those put with ``tag`` when given) in key order."""
        spaced = self._spaces.get(space)
        if spaced is None:
            return
        self.flush()
        # Newest first within a key: a record put again is in the file twice.
        try:
            rows = self._db.execute(
                "SELECT key, tag, value FROM rows WHERE space = ? AND value IS NOT NULL "
                "ORDER BY key, id DESC",
                (spaced.number,),
            )
            previous = None
            for key, found, blob in rows:
                if key != previous:
                    previous = key
                    if tag is None or found == tag:
                        yield bytes(blob)
        except sqlite3.Error as exc:  # a generator: the decorator would not see it
            raise _unavailable(exc) from None

    def links(self, space: str) -> Iterator[tuple[str, str]]:
        """Yields (key, target) for every link of the space, the newest per key, in key order."""
        spaced = self._spaces.get(space)
        if spaced is None:
            return
        self.flush()
        number, prefix = spaced.number, spaced.prefix
        found: dict[str, str] = {}
        try:  # a full scan, in row order (newest last): for listings, not the hot path
            for row_space, key, tag, is_link, names in self._db.execute(
                "SELECT space, key, tag, value IS NULL, names FROM rows ORDER BY id"
            ):
                if is_link:
                    if row_space == number:
                        found[key] = tag
                    continue
                for line in names.split("\n"):
                    if line.startswith(prefix):
                        found[line[len(prefix) :]] = key
        except sqlite3.Error as exc:  # a generator: the decorator would not see it
            raise _unavailable(exc) from None
        yield from sorted(found.items())

    @_named_failures
    def flush(self) -> None:
        """Writes the buffered rows to the file, and the index entries once enough wait."""
        if self._rows:
            insert_rows(self._cursor, _COLUMNS, self._rows, archive_insert_rows_max)
            self._base += len(self._rows)
            self._rows = []
        self._last = None
        spaces = self._spaces.values()
        waiting = sum(len(s.pending) + sum(map(len, s.older.values())) for s in spaces)
        if waiting >= self.index_entries:
            for spaced in spaces:
                self._write_index(spaced)
        for spaced in spaces:
            if spaced.keys() >= spaced.capacity:
                self._grow(spaced)

    def _write_index(self, spaced: _Space) -> None:
        """Writes a space's pending index entries, sorted by hash, to its index table."""
        pending = spaced.pending
        if spaced.older:  # rare: the pairs sorted as tuples
            entries = list(pending.items())
            for h, refs in spaced.older.items():
                entries += [(h, ref) for ref in refs]
            entries.sort()
            flat = list(chain.from_iterable(entries))
        else:
            # The hashes sorted as plain integers, and the parameters laid out by slices:
            # sorting tuples took more than twice as long per entry.
            hashes = sorted(pending)
            flat = [0] * (2 * len(hashes))
            flat[0::2] = hashes
            flat[1::2] = map(pending.__getitem__, hashes)
        into, cursor = f"index_{spaced.number} (h, ref)", self._cursor
        total, start, width = len(flat) // 2, 0, archive_index_insert_rows_max
        while start < total:
            while width > total - start:
                width >>= 1
            cursor.execute(_pairs_insert(into, width), flat[2 * start : 2 * (start + width)])
            start += width
        spaced.indexed += total
        spaced.pending, spaced.older = {}, {}

    def _rows_under(self, spaced: _Space, h: int) -> Iterator[Any]:
        """Yields the rows a space's index entries under hash ``h`` point to, newest first.

        Asked only when the space's Bloom filter answers "maybe". Pending entries are all
        newer than written ones (an index batch is written after every row it points to).
        """
        rows, base, db = self._rows, self._base, self._db
        for ref in spaced.refs(h):
            if ref >= base:
                yield rows[ref - base]
            else:
                yield from db.execute(f"{_ROW} WHERE id = ?", (ref,))
        if spaced.indexed:
            yield from db.execute(
                f"{_ROW} JOIN index_{spaced.number} AS i ON rows.id = i.ref "
                "WHERE i.h = ? ORDER BY i.ref DESC",
                (h,),
            )

    @_named_failures
    def _space(self, space: str) -> _Space:
        """Returns a new space: its filter, its index table."""
        spaced = self._spaces[space] = _Space(len(self._spaces), bloom_keys_initial)
        self._db.execute(
            f"CREATE TABLE index_{spaced.number} (h INTEGER NOT NULL, ref INTEGER NOT NULL, "
            "PRIMARY KEY (h, ref)) WITHOUT ROWID"
        )
        return spaced

    def _grow(self, spaced: _Space) -> None:
        """Replaces a full filter with one four times larger, holding every key again."""
        capacity, keys = spaced.capacity * 4, spaced.keys()
        while capacity <= keys:
            capacity *= 4
        grown = _Space(spaced.number, capacity)
        spaced.words, spaced.mask, spaced.capacity = grown.words, grown.mask, grown.capacity
        for (h,) in self._db.execute(f"SELECT h FROM index_{spaced.number}"):
            spaced.add(h)
        for h in spaced.pending:
            spaced.add(h)  # ``older`` holds hashes of ``pending`` again

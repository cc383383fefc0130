"""Maintains the ledger's RFC 9162 Merkle tree inside the store, incrementally.

The leaves are the entry hashes in position order (leaf index = position − 1). The tree is
kept as:

- the **frontier** in the ``ledger_head`` row: the right edge of the tree, one perfect
  subtree hash per set bit of the size, largest first (at most 64 × 32 bytes). Appends
  advance it without reading anything else, so the root at the head costs microseconds;
- **stored nodes** in ``merkle_nodes`` for every perfect subtree of height
  ``stored_level_min`` or more (one row per 16 leaves), written in the append transaction;
- lower nodes are recomputed on demand from at most 2**stored_level_min − 1 entry hashes.

Any root, inclusion proof or consistency proof therefore reads O(log n) rows, whatever
the ledger's size.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable
from functools import lru_cache

from sqlalchemy import Connection, text

from ledger import merkle
from ledger.chain import GENESIS_HASH
from ledger.database import Database
from vocabulary.errors import IntegrityError, InvalidInput, NotFound

__all__ = [
    "StoredTree",
    "advance_frontier",
    "check_frontier",
    "frontier_root",
    "frontier_tail_first",
    "stored_entry_hash",
    "stored_level_min",
]

#: Lowest level (subtree height) stored in ``merkle_nodes``; lower ones are recomputed.
stored_level_min = 4
#: The bits of a size below ``stored_level_min``: the leaves not under a stored node.
_BELOW_STORED = (1 << stored_level_min) - 1
_LEAF = b"\x00"
_NODE = b"\x01"
_sha256 = hashlib.sha256
_BLANK = bytes(32)  # what a dry run's node reader returns


def _split_frontier(frontier: bytes) -> list[bytes]:
    return [frontier[i : i + 32] for i in range(0, len(frontier), 32)]


def advance_frontier(
    frontier: bytes, size: int, entry_hashes: Iterable[bytes]
) -> tuple[bytes, list[tuple[int, int, bytes]]]:
    """Appends leaves (raw 32-byte entry hashes) to a frontier.

    Returns the new frontier and the completed nodes of level ``stored_level_min`` or more
    as ``(level, index, hash)``, to be stored with the events in the same transaction.
    """
    edge = _split_frontier(frontier)
    if len(edge) != size.bit_count():
        raise InvalidInput("the stored Merkle frontier does not match the ledger size")
    stored: list[tuple[int, int, bytes]] = []
    sha, pop, push = _sha256, edge.pop, edge.append
    for entry in entry_hashes:
        value = sha(_LEAF + entry).digest()
        carry, level = size, 0
        while carry & 1:
            value = sha(_NODE + pop() + value).digest()
            carry >>= 1
            level += 1
            if level >= stored_level_min:
                stored.append((level, size >> level, value))
        push(value)
        size += 1
    return b"".join(edge), stored


def frontier_root(frontier: bytes) -> bytes:
    """Returns the root hash of the tree whose right edge is ``frontier``."""
    edge = _split_frontier(frontier)
    if not edge:
        return merkle.EMPTY_ROOT
    acc = edge[-1]
    for left in reversed(edge[:-1]):
        acc = _sha256(_NODE + left + acc).digest()
    return acc


def frontier_tail_first(size: int) -> int:
    """Returns the first position whose entry hash ``check_frontier`` reads: the leaves
    under the frontier's subtrees below ``stored_level_min``, and the head's own event."""
    return size - max(size & _BELOW_STORED, 1) + 1


def stored_entry_hash(position: int, value: str | None, consequence: str = "") -> bytes:
    """Returns the raw bytes of the entry hash stored at ``position`` (64 hex digits), or
    raises IntegrityError naming the position when it is missing or not a hash: a damaged
    store, never a traceback from ``bytes.fromhex``."""
    try:
        raw = bytes.fromhex(value) if value is not None else b""
    except ValueError:
        raw = b""
    if len(raw) != 32 or value != raw.hex():
        raise IntegrityError(
            f"the entry hash at position {position} is missing or not 64 lowercase hex "
            f"digits: the store is damaged{consequence}. Run `arena-ledger verify`",
            reason="hash_mismatch", position=position,
        )
    return raw


def check_frontier(
    frontier: bytes,
    size: int,
    head_hash: str,
    stored: dict[tuple[int, int], bytes],
    tail: dict[int, str],
    doing: str,
) -> None:
    """Raises IntegrityError unless the head row (``size``, ``head_hash``, ``frontier``) is
    what the append-only tables give.

    ``stored`` holds the stored nodes of ``merkle.right_edge(size)`` (levels
    ``stored_level_min`` and up) and ``tail`` the entry hashes of positions
    ``frontier_tail_first(size)`` to ``size``. The head row is the one row appends rewrite;
    the chain covers its entry hash only once the next event links to it, and nothing else
    covers the frontier, which a checkpoint signs and the next append builds nodes from. A
    row altered outside arena-ledger therefore stops the write or the signature
    (``doing``: what did not happen) before it spreads (reason ``head_mismatch`` or
    ``frontier_mismatch``; ``arena-ledger verify --tree`` checks the whole tree).
    """
    last = tail.get(size) if size else GENESIS_HASH
    if last != head_hash:
        found = "no event" if last is None else f"entry hash {last}"
        raise IntegrityError(
            f"the ledger_head row says position {size} has entry hash {head_hash}, but the "
            f"events table holds {found} there: the head row was altered outside arena-ledger "
            f"or the store is damaged; nothing was {doing}. Run `arena-ledger verify`",
            reason="head_mismatch", position=size,
        )
    leaves = [
        stored_entry_hash(position, tail.get(position), f"; nothing was {doing}")
        for position in range(size - (size & _BELOW_STORED) + 1, size + 1)
    ]
    low, _ = advance_frontier(b"", 0, leaves)
    expected: list[bytes] = []
    for level, index in merkle.right_edge(size):
        if level >= stored_level_min:
            node = stored.get((level, index))
            if node is None:
                raise IntegrityError(
                    f"Merkle node ({level}, {index}) is not stored: the store is damaged; "
                    f"nothing was {doing}. Run `arena-ledger verify --tree`",
                    reason="tree_mismatch", node=[level, index],
                )
            expected.append(node)
    expected.extend(_split_frontier(low))
    if b"".join(expected) == frontier:
        return
    edge = _split_frontier(frontier)
    for (level, index), want, have in zip(merkle.right_edge(size), expected, edge, strict=False):
        if want != have:
            where = f"at node ({level}, {index})"
            break
    else:
        where = f"in length ({len(frontier)} bytes for {len(expected)} nodes)"
    raise IntegrityError(
        f"the ledger_head row's Merkle frontier differs from the stored tree {where}: the "
        f"head row was altered outside arena-ledger or the store is damaged; nothing was "
        f"{doing}. Run `arena-ledger verify --tree`",
        reason="frontier_mismatch", size=size,
    )


class StoredTree:
    """Reads nodes of the stored tree through one connection and answers roots and proofs."""

    def __init__(self, store: Database, conn: Connection, size: int) -> None:
        self._store = store
        self._conn = conn
        self.size = size
        self._get = lru_cache(maxsize=4096)(self._read_node)
        self._known: dict[tuple[int, int], bytes] = {}  # filled by _prefetch, per call

    def get_node(self, level: int, index: int) -> bytes:
        """Returns the hash of perfect subtree (level, index), reading or recomputing it."""
        found = self._known.get((level, index))
        return found if found is not None else self._get(level, index)

    def _prefetch(self, walk: Callable[[merkle.NodeGetter], object]) -> None:
        """Reads every node ``walk`` will ask for in two queries, not one round trip each.

        Which nodes a root or a proof needs depends only on the sizes and the index, never
        on the hashes, so a dry run with blank hashes names them all. Stored nodes come in
        one query, the entry hashes under the lower ones in another; whatever is not found
        is left to ``get_node``'s own reads, which raise the error they always raised.
        """
        wanted: list[tuple[int, int]] = []

        def record(level: int, index: int) -> bytes:
            wanted.append((level, index))
            return _BLANK

        walk(record)
        keys = [
            key
            for key in dict.fromkeys(wanted)
            if key not in self._known and (key[1] + 1) << key[0] <= self.size
        ]
        self._known.update(self._stored_nodes([k for k in keys if k[0] >= stored_level_min]))
        low = [key for key in keys if key[0] < stored_level_min]
        positions = sorted(
            {(index << level) + 1 + offset for level, index in low for offset in range(1 << level)}
        )
        hashes = self._entry_hashes(positions)
        for level, index in low:
            first = (index << level) + 1
            leaves = [hashes.get(position) for position in range(first, first + (1 << level))]
            if all(leaf is not None for leaf in leaves):
                self._known[(level, index)] = merkle.root_from_leaves(
                    [stored_entry_hash(first + i, leaf) for i, leaf in enumerate(leaves)]
                )

    def _stored_nodes(self, keys: list[tuple[int, int]]) -> dict[tuple[int, int], bytes]:
        if not keys:
            return {}
        if self._store.backend == "postgresql":
            rows = self._conn.execute(
                text(
                    "SELECT level, idx, hash FROM merkle_nodes WHERE (level, idx) IN (SELECT * "
                    "FROM unnest(CAST(:l AS smallint[]), CAST(:i AS bigint[])))"
                ),
                {"l": [k[0] for k in keys], "i": [k[1] for k in keys]},
            )
        else:
            rows = self._conn.execute(
                text(
                    "SELECT level, idx, hash FROM merkle_nodes WHERE (level, idx) IN (SELECT "
                    "json_extract(value, '$[0]'), json_extract(value, '$[1]') FROM "
                    "json_each(:pairs))"
                ),
                {"pairs": json.dumps(keys)},
            )
        return {(int(level), int(idx)): bytes(value) for level, idx, value in rows}

    def _entry_hashes(self, positions: list[int]) -> dict[int, str]:
        if not positions:
            return {}
        if self._store.backend == "postgresql":
            rows = self._conn.execute(
                text(
                    "SELECT position, entry_hash FROM events WHERE position = "
                    "ANY(CAST(:p AS bigint[]))"
                ),
                {"p": positions},
            )
        else:
            rows = self._conn.execute(
                text(
                    "SELECT position, entry_hash FROM events WHERE position IN (SELECT value "
                    "FROM json_each(:p))"
                ),
                {"p": json.dumps(positions)},
            )
        return {int(position): str(value) for position, value in rows}

    def _read_node(self, level: int, index: int) -> bytes:
        if (index + 1) << level > self.size:
            raise NotFound(f"Merkle node ({level}, {index}) is beyond size {self.size}")
        if level >= stored_level_min:
            value = self._conn.execute(
                text("SELECT hash FROM merkle_nodes WHERE level = :l AND idx = :i"),
                {"l": level, "i": index},
            ).scalar()
            if value is None:
                raise NotFound(
                    f"Merkle node ({level}, {index}) is not stored; the store is damaged"
                )
            return bytes(value)
        first = (index << level) + 1
        rows = (
            self._conn.execute(
                text(
                    "SELECT entry_hash FROM events WHERE position >= :a AND position <= :b "
                    "ORDER BY position"
                ),
                {"a": first, "b": first + (1 << level) - 1},
            )
            .scalars()
            .all()
        )
        if len(rows) != 1 << level:
            raise NotFound(f"events {first}.. are missing for Merkle node ({level}, {index})")
        return merkle.root_from_leaves(
            [stored_entry_hash(first + i, value) for i, value in enumerate(rows)]
        )

    def entry_hash_range(self, first: int, count: int) -> list[bytes]:
        """Returns the raw entry hashes of leaves ``first`` to ``first + count - 1`` (positions
        ``first + 1`` onwards) in one indexed range read: the data of those leaves, as a
        tlog-tiles entry bundle serves them.

        Leaves past the tree's size are NotFound; a leaf missing inside it, or a hash that
        is not 64 hex digits, is a damaged store (IntegrityError naming the position).
        """
        self._check_run(0, first, count)
        rows = self._conn.execute(
            text(
                "SELECT position, entry_hash FROM events WHERE position >= :a AND position <= :b "
                "ORDER BY position"
            ),
            {"a": first + 1, "b": first + count},
        ).all()
        found = {int(position): value for position, value in rows}
        return [
            stored_entry_hash(position, found.get(position), "; nothing was served")
            for position in range(first + 1, first + count + 1)
        ]

    def level_hashes(self, level: int, first: int, count: int) -> list[bytes]:
        """Returns the hashes of nodes ``(level, first)`` to ``(level, first + count - 1)``,
        left to right, in one indexed range read (what a tlog-tiles tile serves).

        Level 0 is the leaf hashes of the entry hashes; a level of ``stored_level_min`` or
        more reads ``merkle_nodes`` by its primary key; a level between them folds the entry
        hashes under its nodes. A node past the tree's size is NotFound; a stored node
        missing inside it is a damaged store (IntegrityError naming the node).
        """
        self._check_run(level, first, count)
        if level < stored_level_min:
            leaves = self.entry_hash_range(first << level, count << level)
            width = 1 << level
            return [
                merkle.root_from_leaves(leaves[i * width : (i + 1) * width]) for i in range(count)
            ]
        rows = self._conn.execute(
            text(
                "SELECT idx, hash FROM merkle_nodes WHERE level = :l AND idx >= :a AND idx <= :b "
                "ORDER BY idx"
            ),
            {"l": level, "a": first, "b": first + count - 1},
        ).all()
        found = {int(idx): bytes(value) for idx, value in rows}
        for index in range(first, first + count):
            if len(found.get(index, b"")) != merkle.HASH_BYTES:
                raise IntegrityError(
                    f"Merkle node ({level}, {index}) is missing or not a hash, though the tree "
                    f"of size {self.size} holds it: the store is damaged. Run `arena-ledger "
                    "verify --tree`",
                    reason="tree_mismatch", node=[level, index],
                )
        return [found[index] for index in range(first, first + count)]

    def _check_run(self, level: int, first: int, count: int) -> None:
        """Refuses a run of nodes that is empty, negative, or not complete in the tree."""
        for name, value in (("level", level), ("first", first), ("count", count)):
            if type(value) is not int or value < 0:
                raise InvalidInput(f"{name} must be a non-negative integer, got {value!r}")
        if count == 0:
            raise InvalidInput("a run of Merkle nodes needs at least one node")
        if (first + count) << level > self.size:
            raise NotFound(
                f"Merkle nodes ({level}, {first}..{first + count - 1}) are beyond size "
                f"{self.size}",
                level=level, first=first, count=count,
            )

    def root(self, size: int | None = None) -> bytes:
        """Returns the root hash at ``size`` (the tree's size when None)."""
        checked = self._check(size)
        self._prefetch(lambda get: merkle.root(checked, get))
        return merkle.root(checked, self.get_node)

    def inclusion_proof(self, index: int, size: int | None = None) -> list[bytes]:
        """Returns the RFC 9162 inclusion proof of leaf ``index`` in the tree of ``size``."""
        checked = self._check(size)
        self._prefetch(lambda get: merkle.inclusion_proof(index, checked, get))
        return merkle.inclusion_proof(index, checked, self.get_node)

    def consistency_proof(self, size1: int, size2: int | None = None) -> list[bytes]:
        """Returns the RFC 9162 consistency proof from ``size1`` to ``size2``."""
        checked = self._check(size2)
        self._prefetch(lambda get: merkle.consistency_proof(size1, checked, get))
        return merkle.consistency_proof(size1, checked, self.get_node)

    def _check(self, size: int | None) -> int:
        if size is None:
            return self.size
        if type(size) is not int or not 0 <= size <= self.size:
            raise InvalidInput(f"tree size {size!r} is outside 0..{self.size}", size=size)
        return size

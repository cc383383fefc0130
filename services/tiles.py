"""Serves the ledger's Merkle tree as a C2SP tlog-tiles log (https://c2sp.org/tlog-tiles).

A standard transparency-log client fetches the signed checkpoint, then static "tiles": runs
of 256 consecutive Merkle Tree Hashes at heights 0, 8, 16, … (tile level ``L`` holds the
tree's nodes of height ``8·L``), and "entry bundles", the leaves' data. From those alone it
recomputes the signed root and any inclusion or consistency proof.

* **The entry** of leaf ``i`` is the 32-byte entry hash of position ``i + 1``: the tree's
  leaves are the entry hashes (docs/verification.md), so ``SHA-256(0x00 || entry)`` is the
  level-0 tile hash, as RFC 6962 hashes a leaf. An entry bundle serves each as a big-endian
  uint16 length (32) followed by the 32 bytes.
* **Which tree**: the stored checkpoint of the largest tree size (``EventStore
  .largest_checkpoint``). Tiles are served up to its size, never past it, even when the
  ledger has grown since: a tile needing a leaf beyond it is NotFound.
* **Partial tiles** ``.p/W``: served when the checkpoint's tree holds at least ``W`` hashes
  of that tile, so the partial tile of every older checkpoint's size stays available (the
  spec requires those) and has the same bytes as before; a wider one is NotFound.
* **Reading is cheap**: one indexed read of the checkpoint, one of the head, and one range
  read of at most 256 rows (``StoredTree.level_hashes`` / ``entry_hash_range``); the tree
  is never rebuilt.

Paths are parsed strictly, so one tile has one URL: the level a decimal 0..63 without
leading zeros, the index in 3-digit groups (``x001/x234/067``, no leading ``x000`` group),
the width a decimal 1..255 without leading zeros. A malformed path is InvalidInput naming
the element at fault.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Final

from ledger.merkle import HASH_BYTES
from ledger.store import EventStore
from vocabulary.errors import InvalidInput, NotFound

__all__ = [
    "ENTRY_LENGTH_BYTES",
    "TILE_HEIGHT",
    "TILE_LEVEL_MAX",
    "TILE_WIDTH",
    "Tile",
    "parse_tile_path",
    "served_checkpoint",
    "tile_bytes",
]

TILE_HEIGHT: Final = 8
"""Tree levels one tile spans: tile level ``L`` holds the nodes of height ``8·L``."""

TILE_WIDTH: Final = 1 << TILE_HEIGHT
"""Hashes in a full tile (256, 8,192 bytes) and entries in a full entry bundle."""

TILE_LEVEL_MAX: Final = 63
"""Highest tile level a path may name (the spec's bound; levels from 8 hold no hash for a
tree below 2**64 leaves, so they are always NotFound)."""

ENTRY_LENGTH_BYTES: Final = 2
"""Length prefix of each entry in a bundle: a big-endian uint16."""

_INDEX_ELEMENTS_MAX: Final = 7  # 1000**7 tiles of 256 leaves pass 2**64 leaves
_PATH_CHARS_MAX: Final = 64  # the longest valid path, "entries/x…/x…/…/999.p/255", is ~40
_LEVEL = re.compile(r"0|[1-9][0-9]?")
_WIDTH = re.compile(r"[1-9][0-9]{0,2}")
_GROUP = re.compile(r"[0-9]{3}")
_ENTRIES: Final = "entries"
_PARTIAL: Final = ".p"


@dataclass(frozen=True, slots=True)
class Tile:
    """Names one tile or entry bundle: ``level`` (None for an entry bundle), ``index``
    within the level, and ``width`` (None for a full tile, else 1..255 hashes)."""

    level: int | None
    index: int
    width: int | None = None

    @property
    def height(self) -> int:
        """Returns the tree height of the nodes the tile holds (0 for an entry bundle)."""
        return 0 if self.level is None else TILE_HEIGHT * self.level

    @property
    def hashes(self) -> int:
        """Returns how many hashes (or entries) the tile holds: 256 unless partial."""
        return TILE_WIDTH if self.width is None else self.width

    def path(self) -> str:
        """Returns the tile's path below ``/tile/``, as the spec spells it."""
        level = _ENTRIES if self.level is None else str(self.level)
        partial = "" if self.width is None else f"{_PARTIAL}/{self.width}"
        return f"{level}/{encode_index(self.index)}{partial}"


def encode_index(index: int) -> str:
    """Returns a tile index as path elements: 3-digit groups, all but the last with ``x``."""
    groups = [f"{index % 1000:03d}"]
    index //= 1000
    while index:
        groups.append(f"x{index % 1000:03d}")
        index //= 1000
    return "/".join(reversed(groups))


def _refuse(path: str, element: str, why: str) -> InvalidInput:
    return InvalidInput(
        f"tile path {path!r}: {element!r} {why}", element=element, tile_path=path
    )


def parse_tile_path(path: str) -> Tile:
    """Returns the tile that ``path`` (what follows ``/tile/``: ``<L>/<N>[.p/<W>]`` or
    ``entries/<N>[.p/<W>]``) names; InvalidInput names the element at fault."""
    if len(path) > _PATH_CHARS_MAX:
        raise InvalidInput(
            f"tile path is {len(path)} characters; no tile's is over {_PATH_CHARS_MAX}",
            tile_path=path[:_PATH_CHARS_MAX] + "…",
        )
    elements = path.split("/")
    first, rest = elements[0], elements[1:]
    level: int | None = None
    if first != _ENTRIES:
        if not _LEVEL.fullmatch(first) or int(first) > TILE_LEVEL_MAX:
            raise _refuse(path, first, f"is not a tile level: a decimal 0..{TILE_LEVEL_MAX} "
                          "without leading zeros, or 'entries'")
        level = int(first)
    width: int | None = None
    if len(rest) >= 2 and rest[-2].endswith(_PARTIAL):
        if not _WIDTH.fullmatch(rest[-1]) or int(rest[-1]) >= TILE_WIDTH:
            raise _refuse(path, rest[-1], f"is not a partial tile width: a decimal "
                          f"1..{TILE_WIDTH - 1} without leading zeros")
        width = int(rest[-1])
        rest = [*rest[:-2], rest[-2][: -len(_PARTIAL)]]
    return Tile(level, _parse_index(path, rest), width)


def _parse_index(path: str, groups: list[str]) -> int:
    """Returns the index that ``groups`` spell, refusing any other spelling of it."""
    if not groups or groups == [""]:
        raise InvalidInput(f"tile path {path!r} has no tile index (such as 000 or x001/234)",
                           tile_path=path)
    if len(groups) > _INDEX_ELEMENTS_MAX:
        raise InvalidInput(
            f"tile path {path!r}: the index has {len(groups)} elements; no tile of a tree "
            f"below 2**64 leaves needs more than {_INDEX_ELEMENTS_MAX}",
            tile_path=path,
        )
    index = 0
    for number, group in enumerate(groups, start=1):
        last = number == len(groups)
        digits = group if last else group.removeprefix("x")
        if (not last and not group.startswith("x")) or not _GROUP.fullmatch(digits):
            shape = "3 digits" if last else "'x' and 3 digits"
            place = "the last index element" if last else "an index element before the last"
            raise _refuse(path, group, f"is not {shape}, as {place} must be")
        index = index * 1000 + int(digits)
    if len(groups) > 1 and groups[0] == "x000":
        raise _refuse(path, groups[0], f"is a leading zero group: index {index} is spelled "
                      f"{encode_index(index)}")
    return index


def served_checkpoint(store: EventStore) -> dict[str, Any]:
    """Returns the checkpoint the log serves: the stored one of the largest tree size (the
    newest of that size), as ``EventStore.checkpoints`` lists one; NotFound when none is."""
    found = store.largest_checkpoint()
    if found is None:
        raise NotFound(
            "no checkpoint is stored, so no tlog tile is served; `arena-ledger checkpoint "
            "--key KEY` signs the head"
        )
    return found


def tile_bytes(store: EventStore, tile: Tile) -> bytes:
    """Returns the bytes of ``tile`` in the tree of the served checkpoint: its hashes one
    after the other, or for an entry bundle each entry hash behind its uint16 length.

    NotFound when the checkpoint's tree does not hold the tile: a full tile not yet
    complete, a partial tile wider than the hashes it holds there, or a level past the top.
    """
    size = int(served_checkpoint(store)["tree_size"])
    first = tile.index * TILE_WIDTH
    held = (size >> tile.height) - first  # hashes of this tile the checkpoint's tree holds
    if held < tile.hashes:
        raise NotFound(_beyond(tile, size, held), tile_path=tile.path(), tree_size=size)
    with store.tree() as tree:
        if tile.level is None:
            prefix = HASH_BYTES.to_bytes(ENTRY_LENGTH_BYTES, "big")  # every entry is a hash
            return b"".join(prefix + entry for entry in tree.entry_hash_range(first, tile.hashes))
        return b"".join(tree.level_hashes(tile.height, first, tile.hashes))


def _beyond(tile: Tile, size: int, held: int) -> str:
    """Says why the checkpoint's tree lacks ``tile`` and which tile it holds there."""
    what = "entry bundle" if tile.level is None else "tile"
    start = f"{what} {tile.path()} is not in the tree of the served checkpoint ({size} leaves)"
    if held <= 0:
        return f"{start}: it holds no {'entry' if tile.level is None else 'hash'} there"
    there = Tile(tile.level, tile.index, held if held < TILE_WIDTH else None)
    return f"{start}: it holds {min(held, TILE_WIDTH)} there, as {there.path()}"

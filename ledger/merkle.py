"""Computes and verifies the RFC 9162 Merkle tree over the ledger's entry hashes.

The ledger's log is the Merkle tree of RFC 9162 (Certificate Transparency v2) §2.1, whose
leaves are the 32-byte entry hashes of the hash chain (docs/concepts.md):

    leaf_hash(d)      = SHA-256(0x00 || d)
    node_hash(l, r)   = SHA-256(0x01 || l || r)
    MTH({})           = SHA-256("")
    MTH(D[0:n])       = node_hash(MTH(D[0:k]), MTH(D[k:n]))   k = largest power of two < n

``leaf_hash`` accepts any bytes, so the published RFC 6962 test vectors (whose leaves are
arbitrary data) run against the same code as the ledger (whose leaves are entry hashes).

Three layers live here, none of which touches a database:

* reference functions over a list of leaves (``root_from_leaves`` and friends) that follow
  the RFC's recursive definitions literally and serve as the oracle in tests;
* the RFC 9162 §2.1.3.2 and §2.1.4.2 verifiers, which answer ``True`` or ``False`` and never
  raise on a bad proof;
* an incremental design a store persists. A tree is stored as its complete perfect
  subtrees: node ``(level, index)`` is the hash of leaves
  ``[index * 2**level, (index + 1) * 2**level)``. Appending leaf ``n`` completes the level-0
  node ``(0, n)`` and one more node for every trailing one bit of ``n``
  (``nodes_for_append``); roots and proofs for any size up to the stored one then read
  O(log n) nodes through a ``get_node(level, index)`` callable.

``CompactRange`` keeps only the right edge (one node per set bit of the size) and is what
offline bundle verification uses when it needs the root alone; ``MerkleTree`` keeps every
node in memory and answers proofs.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Mapping, MutableMapping, Sequence
from typing import Final

from vocabulary.errors import InvalidInput, NotFound

__all__ = [
    "EMPTY_ROOT",
    "HASH_BYTES",
    "TREE_SIZE_MAX",
    "CompactRange",
    "MerkleTree",
    "Node",
    "NodeGetter",
    "consistency_proof",
    "consistency_proof_from_leaves",
    "inclusion_proof",
    "inclusion_proof_from_leaves",
    "leaf_hash",
    "node_hash",
    "nodes_for_append",
    "range_hash",
    "right_edge",
    "root",
    "root_from_leaves",
    "verify_consistency",
    "verify_inclusion",
    "with_overlay",
]

HASH_BYTES: Final = 32
"""Length of every hash in the tree (SHA-256), in bytes."""

TREE_SIZE_MAX: Final = 2**64 - 1
"""Largest tree size, in leaves; checkpoints and Go tooling carry sizes as uint64."""

EMPTY_ROOT: Final = hashlib.sha256(b"").digest()
"""Root hash of the empty tree: SHA-256 of the empty string (RFC 9162 §2.1.1)."""

_LEAF_PREFIX: Final = b"\x00"
_NODE_PREFIX: Final = b"\x01"
_sha256 = hashlib.sha256

Node = tuple[int, int, bytes]
"""A stored node ``(level, index, hash)``: the hash of 2**level leaves from index * 2**level."""

NodeGetter = Callable[[int, int], bytes]
"""Reads the stored hash of node ``(level, index)``; raises if the node is not stored."""


# --------------------------------------------------------------------------- hashing


def leaf_hash(data: bytes) -> bytes:
    """Returns SHA-256(0x00 || data), the hash of one leaf of any length."""
    return _sha256(_LEAF_PREFIX + data).digest()


def node_hash(left: bytes, right: bytes) -> bytes:
    """Returns SHA-256(0x01 || left || right), the hash of an interior node."""
    return _sha256(_NODE_PREFIX + left + right).digest()


def _split(n: int) -> int:
    """Returns the largest power of two strictly below ``n`` (for n >= 2)."""
    return 1 << ((n - 1).bit_length() - 1)


# ------------------------------------------------------------ reference (from leaves)


def root_from_leaves(leaves: Sequence[bytes]) -> bytes:
    """Returns MTH(D[0:n]) of raw leaves, following the RFC 9162 definition literally."""
    n = len(leaves)
    if n == 0:
        return EMPTY_ROOT
    if n == 1:
        return leaf_hash(leaves[0])
    k = _split(n)
    return node_hash(root_from_leaves(leaves[:k]), root_from_leaves(leaves[k:]))


def inclusion_proof_from_leaves(index: int, leaves: Sequence[bytes]) -> list[bytes]:
    """Returns PATH(index, D[0:n]) of raw leaves, following RFC 9162 §2.1.3.1 literally."""
    n = len(leaves)
    if not 0 <= index < n:
        raise InvalidInput(
            f"leaf index {index} is outside a tree of {n} leaves", index=index, tree_size=n
        )
    if n == 1:
        return []
    k = _split(n)
    if index < k:
        return [*inclusion_proof_from_leaves(index, leaves[:k]), root_from_leaves(leaves[k:])]
    return [*inclusion_proof_from_leaves(index - k, leaves[k:]), root_from_leaves(leaves[:k])]


def consistency_proof_from_leaves(size1: int, leaves: Sequence[bytes]) -> list[bytes]:
    """Returns PROOF(size1, D[0:n]) of raw leaves, following RFC 9162 §2.1.4.1 literally."""
    n = len(leaves)
    if not 0 <= size1 <= n:
        raise InvalidInput(f"old size {size1} is outside 0..{n}", size1=size1, size2=n)
    if size1 in (0, n):
        return []
    return _subproof_from_leaves(size1, leaves, True)


def _subproof_from_leaves(m: int, leaves: Sequence[bytes], complete: bool) -> list[bytes]:
    n = len(leaves)
    if m == n:
        return [] if complete else [root_from_leaves(leaves)]
    k = _split(n)
    if m <= k:
        return [*_subproof_from_leaves(m, leaves[:k], complete), root_from_leaves(leaves[k:])]
    return [*_subproof_from_leaves(m - k, leaves[k:], False), root_from_leaves(leaves[:k])]


# -------------------------------------------------------------------------- verifiers


def _is_hash(value: object) -> bool:
    return isinstance(value, bytes) and len(value) == HASH_BYTES


def _is_size(value: object) -> bool:
    return type(value) is int and 0 <= value <= TREE_SIZE_MAX


def _hash_list(proof: object) -> list[bytes] | None:
    """Returns the proof as a list of 32-byte hashes, or None when it is not one."""
    if isinstance(proof, (bytes, str)) or not isinstance(proof, Iterable):
        return None
    hashes = list(proof)
    return hashes if all(_is_hash(h) for h in hashes) else None


def verify_inclusion(
    leaf_index: int, tree_size: int, leaf_hash: bytes, proof: Sequence[bytes], root: bytes
) -> bool:
    """Reports whether ``proof`` shows ``leaf_hash`` at ``leaf_index`` under ``root``.

    This is RFC 9162 §2.1.3.2 step by step. ``leaf_hash`` is the already hashed leaf
    (``leaf_hash(entry)``). A malformed argument (wrong length, wrong type, index out of
    range) is a failed verification, never an exception.
    """
    path = _hash_list(proof)
    if path is None or not (_is_hash(leaf_hash) and _is_hash(root)):
        return False
    # Step 1: the leaf must lie inside the tree.
    if not (_is_size(leaf_index) and _is_size(tree_size) and leaf_index < tree_size):
        return False
    fn, sn = leaf_index, tree_size - 1  # step 2
    r = leaf_hash  # step 3
    for p in path:  # step 4
        if sn == 0:
            return False
        if fn & 1 or fn == sn:
            r = node_hash(p, r)
            while fn and not fn & 1:
                fn >>= 1
                sn >>= 1
        else:
            r = node_hash(r, p)
        fn >>= 1
        sn >>= 1
    return sn == 0 and r == root  # step 5


def verify_consistency(
    size1: int, size2: int, root1: bytes, root2: bytes, proof: Sequence[bytes]
) -> bool:
    """Reports whether ``proof`` shows the tree of ``size1`` is a prefix of that of ``size2``.

    For ``0 < size1 < size2`` this is RFC 9162 §2.1.4.2 step by step. The RFC leaves the
    trivial cases open; they are decided strictly: ``size1 == size2`` needs an empty proof
    and equal roots, ``size1 == 0`` needs an empty proof and ``root1`` equal to the empty
    root. A malformed argument is a failed verification, never an exception.
    """
    path = _hash_list(proof)
    if path is None or not (_is_hash(root1) and _is_hash(root2)):
        return False
    if not (_is_size(size1) and _is_size(size2) and size1 <= size2):
        return False
    if size1 == size2:
        return not path and root1 == root2
    if size1 == 0:
        return not path and root1 == EMPTY_ROOT
    return _verify_consistency_rfc(size1, size2, root1, root2, path)


def _verify_consistency_rfc(
    first: int, second: int, first_hash: bytes, second_hash: bytes, path: list[bytes]
) -> bool:
    """Runs RFC 9162 §2.1.4.2 for 0 < first < second; names follow the RFC."""
    if not path:  # step 1
        return False
    if first & (first - 1) == 0:  # step 2
        path = [first_hash, *path]
    fn, sn = first - 1, second - 1  # step 3
    while fn & 1:  # step 4
        fn >>= 1
        sn >>= 1
    fr = sr = path[0]  # step 5
    for c in path[1:]:  # step 6
        if sn == 0:
            return False
        if fn & 1 or fn == sn:
            fr = node_hash(c, fr)
            sr = node_hash(c, sr)
            while fn and not fn & 1:
                fn >>= 1
                sn >>= 1
        else:
            sr = node_hash(sr, c)
        fn >>= 1
        sn >>= 1
    return sn == 0 and fr == first_hash and sr == second_hash  # step 7


# ------------------------------------------------------------ incremental (stored nodes)


def _check_size(name: str, value: int, *, upper: int = TREE_SIZE_MAX) -> None:
    if type(value) is not int or not 0 <= value <= upper:
        raise InvalidInput(
            f"{name} must be an integer in 0..{upper}, got {value!r}", **{name: value}
        )


def _check_hash(name: str, value: bytes) -> None:
    if not _is_hash(value):
        raise InvalidInput(
            f"{name} must be {HASH_BYTES} bytes, got {type(value).__name__} "
            f"of length {len(value) if isinstance(value, (bytes, bytearray)) else '?'}",
            field=name,
        )


def with_overlay(get_node: NodeGetter, overlay: Mapping[tuple[int, int], bytes]) -> NodeGetter:
    """Returns a node reader that looks in ``overlay`` first and in ``get_node`` otherwise."""

    def read(level: int, index: int) -> bytes:
        found = overlay.get((level, index))
        return found if found is not None else get_node(level, index)

    return read


def nodes_for_append(
    tree_size: int,
    leaf_hash: bytes,
    get_node: NodeGetter,
    overlay: MutableMapping[tuple[int, int], bytes] | None = None,
) -> list[Node]:
    """Returns the nodes that appending the leaf at index ``tree_size`` completes.

    The first node is ``(0, tree_size, leaf_hash)``; each further one is the parent that
    the previous one completes, so there is one per trailing one bit of ``tree_size``.
    Left siblings are read from ``overlay`` when present there, else from ``get_node``.
    When ``overlay`` is given the new nodes are also written into it, so a batch of
    appends can be computed against one overlay before any of them is stored.
    """
    _check_size("tree_size", tree_size, upper=TREE_SIZE_MAX - 1)
    _check_hash("leaf_hash", leaf_hash)
    read = get_node if overlay is None else with_overlay(get_node, overlay)
    nodes: list[Node] = [(0, tree_size, leaf_hash)]
    level, index, value = 0, tree_size, leaf_hash
    while index & 1:
        value = node_hash(read(level, index - 1), value)
        level += 1
        index >>= 1
        nodes.append((level, index, value))
    if overlay is not None:
        for node_level, node_index, node_value in nodes:
            overlay[(node_level, node_index)] = node_value
    return nodes


def _fold_right(hashes: Sequence[bytes]) -> bytes:
    """Returns node_hash(h0, node_hash(h1, ... h_last)), the root over perfect subtrees."""
    acc = hashes[-1]
    for left in reversed(hashes[:-1]):
        acc = node_hash(left, acc)
    return acc


def range_hash(start: int, end: int, get_node: NodeGetter) -> bytes:
    """Returns MTH(D[start:end]) from stored nodes, one per set bit of ``end - start``.

    The range must decompose into complete subtrees the RFC way: ``start`` must be a
    multiple of the largest power of two not above ``end - start``. Every range met while
    building an RFC 9162 proof has this shape.
    """
    _check_size("start", start)
    _check_size("end", end)
    width = end - start
    if width < 0:
        raise InvalidInput(f"range [{start}, {end}) is reversed", start=start, end=end)
    if width == 0:
        return EMPTY_ROOT
    top = width.bit_length() - 1
    if start & ((1 << top) - 1):
        raise InvalidInput(
            f"range [{start}, {end}) does not start on a multiple of {1 << top}",
            start=start,
            end=end,
        )
    hashes: list[bytes] = []
    position = start
    for level in range(top, -1, -1):
        if width >> level & 1:
            hashes.append(get_node(level, position >> level))
            position += 1 << level
    return _fold_right(hashes)


def root(size: int, get_node: NodeGetter) -> bytes:
    """Returns the root hash of the tree's first ``size`` leaves from O(log n) stored nodes."""
    _check_size("size", size)
    return range_hash(0, size, get_node)


def inclusion_proof(index: int, size: int, get_node: NodeGetter) -> list[bytes]:
    """Returns PATH(index, D[0:size]) from O(log n) stored nodes, leaf side first."""
    _check_size("size", size)
    if type(index) is not int or not 0 <= index < size:
        raise InvalidInput(
            f"leaf index {index!r} is outside a tree of {size} leaves", index=index, tree_size=size
        )
    path: list[bytes] = []
    lo, hi = 0, size
    while hi - lo > 1:
        k = _split(hi - lo)
        if index < lo + k:
            path.append(range_hash(lo + k, hi, get_node))
            hi = lo + k
        else:
            path.append(get_node(k.bit_length() - 1, lo // k))
            lo += k
    path.reverse()
    return path


def consistency_proof(size1: int, size2: int, get_node: NodeGetter) -> list[bytes]:
    """Returns PROOF(size1, D[0:size2]) from O(log n) stored nodes, smallest subtree first.

    The proof is empty when ``size1`` is 0 or equals ``size2`` (nothing to prove).
    """
    _check_size("size2", size2)
    if type(size1) is not int or not 0 <= size1 <= size2:
        raise InvalidInput(f"old size {size1!r} is outside 0..{size2}", size1=size1, size2=size2)
    if size1 in (0, size2):
        return []
    path: list[bytes] = []
    lo, hi, complete = 0, size2, True
    while size1 != hi:
        k = _split(hi - lo)
        if size1 <= lo + k:
            path.append(range_hash(lo + k, hi, get_node))
            hi = lo + k
        else:
            path.append(get_node(k.bit_length() - 1, lo // k))
            lo += k
            complete = False
    if not complete:
        path.append(range_hash(lo, hi, get_node))
    path.reverse()
    return path


# ---------------------------------------------------------------------- in-memory trees


def right_edge(size: int) -> list[tuple[int, int]]:
    """Returns (level, index) of each perfect subtree on the right edge of a tree of
    ``size`` leaves, largest first: one per set bit of ``size`` (what a compact range, or
    the store's frontier, holds, in its order)."""
    keys: list[tuple[int, int]] = []
    start = 0
    for level in range(size.bit_length() - 1, -1, -1):
        if size >> level & 1:
            keys.append((level, start >> level))
            start += 1 << level
    return keys


class CompactRange:
    """Holds the right edge of a tree: one perfect subtree hash per set bit of its size.

    It needs O(log n) memory whatever the size, so a verifier streaming a million entries
    computes the root without keeping the tree.
    """

    __slots__ = ("_edge", "_size")

    def __init__(self) -> None:
        """Starts an empty range."""
        self._size = 0
        # Subtree hashes from the largest (leftmost) to the smallest (rightmost).
        self._edge: list[bytes] = []

    @classmethod
    def from_tree(cls, size: int, get_node: NodeGetter) -> CompactRange:
        """Returns the compact range of the first ``size`` leaves of a stored tree."""
        _check_size("size", size)
        compact = cls()
        compact._edge = [get_node(level, index) for level, index in right_edge(size)]
        compact._size = size
        return compact

    @property
    def size(self) -> int:
        """Returns the number of leaves appended so far."""
        return self._size

    def append(self, entry: bytes) -> None:
        """Appends one leaf given as raw data (hashed here with ``leaf_hash``)."""
        self.append_leaf_hash(_sha256(_LEAF_PREFIX + entry).digest())

    def append_leaf_hash(self, leaf_hash: bytes) -> None:
        """Appends one leaf given as its 32-byte leaf hash."""
        _check_hash("leaf_hash", leaf_hash)
        edge, size, value = self._edge, self._size, leaf_hash
        while size & 1:
            value = _sha256(_NODE_PREFIX + edge.pop() + value).digest()
            size >>= 1
        edge.append(value)
        self._size += 1

    def extend(self, entries: Iterable[bytes]) -> None:
        """Appends many leaves given as raw data; this is the fast path for bulk loads."""
        # Inlined append: a method call per leaf costs more than the two hashes it does.
        edge, size, sha, leaf, node = self._edge, self._size, _sha256, _LEAF_PREFIX, _NODE_PREFIX
        pop, push = edge.pop, edge.append
        for entry in entries:
            value = sha(leaf + entry).digest()
            carry = size
            while carry & 1:
                value = sha(node + pop() + value).digest()
                carry >>= 1
            push(value)
            size += 1
        self._size = size

    def root(self) -> bytes:
        """Returns the root hash of all leaves appended so far."""
        return _fold_right(self._edge) if self._edge else EMPTY_ROOT

    def nodes(self) -> list[Node]:
        """Returns the right-edge nodes as ``(level, index, hash)``, largest first."""
        return [
            (level, index, value)
            for (level, index), value in zip(right_edge(self._size), self._edge, strict=True)
        ]


class MerkleTree:
    """Keeps every complete node of a tree in memory and answers roots and proofs.

    It implements the ``get_node`` interface a store provides, so tests and offline bundle
    verification exercise the very functions the store uses.
    """

    __slots__ = ("_levels",)

    def __init__(self) -> None:
        """Starts an empty tree."""
        # One list per level instead of a dict keyed by (level, index): nodes of a level
        # complete left to right, so a list index is the node index, and a large tree
        # costs a fraction of the memory tuple keys would.
        self._levels: list[list[bytes]] = [[]]

    @property
    def size(self) -> int:
        """Returns the number of leaves appended so far."""
        return len(self._levels[0])

    def append(self, entry: bytes) -> int:
        """Appends one leaf given as raw data and returns its index."""
        return self.append_leaf_hash(_sha256(_LEAF_PREFIX + entry).digest())

    def append_leaf_hash(self, leaf_hash: bytes) -> int:
        """Appends one leaf given as its 32-byte leaf hash and returns its index."""
        _check_hash("leaf_hash", leaf_hash)
        index = self.size
        self._push(leaf_hash)
        return index

    def extend(self, entries: Iterable[bytes]) -> None:
        """Appends many leaves given as raw data; this is the fast path for bulk loads."""
        sha, leaf = _sha256, _LEAF_PREFIX
        push = self._push
        for entry in entries:
            push(sha(leaf + entry).digest())

    def _push(self, value: bytes) -> None:
        levels, sha, node = self._levels, _sha256, _NODE_PREFIX
        current = levels[0]
        index = len(current)
        current.append(value)
        level = 0
        while index & 1:
            value = sha(node + current[index - 1] + value).digest()
            level += 1
            index >>= 1
            if level == len(levels):
                levels.append([])
            current = levels[level]
            current.append(value)

    def get_node(self, level: int, index: int) -> bytes:
        """Returns the hash of complete node ``(level, index)``; raises NotFound otherwise."""
        levels = self._levels
        if 0 <= level < len(levels) and 0 <= index < len(levels[level]):
            return levels[level][index]
        raise NotFound(
            f"no complete Merkle node at level {level} index {index} "
            f"in a tree of {self.size} leaves",
            level=level,
            index=index,
            tree_size=self.size,
        )

    def root(self, size: int | None = None) -> bytes:
        """Returns the root hash at ``size`` leaves (default: the current size)."""
        return root(self._size_or_current(size), self.get_node)

    def inclusion_proof(self, index: int, size: int | None = None) -> list[bytes]:
        """Returns the inclusion proof of leaf ``index`` at ``size`` leaves (default: current)."""
        return inclusion_proof(index, self._size_or_current(size), self.get_node)

    def consistency_proof(self, size1: int, size2: int | None = None) -> list[bytes]:
        """Returns the consistency proof from ``size1`` to ``size2`` (default: current)."""
        return consistency_proof(size1, self._size_or_current(size2), self.get_node)

    def _size_or_current(self, size: int | None) -> int:
        if size is None:
            return self.size
        _check_size("size", size, upper=self.size)
        return size

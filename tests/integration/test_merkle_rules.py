"""Pins Merkle-tree rules of ``ledger/merkle.py`` and ``ledger/stored_tree.py`` that no test held.

A hand-made mutation review of the two modules found these rules unpinned: a mutant that broke
each one still passed every test. Expected roots and paths come from the plain RFC 9162
recursion below (``_mth``, ``_path``, ``_proof``, over ``hashlib`` alone), never from the code
under test. The rules: a verifier takes only 32-byte hashes and ``int`` sizes (a ``bool`` is
neither a size nor an index), proof builders and tree readers refuse out-of-range or mistyped
arguments with an ``InvalidInput`` that names the argument instead of answering for a tree of
another size, ranges must be whole subtrees even two leaves wide, and roots and proofs at sizes
around powers of two agree with the RFC wherever they are computed (in memory, compact, stored).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable
from functools import partial
from typing import Any

import pytest
from test_verifiable_proofs import _entries, _fill  # same directory, prepend import mode

from ledger import merkle
from ledger.merkle import (
    EMPTY_ROOT,
    TREE_SIZE_MAX,
    CompactRange,
    MerkleTree,
    inclusion_proof_from_leaves,
    nodes_for_append,
    verify_consistency,
    verify_inclusion,
)
from ledger.records import EventDraft
from ledger.store import EventStore
from vocabulary.errors import InvalidInput, NotFound

Draft = Callable[..., EventDraft]

# Sizes around the powers of two, where the RFC's split point k moves.
EDGE_SIZES = [0, 1, 2, 3, 4, 5, 7, 8, 9, 15, 16, 17, 31, 32, 33, 63, 64, 65]


# ------------------------------------------------- independent RFC 9162 reference (hashlib)


def _leaf(data: bytes) -> bytes:
    return hashlib.sha256(b"\x00" + data).digest()


def _node(left: bytes, right: bytes) -> bytes:
    return hashlib.sha256(b"\x01" + left + right).digest()


def _k(n: int) -> int:
    k = 1
    while k * 2 < n:
        k *= 2
    return k


def _mth(data: list[bytes]) -> bytes:
    """MTH(D[n]) of RFC 9162 §2.1.1."""
    if not data:
        return hashlib.sha256(b"").digest()
    if len(data) == 1:
        return _leaf(data[0])
    k = _k(len(data))
    return _node(_mth(data[:k]), _mth(data[k:]))


def _path(m: int, data: list[bytes]) -> list[bytes]:
    """PATH(m, D[n]) of RFC 9162 §2.1.3.1."""
    if len(data) == 1:
        return []
    k = _k(len(data))
    if m < k:
        return [*_path(m, data[:k]), _mth(data[k:])]
    return [*_path(m - k, data[k:]), _mth(data[:k])]


def _subproof(m: int, data: list[bytes], b: bool) -> list[bytes]:
    if m == len(data):
        return [] if b else [_mth(data)]
    k = _k(len(data))
    if m <= k:
        return [*_subproof(m, data[:k], b), _mth(data[k:])]
    return [*_subproof(m - k, data[k:], False), _mth(data[:k])]


def _proof(m: int, data: list[bytes]) -> list[bytes]:
    """PROOF(m, D[n]) of RFC 9162 §2.1.4.1 (empty for m = 0 or m = n)."""
    return [] if m in (0, len(data)) else _subproof(m, data, True)


def _data(size: int) -> list[bytes]:
    return [hashlib.sha256(b"rule-%d" % i).digest() for i in range(size)]


def _tree(data: list[bytes]) -> MerkleTree:
    tree = MerkleTree()
    tree.extend(data)
    return tree


def _some(tag: bytes) -> bytes:
    return hashlib.sha256(tag).digest()


# ------------------------------------------------------------ verifiers: what a hash is


def test_a_value_longer_than_32_bytes_is_not_a_hash_to_the_verifiers() -> None:
    # A 33-byte "leaf hash" equal to a 33-byte "root" proved itself as a one-leaf tree when
    # only a minimum length was checked.
    long = _some(b"x") + b"\x00"
    leaf = _leaf(b"x")
    assert verify_inclusion(0, 1, leaf, [], leaf)
    assert not verify_inclusion(0, 1, long, [], long)
    root = _mth(_data(3))
    assert verify_consistency(3, 3, root, root, [])
    assert not verify_consistency(3, 3, root + b"\x00", root + b"\x00", [])
    data = _data(2)
    assert verify_inclusion(0, 2, _leaf(data[0]), [_leaf(data[1]) + b"\x00"], _mth(data)) is False


def test_a_leaf_hash_that_is_not_bytes_fails_inclusion_without_raising() -> None:
    # The leaf is checked like the root: a str never reaches the hash function.
    data = _data(2)
    path, root = _path(0, data), _mth(data)
    assert verify_inclusion(0, 2, _leaf(data[0]), path, root)
    assert verify_inclusion(0, 2, _leaf(data[0]).hex(), path, root) is False  # type: ignore[arg-type]
    assert verify_inclusion(0, 2, None, path, root) is False  # type: ignore[arg-type]


def test_a_bool_is_neither_a_tree_size_nor_a_leaf_index_to_the_verifiers() -> None:
    data = _data(2)
    leaf = _leaf(data[0])
    assert verify_inclusion(0, 1, leaf, [], leaf)
    assert verify_inclusion(0, True, leaf, [], leaf) is False  # type: ignore[arg-type]
    root1, root2 = _mth(data[:1]), _mth(data)
    assert verify_consistency(1, 2, root1, root2, _proof(1, data))
    assert verify_consistency(True, 2, root1, root2, _proof(1, data)) is False  # type: ignore[arg-type]
    assert verify_consistency(1, True, root1, root1, []) is False  # type: ignore[arg-type]
    assert verify_consistency(True, True, root1, root1, []) is False  # type: ignore[arg-type]


def test_the_last_leaf_of_the_largest_tree_verifies_and_one_size_more_does_not() -> None:
    # A tree of 2**64 - 1 leaves has one perfect subtree per bit; the last leaf's path is the
    # 63 subtree hashes to its left, smallest first. The verifier takes the uint64 maximum.
    leaf = _leaf(b"last")
    path = [_some(b"subtree-%d" % level) for level in range(1, 64)]
    root = leaf
    for sibling in path:
        root = _node(sibling, root)
    assert verify_inclusion(TREE_SIZE_MAX - 1, TREE_SIZE_MAX, leaf, path, root)
    assert not verify_inclusion(TREE_SIZE_MAX, TREE_SIZE_MAX + 1, leaf, path, root)
    assert not verify_inclusion(TREE_SIZE_MAX - 1, TREE_SIZE_MAX, leaf, path[:-1], root)


# ------------------------------------------------ proof builders: bounds and what they name


def test_the_reference_inclusion_path_refuses_the_index_one_past_the_last_leaf() -> None:
    data = _data(5)
    assert inclusion_proof_from_leaves(4, data) == _path(4, data)
    for size in (1, 5):
        with pytest.raises(InvalidInput, match=f"leaf index {size} is outside a tree of {size}"):
            inclusion_proof_from_leaves(size, data[:size])


def test_builders_refuse_a_bool_index_or_size_instead_of_proving_for_leaf_or_size_one() -> None:
    tree = _tree(_data(4))
    get = tree.get_node
    assert merkle.inclusion_proof(1, 4, get) == _path(1, _data(4))
    with pytest.raises(InvalidInput, match="leaf index True is outside a tree of 4 leaves"):
        merkle.inclusion_proof(True, 4, get)  # type: ignore[arg-type]
    with pytest.raises(InvalidInput, match=re.escape("leaf index 1.0 is outside")):
        merkle.inclusion_proof(1.0, 4, get)  # type: ignore[arg-type]
    with pytest.raises(InvalidInput, match=re.escape("old size True is outside 0..4")):
        merkle.consistency_proof(True, 4, get)  # type: ignore[arg-type]
    with pytest.raises(InvalidInput, match=re.escape("size must be an integer in 0..")):
        merkle.inclusion_proof(0, True, get)  # type: ignore[arg-type]
    with pytest.raises(InvalidInput, match=re.escape("size2 must be an integer in 0..")):
        merkle.consistency_proof(1, True, get)  # type: ignore[arg-type]
    with pytest.raises(InvalidInput, match=re.escape("size2 must be an integer in 0..")):
        merkle.consistency_proof(0, -1, get)


@pytest.mark.parametrize("size", [-1, True, TREE_SIZE_MAX + 1])
def test_root_names_the_size_it_refuses(size: Any) -> None:
    # The error names the caller's argument ("size"), not the range_hash bound it feeds.
    tree = _tree(_data(2))
    with pytest.raises(InvalidInput, match=r"^size must be an integer in 0\.\.") as caught:
        merkle.root(size, tree.get_node)
    assert caught.value.context == {"size": size}


def test_a_two_leaf_range_must_start_on_an_even_leaf() -> None:
    # D[1:3] is not a subtree: the node (1, 0) covers D[0:2] and must not stand in for it.
    tree = _tree(_data(4))
    assert merkle.range_hash(2, 4, tree.get_node) == _mth(_data(4)[2:4])
    for start, end in [(1, 3), (3, 6)]:
        refused = f"range [{start}, {end}) does not start on a multiple of 2"
        with pytest.raises(InvalidInput, match=re.escape(refused)):
            merkle.range_hash(start, end, tree.get_node)


# ---------------------------------------------------------------- in-memory trees' surface


def test_merkle_tree_has_no_node_at_a_negative_level_or_index() -> None:
    tree = _tree(_data(4))
    assert tree.get_node(2, 0) == _mth(_data(4))
    for level, index in [(-1, 0), (0, -1), (1, -1), (-3, 0)]:
        with pytest.raises(NotFound, match=f"no complete Merkle node at level {level} index"):
            tree.get_node(level, index)


def test_merkle_tree_append_returns_the_new_leafs_index_and_checks_its_hash() -> None:
    tree = MerkleTree()
    assert tree.append(b"a") == 0
    assert tree.append_leaf_hash(_leaf(b"b")) == 1
    assert tree.append(b"c") == 2
    assert tree.root() == _mth([b"a", b"b", b"c"])
    for bad in (_leaf(b"d")[:31], _leaf(b"d") + b"\x00"):
        with pytest.raises(InvalidInput, match="leaf_hash must be 32 bytes"):
            tree.append_leaf_hash(bad)
    assert tree.size == 3 and tree.root() == _mth([b"a", b"b", b"c"])


def test_compact_range_checks_its_leaf_hash_and_size() -> None:
    compact = CompactRange()
    compact.append_leaf_hash(_leaf(b"a"))
    for bad in (_leaf(b"b")[:31], _leaf(b"b") + b"\x00"):
        with pytest.raises(InvalidInput, match="leaf_hash must be 32 bytes"):
            compact.append_leaf_hash(bad)
    assert compact.size == 1 and compact.root() == _mth([b"a"])
    tree = _tree(_data(3))
    with pytest.raises(InvalidInput, match=r"size must be an integer in 0\.\."):
        CompactRange.from_tree(-1, tree.get_node)


# ------------------------------------------------- sizes around powers of two, everywhere


@pytest.mark.parametrize("size", EDGE_SIZES)
def test_roots_and_proofs_at_power_of_two_edges_match_the_rfc(size: int) -> None:
    data = _data(size)
    tree, compact = _tree(data), CompactRange()
    compact.extend(data)
    stored: dict[tuple[int, int], bytes] = {}

    def get(level: int, index: int) -> bytes:
        return stored[(level, index)]

    for index, entry in enumerate(data):
        for level, idx, value in nodes_for_append(index, _leaf(entry), get):
            stored[(level, idx)] = value
    root = _mth(data)
    assert tree.root() == compact.root() == merkle.root(size, get) == root
    if size == 0:
        assert root == EMPTY_ROOT
    _proofs_match_the_rfc(data, tree.inclusion_proof, tree.consistency_proof)


def _proofs_match_the_rfc(
    data: list[bytes], inclusion: Callable[[int], Any], consistency: Callable[[int], Any]
) -> None:
    """Asserts a tree of ``data`` proves inclusion and consistency as the RFC does, at the
    edges of the index and size ranges, and that each RFC proof verifies."""
    size, root = len(data), _mth(data)
    for index in {0, size // 2, size - 1} & set(range(size)):
        path = _path(index, data)
        assert inclusion(index) == path, (index, size)
        assert verify_inclusion(index, size, _leaf(data[index]), path, root)
    for size1 in {0, 1, size // 2, size - 1, size} & set(range(size + 1)):
        proof = _proof(size1, data)
        assert consistency(size1) == proof, (size1, size)
        assert verify_consistency(size1, size, _mth(data[:size1]), root, proof)


def test_stored_tree_roots_and_proofs_at_power_of_two_edges_match_the_rfc(
    store: EventStore, draft: Draft
) -> None:
    # Sizes 15, 16, 17, 31, 32, 33 straddle stored_level_min (nodes of 16 leaves are stored,
    # lower ones recomputed from entry hashes).
    _fill(store, draft, 1, 33)
    leaves = _entries(store)
    with store.tree() as tree:
        for size in (0, 1, 2, 3, 4, 5, 7, 8, 9, 15, 16, 17, 31, 32, 33):
            data = leaves[:size]
            # The leaves are entry hashes, hashed as leaves by the tree.
            assert tree.root(size) == _mth(data), size
            _proofs_match_the_rfc(
                data,
                partial(tree.inclusion_proof, size=size),
                partial(tree.consistency_proof, size2=size),
            )


def test_a_stored_node_that_ends_one_leaf_past_the_tree_is_beyond_it_not_damage(
    store: EventStore, draft: Draft
) -> None:
    # Nodes (4, 1) and (0, 31) end at leaf 32, one past a tree of 31: the tree has no such
    # node yet, which is not a damaged store.
    _fill(store, draft, 1, 31)
    leaves = _entries(store)
    with store.tree() as tree:
        assert tree.get_node(4, 0) == _mth(leaves[:16])
        assert tree.get_node(0, 30) == _leaf(leaves[30])
        assert tree.get_node(2, 6) == _mth(leaves[24:28])  # recomputed from entry hashes
        for level, index in [(4, 1), (0, 31), (1, 15), (5, 0)]:
            with pytest.raises(NotFound, match=re.escape(f"({level}, {index}) is beyond size 31")):
                tree.get_node(level, index)

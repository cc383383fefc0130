"""Tests the RFC 9162 Merkle tree: published vectors, incremental storage and proofs."""

from __future__ import annotations

import hashlib
import re
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rfc9162 import (
    assert_proofs_match_the_rfc,
    rfc_leaf,
    rfc_mth,
    rfc_node,
    rfc_path,
    rfc_proof,
)

from ledger import merkle
from ledger.merkle import (
    EMPTY_ROOT,
    TREE_SIZE_MAX,
    CompactRange,
    MerkleTree,
    consistency_proof_from_leaves,
    inclusion_proof_from_leaves,
    leaf_hash,
    node_hash,
    nodes_for_append,
    root_from_leaves,
    verify_consistency,
    verify_inclusion,
)
from vocabulary.errors import InvalidInput, NotFound

# --------------------------------------------------------------------------------------
# Reference vectors from Certificate Transparency, as published in
#   github.com/transparency-dev/merkle, proof/verify_test.go (the same data as
#   google/certificate-transparency, cpp/merkletree/merkle_tree_test.cc) and
#   rfc6962/rfc6962_test.go for the hasher.
# The leaves are raw data, hashed as leaf_hash(data). In the Go file inclusion vectors
# number leaves from 1; here they are converted to 0-based indexes.
# --------------------------------------------------------------------------------------

LEAVES = [
    bytes.fromhex(""),
    bytes.fromhex("00"),
    bytes.fromhex("10"),
    bytes.fromhex("2021"),
    bytes.fromhex("3031"),
    bytes.fromhex("40414243"),
    bytes.fromhex("5051525354555657"),
    bytes.fromhex("606162636465666768696a6b6c6d6e6f"),
]

ROOTS = [  # ROOTS[n - 1] is the root of the first n leaves
    "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
    "fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125",
    "aeb6bcfe274b70a14fb067a5e5578264db0fa9b51af5e0ba159158f329e06e77",
    "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
    "4e3bbb1f7b478dcfe71fb631631519a3bca12c9aefca1612bfce4c13a86264d4",
    "76e67dadbcdf1e10e1b74ddc608abd2f98dfb16fbce75277b5232a127f2087ef",
    "ddb89be403809e325750d3d263cd78929c2942b7942a34b77e122c9594a74c8c",
    "5dc9da79a70659a9ad559cb701ded9a2ab9d823aad2f4960cfe370eff4604328",
]

INCLUSION_VECTORS = [  # (0-based leaf index, tree size, proof)
    (
        0,
        8,
        [
            "96a296d224f285c67bee93c30f8a309157f0daa35dc5b87e410b78630a09cfc7",
            "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
            "6b47aaf29ee3c2af9af889bc1fb9254dabd31177f16232dd6aab035ca39bf6e4",
        ],
    ),
    (
        5,
        8,
        [
            "bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b",
            "ca854ea128ed050b41b35ffc1b87b8eb2bde461e9e3b5596ece6b9d5975a0ae0",
            "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
        ],
    ),
    (2, 3, ["fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125"]),
    (
        1,
        5,
        [
            "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
            "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
            "bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b",
        ],
    ),
    (0, 1, []),
]

CONSISTENCY_VECTORS = [  # (size1, size2, proof)
    (1, 1, []),
    (
        1,
        8,
        [
            "96a296d224f285c67bee93c30f8a309157f0daa35dc5b87e410b78630a09cfc7",
            "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
            "6b47aaf29ee3c2af9af889bc1fb9254dabd31177f16232dd6aab035ca39bf6e4",
        ],
    ),
    (
        6,
        8,
        [
            "0ebc5d3437fbe2db158b9f126a1d118e308181031d0a949f8dededebc558ef6a",
            "ca854ea128ed050b41b35ffc1b87b8eb2bde461e9e3b5596ece6b9d5975a0ae0",
            "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
        ],
    ),
    (
        2,
        5,
        [
            "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
            "bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b",
        ],
    ),
    (
        6,
        7,
        [
            "0ebc5d3437fbe2db158b9f126a1d118e308181031d0a949f8dededebc558ef6a",
            "b08693ec2e721597130641e8211e7eedccb4c26413963eee6c1e2ed16ffb1a5f",
            "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
        ],
    ),
]

SOME_HASH = bytes.fromhex("abacaba000000000000000000000000000000000000000000060061e00123456")


def _hexes(values: list[str]) -> list[bytes]:
    return [bytes.fromhex(v) for v in values]


def _flip(value: bytes, bit: int) -> bytes:
    """Returns ``value`` with bit ``bit`` (0 = lowest bit of the first byte) inverted."""
    out = bytearray(value)
    out[bit // 8] ^= 1 << (bit % 8)
    return bytes(out)


def _tree(leaves: list[bytes]) -> MerkleTree:
    tree = MerkleTree()
    tree.extend(leaves)
    return tree


# ------------------------------------------------------------------------------ hashing


def test_hasher_matches_rfc6962_vectors() -> None:
    assert EMPTY_ROOT.hex() == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
    assert leaf_hash(b"").hex() == (
        "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d"
    )
    assert leaf_hash(b"L123456").hex() == (
        "395aa064aa4c29f7010acfe3f25db9485bbd4b91897b6ad7ad547639252b4d56"
    )
    assert node_hash(b"N123", b"N456").hex() == (
        "aa217fe888e47007fa15edab33c2b492a722cb106c64667fc2b044444de66bbb"
    )


def test_leaf_and_node_hashes_are_domain_separated() -> None:
    left, right = leaf_hash(b"Hello"), leaf_hash(b"World")
    assert node_hash(left, right) != leaf_hash(left + right)
    assert node_hash(left, right) != node_hash(right, left)


# ---------------------------------------------------------------------- published roots


@pytest.mark.parametrize("size", range(1, 9))
def test_roots_match_published_vectors(size: int) -> None:
    expected = bytes.fromhex(ROOTS[size - 1])
    assert root_from_leaves(LEAVES[:size]) == expected
    assert _tree(LEAVES).root(size) == expected
    compact = CompactRange()
    compact.extend(LEAVES[:size])
    assert compact.root() == expected


def test_empty_tree_root_is_hash_of_empty_string() -> None:
    assert root_from_leaves([]) == EMPTY_ROOT
    assert MerkleTree().root() == EMPTY_ROOT
    assert CompactRange().root() == EMPTY_ROOT


# ------------------------------------------------------------------- published proofs


@pytest.mark.parametrize(("index", "size", "proof_hex"), INCLUSION_VECTORS)
def test_inclusion_proofs_match_published_vectors(
    index: int, size: int, proof_hex: list[str]
) -> None:
    proof = _hexes(proof_hex)
    root = bytes.fromhex(ROOTS[size - 1])
    assert inclusion_proof_from_leaves(index, LEAVES[:size]) == proof
    assert _tree(LEAVES).inclusion_proof(index, size) == proof
    assert verify_inclusion(index, size, leaf_hash(LEAVES[index]), proof, root)


@pytest.mark.parametrize(("index", "size", "proof_hex"), INCLUSION_VECTORS)
def test_inclusion_proof_probes_from_ct_suite_fail(
    index: int, size: int, proof_hex: list[str]
) -> None:
    proof = _hexes(proof_hex)
    root = bytes.fromhex(ROOTS[size - 1])
    leaf = leaf_hash(LEAVES[index])
    probes = [
        (index - 1, size, leaf, proof, root),
        (index + 1, size, leaf, proof, root),
        (index ^ 2, size, leaf, proof, root),
        (index, size * 2, leaf, proof, root),
        (index, size // 2, leaf, proof, root),
        (index, size, leaf_hash(b"WrongLeaf"), proof, root),
        (index, size, leaf, proof, EMPTY_ROOT),
        (index, size, leaf, proof, SOME_HASH),
        (index, size, leaf, [*proof, b""], root),
        (index, size, leaf, [*proof, root], root),
        (index, size, leaf, [b"", *proof], root),
        (index, size, leaf, [root, *proof], root),
    ]
    if proof:
        probes.append((index, size, leaf, proof[:-1], root))
    if len(proof) > 1:
        probes.append((index, size, leaf, [proof[0], SOME_HASH, *proof[1:]], root))
    for position in range(len(proof)):
        for bit in range(256):
            bad = list(proof)
            bad[position] = _flip(bad[position], bit)
            probes.append((index, size, leaf, bad, root))
    for probe in probes:
        assert not verify_inclusion(*probe), probe[:2]


@pytest.mark.parametrize(("size1", "size2", "proof_hex"), CONSISTENCY_VECTORS)
def test_consistency_proofs_match_published_vectors(
    size1: int, size2: int, proof_hex: list[str]
) -> None:
    proof = _hexes(proof_hex)
    root1, root2 = bytes.fromhex(ROOTS[size1 - 1]), bytes.fromhex(ROOTS[size2 - 1])
    assert consistency_proof_from_leaves(size1, LEAVES[:size2]) == proof
    assert _tree(LEAVES).consistency_proof(size1, size2) == proof
    assert verify_consistency(size1, size2, root1, root2, proof)


@pytest.mark.parametrize(("size1", "size2", "proof_hex"), CONSISTENCY_VECTORS[1:])
def test_consistency_proof_probes_from_ct_suite_fail(
    size1: int, size2: int, proof_hex: list[str]
) -> None:
    proof = _hexes(proof_hex)
    root1, root2 = bytes.fromhex(ROOTS[size1 - 1]), bytes.fromhex(ROOTS[size2 - 1])
    probes = [
        (size1 - 1, size2, root1, root2, proof),
        (size1 + 1, size2, root1, root2, proof),
        (size1 ^ 2, size2, root1, root2, proof),
        (size1, size2 * 2, root1, root2, proof),
        (size1, size2 // 2, root1, root2, proof),
        (size1, size2, SOME_HASH, root2, proof),
        (size1, size2, root1, SOME_HASH, proof),
        (size1, size2, root2, root1, proof),
        (size1, size2, root1, root2, []),
        (size1, size2, root1, root2, [*proof, b""]),
        (size1, size2, root1, root2, [*proof, root1]),
        (size1, size2, root1, root2, [*proof, root2]),
        (size1, size2, root1, root2, [b"", *proof]),
        (size1, size2, root1, root2, [root1, *proof]),
        (size1, size2, root1, root2, [root2, *proof]),
        (size1, size2, root1, root2, [proof[0], *proof]),
        (size1, size2, root1, root2, proof[:-1]),
    ]
    for position in range(len(proof)):
        for bit in range(256):
            bad = list(proof)
            bad[position] = _flip(bad[position], bit)
            probes.append((size1, size2, root1, root2, bad))
    for probe in probes:
        assert not verify_consistency(*probe), probe[:2]


# ------------------------------------------------------------------- verifier edge cases


def test_trivial_consistency_cases_are_decided_strictly() -> None:
    root = bytes.fromhex(ROOTS[0])
    assert verify_consistency(0, 0, EMPTY_ROOT, EMPTY_ROOT, [])
    assert verify_consistency(0, 5, EMPTY_ROOT, SOME_HASH, [])
    assert verify_consistency(1, 1, root, root, [])
    assert not verify_consistency(0, 5, SOME_HASH, SOME_HASH, [])  # root1 not the empty root
    assert not verify_consistency(0, 5, EMPTY_ROOT, SOME_HASH, [EMPTY_ROOT])
    assert not verify_consistency(1, 1, root, SOME_HASH, [])
    assert not verify_consistency(1, 1, root, root, [EMPTY_ROOT])
    assert not verify_consistency(2, 1, root, root, [])
    assert not verify_consistency(1, 2, root, root, [])
    # Sizes reach 2**64 - 1 (a uint64, as checkpoints carry them) and no further, and even
    # the trivial cases need roots that are hashes.
    assert verify_consistency(0, 2**64 - 1, EMPTY_ROOT, SOME_HASH, [])
    assert not verify_consistency(0, 2**64, EMPTY_ROOT, SOME_HASH, [])
    assert not verify_consistency(1, 1, SOME_HASH[:31], SOME_HASH[:31], [])


@pytest.mark.parametrize(
    "args",
    [
        (0, 0, SOME_HASH, [], SOME_HASH),
        (1, 0, SOME_HASH, [], SOME_HASH),
        (2, 1, SOME_HASH, [], SOME_HASH),
        (-1, 4, SOME_HASH, [], SOME_HASH),
        (True, 4, SOME_HASH, [], SOME_HASH),
        (0, 2**64, SOME_HASH, [SOME_HASH], SOME_HASH),
        (0, 1, SOME_HASH[:31], [], SOME_HASH[:31]),
        (0, 1, "not bytes", [], "not bytes"),
        (0, 2, SOME_HASH, None, SOME_HASH),
        (0, 2, SOME_HASH, SOME_HASH, SOME_HASH),
        (0, 2, SOME_HASH, [12], SOME_HASH),
        (0, 2, SOME_HASH, [SOME_HASH.hex()], SOME_HASH),
    ],
)
def test_verify_inclusion_returns_false_and_never_raises_on_garbage(args: tuple[Any, ...]) -> None:
    assert verify_inclusion(*args) is False


@pytest.mark.parametrize(
    "args",
    [
        (1, 2, SOME_HASH, SOME_HASH, None),
        (1, 2, SOME_HASH, SOME_HASH, "abc"),
        (1, 2, SOME_HASH, SOME_HASH, [None]),
        (1, 2, b"short", SOME_HASH, [SOME_HASH]),
        (-1, 2, SOME_HASH, SOME_HASH, [SOME_HASH]),
        (1, 2**64, SOME_HASH, SOME_HASH, [SOME_HASH]),
        (1.0, 2, SOME_HASH, SOME_HASH, [SOME_HASH]),
    ],
)
def test_verify_consistency_returns_false_and_never_raises_on_garbage(
    args: tuple[Any, ...],
) -> None:
    assert verify_consistency(*args) is False


def test_single_leaf_tree_has_its_leaf_hash_as_root() -> None:
    leaf = leaf_hash(b"data")
    assert verify_inclusion(0, 1, leaf, [], leaf)
    assert not verify_inclusion(0, 1, leaf, [], EMPTY_ROOT)


# ---------------------------------------------------------------- incremental storage


def test_nodes_for_append_emits_leaf_and_every_completed_parent() -> None:
    store: dict[tuple[int, int], bytes] = {}
    for index in range(8):
        nodes = nodes_for_append(index, leaf_hash(LEAVES[index]), lambda lv, ix: store[(lv, ix)])
        store.update({(level, idx): value for level, idx, value in nodes})
        # One node for the leaf, one more per trailing one bit of the index.
        trailing_ones = (index ^ (index + 1)).bit_length() - 1
        assert [(level, idx) for level, idx, _ in nodes] == [
            (level, index >> level) for level in range(trailing_ones + 1)
        ]
    assert store[(3, 0)] == bytes.fromhex(ROOTS[7])
    assert merkle.root(6, lambda lv, ix: store[(lv, ix)]) == bytes.fromhex(ROOTS[5])


def test_nodes_for_append_checks_its_input() -> None:
    with pytest.raises(InvalidInput, match="leaf_hash must be 32 bytes"):
        nodes_for_append(0, b"short", lambda lv, ix: b"")
    with pytest.raises(InvalidInput, match="tree_size must be an integer"):
        nodes_for_append(-1, SOME_HASH, lambda lv, ix: b"")


def test_batch_appends_through_an_overlay_match_one_by_one_appends() -> None:
    leaves = [hashlib.sha256(i.to_bytes(4, "big")).digest() for i in range(37)]
    store: dict[tuple[int, int], bytes] = {}
    reads: list[tuple[int, int]] = []

    def get_node(level: int, index: int) -> bytes:
        reads.append((level, index))
        return store[(level, index)]

    for start in range(0, len(leaves), 10):
        overlay: dict[tuple[int, int], bytes] = {}
        for offset, leaf in enumerate(leaves[start : start + 10]):
            nodes_for_append(start + offset, leaf_hash(leaf), get_node, overlay)
        # Nothing of the batch reached the store before it committed.
        assert not set(overlay) & set(store)
        store.update(overlay)
    assert merkle.root(37, get_node) == root_from_leaves(leaves)
    assert set(store) == {
        (level, index)
        for level in range(6)
        for index in range(37 >> level)
        if (index + 1) << level <= 37
    }


def test_range_hash_refuses_a_range_that_is_not_whole_subtrees() -> None:
    tree = _tree(LEAVES)
    with pytest.raises(InvalidInput, match="does not start on a multiple of 4"):
        merkle.range_hash(2, 6, tree.get_node)
    with pytest.raises(InvalidInput, match="reversed"):
        merkle.range_hash(5, 4, tree.get_node)
    assert merkle.range_hash(4, 7, tree.get_node) == root_from_leaves(LEAVES[4:7])


def test_proof_builders_refuse_out_of_range_arguments() -> None:
    tree = _tree(LEAVES)
    with pytest.raises(InvalidInput, match="leaf index 8 is outside a tree of 8 leaves"):
        tree.inclusion_proof(8)
    with pytest.raises(InvalidInput, match=re.escape("old size 9 is outside 0..8")):
        tree.consistency_proof(9)
    with pytest.raises(InvalidInput, match=re.escape("size must be an integer in 0..8")):
        tree.root(9)
    with pytest.raises(InvalidInput, match="leaf index"):
        inclusion_proof_from_leaves(0, [])
    # The bounds themselves are sizes: both ends prove with an empty path.
    assert consistency_proof_from_leaves(0, LEAVES) == []
    assert consistency_proof_from_leaves(8, LEAVES) == []
    with pytest.raises(InvalidInput, match=re.escape("old size -1 is outside 0..8")):
        consistency_proof_from_leaves(-1, LEAVES)
    with pytest.raises(NotFound, match="no complete Merkle node at level 3 index 1"):
        tree.get_node(3, 1)


def test_compact_range_resumes_from_stored_nodes() -> None:
    tree = _tree(LEAVES[:6])
    resumed = CompactRange.from_tree(6, tree.get_node)
    assert resumed.nodes() == [(2, 0, tree.get_node(2, 0)), (1, 2, tree.get_node(1, 2))]
    resumed.extend(LEAVES[6:])
    assert resumed.size == 8
    assert resumed.root() == bytes.fromhex(ROOTS[7])


# --------------------------------------------------------------------------- properties

_SIZES = st.integers(min_value=1, max_value=300)


def _leaves(size: int) -> list[bytes]:
    # Entry hashes, as the ledger's leaves are; the seed keeps examples reproducible.
    return [hashlib.sha256(b"entry-%d" % i).digest() for i in range(size)]


@settings(deadline=None, max_examples=60)
@given(size=_SIZES)
def test_incremental_roots_match_the_reference_at_every_size(size: int) -> None:
    leaves = _leaves(size)
    tree, compact = MerkleTree(), CompactRange()
    store: dict[tuple[int, int], bytes] = {}
    for index, leaf in enumerate(leaves):
        tree.append(leaf)
        compact.append(leaf)
        for level, idx, value in nodes_for_append(
            index, leaf_hash(leaf), lambda lv, ix: store[(lv, ix)]
        ):
            store[(level, idx)] = value
    for prefix in {1, size // 3 + 1, size // 2 + 1, size}:
        assert tree.root(prefix) == root_from_leaves(leaves[:prefix])
    assert compact.root() == tree.root() == merkle.root(size, lambda lv, ix: store[(lv, ix)])
    assert compact.nodes() == CompactRange.from_tree(size, tree.get_node).nodes()


@settings(deadline=None)
@given(data=st.data(), size=_SIZES)
def test_inclusion_proofs_verify_and_any_bit_flip_breaks_them(
    data: st.DataObject, size: int
) -> None:
    leaves = _leaves(size)
    tree = _tree(leaves)
    index = data.draw(st.integers(0, size - 1), label="index")
    proof = tree.inclusion_proof(index)
    assert proof == inclusion_proof_from_leaves(index, leaves)
    root, leaf = tree.root(), leaf_hash(leaves[index])
    assert verify_inclusion(index, size, leaf, proof, root)

    bit = data.draw(st.integers(0, 255), label="bit")
    assert not verify_inclusion(index, size, _flip(leaf, bit), proof, root)
    assert not verify_inclusion(index, size, leaf, proof, _flip(root, bit))
    if proof:
        position = data.draw(st.integers(0, len(proof) - 1), label="position")
        bad = list(proof)
        bad[position] = _flip(bad[position], bit)
        assert not verify_inclusion(index, size, leaf, bad, root)


@settings(deadline=None)
@given(data=st.data(), size2=_SIZES)
def test_consistency_proofs_verify_and_any_bit_flip_breaks_them(
    data: st.DataObject, size2: int
) -> None:
    leaves = _leaves(size2)
    tree = _tree(leaves)
    size1 = data.draw(st.integers(1, size2), label="size1")
    proof = tree.consistency_proof(size1)
    assert proof == consistency_proof_from_leaves(size1, leaves)
    root1, root2 = tree.root(size1), tree.root()
    assert verify_consistency(size1, size2, root1, root2, proof)

    bit = data.draw(st.integers(0, 255), label="bit")
    assert not verify_consistency(size1, size2, _flip(root1, bit), root2, proof)
    assert not verify_consistency(size1, size2, root1, _flip(root2, bit), proof)
    if proof:
        position = data.draw(st.integers(0, len(proof) - 1), label="position")
        bad = list(proof)
        bad[position] = _flip(bad[position], bit)
        assert not verify_consistency(size1, size2, root1, root2, bad)


@settings(deadline=None, max_examples=30)
@given(size=_SIZES)
def test_every_proof_of_a_tree_verifies(size: int) -> None:
    leaves = _leaves(size)
    tree = _tree(leaves)
    root = tree.root()
    for index in range(size):
        proof = tree.inclusion_proof(index)
        assert verify_inclusion(index, size, leaf_hash(leaves[index]), proof, root)
    for size1 in range(size + 1):
        proof = tree.consistency_proof(size1)
        assert verify_consistency(size1, size, tree.root(size1), root, proof)


# -- RFC 9162's "sn is 0: fail", argument types and bounds ------------------------------------

EIGHT = [bytes([i]) for i in range(8)]


def test_inclusion_fails_when_the_path_is_longer_than_the_tree_allows() -> None:
    # RFC 9162 §2.1.3.2 step 4: "If sn is 0, then stop the iteration and fail the proof
    # verification." Leaf b claimed as the whole one-leaf tree, with a's hash as an extra
    # path element, recomputes the real two-leaf root: only the size binding fails it.
    two = root_from_leaves([b"a", b"b"])
    assert verify_inclusion(1, 2, leaf_hash(b"b"), [leaf_hash(b"a")], two)
    assert not verify_inclusion(0, 1, leaf_hash(b"b"), [leaf_hash(b"a")], two)


def test_consistency_fails_when_the_path_is_longer_than_the_sizes_allow() -> None:
    # RFC 9162 §2.1.4.2 step 6, the same rule. The trees of 7 and 8 leaves share D[0:4]: a
    # 3→4 proof over D[4:8] plus D[0:4]'s hash recomputes both real roots, at wrong sizes.
    root7, root8 = root_from_leaves(EIGHT[:7]), root_from_leaves(EIGHT)
    crafted = [*consistency_proof_from_leaves(3, EIGHT[4:8]), root_from_leaves(EIGHT[:4])]
    assert verify_consistency(7, 8, root7, root8, consistency_proof_from_leaves(7, EIGHT))
    assert not verify_consistency(3, 4, root7, root8, crafted)


@pytest.mark.parametrize("empty", ["", b""])
def test_an_empty_string_or_bytes_is_not_a_proof(empty: str | bytes) -> None:
    # A proof is a list of hashes; a str or bytes is a malformed one (a failed
    # verification), even where an empty list would verify.
    root, leaf = root_from_leaves(EIGHT[:3]), leaf_hash(b"x")
    assert verify_consistency(3, 3, root, root, []) and verify_inclusion(0, 1, leaf, [], leaf)
    assert not verify_consistency(3, 3, root, root, empty)  # type: ignore[arg-type]
    assert not verify_inclusion(0, 1, leaf, empty, leaf)  # type: ignore[arg-type]


def test_nodes_for_append_refuses_to_grow_past_the_largest_tree_size() -> None:
    # Tree sizes are uint64 (TREE_SIZE_MAX): a tree of TREE_SIZE_MAX leaves takes no more.
    some = hashlib.sha256(b"some").digest()
    assert len(nodes_for_append(TREE_SIZE_MAX - 1, some, lambda level, index: some)) == 1
    with pytest.raises(InvalidInput, match="tree_size must be an integer"):
        nodes_for_append(TREE_SIZE_MAX, some, lambda level, index: some)


# The verifiers take only 32-byte hashes and int sizes (a bool is neither a size nor an index);
# proof builders and tree readers refuse out-of-range or mistyped arguments with an InvalidInput
# naming the argument; ranges must be whole subtrees even two leaves wide; roots and proofs at
# sizes around powers of two agree with RFC 9162's recursion (tests/rfc9162.py) wherever they are
# computed.


# Sizes around the powers of two, where the RFC's split point k moves.
EDGE_SIZES = [0, 1, 2, 3, 4, 5, 7, 8, 9, 15, 16, 17, 31, 32, 33, 63, 64, 65]


def _data(size: int) -> list[bytes]:
    return [hashlib.sha256(b"rule-%d" % i).digest() for i in range(size)]


def _some(tag: bytes) -> bytes:
    return hashlib.sha256(tag).digest()


# ------------------------------------------------------------ verifiers: what a hash is


def test_a_value_longer_than_32_bytes_is_not_a_hash_to_the_verifiers() -> None:
    # A 33-byte "leaf hash" equal to a 33-byte "root" proved itself as a one-leaf tree when
    # only a minimum length was checked.
    long = _some(b"x") + b"\x00"
    leaf = rfc_leaf(b"x")
    assert verify_inclusion(0, 1, leaf, [], leaf)
    assert not verify_inclusion(0, 1, long, [], long)
    root = rfc_mth(_data(3))
    assert verify_consistency(3, 3, root, root, [])
    assert not verify_consistency(3, 3, root + b"\x00", root + b"\x00", [])
    data = _data(2)
    assert (
        verify_inclusion(0, 2, rfc_leaf(data[0]), [rfc_leaf(data[1]) + b"\x00"], rfc_mth(data))
        is False
    )


def test_a_leaf_hash_that_is_not_bytes_fails_inclusion_without_raising() -> None:
    # The leaf is checked like the root: a str never reaches the hash function.
    data = _data(2)
    path, root = rfc_path(0, data), rfc_mth(data)
    assert verify_inclusion(0, 2, rfc_leaf(data[0]), path, root)
    assert verify_inclusion(0, 2, rfc_leaf(data[0]).hex(), path, root) is False  # type: ignore[arg-type]
    assert verify_inclusion(0, 2, None, path, root) is False  # type: ignore[arg-type]


def test_a_bool_is_neither_a_tree_size_nor_a_leaf_index_to_the_verifiers() -> None:
    data = _data(2)
    leaf = rfc_leaf(data[0])
    assert verify_inclusion(0, 1, leaf, [], leaf)
    assert verify_inclusion(0, True, leaf, [], leaf) is False  # type: ignore[arg-type]
    root1, root2 = rfc_mth(data[:1]), rfc_mth(data)
    assert verify_consistency(1, 2, root1, root2, rfc_proof(1, data))
    assert verify_consistency(True, 2, root1, root2, rfc_proof(1, data)) is False  # type: ignore[arg-type]
    assert verify_consistency(1, True, root1, root1, []) is False  # type: ignore[arg-type]
    assert verify_consistency(True, True, root1, root1, []) is False  # type: ignore[arg-type]


def test_the_last_leaf_of_the_largest_tree_verifies_and_one_size_more_does_not() -> None:
    # A tree of 2**64 - 1 leaves has one perfect subtree per bit; the last leaf's path is the
    # 63 subtree hashes to its left, smallest first. The verifier takes the uint64 maximum.
    leaf = rfc_leaf(b"last")
    path = [_some(b"subtree-%d" % level) for level in range(1, 64)]
    root = leaf
    for sibling in path:
        root = rfc_node(sibling, root)
    assert verify_inclusion(TREE_SIZE_MAX - 1, TREE_SIZE_MAX, leaf, path, root)
    assert not verify_inclusion(TREE_SIZE_MAX, TREE_SIZE_MAX + 1, leaf, path, root)
    assert not verify_inclusion(TREE_SIZE_MAX - 1, TREE_SIZE_MAX, leaf, path[:-1], root)


# ------------------------------------------------ proof builders: bounds and what they name


def test_the_reference_inclusion_path_refuses_the_index_one_past_the_last_leaf() -> None:
    data = _data(5)
    assert inclusion_proof_from_leaves(4, data) == rfc_path(4, data)
    for size in (1, 5):
        with pytest.raises(InvalidInput, match=f"leaf index {size} is outside a tree of {size}"):
            inclusion_proof_from_leaves(size, data[:size])


def test_builders_refuse_a_bool_index_or_size_instead_of_proving_for_leaf_or_size_one() -> None:
    tree = _tree(_data(4))
    get = tree.get_node
    assert merkle.inclusion_proof(1, 4, get) == rfc_path(1, _data(4))
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
    assert merkle.range_hash(2, 4, tree.get_node) == rfc_mth(_data(4)[2:4])
    for start, end in [(1, 3), (3, 6)]:
        refused = f"range [{start}, {end}) does not start on a multiple of 2"
        with pytest.raises(InvalidInput, match=re.escape(refused)):
            merkle.range_hash(start, end, tree.get_node)


# ---------------------------------------------------------------- in-memory trees' surface


def test_merkle_tree_has_no_node_at_a_negative_level_or_index() -> None:
    tree = _tree(_data(4))
    assert tree.get_node(2, 0) == rfc_mth(_data(4))
    for level, index in [(-1, 0), (0, -1), (1, -1), (-3, 0)]:
        with pytest.raises(NotFound, match=f"no complete Merkle node at level {level} index"):
            tree.get_node(level, index)


def test_merkle_tree_append_returns_the_new_leafs_index_and_checks_its_hash() -> None:
    tree = MerkleTree()
    assert tree.append(b"a") == 0
    assert tree.append_leaf_hash(rfc_leaf(b"b")) == 1
    assert tree.append(b"c") == 2
    assert tree.root() == rfc_mth([b"a", b"b", b"c"])
    for bad in (rfc_leaf(b"d")[:31], rfc_leaf(b"d") + b"\x00"):
        with pytest.raises(InvalidInput, match="leaf_hash must be 32 bytes"):
            tree.append_leaf_hash(bad)
    assert tree.size == 3 and tree.root() == rfc_mth([b"a", b"b", b"c"])


def test_compact_range_checks_its_leaf_hash_and_size() -> None:
    compact = CompactRange()
    compact.append_leaf_hash(rfc_leaf(b"a"))
    for bad in (rfc_leaf(b"b")[:31], rfc_leaf(b"b") + b"\x00"):
        with pytest.raises(InvalidInput, match="leaf_hash must be 32 bytes"):
            compact.append_leaf_hash(bad)
    assert compact.size == 1 and compact.root() == rfc_mth([b"a"])
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
        for level, idx, value in nodes_for_append(index, rfc_leaf(entry), get):
            stored[(level, idx)] = value
    root = rfc_mth(data)
    assert tree.root() == compact.root() == merkle.root(size, get) == root
    if size == 0:
        assert root == EMPTY_ROOT
    assert_proofs_match_the_rfc(data, tree.inclusion_proof, tree.consistency_proof)

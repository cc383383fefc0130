"""Computes Merkle roots and proofs by the plain recursion of RFC 9162 §2.1, over hashlib alone.

Tests compare the ledger's trees (in memory, compact, stored) with these, so an expected root
or proof never comes from the code under test.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import Any

from ledger.merkle import verify_consistency, verify_inclusion


def rfc_leaf(data: bytes) -> bytes:
    return hashlib.sha256(b"\x00" + data).digest()


def rfc_node(left: bytes, right: bytes) -> bytes:
    return hashlib.sha256(b"\x01" + left + right).digest()


def rfc_split(n: int) -> int:
    k = 1
    while k * 2 < n:
        k *= 2
    return k


def rfc_mth(data: list[bytes]) -> bytes:
    """MTH(D[n]) of RFC 9162 §2.1.1."""
    if not data:
        return hashlib.sha256(b"").digest()
    if len(data) == 1:
        return rfc_leaf(data[0])
    k = rfc_split(len(data))
    return rfc_node(rfc_mth(data[:k]), rfc_mth(data[k:]))


def rfc_path(m: int, data: list[bytes]) -> list[bytes]:
    """PATH(m, D[n]) of RFC 9162 §2.1.3.1."""
    if len(data) == 1:
        return []
    k = rfc_split(len(data))
    if m < k:
        return [*rfc_path(m, data[:k]), rfc_mth(data[k:])]
    return [*rfc_path(m - k, data[k:]), rfc_mth(data[:k])]


def rfc_subproof(m: int, data: list[bytes], b: bool) -> list[bytes]:
    if m == len(data):
        return [] if b else [rfc_mth(data)]
    k = rfc_split(len(data))
    if m <= k:
        return [*rfc_subproof(m, data[:k], b), rfc_mth(data[k:])]
    return [*rfc_subproof(m - k, data[k:], False), rfc_mth(data[:k])]


def rfc_proof(m: int, data: list[bytes]) -> list[bytes]:
    """PROOF(m, D[n]) of RFC 9162 §2.1.4.1 (empty for m = 0 or m = n)."""
    return [] if m in (0, len(data)) else rfc_subproof(m, data, True)


def assert_proofs_match_the_rfc(
    data: list[bytes], inclusion: Callable[[int], Any], consistency: Callable[[int], Any]
) -> None:
    """Asserts a tree of ``data`` proves inclusion and consistency as the RFC does, at the
    edges of the index and size ranges, and that each RFC proof verifies."""
    size, root = len(data), rfc_mth(data)
    for index in {0, size // 2, size - 1} & set(range(size)):
        path = rfc_path(index, data)
        assert inclusion(index) == path, (index, size)
        assert verify_inclusion(index, size, rfc_leaf(data[index]), path, root)
    for size1 in {0, 1, size // 2, size - 1, size} & set(range(size + 1)):
        proof = rfc_proof(size1, data)
        assert consistency(size1) == proof, (size1, size)
        assert verify_consistency(size1, size, rfc_mth(data[:size1]), root, proof)

"""A small C2SP tlog client written from the specifications alone, to check the served log.

It shares no code with the project: notes and keys are parsed here (c2sp.org/signed-note,
c2sp.org/tlog-checkpoint), Ed25519 is checked with ``cryptography``, tile paths are encoded
here (c2sp.org/tlog-tiles), and the Merkle hashing, proofs and their verification follow
RFC 6962 / RFC 9162 §2.1 as written. What it fetches comes through ``fetch(path) -> bytes``.
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

Fetch = Callable[[str], bytes]

HASH = 32
WIDTH = 256  # hashes in a full tile


class Rejected(Exception):
    """The log served something a verifier must refuse."""


def sha256(data: bytes) -> bytes:
    return hashlib.sha256(data).digest()


def leaf_hash(entry: bytes) -> bytes:
    return sha256(b"\x00" + entry)


def node_hash(left: bytes, right: bytes) -> bytes:
    return sha256(b"\x01" + left + right)


# ------------------------------------------------------------------------ notes and keys


@dataclass(frozen=True)
class VerifierKey:
    name: str
    key_id: bytes
    public_key: Ed25519PublicKey


def parse_vkey(text: str) -> VerifierKey:
    """Parses ``<name>+<hex key ID>+<base64(0x01 || 32-byte key)>`` and checks the key ID."""
    name, id_hex, material = text.strip().split("+", 2)  # base64 may hold "+" too
    raw = base64.b64decode(material, validate=True)
    if len(raw) != 33 or raw[0] != 0x01:
        raise Rejected("not an Ed25519 verifier key")
    key_id = bytes.fromhex(id_hex)
    if sha256(name.encode() + b"\n" + raw)[:4] != key_id:
        raise Rejected("the key ID does not match the name and key")
    return VerifierKey(name, key_id, Ed25519PublicKey.from_public_bytes(raw[1:]))


@dataclass(frozen=True)
class Checkpoint:
    origin: str
    size: int
    root: bytes


def open_checkpoint(note: bytes, key: VerifierKey) -> Checkpoint:
    """Returns the checkpoint a signed note states once ``key``'s signature on it verifies."""
    text = note.decode("utf-8")
    cut = text.rfind("\n\n")
    if cut < 0:
        raise Rejected("no blank line before the signatures")
    body, signatures = text[: cut + 1], text[cut + 2 :]
    verified = False
    for line in signatures.removesuffix("\n").split("\n"):
        if not line.startswith("\u2014 "):
            raise Rejected(f"not a signature line: {line!r}")
        name, _, encoded = line[2:].partition(" ")
        raw = base64.b64decode(encoded, validate=True)
        if name != key.name or raw[:4] != key.key_id:
            continue  # another key's signature: ignored, as the spec says
        try:
            key.public_key.verify(raw[4:], body.encode("utf-8"))
        except InvalidSignature:
            raise Rejected("the log's signature does not verify") from None
        verified = True
    if not verified:
        raise Rejected("no signature by the log's key")
    lines = body.removesuffix("\n").split("\n")
    origin, size, root = lines[0], int(lines[1]), base64.b64decode(lines[2], validate=True)
    if str(size) != lines[1] or len(root) != HASH:
        raise Rejected("malformed checkpoint body")
    return Checkpoint(origin, size, root)


# ------------------------------------------------------------------------------- tiles


def tile_path(level: int | str, index: int, width: int = WIDTH) -> str:
    """Returns ``tile/<L>/<N>[.p/<W>]`` with N in 3-digit groups, all but the last with x."""
    groups = [f"{index % 1000:03d}"]  # least significant first
    while index >= 1000:
        index //= 1000
        groups.append(f"{index % 1000:03d}")
    elements = [f"x{g}" for g in reversed(groups[1:])] + [groups[0]]
    return f"tile/{level}/{'/'.join(elements)}" + ("" if width == WIDTH else f".p/{width}")


def split_hashes(data: bytes) -> list[bytes]:
    if len(data) % HASH:
        raise Rejected(f"a tile of {len(data)} bytes is not whole hashes")
    return [data[i : i + HASH] for i in range(0, len(data), HASH)]


def split_bundle(data: bytes) -> list[bytes]:
    """Splits an entry bundle: each entry is a big-endian uint16 length, then the bytes."""
    entries, at = [], 0
    while at < len(data):
        length = int.from_bytes(data[at : at + 2], "big")
        entries.append(data[at + 2 : at + 2 + length])
        at += 2 + length
    if at != len(data):
        raise Rejected("the entry bundle ends inside an entry")
    return entries


def mth_perfect(hashes: list[bytes]) -> bytes:
    """Returns the root over a power-of-two run of subtree hashes."""
    while len(hashes) > 1:
        hashes = [node_hash(hashes[i], hashes[i + 1]) for i in range(0, len(hashes), 2)]
    return hashes[0]


@dataclass
class TileReader:
    """Reads the tree of ``size`` leaves from tiles: any complete subtree's hash, the root,
    and RFC 9162 proofs, fetching each tile once."""

    fetch: Fetch
    size: int
    fetched: dict[str, bytes] = field(default_factory=dict)

    def tile(self, level: int, index: int) -> list[bytes]:
        """Returns the tile the tree of ``size`` has at (level, index), partial or full."""
        held = self.size // WIDTH**level - index * WIDTH
        if held <= 0:
            raise Rejected(f"the tree of {self.size} has no tile {level}/{index}")
        path = tile_path(level, index, min(held, WIDTH))
        if path not in self.fetched:
            self.fetched[path] = self.fetch(path)
        hashes = split_hashes(self.fetched[path])
        if len(hashes) != min(held, WIDTH):
            raise Rejected(f"{path} holds {len(hashes)} hashes")
        return hashes

    def entries(self, index: int) -> list[bytes]:
        held = min(self.size - index * WIDTH, WIDTH)
        return split_bundle(self.fetch(tile_path("entries", index, held)))

    def subtree(self, height: int, index: int) -> bytes:
        """Returns the hash of leaves [index·2^height, (index+1)·2^height), a complete subtree:
        the tile level at or below its height holds its hashes, 2^(height mod 8) of them."""
        if (index + 1) << height > self.size:
            raise Rejected("not a complete subtree of the tree")
        level, rest = divmod(height, 8)
        first = index << rest  # in hashes of tile level ``level``
        hashes = self.tile(level, first // WIDTH)
        start = first % WIDTH
        return mth_perfect(hashes[start : start + (1 << rest)])

    def mth(self, lo: int, hi: int) -> bytes:
        """Returns MTH(D[lo:hi]) for a range RFC 9162 splits into complete subtrees."""
        n = hi - lo
        if n == 0:
            return sha256(b"")
        if n & (n - 1) == 0:
            return self.subtree(n.bit_length() - 1, lo // n)
        k = 1 << ((n - 1).bit_length() - 1)
        return node_hash(self.mth(lo, lo + k), self.mth(lo + k, hi))

    def root(self, size: int | None = None) -> bytes:
        return self.mth(0, self.size if size is None else size)

    def inclusion_proof(self, index: int, size: int) -> list[bytes]:
        """PATH(index, D[0:size]), RFC 9162 §2.1.3.1, from tiles."""

        def path(m: int, lo: int, hi: int) -> list[bytes]:
            n = hi - lo
            if n == 1:
                return []
            k = 1 << ((n - 1).bit_length() - 1)
            if m < k:
                return [*path(m, lo, lo + k), self.mth(lo + k, hi)]
            return [*path(m - k, lo + k, hi), self.mth(lo, lo + k)]

        return path(index, 0, size)

    def consistency_proof(self, old: int, new: int) -> list[bytes]:
        """PROOF(old, D[0:new]), RFC 9162 §2.1.4.1, from tiles."""

        def subproof(m: int, lo: int, hi: int, complete: bool) -> list[bytes]:
            n = hi - lo
            if m == n:
                return [] if complete else [self.mth(lo, hi)]
            k = 1 << ((n - 1).bit_length() - 1)
            if m <= k:
                return [*subproof(m, lo, lo + k, complete), self.mth(lo + k, hi)]
            return [*subproof(m - k, lo + k, hi, False), self.mth(lo, lo + k)]

        return subproof(old, 0, new, True) if 0 < old < new else []


# --------------------------------------------------------------------------- verifiers


def verify_inclusion(index: int, size: int, leaf: bytes, proof: list[bytes], root: bytes) -> bool:
    """RFC 9162 §2.1.3.2."""
    if index >= size:
        return False
    fn, sn, r = index, size - 1, leaf
    for p in proof:
        if sn == 0:
            return False
        if fn % 2 == 1 or fn == sn:
            r = node_hash(p, r)
            if fn % 2 == 0:
                while fn % 2 == 0 and fn != 0:
                    fn >>= 1
                    sn >>= 1
        else:
            r = node_hash(r, p)
        fn >>= 1
        sn >>= 1
    return sn == 0 and r == root


def verify_consistency(
    old: int, new: int, old_root: bytes, new_root: bytes, proof: list[bytes]
) -> bool:
    """RFC 9162 §2.1.4.2 for 0 < old < new."""
    if not 0 < old < new or not proof:
        return False
    if old & (old - 1) == 0:
        proof = [old_root, *proof]
    fn, sn = old - 1, new - 1
    while fn % 2 == 1:
        fn >>= 1
        sn >>= 1
    fr = sr = proof[0]
    for c in proof[1:]:
        if sn == 0:
            return False
        if fn % 2 == 1 or fn == sn:
            fr = node_hash(c, fr)
            sr = node_hash(c, sr)
            if fn % 2 == 0:
                while fn % 2 == 0 and fn != 0:
                    fn >>= 1
                    sn >>= 1
        else:
            sr = node_hash(sr, c)
        fn >>= 1
        sn >>= 1
    return sn == 0 and fr == old_root and sr == new_root

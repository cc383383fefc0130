r"""Signs and opens C2SP signed notes and tlog checkpoints with Ed25519 keys.

Formats (https://c2sp.org/signed-note, https://c2sp.org/tlog-checkpoint), byte for byte
compatible with Go's golang.org/x/mod/sumdb/note:

* a signed note is a text ending in a newline, one blank line, then one or more
  signature lines ``"— <key name> <base64(key ID || signature)>\n"`` (U+2014, a space);
  the signature covers the text including its final newline;
* a key name is non-empty UTF-8 with no Unicode space and no ``+``;
* key ID = the first 4 bytes of SHA-256(name || 0x0A || 0x01 || 32-byte public key), where
  0x01 is the Ed25519 signature type;
* verifier key: ``<name>+<8 hex digits of key ID>+<base64(0x01 || public key)>``;
* signer key: ``PRIVATE+KEY+<name>+<8 hex digits of key ID>+<base64(0x01 || seed)>``;
* a checkpoint body is ``<origin>\n<tree size in decimal>\n<base64 root hash>\n`` followed
  by optional non-empty extension lines, each ending in a newline.

Key strings may carry surrounding whitespace (a trailing newline from a key file); it is
stripped. Base64 is the standard alphabet with padding and must be canonical (re-encoding
the bytes gives the same text); a second spelling of the same bytes is refused.

Errors: building a key or a note from bad input raises ``InvalidInput`` naming the part
that is wrong. Opening a note raises ``SignatureInvalid`` whatever the cause (malformed,
over a limit, no trusted key, a bad signature), with ``reason`` saying which; a signed
note that is not a valid checkpoint, or one from another origin, raises ``IntegrityError``.
Messages never quote private key material.
"""

from __future__ import annotations

import base64
import hashlib
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from ledger.merkle import HASH_BYTES, TREE_SIZE_MAX
from vocabulary.errors import IntegrityError, InvalidInput, LimitExceeded, SignatureInvalid

__all__ = [
    "ED25519_SIGNATURE_TYPE",
    "KEY_ID_BYTES",
    "NOTE_BYTES_MAX",
    "NOTE_SIGNATURES_MAX",
    "Checkpoint",
    "Signer",
    "Verifier",
    "compute_key_id",
    "generate_key",
    "open_note",
    "sign_checkpoint",
    "sign_note",
    "verify_checkpoint",
]

ED25519_SIGNATURE_TYPE: Final = 0x01
"""Signature type byte the signed-note spec assigns to Ed25519."""

KEY_ID_BYTES: Final = 4
"""Length of a key ID, in bytes (8 hex digits in key strings)."""

NOTE_BYTES_MAX: Final = 1_048_576
"""Largest signed note accepted or produced, in UTF-8 bytes (a checkpoint is ~200)."""

NOTE_SIGNATURES_MAX: Final = 100
"""Most signature lines a note may carry (the spec requires at least 16; Go allows 100)."""

_ED25519_KEY_BYTES: Final = 32
_PRIVATE_KEY_PREFIX: Final = "PRIVATE+KEY+"
_SIGNATURE_PREFIX: Final = "\u2014 "  # em dash, space
_CHECKPOINT_LINES_MIN: Final = 3  # origin, tree size, root hash
_KEY_ID_HEX = re.compile(r"[0-9a-f]{8}")
# 20 digits hold any uint64; the bound keeps int() far from its 4300-digit guard.
_TREE_SIZE_TEXT = re.compile(r"0|[1-9][0-9]{0,19}")


# ------------------------------------------------------------------------------ helpers


def _b64encode(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _b64decode(text: str) -> bytes | None:
    """Returns the bytes of canonical standard base64, or None for anything else."""
    try:
        raw = base64.b64decode(text, validate=True)
    except ValueError:  # binascii.Error, and non-ASCII input
        return None
    return raw if _b64encode(raw) == text else None


def _control_char(text: str) -> str | None:
    """Returns the first character below U+0020 other than newline, if any."""
    for char in text:
        if char < " " and char != "\n":
            return char
    return None


def _utf8(text: str) -> bytes | None:
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:  # lone surrogates
        return None


def _key_name_problem(name: object) -> str | None:
    """Returns why ``name`` is not a valid key name, or None when it is one."""
    if not isinstance(name, str) or not name:
        return "must be a non-empty string"
    if "+" in name:
        return "must not contain '+'"
    # isspace() covers every Unicode White_Space character Go's unicode.IsSpace knows.
    if any(char.isspace() for char in name):
        return "must not contain spaces or newlines"
    if _control_char(name) is not None or _utf8(name) is None:
        return "must be valid UTF-8 without control characters"
    return None


def _check_key_name(name: str) -> None:
    problem = _key_name_problem(name)
    if problem is not None:
        raise InvalidInput(f"key name {name!r} {problem}", key_name=name)


def compute_key_id(name: str, public_key: bytes) -> bytes:
    """Returns SHA-256(name || 0x0A || 0x01 || public_key)[:4], an Ed25519 key's ID."""
    _check_key_name(name)
    if len(public_key) != _ED25519_KEY_BYTES:
        raise InvalidInput(
            f"an Ed25519 public key is {_ED25519_KEY_BYTES} bytes, got {len(public_key)}"
        )
    material = name.encode() + b"\n" + bytes([ED25519_SIGNATURE_TYPE]) + public_key
    return hashlib.sha256(material).digest()[:KEY_ID_BYTES]


def _split_key_string(text: str, kind: str) -> tuple[str, bytes, bytes]:
    """Splits ``<name>+<hex key ID>+<base64 key>`` into name, key ID and typed key bytes."""
    name, _, rest = text.partition("+")
    id_hex, _, key_b64 = rest.partition("+")
    _check_key_name(name)
    if not _KEY_ID_HEX.fullmatch(id_hex):
        raise InvalidInput(f"{kind} key ID must be 8 lowercase hex digits", key_name=name)
    raw = _b64decode(key_b64)
    if raw is None:
        raise InvalidInput(f"{kind} key material is not canonical base64", key_name=name)
    if len(raw) != 1 + _ED25519_KEY_BYTES:
        raise InvalidInput(
            f"{kind} key material must be 1 type byte and {_ED25519_KEY_BYTES} key bytes, "
            f"got {len(raw)} bytes",
            key_name=name,
        )
    if raw[0] != ED25519_SIGNATURE_TYPE:
        raise InvalidInput(
            f"{kind} key has signature type 0x{raw[0]:02x}; only Ed25519 (0x01) is supported",
            key_name=name,
        )
    return name, bytes.fromhex(id_hex), raw[1:]


# --------------------------------------------------------------------------------- keys


class Verifier:
    """Holds one named Ed25519 public key and checks signatures made with it."""

    __slots__ = ("_key", "_key_id", "_name", "_public_bytes")

    def __init__(self, name: str, public_key: Ed25519PublicKey) -> None:
        """Binds ``public_key`` to the key ``name``; the key ID is derived from both."""
        self._public_bytes = public_key.public_bytes_raw()
        self._key_id = compute_key_id(name, self._public_bytes)
        self._name = name
        self._key = public_key

    @classmethod
    def parse(cls, key: str) -> Verifier:
        """Returns the verifier of a ``<name>+<hex key ID>+<base64(0x01 || key)>`` string."""
        if not isinstance(key, str):
            raise InvalidInput(f"verifier key must be a string, got {type(key).__name__}")
        name, key_id, public_bytes = _split_key_string(key.strip(), "verifier")
        try:
            public_key = Ed25519PublicKey.from_public_bytes(public_bytes)
        except ValueError:
            raise InvalidInput("verifier key is not a valid Ed25519 public key") from None
        verifier = cls(name, public_key)
        if verifier.key_id != key_id:
            raise InvalidInput(
                f"verifier key ID {key_id.hex()} does not match its name and public key "
                f"(expected {verifier.key_id.hex()})",
                key_name=name,
            )
        return verifier

    @property
    def name(self) -> str:
        """Returns the key name that signature lines carry."""
        return self._name

    @property
    def key_id(self) -> bytes:
        """Returns the 4-byte key ID."""
        return self._key_id

    @property
    def public_key_bytes(self) -> bytes:
        """Returns the raw 32-byte Ed25519 public key."""
        return self._public_bytes

    def verify(self, message: bytes, signature: bytes) -> bool:
        """Reports whether ``signature`` is this key's Ed25519 signature of ``message``."""
        try:
            self._key.verify(signature, message)
        except InvalidSignature:
            return False
        return True

    def key_string(self) -> str:
        """Returns the ``<name>+<hex key ID>+<base64(0x01 || key)>`` string."""
        typed = bytes([ED25519_SIGNATURE_TYPE]) + self._public_bytes
        return f"{self._name}+{self._key_id.hex()}+{_b64encode(typed)}"

    def __eq__(self, other: object) -> bool:
        """Reports whether both hold the same name and public key."""
        if not isinstance(other, Verifier):
            return NotImplemented
        return (self._name, self._public_bytes) == (other._name, other._public_bytes)

    def __hash__(self) -> int:
        """Returns a hash consistent with equality."""
        return hash((self._name, self._public_bytes))

    def __repr__(self) -> str:
        """Returns the verifier key string inside ``Verifier(...)``."""
        return f"Verifier({self.key_string()!r})"


class Signer:
    """Holds one named Ed25519 private key; its repr never shows the key."""

    __slots__ = ("_key", "_verifier")

    def __init__(self, name: str, private_key: Ed25519PrivateKey) -> None:
        """Binds ``private_key`` to the key ``name``."""
        self._key = private_key
        self._verifier = Verifier(name, private_key.public_key())

    @classmethod
    def generate(cls, name: str) -> Signer:
        """Returns a signer with a fresh random key."""
        _check_key_name(name)
        return cls(name, Ed25519PrivateKey.generate())

    @classmethod
    def parse(cls, key: str) -> Signer:
        """Returns the signer of a ``PRIVATE+KEY+<name>+<hex key ID>+<base64>`` string."""
        key = key.strip() if isinstance(key, str) else ""
        if not key.startswith(_PRIVATE_KEY_PREFIX):
            raise InvalidInput(f"signer key must be a string starting with {_PRIVATE_KEY_PREFIX!r}")
        name, key_id, seed = _split_key_string(key[len(_PRIVATE_KEY_PREFIX) :], "signer")
        signer = cls(name, Ed25519PrivateKey.from_private_bytes(seed))
        if signer.key_id != key_id:
            raise InvalidInput(
                f"signer key ID {key_id.hex()} does not match the key's name and public key",
                key_name=name,
            )
        return signer

    @property
    def name(self) -> str:
        """Returns the key name that signature lines carry."""
        return self._verifier.name

    @property
    def key_id(self) -> bytes:
        """Returns the 4-byte key ID."""
        return self._verifier.key_id

    def sign(self, message: bytes) -> bytes:
        """Returns the 64-byte Ed25519 signature of ``message``."""
        return self._key.sign(message)

    def verifier(self) -> Verifier:
        """Returns the matching verifier, safe to publish."""
        return self._verifier

    def private_key_string(self) -> str:
        """Returns the secret ``PRIVATE+KEY+...`` string; keep it out of logs."""
        seed = self._key.private_bytes_raw()
        typed = bytes([ED25519_SIGNATURE_TYPE]) + seed
        return f"{_PRIVATE_KEY_PREFIX}{self.name}+{self.key_id.hex()}+{_b64encode(typed)}"

    def __repr__(self) -> str:
        """Returns the name and key ID only."""
        return f"Signer(name={self.name!r}, key_id={self.key_id.hex()!r})"


def generate_key(name: str) -> tuple[str, str]:
    """Returns a fresh ``(signer key string, verifier key string)`` pair for ``name``."""
    signer = Signer.generate(name)
    return signer.private_key_string(), signer.verifier().key_string()


# -------------------------------------------------------------------------------- notes


def sign_note(text: str, signer: Signer) -> str:
    """Returns ``text`` signed by ``signer`` as a C2SP signed note."""
    if not isinstance(text, str) or not text.endswith("\n"):
        raise InvalidInput("note text must be a string ending in a newline")
    encoded = _utf8(text)
    if encoded is None:
        raise InvalidInput("note text is not encodable as UTF-8")
    bad = _control_char(text)
    if bad is not None:
        raise InvalidInput(f"note text contains control character U+{ord(bad):04X}")
    signature = signer.key_id + signer.sign(encoded)
    note = f"{text}\n{_SIGNATURE_PREFIX}{signer.name} {_b64encode(signature)}\n"
    note_bytes = len(note.encode("utf-8"))
    if note_bytes > NOTE_BYTES_MAX:
        raise LimitExceeded(
            f"signed note would be {note_bytes} bytes; notes are limited to {NOTE_BYTES_MAX}",
            note_bytes=note_bytes,
            note_bytes_max=NOTE_BYTES_MAX,
        )
    return note


@dataclass(frozen=True, slots=True)
class _SignatureLine:
    name: str
    key_id: bytes
    signature: bytes

    @property
    def label(self) -> str:
        """Returns ``<name>+<hex key ID>``, how messages name the key."""
        return f"{self.name}+{self.key_id.hex()}"


def _malformed(why: str) -> SignatureInvalid:
    return SignatureInvalid(f"malformed signed note: {why}", reason="malformed")


def _note_text(note: str | bytes) -> str:
    """Returns the note as text after the size, encoding and character checks."""
    if isinstance(note, bytes):
        if len(note) > NOTE_BYTES_MAX:
            raise SignatureInvalid(
                f"signed note is over {NOTE_BYTES_MAX} bytes", reason="too_large"
            )
        try:
            note = note.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise _malformed(f"not valid UTF-8 at byte {exc.start}") from None
    if not isinstance(note, str):
        raise _malformed(f"expected text or bytes, got {type(note).__name__}")
    encoded = _utf8(note)
    if encoded is None:
        raise _malformed("not encodable as UTF-8")
    if len(encoded) > NOTE_BYTES_MAX:
        raise SignatureInvalid(f"signed note is over {NOTE_BYTES_MAX} bytes", reason="too_large")
    bad = _control_char(note)
    if bad is not None:
        raise _malformed(f"control character U+{ord(bad):04X} at offset {note.index(bad)}")
    return note


def _parse_signature_line(line: str, number: int) -> _SignatureLine:
    if not line.startswith(_SIGNATURE_PREFIX):
        raise _malformed(f"signature line {number} does not start with an em dash and a space")
    name, _, encoded = line[len(_SIGNATURE_PREFIX) :].partition(" ")
    problem = _key_name_problem(name)
    if problem is not None:
        raise _malformed(f"signature line {number}: key name {name!r} {problem}")
    raw = _b64decode(encoded)
    if raw is None or len(raw) <= KEY_ID_BYTES:
        raise _malformed(
            f"signature line {number}: signature is not canonical base64 of a key ID and bytes"
        )
    return _SignatureLine(name, raw[:KEY_ID_BYTES], raw[KEY_ID_BYTES:])


def _parse_note(note: str | bytes) -> tuple[str, list[_SignatureLine]]:
    """Splits a signed note into its text and signature lines; checks syntax only."""
    note = _note_text(note)
    split = note.rfind("\n\n")
    if split < 0:
        raise _malformed("no blank line separates the text from the signatures")
    text, block = note[: split + 1], note[split + 2 :]
    if not block:
        raise _malformed("no signature lines after the blank line")
    if not block.endswith("\n"):
        raise _malformed("the last signature line does not end in a newline")
    lines = block[:-1].split("\n")
    if len(lines) > NOTE_SIGNATURES_MAX:
        raise SignatureInvalid(
            f"signed note has {len(lines)} signature lines; at most {NOTE_SIGNATURES_MAX} "
            "are accepted",
            reason="too_many_signatures",
        )
    return text, [_parse_signature_line(line, n) for n, line in enumerate(lines, start=1)]


def _verifier_table(verifiers: Verifier | Iterable[Verifier]) -> dict[tuple[str, bytes], Verifier]:
    """Indexes verifiers by (name, key ID); two different keys under one index are refused."""
    if isinstance(verifiers, str):
        raise InvalidInput("pass Verifier objects (Verifier.parse(key)), not a key string")
    listed = [verifiers] if isinstance(verifiers, Verifier) else list(verifiers)
    if not listed:
        raise InvalidInput("opening a signed note needs at least one verifier key")
    table: dict[tuple[str, bytes], Verifier] = {}
    for verifier in listed:
        if not isinstance(verifier, Verifier):
            raise InvalidInput(f"expected a Verifier, got {type(verifier).__name__}")
        index = (verifier.name, verifier.key_id)
        if table.setdefault(index, verifier) != verifier:
            raise InvalidInput(
                f"two different verifier keys share name {verifier.name!r} and key ID "
                f"{verifier.key_id.hex()}",
                key_name=verifier.name,
            )
    return table


def open_note(note: str | bytes, verifiers: Verifier | Iterable[Verifier]) -> str:
    """Returns the text of ``note`` once a signature by a trusted key verifies.

    Signatures by unknown keys (name and key ID not both matching a verifier) are ignored,
    as the spec requires. Every signature by a known key must verify, and at least one
    must exist; otherwise ``SignatureInvalid`` is raised.
    """
    table = _verifier_table(verifiers)
    text, lines = _parse_note(note)
    message = text.encode("utf-8")
    verified = 0
    for line in lines:
        verifier = table.get((line.name, line.key_id))
        if verifier is None:
            continue
        if not verifier.verify(message, line.signature):
            raise SignatureInvalid(
                f"signature by key {line.label} does not verify; the note was altered "
                "or signed by another key with the same name and ID",
                reason="bad_signature",
                key=line.label,
            )
        verified += 1
    if verified == 0:
        found = ", ".join(line.label for line in lines)
        trusted = ", ".join(f"{name}+{key_id.hex()}" for name, key_id in table)
        raise SignatureInvalid(
            f"signed note has no signature by a trusted key (signed by {found}; "
            f"trusted: {trusted})",
            reason="no_trusted_signature",
            signed_by=[line.label for line in lines],
        )
    return text


# -------------------------------------------------------------------------- checkpoints


def _line_problem(line: object) -> str | None:
    if not isinstance(line, str) or not line:
        return "must be a non-empty string"
    if "\n" in line or _control_char(line) is not None:
        return "must not contain newlines or control characters"
    if _utf8(line) is None:
        return "must be valid UTF-8"
    return None


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """Holds a log's signed statement: its origin, tree size and root hash."""

    origin: str
    size: int
    root_hash: bytes
    extensions: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        """Checks every field against the tlog-checkpoint rules."""
        problem = _line_problem(self.origin)
        if problem is not None:
            raise InvalidInput(f"checkpoint origin {problem}", origin=self.origin)
        if type(self.size) is not int or not 0 <= self.size <= TREE_SIZE_MAX:
            raise InvalidInput(
                f"checkpoint tree size must be an integer in 0..{TREE_SIZE_MAX}, got {self.size!r}",
                size=self.size,
            )
        if not isinstance(self.root_hash, bytes) or len(self.root_hash) != HASH_BYTES:
            raise InvalidInput(f"checkpoint root hash must be {HASH_BYTES} bytes")
        if not isinstance(self.extensions, tuple):
            raise InvalidInput("checkpoint extension lines must be a tuple of strings")
        for number, line in enumerate(self.extensions, start=1):
            problem = _line_problem(line)
            if problem is not None:
                raise InvalidInput(f"checkpoint extension line {number} {problem}")

    def to_body(self) -> str:
        """Returns the note text: origin, size, base64 root hash, extension lines."""
        lines = [self.origin, str(self.size), _b64encode(self.root_hash), *self.extensions]
        return "".join(f"{line}\n" for line in lines)

    @classmethod
    def parse(cls, body: str) -> Checkpoint:
        """Returns the checkpoint a note text states; raises InvalidInput naming the fault."""
        if not isinstance(body, str) or not body.endswith("\n"):
            raise InvalidInput("checkpoint body must be text ending in a newline")
        lines = body[:-1].split("\n")
        if len(lines) < _CHECKPOINT_LINES_MIN:
            raise InvalidInput(
                f"checkpoint body has {len(lines)} line{'' if len(lines) == 1 else 's'}; it "
                "needs origin, tree size and root hash"
            )
        origin, size_text, root_text, *extensions = lines
        if not _TREE_SIZE_TEXT.fullmatch(size_text):
            raise InvalidInput(
                f"checkpoint tree size {size_text!r} is not a decimal number without leading zeros",
                size_text=size_text,
            )
        root_hash = _b64decode(root_text)
        if root_hash is None or len(root_hash) != HASH_BYTES:
            raise InvalidInput(
                f"checkpoint root hash {root_text!r} is not canonical base64 of {HASH_BYTES} bytes",
                root_text=root_text,
            )
        return cls(origin, int(size_text), root_hash, tuple(extensions))


def sign_checkpoint(checkpoint: Checkpoint, signer: Signer) -> str:
    """Returns ``checkpoint`` as a signed note by ``signer``."""
    return sign_note(checkpoint.to_body(), signer)


def verify_checkpoint(
    note: str | bytes,
    verifier: Verifier | Iterable[Verifier],
    expected_origin: str | None = None,
) -> Checkpoint:
    """Returns the checkpoint in ``note`` once its signature and origin check out.

    ``expected_origin`` should be given whenever it is known: a key may sign for more than
    one log, and only the origin line says which log a checkpoint belongs to.
    """
    text = open_note(note, verifier)
    try:
        checkpoint = Checkpoint.parse(text)
    except InvalidInput as exc:
        raise IntegrityError(
            f"signed note is not a valid checkpoint: {exc.message}", reason="malformed_checkpoint"
        ) from exc
    if expected_origin is not None and checkpoint.origin != expected_origin:
        raise IntegrityError(
            f"checkpoint origin {checkpoint.origin!r} is not the expected {expected_origin!r}",
            reason="origin_mismatch",
            origin=checkpoint.origin,
            expected_origin=expected_origin,
        )
    return checkpoint

"""Signs the ledger's head as C2SP checkpoints and builds and checks self-contained proofs.

Three jobs live here, all on top of ``ledger.note`` (the signed-note format) and
``ledger.merkle`` (RFC 9162):

* **key files**: a private key file holds the ``PRIVATE+KEY+…`` signer string (mode 0600,
  never overwritten unless asked), and ``<file>.pub`` holds the verifier key string;
* **checkpoints**: the tree size and Merkle root of the head (or of a given size), signed
  as a ``tlog-checkpoint`` note and stored in the ``checkpoints`` table;
* **proof documents**: JSON objects (format ``arena-ledger.proof.v1``) carrying an
  inclusion or consistency proof with everything a verifier needs, and ``verify_proof``,
  which checks one against signed checkpoints without any database.

The default origin of a checkpoint is ``arena-ledger/<key name>``; verification expects that
origin unless it is told another one, since a key may sign for several logs.
"""

from __future__ import annotations

import base64
import binascii
import os
import stat
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from ledger import merkle
from ledger.chain import GENESIS_HASH, envelope_bytes, next_entry_hash
from ledger.limits import (
    checkpoint_sizes_shown_max,
    key_file_bytes_max,
    proof_document_bytes_max,
    proof_hashes_max,
)
from ledger.note import Checkpoint, Signer, Verifier, sign_checkpoint, verify_checkpoint
from ledger.stored_tree import stored_entry_hash
from vocabulary import limits
from vocabulary.codec import loads
from vocabulary.errors import (
    IntegrityError,
    InvalidInput,
    LimitExceeded,
    NotFound,
    read_limited,
    require_file,
    unreadable,
)
from vocabulary.fields import is_digest

if TYPE_CHECKING:
    from ledger.store import EventStore

__all__ = [
    "ORIGIN_PREFIX",
    "PROOF_FORMAT",
    "IssuedCheckpoint",
    "KeyFiles",
    "ProofVerdict",
    "consistency_document",
    "default_origin",
    "event_document",
    "inclusion_document",
    "load_signer",
    "load_verifier",
    "open_checkpoint",
    "parse_proof_document",
    "public_key_path",
    "read_file_bytes",
    "read_text_file",
    "sign_tree",
    "stored_checkpoint",
    "verify_proof",
    "write_key_files",
    "write_note_file",
]

PROOF_FORMAT: Final = "arena-ledger.proof.v1"
"""The ``format`` field of every proof document this version writes and reads."""

ORIGIN_PREFIX: Final = "arena-ledger/"
"""Prefix of the default checkpoint origin, followed by the key name."""


_PRIVATE_MODE: Final = 0o600
_PUBLIC_MODE: Final = 0o644
_PRIVATE_PREFIX: Final = "PRIVATE+KEY+"
_HEX_CHARS: Final = 64
_EVENT_FIELDS: Final = frozenset(
    {"position", "stream", "version", "type", "schema_version", "payload_b64", "recorded_at",
     "actor"}
)
#: The fields of each kind of proof document; any other is refused by name (a verifier that
#: skipped unknown fields would pass on claims nobody checked, under a valid signature).
_DOCUMENT_FIELDS: Final = {
    "inclusion": frozenset(
        {"format", "kind", "tree_size", "root_hash", "leaf_index", "entry_hash", "leaf_hash",
         "proof", "previous_hash", "event"}
    ),
    "consistency": frozenset(
        {"format", "kind", "from_size", "from_root", "to_size", "to_root", "proof"}
    ),
}


# ----------------------------------------------------------------------------- key files


@dataclass(frozen=True, slots=True)
class KeyFiles:
    """Names the two files a key generation wrote and the public key they hold."""

    private_path: Path
    public_path: Path
    key_name: str
    verifier_key: str


def public_key_path(private_path: Path) -> Path:
    """Returns where the verifier key of ``private_path`` lives: the same name plus ``.pub``."""
    return private_path.with_name(private_path.name + ".pub")


def default_origin(key_name: str) -> str:
    """Returns the origin a checkpoint signed by ``key_name`` carries unless told otherwise."""
    return f"{ORIGIN_PREFIX}{key_name}"


def _require_storable(origin: str | None, key_name: str) -> None:
    """Raises LimitExceeded for an origin or key name longer than the store keeps
    (``limits.checkpoint_origin_chars_max``, ``limits.key_name_chars_max``)."""
    if isinstance(key_name, str) and len(key_name) > limits.key_name_chars_max:
        raise LimitExceeded(
            f"key name is {len(key_name)} characters; at most {limits.key_name_chars_max}",
            key_name=key_name[:40] + "…",
        )
    if isinstance(origin, str) and len(origin) > limits.checkpoint_origin_chars_max:
        raise LimitExceeded(
            f"checkpoint origin is {len(origin)} characters; at most "
            f"{limits.checkpoint_origin_chars_max}",
            origin=origin[:40] + "…",
        )


def write_key_files(name: str, out: Path, *, force: bool = False) -> KeyFiles:
    """Generates an Ed25519 key named ``name``; writes ``out`` (0600) and ``out.pub``.

    Refuses to replace either file unless ``force`` is set, so a key in use is never lost
    by a repeated command; and a name longer than the store keeps beside a checkpoint.
    """
    _require_storable(None, name)
    signer = Signer.generate(name)
    public = public_key_path(out)
    if not force:
        for path in (out, public):
            if path.exists() or path.is_symlink():
                raise InvalidInput(
                    f"key file {path} already exists; pass --force to replace it", path=str(path)
                )
    if not out.parent.is_dir():
        raise InvalidInput(f"directory {out.parent} does not exist", path=str(out))
    _write_file(out, signer.private_key_string() + "\n", _PRIVATE_MODE, force)
    verifier_key = signer.verifier().key_string()
    _write_file(public, verifier_key + "\n", _PUBLIC_MODE, True)
    return KeyFiles(out, public, name, verifier_key)


def _write_file(
    path: Path, content: str, mode: int, replace: bool, what: str = "key file"
) -> None:
    # O_EXCL refuses an existing file atomically; fchmod fixes the mode whatever the umask
    # or the mode of a file being replaced.
    flags = os.O_WRONLY | os.O_CREAT | (os.O_TRUNC if replace else os.O_EXCL)
    try:
        fd = os.open(path, flags, mode)
        try:
            os.fchmod(fd, mode)
            os.write(fd, content.encode("utf-8"))
        finally:
            os.close(fd)
    except FileExistsError:  # made between the caller's check and the open
        raise InvalidInput(
            f"{what} {path} already exists; pass --force to replace it", path=str(path)
        ) from None
    except OSError as exc:
        raise InvalidInput(
            f"cannot write {what} {path}: {exc.strerror}", path=str(path)
        ) from None


def read_file_bytes(path: Path, what: str, bytes_max: int) -> bytes:
    """Returns a small file's bytes, refusing a missing or oversized file (InvalidInput).

    For a file whose content its parser judges (a bundle's manifest and checkpoint, a
    checkpoint note): bytes that are not UTF-8 are then damage like any other, named by
    the parser, rather than a separate input error.
    """
    require_file(path, what)
    try:
        size = path.stat().st_size
        if size > bytes_max:
            raise LimitExceeded(
                f"{what} {path} is {size} bytes; the limit is {bytes_max}", path=str(path)
            )
        # A device or pipe says size 0 (/dev/zero never ends): read one byte past the limit.
        with path.open("rb") as file:
            return read_limited(file, f"{what} {path}", bytes_max, str(path))
    except OSError as exc:
        raise unreadable(path, what, exc) from None


def read_text_file(path: Path, what: str, bytes_max: int) -> str:
    """Returns a small UTF-8 file's text, refusing a missing, oversized or binary file."""
    try:
        return read_file_bytes(path, what, bytes_max).decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidInput(f"{what} {path} is not UTF-8 text", path=str(path)) from None


def load_signer(path: Path) -> Signer:
    """Reads a private key file, refusing one that group or others may read (like ssh)."""
    text = read_text_file(path, "private key file", key_file_bytes_max)
    mode = stat.S_IMODE(path.stat().st_mode)
    if mode & 0o077:
        raise InvalidInput(
            f"private key file {path} is readable by others (mode {mode:04o}); "
            f"run `chmod 600 {path}`",
            path=str(path),
        )
    try:
        return Signer.parse(text)
    except InvalidInput as exc:  # the parser never quotes key material
        raise InvalidInput(f"private key file {path}: {exc.message}", path=str(path)) from None


def load_verifier(path: Path) -> Verifier:
    """Reads a verifier (public) key file such as the ``.pub`` that ``key generate`` wrote."""
    text = read_text_file(path, "public key file", key_file_bytes_max)
    if text.strip().startswith(_PRIVATE_PREFIX):
        raise InvalidInput(
            f"{path} holds a private key; pass the public key file ({path}.pub)", path=str(path)
        )
    try:
        return Verifier.parse(text)
    except InvalidInput as exc:
        raise InvalidInput(f"public key file {path}: {exc.message}", path=str(path)) from None


# --------------------------------------------------------------------------- checkpoints


@dataclass(frozen=True, slots=True)
class IssuedCheckpoint:
    """Is a checkpoint the ledger signed and stored: its row id, statement and note."""

    id: int
    tree_size: int
    root_hash: str
    origin: str
    key_name: str
    note: str

    def to_json(self) -> dict[str, Any]:
        """Returns the checkpoint as a JSON-ready object."""
        return {
            "id": self.id,
            "tree_size": self.tree_size,
            "root_hash": self.root_hash,
            "origin": self.origin,
            "key_name": self.key_name,
            "note": self.note,
        }


def sign_tree(
    store: EventStore, signer: Signer, origin: str | None = None, size: int | None = None
) -> IssuedCheckpoint:
    """Signs the Merkle root at ``size`` (the head when None), stores the note, returns it."""
    origin = default_origin(signer.name) if origin is None else origin
    _require_storable(origin, signer.name)  # before anything is read or signed
    tree_size, root = store.merkle_root(size)
    note = sign_checkpoint(Checkpoint(origin, tree_size, root), signer)
    row_id = store.add_checkpoint(tree_size, root.hex(), origin, signer.name, note)
    return IssuedCheckpoint(row_id, tree_size, root.hex(), origin, signer.name, note)


def stored_checkpoint(
    store: EventStore, size: int | None = None, origin: str | None = None
) -> dict[str, Any]:
    """Returns the newest stored checkpoint of tree ``size`` (any size when None) and
    ``origin`` (any when None), as ``EventStore.checkpoints`` lists it; NotFound naming the
    sizes that are stored when there is none."""
    found = store.checkpoints(1, tree_size=size, origin=origin)
    if found:
        return found[0]
    sizes = sorted({int(row["tree_size"]) for row in store.checkpoints(
        checkpoint_sizes_shown_max, origin=origin)}, reverse=True)
    of = "" if origin is None else f" of origin {origin}"
    at = "" if size is None else f" at tree size {size}"
    stored = (f"the sizes of the latest ones{of}: {', '.join(map(str, sizes))}" if sizes
              else f"none is stored{of}")
    raise NotFound(
        f"no checkpoint{of}{at} is stored ({stored}); `arena-ledger checkpoint --key KEY` "
        "signs the head",
        tree_size=size,
    )


def write_note_file(path: Path, note: str, *, force: bool = False) -> None:
    """Writes a checkpoint note to ``path`` byte for byte (what ``verify-proof
    --checkpoint`` reads), refusing to replace a file unless ``force`` is set."""
    if not force and (path.exists() or path.is_symlink()):
        raise InvalidInput(
            f"note file {path} already exists; pass --force to replace it", path=str(path)
        )
    if not path.parent.is_dir():
        raise InvalidInput(f"directory {path.parent} does not exist", path=str(path))
    _write_file(path, note, _PUBLIC_MODE, force, "note file")


def open_checkpoint(
    note: str | bytes, verifier: Verifier, origin: str | None = None
) -> Checkpoint:
    """Returns the checkpoint in ``note`` (text, or the bytes of a note file: bytes that are
    not UTF-8 are a malformed note, SignatureInvalid) once its signature and origin check out.

    The expected origin defaults to ``arena-ledger/<key name>``; a checkpoint of another
    origin fails (``IntegrityError``, reason ``origin_mismatch``).
    """
    expected = default_origin(verifier.name) if origin is None else origin
    return verify_checkpoint(note, verifier, expected_origin=expected)


# ------------------------------------------------------------------------ proof documents


def event_document(
    position: int, stream: str, version: int, event_type: str, schema_version: int,
    payload: bytes, recorded_at: str, actor: str,
) -> dict[str, Any]:
    """Returns the envelope fields of one event with its payload's exact bytes in base64."""
    return {
        "position": position,
        "stream": stream,
        "version": version,
        "type": event_type,
        "schema_version": schema_version,
        "payload_b64": base64.b64encode(payload).decode("ascii"),
        "recorded_at": recorded_at,
        "actor": actor,
    }


def inclusion_document(store: EventStore, position: int, size: int | None = None) -> dict[str, Any]:
    """Returns a proof document that the event at ``position`` is in the tree of ``size``.

    ``size`` defaults to the head; pass a published checkpoint's size so that the proof
    verifies against that checkpoint.
    """
    with store.tree() as tree:
        tree_size = tree.size if size is None else size
        if tree_size > tree.size:
            raise InvalidInput(
                f"tree size {tree_size} is beyond the ledger's head {tree.size}", size=tree_size
            )
        if not 1 <= position <= tree_size:
            raise NotFound(
                f"position {position} is not in a tree of size {tree_size} "
                f"(positions 1..{tree_size})",
                position=position,
            )
        proof = tree.inclusion_proof(position - 1, tree_size)
        root = tree.root(tree_size)
    recorded = store.get(position)
    entry = stored_entry_hash(position, recorded.entry_hash)
    return {
        "format": PROOF_FORMAT,
        "kind": "inclusion",
        "tree_size": tree_size,
        "root_hash": root.hex(),
        "leaf_index": position - 1,
        "entry_hash": recorded.entry_hash,
        "leaf_hash": merkle.leaf_hash(entry).hex(),
        "proof": [h.hex() for h in proof],
        "previous_hash": store.entry_hash_at(position - 1),
        "event": event_document(
            recorded.position, recorded.stream, recorded.version, recorded.type,
            recorded.schema_version, recorded.payload_bytes, recorded.recorded_at, recorded.actor,
        ),
    }


def consistency_document(
    store: EventStore, from_size: int, to_size: int | None = None
) -> dict[str, Any]:
    """Returns a proof document that the tree of ``from_size`` is a prefix of ``to_size``'s."""
    with store.tree() as tree:
        second = tree.size if to_size is None else to_size
        if second > tree.size:
            raise InvalidInput(
                f"tree size {second} is beyond the ledger's head {tree.size}", size=second
            )
        if not 0 <= from_size <= second:
            raise InvalidInput(
                f"from size {from_size} must be between 0 and to size {second}", size=from_size
            )
        proof = tree.consistency_proof(from_size, second)
        from_root, to_root = tree.root(from_size), tree.root(second)
    return {
        "format": PROOF_FORMAT,
        "kind": "consistency",
        "from_size": from_size,
        "from_root": from_root.hex(),
        "to_size": second,
        "to_root": to_root.hex(),
        "proof": [h.hex() for h in proof],
    }


def parse_proof_document(data: bytes | str, where: str = "proof") -> dict[str, Any]:
    """Parses a proof document strictly (size, JSON, format and kind), naming the fault."""
    if isinstance(data, str):
        try:
            data = data.encode("utf-8")
        except UnicodeEncodeError as exc:  # a lone surrogate: no UTF-8 text holds one
            raise InvalidInput(
                f"{where} is not valid UTF-8 (character {exc.start} is a lone surrogate)",
                path="$",
            ) from None
    size = len(data)
    if size > proof_document_bytes_max:
        raise LimitExceeded(
            f"{where} is {size} bytes; the limit is {proof_document_bytes_max}", path="$"
        )
    document = loads(data, where=where)
    if not isinstance(document, dict):
        raise InvalidInput(f"{where} must be a JSON object", path="$")
    _kind_of(document, where)
    return document


def _kind_of(document: Mapping[str, Any], where: str = "proof") -> str:
    """Returns the document's kind after checking its format, kind and top-level fields.

    InvalidInput names the first fault: another format, a kind other than "inclusion" or
    "consistency", or a field that kind of document does not have.
    """
    if document.get("format") != PROOF_FORMAT:
        raise InvalidInput(
            f"{where} has format {document.get('format')!r}; this version reads {PROOF_FORMAT!r}",
            path="$.format",
        )
    kind = document.get("kind")
    if type(kind) is not str or kind not in _DOCUMENT_FIELDS:  # a list or object: unhashable
        raise InvalidInput(
            f"{where} kind must be \"inclusion\" or \"consistency\", not {kind!r}",
            path="$.kind",
        )
    extra = sorted(set(document) - _DOCUMENT_FIELDS[kind])
    if extra:
        raise InvalidInput(
            f"{where} has field {extra[0]!r}, which {kind} proofs do not have",
            path=f"$.{extra[0]}",
        )
    return kind


# ------------------------------------------------------------------- field readers


def _field(document: Mapping[str, Any], name: str, kind: type, path: str = "$") -> Any:
    if name not in document:
        raise InvalidInput(f"proof document lacks field {name!r}", path=f"{path}.{name}")
    value = document[name]
    if type(value) is not kind:
        raise InvalidInput(
            f"proof field {name!r} must be {kind.__name__}, not {type(value).__name__}",
            path=f"{path}.{name}",
        )
    return value


def _size(document: Mapping[str, Any], name: str) -> int:
    value: int = _field(document, name, int)
    if not 0 <= value <= merkle.TREE_SIZE_MAX:
        raise InvalidInput(f"proof field {name!r} is out of range", path=f"$.{name}")
    return value


def _hash(document: Mapping[str, Any], name: str, path: str = "$") -> bytes:
    return _hex32(_field(document, name, str, path), f"{path}.{name}")


def _hex32(value: str, path: str) -> bytes:
    # is_digest, not bytes.fromhex alone: fromhex skips whitespace, so "00 … 00 " (64
    # characters) gave 31 bytes and a mismatch later instead of this error.
    if not is_digest(value):
        raise InvalidInput(f"{path} must be {_HEX_CHARS} lowercase hex digits", path=path)
    return bytes.fromhex(value)


def _path(document: Mapping[str, Any]) -> list[bytes]:
    hashes = _field(document, "proof", list)
    if len(hashes) > proof_hashes_max:
        raise LimitExceeded(
            f"proof lists {len(hashes)} hashes; at most {proof_hashes_max} are possible",
            path="$.proof",
        )
    out: list[bytes] = []
    for index, value in enumerate(hashes):
        if type(value) is not str:
            raise InvalidInput(f"$.proof[{index}] must be a hex string", path=f"$.proof[{index}]")
        out.append(_hex32(value, f"$.proof[{index}]"))
    return out


def _event_envelope(document: Mapping[str, Any]) -> tuple[int, bytes]:
    """Returns the event's position and canonical envelope bytes from the ``event`` field."""
    event = _field(document, "event", dict)
    extra = sorted(set(event) - _EVENT_FIELDS)
    if extra:
        raise InvalidInput(
            f"proof event has unknown field {extra[0]!r}", path=f"$.event.{extra[0]}"
        )
    where = "$.event"
    position: int = _field(event, "position", int, where)
    version: int = _field(event, "version", int, where)
    schema_version: int = _field(event, "schema_version", int, where)
    text = [_field(event, k, str, where) for k in ("stream", "type", "recorded_at", "actor")]
    encoded: str = _field(event, "payload_b64", str, where)
    try:
        payload = base64.b64decode(encoded, validate=True)
    except (binascii.Error, ValueError):
        raise InvalidInput(
            "proof event payload_b64 is not base64", path=f"{where}.payload_b64"
        ) from None
    if base64.b64encode(payload).decode("ascii") != encoded:  # one spelling, as in bundles
        raise InvalidInput(
            "proof event payload_b64 is not canonical base64 (re-encoding its bytes gives "
            "other text)", path=f"{where}.payload_b64"
        )
    envelope = envelope_bytes(
        position, text[0], version, text[1], schema_version, payload, text[2], text[3]
    )
    return position, envelope


# --------------------------------------------------------------------------- verifying


@dataclass(frozen=True, slots=True)
class ProofVerdict:
    """Reports a verified proof: its kind, the sizes and roots, and the checkpoints it met."""

    kind: str
    tree_size: int
    root_hash: str
    checkpoint_sizes: tuple[int, ...]
    origin: str
    position: int | None = None
    entry_hash: str | None = None
    from_size: int | None = None

    def to_json(self) -> dict[str, Any]:
        """Returns the verdict as a JSON-ready object."""
        return {
            "ok": True,
            "kind": self.kind,
            "tree_size": self.tree_size,
            "root_hash": self.root_hash,
            "checkpoint_sizes": list(self.checkpoint_sizes),
            "origin": self.origin,
            "position": self.position,
            "entry_hash": self.entry_hash,
            "from_size": self.from_size,
        }


def verify_proof(
    document: Mapping[str, Any],
    notes: Sequence[str | bytes],
    verifier: Verifier,
    origin: str | None = None,
) -> ProofVerdict:
    """Checks a proof document against signed checkpoint notes; touches no database.

    Inclusion: the event's fields must hash (with ``previous_hash``) to ``entry_hash``, the
    proof must lead from its leaf to ``root_hash``, and a checkpoint must state exactly that
    tree size and root. Consistency: the proof must join both roots, and every checkpoint
    given must be one of its two ends, root included. Any failure raises IntegrityError; a
    document of another format or kind, or with a field its kind does not have, or a field
    missing or mistyped, raises InvalidInput naming the field's path.
    """
    if not notes:
        raise InvalidInput("verifying a proof needs at least one signed checkpoint")
    kind = _kind_of(document)
    checkpoints = [open_checkpoint(note, verifier, origin) for note in notes]
    if kind == "inclusion":
        return _verify_inclusion(document, checkpoints)
    return _verify_consistency(document, checkpoints)


def _verify_inclusion(document: Mapping[str, Any], checkpoints: list[Checkpoint]) -> ProofVerdict:
    tree_size = _size(document, "tree_size")
    leaf_index = _size(document, "leaf_index")
    root, entry = _hash(document, "root_hash"), _hash(document, "entry_hash")
    previous, leaf = _hash(document, "previous_hash"), _hash(document, "leaf_hash")
    proof = _path(document)
    position, envelope = _event_envelope(document)
    if position != leaf_index + 1:
        raise IntegrityError(
            f"the event is at position {position} but the proof is for leaf index {leaf_index} "
            f"(position {leaf_index + 1})",
            reason="position_mismatch",
        )
    if position == 1 and previous.hex() != GENESIS_HASH:
        raise IntegrityError("the first event's previous_hash must be the genesis hash",
                             reason="entry_hash_mismatch")
    if next_entry_hash(previous, envelope) != entry:
        raise IntegrityError(
            f"the event at position {position} does not hash to entry_hash: its content or "
            "previous_hash was changed",
            reason="entry_hash_mismatch",
            position=position,
        )
    if merkle.leaf_hash(entry) != leaf:
        raise IntegrityError("leaf_hash is not SHA-256(0x00 || entry_hash)", reason="leaf_mismatch")
    if not merkle.verify_inclusion(leaf_index, tree_size, leaf, proof, root):
        raise IntegrityError(
            f"the inclusion proof does not lead from position {position} to root_hash "
            f"at tree size {tree_size}",
            reason="proof_invalid",
            position=position,
        )
    _match_inclusion(tree_size, root, checkpoints, position)
    return ProofVerdict(
        "inclusion", tree_size, root.hex(), tuple(c.size for c in checkpoints),
        checkpoints[0].origin, position=position, entry_hash=entry.hex(),
    )


def _match_inclusion(
    tree_size: int, root: bytes, checkpoints: list[Checkpoint], position: int
) -> None:
    # The rule: an inclusion proof is checked against a checkpoint of exactly its size.
    # A proof at another size would need a consistency step; prove at the checkpoint's size.
    for checkpoint in checkpoints:
        if checkpoint.size != tree_size:
            raise IntegrityError(
                f"the proof is for tree size {tree_size} but the checkpoint is for size "
                f"{checkpoint.size}; {_inclusion_remedy(position, tree_size, checkpoint.size)}",
                reason="size_mismatch",
            )
        if checkpoint.root_hash != root:
            raise IntegrityError(
                f"the proof's root_hash differs from the signed checkpoint's root at tree size "
                f"{tree_size}: the ledger that made the proof is not the one that was signed",
                reason="root_mismatch",
            )


def _inclusion_remedy(position: int, tree_size: int, checkpoint_size: int) -> str:
    """Says what makes an inclusion proof at ``tree_size`` checkable against a checkpoint
    of ``checkpoint_size``: only a step that can work (a tree of size N holds positions
    1..N, so proving a later position at the checkpoint's size would fail too)."""
    if position <= checkpoint_size:
        return (f"prove at the checkpoint's size (arena-ledger prove inclusion --position "
                f"{position} --size {checkpoint_size})")
    return (f"position {position} is not in the checkpoint's tree (it holds positions "
            f"1..{checkpoint_size}): the proof is for a larger tree than the checkpoint. "
            f"Check the proof against a newer checkpoint, of size {tree_size} (`arena-ledger "
            f"checkpoint show --size {tree_size} --out FILE` writes a stored one), and tie "
            f"that checkpoint to this one with a consistency proof (arena-ledger prove "
            f"consistency --from {checkpoint_size} --to {tree_size})")


def _consistency_remedy(from_size: int, to_size: int, checkpoint_size: int) -> str:
    """Says which consistency proof a checkpoint of ``checkpoint_size`` can check: one that
    ends at its size, on the side of the proof's range it lies (``--from`` above ``--to``
    would fail)."""
    if checkpoint_size < to_size:
        return f"prove with --from {checkpoint_size} --to {to_size}"
    return f"prove with --from {from_size} --to {checkpoint_size}"


def _verify_consistency(document: Mapping[str, Any], checkpoints: list[Checkpoint]) -> ProofVerdict:
    from_size, to_size = _size(document, "from_size"), _size(document, "to_size")
    from_root, to_root = _hash(document, "from_root"), _hash(document, "to_root")
    proof = _path(document)
    if not merkle.verify_consistency(from_size, to_size, from_root, to_root, proof):
        raise IntegrityError(
            f"the consistency proof from size {from_size} to {to_size} does not join from_root "
            "and to_root: the later tree does not extend the earlier one",
            reason="proof_invalid",
        )
    ends = {from_size: (from_root, "from_root"), to_size: (to_root, "to_root")}
    for checkpoint in checkpoints:
        if checkpoint.size not in ends:
            raise IntegrityError(
                f"the checkpoint's tree size {checkpoint.size} is neither end of the proof "
                f"({from_size} → {to_size}); "
                f"{_consistency_remedy(from_size, to_size, checkpoint.size)}",
                reason="size_mismatch",
            )
        expected, name = ends[checkpoint.size]
        if checkpoint.root_hash != expected:
            raise IntegrityError(
                f"the proof's {name} differs from the signed checkpoint's root at size "
                f"{checkpoint.size}: the ledger that made the proof has forked from or "
                "rewritten the one that was signed",
                reason="root_mismatch",
            )
    return ProofVerdict(
        "consistency", to_size, to_root.hex(), tuple(c.size for c in checkpoints),
        checkpoints[0].origin, from_size=from_size,
    )

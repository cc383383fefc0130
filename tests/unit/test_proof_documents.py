"""Checks proof documents, checkpoint notes and key files without any database.

The documents are built by the real ``inclusion_document`` / ``consistency_document`` over a
small in-memory stand-in for the store (``MemoryLedger``: recorded events plus an in-memory
``MerkleTree``, which answers the same ``root`` / ``inclusion_proof`` / ``consistency_proof``
calls as the stored tree), then checked by ``verify_proof`` against signed checkpoints.
"""

from __future__ import annotations

import copy
import os
import stat
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from ledger import merkle
from ledger.chain import GENESIS_HASH, envelope_bytes, next_entry_hash
from ledger.checkpoint import (
    PROOF_FORMAT,
    consistency_document,
    default_origin,
    inclusion_document,
    key_file_bytes_max,
    load_signer,
    load_verifier,
    open_checkpoint,
    parse_proof_document,
    proof_document_bytes_max,
    proof_hashes_max,
    public_key_path,
    read_file_bytes,
    verify_proof,
    write_key_files,
)
from ledger.note import Checkpoint, Signer, sign_checkpoint
from ledger.records import RecordedEvent
from vocabulary.errors import IntegrityError, InvalidInput, LimitExceeded, SignatureInvalid

RECORDED_AT = "2026-11-29T12:00:00.000000Z"


class MemoryLedger:
    """Stands in for EventStore where proof documents need it: tree(), get(), entry_hash_at()."""

    def __init__(self, count: int, fork_after: int | None = None) -> None:
        self.events: list[RecordedEvent] = []
        previous = bytes(32)
        for position in range(1, count + 1):
            tag = "b" if fork_after is not None and position > fork_after else "a"
            payload = orjson.dumps({"block": position, "reason": f"{tag}{position}"})
            stream = f"arena-{position % 3}"
            version = sum(1 for e in self.events if e.stream == stream) + 1
            envelope = envelope_bytes(position, stream, version, "ArenaRetired", 1, payload,
                                      RECORDED_AT, "unit")
            previous = next_entry_hash(previous, envelope)
            self.events.append(RecordedEvent(position, stream, version, "ArenaRetired", 1,
                                             payload, RECORDED_AT, "unit", previous.hex()))
        self._tree = merkle.MerkleTree()
        self._tree.extend(bytes.fromhex(e.entry_hash) for e in self.events)

    @contextmanager
    def tree(self) -> Iterator[merkle.MerkleTree]:
        yield self._tree

    def get(self, position: int) -> RecordedEvent:
        return self.events[position - 1]

    def entry_hash_at(self, position: int) -> str:
        return GENESIS_HASH if position == 0 else self.events[position - 1].entry_hash

    def checkpoint(self, signer: Signer, size: int, origin: str | None = None) -> str:
        """Signs the tree at ``size`` the way ``sign_tree`` does."""
        body = Checkpoint(origin or default_origin(signer.name), size, self._tree.root(size))
        return sign_checkpoint(body, signer)


@pytest.fixture(scope="module")
def signer() -> Signer:
    return Signer.generate("log.example")


@pytest.fixture(scope="module")
def ledger() -> MemoryLedger:
    return MemoryLedger(13)


# ----------------------------------------------------------------------- inclusion proofs


@pytest.mark.parametrize("size", [1, 8, 13])
def test_every_position_proves_against_a_checkpoint_of_the_proof_size(
    ledger: MemoryLedger, signer: Signer, size: int
) -> None:
    note = ledger.checkpoint(signer, size)
    for position in range(1, size + 1):
        document = inclusion_document(ledger, position, size)  # type: ignore[arg-type]
        assert document["format"] == PROOF_FORMAT and document["kind"] == "inclusion"
        verdict = verify_proof(document, [note], signer.verifier())
        assert (verdict.position, verdict.tree_size) == (position, size)
        assert verdict.entry_hash == ledger.events[position - 1].entry_hash


def test_the_document_survives_a_json_round_trip(ledger: MemoryLedger, signer: Signer) -> None:
    document = inclusion_document(ledger, 5)  # type: ignore[arg-type]
    parsed = parse_proof_document(orjson.dumps(document))
    assert verify_proof(parsed, [ledger.checkpoint(signer, 13)], signer.verifier()).position == 5


def _flip_hex(value: str) -> str:
    return ("1" if value[0] == "0" else "0") + value[1:]


def _set(path: str, change: Callable[[Any], Any]) -> Callable[[dict[str, Any]], None]:
    def mutate(document: dict[str, Any]) -> None:
        keys = path.split(".")
        target = document
        for key in keys[:-1]:
            target = target[key]
        target[keys[-1]] = change(target[keys[-1]])

    return mutate


INCLUSION_TAMPERING = {
    "payload": _set("event.payload_b64", lambda v: "eyJibG9jayI6OTl9"),
    "actor": _set("event.actor", lambda v: v + "x"),
    "recorded_at": _set("event.recorded_at", lambda v: v.replace("12", "13")),
    "stream": _set("event.stream", lambda v: "arena-9"),
    "version": _set("event.version", lambda v: v + 1),
    "position": _set("event.position", lambda v: v + 1),
    "previous_hash": _set("previous_hash", _flip_hex),
    "entry_hash": _set("entry_hash", _flip_hex),
    "leaf_hash": _set("leaf_hash", _flip_hex),
    "proof hash": _set("proof", lambda v: [_flip_hex(v[0]), *v[1:]]),
    "proof order": _set("proof", lambda v: list(reversed(v))),
    "proof shortened": _set("proof", lambda v: v[:-1]),
    "root_hash": _set("root_hash", _flip_hex),
    "tree_size": _set("tree_size", lambda v: v - 1),
    "leaf_index": _set("leaf_index", lambda v: v + 1),
}


#: The check each change above is caught by: the event's own hash before the tree, a claimed
#: position before either, so the reason names what was changed.
INCLUSION_REASONS = {
    "payload": "entry_hash_mismatch",
    "actor": "entry_hash_mismatch",
    "recorded_at": "entry_hash_mismatch",
    "stream": "entry_hash_mismatch",
    "version": "entry_hash_mismatch",
    "position": "position_mismatch",
    "previous_hash": "entry_hash_mismatch",
    "entry_hash": "entry_hash_mismatch",
    "leaf_hash": "leaf_mismatch",
    "proof hash": "proof_invalid",
    "proof order": "proof_invalid",
    "proof shortened": "proof_invalid",
    "root_hash": "proof_invalid",
    # For this leaf the RFC 9162 walk makes the same left/right choices at sizes 12 and 13,
    # so the path still reaches the root of 13: only the signed checkpoint's size catches it.
    "tree_size": "size_mismatch",
    "leaf_index": "position_mismatch",
}


@pytest.mark.parametrize(
    ("mutate", "reason"),
    [(INCLUSION_TAMPERING[name], INCLUSION_REASONS[name]) for name in INCLUSION_TAMPERING],
    ids=INCLUSION_TAMPERING.keys(),
)
def test_any_change_to_an_inclusion_proof_fails_with_an_integrity_error(
    ledger: MemoryLedger, signer: Signer, mutate: Callable[[dict[str, Any]], None], reason: str
) -> None:
    note = ledger.checkpoint(signer, 13)
    document = copy.deepcopy(inclusion_document(ledger, 6))  # type: ignore[arg-type]
    verify_proof(document, [note], signer.verifier())
    mutate(document)
    with pytest.raises(IntegrityError) as caught:
        verify_proof(document, [note], signer.verifier())
    assert caught.value.context["reason"] == reason


def test_a_position_mismatch_names_both_positions(ledger: MemoryLedger, signer: Signer) -> None:
    document = copy.deepcopy(inclusion_document(ledger, 6))  # type: ignore[arg-type]
    document["leaf_index"] = 6
    with pytest.raises(IntegrityError) as caught:
        verify_proof(document, [ledger.checkpoint(signer, 13)], signer.verifier())
    assert caught.value.message == (
        "the event is at position 6 but the proof is for leaf index 6 (position 7)"
    )


def test_the_first_event_must_chain_from_the_genesis_hash(
    ledger: MemoryLedger, signer: Signer
) -> None:
    document = copy.deepcopy(inclusion_document(ledger, 1))  # type: ignore[arg-type]
    assert document["previous_hash"] == GENESIS_HASH
    document["previous_hash"] = _flip_hex(document["previous_hash"])
    with pytest.raises(IntegrityError, match="must be the genesis hash") as caught:
        verify_proof(document, [ledger.checkpoint(signer, 13)], signer.verifier())
    assert caught.value.context["reason"] == "entry_hash_mismatch"


def test_the_largest_tree_size_is_in_range(ledger: MemoryLedger, signer: Signer) -> None:
    document = copy.deepcopy(inclusion_document(ledger, 6))  # type: ignore[arg-type]
    document["tree_size"] = merkle.TREE_SIZE_MAX  # read as a size, then found not to hold
    with pytest.raises(IntegrityError):
        verify_proof(document, [ledger.checkpoint(signer, 13)], signer.verifier())


def test_a_proof_lists_at_most_proof_hashes_max_hashes(
    ledger: MemoryLedger, signer: Signer
) -> None:
    note = ledger.checkpoint(signer, 13)
    document = copy.deepcopy(inclusion_document(ledger, 6))  # type: ignore[arg-type]
    document["proof"] = [document["proof"][0]] * proof_hashes_max
    with pytest.raises(IntegrityError) as caught:  # read, checked, and simply wrong
        verify_proof(document, [note], signer.verifier())
    assert caught.value.context["reason"] == "proof_invalid"
    document["proof"].append(document["proof"][0])
    with pytest.raises(LimitExceeded, match=f"at most {proof_hashes_max}") as limited:
        verify_proof(document, [note], signer.verifier())
    assert limited.value.context["path"] == "$.proof"


def test_an_inclusion_proof_must_be_at_the_checkpoint_size(
    ledger: MemoryLedger, signer: Signer
) -> None:
    document = inclusion_document(ledger, 3, 13)  # type: ignore[arg-type]
    with pytest.raises(IntegrityError, match=r"--position 3 --size 8") as caught:
        verify_proof(document, [ledger.checkpoint(signer, 8)], signer.verifier())
    assert caught.value.context["reason"] == "size_mismatch"


def test_a_size_mismatch_suggests_only_a_proof_that_verifies(
    ledger: MemoryLedger, signer: Signer
) -> None:
    # Position 10 of a proof at size 13 is not in a checkpoint's tree of size 8: proving it
    # at size 8 cannot work, so the error must not suggest it. What it does suggest, a
    # checkpoint at the proof's size tied to the older one by a consistency proof, verifies.
    at8, at13 = ledger.checkpoint(signer, 8), ledger.checkpoint(signer, 13)
    document = inclusion_document(ledger, 10, 13)  # type: ignore[arg-type]
    with pytest.raises(IntegrityError) as caught:
        verify_proof(document, [at8], signer.verifier())
    message = caught.value.message
    assert caught.value.context["reason"] == "size_mismatch"
    assert "--size 8" not in message and "prove inclusion" not in message
    assert "position 10 is not in the checkpoint's tree (it holds positions 1..8)" in message
    assert "larger tree than the checkpoint" in message
    assert "checkpoint show --size 13" in message
    assert "prove consistency --from 8 --to 13" in message
    assert verify_proof(document, [at13], signer.verifier()).position == 10
    tie = consistency_document(ledger, 8, 13)  # type: ignore[arg-type]
    assert verify_proof(tie, [at8, at13], signer.verifier()).from_size == 8
    # The last position a checkpoint holds is still proved at its size.
    document = inclusion_document(ledger, 8, 13)  # type: ignore[arg-type]
    with pytest.raises(IntegrityError, match=r"--position 8 --size 8"):
        verify_proof(document, [at8], signer.verifier())
    assert verify_proof(inclusion_document(ledger, 8, 8),  # type: ignore[arg-type]
                        [at8], signer.verifier()).position == 8


@pytest.mark.parametrize(("checkpoint_size", "suggested"), [
    (3, (3, 9)),   # below the proof's range: a proof from it to the proof's end
    (7, (7, 9)),   # inside it: the same
    (12, (5, 12)),  # above it: a proof from the proof's start to it (--from 12 --to 9 fails)
])
def test_a_consistency_size_mismatch_suggests_a_proof_that_verifies(
    ledger: MemoryLedger, signer: Signer, checkpoint_size: int, suggested: tuple[int, int]
) -> None:
    note = ledger.checkpoint(signer, checkpoint_size)
    document = consistency_document(ledger, 5, 9)  # type: ignore[arg-type]
    with pytest.raises(IntegrityError) as caught:
        verify_proof(document, [note], signer.verifier())
    assert caught.value.message.endswith(f"prove with --from {suggested[0]} --to {suggested[1]}")
    again = consistency_document(ledger, *suggested)  # type: ignore[arg-type]
    assert checkpoint_size in (again["from_size"], again["to_size"])
    verify_proof(again, [note], signer.verifier())


def test_an_inclusion_proof_from_another_ledger_fails_on_the_root(signer: Signer) -> None:
    honest, forked = MemoryLedger(10), MemoryLedger(10, fork_after=7)
    document = inclusion_document(forked, 2)  # type: ignore[arg-type]
    with pytest.raises(IntegrityError, match="not the one that was signed") as caught:
        verify_proof(document, [honest.checkpoint(signer, 10)], signer.verifier())
    assert caught.value.context["reason"] == "root_mismatch"


# --------------------------------------------------------------------- consistency proofs


def test_a_consistency_proof_verifies_against_either_end_or_both(
    ledger: MemoryLedger, signer: Signer
) -> None:
    document = consistency_document(ledger, 5, 13)  # type: ignore[arg-type]
    old, new = ledger.checkpoint(signer, 5), ledger.checkpoint(signer, 13)
    for notes in ([old], [new], [old, new]):
        verdict = verify_proof(document, notes, signer.verifier())
        assert (verdict.from_size, verdict.tree_size) == (5, 13)
    with pytest.raises(IntegrityError, match="neither end"):
        verify_proof(document, [ledger.checkpoint(signer, 7)], signer.verifier())


def test_a_forked_ledger_fails_the_consistency_proof_against_the_older_checkpoint(
    signer: Signer,
) -> None:
    honest, forked = MemoryLedger(9), MemoryLedger(12, fork_after=6)
    published = honest.checkpoint(signer, 9)
    document = consistency_document(forked, 9, 12)  # type: ignore[arg-type]
    with pytest.raises(IntegrityError, match="forked") as caught:
        verify_proof(document, [published], signer.verifier())
    assert caught.value.context["reason"] == "root_mismatch"
    # Substituting the published root does not help: the proof no longer joins the roots.
    document = {**document, "from_root": _root_hex(honest, 9)}
    with pytest.raises(IntegrityError) as caught:
        verify_proof(document, [published], signer.verifier())
    assert caught.value.context["reason"] == "proof_invalid"


def _root_hex(ledger: MemoryLedger, size: int) -> str:
    with ledger.tree() as tree:
        return tree.root(size).hex()


def test_the_shared_prefix_of_a_fork_is_still_consistent(signer: Signer) -> None:
    honest, forked = MemoryLedger(9), MemoryLedger(12, fork_after=6)
    document = consistency_document(forked, 6, 12)  # type: ignore[arg-type]
    assert verify_proof(document, [honest.checkpoint(signer, 6)], signer.verifier()).from_size == 6


CONSISTENCY_TAMPERING = {
    "from_root": _set("from_root", _flip_hex),
    "to_root": _set("to_root", _flip_hex),
    "proof hash": _set("proof", lambda v: [*v[:-1], _flip_hex(v[-1])]),
    "proof dropped": _set("proof", lambda v: v[1:]),
    "from_size": _set("from_size", lambda v: v + 1),
    "to_size": _set("to_size", lambda v: v + 1),
}


@pytest.mark.parametrize("mutate", CONSISTENCY_TAMPERING.values(),
                         ids=CONSISTENCY_TAMPERING.keys())
def test_any_change_to_a_consistency_proof_fails(
    ledger: MemoryLedger, signer: Signer, mutate: Callable[[dict[str, Any]], None]
) -> None:
    document = copy.deepcopy(consistency_document(ledger, 5, 13))  # type: ignore[arg-type]
    notes = [ledger.checkpoint(signer, 5), ledger.checkpoint(signer, 13)]
    mutate(document)
    with pytest.raises(IntegrityError):
        verify_proof(document, notes, signer.verifier())


@given(data=st.data(), count=st.integers(min_value=1, max_value=40))
def test_documents_verify_for_any_size_and_position(data: st.DataObject, count: int) -> None:
    ledger, signer = MemoryLedger(count), Signer.generate("prop")
    size = data.draw(st.integers(min_value=1, max_value=count))
    position = data.draw(st.integers(min_value=1, max_value=size))
    old = data.draw(st.integers(min_value=0, max_value=size))
    note = ledger.checkpoint(signer, size)
    assert verify_proof(inclusion_document(ledger, position, size),  # type: ignore[arg-type]
                        [note], signer.verifier()).position == position
    document = consistency_document(ledger, old, size)  # type: ignore[arg-type]
    assert verify_proof(document, [ledger.checkpoint(signer, old), note],
                        signer.verifier()).from_size == old


# ------------------------------------------------------------------ checkpoints and notes


def test_a_checkpoint_verifies_with_its_key_and_the_default_origin(
    ledger: MemoryLedger, signer: Signer
) -> None:
    checkpoint = open_checkpoint(ledger.checkpoint(signer, 13), signer.verifier())
    assert (checkpoint.origin, checkpoint.size) == ("arena-ledger/log.example", 13)


def test_a_checkpoint_fails_with_another_key_even_under_the_same_name(
    ledger: MemoryLedger, signer: Signer
) -> None:
    note = ledger.checkpoint(signer, 13)
    for other in (Signer.generate("other.example"), Signer.generate("log.example")):
        with pytest.raises(SignatureInvalid):
            open_checkpoint(note, other.verifier(), origin="arena-ledger/log.example")


def test_a_checkpoint_fails_with_another_origin(ledger: MemoryLedger, signer: Signer) -> None:
    note = ledger.checkpoint(signer, 13, origin="ledger.example/arena")
    with pytest.raises(IntegrityError, match="origin") as caught:
        open_checkpoint(note, signer.verifier())
    assert caught.value.context["reason"] == "origin_mismatch"
    assert open_checkpoint(note, signer.verifier(), origin="ledger.example/arena").size == 13
    with pytest.raises(IntegrityError, match="origin"):
        verify_proof(inclusion_document(ledger, 1), [note],  # type: ignore[arg-type]
                     signer.verifier(), origin="arena-ledger/log.example")


def test_changing_any_single_character_of_a_checkpoint_note_fails(
    ledger: MemoryLedger, signer: Signer
) -> None:
    note = ledger.checkpoint(signer, 13)
    for index, char in enumerate(note):
        replacement = "A" if char != "A" else "B"
        tampered = note[:index] + replacement + note[index + 1 :]
        with pytest.raises(IntegrityError):
            open_checkpoint(tampered, signer.verifier())


# ------------------------------------------------------------------------ parse failures


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (b"not json", "not valid JSON"),
        (b"[]", "JSON object"),
        (b'{"format": "arena-ledger.proof.v0", "kind": "inclusion"}', "format"),
        (b'{"format": "arena-ledger.proof.v1", "kind": "exclusion"}', "kind"),
        (b'{"format": "arena-ledger.proof.v1", "kind": ["inclusion"]}', "kind"),
        (b'{"format": "arena-ledger.proof.v1", "kind": {}}', "kind"),
        (b'{"format": "arena-ledger.proof.v1", "format": "x", "kind": "inclusion"}', "duplicate"),
    ],
)
def test_a_malformed_proof_document_is_invalid_input(raw: bytes, message: str) -> None:
    with pytest.raises(InvalidInput, match=message):
        parse_proof_document(raw)


def test_an_oversized_proof_document_is_refused() -> None:
    with pytest.raises(LimitExceeded):
        parse_proof_document(b" " * (proof_document_bytes_max + 1))


def test_a_proof_document_of_exactly_the_limit_is_read(ledger: MemoryLedger) -> None:
    raw = orjson.dumps(inclusion_document(ledger, 4))  # type: ignore[arg-type]
    padded = raw + b" " * (proof_document_bytes_max - len(raw))
    assert parse_proof_document(padded) == orjson.loads(raw)
    with pytest.raises(LimitExceeded, match=f"the limit is {proof_document_bytes_max}"):
        parse_proof_document(padded + b" ")


@pytest.mark.parametrize(
    ("mutate", "path"),
    [
        (lambda d: d.pop("leaf_hash"), "$.leaf_hash"),
        (lambda d: d.update(tree_size="13"), "$.tree_size"),
        (lambda d: d.update(root_hash="AB" * 32), "$.root_hash"),
        (lambda d: d.update(proof=["00" * 31]), "$.proof[0]"),
        (lambda d: d.update(proof=["00" * 32, 5]), "$.proof[1]"),
        (lambda d: d.update(proof=[None]), "$.proof[0]"),
        (lambda d: d["event"].update(extra=1), "$.event.extra"),
        (lambda d: d.update(verified=True), "$.verified"),
        (lambda d: d.update(from_size=2), "$.from_size"),
        (lambda d: d.update(format="arena-ledger.proof.v0"), "$.format"),
        (lambda d: d.pop("format"), "$.format"),
        (lambda d: d.update(kind="exclusion"), "$.kind"),
        (lambda d: d["event"].update(payload_b64="%%%"), "$.event.payload_b64"),
        # "QR==" decodes to b"A" as "QQ==" does: one spelling, as in bundles.
        (lambda d: d["event"].update(payload_b64="QR=="), "$.event.payload_b64"),
        # 64 characters, but bytes.fromhex skips the spaces: 31 bytes, not a hash.
        (lambda d: d.update(root_hash="00" * 30 + " 00 "), "$.root_hash"),
        (lambda d: d.update(proof=[" " + "00" * 31 + " "]), "$.proof[0]"),
        (lambda d: d.update(tree_size=-1), "$.tree_size"),
        (lambda d: d.update(tree_size=merkle.TREE_SIZE_MAX + 1), "$.tree_size"),
        (lambda d: d.update(leaf_index=-1), "$.leaf_index"),
    ],
)
def test_a_missing_or_mistyped_field_names_its_path(
    ledger: MemoryLedger, signer: Signer, mutate: Callable[[dict[str, Any]], Any], path: str
) -> None:
    document = copy.deepcopy(inclusion_document(ledger, 4))  # type: ignore[arg-type]
    mutate(document)
    with pytest.raises(InvalidInput) as caught:
        verify_proof(document, [ledger.checkpoint(signer, 13)], signer.verifier())
    assert caught.value.context["path"] == path


@pytest.mark.parametrize(
    ("mutate", "path"),
    [
        (lambda d: d.update(note="trust me"), "$.note"),
        (lambda d: d.update(leaf_index=0), "$.leaf_index"),
        (lambda d: d.update(kind=None), "$.kind"),
    ],
)
def test_a_consistency_proof_with_a_field_it_does_not_have_names_it(
    ledger: MemoryLedger, signer: Signer, mutate: Callable[[dict[str, Any]], Any], path: str
) -> None:
    # A verifier that skipped fields it does not know would let a proof carry claims nobody
    # checked (a "note", an inclusion's leaf_index) under a valid signature.
    document = copy.deepcopy(consistency_document(ledger, 5, 13))  # type: ignore[arg-type]
    mutate(document)
    with pytest.raises(InvalidInput) as caught:
        verify_proof(document, [ledger.checkpoint(signer, 13)], signer.verifier())
    assert caught.value.context["path"] == path
    with pytest.raises(InvalidInput) as parsed:
        parse_proof_document(orjson.dumps(document))
    assert parsed.value.context["path"] == path


@pytest.mark.parametrize(
    ("from_size", "to_size", "message"),
    [
        (5, 14, "tree size 14 is beyond the ledger's head 13"),
        (-1, 13, "from size -1 must be between 0 and to size 13"),
        (9, 8, "from size 9 must be between 0 and to size 8"),
    ],
)
def test_a_consistency_document_is_refused_outside_the_ledger(
    ledger: MemoryLedger, from_size: int, to_size: int, message: str
) -> None:
    with pytest.raises(InvalidInput) as caught:
        consistency_document(ledger, from_size, to_size)  # type: ignore[arg-type]
    assert caught.value.message == message


def test_verifying_needs_a_checkpoint(ledger: MemoryLedger, signer: Signer) -> None:
    with pytest.raises(InvalidInput, match="at least one"):
        verify_proof(inclusion_document(ledger, 1), [], signer.verifier())  # type: ignore[arg-type]


# ------------------------------------------------------------------------------ key files


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_key_generation_writes_a_private_0600_file_and_a_public_one(tmp_path: Path) -> None:
    files = write_key_files("ops.example", tmp_path / "log.key")
    assert files.public_path == tmp_path / "log.key.pub" == public_key_path(files.private_path)
    assert _mode(files.private_path) == 0o600
    assert _mode(files.public_path) == 0o644  # a verifier key is for handing out
    assert files.private_path.read_text().startswith("PRIVATE+KEY+ops.example+")
    assert files.public_path.read_text().strip() == files.verifier_key
    signer, verifier = load_signer(files.private_path), load_verifier(files.public_path)
    assert signer.verifier() == verifier


def test_key_generation_refuses_to_overwrite_unless_forced(tmp_path: Path) -> None:
    first = write_key_files("ops.example", tmp_path / "log.key")
    with pytest.raises(InvalidInput, match="--force"):
        write_key_files("ops.example", tmp_path / "log.key")
    assert (tmp_path / "log.key.pub").read_text().strip() == first.verifier_key
    os.chmod(tmp_path / "log.key", 0o644)
    second = write_key_files("ops.example", tmp_path / "log.key", force=True)
    assert second.verifier_key != first.verifier_key
    assert _mode(tmp_path / "log.key") == 0o600


def test_an_existing_public_file_also_blocks_generation(tmp_path: Path) -> None:
    (tmp_path / "log.key.pub").write_text("keep me")
    with pytest.raises(InvalidInput, match="already exists"):
        write_key_files("ops.example", tmp_path / "log.key")
    assert not (tmp_path / "log.key").exists()


def test_a_private_key_readable_by_others_is_refused(tmp_path: Path) -> None:
    files = write_key_files("ops.example", tmp_path / "log.key")
    os.chmod(files.private_path, 0o640)
    with pytest.raises(InvalidInput, match="chmod 600"):
        load_signer(files.private_path)


def test_key_files_are_not_interchangeable_and_errors_never_quote_secrets(tmp_path: Path) -> None:
    files = write_key_files("ops.example", tmp_path / "log.key")
    # PRIVATE+KEY+<name>+<key ID>+<base64>: the base64 itself may hold "+", even end in
    # one, so the secret is everything after the fourth "+", never what follows the last.
    secret = files.private_path.read_text().strip().split("+", 4)[4]
    assert len(secret) == 44  # base64 of 0x01 and the 32-byte seed
    with pytest.raises(InvalidInput, match="private key") as caught:
        load_verifier(files.private_path)
    assert secret not in caught.value.message
    damaged = tmp_path / "damaged.key"
    damaged.write_text(files.private_path.read_text().replace("+", "-", 1))
    damaged.chmod(0o600)
    with pytest.raises(InvalidInput) as caught:
        load_signer(damaged)
    assert secret not in caught.value.message
    with pytest.raises(InvalidInput, match="does not exist"):
        load_verifier(tmp_path / "missing.pub")
    binary = tmp_path / "binary.pub"
    binary.write_bytes(b"\xff" + files.public_path.read_bytes())
    with pytest.raises(InvalidInput, match=f"public key file {binary} is not UTF-8 text"):
        load_verifier(binary)
    with pytest.raises(InvalidInput, match=f"public key file {tmp_path} is a directory"):
        load_verifier(tmp_path)
    with pytest.raises(InvalidInput, match="signer key"):
        load_signer_copy = tmp_path / "pub-as-private"
        load_signer_copy.write_text(files.public_path.read_text())
        load_signer_copy.chmod(0o600)
        load_signer(load_signer_copy)


def test_key_generation_into_a_missing_directory_is_refused(tmp_path: Path) -> None:
    with pytest.raises(InvalidInput, match=r"directory .*nowhere does not exist"):
        write_key_files("ops.example", tmp_path / "nowhere" / "log.key")
    assert list(tmp_path.iterdir()) == []


def test_an_oversized_key_file_is_refused_before_it_is_read(tmp_path: Path) -> None:
    files = write_key_files("ops.example", tmp_path / "log.key")
    for path, load in ((files.public_path, load_verifier), (files.private_path, load_signer)):
        with path.open("a") as handle:  # the key, then padding up to one byte past the limit
            handle.write("\n" * (key_file_bytes_max + 1 - path.stat().st_size))
        with pytest.raises(LimitExceeded, match=f"the limit is {key_file_bytes_max}") as caught:
            load(path)
        assert caught.value.context["path"] == str(path)
        os.truncate(path, key_file_bytes_max)  # exactly at the limit: read as before
    assert load_verifier(files.public_path).key_string() == files.verifier_key
    assert load_signer(files.private_path).verifier().key_string() == files.verifier_key


def test_a_file_that_never_ends_is_refused_at_its_limit() -> None:
    # A device says size 0, so the size check let it through and read_bytes never ended
    # (`verify-proof /dev/zero …` hung): it is read one byte past the limit and refused.
    for load in (load_verifier, load_signer):
        with pytest.raises(LimitExceeded, match="the limit is") as caught:
            load(Path("/dev/zero"))
        assert caught.value.context["path"] == "/dev/zero"
    with pytest.raises(LimitExceeded):
        read_file_bytes(Path("/dev/zero"), "proof file", proof_document_bytes_max)


def test_an_invalid_key_name_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    with pytest.raises(InvalidInput, match="key name"):
        write_key_files("has space", tmp_path / "log.key")
    assert list(tmp_path.iterdir()) == []

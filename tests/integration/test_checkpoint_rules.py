"""Pins rules of ``ledger/checkpoint.py`` that the checkpoint and proof tests left loose.

Found by a hand-made mutation review of the module: each test here fails on a small change to
it that every other test let through. Expectations come from docs/verification.md, the
module's docstrings, RFC 9162 §2.1.4.2 and the C2SP checkpoint format, never from the code
under test. The rules:

* the documented limits are the documented numbers: a key file of 4 KiB is read and one byte
  more refused; a proof document of 256 KiB is read and one byte more refused, counted in
  UTF-8 bytes also when it arrives as text; a proof lists at most 65 hashes;
* proof document text that has no UTF-8 form (a lone surrogate) is ``InvalidInput``, not a
  bare ``UnicodeEncodeError`` (a bug this review fixed);
* key generation replaces nothing unless forced, a symbolic link (even a dangling one)
  included, so it never writes through a link; a forced replacement leaves exactly the new
  key in each file, however long the old one was; a path it cannot write is ``InvalidInput``;
* a private key file that others (not only the group) may read is refused;
* a checkpoint's origin is never empty: ``sign_tree`` refuses ``""`` rather than signing
  under the default origin; an issued checkpoint's JSON is the row that was stored;
* positions start at 1: an inclusion document for position 0 is ``NotFound``;
* an event's ``payload_b64`` is standard (not URL-safe) base64 of the stored payload bytes;
* a JSON ``true`` is not an integer: a size, index or version given as one is a mistyped
  field, and a missing or mistyped event field is named by its path under ``$.event``;
* ``verify_proof`` holds checkpoints to the origin it is told, else to the default one;
* every checkpoint given is held to an inclusion proof's size and root, and the verdict lists
  every checkpoint it met and the root of the tree proved (a consistency proof's ``to_root``);
* the RFC's open consistency cases are decided as the docs say: from size 0 the old root must
  be MTH({}), and from n to n the two roots must be equal.
"""

from __future__ import annotations

import base64
import copy
import os
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest
from test_verifiable_proofs import _entries, _fill  # same directory, prepend import mode

from ledger import merkle
from ledger.checkpoint import (
    consistency_document,
    inclusion_document,
    load_signer,
    load_verifier,
    parse_proof_document,
    sign_tree,
    verify_proof,
    write_key_files,
)
from ledger.note import Signer
from ledger.records import EventDraft
from ledger.store import EventStore
from vocabulary.errors import IntegrityError, InvalidInput, LimitExceeded, NotFound

Draft = Callable[..., EventDraft]

#: docs/verification.md, "Limits": a key file of 4 KiB, a proof document of 256 KiB, and
#: 65 hashes, "a path in a tree of 2^64 leaves".
KEY_FILE_BYTES = 4 * 1024
PROOF_DOCUMENT_BYTES = 256 * 1024
PROOF_HASHES = 65


@pytest.fixture(scope="module")
def signer() -> Signer:
    return Signer.generate("rules.example")


def _flip_hex(value: str) -> str:
    return ("1" if value[0] == "0" else "0") + value[1:]


def _root(store: EventStore, size: int) -> str:
    return merkle.root_from_leaves(_entries(store)[:size]).hex()


# ------------------------------------------------------------------------------ key files


def test_a_key_file_of_exactly_4_kib_is_read_and_one_byte_more_is_refused(
    tmp_path: Path,
) -> None:
    files = write_key_files("ops.example", tmp_path / "log.key")
    loaders: list[tuple[Path, Callable[[Path], Any]]] = [
        (files.public_path, lambda path: load_verifier(path).key_string()),
        (files.private_path, lambda path: load_signer(path).verifier().key_string()),
    ]
    for path, load in loaders:
        with path.open("a") as handle:  # the key, then blank lines up to the limit
            handle.write("\n" * (KEY_FILE_BYTES - path.stat().st_size))
        assert path.stat().st_size == KEY_FILE_BYTES
        assert load(path) == files.verifier_key
        with path.open("a") as handle:
            handle.write("\n")
        with pytest.raises(LimitExceeded, match=f"the limit is {KEY_FILE_BYTES}"):
            load(path)


@pytest.mark.parametrize("which", ["private", "public"])
def test_a_dangling_symlink_at_either_key_path_blocks_generation(
    tmp_path: Path, which: str
) -> None:
    # A link is an existing entry: replacing it (or writing through it to its target) is
    # exactly what "never overwritten unless asked" forbids.
    out = tmp_path / "log.key"
    link = out if which == "private" else tmp_path / "log.key.pub"
    target = tmp_path / "elsewhere"
    link.symlink_to(target)
    with pytest.raises(InvalidInput, match="already exists") as caught:
        write_key_files("ops.example", out)
    assert caught.value.context["path"] == str(link)
    assert not target.exists()
    assert [entry.name for entry in tmp_path.iterdir()] == [link.name]  # nothing written


def test_a_forced_replacement_leaves_exactly_the_new_keys(tmp_path: Path) -> None:
    out, public = tmp_path / "log.key", tmp_path / "log.key.pub"
    for path in (out, public):
        path.write_text("x" * 1000 + "\n")  # longer than any key string
        path.chmod(0o600)
    files = write_key_files("ops.example", out, force=True)
    assert public.read_text() == files.verifier_key + "\n"
    private = out.read_text()
    assert private.startswith("PRIVATE+KEY+ops.example+") and private.count("\n") == 1
    assert private.endswith("\n") and "x" not in private.split("+", 4)[3]
    assert load_signer(out).verifier().key_string() == files.verifier_key
    assert load_verifier(public).key_string() == files.verifier_key


def test_a_key_path_that_cannot_be_written_is_invalid_input(tmp_path: Path) -> None:
    out = tmp_path / "log.key"
    out.mkdir()  # --force replaces files, it cannot turn a directory into a key file
    with pytest.raises(InvalidInput, match="cannot write key file") as caught:
        write_key_files("ops.example", out, force=True)
    assert caught.value.context["path"] == str(out)


@pytest.mark.parametrize("mode", [0o604, 0o644, 0o640])
def test_a_private_key_file_that_others_or_the_group_may_read_is_refused(
    tmp_path: Path, mode: int
) -> None:
    files = write_key_files("ops.example", tmp_path / "log.key")
    os.chmod(files.private_path, mode)
    with pytest.raises(InvalidInput, match="chmod 600") as caught:
        load_signer(files.private_path)
    assert f"mode {mode:04o}" in caught.value.message
    os.chmod(files.private_path, 0o600)
    assert stat.S_IMODE(files.private_path.stat().st_mode) == 0o600
    assert load_signer(files.private_path).name == "ops.example"


# --------------------------------------------------------------------------- checkpoints


def test_an_empty_origin_is_refused_not_replaced_by_the_default(
    store: EventStore, draft: Draft, signer: Signer
) -> None:
    _fill(store, draft, 1, 3)
    with pytest.raises(InvalidInput, match="origin"):
        sign_tree(store, signer, origin="")
    assert store.checkpoints() == []


def test_an_issued_checkpoint_shows_as_json_what_was_stored(
    store: EventStore, draft: Draft, signer: Signer
) -> None:
    _fill(store, draft, 1, 3)
    sign_tree(store, signer)  # so that the next one's row id is not its tree size
    issued = sign_tree(store, signer, origin="ledger.example/arena", size=1)
    row = store.checkpoints()[0]
    assert issued.to_json() == {
        "id": row["id"],
        "tree_size": 1,
        "root_hash": _root(store, 1),
        "origin": "ledger.example/arena",
        "key_name": "rules.example",
        "note": row["note"],
    }
    assert row["id"] != 1 and row["note"] == issued.note


# ------------------------------------------------------------------------ proof documents


@pytest.mark.parametrize("position", [0, -1])
def test_positions_start_at_1(store: EventStore, draft: Draft, position: int) -> None:
    _fill(store, draft, 1, 4)
    with pytest.raises(NotFound, match=r"positions 1\.\.4"):
        inclusion_document(store, position)


def test_a_proof_document_of_exactly_256_kib_is_read_and_one_byte_more_is_refused(
    store: EventStore, draft: Draft
) -> None:
    _fill(store, draft, 1, 4)
    raw = orjson.dumps(inclusion_document(store, 2))
    padded = raw + b" " * (PROOF_DOCUMENT_BYTES - len(raw))
    assert parse_proof_document(padded) == orjson.loads(raw)
    assert parse_proof_document(padded.decode("utf-8")) == orjson.loads(raw)
    with pytest.raises(LimitExceeded, match=f"the limit is {PROOF_DOCUMENT_BYTES}"):
        parse_proof_document(padded + b" ")


def test_the_proof_document_limit_counts_utf8_bytes_also_for_text() -> None:
    text = '"' + "é" * (PROOF_DOCUMENT_BYTES // 2) + '"'  # 2 bytes a character in UTF-8
    assert len(text) < PROOF_DOCUMENT_BYTES < len(text.encode("utf-8"))
    with pytest.raises(LimitExceeded, match=f"is {len(text.encode('utf-8'))} bytes"):
        parse_proof_document(text)


@pytest.mark.parametrize("text", ["\ud800", '{"format": "arena-ledger.proof.v1\udfff"}'])
def test_a_proof_document_text_that_is_not_utf8_is_invalid_input(text: str) -> None:
    # A lone surrogate has no UTF-8 form: measuring the text for the size limit raised a bare
    # UnicodeEncodeError, outside the LedgerError tree, instead of naming the fault.
    with pytest.raises(InvalidInput, match="not valid UTF-8") as caught:
        parse_proof_document(text)
    assert caught.value.context["path"] == "$"


def test_a_proof_lists_at_most_65_hashes(store: EventStore, draft: Draft, signer: Signer) -> None:
    _fill(store, draft, 1, 6)
    note = sign_tree(store, signer).note
    document = copy.deepcopy(inclusion_document(store, 3))
    document["proof"] = [document["proof"][0]] * PROOF_HASHES
    with pytest.raises(IntegrityError) as caught:  # read and checked: simply a wrong path
        verify_proof(document, [note], signer.verifier())
    assert caught.value.context["reason"] == "proof_invalid"
    document["proof"].append(document["proof"][0])
    with pytest.raises(LimitExceeded, match=f"at most {PROOF_HASHES}") as limited:
        verify_proof(document, [note], signer.verifier())
    assert limited.value.context["path"] == "$.proof"


def _set(path: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def change(document: dict[str, Any]) -> None:
        *parents, name = path.split(".")
        target = document
        for key in parents:
            target = target[key]
        target[name] = value

    return change


@pytest.mark.parametrize(
    ("position", "size", "field"),
    [
        (2, 6, "leaf_index"),  # leaf index 1: true == 1 in Python
        (1, 1, "tree_size"),
        (1, 6, "event.position"),
        (1, 6, "event.version"),
        (1, 6, "event.schema_version"),
    ],
)
def test_a_json_true_is_not_an_integer_in_an_inclusion_proof(
    store: EventStore, draft: Draft, signer: Signer, position: int, size: int, field: str
) -> None:
    _fill(store, draft, 1, 6)
    note = sign_tree(store, signer, size=size).note
    document = copy.deepcopy(inclusion_document(store, position, size))
    assert verify_proof(document, [note], signer.verifier()).position == position
    _set(field, True)(document)
    with pytest.raises(InvalidInput, match="must be int, not bool") as caught:
        verify_proof(document, [note], signer.verifier())
    assert caught.value.context["path"] == f"$.{field}"


def test_a_json_true_is_not_a_size_in_a_consistency_proof(
    store: EventStore, draft: Draft, signer: Signer
) -> None:
    _fill(store, draft, 1, 6)
    note = sign_tree(store, signer).note
    document = consistency_document(store, 1, 6)
    assert verify_proof(document, [note], signer.verifier()).from_size == 1
    with pytest.raises(InvalidInput) as caught:
        verify_proof({**document, "from_size": True}, [note], signer.verifier())
    assert caught.value.context["path"] == "$.from_size"


#: The eight envelope fields of docs/verification.md's inclusion example.
EVENT_FIELDS = (
    "position",
    "stream",
    "version",
    "type",
    "schema_version",
    "payload_b64",
    "recorded_at",
    "actor",
)


@pytest.mark.parametrize("name", EVENT_FIELDS)
def test_a_missing_or_mistyped_event_field_is_named_under_event(
    store: EventStore, draft: Draft, signer: Signer, name: str
) -> None:
    _fill(store, draft, 1, 3)
    note = sign_tree(store, signer).note
    document = copy.deepcopy(inclusion_document(store, 2))
    missing = copy.deepcopy(document)
    del missing["event"][name]
    with pytest.raises(InvalidInput, match=f"lacks field '{name}'") as caught:
        verify_proof(missing, [note], signer.verifier())
    assert caught.value.context["path"] == f"$.event.{name}"
    value = document["event"][name]
    document["event"][name] = str(value) if isinstance(value, int) else 2
    with pytest.raises(InvalidInput, match=f"field '{name}' must be") as caught:
        verify_proof(document, [note], signer.verifier())
    assert caught.value.context["path"] == f"$.event.{name}"


def test_payload_b64_is_standard_base64_of_the_stored_bytes(
    store: EventStore, signer: Signer
) -> None:
    # docs/verification.md: "standard base64 of the exact stored payload bytes"; these bytes
    # need the two characters where the standard and URL-safe alphabets differ.
    store.append([EventDraft("arena-b64", "ArenaRetired", {"block": 3, "reason": "???~~~"})])
    document = inclusion_document(store, 1)
    encoded = document["event"]["payload_b64"]
    assert "+" in encoded and "/" in encoded
    assert base64.b64decode(encoded, validate=True) == store.get(1).payload_bytes
    note = sign_tree(store, signer).note
    assert verify_proof(document, [note], signer.verifier()).position == 1


@pytest.mark.parametrize("field", ["root_hash", "entry_hash", "leaf_hash", "previous_hash"])
def test_a_hash_field_must_be_64_lowercase_hex_digits(
    store: EventStore, draft: Draft, signer: Signer, field: str
) -> None:
    _fill(store, draft, 1, 3)
    document = copy.deepcopy(inclusion_document(store, 2))
    document[field] = document[field][:-1]
    with pytest.raises(InvalidInput, match="must be 64 lowercase hex digits") as caught:
        verify_proof(document, [sign_tree(store, signer).note], signer.verifier())
    assert caught.value.context["path"] == f"$.{field}"


# --------------------------------------------------------------------------- verifying


def test_a_proof_verifies_against_checkpoints_of_the_origin_it_is_told(
    store: EventStore, draft: Draft, signer: Signer
) -> None:
    # The default origin is arena-ledger/<key name> "unless it is told another one".
    _fill(store, draft, 1, 4)
    note = sign_tree(store, signer, origin="ledger.example/arena").note
    for document in (inclusion_document(store, 2), consistency_document(store, 1)):
        verdict = verify_proof(document, [note], signer.verifier(), origin="ledger.example/arena")
        assert verdict.origin == "ledger.example/arena"
        with pytest.raises(IntegrityError) as caught:
            verify_proof(document, [note], signer.verifier())
        assert caught.value.context["reason"] == "origin_mismatch"


def test_every_checkpoint_given_is_held_to_an_inclusion_proofs_size(
    store: EventStore, draft: Draft, signer: Signer
) -> None:
    _fill(store, draft, 1, 8)
    at5, at8 = sign_tree(store, signer, size=5).note, sign_tree(store, signer).note
    document = inclusion_document(store, 3, 5)
    for notes in ([at5, at8], [at8, at5]):
        with pytest.raises(IntegrityError) as caught:
            verify_proof(document, notes, signer.verifier())
        assert caught.value.context["reason"] == "size_mismatch"
    verdict = verify_proof(document, [at5, at5], signer.verifier())
    assert verdict.checkpoint_sizes == (5, 5)
    assert verdict.to_json()["checkpoint_sizes"] == [5, 5]


def test_a_verdict_reports_the_root_of_the_tree_it_proved(
    store: EventStore, draft: Draft, signer: Signer
) -> None:
    _fill(store, draft, 1, 9)
    old, new = sign_tree(store, signer, size=4), sign_tree(store, signer)
    assert (old.root_hash, new.root_hash) == (_root(store, 4), _root(store, 9))
    inclusion = verify_proof(inclusion_document(store, 2, 4), [old.note], signer.verifier())
    assert (inclusion.tree_size, inclusion.root_hash) == (4, old.root_hash)
    consistency = verify_proof(
        consistency_document(store, 4, 9), [old.note, new.note], signer.verifier()
    )
    assert (consistency.from_size, consistency.tree_size) == (4, 9)
    assert consistency.root_hash == new.root_hash
    assert consistency.checkpoint_sizes == (4, 9)
    shown = consistency.to_json()
    assert (shown["ok"], shown["root_hash"], shown["tree_size"]) == (True, new.root_hash, 9)
    assert shown["checkpoint_sizes"] == [4, 9]


def test_a_consistency_proof_from_size_0_needs_the_empty_tree_root(
    store: EventStore, draft: Draft, signer: Signer
) -> None:
    _fill(store, draft, 1, 6)
    note = sign_tree(store, signer).note
    document = consistency_document(store, 0, 6)
    assert (document["from_root"], document["proof"]) == (merkle.EMPTY_ROOT.hex(), [])
    assert verify_proof(document, [note], signer.verifier()).from_size == 0
    with pytest.raises(IntegrityError) as caught:
        verify_proof({**document, "from_root": _root(store, 3)}, [note], signer.verifier())
    assert caught.value.context["reason"] == "proof_invalid"


def test_a_consistency_proof_from_a_size_to_itself_needs_equal_roots(
    store: EventStore, draft: Draft, signer: Signer
) -> None:
    _fill(store, draft, 1, 6)
    note = sign_tree(store, signer).note
    document = consistency_document(store, 6, 6)
    assert document["from_root"] == document["to_root"] and document["proof"] == []
    assert verify_proof(document, [note], signer.verifier()).tree_size == 6
    with pytest.raises(IntegrityError) as caught:
        verify_proof({**document, "from_root": _root(store, 5)}, [note], signer.verifier())
    assert caught.value.context["reason"] == "proof_invalid"

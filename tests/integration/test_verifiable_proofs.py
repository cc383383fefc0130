"""Checks checkpoints and proof documents made by the real store, on SQLite and PostgreSQL.

The forked-ledger case builds two databases of the same backend: the second starts as an
import of the first one's prefix, then each ledger appends different events.
"""

from __future__ import annotations

import base64
import copy
import os
import re
import stat
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import orjson
import pytest
from rfc9162 import (
    assert_proofs_match_the_rfc,
    rfc_leaf,
    rfc_mth,
)
from sqlalchemy import event, text
from tampering import triggers_bypassed

from ledger import merkle
from ledger.bundle import export_bundle, import_bundle
from ledger.checkpoint import (
    consistency_document,
    inclusion_document,
    load_signer,
    load_verifier,
    open_checkpoint,
    parse_proof_document,
    sign_tree,
    verify_proof,
    write_key_files,
)
from ledger.note import Signer
from ledger.records import EventDraft
from ledger.store import EventStore
from ledger.stored_tree import stored_entry_hash
from vocabulary import limits
from vocabulary.errors import IntegrityError, InvalidInput, LimitExceeded, NotFound

Draft = Callable[..., EventDraft]


@pytest.fixture(scope="module")
def signer() -> Signer:
    return Signer.generate("ops.example")


def _fill(store: EventStore, draft: Draft, first: int, last: int, tag: str = "a") -> None:
    streams = ("arena-" + tag, "credit-" + tag, "settlement")
    store.append([draft(streams[n % 3], n) for n in range(first, last + 1)])


def _entries(store: EventStore) -> list[bytes]:
    return [bytes.fromhex(e.entry_hash) for e in store.read_all()]


def test_a_checkpoint_signs_the_head_and_is_stored_newest_first(
    store: EventStore, draft: Draft, signer: Signer
) -> None:
    empty = sign_tree(store, signer)
    assert (empty.tree_size, empty.root_hash) == (0, merkle.EMPTY_ROOT.hex())
    _fill(store, draft, 1, 21)
    issued = sign_tree(store, signer, origin="ledger.example/arena")
    assert issued.tree_size == 21
    assert issued.root_hash == merkle.root_from_leaves(_entries(store)).hex()
    checkpoint = open_checkpoint(issued.note, signer.verifier(), origin="ledger.example/arena")
    assert (checkpoint.size, checkpoint.root_hash.hex()) == (21, issued.root_hash)
    listed = store.checkpoints()
    assert [row["id"] for row in listed] == [issued.id, empty.id]
    assert listed[0]["note"] == issued.note and listed[0]["key_name"] == "ops.example"


def test_an_origin_or_key_name_longer_than_the_store_keeps_is_refused_on_both_backends(
    store: EventStore, draft: Draft, signer: Signer, tmp_path: Path
) -> None:
    # PostgreSQL's columns hold 256 characters; SQLite kept more, so the same command
    # worked on one backend and failed on the other after the note was signed.
    _fill(store, draft, 1, 3)
    longest = "o" * limits.checkpoint_origin_chars_max
    assert sign_tree(store, signer, origin=longest).origin == longest
    with pytest.raises(LimitExceeded, match="checkpoint origin is 257 characters; at most 256"):
        sign_tree(store, signer, origin=longest + "o")
    named = Signer.generate("k" * (limits.key_name_chars_max + 1))
    with pytest.raises(LimitExceeded, match="key name is 129 characters; at most 128"):
        sign_tree(store, named)
    assert [row["origin"] for row in store.checkpoints()] == [longest]
    keys = tmp_path / "keys"
    keys.mkdir()
    with pytest.raises(LimitExceeded, match="key name is 129 characters"):
        write_key_files(named.name, keys / "k.key")
    assert list(keys.iterdir()) == []
    made = write_key_files("k" * limits.key_name_chars_max, keys / "k.key")
    assert made.key_name == "k" * limits.key_name_chars_max


def test_store_proofs_equal_the_reference_tree_and_verify_at_every_position(
    store: EventStore, draft: Draft, signer: Signer
) -> None:
    _fill(store, draft, 1, 37)
    leaves = _entries(store)
    note = sign_tree(store, signer).note
    for position in range(1, 38):
        document = inclusion_document(store, position)
        reference = merkle.inclusion_proof_from_leaves(position - 1, leaves)
        assert document["proof"] == [h.hex() for h in reference]
        assert verify_proof(document, [note], signer.verifier()).position == position


def test_an_older_checkpoint_needs_a_proof_at_its_size(
    store: EventStore, draft: Draft, signer: Signer
) -> None:
    _fill(store, draft, 1, 10)
    old = sign_tree(store, signer).note
    _fill(store, draft, 11, 19)
    with pytest.raises(IntegrityError, match="--size 10"):
        verify_proof(inclusion_document(store, 4), [old], signer.verifier())
    assert verify_proof(inclusion_document(store, 4, 10), [old], signer.verifier()).tree_size == 10
    with pytest.raises(NotFound):
        inclusion_document(store, 11, 10)
    with pytest.raises(InvalidInput, match="beyond"):
        inclusion_document(store, 1, 20)


def test_consistency_holds_between_every_pair_of_checkpoints(
    store: EventStore, draft: Draft, signer: Signer
) -> None:
    notes = {}
    for last in (1, 2, 5, 16, 17, 33):
        _fill(store, draft, store.head().position + 1, last)
        notes[last] = sign_tree(store, signer).note
    for old in notes:
        for new in notes:
            if old <= new:
                document = consistency_document(store, old, new)
                verdict = verify_proof(document, [notes[old], notes[new]], signer.verifier())
                assert (verdict.from_size, verdict.tree_size) == (old, new)


def test_a_forked_ledger_fails_the_consistency_proof_against_the_older_checkpoint(
    store: EventStore, spare_store: EventStore, draft: Draft, signer: Signer, tmp_path: Path
) -> None:
    _fill(store, draft, 1, 6)
    export_bundle(store, tmp_path / "prefix", signer=signer)
    import_bundle(spare_store, tmp_path / "prefix", signer.verifier())
    forked = spare_store
    _fill(store, draft, 7, 9, tag="honest")
    _fill(forked, draft, 7, 12, tag="forged")
    published = sign_tree(store, signer).note  # the older checkpoint, at size 9
    with pytest.raises(IntegrityError, match="forked") as caught:
        verify_proof(consistency_document(forked, 9, 12), [published], signer.verifier())
    assert caught.value.context["reason"] == "root_mismatch"
    with pytest.raises(IntegrityError, match="not the one that was signed"):
        verify_proof(inclusion_document(forked, 8, 9), [published], signer.verifier())
    # Both still share the prefix both signed, and the honest ledger's growth checks out.
    prefix = sign_tree(store, signer, size=6).note
    assert verify_proof(consistency_document(forked, 6, 12), [prefix], signer.verifier())
    _fill(store, draft, 10, 12, tag="honest")
    assert verify_proof(consistency_document(store, 9), [published], signer.verifier())


def test_a_proof_reads_its_nodes_in_a_fixed_number_of_queries(
    store: EventStore, draft: Draft
) -> None:
    # A round trip per node would make a proof's cost grow with its depth; the tree names
    # the nodes a proof needs up front and reads them in two queries.
    from sqlalchemy import event

    _fill(store, draft, 1, 300)
    leaves = _entries(store)
    statements: list[str] = []

    def count(_conn: object, _cursor: object, statement: str, *_: object) -> None:
        statements.append(statement)

    event.listen(store.engine, "before_cursor_execute", count)
    try:
        for index, size in [(0, 300), (137, 300), (299, 300), (200, 257), (5, 17)]:
            with store.tree() as tree:
                statements.clear()
                proof = tree.inclusion_proof(index, size)
                consistency = tree.consistency_proof(size - 3, size)
            assert proof == merkle.inclusion_proof_from_leaves(index, leaves[:size])
            assert consistency == merkle.consistency_proof_from_leaves(size - 3, leaves[:size])
            assert len(statements) <= 4, statements  # two per proof, whatever the size
    finally:
        event.remove(store.engine, "before_cursor_execute", count)


def test_a_tree_size_outside_the_ledger_is_bad_input(store: EventStore, draft: Draft) -> None:
    _fill(store, draft, 1, 9)
    with store.tree() as tree:
        assert tree.root(None) == tree.root(9) == merkle.root_from_leaves(_entries(store))
        assert tree.root(0) == merkle.EMPTY_ROOT and tree.consistency_proof(0, 0) == []
        for size in (-1, 10, True, "9"):
            for ask in (tree.root, lambda s: tree.inclusion_proof(0, s),
                        lambda s: tree.consistency_proof(0, s)):
                with pytest.raises(InvalidInput, match=r"tree size .* is outside 0\.\.9"):
                    ask(size)


def test_a_proof_over_a_deleted_event_is_not_found_rather_than_a_wrong_hash(
    store: EventStore, draft: Draft
) -> None:
    # Position 8's path at size 12 holds the node over positions 1-4, recomputed from their
    # entry hashes (it is below stored_level_min); with position 3 gone it cannot be.
    _fill(store, draft, 1, 12)
    leaves = _entries(store)
    with triggers_bypassed(store) as conn:
        conn.execute(text("DELETE FROM events WHERE position = 3"))
    with store.tree() as tree:
        # A tree of two leaves still proves: its path is clear of position 3.
        assert tree.inclusion_proof(0, 2) == merkle.inclusion_proof_from_leaves(0, leaves[:2])
        with pytest.raises(NotFound, match=r"events 1\.\. are missing for Merkle node \(2, 0\)"):
            tree.inclusion_proof(7, 12)


@pytest.mark.parametrize("damage", ["node", "frontier"])
def test_verify_with_tree_holds_the_stored_tree_to_the_entry_hashes(
    store: EventStore, draft: Draft, signer: Signer, damage: str
) -> None:
    # The chain does not cover the stored tree: an altered node or head frontier went
    # unnoticed by verify, and the next checkpoint signed (or proof served) a wrong root.
    _fill(store, draft, 1, 40)
    whole = store.verify(tree=True)
    assert whole.ok and whole.merkle_root == merkle.root_from_leaves(_entries(store)).hex()
    assert store.verify().merkle_root is None  # the tree is checked only when asked
    with triggers_bypassed(store) as conn:
        if damage == "node":
            # Node (5, 0), over positions 1-32, is one of the two the root at size 40 reads.
            conn.execute(text("UPDATE merkle_nodes SET hash = :h WHERE level = 5 AND idx = 0"),
                         {"h": bytes(32)})
        else:
            frontier = conn.execute(text("SELECT frontier FROM ledger_head")).scalar_one()
            altered = bytes(frontier)[:-1] + bytes([bytes(frontier)[-1] ^ 1])
            conn.execute(text("UPDATE ledger_head SET frontier = :f"), {"f": altered})
    assert store.verify().ok  # the chain itself is intact
    report = store.verify(tree=True)
    assert (report.ok, report.kind, report.merkle_root) == (False, "tree_mismatch",
                                                           whole.merkle_root)
    named = "tree" if damage == "node" else "head's frontier"
    assert report.problem is not None and report.problem.startswith(f"the stored Merkle {named}")
    with pytest.raises(InvalidInput, match="cannot start at 2"):
        store.verify(2, tree=True)


@pytest.mark.parametrize("damage", ["altered", "deleted"])
def test_verify_with_tree_checks_every_stored_node_not_only_the_roots_path(
    store: EventStore, draft: Draft, damage: str
) -> None:
    # Node (4, 1), over positions 17-32, is under (5, 0): the root at size 40 never reads
    # it, but a proof of position 20 at size 24, or a consistency proof from 20, does.
    _fill(store, draft, 1, 40)
    leaves = _entries(store)
    with triggers_bypassed(store) as conn:
        if damage == "altered":
            conn.execute(text("UPDATE merkle_nodes SET hash = :h WHERE level = 4 AND idx = 1"),
                         {"h": bytes(32)})
        else:
            conn.execute(text("DELETE FROM merkle_nodes WHERE level = 4 AND idx = 1"))
    with store.tree() as tree:  # the root at the head is still right, a proof is not
        assert tree.root() == merkle.root_from_leaves(leaves)
    report = store.verify(tree=True)
    assert (report.ok, report.kind, report.first_bad_position) == (False, "tree_mismatch", 17)
    shown = "missing" if damage == "deleted" else "0" * 64
    assert report.problem is not None and report.problem.startswith(
        f"the stored Merkle tree's node (4, 1), over positions 17-32, is {shown}, but the "
        f"entry hashes give {merkle.root_from_leaves(leaves[16:32]).hex()}"
    )
    assert report.merkle_root == merkle.root_from_leaves(leaves).hex()
    # A range that ends before the damaged node is not judged on it.
    assert store.verify(1, 16, tree=True).ok


def test_a_proof_over_a_deleted_stored_node_says_the_store_is_damaged(
    store: EventStore, draft: Draft
) -> None:
    # Position 21's path at size 40 holds node (4, 0), over positions 1-16, which is stored.
    _fill(store, draft, 1, 40)
    with triggers_bypassed(store) as conn:
        conn.execute(text("DELETE FROM merkle_nodes WHERE level = 4 AND idx = 0"))
    with store.tree() as tree:
        assert tree.inclusion_proof(39, 40) == merkle.inclusion_proof_from_leaves(
            39, _entries(store)
        )  # a path that does not need it
        with pytest.raises(NotFound, match=r"Merkle node \(4, 0\) is not stored; the store is"):
            tree.inclusion_proof(20, 40)


# The stored tree agrees with RFC 9162's recursion (tests/rfc9162.py) at sizes around powers of
# two, where nodes of 16 leaves are stored and lower ones recomputed from entry hashes, and a node
# ending past the tree is beyond it, not damage.


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
            assert tree.root(size) == rfc_mth(data), size
            assert_proofs_match_the_rfc(
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
        assert tree.get_node(4, 0) == rfc_mth(leaves[:16])
        assert tree.get_node(0, 30) == rfc_leaf(leaves[30])
        assert tree.get_node(2, 6) == rfc_mth(leaves[24:28])  # recomputed from entry hashes
        for level, index in [(4, 1), (0, 31), (1, 15), (5, 0)]:
            with pytest.raises(NotFound, match=re.escape(f"({level}, {index}) is beyond size 31")):
                tree.get_node(level, index)


# Checkpoint and proof-document rules from docs/verification.md, RFC 9162 §2.1.4.2 and the C2SP
# checkpoint format: the documented limits are inclusive (a key file of 4 KiB, a proof document of
# 256 KiB counted in UTF-8 bytes, 65 hashes); key generation replaces nothing unless forced and
# never writes through a link; a private key others may read is refused; an origin is never empty;
# positions start at 1; payload_b64 is standard base64; a JSON true is neither an integer nor a
# size; a proof is held to the checkpoints of the origin it is told.


#: docs/verification.md, "Limits": a key file of 4 KiB, a proof document of 256 KiB, and
#: 65 hashes, "a path in a tree of 2^64 leaves".
KEY_FILE_BYTES = 4 * 1024


PROOF_DOCUMENT_BYTES = 256 * 1024


PROOF_HASHES = 65


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
        "key_name": "ops.example",
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


# The Merkle tree kept in the store: a stored entry hash is exactly 64 lowercase hex digits; a
# head row past the last event is head_mismatch there, whoever reads it; damage found while the
# head row is held says what did not happen; get_node on a recomputed node names the damaged
# position itself; a root reads its nodes in two queries whatever the size. Expected roots come
# from ledger.merkle's reference recursion over the entry hashes read back.


def test_an_entry_hash_of_more_than_64_hex_digits_is_damage() -> None:
    # 33 bytes spelled in lowercase hex round-trip through bytes.fromhex; only the length
    # rule refuses them (SQLite's TEXT column keeps such a value, PostgreSQL's varchar(64)
    # does not).
    assert stored_entry_hash(7, "ab" * 32) == bytes([0xAB]) * 32
    for value in ("ab" * 33, "ab" * 31, None):
        with pytest.raises(IntegrityError, match="entry hash at position 7 is missing") as err:
            stored_entry_hash(7, value)
        assert err.value.context == {"reason": "hash_mismatch", "position": 7}


def test_a_head_row_past_the_last_event_is_a_head_mismatch_there(
    store: EventStore, draft: Draft
) -> None:
    # The head row says 6 where the events table ends at 5: the check names the head row
    # (no event at 6), not a damaged entry hash at 6, and nothing is signed or written.
    _fill(store, draft, 1, 5)
    with store.engine.begin() as conn:  # ledger_head is updated by every append: no trigger
        conn.execute(text("UPDATE ledger_head SET position = 6 WHERE id = 1"))
    for doing, act in (
        ("signed", lambda: sign_tree(store, Signer.generate("ops.example"))),
        ("written", lambda: store.append([draft("arena-a", 6)])),
    ):
        with pytest.raises(IntegrityError, match="the events table holds no event there") as err:
            act()
        assert err.value.context == {"reason": "head_mismatch", "position": 6}
        assert f"nothing was {doing}" in err.value.message
    assert [e.position for e in store.read_all()] == [1, 2, 3, 4, 5]
    assert store.checkpoints() == []


def test_a_damaged_entry_hash_under_the_head_says_nothing_was_signed_or_written(
    store: EventStore, draft: Draft
) -> None:
    _fill(store, draft, 1, 5)
    with triggers_bypassed(store) as conn:
        conn.execute(text("UPDATE events SET entry_hash = :h WHERE position = 4"), {"h": "zz" * 32})
    for doing, act in (
        ("signed", lambda: sign_tree(store, Signer.generate("ops.example"))),
        ("written", lambda: store.append([draft("arena-a", 6)])),
    ):
        with pytest.raises(IntegrityError, match="entry hash at position 4") as err:
            act()
        assert err.value.context == {"reason": "hash_mismatch", "position": 4}
        assert f"the store is damaged; nothing was {doing}. Run" in err.value.message
    assert store.head().position == 5 and store.checkpoints() == []


def test_get_node_names_the_damaged_position_under_a_recomputed_node(
    store: EventStore, draft: Draft
) -> None:
    # Node (2, 2) covers positions 9-12 and is recomputed from their entry hashes (below
    # stored_level_min); read directly, with no proof naming it first, it names position
    # 11, the damaged one, not 9.
    _fill(store, draft, 1, 12)
    leaves = _entries(store)
    with triggers_bypassed(store) as conn:
        conn.execute(
            text("UPDATE events SET entry_hash = :h WHERE position = 11"), {"h": "zz" * 32}
        )
    with store.tree() as tree:
        assert tree.get_node(2, 1) == merkle.root_from_leaves(leaves[4:8])
        with pytest.raises(IntegrityError, match="entry hash at position 11 is missing") as err:
            tree.get_node(2, 2)
    assert err.value.context == {"reason": "hash_mismatch", "position": 11}


def test_a_root_reads_its_nodes_in_two_queries(store: EventStore, draft: Draft) -> None:
    # The root at 45 = 32 + 8 + 4 + 1 needs node (5, 0), stored, and three recomputed from
    # entry hashes: one query for stored nodes and one for entry hashes, not one per node.
    _fill(store, draft, 1, 45)
    leaves = _entries(store)
    statements: list[str] = []

    def count(_conn: object, _cursor: object, statement: str, *_: object) -> None:
        statements.append(statement)

    event.listen(store.engine, "before_cursor_execute", count)
    try:
        for size in (45, 44, 13):
            with store.tree() as tree:
                statements.clear()
                root = tree.root(size)
            assert root == merkle.root_from_leaves(leaves[:size]), size
            assert len(statements) <= 2, (size, statements)
    finally:
        event.remove(store.engine, "before_cursor_execute", count)

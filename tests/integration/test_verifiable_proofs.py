"""Checks checkpoints and proof documents made by the real store, on SQLite and PostgreSQL.

The forked-ledger case builds two databases of the same backend: the second starts as an
import of the first one's prefix, then each ledger appends different events.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from sqlalchemy import text
from tampering import triggers_bypassed

from ledger import merkle
from ledger.bundle import export_bundle, import_bundle
from ledger.checkpoint import (
    consistency_document,
    inclusion_document,
    open_checkpoint,
    sign_tree,
    verify_proof,
    write_key_files,
)
from ledger.note import Signer
from ledger.records import EventDraft
from ledger.store import EventStore
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
    # A node per round trip made PostgreSQL proofs cost ~0.5 ms per level; the tree now
    # names the nodes a proof needs up front and reads them in two queries.
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

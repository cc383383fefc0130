"""Pins rules of ``ledger/stored_tree.py`` (the Merkle tree kept in the store) that no test held.

Found by a hand-made mutation review of the module: each test here fails on one small change
to it that every other test let through. Expected roots come from ``ledger.merkle``'s
reference recursion over the entry hashes read back from the store, never from the tree
under test. The rules, on SQLite and PostgreSQL:

* a stored entry hash is exactly 64 lowercase hex digits: 66 are damage, not a hash;
* a head row that names a position past the last event is ``head_mismatch`` at that
  position, "no event there", whether a checkpoint or an append reads it;
* damage found while the head row is held to the tables says what did not happen
  ("nothing was signed", "nothing was written");
* ``get_node`` on a node recomputed from entry hashes names the damaged position itself,
  not the first one under the node;
* a root, like a proof, reads its nodes in two queries whatever the size.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from sqlalchemy import event, text
from tampering import triggers_bypassed
from test_verifiable_proofs import _entries, _fill  # same directory, prepend import mode

from ledger import merkle
from ledger.checkpoint import sign_tree
from ledger.note import Signer
from ledger.records import EventDraft
from ledger.store import EventStore
from ledger.stored_tree import stored_entry_hash
from vocabulary.errors import IntegrityError

Draft = Callable[..., EventDraft]


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

"""Proves the append-only triggers refuse changes, and that verify() finds forced tampering.

Tampering goes around the store with raw SQL. To model an attacker with database rights, the
triggers are bypassed the way such a person would: SQLite drops them (and they are put back),
PostgreSQL sets ``session_replication_role = replica`` for one transaction.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pytest
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError
from tampering import triggers_bypassed

from ledger.checkpoint import consistency_document, inclusion_document, sign_tree
from ledger.note import Signer
from ledger.records import EventDraft, VerifyReport
from ledger.store import EventStore
from ledger.verify import raw_rows, verify_chain
from vocabulary import limits
from vocabulary.errors import IntegrityError, InvalidInput, StoreError

Draft = Callable[..., EventDraft]


@pytest.fixture
def ledger(store: EventStore, draft: Draft) -> EventStore:
    """Holds five events on three streams, one of them under an idempotency key."""
    store.append([draft("arena-t", 1), draft("credit-t", 1)], idempotency_key="first")
    store.append([draft("arena-t", 2)])
    store.append([draft("submission-" + "ab" * 32, 1), draft("arena-t", 3)])
    assert store.verify().ok
    return store


def _row(store: EventStore, position: int) -> tuple[Any, ...]:
    with store.engine.connect() as conn:
        row = conn.execute(text("SELECT * FROM events WHERE position = :p"), {"p": position}).one()
    return tuple(bytes(v) if isinstance(v, memoryview) else v for v in row)


def _keys(store: EventStore) -> list[tuple[Any, ...]]:
    with store.engine.connect() as conn:
        return [tuple(r) for r in conn.execute(text("SELECT * FROM idempotency_keys"))]


def _flip_byte(payload: bytes, index: int) -> bytes:
    return payload[:index] + bytes([payload[index] ^ 0x01]) + payload[index + 1 :]


def _assert_bad(report: VerifyReport, position: int, kind: str) -> None:
    assert report.ok is False
    assert (report.first_bad_position, report.kind) == (position, kind), report
    assert report.problem  # a sentence a person can act on


# -- the triggers ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "statement",
    [
        "UPDATE events SET payload = payload WHERE position = 2",
        "UPDATE events SET actor = 'mallory' WHERE position = 2",
        "UPDATE events SET entry_hash = '0000000000000000000000000000000000000000000000000000000000000000' WHERE position = 2",  # noqa: E501
        "DELETE FROM events WHERE position = 2",
        "DELETE FROM events",
        "UPDATE idempotency_keys SET first_position = 3",
        "DELETE FROM idempotency_keys",
    ],
)
def test_the_database_refuses_update_and_delete_of_recorded_rows(
    ledger: EventStore, statement: str
) -> None:
    before_rows = [_row(ledger, p) for p in range(1, 6)]
    before_keys = _keys(ledger)

    with pytest.raises(DBAPIError) as caught, ledger.engine.begin() as conn:
        conn.exec_driver_sql(statement)

    assert "append-only" in str(caught.value.orig)
    assert [_row(ledger, p) for p in range(1, 6)] == before_rows
    assert _keys(ledger) == before_keys
    assert ledger.verify().ok


def test_postgresql_also_refuses_truncate(ledger: EventStore) -> None:
    if ledger.backend != "postgresql":
        pytest.skip("SQLite has no TRUNCATE; its DELETE without WHERE is refused above")
    for table in ("events", "idempotency_keys"):
        with pytest.raises(DBAPIError) as caught, ledger.engine.begin() as conn:
            conn.exec_driver_sql(f"TRUNCATE {table}")
        assert "append-only" in str(caught.value.orig)
    assert ledger.verify().checked == 5


def test_a_range_past_the_head_or_backwards_is_bad_input_not_a_broken_chain(
    ledger: EventStore,
) -> None:
    # The untampered 5-event ledger: a gap report here would blame the chain for a typo.
    assert ledger.verify(5).ok and ledger.verify(5).checked == 1
    for first, last in ((6, None), (500, None), (3, 2)):
        with pytest.raises(InvalidInput):
            ledger.verify(first, last)
    assert ledger.verify(1, 500).checked == 5  # a range ending past the head stops there


def test_a_range_starting_past_a_one_event_head_is_bad_input(
    store: EventStore, draft: Draft
) -> None:
    # "From 1" is always a valid start, even on an empty ledger; past the head is not.
    assert store.verify(1).ok and store.verify(1).checked == 0
    store.append([draft("arena-t", 1)])
    assert store.verify(1).checked == 1
    with pytest.raises(InvalidInput, match="past the head"):
        store.verify(2)


def test_appends_still_work_after_a_refused_change(ledger: EventStore, draft: Draft) -> None:
    with pytest.raises(DBAPIError), ledger.engine.begin() as conn:
        conn.exec_driver_sql("DELETE FROM events WHERE position = 5")
    assert ledger.append([draft("arena-t", 4)]).positions == (6,)
    assert ledger.verify().checked == 6


def test_the_bypass_is_temporary_and_the_triggers_come_back(ledger: EventStore) -> None:
    with triggers_bypassed(ledger) as conn:
        conn.execute(text("UPDATE events SET actor = 'mallory' WHERE position = 1"))
    assert _row(ledger, 1)[7] == "mallory"  # the bypass really bypassed
    with pytest.raises(DBAPIError) as caught, ledger.engine.begin() as conn:
        conn.exec_driver_sql("UPDATE events SET actor = 'eve' WHERE position = 1")
    assert "append-only" in str(caught.value.orig)


# -- what verify() finds ---------------------------------------------------------------------


@pytest.mark.parametrize("position", [1, 3, 5])
def test_one_flipped_payload_byte_is_found_at_its_position(
    ledger: EventStore, position: int
) -> None:
    payload = _row(ledger, position)[5]
    flipped = _flip_byte(payload, len(payload) // 2)
    with triggers_bypassed(ledger) as conn:
        conn.execute(text("UPDATE events SET payload = :p WHERE position = :n"),
                     {"p": flipped, "n": position})
    assert _row(ledger, position)[5] == flipped

    _assert_bad(ledger.verify(), position, "hash_mismatch")
    if position > 1:
        assert ledger.verify(1, position - 1).ok  # the prefix before it still verifies


@pytest.mark.parametrize(
    ("column", "value"),
    [("actor", "mallory"), ("recorded_at", "1999-01-01T00:00:00.000000Z"), ("version", 9),
     ("type", "ArenaRetireD"), ("schema_version", 2), ("stream", "arena-u"),
     ("entry_hash", "f" * 64)],
)
def test_every_envelope_field_is_covered_by_the_hash(
    ledger: EventStore, column: str, value: Any
) -> None:
    with triggers_bypassed(ledger) as conn:
        conn.execute(text(f"UPDATE events SET {column} = :v WHERE position = 3"), {"v": value})
    _assert_bad(ledger.verify(), 3, "hash_mismatch")


def test_two_swapped_payloads_are_found_at_the_first_of_them(ledger: EventStore) -> None:
    second, fourth = _row(ledger, 2)[5], _row(ledger, 4)[5]
    assert second != fourth
    with triggers_bypassed(ledger) as conn:
        for position, payload in ((2, fourth), (4, second)):
            conn.execute(text("UPDATE events SET payload = :p WHERE position = :n"),
                         {"p": payload, "n": position})
    _assert_bad(ledger.verify(), 2, "hash_mismatch")


@pytest.mark.parametrize(
    ("deleted", "gap", "problem"),
    [
        ("position = 3", 3, "position 3 is missing (next stored is 4)"),  # a row
        ("position >= 4", 4, "events end at position 3 but the head says 5"),  # the tail
        # Only the very last row: the chain up to it is intact and the head still says 5.
        ("position = 5", 5, "events end at position 4 but the head says 5"),
    ],
)
def test_deleted_rows_are_a_gap_at_the_first_missing_position(
    ledger: EventStore, deleted: str, gap: int, problem: str
) -> None:
    head = ledger.head()
    with triggers_bypassed(ledger) as conn:
        conn.execute(text(f"DELETE FROM events WHERE {deleted}"))
    assert ledger.head() == head  # the head still says 5
    report = ledger.verify()
    _assert_bad(report, gap, "gap")
    assert report.checked == gap - 1
    assert report.problem == problem


def test_a_head_that_disagrees_with_the_last_event_is_found(ledger: EventStore) -> None:
    with ledger.engine.begin() as conn:  # ledger_head is updated by every append: no trigger
        conn.execute(text("UPDATE ledger_head SET entry_hash = :h WHERE id = 1"), {"h": "e" * 64})
    _assert_bad(ledger.verify(), 5, "head_mismatch")
    _assert_bad(ledger.verify(5), 5, "head_mismatch")  # also by a range starting at the head


def test_a_deleted_head_row_is_named_as_damage_by_every_reader_of_it(
    ledger: EventStore, draft: Draft
) -> None:
    with ledger.engine.begin() as conn:  # ledger_head has no trigger (see above)
        conn.execute(text("DELETE FROM ledger_head"))

    def tree() -> None:
        with ledger.tree():
            pass

    for call in (ledger.head, ledger.merkle_root, tree, ledger.verify,
                 lambda: ledger.append([draft("arena-t")])):
        with pytest.raises(StoreError, match="the ledger_head row is missing; the database is "
                           "damaged"):
            call()
    assert [e.position for e in ledger.read_all()] == [1, 2, 3, 4, 5]  # nothing was written


def test_events_past_the_head_are_found(ledger: EventStore) -> None:
    with ledger.engine.begin() as conn:
        conn.execute(text("UPDATE ledger_head SET position = 4, entry_hash = "
                          "(SELECT entry_hash FROM events WHERE position = 4) WHERE id = 1"))
    _assert_bad(ledger.verify(), 5, "head_mismatch")


def test_an_export_refuses_events_past_the_head(ledger: EventStore, tmp_path: Any) -> None:
    # A bundle of positions 1..4 would verify on its own and leave position 5 out, so a
    # second validator would replay a shorter ledger without a word.
    from ledger.bundle import export_bundle

    with ledger.engine.begin() as conn:
        conn.execute(text("UPDATE ledger_head SET position = 4, entry_hash = "
                          "(SELECT entry_hash FROM events WHERE position = 4) WHERE id = 1"))
    out = tmp_path / "exports"
    out.mkdir()
    for to_position in (None, 2):
        with pytest.raises(IntegrityError) as err:
            export_bundle(ledger, out / "b", to_position=to_position)
        assert err.value.context == {"reason": "head_mismatch", "position": 5}
        assert err.value.message.startswith(
            "events exist past the head (up to position 5; the ledger_head row says 4)")
        assert "nothing was exported" in err.value.message
    assert list(out.iterdir()) == []


def test_an_append_that_commits_while_verify_reads_is_not_damage(
    ledger: EventStore, draft: Draft, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A validator appends while an operator verifies: the append moves the head and adds
    rows in one transaction, so verify checks the chain up to the head it started from and
    does not report the new rows as events written past the head."""
    import ledger.verify as verify_module

    reader = verify_module.raw_rows

    def rows_with_an_append(store: EventStore, first: int, last: int,
                            conn: Any = None) -> Any:
        for n, row in enumerate(reader(store, first, last, conn)):
            if n == 1:
                with EventStore(store.url) as writer:
                    writer.append([draft("arena-t", 4)])
            yield row

    monkeypatch.setattr(verify_module, "raw_rows", rows_with_an_append)
    report = ledger.verify()
    assert report.ok and report.checked == 5, report
    monkeypatch.undo()
    assert ledger.verify().checked == 6


def test_a_range_whose_previous_row_was_deleted_names_that_row(ledger: EventStore) -> None:
    # A range starting at 4 chains from the stored hash of 3; with 3 gone there is none.
    with triggers_bypassed(ledger) as conn:
        conn.execute(text("DELETE FROM events WHERE position = 3"))
    report = ledger.verify(4)
    _assert_bad(report, 3, "gap")
    assert report.checked == 0
    assert report.problem == "position 3 (the one before the range) is missing"


def test_a_range_of_one_position_is_verified(ledger: EventStore) -> None:
    for position in (1, 3, 5):
        report = ledger.verify(position, position)
        assert report.ok and report.checked == 1, report
        assert (report.from_position, report.to_position) == (position, position)


def test_a_range_that_ends_before_the_head_is_not_judged_on_rows_past_it(
    ledger: EventStore,
) -> None:
    with ledger.engine.begin() as conn:  # as in the test above: row 5 lies past the head
        conn.execute(text("UPDATE ledger_head SET position = 4, entry_hash = "
                          "(SELECT entry_hash FROM events WHERE position = 4) WHERE id = 1"))
    assert ledger.verify(1, 4).ok and ledger.verify(2, 4).checked == 3
    _assert_bad(ledger.verify(), 5, "head_mismatch")


def test_verify_chain_checks_from_the_first_position_by_default(ledger: EventStore) -> None:
    report = verify_chain(ledger)
    assert report.ok and report.checked == 5
    assert (report.from_position, report.to_position) == (1, 5)
    assert report.head_hash == ledger.head().entry_hash


def test_a_damaged_merkle_frontier_stops_the_next_append(
    ledger: EventStore, draft: Draft
) -> None:
    # Five events: a frontier of two subtree roots (4 + 1). One dropped would make every
    # later root, proof and checkpoint wrong; the append refuses (an integrity failure,
    # exit 4, not bad input) and writes nothing.
    with ledger.engine.begin() as conn:  # ledger_head is updated by every append: no trigger
        frontier = bytes(
            conn.execute(text("SELECT frontier FROM ledger_head WHERE id = 1")).scalar_one()
        )
        assert len(frontier) == 2 * 32
        conn.execute(text("UPDATE ledger_head SET frontier = :f WHERE id = 1"),
                     {"f": frontier[:32]})
    with pytest.raises(IntegrityError, match="frontier differs from the stored tree in len") as err:
        ledger.append([draft("arena-t", 4)])
    assert err.value.context["reason"] == "frontier_mismatch"
    assert ledger.head().position == 5


def _head_row(store: EventStore) -> tuple[int, str, bytes]:
    with store.engine.connect() as conn:
        row = conn.execute(
            text("SELECT position, entry_hash, frontier FROM ledger_head WHERE id = 1")
        ).one()
    return int(row[0]), str(row[1]), bytes(row[2])


def _checkpoints(store: EventStore) -> int:
    with store.engine.connect() as conn:
        return int(conn.execute(text("SELECT COUNT(*) FROM checkpoints")).scalar_one())


@pytest.fixture
def grown(ledger: EventStore, draft: Draft) -> EventStore:
    """Holds 37 events: a frontier of a stored node (32 leaves, level 5) and two subtrees
    recomputed from entry hashes (4 leaves and 1)."""
    ledger.append([draft("arena-t", v) for v in range(4, 36)])
    assert _head_row(ledger)[0] == 37
    return ledger


def test_an_uppercase_stored_entry_hash_is_damage_not_a_hash(
    grown: EventStore, draft: Draft
) -> None:
    # Entry hashes are stored as 64 lowercase hex digits, and the chain compares that text:
    # an uppercase spelling is a row altered outside arena-ledger, refused by its readers.
    with grown.engine.connect() as conn:
        value = conn.execute(text("SELECT entry_hash FROM events WHERE position = 35")).scalar()
    with triggers_bypassed(grown) as conn:
        conn.execute(text("UPDATE events SET entry_hash = :h WHERE position = 35"),
                     {"h": str(value).upper()})
    with pytest.raises(IntegrityError, match="entry hash at position 35") as err:
        grown.append([draft("arena-t", 37)])
    assert err.value.context["reason"] == "hash_mismatch"
    assert grown.head().position == 37
    with pytest.raises(IntegrityError, match="entry hash at position 35") as err:
        inclusion_document(grown, 35)
    assert err.value.context == {"reason": "hash_mismatch", "position": 35}


def test_a_missing_right_edge_node_is_named_as_tree_damage(grown: EventStore) -> None:
    # A stored node of the head's right edge that is gone is tree damage, named, not a
    # fault of the head row's frontier.
    with triggers_bypassed(grown) as conn:
        conn.execute(text("DELETE FROM merkle_nodes WHERE level = 5 AND idx = 0"))
    with pytest.raises(IntegrityError, match=r"Merkle node \(5, 0\) is not stored") as err:
        sign_tree(grown, Signer.generate("ops.example"))
    assert err.value.context["reason"] == "tree_mismatch"


def test_advance_frontier_refuses_a_frontier_that_does_not_match_the_size() -> None:
    # A frontier holds one subtree hash per set bit of the size; one of another length
    # would pop the wrong siblings, so it is refused rather than built on.
    from ledger.stored_tree import advance_frontier

    some = bytes(range(32))
    one, _ = advance_frontier(b"", 0, [some])
    assert len(one) == 32
    for frontier, size in ((b"", 1), (one, 3), (one + one, 1)):
        with pytest.raises(InvalidInput, match="frontier does not match the ledger size"):
            advance_frontier(frontier, size, [some])


def _forge_frontier(store: EventStore, element: int) -> bytes:
    """Flips one bit of the head row's frontier element ``element`` (same length)."""
    _, _, frontier = _head_row(store)
    index = element * 32
    forged = _flip_byte(frontier, index)
    with store.engine.begin() as conn:  # ledger_head is updated by every append: no trigger
        conn.execute(text("UPDATE ledger_head SET frontier = :f WHERE id = 1"), {"f": forged})
    return forged


@pytest.mark.parametrize(("element", "node"), [(0, "(5, 0)"), (1, "(2, 8)"), (2, "(0, 36)")])
def test_a_forged_frontier_of_the_right_length_is_neither_signed_nor_built_on(
    grown: EventStore, draft: Draft, element: int, node: str
) -> None:
    # A frontier written into ledger_head (the one row appends rewrite, so no trigger keeps
    # it) would otherwise be signed as the head's root by an honest operator's key, and the
    # next append would build append-only nodes from it.
    forged = _forge_frontier(grown, element)
    before = _head_row(grown)
    at_node = rf"differs from the stored tree at node {re.escape(node)}"
    with pytest.raises(IntegrityError, match=at_node) as err:
        sign_tree(grown, Signer.generate("ops.example"))
    assert err.value.context["reason"] == "frontier_mismatch"
    assert "nothing was signed" in err.value.message
    assert _checkpoints(grown) == 0
    with pytest.raises(IntegrityError, match="nothing was written") as err:
        grown.append([draft("arena-t", 36)])
    assert err.value.context["reason"] == "frontier_mismatch"
    assert _head_row(grown) == before
    # Put back, both work again: the check compares, it does not guess.
    with grown.engine.begin() as conn:
        conn.execute(text("UPDATE ledger_head SET frontier = :f WHERE id = 1"),
                     {"f": _flip_byte(forged, element * 32)})
    assert sign_tree(grown, Signer.generate("ops.example")).tree_size == 37
    grown.append([draft("arena-t", 36)])
    assert grown.verify(tree=True).ok


def test_a_head_hash_that_is_not_the_last_events_stops_the_next_append(
    grown: EventStore, draft: Draft
) -> None:
    # The next event would chain from it: a break written into the append-only table.
    with grown.engine.begin() as conn:
        conn.execute(text("UPDATE ledger_head SET entry_hash = :h WHERE id = 1"), {"h": "e" * 64})
    before = _head_row(grown)
    for act in (lambda: grown.append([draft("arena-t", 36)]),
                lambda: sign_tree(grown, Signer.generate("ops.example"))):
        with pytest.raises(IntegrityError, match=r"position 37 has entry hash e{64}") as err:
            act()
        assert err.value.context["reason"] == "head_mismatch"
    assert _head_row(grown) == before
    assert _checkpoints(grown) == 0


def test_a_stored_entry_hash_that_is_not_hex_is_named_not_a_traceback(
    grown: EventStore, draft: Draft
) -> None:
    with triggers_bypassed(grown) as conn:
        conn.execute(text("UPDATE events SET entry_hash = :h WHERE position = 35"),
                     {"h": "zz" * 32})
    not_hex = "entry hash at position 35 is missing or not 64"
    with pytest.raises(IntegrityError, match=not_hex) as err:
        grown.append([draft("arena-t", 36)])
    assert err.value.context["reason"] == "hash_mismatch"
    assert _head_row(grown)[0] == 37
    # Proofs whose path recomputes a node over it, or that print it, say the same.
    for prove in (lambda: inclusion_document(grown, 35), lambda: inclusion_document(grown, 36),
                  lambda: consistency_document(grown, 34)):
        with pytest.raises(IntegrityError, match="entry hash at position 35") as err:
            prove()
        assert err.value.context == {"reason": "hash_mismatch", "position": 35}


def test_verify_on_a_ledger_whose_events_table_was_dropped_is_a_clean_error(
    ledger: EventStore,
) -> None:
    # verify reads raw driver pages below SQLAlchemy; a driver error there must still be a
    # StoreError subclass with a message (the CLI prints one line), not a traceback.
    from vocabulary.errors import StoreError

    with ledger.engine.begin() as conn:
        conn.exec_driver_sql("DROP TABLE events")
    with pytest.raises(StoreError, match="run `arena-ledger init`"):
        ledger.verify()


def test_a_head_moved_back_stops_the_next_append_naming_the_event_past_it(
    ledger: EventStore, draft: Draft
) -> None:
    # The append would collide with position 5 (a conflict no retry passes) or, on a store
    # without the key, fork the log; it is an integrity failure before anything is written.
    with ledger.engine.begin() as conn:  # ledger_head is updated by every append: no trigger
        conn.execute(text("UPDATE ledger_head SET position = 4 WHERE id = 1"))
    before = [_row(ledger, p) for p in range(1, 6)]
    with pytest.raises(IntegrityError, match=r"events exist past the head \(position 5") as err:
        ledger.append([draft("arena-t", 4)])
    assert err.value.context == {"reason": "head_mismatch", "position": 5}
    assert "nothing was written" in err.value.message
    assert [_row(ledger, p) for p in range(1, 6)] == before


# Verification over a range: an end past the head and a start before position 1 are clamped, not
# reported as damage; an explicit end judges the range's events, not the head row; a gap report
# carries the last good hash; rows past the head are named from the first of them, found by the
# largest stored position; windowed reads neither repeat nor skip a position; an uppercase stored
# entry hash is a mismatch.


# -- verify: ranges ---------------------------------------------------------------------------


@pytest.fixture
def five(store: EventStore, draft: Draft) -> EventStore:
    """Holds five events on two streams, appended in three calls."""
    store.append([draft("arena-r", 1), draft("credit-r", 1)])
    store.append([draft("arena-r", 2)])
    store.append([draft("arena-r", 3), draft("credit-r", 2)])
    return store


def test_a_range_ending_past_the_head_is_clamped_to_the_head_and_ok(five: EventStore) -> None:
    head = five.head()
    for first, last in ((1, 6), (1, 500), (4, 9)):
        report = five.verify(first, last)
        assert report.ok, report
        assert (report.from_position, report.to_position) == (first, 5)
        assert report.checked == 6 - first
        assert report.first_bad_position is None and report.kind == "ok"
        assert report.head_hash == head.entry_hash


@pytest.mark.parametrize("first", [0, -3])
def test_a_start_before_position_one_checks_from_position_one(
    five: EventStore, first: int
) -> None:
    report = verify_chain(five, first)
    assert report.ok, report
    assert (report.from_position, report.to_position, report.checked) == (1, 5, 5)
    assert report.head_hash == five.head().entry_hash


# -- verify: what a gap report names ----------------------------------------------------------


def test_a_gap_report_carries_the_hash_of_the_last_good_position(
    store: EventStore, draft: Draft
) -> None:
    hashes = store.append([draft("arena-g", n) for n in range(1, 6)]).entry_hashes
    with triggers_bypassed(store) as conn:
        conn.execute(text("DELETE FROM events WHERE position = 3"))
    report = store.verify()
    assert (report.ok, report.kind, report.first_bad_position, report.checked) == (
        False, "gap", 3, 2)
    # Where the chain was last known good, not a hash chained over the missing row.
    assert report.head_hash == hashes[1]
    ranged = store.verify(2, 5)
    assert (ranged.kind, ranged.first_bad_position, ranged.checked) == ("gap", 3, 1)
    assert ranged.head_hash == hashes[1]


def test_events_past_the_head_are_named_from_the_first_of_them(five: EventStore) -> None:
    with five.engine.begin() as conn:  # ledger_head is updated by every append: no trigger
        conn.execute(text("UPDATE ledger_head SET position = 3, entry_hash = "
                          "(SELECT entry_hash FROM events WHERE position = 3) WHERE id = 1"))
    report = five.verify()
    assert (report.ok, report.kind, report.first_bad_position) == (False, "head_mismatch", 4)
    assert report.problem == "events exist past the head (up to position 5)"


def test_a_range_with_an_explicit_end_judges_its_events_not_the_head_row(
    five: EventStore,
) -> None:
    # A range names the events it checks; the head row is judged by a run to the head
    # (no end given), as rows past the head are.
    with five.engine.begin() as conn:
        conn.execute(text("UPDATE ledger_head SET entry_hash = :h WHERE id = 1"), {"h": "e" * 64})
    for first in (1, 5):
        assert (five.verify(first, 5).ok, five.verify(first, 5).checked) == (True, 6 - first)
        judged = five.verify(first)
        assert (judged.ok, judged.kind, judged.first_bad_position) == (
            False, "head_mismatch", 5)


# -- verify: windowed reads -------------------------------------------------------------------


@pytest.fixture
def seven_small_pages(
    store: EventStore, draft: Draft, monkeypatch: pytest.MonkeyPatch
) -> EventStore:
    """Holds seven events, read two positions a window (windows 1-2, 3-4, 5-6, 7)."""
    store.append([draft("arena-w", n) for n in range(1, 8)])
    monkeypatch.setattr(limits, "read_page_events", 2)
    return store


def test_raw_rows_reads_each_position_once_across_windows(seven_small_pages: EventStore) -> None:
    def positions(first: int, last: int) -> list[int]:
        return [row[0] for row in raw_rows(seven_small_pages, first, last)]

    assert positions(1, 7) == [1, 2, 3, 4, 5, 6, 7]
    assert positions(2, 5) == [2, 3, 4, 5]
    assert positions(4, 4) == [4]
    assert positions(6, 9) == [6, 7]


def test_verify_reads_windows_without_repeating_or_skipping(seven_small_pages: EventStore) -> None:
    report = seven_small_pages.verify()
    assert (report.ok, report.checked, report.to_position) == (True, 7, 7), report
    ranged = seven_small_pages.verify(2, 6)
    assert (ranged.ok, ranged.checked, ranged.to_position) == (True, 5, 6), ranged


def test_events_past_the_head_are_found_when_a_row_before_the_range_is_missing(
    five: EventStore,
) -> None:
    # Four rows remain (2, 3, 4, 5) and the head says 4: a count of rows would match it, but
    # the largest stored position, 5, lies past the head.
    with triggers_bypassed(five) as conn:
        conn.execute(text("DELETE FROM events WHERE position = 1"))
    with five.engine.begin() as conn:
        conn.execute(text("UPDATE ledger_head SET position = 4, entry_hash = "
                          "(SELECT entry_hash FROM events WHERE position = 4) WHERE id = 1"))
    report = five.verify(3)
    assert (report.ok, report.kind, report.first_bad_position, report.checked) == (
        False, "head_mismatch", 5, 2)
    assert report.problem == "events exist past the head (up to position 5)"


# -- verify: the stored entry hash is compared as stored --------------------------------------


def test_verify_names_an_uppercase_stored_entry_hash_as_a_mismatch(five: EventStore) -> None:
    # Entry hashes are 64 lowercase hex digits; another spelling of the same digest is a row
    # altered outside arena-ledger, and verify says so rather than normalising it.
    hashes = [row[8] for row in raw_rows(five, 1, 5)]
    with triggers_bypassed(five) as conn:
        conn.execute(text("UPDATE events SET entry_hash = :h WHERE position = 3"),
                     {"h": str(hashes[2]).upper()})
    for first, last in ((1, None), (3, 3), (2, 5)):
        report = five.verify(first, last)
        assert (report.ok, report.kind, report.first_bad_position) == (
            False, "hash_mismatch", 3), report
        assert report.checked == 3 - first

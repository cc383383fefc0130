"""Pins codec and chain-verification rules that a hand-made mutation review found unpinned.

Each test fails on one mutant of ``vocabulary/codec.py`` or ``ledger/verify.py`` that the rest
of the suite let through. Codec: fixed-6 quantizing does not depend on the caller's decimal
context; a str subclass is refused as a key and rebuilt as a plain ``str`` as a value;
``loads`` reads a ``bytearray`` as strict UTF-8, as it reads bytes. Verify: a range end past
the head and a start before position 1 are clamped, not reported as damage; an explicit end
judges the range's events, not the head row; a gap report carries the last good hash; rows
past the head are named from the first of them and found by the largest stored position,
not a row count; windowed reads neither repeat nor skip a position; an uppercase stored
entry hash is a mismatch. Expected bytes and values are written out here, never taken from
the function under test. Store tests run on SQLite and a real PostgreSQL (``store``).
"""

from __future__ import annotations

from collections.abc import Callable
from decimal import Decimal, Inexact, localcontext
from typing import Any

import pytest
from sqlalchemy import text
from tampering import triggers_bypassed

from ledger.records import EventDraft
from ledger.store import EventStore
from ledger.verify import raw_rows, verify_chain
from vocabulary import limits
from vocabulary.codec import canonical_bytes, fixed6, loads, normalise
from vocabulary.errors import CanonicalFormError

Draft = Callable[..., EventDraft]


# -- codec: fixed6 ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "spelled"),
    [
        ("1.0191285", "1.019128"),  # half-even: the 8 before the dropped 5 stays
        ("1.0191295", "1.019130"),
        ("123456.7890125", "123456.789012"),
        ("-2.5000005", "-2.500000"),
    ],
)
def test_fixed6_does_not_depend_on_the_callers_decimal_context(value: str, spelled: str) -> None:
    # Two validators with different decimal contexts must spell one result the same way: a
    # low precision or a trapped Inexact in the caller's context changes nothing.
    with localcontext() as ctx:
        ctx.prec = 3
        ctx.traps[Inexact] = True
        assert fixed6(Decimal(value)) == spelled


# -- codec: str subclasses --------------------------------------------------------------------


class _Text(str):
    """A str subclass with nothing overridden."""


def test_a_str_subclass_value_is_rebuilt_as_a_plain_str() -> None:
    rebuilt = normalise({"k": _Text("v"), "l": [_Text("w")]})
    assert rebuilt == {"k": "v", "l": ["w"]}
    assert type(rebuilt["k"]) is str
    assert type(rebuilt["l"][0]) is str
    assert canonical_bytes({"k": _Text("v")}) == b'{"k":"v"}'


class _Spelled(str):
    """A str subclass whose ``__str__`` spells something else (as a ``(str, Enum)`` member's
    spells its name, "Speed.FAST", not the "fast" it holds)."""

    def __str__(self) -> str:
        return "spelled otherwise"


def test_a_str_subclass_with_its_own_str_encodes_as_the_string_it_holds() -> None:
    # One value, one spelling (DOMAIN §2.4): a str subclass holding "fast" must hash like
    # "fast", not like what its __str__ returns.
    fast = _Spelled("fast")
    assert str(fast) == "spelled otherwise"
    assert canonical_bytes({"k": fast, "l": [fast]}) == b'{"k":"fast","l":["fast"]}'
    rebuilt = normalise({"k": fast})
    assert rebuilt == {"k": "fast"} and type(rebuilt["k"]) is str


def test_a_str_subclass_key_is_refused_naming_the_key_and_its_path() -> None:
    for call in (normalise, canonical_bytes):
        with pytest.raises(CanonicalFormError) as caught:
            call({"a": {_Text("k"): 1}})
        assert caught.value.message == "object key 'k' at $.a is not a string"
        assert caught.value.context["path"] == "$.a"


# -- codec: loads and a bytearray -------------------------------------------------------------


@pytest.mark.parametrize(
    ("data", "message"),
    [
        # json.loads would read these from bytes of another encoding; the ledger reads UTF-8.
        (b"\xef\xbb\xbf{}", "input is not valid JSON: Unexpected UTF-8 BOM (decode using "
         "utf-8-sig) at column 1"),
        (b'\xff\xfe{\x00"\x00a\x00"\x00:\x001\x00}\x00', "input is not valid UTF-8 (byte 0)"),
        (b'{"a":"\xff"}', "input is not valid UTF-8 (byte 6)"),
    ],
)
def test_loads_reads_a_bytearray_as_strict_utf8_like_bytes(data: bytes, message: str) -> None:
    both: tuple[Any, ...] = (data, bytearray(data))  # loads takes a bytearray as bytes
    for raw in both:
        with pytest.raises(CanonicalFormError) as caught:
            loads(raw)
        assert caught.value.message == message


def test_loads_accepts_a_bytearray_of_utf8_json() -> None:
    raw: Any = bytearray('{"a":["é",1]}'.encode())
    assert loads(raw) == {"a": ["é", 1]}


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

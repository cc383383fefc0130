"""Pins ``DiskArchive``'s edges and one intake rule that a mutation review found untested.

Each test here fails on a hand-made mutant of ``ledger/archive.py`` or ``machines/intake.py``
that the rest of the suite let pass, or caught only after a long hypothesis search: the row
buffer and the index batch written exactly at their limits, a link made after a flush, link
names spelled into a row up to ``archive_names_chars_max`` and no further, a full filter growing (and
keeping the keys already in the file), fresh keys answered "never archived" from memory, link
names holding a colon (the fold's failed names do) or spelled after a two-digit space number,
a closed archive holding nothing, and a credit spent by another submission left alone.
"""

from __future__ import annotations

import pytest

from ledger import archive as archive_module
from ledger.archive import DiskArchive
from machines import arena, samples, submission
from machines.intake import Admission, CreditView, IntakeContext, Rejection, intake


def _rows_in_file(archive: DiskArchive) -> int:
    return int(archive._db.execute("SELECT count(*) FROM rows").fetchone()[0])


def _index_entries_in_file(archive: DiskArchive, space: str) -> int:
    number = archive._spaces[space].number
    return int(archive._db.execute(f"SELECT count(*) FROM index_{number}").fetchone()[0])


def test_rows_are_written_when_the_buffer_holds_flush_entries() -> None:
    # The n-th row waits until the buffer holds ``flush_entries`` rows; the next one writes them.
    with DiskArchive(flush_entries=3) as archive:
        written = []
        for n in range(7):
            archive.put("submission", f"s{n}", b"%d" % n)
            written.append(_rows_in_file(archive))
        assert written == [0, 0, 0, 3, 3, 3, 6]
        assert [archive.get("submission", f"s{n}") for n in range(7)] == [
            b"%d" % n for n in range(7)
        ]
    with DiskArchive(flush_entries=3) as archive:
        written = []
        for n in range(7):  # links to a key never put: each a row of its own
            archive.link("attempt", f"a{n}", "s")
            written.append(_rows_in_file(archive))
        assert written == [0, 0, 0, 3, 3, 3, 6]
        assert [archive.target("attempt", f"a{n}") for n in range(7)] == ["s"] * 7


def test_a_row_spells_link_names_until_names_chars_max_then_links_get_rows(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Each name is spelled "1:xx\n" (5 characters): two reach a limit of 10, a third does not fit.
    monkeypatch.setattr(archive_module, "archive_names_chars_max", 10)
    with DiskArchive() as archive:
        links = [("attempt", "a1"), ("attempt", "a2"), ("attempt", "a3")]
        archive.put("submission", "s", b"s", links=links)  # names given with the put
        archive.put("submission", "t", b"t")
        for name in ("b1", "b2", "b3"):  # names given right after it
            archive.link("attempt", name, "t")
        archive.flush()
        rows = archive._db.execute(
            "SELECT key, value IS NULL, names FROM rows ORDER BY id"
        ).fetchall()
        assert rows == [
            ("s", 0, "1:a1\n1:a2\n"),
            ("a3", 1, ""),
            ("t", 0, "1:b1\n1:b2\n"),
            ("b3", 1, ""),
        ]
        targets = [archive.target("attempt", name) for name in ("a1", "a2", "a3", "b1", "b3")]
        assert targets == ["s", "s", "s", "t", "t"]


def test_a_link_to_the_record_just_put_is_found_when_a_flush_came_between() -> None:
    # The record's row is in the file by then: the link is a row of its own, not a name
    # added to a row already written.
    with DiskArchive() as archive:
        archive.put("submission", "s", b"s")
        archive.flush()
        archive.link("attempt", "a", "s")
        assert archive.target("attempt", "a") == "s"
        archive.flush()
        assert archive.target("attempt", "a") == "s"
        assert list(archive.links("attempt")) == [("a", "s")]


def test_index_entries_are_written_once_index_entries_wait() -> None:
    with DiskArchive(index_entries=3) as archive:
        archive.put("submission", "s0", b"0")
        archive.put("submission", "s1", b"1")
        archive.flush()
        assert _index_entries_in_file(archive, "submission") == 0  # two wait, fewer than three
        archive.put("submission", "s2", b"2")
        archive.flush()
        assert _index_entries_in_file(archive, "submission") == 3
        assert archive._spaces["submission"].pending == {}
        assert [archive.get("submission", f"s{n}") for n in range(3)] == [b"0", b"1", b"2"]


def test_a_key_put_again_counts_each_time_toward_the_index_batch() -> None:
    # A key put three times is three index entries (two of them in ``older``): a batch.
    with DiskArchive(index_entries=3) as archive:
        for version in (b"1", b"2", b"3"):
            archive.put("admission", "7", version)
        archive.flush()
        assert _index_entries_in_file(archive, "admission") == 3
        assert archive.get("admission", "7") == b"3"  # the newest, now read from the file
        assert list(archive.values("admission")) == [b"3"]


def test_a_full_filter_grows_at_its_capacity_and_keeps_the_keys_in_the_file(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # One 64-bit word: a capacity of six keys. Every put flushes the row before it and writes
    # its index entry, so the filter that grows is rebuilt from the file's index alone.
    monkeypatch.setattr(archive_module, "bloom_keys_initial", 1)
    with DiskArchive(flush_entries=1, index_entries=1) as archive:
        capacities = []
        for n in range(8):
            archive.put("failed", f"f{n}", b"%d" % n)  # its flush sees n keys
            capacities.append(archive._spaces["failed"].capacity)
        assert capacities[:6] == [6] * 6  # five keys or fewer: not full
        assert capacities[6] > 6 and capacities[7] == capacities[6]  # six: full, grown
        assert all(archive.might_hold("failed", f"f{n}") for n in range(8))
        assert [archive.get("failed", f"f{n}") for n in range(8)] == [b"%d" % n for n in range(8)]


def test_fresh_keys_are_answered_absent_in_memory_when_the_index_is_in_the_file(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # 20 keys in a filter of 256 bits, their index entries all in the file: a fresh key's
    # three bits are rarely all set (about 2%), so few questions read the file.
    monkeypatch.setattr(archive_module, "bloom_keys_initial", 16)
    with DiskArchive(flush_entries=1, index_entries=1) as archive:
        for n in range(20):
            archive.put("payment", f"p{n}", b"%d" % n)
        archive.flush()
        spaced = archive._spaces["payment"]
        assert (spaced.capacity, spaced.indexed) == (25, 20)  # not grown; all in the file
        reads: list[str] = []
        archive._db.set_trace_callback(reads.append)
        absent = [archive.get("payment", f"q{n}") for n in range(2000)]
        unlinked = [archive.target("payment", f"q{n}") for n in range(2000)]
        archive._db.set_trace_callback(None)
        maybe = sum(archive.might_hold("payment", f"q{n}") for n in range(2000))
        assert all(archive.might_hold("payment", f"p{n}") for n in range(20))
    assert absent == [None] * 2000 and unlinked == [None] * 2000
    assert maybe < 200, f"{maybe} of 2,000 absent keys answered 'maybe'"
    assert len(reads) < 400, f"{len(reads)} reads for 4,000 questions about absent keys"


def test_link_names_holding_a_colon_stay_in_their_own_space() -> None:
    # The fold's failed names are "<digest>:<content hash>"; spelled in a row after the space's
    # number, "2:c0ffee1:feed" holds "1:" (the attempt space's prefix) past its start.
    with DiskArchive() as archive:
        links = [("attempt", "a"), ("failed", "c0ffee1:feed")]
        archive.put("submission", "s", b"s", links=links)
        archive.flush()
        assert list(archive.links("attempt")) == [("a", "s")]
        assert list(archive.links("failed")) == [("c0ffee1:feed", "s")]
        assert list(archive.links("submission")) == []
        assert archive.target("failed", "c0ffee1:feed") == "s"


def test_links_of_space_eleven_are_not_listed_under_space_one() -> None:
    # A row spells a link "<space number>:<name>": without the colon, space 11's "a" would
    # read as space 1's "1a".
    with DiskArchive() as archive:
        for n in range(12):
            archive.put(f"space{n}", "k", b"%d" % n)  # spaces numbered 0 to 11
        archive.put("space0", "s", b"s", links=[("space11", "a")])
        archive.flush()
        assert list(archive.links("space1")) == []
        assert list(archive.links("space11")) == [("a", "s")]
        assert archive.target("space11", "a") == "s" and archive.target("space1", "1a") is None


def test_a_name_ending_another_name_is_no_link_when_hashes_collide(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Every key hashes alike, so the row of "s" is read for any question; only the name's
    # whole line, not its tail, may match ("1:feed" ends "1:c0ffee1:feed").
    monkeypatch.setattr(archive_module, "hash", lambda _: 7, raising=False)
    with DiskArchive() as archive:
        archive.put("submission", "s", b"s", links=[("failed", "c0ffee1:feed")])
        assert archive.target("failed", "c0ffee1:feed") == "s"
        assert archive.target("failed", "feed") is None
        assert archive.target("failed", "e1:feed") is None
        archive.flush()
        assert archive.target("failed", "feed") is None
        assert archive.get("failed", "feed") is None


def test_a_closed_archive_holds_nothing() -> None:
    archive = DiskArchive()
    archive.put("submission", "s", b"s", links=[("attempt", "a")])
    archive.close()
    assert not archive.might_hold("submission", "s") and not archive.might_hold("attempt", "a")
    assert archive.get("submission", "s") is None and archive.target("attempt", "a") is None
    assert list(archive.values("submission")) == [] and list(archive.links("attempt")) == []


def test_a_credit_spent_by_another_submission_does_not_pay() -> None:
    # Intake spends the first credit unspent or spent by this very submission, never one
    # another submission spent, whatever its place in grant order.
    fee = 1_000_000_000
    arrived = submission.start(samples.arrived(block=3_600))
    credits = (
        CreditView("cr-1", fee, "f" * 64),
        CreditView("cr-2", fee, arrived.submission_id),
        CreditView("cr-3", fee),
    )
    state = arena.start(samples.commissioned(fee_rao=fee))
    context = IntakeContext(state, None, {}, credits, {}, {})
    assert intake(arrived, context) == Admission("credit", "cr-2", fee)
    spent_elsewhere = context._replace(credits=(credits[0], credits[2]))
    assert intake(arrived, spent_elsewhere) == Admission("credit", "cr-3", fee)
    only_spent = context._replace(credits=credits[:1])
    assert intake(arrived, only_spent) == Rejection("missing_eval_cost_payment")

"""Holds ``ledger.archive.DiskArchive`` to a plain dict: what goes in comes back equal."""

from __future__ import annotations

from pathlib import Path
from typing import Any
from unittest import mock

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ledger import archive as archive_module
from ledger.archive import DiskArchive
from machines import arena, samples, submission
from machines.intake import Admission, CreditView, IntakeContext, Rejection, intake
from vocabulary.errors import ArchiveUnavailable

_keys = st.text(alphabet="abcdef0123456789-._", min_size=1, max_size=12)
_values = st.binary(max_size=40)
_ops = st.lists(
    st.tuples(st.sampled_from(["submission", "attempt"]), _keys, _values, st.sampled_from("xy")),
    max_size=60,
)
_links = st.lists(st.tuples(st.sampled_from(["alias", "submission"]), _keys, _keys), max_size=30)


@settings(max_examples=60, deadline=None)
@given(
    ops=_ops,
    links=_links,
    flush_entries=st.integers(min_value=1, max_value=7),
    probes=st.lists(_keys),
)
def test_archive_answers_like_a_dict(
    ops: list[tuple[str, str, bytes, str]],
    links: list[tuple[str, str, str]],
    flush_entries: int,
    probes: list[str],
) -> None:
    model: dict[tuple[str, str], tuple[str, bytes]] = {}
    linked: dict[tuple[str, str], str] = {}
    with DiskArchive(flush_entries=flush_entries) as archive:
        padded = [*links, *[None] * len(ops)][: len(ops)]
        for (space, key, value, tag), link in zip(ops, padded, strict=True):
            archive.put(space, key, value, tag)
            model[(space, key)] = (tag, value)
            assert archive.get(space, key) == value
            if link is not None:
                archive.link(*link)
                linked[link[:2]] = link[2]
                assert archive.target(*link[:2]) == link[2]
        for space, key in [*linked, *(("alias", k) for k in probes)]:
            assert archive.target(space, key) == linked.get((space, key))
        assert all(archive.might_hold(space, key) for space, key in [*model, *linked])
        for space in ("submission", "attempt", "payment"):
            for key in [k for s, k in model if s == space] + probes:
                found = model.get((space, key))
                assert archive.get(space, key) == (None if found is None else found[1])
            ordered = sorted((k, v) for (s, k), v in model.items() if s == space)
            assert list(archive.values(space)) == [v for _, (_, v) in ordered]
            for tag in "xy":
                assert list(archive.values(space, tag)) == [
                    v for _, (t, v) in ordered if t == tag
                ]


_few_keys = st.text(alphabet="ab\n", min_size=1, max_size=2)  # repeats, and "\n" in a name
_steps = st.lists(
    st.one_of(
        # A put may name links of its own record (spelled in its row, up to a length).
        st.tuples(st.just("put"), st.sampled_from(["submission", "failed"]), _few_keys,
                  _values, st.sampled_from("xy"),
                  st.lists(st.tuples(st.sampled_from(["attempt", "payment"]), _few_keys),
                           max_size=3)),
        # A link to the record just put (named in its row) or to any key (a row of its own).
        st.tuples(st.just("link"), st.sampled_from(["attempt", "submission"]), _few_keys,
                  st.one_of(st.none(), _few_keys)),
        st.tuples(st.just("flush")),
    ),
    max_size=80,
)


@settings(max_examples=150, deadline=None)
@given(
    steps=_steps,
    flush_entries=st.integers(min_value=1, max_value=6),
    index_entries=st.integers(min_value=1, max_value=9),
    collide=st.booleans(),
    names_max=st.sampled_from([1, 6, 1024]),
)
def test_archive_answers_like_a_dict_across_row_and_index_batches(
    steps: list[tuple[Any, ...]],
    flush_entries: int,
    index_entries: int,
    collide: bool,
    names_max: int,
) -> None:
    # Small batches put each key's rows and index entries in memory, in the file or both,
    # replaced across batches, and filters grow; with ``collide`` every key of a length
    # shares a hash.
    model: dict[tuple[str, str], tuple[str, bytes]] = {}
    linked: dict[tuple[str, str], str] = {}
    spaces = ("submission", "failed", "attempt", "payment")
    hashing = mock.patch.object(archive_module, "hash", len if collide else hash, create=True)
    small = mock.patch.object(archive_module, "bloom_keys_initial", 1)  # filters that grow
    # names_max: how much of a row link names may take before links get rows of their own.
    names = mock.patch.object(archive_module, "archive_names_chars_max", names_max)
    batches = {"flush_entries": flush_entries, "index_entries": index_entries}
    with hashing, small, names, DiskArchive(**batches) as archive:
        last = "none"
        for step in steps:
            if step[0] == "put":
                _, space, key, value, tag, links = step
                archive.put(space, key, value, tag, links)
                model[(space, key)], last = (tag, value), key
                linked.update({link: key for link in links})
            elif step[0] == "link":
                _, space, key, target = step
                target = last if target is None else target
                archive.link(space, key, target)
                linked[(space, key)] = target
            else:
                archive.flush()
            for space in spaces:  # every answer after every step, from wherever it lies
                for key in ("a", "b", "\n", "ab", "b\n", "ba", "aaa"):
                    found = model.get((space, key))
                    assert archive.get(space, key) == (None if found is None else found[1])
                    assert archive.target(space, key) == linked.get((space, key))
        assert all(archive.might_hold(space, key) for space, key in [*model, *linked])
        for space in spaces:
            for key in {k for s, k in [*model, *linked] if s == space}:
                found = model.get((space, key))
                assert archive.get(space, key) == (None if found is None else found[1])
                assert archive.target(space, key) == linked.get((space, key))
            ordered = sorted((k, v) for (s, k), v in model.items() if s == space)
            assert list(archive.values(space)) == [v for _, (_, v) in ordered]
            for tag in "xy":
                assert list(archive.values(space, tag)) == [
                    v for _, (t, v) in ordered if t == tag
                ]
            assert list(archive.links(space)) == sorted(
                (k, t) for (s, k), t in linked.items() if s == space
            )


def test_links_made_after_a_put_are_named_in_its_row() -> None:
    # A finished submission (a put, then links to it) is one row in the file, and its
    # names are found once its row and index entries are written.
    with DiskArchive(flush_entries=4, index_entries=8) as archive:
        for n in range(40):
            archive.put("submission", f"s{n}", b"%d" % n)
            archive.link("attempt", f"a{n}", f"s{n}")
            archive.link("payment", f"p{n}", f"s{n}")
        archive.link("attempt", "a0", "s1")  # a replacement, after s0's row was written
        archive.flush()
        assert archive._db.execute("SELECT count(*) FROM rows").fetchone() == (41,)
        assert archive._db.execute("SELECT count(*) FROM index_1").fetchone()[0] >= 32
        assert [archive.target("attempt", f"a{n}") for n in range(40)] == [
            "s1", *(f"s{n}" for n in range(1, 40))
        ]
        assert [archive.target("payment", f"p{n}") for n in range(40)] == [
            f"s{n}" for n in range(40)
        ]
        assert archive.target("payment", "a1") is None and archive.target("attempt", "p1") is None


def test_memory_holds_a_bounded_number_of_index_entries() -> None:
    with DiskArchive(flush_entries=64, index_entries=1000) as archive:
        for n in range(20_000):
            archive.put("failed", f"f{n}", b"")
            archive.link("attempt", f"a{n}", f"f{n}")
            waiting = sum(len(s.pending) for s in archive._spaces.values())
            assert waiting < 1000 + 2 * 64  # a batch, and the rows of one more flush
        assert archive._spaces["failed"].indexed + archive._spaces["attempt"].indexed > 38_000
        assert archive.get("failed", "f7") == b"" and archive.target("attempt", "a7") == "f7"
    with DiskArchive(flush_entries=8, index_entries=100) as archive:
        archive.put("submission", "s", b"s")
        for n in range(5000):  # all named in rows of "s": only so many in one row
            archive.link("attempt", f"a{n}", "s")
            waiting = sum(len(s.pending) for s in archive._spaces.values())
            assert waiting < 100 + 8 * archive_module.archive_names_chars_max // 4
        assert {archive.target("attempt", f"a{n}") for n in range(5000)} == {"s"}


def test_filters_grow_and_never_lose_a_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(archive_module, "bloom_keys_initial", 16)
    with DiskArchive(flush_entries=50) as archive:
        for n in range(3000):  # 16 → 64 → 256 → 1024 → 4096 keys: four growths
            archive.put("submission", f"s{n}", b"%d" % n)
        assert archive._spaces["submission"].capacity >= 3000
        assert all(archive.get("submission", f"s{n}") == b"%d" % n for n in range(3000))
        assert [archive.get("submission", f"t{n}") for n in range(3000)] == [None] * 3000
        assert archive.get("attempt", "s1") is None  # spaces are apart


def test_a_fresh_key_is_answered_absent_without_reading_the_file() -> None:
    with DiskArchive(flush_entries=1) as archive:
        for n in range(500):
            archive.put("payment", f"p{n}", b"%d" % n)
        reads = []
        archive._db.set_trace_callback(reads.append)
        absent = [archive.get("payment", f"q{n}") for n in range(2000)]
        archive._db.set_trace_callback(None)
        assert all(archive.might_hold("payment", f"p{n}") for n in range(500))
        maybe = sum(archive.might_hold("payment", f"q{n}") for n in range(2000))
    assert absent == [None] * 2000
    assert maybe < 100, f"{maybe} of 2,000 absent keys answered 'maybe'"
    assert len(reads) < 100, f"{len(reads)} reads for 2,000 absent keys: the filter is not used"


def test_bad_arguments_are_refused() -> None:
    with pytest.raises(ValueError, match="flush_entries"):
        DiskArchive(flush_entries=0)
    with pytest.raises(ValueError, match="index_entries"):
        DiskArchive(index_entries=0)
    with DiskArchive() as archive, pytest.raises(TypeError, match="bytes, not str"):
        archive.put("submission", "s", "text")  # type: ignore[arg-type]


def test_keys_whose_hashes_collide_are_told_apart(monkeypatch: pytest.MonkeyPatch) -> None:
    # Every key hashes alike: each filter answers "maybe", every row shares one index entry,
    # so only the key comparison keeps answers apart (lookups, replacement, links, growth).
    monkeypatch.setattr(archive_module, "hash", lambda _: 7, raising=False)
    monkeypatch.setattr(archive_module, "bloom_keys_initial", 16)
    with DiskArchive(flush_entries=3) as archive:
        for n in range(40):
            archive.put("submission", f"s{n}", b"old%d" % n, "x")
            archive.link("attempt", f"a{n}", f"s{n}")
        for n in range(0, 40, 3):  # replaced, some while still buffered, some in the file
            archive.put("submission", f"s{n}", b"new%d" % n, "y")
            archive.link("attempt", f"a{n}", f"s{n + 1}")
        archive.flush()
        for n in range(40):
            replaced = n % 3 == 0
            assert archive.get("submission", f"s{n}") == (b"new%d" if replaced else b"old%d") % n
            assert archive.target("attempt", f"a{n}") == f"s{n + 1 if replaced else n}"
        assert archive.get("submission", "s40") is None
        assert archive.target("attempt", "s1") is None  # a record's key is no link
        assert archive.get("attempt", "a1") is None  # nor a link's key a record
        assert len(list(archive.values("submission"))) == 40
        assert list(archive.values("submission", "y")) == [
            b"new%d" % n for n in sorted(range(0, 40, 3), key=lambda n: f"s{n}")
        ]


class _FullArchive(DiskArchive):
    """A DiskArchive whose file cannot grow past its first pages (a full temporary disk)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        pages = self._db.execute("PRAGMA page_count").fetchone()[0]
        self._db.execute(f"PRAGMA max_page_count = {pages}")


def test_a_full_temporary_file_is_named_not_a_driver_traceback() -> None:
    with (
        _FullArchive(flush_entries=1) as archive,
        pytest.raises(ArchiveUnavailable, match="SQLITE_TMPDIR") as raised,
    ):
        for n in range(1_000):
            archive.put("submission", f"k{n}", b"x" * 400, "a1")
        archive.flush()
    assert raised.value.code == "archive_unavailable" and raised.value.exit_code == 5
    assert "full" in raised.value.context["reason"]


def test_a_replay_whose_archive_fills_up_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from settled_ledger import build_settled, open_ledger  # same directory

    import services.replay
    from ledger.store import EventStore
    from services.replay import replay_store

    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    ledger = open_ledger(url)
    try:
        build_settled(ledger)
    finally:
        ledger.close()
    monkeypatch.setattr(services.replay, "DiskArchive", _FullArchive)  # replay's archive
    with EventStore(url) as store, pytest.raises(ArchiveUnavailable, match="untouched"):
        replay_store(store)  # not StoreUnavailable: the ledger's own file is fine
    with EventStore(url) as store:
        assert replay_store(store, archive_finished=False).ok


# DiskArchive at its limits: the row buffer and index batch written exactly at their limits,
# links made across a flush, link names up to archive_names_chars_max, a full filter growing,
# colon-holding and two-digit-space link names, a closed archive, and a credit spent by
# another submission.


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

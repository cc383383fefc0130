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
    from test_settlement_ledger import build_settled, open_ledger  # same directory

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

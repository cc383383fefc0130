"""Holds ``ledger.archive.DiskArchive`` to a plain dict: what goes in comes back equal."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ledger import archive as archive_module
from ledger.archive import DiskArchive

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


def test_filters_grow_and_never_lose_a_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(archive_module, "bloom_keys_initial", 16)
    with DiskArchive(flush_entries=50) as archive:
        for n in range(3000):  # 16 → 64 → 256 → 1024 → 4096 keys: four growths
            archive.put("submission", f"s{n}", b"%d" % n)
        assert archive._blooms["submission"].capacity >= 3000
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

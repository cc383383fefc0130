"""Checks the canonical envelope and the entry-hash chain (docs/concepts.md)."""

from __future__ import annotations

import hashlib
from typing import Any

import pytest
import rfc8785
from hypothesis import given
from hypothesis import strategies as st

from ledger.chain import (
    GENESIS_HASH,
    chain_rows,
    chained,
    entry_hash,
    envelope_bytes,
    next_entry_hash,
)
from vocabulary.codec import canonical_bytes, loads

MAX_INT = 2**53 - 1
_chars = st.one_of(
    st.characters(exclude_categories=["Cs"]),  # lone surrogates have no UTF-8 form
    st.sampled_from("\x00\x1f\"\\\u2028\ue000\U0001f600"),
)
_text = st.text(_chars, max_size=10)
_values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-MAX_INT, MAX_INT), _text),
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(_text, inner, max_size=4)),
    max_leaves=15,
)
_payloads = st.dictionaries(_text, _values, max_size=6)
_envelopes = st.fixed_dictionaries({
    "position": st.integers(1, MAX_INT),
    "stream": _text,
    "version": st.integers(1, MAX_INT),
    "type": _text,
    "schema_version": st.integers(1, 1000),
    "payload": _payloads,
    "recorded_at": _text,
    "actor": _text,
})


def _envelope(fields: dict[str, Any]) -> bytes:
    return envelope_bytes(
        fields["position"], fields["stream"], fields["version"], fields["type"],
        fields["schema_version"], canonical_bytes(fields["payload"]), fields["recorded_at"],
        fields["actor"],
    )


EXAMPLE = {
    "position": 1, "stream": "arena-qwen3-8b-mlp", "version": 1, "type": "ArenaRetired",
    "schema_version": 1, "payload": {"reason": "caf\u00e9", "block": 7},
    "recorded_at": "2030-01-01T00:00:00.000000Z", "actor": "validator-1",
}


def test_the_envelope_has_every_field_in_sorted_order() -> None:
    assert _envelope(EXAMPLE) == (
        '{"actor":"validator-1","payload":{"block":7,"reason":"caf\u00e9"},"position":1,'
        '"recorded_at":"2030-01-01T00:00:00.000000Z","schema_version":1,'
        '"stream":"arena-qwen3-8b-mlp","type":"ArenaRetired","version":1}'
    ).encode()


@given(_envelopes)
def test_envelope_bytes_are_the_canonical_json_of_the_envelope(fields: dict[str, Any]) -> None:
    data = _envelope(fields)
    assert data == canonical_bytes(fields)
    assert data == rfc8785.dumps(fields)
    assert loads(data) == fields


def test_the_payload_bytes_are_spliced_in_verbatim() -> None:
    # verify() never re-serialises: whatever bytes are stored are what gets hashed.
    odd = b'{"b":1, "a":2}'
    assert b'"payload":{"b":1, "a":2},' in envelope_bytes(1, "s", 1, "T", 1, odd, "t", "a")


@pytest.mark.parametrize(
    ("field", "value"),
    [("position", 2), ("stream", "arena-other"), ("version", 2), ("type", "ArenaRetireD"),
     ("schema_version", 2), ("payload", {"reason": "cafe", "block": 7}),
     ("recorded_at", "2030-01-01T00:00:00.000001Z"), ("actor", "validator-2")],
)
def test_every_field_changes_the_envelope_and_the_hash(field: str, value: Any) -> None:
    changed = {**EXAMPLE, field: value}
    assert _envelope(changed) != _envelope(EXAMPLE)
    assert entry_hash(GENESIS_HASH, _envelope(changed)) != entry_hash(
        GENESIS_HASH, _envelope(EXAMPLE))


def test_entry_hashes_chain_from_thirty_two_zero_bytes() -> None:
    assert GENESIS_HASH == "0" * 64
    envelopes = [_envelope({**EXAMPLE, "position": n, "version": n}) for n in (1, 2, 3)]

    previous = b"\x00" * 32
    expected = []
    for envelope in envelopes:
        previous = hashlib.sha256(previous + envelope).digest()
        expected.append(previous.hex())

    chained, hex_previous = [], GENESIS_HASH
    for envelope in envelopes:
        hex_previous = entry_hash(hex_previous, envelope)
        chained.append(hex_previous)
    assert chained == expected

    raw = b"\x00" * 32
    for envelope, want in zip(envelopes, expected, strict=True):
        raw = next_entry_hash(raw, envelope)
        assert raw.hex() == want and len(raw) == 32


def test_the_chain_depends_on_order() -> None:
    a, b = (_envelope({**EXAMPLE, "position": n}) for n in (1, 2))
    assert entry_hash(entry_hash(GENESIS_HASH, a), b) != entry_hash(entry_hash(GENESIS_HASH, b), a)


def test_a_pinned_entry_hash() -> None:
    # Pinned once (sha256 of 32 zero bytes and the envelope literal above): a change to the
    # envelope layout or the chaining rule would break every recorded ledger.
    assert entry_hash(GENESIS_HASH, _envelope(EXAMPLE)) == (
        "8b5f00cb5e9c1b68a408a2af54595047d1d4de1d8afd49168514b459f613678d"
    )


@given(
    st.lists(
        st.tuples(st.sampled_from(["attempt-a", "attempt-b", "s-\u00e9\u2028"]),
                  st.sampled_from(["WindowMeasured", "T\"x"]), st.integers(1, 3),
                  _payloads),
        min_size=1, max_size=8,
    ),
    _text,
    _text,
)
def test_chain_rows_equals_linking_one_event_at_a_time(
    events: list[tuple[str, str, int, dict[str, Any]]], recorded_at: str, actor: str
) -> None:
    previous = hashlib.sha256(b"seed").digest()
    versions = {"attempt-a": 4, "attempt-b": 0, "s-\u00e9\u2028": 9}
    prepared = [(stream, kind, schema, canonical_bytes(payload), "any")
                for stream, kind, schema, payload in events]
    expected_rows, expected_hashes, link, running = [], [], previous, dict(versions)
    for position, (stream, kind, schema, data, _) in enumerate(prepared, start=7):
        running[stream] += 1
        link = next_entry_hash(link, envelope_bytes(
            position, stream, running[stream], kind, schema, data, recorded_at, actor))
        expected_hashes.append(link)
        expected_rows.append((position, stream, running[stream], kind, schema, data,
                              recorded_at, actor, link.hex()))
    written: list[Any] = []
    rows, hashes = chain_rows(previous, 6, versions, prepared, recorded_at, actor,
                              written.append)
    assert rows == expected_rows and written == expected_rows
    assert hashes == expected_hashes
    assert versions == {"attempt-a": 4, "attempt-b": 0, "s-\u00e9\u2028": 9}  # not mutated


def test_chained_yields_each_row_with_its_hash_and_reads_memoryview_payloads() -> None:
    rows = [(p, f"attempt-{p % 2}", p, "WindowMeasured", 1, memoryview(b'{"n":%d}' % p),
             "2026-11-30T00:00:00.000000Z", "local", "stored-hash") for p in range(1, 6)]
    previous, expected = bytes(32), []
    for row in rows:
        previous = next_entry_hash(previous, envelope_bytes(*row[:5], bytes(row[5]), *row[6:8]))
        expected.append((row, previous))
    # a cache of one string is emptied over and over: the hashes must not change
    assert list(chained(bytes(32), rows, quoted_max=1)) == expected
    assert list(chained(bytes(32), rows)) == expected

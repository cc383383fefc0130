"""Builds each event's canonical envelope and chains entry hashes (docs/concepts.md).

entry_hash(n) = SHA-256(entry_hash(n-1) as 32 raw bytes ‖ canonical envelope bytes of n),
with 32 zero bytes before position 1. The envelope is the canonical JSON object
``{"actor", "payload", "position", "recorded_at", "schema_version", "stream", "type",
"version"}``; the payload's stored canonical bytes are spliced in as they are, so
verification never re-serialises a payload.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import orjson

__all__ = [
    "ENVELOPE",
    "GENESIS_HASH",
    "Row",
    "chain_rows",
    "chained",
    "entry_hash",
    "envelope_bytes",
    "next_entry_hash",
]

#: The hash "before" position 1, as 64 hex characters.
GENESIS_HASH = "0" * 64

#: The envelope's byte template: actor, payload, position, recorded_at, schema_version,
#: stream, type, version (strings JSON-quoted, the payload's canonical bytes spliced in).
ENVELOPE = _ENVELOPE = (
    b'{"actor":%b,"payload":%b,"position":%d,"recorded_at":%b,'
    b'"schema_version":%d,"stream":%b,"type":%b,"version":%d}'
)
_dumps = orjson.dumps
_sha256 = hashlib.sha256
#: An empty SHA-256 state that ``chained`` copies per event: with OpenSSL 3,
#: ``hashlib.sha256(data)`` looks the algorithm up by name on every call, and copying a
#: ready state skips that lookup on the hot path (docs/benchmarks.md, "Design figures").
_SHA256_EMPTY = hashlib.sha256()


def envelope_bytes(
    position: int,
    stream: str,
    version: int,
    event_type: str,
    schema_version: int,
    payload: bytes,
    recorded_at: str,
    actor: str,
) -> bytes:
    """Returns the canonical JSON envelope of one recorded event, keys in sorted order."""
    return _ENVELOPE % (
        _dumps(actor),
        payload,
        position,
        _dumps(recorded_at),
        schema_version,
        _dumps(stream),
        _dumps(event_type),
        version,
    )


def next_entry_hash(previous: bytes, envelope: bytes) -> bytes:
    """Returns the raw 32-byte entry hash that follows ``previous`` for ``envelope``."""
    return _sha256(previous + envelope).digest()


def chained(
    previous: bytes, rows: Iterable[tuple[Any, ...]], quoted_max: int = 50_000
) -> Iterator[tuple[tuple[Any, ...], bytes]]:
    """Yields each row with the raw entry hash its content chains to after ``previous``.

    ``rows`` hold (position, stream, version, type, schema_version, payload, recorded_at,
    actor, …) as the store keeps them; the payload may be bytes or a memoryview. Each hash
    equals ``next_entry_hash(previous, envelope_bytes(…))``, built faster: the envelope
    is one ``%`` of the previous hash, four cached segments (each holding a JSON-quoted
    actor, recorded_at, stream or type with the key names around it), the payload and the
    three integers. Actors, timestamps, streams and types repeat (an append shares its
    timestamp and actor, a stream holds many events); quoting them per event was a quarter
    of verify's time, and formatting eight fields per event most of the rest. Each cache
    is emptied when it passes ``quoted_max`` entries, so memory stays flat. One generator,
    not a call per event, because append, verify and replay all chain through it; the
    caller compares, checks positions and stops where it likes.
    """
    actors: dict[str, bytes] = {}
    times: dict[str, bytes] = {}
    streams: dict[str, bytes] = {}
    kinds: dict[str, bytes] = {}
    fresh, template = _SHA256_EMPTY.copy, _SEGMENTED
    for row in rows:
        position, stream, version, kind, schema, payload, at, actor = row[:8]
        a = actors.get(actor)
        if a is None:
            a = _cached(actors, actor, b'{"actor":', b',"payload":', quoted_max)
        t = times.get(at)
        if t is None:
            t = _cached(times, at, b',"recorded_at":', b',"schema_version":', quoted_max)
        s = streams.get(stream)
        if s is None:
            s = _cached(streams, stream, b',"stream":', b',"type":', quoted_max)
        k = kinds.get(kind)
        if k is None:
            k = _cached(kinds, kind, b"", b',"version":', quoted_max)
        state = fresh()
        state.update(template % (previous, a, payload, position, t, schema, s, k, version))
        previous = state.digest()
        yield row, previous


#: ``ENVELOPE`` after the previous hash, cut where ``chained`` splices cached segments:
#: previous hash, actor segment, payload, position, recorded_at segment, schema_version,
#: stream segment, type segment, version.
_SEGMENTED = b'%b%b%b,"position":%d%b%d%b%b%d}'


def _cached(cache: dict[str, bytes], text: str, before: bytes, after: bytes, most: int) -> bytes:
    """Returns ``before + JSON-quoted text + after`` and keeps it in ``cache``.

    The cache is emptied first when it holds more than ``most`` entries (memory stays flat
    on a ledger of millions of streams); the result is an exact-size bytes object (orjson
    returns even a 10-byte result inside a 4 KiB allocation, which a cache of thousands
    would multiply).
    """
    if len(cache) > most:
        cache.clear()
    segment = cache[text] = before + _dumps(text) + after
    return segment


#: One event row as the store writes it: position, stream, version, type, schema_version,
#: payload bytes, recorded_at, actor, entry hash (hex).
Row = tuple[int, str, int, str, int, bytes, str, str, str]


def chain_rows(
    previous: bytes,
    position: int,
    versions: dict[str, int],
    events: Iterable[tuple[Any, ...]],
    recorded_at: str,
    actor: str,
    write: Callable[[Row], object] | None = None,
) -> tuple[list[Row], list[bytes]]:
    """Chains one append's events after ``position``; returns their rows and raw entry hashes.

    ``events`` holds (stream, type, schema_version, payload, …) in order (later items, such
    as a prepared event's expected version, are ignored); ``versions`` holds each
    stream's version before the batch. The events share ``recorded_at`` and ``actor``.
    ``write`` receives each row as soon as it is chained (a PostgreSQL COPY streams it while
    the rest is hashed).
    """
    running = dict(versions)
    located = []
    for stream, event_type, schema_version, payload, *_ in events:
        position += 1
        version = running[stream] = running[stream] + 1
        located.append(
            (position, stream, version, event_type, schema_version, payload, recorded_at, actor)
        )
    rows: list[Row] = []
    entries: list[bytes] = []
    add_row, add_entry = rows.append, entries.append
    for event, entry in chained(previous, located):
        row = (*event, entry.hex())
        if write is not None:
            write(row)
        add_row(row)
        add_entry(entry)
    return rows, entries


def entry_hash(previous_hex: str, envelope: bytes) -> str:
    """Returns the entry hash as hex, given the previous one as hex."""
    return next_entry_hash(bytes.fromhex(previous_hex), envelope).hex()

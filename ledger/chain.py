"""Builds each event's canonical envelope and chains entry hashes (DOMAIN §2.6).

entry_hash(n) = SHA-256(entry_hash(n-1) as 32 raw bytes ‖ canonical envelope bytes of n),
with 32 zero bytes before position 1. The envelope is the canonical JSON object
``{"actor", "payload", "position", "recorded_at", "schema_version", "stream", "type",
"version"}``; the payload's stored canonical bytes are spliced in as they are, so
verification never re-serialises a payload.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Iterator

import orjson

__all__ = [
    "ENVELOPE",
    "GENESIS_HASH",
    "chain_batch",
    "chain_link",
    "entry_hash",
    "envelope_bytes",
    "iter_chain",
    "next_entry_hash",
    "quote",
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


def chain_link(
    previous: bytes,
    position: int,
    stream: str,
    version: int,
    event_type: str,
    schema_version: int,
    payload: bytes,
    recorded_at: str,
    actor: str,
) -> bytes:
    """Returns ``next_entry_hash(previous, envelope_bytes(…))`` in one call.

    The append and verify loops chain every event; one call instead of two saves ~8% of
    verify's time.
    """
    envelope = _ENVELOPE % (
        _dumps(actor),
        payload,
        position,
        _dumps(recorded_at),
        schema_version,
        _dumps(stream),
        _dumps(event_type),
        version,
    )
    return _sha256(previous + envelope).digest()


def quote(cache: dict[str, bytes], text: str) -> bytes:
    """JSON-quotes ``text`` (as the envelope spells it) and keeps it in ``cache``.

    The cache holds an exact-size copy: orjson returns even a 10-byte result inside a 4 KiB
    allocation, and a cache of 25,000 of those cost a replay 100 MiB.
    """
    quoted = cache[text] = bytes(memoryview(_dumps(text)))
    return quoted


def chain_batch(
    previous: bytes,
    events: Iterable[tuple[int, str, int, str, int, bytes]],
    recorded_at: str,
    actor: str,
) -> list[bytes]:
    """Chains one append's events, which share ``recorded_at`` and ``actor``.

    ``events`` holds (position, stream, version, type, schema_version, payload) in order;
    returns each event's raw entry hash. Equal to calling ``chain_link`` per event, but each
    string is JSON-quoted once per batch, not once per event (a batch repeats few streams).
    """
    return list(iter_chain(previous, events, recorded_at, actor))


def iter_chain(
    previous: bytes,
    events: Iterable[tuple[int, str, int, str, int, bytes]],
    recorded_at: str,
    actor: str,
) -> Iterator[bytes]:
    """Yields the entry hashes of ``chain_batch`` one by one, so a writer can stream rows."""
    quoted_actor, quoted_at = _dumps(actor), _dumps(recorded_at)
    quoted: dict[str, bytes] = {}
    for position, stream, version, event_type, schema_version, payload in events:
        quoted_stream = quoted.get(stream) or quote(quoted, stream)
        quoted_type = quoted.get(event_type) or quote(quoted, event_type)
        previous = _sha256(
            previous
            + _ENVELOPE
            % (
                quoted_actor,
                payload,
                position,
                quoted_at,
                schema_version,
                quoted_stream,
                quoted_type,
                version,
            )
        ).digest()
        yield previous


def entry_hash(previous_hex: str, envelope: bytes) -> str:
    """Returns the entry hash as hex, given the previous one as hex."""
    return next_entry_hash(bytes.fromhex(previous_hex), envelope).hex()

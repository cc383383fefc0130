"""Holds every bound the ledger enforces, as named constants with the unit last.

Each limit is checked where input enters (the codec, the catalogue, the store's append
boundary, the CLI reader) so that bad input is refused before anything is written.
"""

from __future__ import annotations

__all__ = [
    "actor_chars_max",
    "batch_events_max",
    "calibration_boots_max",
    "calibration_boots_min",
    "calibration_windows_max",
    "calibration_windows_min",
    "checkpoint_origin_chars_max",
    "digest_hex_chars",
    "idempotency_key_chars_max",
    "input_file_bytes_max",
    "json_depth_max",
    "json_integer_abs_max",
    "key_name_chars_max",
    "payload_bytes_max",
    "read_page_events",
    "stream_name_chars_max",
    "type_name_chars_max",
]

#: Windows per boot round of an A/A calibration: as an attempt's W (at most 5), and at
#: least 3 so that orientation 2 holds two windows and the window noise has a degree of
#: freedom (docs/calibration.md).
calibration_windows_min = 3
calibration_windows_max = 5
#: Boot rounds of a calibration: two at least, for the boot noise's degrees of freedom.
calibration_boots_min = 2
calibration_boots_max = 20

#: Largest canonical payload, in bytes, of one event.
payload_bytes_max = 65_536
#: Largest file (or standard input) a command reads whole: a JSON document (commission,
#: intake, ...) or a delta's source. Read up to one byte more, so /dev/zero or a huge file
#: is refused at this size, not read until memory runs out.
input_file_bytes_max = 1_048_576
#: Most events one atomic append may carry.
batch_events_max = 10_000
#: Longest stream name, in characters (`submission-` + 64 hex fits with room).
stream_name_chars_max = 128
#: Longest event type name, in characters.
type_name_chars_max = 64
#: Longest actor string, in characters.
actor_chars_max = 128
#: Longest idempotency key, in characters.
idempotency_key_chars_max = 128
#: Longest origin line of a checkpoint the store keeps, in characters (its column is
#: VARCHAR(256) on PostgreSQL; SQLite would keep more, and the two must agree).
checkpoint_origin_chars_max = 256
#: Longest name of a key that signs this ledger's checkpoints, in characters (stored beside
#: each checkpoint; the default origin, "arena-ledger/" + name, stays within the origin's).
key_name_chars_max = 128
#: Deepest nesting of arrays and objects in a payload.
json_depth_max = 32
#: Largest magnitude of a JSON integer: 2**53 - 1, the interoperable range of RFC 8785 / I-JSON.
json_integer_abs_max = 2**53 - 1
#: Length of a digest in lowercase hex characters (SHA-256).
digest_hex_chars = 64
#: Events fetched per page by streaming reads; memory of a read is bounded by this.
read_page_events = 2_000

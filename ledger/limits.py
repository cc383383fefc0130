"""Holds every bound of storage and integrity (keys, proofs, notes, bundles, the archive)."""

from __future__ import annotations

__all__ = [
    "archive_index_insert_rows_max",
    "archive_insert_rows_max",
    "archive_names_chars_max",
    "bundle_line_bytes_max",
    "checkpoint_sizes_shown_max",
    "key_file_bytes_max",
    "manifest_bytes_max",
    "note_file_bytes_max",
    "parallel_workers_max",
    "proof_document_bytes_max",
    "proof_hashes_max",
    "sqlite_insert_rows_max",
]

#: Largest key file read, in bytes (a key string is about 100 bytes).
key_file_bytes_max = 4_096

#: Largest proof document read, in bytes (an inclusion proof carries one payload, ≤ 64 KiB).
proof_document_bytes_max = 262_144

#: Most hashes a proof may list (a tree of 2**64 leaves needs at most 64, plus one).
proof_hashes_max = 65

#: Most stored checkpoints whose tree sizes a "no such checkpoint" error names.
checkpoint_sizes_shown_max = 10

#: Largest checkpoint note file read, in bytes (the note format allows 1 MiB).
note_file_bytes_max = 1_048_576

#: Longest events.jsonl line, in bytes: a maximal payload in base64 plus the envelope.
bundle_line_bytes_max = 131_072

#: Largest manifest.json, in bytes.
manifest_bytes_max = 65_536

#: Most worker processes offline verification uses.
parallel_workers_max = 8

#: Most characters of link names one record's row holds; a link beyond is a row of its own,
#: so rows keep coming and flushes (which write index entries) keep memory bounded.
archive_names_chars_max = 1024

#: Most rows one INSERT statement writes (a power of two; ``ledger.sqlite_rows``).
archive_insert_rows_max = 128

#: Most index entries one INSERT statement writes (a power of two).
archive_index_insert_rows_max = 256

#: Most rows one INSERT statement writes on SQLite (a power of two; fewer where the SQLite
#: build allows fewer than 9 × this many parameters).
sqlite_insert_rows_max = 256

"""Copies, reads and rewrites a bundle's files, so the bundle and replay suites can alter one
line or one manifest field and see what verification and replay make of it.
"""

from __future__ import annotations

import base64
import hashlib
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

from ledger.bundle import (
    EVENTS_FILE,
    MANIFEST_FILE,
)
from ledger.chain import envelope_bytes, next_entry_hash
from ledger.merkle import root_from_leaves


def copy_bundle(source: Path, tmp_path: Path, name: str = "copy") -> Path:
    return Path(shutil.copytree(source, tmp_path / name))


def lines_of(bundle: Path) -> list[bytes]:
    return (bundle / EVENTS_FILE).read_bytes().splitlines(keepends=True)


def parsed_line(bundle: Path, number: int) -> tuple[str, int]:
    """Returns the stream and version of line ``number`` (from 1) of a bundle."""
    line = orjson.loads(lines_of(bundle)[number - 1])
    return str(line["stream"]), int(line["version"])


def write_lines(bundle: Path, lines: list[bytes]) -> None:
    (bundle / EVENTS_FILE).write_bytes(b"".join(lines))


def write_manifest(bundle: Path, manifest: dict[str, Any]) -> None:
    """Writes ``manifest`` as export spells it: verification refuses any other spelling."""
    raw = orjson.dumps(manifest, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS) + b"\n"
    (bundle / MANIFEST_FILE).write_bytes(raw)


def flip(line: bytes, marker: bytes) -> bytes:
    """Flips the low bit of the byte three past the end of ``marker`` in ``line``."""
    at = line.index(marker) + len(marker) + 3
    return line[:at] + bytes([line[at] ^ 0x01]) + line[at + 1 :]


def restate_digest(bundle: Path) -> None:
    """Restates events.jsonl's SHA-256 and size in the manifest (neither is signed)."""
    data = (bundle / EVENTS_FILE).read_bytes()
    manifest = orjson.loads((bundle / MANIFEST_FILE).read_bytes())
    manifest.update(events_sha256=hashlib.sha256(data).hexdigest(), events_bytes=len(data))
    write_manifest(bundle, manifest)


def rewrite_lines(bundle: Path, change: Callable[[list[dict[str, Any]]], None]) -> None:
    """Edits the parsed lines, then recomputes every entry hash and the manifest totals.

    This is what a forger with no access to the signing key can do.
    """
    lines = [orjson.loads(line) for line in lines_of(bundle)]
    change(lines)
    previous = bytes(32)
    for line in lines:
        envelope = envelope_bytes(line["position"], line["stream"], line["version"], line["type"],
                                  line["schema_version"], base64.b64decode(line["payload_b64"]),
                                  line["recorded_at"], line["actor"])
        previous = next_entry_hash(previous, envelope)
        line["entry_hash"] = previous.hex()
    data = b"".join(orjson.dumps(line, option=orjson.OPT_SORT_KEYS) + b"\n" for line in lines)
    (bundle / EVENTS_FILE).write_bytes(data)
    manifest = orjson.loads((bundle / MANIFEST_FILE).read_bytes())
    manifest.update(head_hash=previous.hex(), events_sha256=hashlib.sha256(data).hexdigest(),
                    events_bytes=len(data), merkle_root=root_from_leaves(
                        [bytes.fromhex(line["entry_hash"]) for line in lines]).hex())
    write_manifest(bundle, manifest)

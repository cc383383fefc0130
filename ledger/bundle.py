"""Exports the ledger as a self-verifying directory bundle and imports one into an empty ledger.

A bundle is a directory of three files (format ``arena-ledger.bundle.v1``):

* ``events.jsonl``: one stored event per line, in position order, as a JSON object with
  the keys ``actor, entry_hash, payload_b64, position, recorded_at, schema_version, stream,
  type, version`` (written in that sorted order). ``payload_b64`` is standard base64 of the
  exact stored payload bytes, so nothing is re-serialised to verify;
* ``manifest.json``: counts, first and last position, head hash, Merkle root, the SHA-256
  and size of ``events.jsonl``, and whether a checkpoint is included;
* ``checkpoint.note`` (optional): a C2SP checkpoint signed at the bundle's size.

Export streams a page at a time (memory stays flat) and refuses a ledger whose chain or
stored tree does not check out. Verification (``verify_bundle``, no database) and import
run the same streaming pass: every line is parsed and must be exactly the bytes export
writes for it (``_export_line``: no other spelling of the same event), its entry hash is
recomputed from the previous one and its envelope, its stream version checked, and the
Merkle root rebuilt in O(log n) memory; the totals must then equal the manifest (itself
exactly the bytes export writes), and the manifest's root and size the signed checkpoint's.
Import also holds every payload to the event catalogue (``_check_events``); verification
does not. Import runs that pass once before opening a transaction and again inside it
while inserting, so nothing is committed unless every check passed on the very bytes that
were inserted. The first bad line is named (``events.jsonl line N: …``).

Offline verification of a large bundle spreads the lines over forked worker processes
(``_scan_parallel``); that pass only ever accepts, and hands any fault to the sequential
pass to be named. Import always verifies in its own process.
"""

from __future__ import annotations

import binascii
import hashlib
import os
import secrets
import shutil
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Final

import orjson

from ledger.chain import GENESIS_HASH, Row, chained, envelope_bytes
from ledger.checkpoint import (
    event_document,
    open_checkpoint,
    read_file_bytes,
    sign_tree,
)
from ledger.limits import (
    bundle_line_bytes_max,
    manifest_bytes_max,
    note_file_bytes_max,
    parallel_workers_max,
)
from ledger.log import get_logger
from ledger.merkle import EMPTY_ROOT, CompactRange, leaf_hash, node_hash
from ledger.note import Checkpoint, Signer, Verifier
from ledger.progress import Progress, Tick, ticker
from ledger.records import RecordedEvent
from ledger.stored_tree import advance_frontier, frontier_root
from ledger.verify import head_and_last_position, raw_rows
from vocabulary import limits
from vocabulary.catalogue import CATALOGUE, check_stream_name
from vocabulary.codec import loads
from vocabulary.errors import (
    IntegrityError,
    InvalidInput,
    LedgerError,
    LimitExceeded,
    StoreError,
    head_row_missing,
)

if TYPE_CHECKING:
    from sqlalchemy import Connection

    from ledger.store import EventStore

__all__ = [
    "BUNDLE_FORMAT",
    "CHECKPOINT_FILE",
    "EVENTS_FILE",
    "MANIFEST_FILE",
    "BundleReport",
    "Manifest",
    "export_bundle",
    "import_bundle",
    "import_chunk_events",
    "read_bundle_events",
    "read_bundle_rows",
    "read_manifest",
    "verify_bundle",
]

BUNDLE_FORMAT: Final = "arena-ledger.bundle.v1"
"""The ``format`` field of the manifests this version writes and reads."""
EVENTS_FILE: Final = "events.jsonl"
MANIFEST_FILE: Final = "manifest.json"
CHECKPOINT_FILE: Final = "checkpoint.note"

#: Events verified, hashed into the tree and inserted together during a pass.
import_chunk_events = 2_000
#: Bytes of events.jsonl read (and hashed on a helper thread) at a time.
read_block_bytes = 1_048_576
#: Lines one worker process verifies at a time: a power of two, so that a full chunk is
#: one perfect Merkle subtree (memory in flight: about workers * this * line size).
parallel_chunk_lines = 8_192
#: Bundles smaller than this many events are verified in-process (start-up would dominate).
parallel_events_min = 200_000

_COLUMNS = (
    "position, stream, version, type, schema_version, payload, recorded_at, actor, entry_hash"
)
_LINE_KEYS: Final = frozenset(
    {"actor", "entry_hash", "payload_b64", "position", "recorded_at", "schema_version",
     "stream", "type", "version"}
)
_HEX = frozenset("0123456789abcdef")
_LINE_FIELDS: Final = len(_LINE_KEYS)
_STREAM_MAX: Final = limits.stream_name_chars_max
_TYPE_MAX: Final = limits.type_name_chars_max
_RECORDED_AT_MAX: Final = 32  # the events.recorded_at column is String(32)
_ACTOR_MAX: Final = limits.actor_chars_max
_PAYLOAD_MAX: Final = limits.payload_bytes_max
_TEXT_LIMITS: Final = (
    ("stream", _STREAM_MAX), ("type", _TYPE_MAX), ("recorded_at", _RECORDED_AT_MAX),
    ("actor", _ACTOR_MAX),
)
#: orjson options of an events.jsonl line, as export writes it and verification re-checks it.
_LINE_OPTIONS: Final = orjson.OPT_SORT_KEYS
#: orjson options of manifest.json.
_MANIFEST_OPTIONS: Final = orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS
#: The base64 characters whose low two (four) bits are zero: the only ones canonical base64
#: puts before one "=" (two), where those bits are unused and decoding ignores them.
_B64_BEFORE_PAD: Final = frozenset("AEIMQUYcgkosw048")
_B64_BEFORE_PADS: Final = frozenset("AQgw")
_loads = orjson.loads
_dumps = orjson.dumps
_a2b = binascii.a2b_base64
_sha256 = hashlib.sha256
_log = get_logger("arena_ledger.bundle")


# ------------------------------------------------------------------------------ manifest


@dataclass(frozen=True, slots=True)
class Manifest:
    """Describes a bundle: what its events file holds and whether a checkpoint comes with it."""

    events: int
    head_hash: str
    merkle_root: str
    events_sha256: str
    events_bytes: int
    checkpoint: bool

    def to_json(self) -> dict[str, Any]:
        """Returns the manifest document, as written to manifest.json."""
        return {
            "format": BUNDLE_FORMAT,
            "events": self.events,
            "first_position": 1 if self.events else 0,
            "last_position": self.events,
            "tree_size": self.events,
            "head_hash": self.head_hash,
            "merkle_root": self.merkle_root,
            "events_file": EVENTS_FILE,
            "events_sha256": self.events_sha256,
            "events_bytes": self.events_bytes,
            "checkpoint_file": CHECKPOINT_FILE if self.checkpoint else None,
        }

    def to_bytes(self) -> bytes:
        """Returns the exact bytes of manifest.json: the document indented by two spaces,
        keys sorted, one newline (no carriage return) ending each line, the last included."""
        return _dumps(self.to_json(), option=_MANIFEST_OPTIONS) + b"\n"


_MANIFEST_KEYS: Final = frozenset(Manifest(0, "", "", "", 0, False).to_json())


def _manifest_error(problem: str, field: str | None = None) -> IntegrityError:
    return IntegrityError(
        f"{MANIFEST_FILE}: {problem}", reason="bad_manifest", path=f"$.{field}" if field else "$"
    )


def _count(document: dict[str, Any], name: str) -> int:
    value = document[name]
    if type(value) is not int or value < 0:
        raise _manifest_error(f"{name} must be a non-negative integer", name)
    return value


def _digest(document: dict[str, Any], name: str) -> str:
    value = document[name]
    if type(value) is not str or len(value) != 2 * 32 or not set(value) <= _HEX:
        raise _manifest_error(f"{name} must be 64 lowercase hex digits", name)
    return value


def read_manifest(bundle: Path) -> Manifest:
    """Reads and checks a bundle's manifest.json; a damaged one raises IntegrityError."""
    if not bundle.is_dir():
        raise InvalidInput(f"bundle {bundle} is not a directory", path=str(bundle))
    # Bytes, so that bytes that are not UTF-8 are damage named like any other (codec.loads).
    raw = read_file_bytes(bundle / MANIFEST_FILE, "bundle manifest", manifest_bytes_max)
    try:
        document = loads(raw, where="the file")  # _manifest_error names manifest.json
    except InvalidInput as exc:
        raise _manifest_error(exc.message) from None
    if not isinstance(document, dict):
        raise _manifest_error("must be a JSON object")
    if document.get("format") != BUNDLE_FORMAT:
        raise InvalidInput(
            f"bundle format {document.get('format')!r} is not {BUNDLE_FORMAT!r}, the one this "
            "version reads", path="$.format",
        )
    if document.keys() != _MANIFEST_KEYS:
        odd = sorted(_MANIFEST_KEYS.symmetric_difference(document))[0]
        raise _manifest_error(f"unexpected or missing field {odd!r}", odd)
    manifest = Manifest(
        _count(document, "events"), _digest(document, "head_hash"),
        _digest(document, "merkle_root"), _digest(document, "events_sha256"),
        _count(document, "events_bytes"), document["checkpoint_file"] is not None,
    )
    if manifest.to_json() != document:
        # Every other field follows from these (sizes, file names): a mismatch is damage.
        odd = next(k for k, v in manifest.to_json().items() if document[k] != v)
        raise _manifest_error(f"field {odd!r} is inconsistent with the others", odd)
    if raw != manifest.to_bytes():
        # Same fields, other bytes (spacing, key order, escapes, duplicate keys, CRLF): not
        # what export wrote. One spelling per manifest, as for each events.jsonl line.
        raise _manifest_error("is not byte for byte the manifest export writes for these "
                              "fields (two-space indent, sorted keys, \\n line ends)")
    return manifest


# ------------------------------------------------------------------------- checkpoints


def _bundle_checkpoint(
    bundle: Path, manifest: Manifest, verifier: Verifier | None, origin: str | None,
    allow_unsigned: bool,
) -> tuple[Checkpoint, str] | None:
    """Returns the verified checkpoint and its note, or None when the check was waived."""
    if verifier is None:
        if not allow_unsigned:
            raise InvalidInput(
                "checking a bundle needs the log's public key (--key KEY.pub); to go on "
                "without checking its signature say so explicitly (--no-signature-check)"
            )
        return None
    if not manifest.checkpoint:
        raise IntegrityError(
            f"bundle {bundle} carries no {CHECKPOINT_FILE}, so its signature cannot be checked; "
            "export it again with --key, or skip the check with --no-signature-check",
            reason="no_checkpoint",
        )
    if not (bundle / CHECKPOINT_FILE).is_file():
        raise IntegrityError(
            f"{MANIFEST_FILE} lists {CHECKPOINT_FILE} but bundle {bundle} does not hold it",
            reason="no_checkpoint",
        )
    raw = read_file_bytes(bundle / CHECKPOINT_FILE, "bundle checkpoint", note_file_bytes_max)
    checkpoint = open_checkpoint(raw, verifier, origin)  # not UTF-8: a malformed note
    note = raw.decode("utf-8")  # it is: its signature checked out
    if checkpoint.size != manifest.events or checkpoint.root_hash.hex() != manifest.merkle_root:
        raise IntegrityError(
            f"the signed checkpoint (size {checkpoint.size}, root "
            f"{checkpoint.root_hash.hex()[:16]}…) does not match the manifest (size "
            f"{manifest.events}, root {manifest.merkle_root[:16]}…)",
            reason="checkpoint_mismatch",
        )
    return checkpoint, note


# ----------------------------------------------------------------------- streaming pass


@dataclass(frozen=True, slots=True)
class _Scan:
    events: int
    head_hash: str
    merkle_root: str
    sha256: str
    bytes: int


Sink = Callable[[list[Row], list[bytes]], None]


def _line_error(number: int, problem: str) -> IntegrityError:
    return IntegrityError(f"{EVENTS_FILE} line {number}: {problem}", line=number,
                          reason="bad_line")


def _version_jump(number: int, stream: str, last: int, version: int) -> IntegrityError:
    return _line_error(number, f"stream {stream!r} jumps from version {last} to {version}")


def _field_problem(document: Any) -> str:
    """Explains why a parsed line is not a well-formed event (the slow path, for messages)."""
    if not isinstance(document, dict):
        return "is not a JSON object"
    odd = sorted(_LINE_KEYS.symmetric_difference(document))
    if odd:
        return f"has an unexpected or missing field {odd[0]!r}"
    for name in ("position", "version", "schema_version"):
        if type(document[name]) is not int or document[name] < 1:
            return f"{name} must be a positive integer"
    sized = (*_TEXT_LIMITS, ("entry_hash", 64), ("payload_b64", bundle_line_bytes_max))
    for name, most in sized:
        value = document[name]
        if type(value) is not str or not 1 <= len(value) <= most:
            return f"{name} must be a string of 1..{most} characters"
    return "is malformed"


def _check_line(raw: bytes, number: int, previous: bytes) -> tuple[Row, bytes]:
    """Verifies one events.jsonl line (newline removed) that follows entry hash ``previous``.

    Returns the row to insert and the line's raw entry hash. This is the hot loop of
    verification and import, so the well-formed case is checked in one expression and only
    a failure pays for a precise message. The line must be exactly the bytes export writes
    for the event (``_export_line``): one ``orjson.dumps`` of the parsed object with export's
    options, compared with the raw bytes, refuses any other spelling (spaces, key order,
    escapes, a duplicate key, a carriage return before the newline), and the payload's
    base64 must be canonical (re-encode to the same text). Stream versions are checked by
    the caller.
    """
    if len(raw) > bundle_line_bytes_max:
        raise LimitExceeded(
            f"{EVENTS_FILE} line {number} is over {bundle_line_bytes_max} bytes", line=number
        )
    try:
        d = _loads(raw)
    except orjson.JSONDecodeError as exc:
        raise _line_error(number, f"is not valid JSON ({exc.msg})") from None
    try:
        position, version, schema = d["position"], d["version"], d["schema_version"]
        stream, kind, at, actor = d["stream"], d["type"], d["recorded_at"], d["actor"]
        entry_hex, payload_b64 = d["entry_hash"], d["payload_b64"]
    except (KeyError, TypeError):
        raise _line_error(number, _field_problem(d)) from None
    if (
        len(d) != _LINE_FIELDS or type(position) is not int or type(version) is not int
        or type(schema) is not int or version < 1 or schema < 1 or type(stream) is not str
        or type(kind) is not str or type(at) is not str or type(actor) is not str
        or type(payload_b64) is not str or not 0 < len(stream) <= _STREAM_MAX
        or not 0 < len(kind) <= _TYPE_MAX or not 0 < len(at) <= _RECORDED_AT_MAX
        or not 0 < len(actor) <= _ACTOR_MAX
    ):
        raise _line_error(number, _field_problem(d))
    if position != number:
        raise _line_error(number, f"holds position {position}; position {number} was expected")
    try:
        payload = _a2b(payload_b64, strict_mode=True)
    except (binascii.Error, ValueError):
        raise _line_error(number, "payload_b64 is not valid base64") from None
    if len(payload) > _PAYLOAD_MAX:
        raise _line_error(number, f"payload is over {_PAYLOAD_MAX} bytes")
    # With exactly the nine fields, typed as checked above, and canonical base64, dumping the
    # parsed object sorted is _export_line's output for this row (less its newline).
    if _dumps(d, option=_LINE_OPTIONS) != raw:
        raise _line_error(number, "is not byte for byte the line export writes for its fields "
                          "(spacing, key order, escapes, a duplicate key or a \\r line end)")
    # Canonical base64, i.e. re-encoding the payload gives the same text. Strict decoding
    # has checked the alphabet, the length and the padding, so only the unused bits of the
    # character before the padding can differ; they are checked here rather than by
    # re-encoding, which costs as much as the rest of the line's checks in CPython.
    if payload_b64[-1:] == "=" and (
        payload_b64[-3] not in _B64_BEFORE_PADS if payload_b64[-2] == "="
        else payload_b64[-2] not in _B64_BEFORE_PAD
    ):
        raise _line_error(number, "payload_b64 is not canonical base64 (re-encoding its bytes "
                          "gives other text)")
    entry = _sha256(
        previous + envelope_bytes(position, stream, version, kind, schema, payload, at, actor)
    ).digest()
    if entry.hex() != entry_hex:
        raise _line_error(
            number, "entry_hash does not match the event's content and the chain before it "
            "(the line, or one before it, was altered)",
        )
    return (position, stream, version, kind, schema, payload, at, actor, entry_hex), entry


class _Blocks:
    """Reads events.jsonl in blocks, hashing each (on a helper thread if asked), splits lines.

    hashlib releases the GIL for large buffers, so on a helper thread the file's SHA-256
    costs this thread nothing; at most two blocks are held at once, so memory stays flat.
    """

    def __init__(self, bundle: Path, *, threaded: bool = True) -> None:
        self._threaded = threaded
        try:
            self._file = (bundle / EVENTS_FILE).open("rb")
        except OSError as exc:
            raise IntegrityError(f"cannot open {bundle / EVENTS_FILE}: {exc.strerror}",
                                 reason="missing_events", path=str(bundle)) from None
        self.digest = hashlib.sha256()
        self.total = 0
        self.carry = b""

    def runs(self) -> Iterator[list[bytes]]:
        """Yields runs of complete lines; ``carry`` keeps any unterminated tail."""
        with self._file as file, ThreadPoolExecutor(max_workers=1) as hasher:
            pending: Future[None] | None = None
            while block := file.read(read_block_bytes):
                self.total += len(block)
                if pending is not None:
                    pending.result()
                if self._threaded:
                    pending = hasher.submit(self.digest.update, block)
                else:
                    self.digest.update(block)
                lines = (self.carry + block).split(b"\n") if self.carry else block.split(b"\n")
                self.carry = lines.pop()
                yield lines
                if len(self.carry) > bundle_line_bytes_max:
                    return
            if pending is not None:
                pending.result()


class _Pass:
    """Holds the running state of one sequential pass over events.jsonl."""

    def __init__(self, sink: Sink | None) -> None:
        self.sink = sink
        self.compact = CompactRange()
        self.versions: dict[str, int] = {}
        self.previous = bytes(32)
        self.size = 0

    def lines(self, lines: list[bytes]) -> None:
        """Verifies a run of complete lines, then feeds the tree and the sink."""
        rows: list[Row] = []
        entries: list[bytes] = []
        check, versions, previous, size = _check_line, self.versions, self.previous, self.size
        for raw in lines:
            size += 1
            row, previous = check(raw, size, previous)
            last = versions.get(row[1], 0)
            if row[2] != last + 1:
                raise _version_jump(size, row[1], last, row[2])
            versions[row[1]] = row[2]
            rows.append(row)
            entries.append(previous)
        self.previous, self.size = previous, size
        self.compact.extend(entries)
        if self.sink is not None and rows:
            self.sink(rows, entries)


def _tail_problem(blocks: _Blocks, size: int) -> None:
    if len(blocks.carry) > bundle_line_bytes_max:
        raise LimitExceeded(f"{EVENTS_FILE} line {size + 1} is over {bundle_line_bytes_max} "
                            "bytes", line=size + 1)
    if blocks.carry:
        raise _line_error(size + 1, "does not end in a newline (the file is truncated)")


def _scan_sequential(bundle: Path, sink: Sink | None = None, tick: Tick | None = None) -> _Scan:
    """Streams events.jsonl once in this process, verifying every line in order.

    Verified chunks go to ``sink`` (the importer). The first bad line raises, by number.
    ``tick`` hears how many lines are verified (and sunk).
    """
    blocks, state = _Blocks(bundle), _Pass(sink)
    for lines in blocks.runs():
        for start in range(0, len(lines), import_chunk_events):
            state.lines(lines[start : start + import_chunk_events])
            if tick is not None:
                tick(state.size)
    _tail_problem(blocks, state.size)
    head = state.previous.hex() if state.size else GENESIS_HASH
    return _Scan(state.size, head, state.compact.root().hex(), blocks.digest.hexdigest(),
                 blocks.total)


# ------------------------------------------------------------------ parallel verification


class _Suspect(Exception):
    """Signals that the parallel pass met a fault; the sequential pass then names it."""


ChunkResult = tuple[int, bytes | None, list[bytes] | None, bytes, dict[str, tuple[int, int]]]


def _verify_chunk(first_line: int, previous: bytes, joined: bytes) -> ChunkResult | None:
    """Verifies lines ``first_line``… in a worker; None means "something is wrong here".

    Each line's link is checked against the entry hash the line before it *states*, which
    that line's own check proves, so chunks verify independently and the chain still holds
    end to end. A full chunk is one perfect Merkle subtree; its root is returned. The
    lines arrive joined into one buffer, which crosses the process boundary as one copy.
    """
    firsts: dict[str, int] = {}
    lasts: dict[str, int] = {}
    entries: list[bytes] = []
    number = first_line
    try:
        for raw in joined.split(b"\n"):
            row, previous = _check_line(raw, number, previous)
            last = lasts.get(row[1])
            if last is None:
                firsts[row[1]] = row[2]
            elif row[2] != last + 1:
                return None
            lasts[row[1]] = row[2]
            entries.append(previous)
            number += 1
    except LedgerError:
        return None
    streams = {stream: (firsts[stream], lasts[stream]) for stream in lasts}
    if len(entries) == parallel_chunk_lines:
        compact = CompactRange()
        compact.extend(entries)
        return len(entries), compact.root(), None, previous, streams
    return len(entries), None, entries, previous, streams


class _Edge:
    """Is the right edge of a Merkle tree grown by whole perfect subtrees and single leaves."""

    def __init__(self) -> None:
        self.nodes: list[tuple[int, bytes]] = []  # (height, hash), tallest first

    def push(self, height: int, value: bytes) -> None:
        """Appends a perfect subtree of ``height``; the tree's size must be a multiple of it."""
        nodes = self.nodes
        while nodes and nodes[-1][0] == height:
            value = node_hash(nodes.pop()[1], value)
            height += 1
        nodes.append((height, value))

    def root(self) -> bytes:
        """Returns the root hash of everything pushed so far."""
        if not self.nodes:
            return EMPTY_ROOT
        acc = self.nodes[-1][1]
        for _height, left in reversed(self.nodes[:-1]):
            acc = node_hash(left, acc)
        return acc


class _Stitcher:
    """Joins chunk results in order: sizes, stream versions across chunks, the tree."""

    def __init__(self) -> None:
        self.edge = _Edge()
        self.versions: dict[str, int] = {}
        self.size = 0
        self.head = bytes(32)

    def absorb(self, result: ChunkResult | None) -> None:
        """Adds one chunk's result, raising _Suspect if it or its joins are wrong."""
        if result is None:
            raise _Suspect
        count, subtree, leaves, last_entry, streams = result
        versions = self.versions
        for stream, (first, last) in streams.items():
            if first != versions.get(stream, 0) + 1:
                raise _Suspect
            versions[stream] = last
        if subtree is not None:
            self.edge.push(parallel_chunk_lines.bit_length() - 1, subtree)
        for entry in leaves or ():
            self.edge.push(0, leaf_hash(entry))
        self.size += count
        self.head = last_entry


def _chunks(blocks: _Blocks) -> Iterator[tuple[int, bytes, list[bytes]]]:
    """Cuts the file into chunks of ``parallel_chunk_lines``: (first line, previous, lines).

    ``previous`` is the entry hash the line before the chunk states.
    """
    pending: list[bytes] = []
    first, previous = 1, bytes(32)
    for lines in blocks.runs():
        pending.extend(lines)
        while len(pending) >= parallel_chunk_lines:
            chunk, pending = pending[:parallel_chunk_lines], pending[parallel_chunk_lines:]
            yield first, previous, chunk
            first += len(chunk)
            previous = _stated_hash(chunk[-1])
    if pending:
        yield first, previous, pending
    if blocks.carry:
        raise _Suspect


def _stated_hash(raw: bytes) -> bytes:
    try:
        return bytes.fromhex(_loads(raw)["entry_hash"])
    except Exception:  # any malformation: the sequential pass will name it
        raise _Suspect from None


def _scan_parallel(bundle: Path, workers: int, tick: Tick | None = None) -> _Scan:
    """Verifies events.jsonl on ``workers`` processes; raises _Suspect on any fault.
    ``tick`` hears how many lines are verified, in order."""
    import multiprocessing

    # fork, not spawn or forkserver: those re-run the caller's main module in each worker,
    # which breaks scripts without a __main__ guard. Workers only compute and return; the
    # file is hashed on this thread so that no helper thread is running across the fork.
    blocks, stitcher = _Blocks(bundle, threaded=False), _Stitcher()
    pool = ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("fork"))
    in_flight: deque[Future[ChunkResult | None]] = deque()
    try:
        for first, previous, lines in _chunks(blocks):
            in_flight.append(pool.submit(_verify_chunk, first, previous, b"\n".join(lines)))
            if len(in_flight) > workers:
                stitcher.absorb(in_flight.popleft().result())
                if tick is not None:
                    tick(stitcher.size)
        while in_flight:
            stitcher.absorb(in_flight.popleft().result())
            if tick is not None:
                tick(stitcher.size)
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
    head = stitcher.head.hex() if stitcher.size else GENESIS_HASH
    return _Scan(stitcher.size, head, stitcher.edge.root().hex(), blocks.digest.hexdigest(),
                 blocks.total)


def _workers() -> int:
    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        usable = os.cpu_count() or 1
    return min(parallel_workers_max, usable)


def _scan_events(bundle: Path, expected_events: int, progress: Progress | None = None) -> _Scan:
    """Verifies events.jsonl: on worker processes when it is large, else in this process.

    The parallel pass only ever accepts; at the first sign of a fault (or if workers
    cannot run) the sequential pass runs and names the first bad line exactly.
    """
    import multiprocessing

    workers = _workers() if "fork" in multiprocessing.get_all_start_methods() else 1
    if workers > 1 and expected_events >= parallel_events_min:
        try:
            return _scan_parallel(bundle, workers, ticker(progress, "verifying", expected_events))
        except _Suspect:
            pass
        except (OSError, RuntimeError) as exc:  # BrokenProcessPool is a RuntimeError
            _log.warning("parallel_verify_unavailable", error=str(exc))
    return _scan_sequential(bundle, tick=ticker(progress, "verifying", expected_events))


def _check_totals(scan: _Scan, manifest: Manifest, *, root: bool = True) -> None:
    """Compares what the pass computed with what the (signed) manifest states; ``root``
    False leaves the Merkle root out (a pass that did not build the tree)."""
    checks = [
        ("event count", scan.events, manifest.events),
        ("head hash", scan.head_hash, manifest.head_hash),
        ("events.jsonl sha256", scan.sha256, manifest.events_sha256),
        ("events.jsonl size in bytes", scan.bytes, manifest.events_bytes),
    ]
    if root:
        checks.insert(2, ("Merkle root", scan.merkle_root, manifest.merkle_root))
    for name, computed, stated in checks:
        if computed != stated:
            shown = [f"{v:,}" if type(v) is int else v for v in (computed, stated)]
            raise IntegrityError(
                f"the bundle's {name} is {shown[0]} but {MANIFEST_FILE} states {shown[1]}; "
                "the events file was truncated, extended or rewritten",
                reason="manifest_mismatch",
            )


# --------------------------------------------------------------------------- reports


@dataclass(frozen=True, slots=True)
class BundleReport:
    """Reports an export, verification or import: sizes, hashes and the checkpoint met.

    ``checkpoint_origin`` is the origin of a checkpoint that was signed (export) or whose
    signature was checked (verify, import), else None; ``checkpoint_included`` tells
    whether the bundle carries a checkpoint note at all, checked or not (with
    ``--no-signature-check`` one travels unread, and an import does not store it).
    """

    path: str
    events: int
    head_hash: str
    merkle_root: str
    events_sha256: str
    checkpoint_origin: str | None
    signature_checked: bool
    checkpoint_included: bool
    #: Names in the bundle directory that are not part of the bundle (verify and import):
    #: nothing vouches for them, so a reader is told rather than left to trust them.
    unlisted: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        """Returns the report as a JSON-ready object."""
        return {
            "path": self.path,
            "events": self.events,
            "tree_size": self.events,
            "head_hash": self.head_hash,
            "merkle_root": self.merkle_root,
            "events_sha256": self.events_sha256,
            "checkpoint_origin": self.checkpoint_origin,
            "signature_checked": self.signature_checked,
            "checkpoint_included": self.checkpoint_included,
            "unlisted_files": list(self.unlisted),
        }


def verify_bundle(
    bundle: Path, verifier: Verifier | None, *, origin: str | None = None,
    allow_unsigned: bool = False, progress: Progress | None = None,
) -> BundleReport:
    """Checks a bundle offline: manifest, checkpoint signature, every line, root and digests.

    Touches no database. Raises IntegrityError naming the first fault; without a
    ``verifier`` it refuses unless ``allow_unsigned`` is set. ``progress`` hears how many
    lines are verified.
    """
    manifest = read_manifest(bundle)
    signed = _bundle_checkpoint(bundle, manifest, verifier, origin, allow_unsigned)
    scan = _scan_events(bundle, manifest.events, progress)
    _check_totals(scan, manifest)
    return BundleReport(
        str(bundle), scan.events, scan.head_hash, scan.merkle_root, scan.sha256,
        signed[0].origin if signed else None, signed is not None, manifest.checkpoint,
        _unlisted(bundle, manifest),
    )


def _unlisted(bundle: Path, manifest: Manifest) -> tuple[str, ...]:
    """Returns the sorted names in ``bundle`` other than its files (a checkpoint.note the
    manifest does not list is one of them)."""
    listed = {EVENTS_FILE, MANIFEST_FILE, *([CHECKPOINT_FILE] if manifest.checkpoint else [])}
    try:
        names = os.listdir(bundle)
    except OSError:  # it was read a moment ago; a directory gone now has nothing to add
        return ()
    return tuple(sorted(name for name in names if name not in listed))


# ------------------------------------------------------------------------------ export


def _export_line(position: int, stream: str, version: int, kind: str, schema: int,
                 payload: bytes, recorded_at: str, actor: str, entry_hash: str) -> bytes:
    document = event_document(position, stream, version, kind, schema, payload, recorded_at,
                              actor)
    document["entry_hash"] = entry_hash
    return _dumps(document, option=_LINE_OPTIONS) + b"\n"


def _write_events(
    store: EventStore, file: IO[bytes], size: int, tick: Tick | None = None
) -> _Scan:
    """Streams positions 1..size into ``file``, re-checking the chain as it goes.

    Reads the driver's rows a position window at a time (``ledger.verify``'s reader) and
    chains them as verify does (``ledger.chain.chained``), rather than a RecordedEvent and
    an envelope per event.
    """
    digest, compact = hashlib.sha256(), CompactRange()
    previous, count, total = b"", 0, 0  # previous: the last entry hash (unused when empty)
    for row, previous in chained(bytes(32), raw_rows(store, 1, size)):
        count += 1
        position, stream, version, kind, schema, payload, recorded_at, actor, entry = row
        if position != count or previous.hex() != entry:
            raise IntegrityError(
                f"the ledger fails its hash chain at position {count}; run `arena-ledger "
                "verify` and repair it before exporting", reason="chain_broken", position=count,
            )
        line = _export_line(position, stream, version, kind, schema, bytes(payload),
                            recorded_at, actor, entry)
        file.write(line)
        digest.update(line)
        total += len(line)
        compact.append(previous)
        if tick is not None:
            tick(count)
    if count != size:
        raise IntegrityError(f"the ledger's events end at position {count}, not at {size}",
                             reason="chain_broken", position=count + 1)
    head = previous.hex() if count else GENESIS_HASH
    return _Scan(count, head, compact.root().hex(), digest.hexdigest(), total)


def _stored_note(store: EventStore, size: int, root_hex: str) -> str | None:
    """Returns the latest stored checkpoint note at ``size`` and ``root_hex``, if any."""
    mark = _mark(store)
    with store.engine.connect() as conn:
        value = conn.exec_driver_sql(
            f"SELECT note FROM checkpoints WHERE tree_size = {mark} AND root_hash = {mark} "
            "ORDER BY id DESC LIMIT 1",
            (size, root_hex),
        ).scalar()
    return None if value is None else str(value)


def _mark(store: EventStore) -> str:
    # SQL goes through the engine's driver-level API (no SQLAlchemy import here: that
    # library belongs to the store modules, see tests/unit/test_layers.py), so the
    # placeholder is the driver's own.
    return "?" if store.backend == "sqlite" else "%s"


def _is_database_error(exc: BaseException) -> bool:
    """Tells an error raised by the database layer (SQLAlchemy, a driver) from a bug."""
    return type(exc).__module__.split(".", 1)[0] in ("sqlalchemy", "psycopg", "sqlite3")


def _unwritable(bundle: Path, exc: OSError) -> InvalidInput:
    """Returns the error of an export the file system refused (permission, a full disk).

    As ``db backup`` words a file it cannot write: InvalidInput (exit 1) naming the target;
    what had been written aside is removed, so nothing is left behind.
    """
    reason = exc.strerror or type(exc).__name__
    return InvalidInput(f"cannot write the bundle {bundle}: {reason}; nothing was written",
                        path=str(bundle))


def _export_to(
    store: EventStore, work: Path, size: int, signer: Signer | None, origin: str | None,
    progress: Progress | None,
) -> tuple[Manifest, str | None]:
    with (work / EVENTS_FILE).open("wb") as file:
        scan = _write_events(store, file, size, ticker(progress, "exporting", size))
        file.flush()
        os.fsync(file.fileno())
    stored_size, stored_root = store.merkle_root(size)
    if stored_root.hex() != scan.merkle_root:
        raise IntegrityError(
            f"the stored Merkle tree's root at size {size} differs from the root of the "
            "stored entry hashes; the store is damaged", reason="tree_mismatch",
        )
    if signer is not None:
        note: str | None = sign_tree(store, signer, origin, stored_size).note
    else:
        note = _stored_note(store, size, scan.merkle_root)
    if note is not None:
        (work / CHECKPOINT_FILE).write_text(note, encoding="utf-8")
    manifest = Manifest(scan.events, scan.head_hash, scan.merkle_root, scan.sha256, scan.bytes,
                        note is not None)
    (work / MANIFEST_FILE).write_bytes(manifest.to_bytes())
    return manifest, note


def export_bundle(
    store: EventStore, bundle: Path, *, signer: Signer | None = None, origin: str | None = None,
    to_position: int | None = None, progress: Progress | None = None,
) -> BundleReport:
    """Writes positions 1..``to_position`` (default: the head) as a bundle directory.

    With ``signer`` the bundle's size is signed (and the checkpoint stored); otherwise the
    latest stored checkpoint of exactly that size is included, if there is one. The
    directory appears only once complete (written aside, then renamed). ``progress``
    hears how many events are written.
    """
    if bundle.exists() or bundle.is_symlink():
        raise InvalidInput(f"export target {bundle} already exists; name a new directory",
                           path=str(bundle))
    if not bundle.parent.is_dir():
        raise InvalidInput(f"directory {bundle.parent} does not exist", path=str(bundle))

    head_row, stored_max = head_and_last_position(store)
    head = head_row.position
    if stored_max > head:  # verify reports this too; a bundle would leave those events out
        raise IntegrityError(
            f"events exist past the head (up to position {stored_max}; the ledger_head row "
            f"says {head}): the head row was moved back outside arena-ledger or the store is "
            "damaged; nothing was exported. Run `arena-ledger verify`",
            reason="head_mismatch", position=head + 1,
        )
    size = head if to_position is None else to_position
    if not 0 <= size <= head:
        raise InvalidInput(f"--to-position {size} is outside 0..{head} (the head)", size=size)
    work = bundle.with_name(f".{bundle.name}.partial-{secrets.token_hex(4)}")
    try:
        work.mkdir()
    except OSError as exc:
        raise _unwritable(bundle, exc) from None
    try:
        manifest, note = _export_to(store, work, size, signer, origin, progress)
        work.rename(bundle)
    except OSError as exc:
        shutil.rmtree(work, ignore_errors=True)
        raise _unwritable(bundle, exc) from None
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    origin_line = note.split("\n", 1)[0] if note else None
    _log.info("bundle_exported", path=str(bundle), events=size, signed=signer is not None)
    return BundleReport(str(bundle), manifest.events, manifest.head_hash, manifest.merkle_root,
                        manifest.events_sha256, origin_line, False, note is not None)


# ------------------------------------------------------------------------------ import


class _Inserter:
    """Inserts verified chunks and the Merkle nodes they complete through one connection."""

    def __init__(self, conn: Connection, backend: str) -> None:
        self._conn = conn
        self._backend = backend
        self._mark = "?" if backend == "sqlite" else "%s"
        self.frontier = b""
        self.size = 0

    def __call__(self, rows: list[Row], entries: list[bytes]) -> None:
        """Writes one chunk of events and advances the stored tree over it."""
        if self._backend == "postgresql":
            cursor = self._conn.connection.driver_connection.cursor()  # type: ignore[union-attr]
            with cursor.copy(f"COPY events ({_COLUMNS}) FROM STDIN") as copy:
                for row in rows:
                    copy.write_row(row)
        else:
            marks = ", ".join([self._mark] * 9)
            self._conn.exec_driver_sql(f"INSERT INTO events ({_COLUMNS}) VALUES ({marks})", rows)
        self.frontier, nodes = advance_frontier(self.frontier, self.size, entries)
        self.size += len(entries)
        if nodes:
            self._conn.exec_driver_sql(
                f"INSERT INTO merkle_nodes (level, idx, hash) VALUES "
                f"({self._mark}, {self._mark}, {self._mark})",
                nodes,
            )


@contextmanager
def _empty_ledger_transaction(store: EventStore) -> Iterator[Connection]:
    """Opens the write transaction, locks the head row and refuses a non-empty ledger."""
    conn = store.engine.connect()
    if store.backend == "sqlite":
        conn = conn.execution_options(sqlite_begin="IMMEDIATE")  # take the write lock now
    with conn, conn.begin():
        lock = " FOR UPDATE" if store.backend == "postgresql" else ""
        head = conn.exec_driver_sql(f"SELECT position FROM ledger_head WHERE id = 1{lock}").first()
        if head is None:
            raise head_row_missing()
        if int(head[0]) != 0 or conn.exec_driver_sql("SELECT 1 FROM events LIMIT 1").first():
            raise InvalidInput(
                f"the target ledger already holds events (head {int(head[0])}); import needs "
                "an empty ledger (a fresh `arena-ledger init`)", head=int(head[0]),
            )
        yield conn


def _insert_pass(
    store: EventStore, bundle: Path, first: _Scan, signed: tuple[Checkpoint, str] | None,
    key_name: str | None, progress: Progress | None = None,
) -> None:
    with _empty_ledger_transaction(store) as conn:
        inserter = _Inserter(conn, store.backend)
        second = _scan_sequential(bundle, inserter, ticker(progress, "importing", first.events))
        if second != first:
            raise IntegrityError(f"{EVENTS_FILE} changed while it was being imported",
                                 reason="changed_during_import")
        if frontier_root(inserter.frontier).hex() != first.merkle_root:
            raise IntegrityError("the rebuilt Merkle tree does not match the bundle's root",
                                 reason="tree_mismatch")
        m = _mark(store)
        conn.exec_driver_sql(
            f"UPDATE ledger_head SET position = {m}, entry_hash = {m}, frontier = {m} "
            "WHERE id = 1",
            (first.events, first.head_hash, inserter.frontier),
        )
        if signed is not None:
            checkpoint, note = signed
            conn.exec_driver_sql(
                "INSERT INTO checkpoints (tree_size, root_hash, origin, key_name, note, "
                f"created_at) VALUES ({m}, {m}, {m}, {m}, {m}, {m})",
                (checkpoint.size, checkpoint.root_hash.hex(), checkpoint.origin, key_name, note,
                 store.clock()),
            )


def _check_events(rows: list[Row], _: list[bytes]) -> None:
    """Refuses a line whose event the catalogue would not accept at append, byte for byte.

    A consistent chain proves the bundle was not altered after hashing, not that its events
    were ever valid: an unsigned bundle could be forged whole. Import therefore holds every
    event to the append rules (known type and version, schema, canonical bytes).
    """
    for position, stream, _version, kind, schema, payload, _at, _actor, _hash in rows:
        try:
            check_stream_name(stream)
            document = loads(payload, where=f"{EVENTS_FILE} line {position} payload")
            canonical = CATALOGUE.validate(kind, schema, document, stream)
        except LedgerError as exc:
            raise _line_error(position, f"event is not valid: {exc.message}") from None
        if canonical != payload:
            raise _line_error(position, "payload is not in canonical form")


def import_bundle(
    store: EventStore, bundle: Path, verifier: Verifier | None, *, origin: str | None = None,
    allow_unsigned: bool = False, progress: Progress | None = None,
) -> BundleReport:
    """Imports a bundle into an empty ledger after verifying all of it; all or nothing.

    The bundle is verified exactly as ``verify_bundle`` does before any write; then, in one
    transaction holding the head lock, it is streamed again, re-verified and inserted
    (events with their entry hashes, Merkle nodes, head row and frontier, and the verified
    checkpoint). Idempotency keys are not part of a bundle. ``progress`` hears both passes
    ("verifying", then "importing").
    """
    store.require_initialised()
    manifest = read_manifest(bundle)
    signed = _bundle_checkpoint(bundle, manifest, verifier, origin, allow_unsigned)
    head = store.head().position
    if head != 0:  # checked again under the head lock, as the import writes
        raise InvalidInput(
            f"the target ledger already holds events (head {head}); import needs an empty "
            "ledger (a fresh `arena-ledger init`)", head=head,
        )
    # In-process passes only: no worker is forked from a process holding database
    # connections, and the inserting pass dominates an import's time anyway.
    first = _scan_sequential(bundle, sink=_check_events,
                             tick=ticker(progress, "verifying", manifest.events))
    _check_totals(first, manifest)
    try:
        _insert_pass(store, bundle, first, signed, verifier.name if verifier else None,
                     progress)
    except LedgerError:
        raise
    except Exception as exc:
        if not _is_database_error(exc):
            raise
        orig = getattr(exc, "orig", None) or exc
        problem = str(orig).strip().splitlines()[0] if str(orig).strip() else type(orig).__name__
        raise StoreError(f"the database refused the import; nothing was written: {problem}",
                         url=store.engine.url.render_as_string(hide_password=True)) from None
    _log.info("bundle_imported", path=str(bundle), events=first.events,
              signature_checked=signed is not None)
    return BundleReport(str(bundle), first.events, first.head_hash, first.merkle_root,
                        first.sha256, signed[0].origin if signed else None, signed is not None,
                        manifest.checkpoint, _unlisted(bundle, manifest))


# ------------------------------------------------------------------------------ replay source


def read_bundle_events(
    bundle: Path, as_of: int | None = None
) -> tuple[Iterator[RecordedEvent], int]:
    """Returns the bundle's events as RecordedEvents (streaming) and how many will come.

    Each line is checked as ``verify_bundle`` checks it (shape, exact bytes, position,
    chain, stream versions); a bad line raises IntegrityError naming it. Payloads are not
    held to the event catalogue here, as import holds them: the replay's fold reads them.
    ``as_of`` stops after that position.
    """
    rows, total = read_bundle_rows(bundle, as_of)
    return (RecordedEvent(*row) for row in rows), total


def read_bundle_rows(bundle: Path, as_of: int | None = None) -> tuple[Iterator[Row], int]:
    """Is ``read_bundle_events`` yielding the plain rows (the store's columns) instead.

    Replay reads these: it needs the columns, not a RecordedEvent per event. Past ``as_of``
    the lines are still read and chained, not yielded: once the file ends, its line count,
    head hash, SHA-256 and size must be those the manifest states, or IntegrityError
    (``manifest_mismatch``) is raised, so a truncated, extended or rewritten events file
    never replays as a shorter ledger that "matches". The Merkle root and the checkpoint's
    signature are ``verify_bundle``'s to check (it needs the verifier key).

    Stream versions are checked as verification and import check them, so a reader keeps
    each stream's last version: memory grows with the number of streams in the bundle
    (about 100 to 200 bytes a stream, by the length of its name), not with its events.
    """
    manifest = read_manifest(bundle)
    total = manifest.events if as_of is None else min(as_of, manifest.events)

    def rows() -> Iterator[Row]:
        previous, check, number, size = bytes(32), _check_line, 0, 0
        versions: dict[str, int] = {}
        digest, most = _sha256(), bundle_line_bytes_max + 1  # a line and its newline
        with (bundle / EVENTS_FILE).open("rb") as source:
            read = source.readline
            while line := read(most + 1):  # never a whole endless line in memory
                number += 1
                digest.update(line)
                size += len(line)
                if line[-1:] != b"\n":  # the line's own bytes: over the limit, or cut short
                    if len(line) > bundle_line_bytes_max:
                        raise LimitExceeded(f"{EVENTS_FILE} line {number} is over "
                                            f"{bundle_line_bytes_max} bytes", line=number)
                    raise _line_error(number, "does not end in a newline (the file is truncated)")
                row, previous = check(line[:-1], number, previous)
                last = versions.get(row[1], 0)
                if row[2] != last + 1:
                    raise _version_jump(number, row[1], last, row[2])
                versions[row[1]] = row[2]
                if number <= total:
                    yield row
        head = previous.hex() if number else GENESIS_HASH
        _check_totals(_Scan(number, head, "", digest.hexdigest(), size), manifest, root=False)

    return rows(), total

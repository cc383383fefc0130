"""Caches the machines' fold on local disk, so a short-lived process need not refold the ledger.

Every ``ArenaLedger`` folds the whole ledger before it answers or appends anything: seconds
for each CLI command on a large ledger, growing with the ledger. A
snapshot is the fold as it stood at one position, written to a file of the operator's own;
the next process loads it, checks it still belongs to the ledger, and folds only the events
after it. It is a cache and nothing else: every answer is the one a fold from nothing gives
(the tests hold every projection to that), a snapshot that does not fit is ignored, and
``replay`` never reads one (a second validator rebuilds from nothing, by definition).

A snapshot is used only when all of these hold, otherwise the fold starts from nothing:

* it is a regular file of the current user in a directory of the current user, neither
  writable by anyone else (it is a pickle: loading one runs what it says, so only the
  user's own files are loaded, as ssh treats its keys);
* its format and the code fingerprint match: the SHA-256 of the ``ledger`` and ``machines``
  sources (and compiled extensions, if any), the Python version and the pydantic versions
  (another build may fold differently, or lay its objects out differently);
* the body's SHA-256 matches the header (a torn or corrupted file);
* its position is not past the ledger's head (or the view's ``as_of``) and the stored entry
  hash at that position is the one it recorded: the chain hash commits to every event up to
  there, so the ledger it was taken from and this one agree up to the snapshot.

The file, one per store (named by a hash of its URL without the password; a SQLite path
made absolute), is ``SNAPSHOT_MAGIC``, a JSON header line (padded with spaces to a fixed
width: it is written after the body), then the pickled (fold, latest EmissionPolicySet). It
is replaced atomically (a temporary file, then a rename) and written with mode 0600 in a
directory made with mode 0700.
"""

from __future__ import annotations

import hashlib
import os
import pickle
import stat
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import orjson
import pydantic
import pydantic_core

import ledger
import machines
import services
import vocabulary
from ledger.log import get_logger
from ledger.store import database_identity
from machines.projection import LedgerFold
from services.gc_pause import CollectorPaused
from services.limits import snapshot_header_bytes_max
from vocabulary.events import EmissionPolicySet

__all__ = [
    "SNAPSHOT_MAGIC",
    "Restored",
    "SnapshotCache",
    "code_fingerprint",
    "default_directory",
    "log",
    "snapshot_events_min",
    "store_key",
]

#: The first line of every snapshot file; a file without it is not one.
SNAPSHOT_MAGIC = b"arena-ledger fold snapshot v1\n"
#: Events a process must fold past its snapshot (or from nothing) before it writes a new one
#: on close: writing costs a fraction of the fold it saves, but not nothing, so a ledger that
#: grew by a few events is not written again.
snapshot_events_min = 10_000
#: The header line as written: the JSON padded with spaces to this width, newline included
#: (it is written after the body, over a blank line of this width).
_HEADER_WIDTH = 1_024
#: Bytes read at a time while the body's SHA-256 is checked (the body is then unpickled from
#: the file: a large ledger's body is not held in memory twice).
_CHUNK_BYTES = 1 << 20

log = get_logger("arena_ledger.snapshot")
_fingerprint: str | None = None


def default_directory() -> Path | None:
    """Returns ``$XDG_CACHE_HOME/arena-ledger/snapshots`` (``~/.cache/…`` without it); None
    when there is neither, nor a home directory (then a command keeps no snapshot)."""
    base = os.environ.get("XDG_CACHE_HOME")
    if not base:
        try:
            base = str(Path.home() / ".cache")
        except (RuntimeError, KeyError):  # no HOME and no password entry for this user
            return None
    return Path(base) / "arena-ledger" / "snapshots"


def code_fingerprint() -> str:
    """Returns the SHA-256 of what decides a fold's objects.

    That is the ``vocabulary``, ``ledger``, ``machines`` and ``services`` sources and compiled
    extensions, if any (name and bytes, in name order), the Python and pydantic versions."""
    global _fingerprint
    if _fingerprint is None:
        digest = hashlib.sha256()
        digest.update(f"{sys.implementation.name} {sys.version}\n".encode())
        digest.update(f"pydantic {pydantic.VERSION} {pydantic_core.__version__}\n".encode())
        for package in (vocabulary, ledger, machines, services):
            root = Path(package.__file__ or "").parent
            # The compiled build's extensions too (setup.py): their classes pickle otherwise.
            for source in sorted([*root.glob("*.py"), *root.glob("*.so"), *root.glob("*.pyd")]):
                digest.update(f"{package.__name__}/{source.name}\n".encode())
                digest.update(source.read_bytes())
        _fingerprint = digest.hexdigest()
    return _fingerprint


def store_key(url: str) -> str:
    """Returns the name a store's snapshot file takes: a hash of the database it opens
    (``ledger.store.database_identity``: no password, a SQLite path made absolute, so a
    relative path names one file from anywhere); "" for an in-memory SQLite database,
    which has no snapshot."""
    identity = database_identity(url)
    return hashlib.sha256(identity.encode()).hexdigest()[:32] if identity else ""


@dataclass(frozen=True)
class Restored:
    """A snapshot loaded and checked: the fold at ``position``, and the latest policy."""

    fold: LedgerFold
    emission_policy: EmissionPolicySet | None
    position: int


class SnapshotCache:
    """Reads and writes one store's fold snapshot in ``directory``."""

    def __init__(self, directory: str | os.PathLike[str], url: str) -> None:
        self.directory = Path(directory)
        self.key = store_key(url)
        self.path = self.directory / f"{self.key}.snapshot" if self.key else None
        #: What the last ``load`` or ``save`` did: "none", "restored at position N",
        #: "ignored: <why>", "written at position N", "not written: <why>"; None before.
        self.outcome: str | None = None

    def load(
        self, head: int, entry_hash_at: Callable[[int], str | None]
    ) -> Restored | None:
        """Returns the snapshot when it fits a ledger whose head (or view) is ``head`` and
        whose entry hash at a position ``entry_hash_at`` gives (None: no such row); None
        when there is none or it does not fit. ``outcome`` says which, and why (logged too:
        a file that is not the user's own, or does not read as a snapshot, as a warning)."""
        if self.path is None:
            return self._ignored("no snapshot for an in-memory database", warn=False)
        try:
            source = self._open_own_file(self.path)
        except FileNotFoundError:
            self.outcome = "none"
            return None
        except (OSError, _Unfit) as exc:
            return self._ignored(str(exc), warn=True)
        with source:
            try:
                header = _checked_header(source)
                position = header["position"]
                if position > head:
                    raise _Unfit(
                        f"taken at position {position}, past the head or view ({head})",
                        warn=False,
                    )
                recorded = entry_hash_at(position)
                if recorded != header["entry_hash"]:
                    raise _Unfit(
                        f"the ledger's entry hash at position {position} is {recorded}, the "
                        f"snapshot was taken from a ledger where it is {header['entry_hash']}",
                        warn=False,
                    )
            except _Unfit as exc:
                return self._ignored(str(exc), warn=exc.warn)
            except OSError as exc:
                return self._ignored(str(exc), warn=True)
            try:
                # A pickle runs what it says: this is the user's own file, checked above.
                with CollectorPaused():
                    fold, policy = pickle.load(source)
            except Exception as exc:  # whatever unpickling raises, the answer is to refold
                return self._ignored(f"does not unpickle: {exc!r}", warn=True)

        if (
            type(fold) is not LedgerFold
            or fold.position != position
            or fold.archive is not None
            or not (policy is None or type(policy) is EmissionPolicySet)
        ):
            return self._ignored(f"does not hold a fold at position {position}", warn=True)
        self.outcome = f"restored at position {position}"
        log.info("snapshot_restored", path=str(self.path), position=position)
        return Restored(fold, policy, position)

    def _ignored(self, reason: str, *, warn: bool) -> Restored | None:
        """Notes and logs why the snapshot is not used; returns None (``load``'s answer)."""
        self.outcome = f"ignored: {reason}"
        (log.warning if warn else log.info)("snapshot_ignored", path=str(self.path), reason=reason)
        return None

    def save(
        self, fold: LedgerFold, policy: EmissionPolicySet | None, entry_hash: str
    ) -> bool:
        """Writes the fold (at its position, whose stored entry hash is ``entry_hash``) in
        place of the store's snapshot; False, logged, when it cannot be written."""
        if self.path is None or fold.archive is not None:
            self.outcome = "not written: an in-memory database or an archiving fold"
            return False
        made = _missing_directories(self.directory)
        try:
            self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
            handle, temporary = tempfile.mkstemp(
                dir=self.directory, prefix=f".{self.key}.", suffix=".tmp"
            )
            try:
                with os.fdopen(handle, "wb") as out:
                    # The header line is written last, over a blank one of its fixed width:
                    # the body is pickled straight into the file (and its SHA-256), not into
                    # a bytes object first, which would double the peak memory.
                    out.write(SNAPSHOT_MAGIC + b" " * (_HEADER_WIDTH - 1) + b"\n")
                    body = _Digesting(out)
                    with CollectorPaused():  # the fold is acyclic: a collection finds nothing
                        pickle.dump((fold, policy), body, protocol=pickle.HIGHEST_PROTOCOL)
                    header = orjson.dumps({
                        "format": SNAPSHOT_MAGIC.decode().strip(),
                        "fingerprint": code_fingerprint(),
                        "position": fold.position,
                        "entry_hash": entry_hash,
                        "body_sha256": body.digest.hexdigest(),
                        "body_bytes": body.size,
                    }, option=orjson.OPT_SORT_KEYS)
                    if len(header) >= _HEADER_WIDTH:
                        raise ValueError(f"a header of {len(header)} bytes (at most "
                                         f"{_HEADER_WIDTH - 1})")
                    out.seek(len(SNAPSHOT_MAGIC))
                    out.write(header.ljust(_HEADER_WIDTH - 1))
                os.replace(temporary, self.path)
            except BaseException:
                Path(temporary).unlink(missing_ok=True)
                raise
        except (
            OSError, pickle.PicklingError, TypeError, AttributeError, ValueError, RecursionError
        ) as exc:
            for directory in made:  # what this write made, leaf first, unless used meanwhile
                try:
                    directory.rmdir()
                except OSError:
                    break
            self.outcome = f"not written: {exc!r}"
            log.warning("snapshot_not_written", path=str(self.path), reason=repr(exc))
            return False
        self.outcome = f"written at position {fold.position}"
        log.info("snapshot_written", path=str(self.path), position=fold.position,
                  bytes=body.size)
        return True

    def _open_own_file(self, path: Path) -> BinaryIO:
        """Opens the file for reading, or raises _Unfit when it or its directory is not the
        user's own (a link, another owner, group- or world-writable) or not a regular file."""
        _require_own(os.stat(self.directory), f"directory {self.directory}", directory=True)
        # Not through a link; and a FIFO put there must not block the open (regular files
        # read as usual with O_NONBLOCK). The descriptor is checked before a file object
        # takes it, and closed whatever goes wrong.
        flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
        handle = os.open(path, flags)
        try:
            _require_own(os.fstat(handle), f"file {path}", directory=False)
            return os.fdopen(handle, "rb")
        except BaseException:
            os.close(handle)
            raise


def _missing_directories(directory: Path) -> list[Path]:
    """Returns ``directory`` and those of its parents that do not exist, leaf first."""
    missing = []
    for candidate in (directory, *directory.parents):
        if candidate.exists():
            break
        missing.append(candidate)
    return missing


class _Digesting:
    """Writes to ``out`` and keeps the SHA-256 and size of what it wrote."""

    def __init__(self, out: BinaryIO) -> None:
        self.out = out
        self.digest = hashlib.sha256()
        self.size = 0

    def write(self, data: Any) -> int:
        self.digest.update(data)
        self.size += len(data)
        return self.out.write(data)


class _Unfit(Exception):
    """A snapshot that exists but does not fit: the reason is logged, the fold starts over.

    ``warn``: logged as a warning (the file is not the user's own, or does not read as a
    snapshot: worth a look); else as info (written by other code, or of another ledger:
    expected after an upgrade or a restore)."""

    def __init__(self, reason: str, *, warn: bool = True) -> None:
        super().__init__(reason)
        self.warn = warn


def _require_own(info: os.stat_result, what: str, *, directory: bool) -> None:
    kind = stat.S_ISDIR(info.st_mode) if directory else stat.S_ISREG(info.st_mode)
    if not kind:
        raise _Unfit(f"{what} is not a {'directory' if directory else 'regular file'}")
    if hasattr(os, "getuid") and info.st_uid != os.getuid():
        raise _Unfit(f"{what} belongs to another user (uid {info.st_uid})")
    if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise _Unfit(f"{what} is writable by others (mode {stat.S_IMODE(info.st_mode):o})")


def _checked_header(source: BinaryIO) -> dict[str, Any]:
    """Reads the magic line and the header, checks the header and the body's size and
    SHA-256 (read in chunks, not held), and leaves ``source`` at the body; _Unfit else."""
    if source.read(len(SNAPSHOT_MAGIC)) != SNAPSHOT_MAGIC:
        raise _Unfit("not an arena-ledger fold snapshot v1")
    line = source.readline(snapshot_header_bytes_max)
    if not line.endswith(b"\n"):
        raise _Unfit("no header line")
    try:
        header = orjson.loads(line)
    except orjson.JSONDecodeError as exc:
        raise _Unfit(f"header is not JSON: {exc}") from None
    if (
        not isinstance(header, dict)
        or type(header.get("position")) is not int
        or not isinstance(header.get("entry_hash"), str)
    ):
        raise _Unfit("header lacks position or entry_hash")
    if header.get("fingerprint") != code_fingerprint():
        raise _Unfit(
            "written by other code (the ledger, machines, Python or pydantic differ)", warn=False
        )
    start, digest, size = source.tell(), hashlib.sha256(), 0
    while chunk := source.read(_CHUNK_BYTES):
        digest.update(chunk)
        size += len(chunk)
    if size != header.get("body_bytes") or digest.hexdigest() != header.get("body_sha256"):
        raise _Unfit("body does not match its SHA-256 (torn or corrupted)")
    source.seek(start)
    return header

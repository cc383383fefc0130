"""Defines the one exception tree of arena-ledger; every misuse or fault raises from it.

Expected business outcomes (a FAIL verdict, a refused transition, a rejected intake) are
*data*, not exceptions. Exceptions are for misuse and faults. Each class has a stable
``code`` (never renamed, never reused), a message a person can act on, and its context as
attributes. The CLI maps each subtree to a documented exit code.

    LedgerError                          code            exit
    ├── InvalidInput                     invalid_input      1
    │   ├── CanonicalFormError           non_canonical      1
    │   ├── MalformedJson                invalid_json       1
    │   ├── SchemaError                  schema_invalid     1
    │   ├── UnknownEventType             unknown_event_type 1
    │   ├── LimitExceeded                limit_exceeded     1
    │   └── IdempotencyKeyReused         idempotency_key_reused 1
    ├── Refused                          refused            1   (a machine said no)
    ├── NotFound                         not_found          1
    ├── ConcurrencyConflict              concurrency_conflict 3
    ├── IntegrityError                   integrity_failure  4
    │   └── SignatureInvalid             signature_invalid  4
    ├── StoreError                       store_error        5
    │   ├── SchemaNotInitialised         store_not_initialised 5
    │   ├── StoreUnavailable             store_unavailable  5
    │   └── ArchiveUnavailable           archive_unavailable 5
    ├── EngineFault                      engine_fault       6   (maps to InfrastructureFault codes)
    └── EngineUnavailable                engine_unavailable 6   (the engine extra is not installed)
"""

from __future__ import annotations

import os
from typing import Any, BinaryIO

__all__ = [
    "ArchiveUnavailable",
    "CanonicalFormError",
    "ConcurrencyConflict",
    "EngineFault",
    "EngineUnavailable",
    "IdempotencyKeyReused",
    "IntegrityError",
    "InvalidInput",
    "LedgerError",
    "LimitExceeded",
    "MalformedJson",
    "NotFound",
    "Refused",
    "SchemaError",
    "SchemaNotInitialised",
    "SignatureInvalid",
    "StoreError",
    "StoreUnavailable",
    "UnknownEventType",
    "head_row_missing",
    "open_input",
    "read_input",
    "require_file",
    "unreadable",
]


class LedgerError(Exception):
    """Is the root of every error arena-ledger raises on purpose."""

    code: str = "ledger_error"
    exit_code: int = 1

    def __init__(self, message: str, **context: Any) -> None:
        super().__init__(message)
        self.message = message
        self.context: dict[str, Any] = context
        for key, value in context.items():
            setattr(self, key, value)

    def to_dict(self) -> dict[str, Any]:
        """Returns the error as a JSON-ready object (code, message, context)."""
        return {
            "code": self.code,
            "message": self.message,
            "context": {k: _jsonable(v) for k, v in self.context.items()},
        }


def _jsonable(value: Any) -> Any:
    if isinstance(value, (str, int, bool)) or value is None:
        return value
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    return str(value)


class InvalidInput(LedgerError):
    """Reports input that is malformed; nothing was written."""

    code = "invalid_input"


class CanonicalFormError(InvalidInput):
    """Reports a value that has no canonical JSON form (float, NaN, non-canonical decimal...)."""

    code = "non_canonical"


class MalformedJson(InvalidInput):
    """Reports input that is not JSON at all (a missing comma, an unclosed brace) by line
    and column; JSON that parses but has no canonical form is ``CanonicalFormError``."""

    code = "invalid_json"


class SchemaError(InvalidInput):
    """Reports a payload that does not match its event schema."""

    code = "schema_invalid"


class UnknownEventType(InvalidInput):
    """Reports an event type or schema version the catalogue does not know."""

    code = "unknown_event_type"


class LimitExceeded(InvalidInput):
    """Reports an input over one of the named limits in ``vocabulary.limits``."""

    code = "limit_exceeded"


class IdempotencyKeyReused(InvalidInput):
    """Reports an idempotency key repeated with different content."""

    code = "idempotency_key_reused"


class Refused(LedgerError):
    """Carries a machine's refusal of an event (state, event, stable reason code)."""

    code = "refused"


class NotFound(LedgerError):
    """Reports a stream, position, submission or attempt that does not exist."""

    code = "not_found"


class ConcurrencyConflict(LedgerError):
    """Reports an expected stream version that did not match; nothing was written."""

    code = "concurrency_conflict"
    exit_code = 3


class IntegrityError(LedgerError):
    """Reports a broken hash chain, Merkle root, proof or bundle."""

    code = "integrity_failure"
    exit_code = 4


class SignatureInvalid(IntegrityError):
    """Reports a signed note whose signature does not verify."""

    code = "signature_invalid"


class StoreError(LedgerError):
    """Reports a database fault that is not the caller's input."""

    code = "store_error"
    exit_code = 5


def head_row_missing() -> StoreError:
    """Returns the error of a ledger whose ``ledger_head`` row is gone: damage, not input."""
    return StoreError("the ledger_head row is missing; the database is damaged")


class SchemaNotInitialised(StoreError):
    """Reports a database whose tables have not been created (run `arena-ledger init`)."""

    code = "store_not_initialised"


class StoreUnavailable(StoreError):
    """Reports a database that cannot be reached, is read-only or is full."""

    code = "store_unavailable"


class ArchiveUnavailable(StoreError):
    """Reports that a fold's temporary archive file failed (e.g. its directory is full).

    The ledger itself is untouched: the archive (``ledger.archive.DiskArchive``) holds a
    replay's or a long-running fold's finished submissions, in SQLite's temporary directory.
    """

    code = "archive_unavailable"


class EngineFault(LedgerError):
    """Reports an engine failure; ``fault_code`` is one of the InfrastructureFault codes."""

    code = "engine_fault"
    exit_code = 6

    def __init__(self, message: str, *, fault_code: str, stage: str, **context: Any) -> None:
        super().__init__(message, fault_code=fault_code, stage=stage, **context)


class EngineUnavailable(LedgerError):
    """Reports that no engine can boot here (the ``engine`` extra is missing); nothing ran.

    Not an EngineFault: it happens before any attempt, so it is never recorded as one.
    """

    code = "engine_unavailable"
    exit_code = 6


def require_file(path: str | os.PathLike[str], what: str, *, regular: bool = False) -> None:
    """Raises InvalidInput naming ``what`` and ``path`` unless ``path`` can be read as a file:
    one that does not exist and a directory are told apart.

    Anything else that exists passes: a named pipe (the ``<(…)`` of a shell, ``/dev/stdin``)
    or a device reads as a stream of bytes. With ``regular`` only a regular file passes, for
    a reader that reads the path more than once or hands it to another program.
    """
    if os.path.isfile(path):
        return
    if os.path.isdir(path):
        problem = "is a directory, not a file"
    elif not os.path.exists(path):
        problem = "does not exist"
    elif regular:
        problem = "is not a regular file; give a file, not a pipe or a device"
    else:
        return
    raise InvalidInput(f"{what} {os.fspath(path)} {problem}", path=os.fspath(path))


def read_input(
    path: str | os.PathLike[str], what: str, *, regular: bool = False, limit: int | None = None
) -> bytes:
    """Returns the bytes of the file (or pipe) at ``path``; InvalidInput naming ``what`` and
    ``path`` when it does not exist, is a directory (or, with ``regular``, not a regular
    file: ``require_file``) or cannot be read (with the system's reason: permission denied,
    an I/O error). With ``limit``, at most that many bytes are read: more is LimitExceeded
    (``read_limited``), and a device that never ends is not read until memory runs out."""
    require_file(path, what, regular=regular)
    try:
        with open(path, "rb") as file:
            if limit is None:
                return file.read()
            return read_limited(file, f"{what} {os.fspath(path)}", limit, os.fspath(path))
    except OSError as exc:
        raise unreadable(path, what, exc) from None


def read_limited(source: BinaryIO, what: str, limit: int, path: str = "-") -> bytes:
    """Reads ``source`` to its end if that is at most ``limit`` bytes; LimitExceeded naming
    ``what`` (at ``path``) otherwise (one byte more is read to know)."""
    data = source.read(limit + 1)
    if len(data) > limit:
        raise LimitExceeded(f"{what} is over {limit:,} bytes; the limit is {limit:,}",
                            path=path)
    return data


def open_input(path: str | os.PathLike[str], what: str) -> BinaryIO:
    """Opens the file (or pipe) at ``path`` for reading bytes; refuses it as ``read_input``
    does."""
    require_file(path, what)
    try:
        return open(path, "rb")
    except OSError as exc:
        raise unreadable(path, what, exc) from None


def unreadable(path: str | os.PathLike[str], what: str, exc: OSError) -> InvalidInput:
    """Returns the error for a ``what`` at ``path`` the system refused to read."""
    reason = exc.strerror or type(exc).__name__
    return InvalidInput(f"{what} {os.fspath(path)} cannot be read: {reason}",
                        path=os.fspath(path))

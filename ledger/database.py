"""Names what every store module shares about the database: its handle and its failures.

The store, the chain check and the stored Merkle tree all talk to the database; each turns a
driver's or SQLAlchemy's failure into the ledger's own error here, and shows a URL only
with its password hidden. Keeping this apart from the store lets those modules use it
without importing the store, which imports them.
"""

from __future__ import annotations

import os
import re
import sqlite3
import stat
import sys
from typing import Protocol

from sqlalchemy import Engine
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError, DatabaseError, SQLAlchemyError

from vocabulary.errors import LedgerError, SchemaNotInitialised, StoreError, StoreUnavailable

__all__ = [
    "Database",
    "cannot_open",
    "database_errors",
    "driver_errors",
    "password_hidden",
    "safe_url",
    "sqlite_write_denied",
    "store_error",
    "writable",
]


class Database(Protocol):
    """Is what the chain check and the stored tree read of a store: its engine and URL."""

    url: str
    engine: Engine
    backend: str


def driver_errors() -> tuple[type[Exception], ...]:
    """Returns the DB-API errors raised where the store talks to the driver directly.

    PostgreSQL appends stream rows through psycopg's COPY and verify reads raw cursor pages,
    below SQLAlchemy, whose error translation therefore does not see a failure there.
    psycopg's errors are in the tuple once psycopg has been imported (SQLAlchemy imports it
    to open a PostgreSQL URL): no psycopg error can exist before, and a command on SQLite
    need not pay its import. Called where an ``except`` matches, which
    Python evaluates only when something was raised.
    """
    psycopg = sys.modules.get("psycopg")
    return _SQLITE_ERRORS if psycopg is None else (sqlite3.Error, psycopg.Error)


def database_errors() -> tuple[type[Exception], ...]:
    """Returns what a failed append or verify may raise from the database: SQLAlchemy's
    errors and the driver's (both talk to the driver directly on their hot paths)."""
    return (SQLAlchemyError, *driver_errors())


_SQLITE_ERRORS: tuple[type[Exception], ...] = (sqlite3.Error,)


def cannot_open(exc: DatabaseError, url: str) -> StoreUnavailable:
    """Returns the error for a database that does not open: a server that does not answer, a
    file that cannot be created, or (SQLite) a file that is not a database. The message
    names the database (password hidden) and the driver's reason."""
    reason = str(exc.orig).strip().splitlines()[0] if exc.orig is not None else str(exc)
    return StoreUnavailable(
        f"cannot open the database {safe_url(url)}: {reason}", url=safe_url(url),
        reason=reason,
    )


def store_error(exc: Exception, url: str) -> LedgerError:
    """Returns the ledger's error for a database failure ``exc`` on ``url`` (never the driver's)."""
    orig = getattr(exc, "orig", None)
    message = str(orig if orig is not None else exc).strip().splitlines()[0]
    lowered = message.lower()
    if "no such table" in lowered or ("does not exist" in lowered and "relation" in lowered):
        return SchemaNotInitialised(
            "the ledger's tables do not exist; run `arena-ledger init`", url=safe_url(url)
        )
    if "append-only" in lowered:
        return StoreError(f"the database refused a change to recorded events: {message}")
    if "readonly" in lowered or "unable to open" in lowered:
        denied = sqlite_write_denied(url)
        if denied is not None:
            return StoreUnavailable(f"{denied} ({message})", url=safe_url(url), reason=message)
    unavailable = ("locked", "readonly", "read-only", "disk", "full", "connect", "unable to open")
    if any(word in lowered for word in unavailable):
        return StoreUnavailable(f"the database is unavailable: {message}", url=safe_url(url))
    return StoreError(f"database error: {message}", url=safe_url(url))


def writable(path: str) -> bool:
    """Tells whether this process may write ``path`` (its effective user and groups, where
    the platform tells them apart; as root, nearly always)."""
    if os.access in os.supports_effective_ids:
        return os.access(path, os.W_OK, effective_ids=True)
    return os.access(path, os.W_OK)


def sqlite_write_denied(url: str) -> str | None:
    """Returns why this process may not write the SQLite ledger at ``url``: the file is
    read-only to it (naming the file, its mode and owner, and the user), its directory is
    (SQLite creates the -wal and -shm files there), or the file system is mounted
    read-only; None when it may, or for another backend."""
    try:
        parsed = make_url(url)
    except (ArgumentError, ValueError):
        return None
    path = parsed.database
    if parsed.get_backend_name() != "sqlite" or not path or path.startswith("file:"):
        return None
    try:
        info = os.stat(path)
        media = os.statvfs(os.path.dirname(os.path.abspath(path))).f_flag & os.ST_RDONLY
    except (OSError, AttributeError):  # AttributeError: no statvfs (Windows)
        return None
    user = f"uid {os.geteuid()}" if hasattr(os, "geteuid") else "this user"
    if media:
        return (f"the database file {path} is read-only: the file system that holds it is "
                "mounted read-only; writing needs it mounted read-write")
    if not writable(path):
        return (f"the database file {path} is read-only for this user ({user}): its mode is "
                f"{stat.filemode(info.st_mode)}, owner uid {info.st_uid}, group gid "
                f"{info.st_gid}; writing needs write permission on it")
    directory = os.path.dirname(os.path.abspath(path))
    if not writable(directory):
        return (f"the directory {directory} of the database file {path} is read-only for "
                f"this user ({user}): SQLite needs to create {os.path.basename(path)}-wal and "
                "-shm beside the file; writing needs write permission on the directory")
    return None


def safe_url(url: str) -> str:
    """Returns ``url`` as it may be shown or logged: as written, but with a password hidden
    (``***``); ``<invalid url>`` for text that is not a URL.

    A URL without a password is returned as written: rendered again, a SQLite path's
    brackets or ``%`` would come back percent-escaped, the same file spelt another way.
    """
    try:
        parsed = make_url(url)
    except (ArgumentError, ValueError):
        return "<invalid url>"  # no telling what in it is a password
    return url if parsed.password is None else parsed.render_as_string(hide_password=True)


def password_hidden(url: str) -> str:
    """Returns ``url`` with anything between ``user:`` and ``@`` of its authority shown as
    ``***``: for a URL that does not parse, whose password must not reach a message."""
    return re.sub(r"(://[^/:@]*:)[^/@]*@", r"\1***@", url, count=1)

"""Names what every store module shares about the database: its handle and its failures.

The store, the chain check and the stored Merkle tree all talk to the database; each turns a
driver's or SQLAlchemy's failure into the ledger's own error here, and shows a URL only
with its password hidden. Keeping this apart from the store lets those modules use it
without importing the store, which imports them.
"""

from __future__ import annotations

import re
import sqlite3
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
    "store_error",
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
    unavailable = ("locked", "readonly", "read-only", "disk", "full", "connect", "unable to open")
    if any(word in lowered for word in unavailable):
        return StoreUnavailable(f"the database is unavailable: {message}", url=safe_url(url))
    return StoreError(f"database error: {message}", url=safe_url(url))


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

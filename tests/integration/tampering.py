"""Lets a test play the attacker who goes around the append-only triggers.

PostgreSQL sets ``session_replication_role = replica`` for one transaction; SQLite drops
the triggers inside the transaction and recreates them before it commits.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy import Connection

from ledger.store import EventStore


@contextmanager
def triggers_bypassed(store: EventStore) -> Iterator[Connection]:
    """Yields a connection in a transaction where the append-only triggers do not fire."""
    with store.engine.connect() as conn, conn.begin():
        if store.backend == "postgresql":
            conn.exec_driver_sql("SET LOCAL session_replication_role = replica")
            yield conn
            return
        triggers = conn.exec_driver_sql(
            "SELECT name, sql FROM sqlite_master WHERE type = 'trigger' ORDER BY name"
        ).all()
        names = {name for name, _sql in triggers}
        assert {"trg_events_no_update", "trg_events_no_delete"} <= names, names
        for name, _sql in triggers:
            conn.exec_driver_sql(f'DROP TRIGGER "{name}"')
        yield conn
        for _name, sql in triggers:
            conn.exec_driver_sql(sql)

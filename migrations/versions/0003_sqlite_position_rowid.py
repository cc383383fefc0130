"""Makes events.position SQLite's rowid, so each event is one B-tree entry fewer.

Revision ID: 0003_sqlite_position_rowid
Revises: 0002_merkle_checkpoints
Create Date: 2026-11-30

SQLite gives a table a hidden 64-bit rowid and makes a column an alias of it only when the
column's declared type is exactly INTEGER. ``position BIGINT PRIMARY KEY`` therefore kept a
separate unique index beside the rowid: every append wrote one B-tree more than needed, and
every read by position went through that index. This revision rebuilds ``events`` on SQLite
with ``position INTEGER`` (same values, same 64-bit range, same constraints, indexes and
triggers); the rows are copied in position order, byte for byte. PostgreSQL already stores
``position`` as the BIGINT primary key and is left untouched.

The rebuild copies the table once (about 12 s per million events); the append-only triggers
are recreated on the new table before the transaction commits, so no moment exists in which
a committed database lacks them.
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0003_sqlite_position_rowid"
down_revision: str | None = "0002_merkle_checkpoints"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_COLUMNS = (
    "position, stream, version, type, schema_version, payload, recorded_at, actor, entry_hash"
)

_CREATE = """CREATE TABLE events_rebuilt (
	position {position_type} NOT NULL,
	stream VARCHAR(128) NOT NULL,
	version INTEGER NOT NULL,
	type VARCHAR(64) NOT NULL,
	schema_version INTEGER NOT NULL,
	payload BLOB NOT NULL,
	recorded_at VARCHAR(32) NOT NULL,
	actor VARCHAR(128) NOT NULL,
	entry_hash VARCHAR(64) NOT NULL,
	CONSTRAINT pk_events PRIMARY KEY (position),
	CONSTRAINT ck_events_position_positive CHECK (position >= 1),
	CONSTRAINT ck_events_version_positive CHECK (version >= 1),
	CONSTRAINT uq_events_stream_version UNIQUE (stream, version)
)"""


def _rebuild(position_type: str) -> None:
    """Recreates ``events`` with ``position`` declared as ``position_type`` (SQLite only)."""
    if op.get_context().dialect.name != "sqlite":
        return
    op.execute(_CREATE.format(position_type=position_type))
    op.execute(
        f"INSERT INTO events_rebuilt ({_COLUMNS}) SELECT {_COLUMNS} FROM events ORDER BY position"
    )
    # DROP TABLE drops the table's triggers before its implicit DELETE, so they do not fire.
    op.execute("DROP TABLE events")
    op.execute("ALTER TABLE events_rebuilt RENAME TO events")
    op.execute("CREATE INDEX ix_events_type_position ON events (type, position)")
    op.execute("CREATE INDEX ix_events_recorded_at ON events (recorded_at)")
    for action in ("UPDATE", "DELETE"):
        op.execute(
            f"CREATE TRIGGER trg_events_no_{action.lower()} BEFORE {action} ON events "
            f"BEGIN SELECT RAISE(ABORT, 'arena-ledger: {action} on events refused: "
            "recorded rows are append-only'); END"
        )


def upgrade() -> None:
    """Rebuilds SQLite's events table with ``position INTEGER`` (the rowid)."""
    _rebuild("INTEGER")


def downgrade() -> None:
    """Rebuilds SQLite's events table with ``position BIGINT`` as revision 0002 had it."""
    _rebuild("BIGINT")

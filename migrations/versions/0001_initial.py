"""Creates the event store: events, ledger_head, idempotency_keys and append-only triggers.

Revision ID: 0001_initial
Revises:
Create Date: 2026-11-29
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0001_initial"
down_revision: str | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_GENESIS = "0" * 64
_PROTECTED = ("events", "idempotency_keys")

_PG_FUNCTION = """
CREATE FUNCTION arena_ledger_refuse_change() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  RAISE EXCEPTION 'arena-ledger: % on % refused: recorded rows are append-only',
    TG_OP, TG_TABLE_NAME USING ERRCODE = 'restrict_violation';
END
$$
"""


def upgrade() -> None:
    """Creates the tables, the single head row and the triggers that refuse UPDATE/DELETE."""
    op.create_table(
        "events",
        sa.Column("position", sa.BigInteger(), autoincrement=False, nullable=False),
        sa.Column("stream", sa.String(128), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("type", sa.String(64), nullable=False),
        sa.Column("schema_version", sa.Integer(), nullable=False),
        sa.Column("payload", sa.LargeBinary(), nullable=False),
        sa.Column("recorded_at", sa.String(32), nullable=False),
        sa.Column("actor", sa.String(128), nullable=False),
        sa.Column("entry_hash", sa.String(64), nullable=False),
        sa.CheckConstraint("position >= 1", name=op.f("ck_events_position_positive")),
        sa.CheckConstraint("version >= 1", name=op.f("ck_events_version_positive")),
        sa.PrimaryKeyConstraint("position", name=op.f("pk_events")),
        sa.UniqueConstraint("stream", "version", name=op.f("uq_events_stream_version")),
    )
    op.create_index("ix_events_type_position", "events", ["type", "position"])
    op.create_index("ix_events_recorded_at", "events", ["recorded_at"])
    op.create_table(
        "ledger_head",
        sa.Column("id", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("position", sa.BigInteger(), nullable=False),
        sa.Column("entry_hash", sa.String(64), nullable=False),
        sa.CheckConstraint("id = 1", name=op.f("ck_ledger_head_single_row")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_ledger_head")),
    )
    op.create_table(
        "idempotency_keys",
        sa.Column("key", sa.String(128), nullable=False),
        sa.Column("content_digest", sa.String(64), nullable=False),
        sa.Column("first_position", sa.BigInteger(), nullable=False),
        sa.Column("last_position", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("key", name=op.f("pk_idempotency_keys")),
    )
    op.execute(
        sa.text("INSERT INTO ledger_head (id, position, entry_hash) VALUES (1, 0, :h)").bindparams(
            h=_GENESIS
        )
    )
    _create_triggers()


def _create_triggers() -> None:
    if op.get_context().dialect.name == "postgresql":
        op.execute(_PG_FUNCTION)
        for table in _PROTECTED:
            op.execute(
                f"CREATE TRIGGER trg_{table}_append_only BEFORE UPDATE OR DELETE ON {table} "
                "FOR EACH ROW EXECUTE FUNCTION arena_ledger_refuse_change()"
            )
            op.execute(
                f"CREATE TRIGGER trg_{table}_no_truncate BEFORE TRUNCATE ON {table} "
                "FOR EACH STATEMENT EXECUTE FUNCTION arena_ledger_refuse_change()"
            )
        return
    for table in _PROTECTED:
        for action in ("UPDATE", "DELETE"):
            op.execute(
                f"CREATE TRIGGER trg_{table}_no_{action.lower()} BEFORE {action} ON {table} "
                f"BEGIN SELECT RAISE(ABORT, 'arena-ledger: {action} on {table} refused: "
                "recorded rows are append-only'); END"
            )


def downgrade() -> None:
    """Drops everything this revision created (only ever on an empty or test ledger)."""
    if op.get_context().dialect.name == "postgresql":
        for table in _PROTECTED:
            op.execute(f"DROP TRIGGER IF EXISTS trg_{table}_append_only ON {table}")
            op.execute(f"DROP TRIGGER IF EXISTS trg_{table}_no_truncate ON {table}")
        op.execute("DROP FUNCTION IF EXISTS arena_ledger_refuse_change()")
    else:
        for table in _PROTECTED:
            for action in ("update", "delete"):
                op.execute(f"DROP TRIGGER IF EXISTS trg_{table}_no_{action}")
    op.drop_table("idempotency_keys")
    op.drop_table("ledger_head")
    op.drop_index("ix_events_recorded_at", table_name="events")
    op.drop_index("ix_events_type_position", table_name="events")
    op.drop_table("events")

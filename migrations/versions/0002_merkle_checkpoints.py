"""Adds the Merkle tree (frontier, stored nodes) and the checkpoints table.

Revision ID: 0002_merkle_checkpoints
Revises: 0001_initial
Create Date: 2026-11-29

Existing ledgers are back-filled by reading their entry hashes in position order; recorded
event rows are only read, never touched.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002_merkle_checkpoints"
down_revision: str | None = "0001_initial"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_PROTECTED = ("merkle_nodes", "checkpoints")


def _head_table(with_frontier: bool, nullable: bool = True) -> sa.Table:
    # batch mode on SQLite needs the table's shape without reflection in --sql mode.
    columns = [
        sa.Column("id", sa.Integer(), primary_key=True, autoincrement=False),
        sa.Column("position", sa.BigInteger(), nullable=False),
        sa.Column("entry_hash", sa.String(64), nullable=False),
    ]
    if with_frontier:
        columns.append(sa.Column("frontier", sa.LargeBinary(), nullable=nullable))
    return sa.Table(
        "ledger_head",
        sa.MetaData(),
        *columns,
        sa.CheckConstraint("id = 1", name="ck_ledger_head_single_row"),
    )


_PAGE = 5_000


def upgrade() -> None:
    """Creates the tables, adds the frontier column and back-fills both from events."""
    with op.batch_alter_table("ledger_head", copy_from=_head_table(False)) as batch:
        batch.add_column(sa.Column("frontier", sa.LargeBinary(), nullable=True))
    op.create_table(
        "merkle_nodes",
        sa.Column("level", sa.SmallInteger(), autoincrement=False, nullable=False),
        sa.Column("idx", sa.BigInteger(), autoincrement=False, nullable=False),
        sa.Column("hash", sa.LargeBinary(), nullable=False),
        sa.PrimaryKeyConstraint("level", "idx", name=op.f("pk_merkle_nodes")),
    )
    op.create_table(
        "checkpoints",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("tree_size", sa.BigInteger(), nullable=False),
        sa.Column("root_hash", sa.String(64), nullable=False),
        sa.Column("origin", sa.String(256), nullable=False),
        sa.Column("key_name", sa.String(256), nullable=False),
        sa.Column("note", sa.Text(), nullable=False),
        sa.Column("created_at", sa.String(32), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_checkpoints")),
    )
    op.create_index("ix_checkpoints_tree_size", "checkpoints", ["tree_size"])
    if op.get_context().as_sql:
        # Offline SQL cannot read events: it is for new databases only. On a non-empty
        # ledger the empty frontier no longer matches the size, and appends refuse loudly.
        empty = "X''" if op.get_context().dialect.name == "sqlite" else "''::bytea"
        op.execute(f"UPDATE ledger_head SET frontier = {empty}")
    else:
        _backfill()
    with op.batch_alter_table("ledger_head", copy_from=_head_table(True)) as batch:
        batch.alter_column("frontier", existing_type=sa.LargeBinary(), nullable=False)
    _create_triggers()


def _backfill() -> None:
    from ledger.tree import advance_frontier

    conn = op.get_bind()
    frontier, size, last = b"", 0, 0
    select = sa.text(
        "SELECT position, entry_hash FROM events WHERE position > :p ORDER BY position LIMIT "
        f"{_PAGE}"
    )
    insert = sa.text("INSERT INTO merkle_nodes (level, idx, hash) VALUES (:l, :i, :h)")
    while True:
        rows = conn.execute(select, {"p": last}).all()
        if not rows:
            break
        frontier, nodes = advance_frontier(frontier, size, [bytes.fromhex(r[1]) for r in rows])
        size += len(rows)
        last = int(rows[-1][0])
        if nodes:
            conn.execute(insert, [{"l": lv, "i": ix, "h": h} for lv, ix, h in nodes])
    conn.execute(sa.text("UPDATE ledger_head SET frontier = :f WHERE id = 1"), {"f": frontier})


def _create_triggers() -> None:
    if op.get_context().dialect.name == "postgresql":
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
    """Drops the Merkle and checkpoint tables and the frontier column."""
    if op.get_context().dialect.name == "postgresql":
        for table in _PROTECTED:
            op.execute(f"DROP TRIGGER IF EXISTS trg_{table}_append_only ON {table}")
            op.execute(f"DROP TRIGGER IF EXISTS trg_{table}_no_truncate ON {table}")
    else:
        for table in _PROTECTED:
            for action in ("update", "delete"):
                op.execute(f"DROP TRIGGER IF EXISTS trg_{table}_no_{action}")
    op.drop_index("ix_checkpoints_tree_size", table_name="checkpoints")
    op.drop_table("checkpoints")
    op.drop_table("merkle_nodes")
    with op.batch_alter_table("ledger_head", copy_from=_head_table(True, False)) as batch:
        batch.drop_column("frontier")

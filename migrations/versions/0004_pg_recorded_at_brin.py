"""Makes PostgreSQL's recorded_at index a BRIN index, which an append barely pays for.

Revision ID: 0004_pg_recorded_at_brin
Revises: 0003_sqlite_position_rowid
Create Date: 2026-11-30

A B-tree on ``events.recorded_at`` takes one index tuple (and one WAL record) per event, a
tenth of a 1,000-event COPY. The ledger is append-only and ``recorded_at`` is the append
clock, so the column follows the table's physical order: a BRIN index (the smallest and
largest value per range of 128 heap pages) answers a time-range filter by reading only the
ranges that can hold it, and costs an append next to nothing. The index stays exact under
a clock that steps back: BRIN is lossy, every row it yields is rechecked, and a range that
is not summarised yet is always read. ``autosummarize`` asks autovacuum to summarise each
range once it is full. SQLite keeps its B-tree (it has no BRIN) and is left untouched.

Recorded rows are only read (to build the index), never touched.
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0004_pg_recorded_at_brin"
down_revision: str | None = "0003_sqlite_position_rowid"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_INDEX = "ix_events_recorded_at"


def upgrade() -> None:
    """Replaces the B-tree on events.recorded_at with a BRIN index (PostgreSQL only)."""
    if op.get_context().dialect.name != "postgresql":
        return
    op.drop_index(_INDEX, table_name="events")
    op.create_index(
        _INDEX,
        "events",
        ["recorded_at"],
        postgresql_using="brin",
        postgresql_with={"autosummarize": "on"},
    )


def downgrade() -> None:
    """Restores the B-tree on events.recorded_at that revision 0001 made (PostgreSQL only)."""
    if op.get_context().dialect.name != "postgresql":
        return
    op.drop_index(_INDEX, table_name="events")
    op.create_index(_INDEX, "events", ["recorded_at"])

"""Declares the store's tables (SQLAlchemy Core) with a naming convention for constraints.

The tables are created and evolved only by the Alembic revisions in ``migrations/``; this
metadata is what ``alembic check`` compares the database against.
"""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    CheckConstraint,
    Column,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    SmallInteger,
    String,
    Table,
    Text,
    UniqueConstraint,
)

__all__ = [
    "NAMING_CONVENTION",
    "SCHEMA_REVISION",
    "checkpoints",
    "events",
    "idempotency_keys",
    "ledger_head",
    "merkle_nodes",
    "metadata",
]

NAMING_CONVENTION = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

metadata = MetaData(naming_convention=NAMING_CONVENTION)

#: The Alembic revision these tables are (the shipped head, checked by the migration
#: tests): the store appends only to a ledger at this revision (``EventStore.append``).
SCHEMA_REVISION = "0004_pg_recorded_at_brin"

events = Table(
    "events",
    metadata,
    # INTEGER on SQLite makes position the table's rowid (revision 0003): one B-tree fewer.
    Column(
        "position",
        BigInteger().with_variant(Integer(), "sqlite"),
        primary_key=True,
        autoincrement=False,
    ),
    Column("stream", String(128), nullable=False),
    Column("version", Integer, nullable=False),
    Column("type", String(64), nullable=False),
    Column("schema_version", Integer, nullable=False),
    Column("payload", LargeBinary, nullable=False),
    Column("recorded_at", String(32), nullable=False),
    Column("actor", String(128), nullable=False),
    Column("entry_hash", String(64), nullable=False),
    UniqueConstraint("stream", "version"),
    CheckConstraint("position >= 1", name="position_positive"),
    CheckConstraint("version >= 1", name="version_positive"),
)
Index("ix_events_type_position", events.c.type, events.c.position)
# BRIN on PostgreSQL (revision 0004): recorded_at follows the append order, so min/max per
# block range answers a time filter, and an append adds no index tuple per event.
Index(
    "ix_events_recorded_at",
    events.c.recorded_at,
    postgresql_using="brin",
    postgresql_with={"autosummarize": "on"},
)

ledger_head = Table(
    "ledger_head",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=False),
    Column("position", BigInteger, nullable=False),
    Column("entry_hash", String(64), nullable=False),
    # The Merkle tree's right edge (largest subtree first), see ledger/stored_tree.py.
    Column("frontier", LargeBinary, nullable=False),
    CheckConstraint("id = 1", name="single_row"),
)

merkle_nodes = Table(
    "merkle_nodes",
    metadata,
    Column("level", SmallInteger, primary_key=True, autoincrement=False),
    Column("idx", BigInteger, primary_key=True, autoincrement=False),
    Column("hash", LargeBinary, nullable=False),
)

checkpoints = Table(
    "checkpoints",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("tree_size", BigInteger, nullable=False),
    Column("root_hash", String(64), nullable=False),
    Column("origin", String(256), nullable=False),
    Column("key_name", String(256), nullable=False),
    Column("note", Text, nullable=False),
    Column("created_at", String(32), nullable=False),
)
Index("ix_checkpoints_tree_size", checkpoints.c.tree_size)

idempotency_keys = Table(
    "idempotency_keys",
    metadata,
    Column("key", String(128), primary_key=True),
    Column("content_digest", String(64), nullable=False),
    Column("first_position", BigInteger, nullable=False),
    Column("last_position", BigInteger, nullable=False),
)

"""Adds the read models: SQL tables of current state, kept in the append transaction.

Revision ID: 0005_read_models
Revises: 0004_pg_recorded_at_brin
Create Date: 2026-12-07

Every query used to fold the whole ledger into memory first. These tables hold what the
fold derives (arenas and their controls, submissions, attempts, windows, payments, credits,
the counters `stats` reports, events per type, settlements), written by the machines' guard
in the same transaction as the events they come from, so a query reads only the rows it
needs. ``upgrade`` creates them and, when it is the head revision, backfills them from the
recorded events (one pass of the fold, with a progress callback when the caller gives one);
a later revision that is the head backfills them itself. ``downgrade`` drops them and
touches no record. docs/read-models.md documents each table.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import context, op

from services.projections import rebuild

revision: str = "0005_read_models"
down_revision: str | None = "0004_pg_recorded_at_brin"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_TABLES = (
    "rm_settlements", "rm_event_types", "rm_counters", "rm_owed", "rm_credits", "rm_payments",
    "rm_qualifications", "rm_windows", "rm_attempts", "rm_submissions", "rm_controls",
    "rm_arenas", "rm_state",
)


def upgrade() -> None:
    """Creates the read model tables, then fills them from the events."""
    op.create_table(
        "rm_state",
        sa.Column("id", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("position", sa.BigInteger(), nullable=False),
        sa.CheckConstraint("id = 1", name=op.f("ck_rm_state_single_row")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_rm_state")),
    )
    op.create_table(
        "rm_arenas",
        sa.Column("arena_id", sa.Text(), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("commission_digest", sa.String(64), nullable=False),
        sa.Column("fee_rao", sa.BigInteger(), nullable=False),
        sa.Column("incumbent_digest", sa.String(64), nullable=False),
        sa.Column("incumbent_block", sa.BigInteger(), nullable=False),
        sa.Column("retired_block", sa.BigInteger()),
        sa.Column("retired_reason", sa.Text()),
        sa.Column("first_position", sa.BigInteger(), nullable=False),
        sa.Column("last_position", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("arena_id", name=op.f("pk_rm_arenas")),
    )
    op.create_table(
        "rm_controls",
        sa.Column("arena_id", sa.Text(), nullable=False),
        sa.Column("control_id", sa.Text(), nullable=False),
        sa.Column("seq", sa.Integer(), nullable=False),
        sa.Column("kind", sa.Text(), nullable=False),
        sa.Column("delta_digest", sa.String(64), nullable=False),
        sa.Column("expected_verdict", sa.String(16), nullable=False),
        sa.Column("expected_reason", sa.Text()),
        sa.PrimaryKeyConstraint("arena_id", "control_id", name=op.f("pk_rm_controls")),
    )
    op.create_table(
        "rm_submissions",
        sa.Column("submission_id", sa.String(64), nullable=False),
        sa.Column("arena_id", sa.Text(), nullable=False),
        sa.Column("hotkey", sa.Text(), nullable=False),
        sa.Column("content_hash", sa.String(64), nullable=False),
        sa.Column("delta_digest", sa.String(64), nullable=False),
        sa.Column("target", sa.Text(), nullable=False),
        sa.Column("arrival_block", sa.BigInteger(), nullable=False),
        sa.Column("arrival_event_index", sa.BigInteger(), nullable=False),
        sa.Column("arrival_event_subindex", sa.BigInteger(), nullable=False),
        sa.Column("payment_ref", sa.Text()),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("fee_kind", sa.String(16)),
        sa.Column("fee_ref", sa.Text()),
        sa.Column("fee_amount_rao", sa.BigInteger()),
        sa.Column("rejection", sa.Text()),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("attempt_id", sa.Text()),
        sa.Column("requeues", sa.Integer(), nullable=False),
        sa.Column("verdict", sa.String(16)),
        sa.Column("reason", sa.Text()),
        sa.Column("disposition", sa.String(16)),
        sa.Column("hold_reason", sa.Text()),
        sa.Column("expired_block", sa.BigInteger()),
        sa.Column("stated_reason", sa.Text(), nullable=False),
        sa.Column("reward_group", sa.String(64)),
        sa.Column("first_position", sa.BigInteger(), nullable=False),
        sa.Column("last_position", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("submission_id", name=op.f("pk_rm_submissions")),
    )
    op.create_index(
        op.f("ix_rm_submissions_arena_arrival"),
        "rm_submissions",
        ["arena_id", "arrival_block", "arrival_event_index", "arrival_event_subindex"],
    )
    op.create_index(op.f("ix_rm_submissions_delta"), "rm_submissions", ["arena_id", "delta_digest"])
    op.create_index(
        op.f("ix_rm_submissions_content"), "rm_submissions", ["content_hash", "status"]
    )
    op.create_index(op.f("ix_rm_submissions_hotkey"), "rm_submissions", ["hotkey"])
    op.create_index(op.f("ix_rm_submissions_status"), "rm_submissions", ["status", "arena_id"])
    op.create_table(
        "rm_attempts",
        sa.Column("attempt_id", sa.Text(), nullable=False),
        sa.Column("submission_id", sa.String(64), nullable=False),
        sa.Column("arena_id", sa.Text(), nullable=False),
        sa.Column("commission_digest", sa.String(64), nullable=False),
        sa.Column("plan", sa.Text(), nullable=False),
        sa.Column("claimed_block", sa.BigInteger(), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("verdict", sa.String(16)),
        sa.Column("reason", sa.Text()),
        sa.Column("disposition", sa.String(16)),
        sa.Column("speedup", sa.Text()),
        sa.Column("pass_line", sa.Text()),
        sa.Column("look_window", sa.Integer()),
        sa.Column("decided_block", sa.BigInteger()),
        sa.Column("first_position", sa.BigInteger(), nullable=False),
        sa.Column("last_position", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("attempt_id", name=op.f("pk_rm_attempts")),
    )
    op.create_index(op.f("ix_rm_attempts_arena_verdict"), "rm_attempts", ["arena_id", "verdict"])
    op.create_index(op.f("ix_rm_attempts_submission"), "rm_attempts", ["submission_id"])
    op.create_table(
        "rm_windows",
        sa.Column("attempt_id", sa.Text(), nullable=False),
        sa.Column("position", sa.BigInteger(), autoincrement=False, nullable=False),
        sa.Column("window", sa.Integer(), nullable=False),
        sa.Column("orientation", sa.Integer(), nullable=False),
        sa.Column("stock_cost_ns", sa.BigInteger(), nullable=False),
        sa.Column("candidate_cost_ns", sa.BigInteger(), nullable=False),
        sa.Column("ratio", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("attempt_id", "position", name=op.f("pk_rm_windows")),
    )
    op.create_table(
        "rm_qualifications",
        sa.Column("submission_id", sa.String(64), nullable=False),
        sa.Column("position", sa.BigInteger(), autoincrement=False, nullable=False),
        sa.Column("attempt_id", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("submission_id", "position", name=op.f("pk_rm_qualifications")),
    )
    op.create_table(
        "rm_payments",
        sa.Column("payment_ref", sa.Text(), nullable=False),
        sa.Column("submission_id", sa.String(64), nullable=False),
        sa.Column("arena_id", sa.Text(), nullable=False),
        sa.Column("amount_rao", sa.BigInteger(), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("release_reason", sa.Text()),
        sa.Column("first_position", sa.BigInteger(), nullable=False),
        sa.Column("last_position", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("payment_ref", name=op.f("pk_rm_payments")),
    )
    op.create_index(
        op.f("ix_rm_payments_arena"), "rm_payments", ["arena_id", "status", "amount_rao"]
    )
    op.create_index(op.f("ix_rm_payments_submission"), "rm_payments", ["submission_id"])
    op.create_table(
        "rm_credits",
        sa.Column("credit_id", sa.Text(), nullable=False),
        sa.Column("hotkey", sa.Text(), nullable=False),
        sa.Column("amount_rao", sa.BigInteger(), nullable=False),
        sa.Column("note", sa.Text(), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("submission_id", sa.String(64)),
        sa.Column("first_position", sa.BigInteger(), nullable=False),
        sa.Column("last_position", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("credit_id", name=op.f("pk_rm_credits")),
    )
    op.create_index(op.f("ix_rm_credits_hotkey"), "rm_credits", ["hotkey"])
    op.create_index(op.f("ix_rm_credits_submission"), "rm_credits", ["submission_id"])
    op.create_table(
        "rm_owed",
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("ref", sa.Text(), nullable=False),
        sa.Column("submission_id", sa.String(64), nullable=False),
        sa.PrimaryKeyConstraint("kind", "ref", name=op.f("pk_rm_owed")),
    )
    op.create_table(
        "rm_counters",
        sa.Column("counter", sa.String(16), nullable=False),
        sa.Column("key", sa.Text(), nullable=False),
        sa.Column("value", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("counter", "key", name=op.f("pk_rm_counters")),
    )
    op.create_table(
        "rm_event_types",
        sa.Column("type", sa.String(64), nullable=False),
        sa.Column("events", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("type", name=op.f("pk_rm_event_types")),
    )
    op.create_table(
        "rm_settlements",
        sa.Column("position", sa.BigInteger(), autoincrement=False, nullable=False),
        sa.Column("block", sa.BigInteger(), nullable=False),
        sa.Column("as_of_position", sa.BigInteger(), nullable=False),
        sa.Column("settlement_digest", sa.String(64), nullable=False),
        sa.Column("weights_ppm", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("position", name=op.f("pk_rm_settlements")),
    )
    op.create_index(op.f("ix_rm_settlements_block"), "rm_settlements", ["block"])
    if context.is_offline_mode():
        return  # SQL only: the backfill folds the events, which needs the database
    # The backfill writes the rows this release's code writes. When a later revision is the
    # head, the tables may still change on the way there: that revision fills them instead.
    if context.script.get_current_head() != revision:
        return
    rebuild(op.get_bind(), progress=context.config.attributes.get("progress"))


def downgrade() -> None:
    """Drops the read model tables (derived data: no record is lost)."""
    for table in _TABLES:
        op.drop_table(table)

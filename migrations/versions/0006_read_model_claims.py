"""Adds the read models of what settlements paid (claims, weights) and a per-hotkey view.

Revision ID: 0006_read_model_claims
Revises: 0005_read_models
Create Date: 2026-12-07

An auditor asks what a hotkey earned: ``rm_claims`` holds every claim each recorded
SettlementComputed paid (the rewarded PASS, its speedup and credit) and ``rm_weights`` each
hotkey's weight in it, both written by the guard with the settlement. ``rm_hotkeys`` is a
view over ``rm_submissions``: per hotkey, its submissions by outcome and the fees its
admissions took. ``upgrade`` creates them and, when it is the head revision, fills every
read model from the recorded events again (one pass of the fold); ``downgrade`` drops them
and touches no record.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import context, op

from services.projections import rebuild

revision: str = "0006_read_model_claims"
down_revision: str | None = "0005_read_models"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_HOTKEYS = """
CREATE VIEW rm_hotkeys AS
SELECT hotkey,
       COUNT(*) AS submissions,
       SUM(CASE WHEN status = 'QUALIFIED' THEN 1 ELSE 0 END) AS qualified,
       SUM(CASE WHEN status = 'FAILED' THEN 1 ELSE 0 END) AS failed,
       SUM(CASE WHEN status = 'REJECTED' THEN 1 ELSE 0 END) AS rejected,
       SUM(CASE WHEN status = 'EXPIRED' THEN 1 ELSE 0 END) AS expired,
       SUM(CASE WHEN status IN ('ARRIVED', 'QUEUED', 'QUALIFYING', 'NO_DECISION', 'HELD')
                THEN 1 ELSE 0 END) AS live,
       SUM(CASE WHEN fee_kind = 'payment' THEN fee_amount_rao ELSE 0 END) AS paid_rao,
       SUM(CASE WHEN fee_kind = 'credit' THEN fee_amount_rao ELSE 0 END) AS credits_rao
  FROM rm_submissions
 GROUP BY hotkey
"""


def upgrade() -> None:
    """Creates rm_claims, rm_weights and the rm_hotkeys view, then fills the read models."""
    op.create_table(
        "rm_claims",
        sa.Column("position", sa.BigInteger(), autoincrement=False, nullable=False),
        sa.Column("submission_id", sa.String(64), nullable=False),
        sa.Column("block", sa.BigInteger(), nullable=False),
        sa.Column("arena_id", sa.Text(), nullable=False),
        sa.Column("hotkey", sa.Text(), nullable=False),
        sa.Column("incumbent_digest", sa.String(64), nullable=False),
        sa.Column("speedup_ppm", sa.BigInteger(), nullable=False),
        sa.Column("arrival_block", sa.BigInteger(), nullable=False),
        sa.Column("credit", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("position", "submission_id", name=op.f("pk_rm_claims")),
    )
    op.create_index(op.f("ix_rm_claims_hotkey"), "rm_claims", ["hotkey"])
    op.create_table(
        "rm_weights",
        sa.Column("position", sa.BigInteger(), autoincrement=False, nullable=False),
        sa.Column("hotkey", sa.Text(), nullable=False),
        sa.Column("block", sa.BigInteger(), nullable=False),
        sa.Column("weight_ppm", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("position", "hotkey", name=op.f("pk_rm_weights")),
    )
    op.create_index(op.f("ix_rm_weights_hotkey"), "rm_weights", ["hotkey"])
    op.execute(_HOTKEYS)
    if context.is_offline_mode():
        return  # SQL only: the backfill folds the events, which needs the database
    # As in 0005: the head revision fills the read models with the rows this release writes.
    if context.script.get_current_head() != revision:
        return
    rebuild(op.get_bind(), progress=context.config.attributes.get("progress"))


def downgrade() -> None:
    """Drops the view and the two tables (derived data: no record is lost)."""
    op.execute("DROP VIEW rm_hotkeys")
    op.drop_table("rm_weights")
    op.drop_table("rm_claims")

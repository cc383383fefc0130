"""Keeps each PASS's reward status and each arena's reward frontier in the read models.

Revision ID: 0007_reward_status
Revises: 0006_read_model_claims
Create Date: 2026-12-07

A settlement pays the rewarded PASSes only, but finding them meant reading every PASS of
every arena and judging it (tens of thousands of rows on a long ledger). The guard now
keeps ``rm_submissions.reward_status`` (rewarded, lost_potential or pending, as the
settlement rules judge the ledger as it stands) and ``rm_reward_frontiers`` (per arena, the
first submission that keeps the later PASSes pending), so a settlement reads the rewarded
rows by an index. The hotkey index becomes (hotkey, arrival key): a hotkey's history is
read in that order; and a submission's fee is read by its id from an index alone (the
credits' fee sum a settlement adds seeks one per credit spent). ``upgrade`` adds them and,
when it is the head revision, fills every read model from the recorded events again (one
pass of the fold); ``downgrade`` drops them and touches no record.
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import context, op

from services.projections import rebuild

revision: str = "0007_reward_status"
down_revision: str | None = "0006_read_model_claims"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    """Adds the reward status, the frontiers and the indexes, then fills the read models."""
    op.add_column("rm_submissions", sa.Column("reward_status", sa.String(16)))
    op.create_index(
        op.f("ix_rm_submissions_reward"),
        "rm_submissions",
        ["reward_status", "arena_id", "arrival_block"],
    )
    op.create_index(
        op.f("ix_rm_submissions_fee"),
        "rm_submissions",
        ["submission_id", "fee_kind", "arena_id", "fee_amount_rao"],
    )
    op.drop_index(op.f("ix_rm_submissions_hotkey"), table_name="rm_submissions")
    op.create_index(
        op.f("ix_rm_submissions_hotkey_arrival"),
        "rm_submissions",
        ["hotkey", "arrival_block", "arrival_event_index", "arrival_event_subindex"],
    )
    op.create_table(
        "rm_reward_frontiers",
        sa.Column("arena_id", sa.Text(), nullable=False),
        sa.Column("submission_id", sa.String(64)),
        sa.Column("reward_margin", sa.Text(), nullable=False),
        sa.Column("incumbent_digest", sa.String(64), nullable=False),
        sa.PrimaryKeyConstraint("arena_id", name=op.f("pk_rm_reward_frontiers")),
    )
    if context.is_offline_mode():
        return  # SQL only: the backfill folds the events, which needs the database
    # As in 0005: the head revision fills the read models with the rows this release writes.
    if context.script.get_current_head() != revision:
        return
    rebuild(op.get_bind(), progress=context.config.attributes.get("progress"))


def downgrade() -> None:
    """Drops the frontiers, the reward status and the new indexes (derived data: no record
    is lost); the hotkey index is the hotkey alone again."""
    op.drop_table("rm_reward_frontiers")
    op.drop_index(op.f("ix_rm_submissions_hotkey_arrival"), table_name="rm_submissions")
    op.create_index(op.f("ix_rm_submissions_hotkey"), "rm_submissions", ["hotkey"])
    op.drop_index(op.f("ix_rm_submissions_reward"), table_name="rm_submissions")
    op.drop_index(op.f("ix_rm_submissions_fee"), table_name="rm_submissions")
    op.drop_column("rm_submissions", "reward_status")

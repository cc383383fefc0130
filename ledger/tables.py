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
    "read_model_tables",
    "rm_arenas",
    "rm_attempts",
    "rm_claims",
    "rm_controls",
    "rm_counters",
    "rm_credits",
    "rm_event_types",
    "rm_owed",
    "rm_payments",
    "rm_qualifications",
    "rm_reward_frontiers",
    "rm_settlements",
    "rm_state",
    "rm_submissions",
    "rm_weights",
    "rm_windows",
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
SCHEMA_REVISION = "0007_reward_status"

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


# --- read models (revision 0005) ---------------------------------------------------------------
# Tables derived from the events, written in the append transaction that records them
# (services.projections): current state for the queries, shaped for a person with psql or
# sqlite3. A cache of the events: `arena-ledger projections check` compares them with a
# rebuild, and the events win. docs/read-models.md documents every column.

_Position = BigInteger
_Name = Text()
_Id = String(64)

rm_state = Table(
    "rm_state",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=False),
    #: The position the read models reflect: the head, unless events were appended without
    #: the machines' guard (then the queries fold the ledger instead, until a rebuild).
    Column("position", _Position, nullable=False),
    CheckConstraint("id = 1", name="single_row"),
)

rm_arenas = Table(
    "rm_arenas",
    metadata,
    Column("arena_id", _Name, primary_key=True),
    Column("status", String(16), nullable=False),
    Column("commission_digest", _Id, nullable=False),
    Column("fee_rao", BigInteger, nullable=False),
    Column("incumbent_digest", _Id, nullable=False),
    Column("incumbent_block", BigInteger, nullable=False),
    Column("retired_block", BigInteger),
    Column("retired_reason", Text),
    Column("first_position", _Position, nullable=False),
    Column("last_position", _Position, nullable=False),
)

rm_controls = Table(
    "rm_controls",
    metadata,
    Column("arena_id", _Name, primary_key=True),
    Column("control_id", _Name, primary_key=True),
    Column("seq", Integer, nullable=False),
    Column("kind", Text, nullable=False),
    Column("delta_digest", _Id, nullable=False),
    Column("expected_verdict", String(16), nullable=False),
    Column("expected_reason", Text),
)

rm_submissions = Table(
    "rm_submissions",
    metadata,
    Column("submission_id", _Id, primary_key=True),
    Column("arena_id", _Name, nullable=False),
    Column("hotkey", _Name, nullable=False),
    Column("content_hash", _Id, nullable=False),
    Column("delta_digest", _Id, nullable=False),
    Column("target", Text, nullable=False),
    Column("arrival_block", BigInteger, nullable=False),
    Column("arrival_event_index", BigInteger, nullable=False),
    Column("arrival_event_subindex", BigInteger, nullable=False),
    Column("payment_ref", _Name),
    Column("status", String(16), nullable=False),
    Column("fee_kind", String(16)),
    Column("fee_ref", _Name),
    Column("fee_amount_rao", BigInteger),
    Column("rejection", Text),
    Column("attempts", Integer, nullable=False),
    Column("attempt_id", _Name),
    Column("requeues", Integer, nullable=False),
    Column("verdict", String(16)),
    Column("reason", Text),
    Column("disposition", String(16)),
    Column("hold_reason", Text),
    Column("expired_block", BigInteger),
    #: The reason code that says why the submission is where it is ('' while it waits):
    #: `submissions` prints it with its cause and next step (docs/domain.md lists them).
    Column("stated_reason", Text, nullable=False),
    #: The incumbent digest when the arrival was recorded: the reward group settlement
    #: ranks the submission in.
    Column("reward_group", _Id),
    Column("first_position", _Position, nullable=False),
    Column("last_position", _Position, nullable=False),
    #: A PASS's reward status under the settlement rules as the ledger stands (revision
    #: 0007): rewarded, lost_potential or pending; none for any other submission and for
    #: a control run. Kept by ``services.projections`` as ``rm_reward_frontiers`` moves.
    Column("reward_status", String(16)),
)
Index(
    "ix_rm_submissions_arena_arrival",
    rm_submissions.c.arena_id,
    rm_submissions.c.arrival_block,
    rm_submissions.c.arrival_event_index,
    rm_submissions.c.arrival_event_subindex,
)
#: A hotkey's submissions in history order (revision 0007; was the hotkey alone).
Index(
    "ix_rm_submissions_hotkey_arrival",
    rm_submissions.c.hotkey,
    rm_submissions.c.arrival_block,
    rm_submissions.c.arrival_event_index,
    rm_submissions.c.arrival_event_subindex,
)
Index("ix_rm_submissions_status", rm_submissions.c.status, rm_submissions.c.arena_id)
Index("ix_rm_submissions_delta", rm_submissions.c.arena_id, rm_submissions.c.delta_digest)
Index("ix_rm_submissions_content", rm_submissions.c.content_hash, rm_submissions.c.status)
#: A submission's fee by its id, index-only (revision 0007): the credits' fee sum seeks it
#: for every credit spent (rm_submissions' rows are wide; 21 → 5 ms at 1M).
Index(
    "ix_rm_submissions_fee",
    rm_submissions.c.submission_id,
    rm_submissions.c.fee_kind,
    rm_submissions.c.arena_id,
    rm_submissions.c.fee_amount_rao,
)
#: An arena's PASSes by reward status and arrival (revision 0007): the rewarded ones a
#: settlement pays, the range a change of the reward frontier judges again.
Index(
    "ix_rm_submissions_reward",
    rm_submissions.c.reward_status,
    rm_submissions.c.arena_id,
    rm_submissions.c.arrival_block,
)

rm_attempts = Table(
    "rm_attempts",
    metadata,
    Column("attempt_id", _Name, primary_key=True),
    Column("submission_id", _Id, nullable=False),
    Column("arena_id", _Name, nullable=False),
    Column("commission_digest", _Id, nullable=False),
    Column("plan", Text, nullable=False),
    Column("claimed_block", BigInteger, nullable=False),
    Column("status", String(16), nullable=False),
    Column("verdict", String(16)),
    Column("reason", Text),
    Column("disposition", String(16)),
    Column("speedup", Text),
    Column("pass_line", Text),
    Column("look_window", Integer),
    Column("decided_block", BigInteger),
    Column("first_position", _Position, nullable=False),
    Column("last_position", _Position, nullable=False),
)
Index("ix_rm_attempts_submission", rm_attempts.c.submission_id)
Index("ix_rm_attempts_arena_verdict", rm_attempts.c.arena_id, rm_attempts.c.verdict)

rm_windows = Table(
    "rm_windows",
    metadata,
    Column("attempt_id", _Name, primary_key=True),
    Column("position", _Position, primary_key=True),
    Column("window", Integer, nullable=False),
    Column("orientation", Integer, nullable=False),
    Column("stock_cost_ns", BigInteger, nullable=False),
    Column("candidate_cost_ns", BigInteger, nullable=False),
    #: candidate_cost_ns / stock_cost_ns to six places: above 1, the candidate was slower.
    Column("ratio", Text, nullable=False),
)

rm_qualifications = Table(
    "rm_qualifications",
    metadata,
    #: Each QualificationStarted: the attempts a submission was evaluated in, in order.
    Column("submission_id", _Id, primary_key=True),
    Column("position", _Position, primary_key=True),
    Column("attempt_id", _Name, nullable=False),
)

rm_payments = Table(
    "rm_payments",
    metadata,
    Column("payment_ref", _Name, primary_key=True),
    Column("submission_id", _Id, nullable=False),
    Column("arena_id", _Name, nullable=False),
    Column("amount_rao", BigInteger, nullable=False),
    Column("status", String(16), nullable=False),
    Column("release_reason", Text),
    Column("first_position", _Position, nullable=False),
    Column("last_position", _Position, nullable=False),
)
# Covering: fees per arena sum from the index alone.
Index("ix_rm_payments_arena", rm_payments.c.arena_id, rm_payments.c.status,
      rm_payments.c.amount_rao)
Index("ix_rm_payments_submission", rm_payments.c.submission_id)

rm_credits = Table(
    "rm_credits",
    metadata,
    Column("credit_id", _Name, primary_key=True),
    Column("hotkey", _Name, nullable=False),
    Column("amount_rao", BigInteger, nullable=False),
    Column("note", Text, nullable=False),
    Column("status", String(16), nullable=False),
    Column("submission_id", _Id),
    Column("first_position", _Position, nullable=False),
    Column("last_position", _Position, nullable=False),
)
Index("ix_rm_credits_hotkey", rm_credits.c.hotkey)
Index("ix_rm_credits_submission", rm_credits.c.submission_id)

rm_owed = Table(
    "rm_owed",
    metadata,
    #: An admission recorded with a payment (kind "payment") or credit ("credit") whose
    #: PaymentConsumed or CreditSpent has not come yet: that fee is taken, for this
    #: submission. Empty between well-formed appends (intake appends both together).
    Column("kind", String(16), primary_key=True),
    Column("ref", _Name, primary_key=True),
    Column("submission_id", _Id, nullable=False),
)

rm_counters = Table(
    "rm_counters",
    metadata,
    #: decided (attempts per arena), no_decision (NO_DECISION verdicts per arena),
    #: holds_placed (holds ever placed, per reason): what `stats` reports.
    Column("counter", String(16), primary_key=True),
    Column("key", Text, primary_key=True),
    Column("value", BigInteger, nullable=False),
)

rm_event_types = Table(
    "rm_event_types",
    metadata,
    Column("type", String(64), primary_key=True),
    Column("events", BigInteger, nullable=False),
)

rm_settlements = Table(
    "rm_settlements",
    metadata,
    Column("position", _Position, primary_key=True),
    Column("block", BigInteger, nullable=False),
    Column("as_of_position", _Position, nullable=False),
    Column("settlement_digest", _Id, nullable=False),
    Column("weights_ppm", Text, nullable=False),
)
Index("ix_rm_settlements_block", rm_settlements.c.block)

rm_claims = Table(
    "rm_claims",
    metadata,
    #: Each claim a recorded settlement paid (revision 0006): a rewarded PASS and its credit.
    Column("position", _Position, primary_key=True),
    Column("submission_id", _Id, primary_key=True),
    Column("block", BigInteger, nullable=False),
    Column("arena_id", _Name, nullable=False),
    Column("hotkey", _Name, nullable=False),
    Column("incumbent_digest", _Id, nullable=False),
    Column("speedup_ppm", BigInteger, nullable=False),
    Column("arrival_block", BigInteger, nullable=False),
    Column("credit", BigInteger, nullable=False),
)
Index("ix_rm_claims_hotkey", rm_claims.c.hotkey)

rm_weights = Table(
    "rm_weights",
    metadata,
    #: Each hotkey's weight in each recorded settlement (revision 0006).
    Column("position", _Position, primary_key=True),
    Column("hotkey", _Name, primary_key=True),
    Column("block", BigInteger, nullable=False),
    Column("weight_ppm", BigInteger, nullable=False),
)
Index("ix_rm_weights_hotkey", rm_weights.c.hotkey)

rm_reward_frontiers = Table(
    "rm_reward_frontiers",
    metadata,
    #: Per arena, where its reward assessment stops (revision 0007): the first submission
    #: in arrival order that keeps every later PASS pending (none: every PASS is assessed),
    #: and the reward margin and incumbent the statuses were judged with.
    Column("arena_id", _Name, primary_key=True),
    Column("submission_id", _Id),
    Column("reward_margin", Text, nullable=False),
    Column("incumbent_digest", _Id, nullable=False),
)

#: Every read model table, in the order a rebuild empties and fills them.
read_model_tables = (
    rm_state, rm_arenas, rm_controls, rm_submissions, rm_attempts, rm_windows,
    rm_qualifications, rm_payments, rm_credits, rm_owed, rm_counters, rm_event_types,
    rm_settlements, rm_claims, rm_weights, rm_reward_frontiers,
)

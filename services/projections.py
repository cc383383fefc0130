"""Keeps the read models: SQL tables of current state, derived from the machines' fold.

Each accepted event changes some of the fold's projections (``machines.projection.Touched``
names which); ``ReadModelRows.observe`` turns the changed entities into rows, and ``write``
stores them. The guard (``services.arena_ledger.DomainGuard``) does it inside the append
transaction, for the batch it has just decided, so the read models are never behind or
ahead of the head; ``rebuild`` folds the whole ledger the same way (``apply_tracked`` takes
the path the guard's decision takes) into the ledger's own tables or a scratch copy, and
``check`` compares the two row by row. A read model is a cache of the events: when they
disagree, the events win, and ``rebuild`` makes the tables agree again.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ledger import read_models
from ledger.progress import Progress, ticker
from ledger.read_models import ArrivalOrder
from ledger.store import EventStore, safe_url
from ledger.tables import SCHEMA_REVISION
from machines.arena import ArenaState
from machines.arithmetic import ratio
from machines.attempt import AttemptState, AttemptSummary
from machines.control import CONTROL_HOTKEY
from machines.payment import CreditState, PaymentState
from machines.projection import LedgerFold, Touched
from machines.reasons import ReasonCode, describe
from machines.settlement_rules import BLOCKING_STATUSES, judge_passes
from machines.submission import Fee, SubmissionState
from vocabulary.catalogue import CATALOGUE
from vocabulary.codec import canonical_bytes, canonical_decimal, loads
from vocabulary.errors import IntegrityError, SchemaNotInitialised
from vocabulary.events import Event, QualificationStarted, SettlementComputed, WindowMeasured

if TYPE_CHECKING:
    from sqlalchemy import Connection

__all__ = [
    "Difference",
    "ReadModelRows",
    "check",
    "check_ledger",
    "rebuild",
    "rebuild_ledger",
    "state_of",
    "stated_reason",
    "submission_row",
    "walk_rewards",
]

Row = dict[str, Any]

#: Events folded between two writes of a rebuild's rows (bounds its memory).
rebuild_flush_events = 20_000


@dataclass
class ReadModelRows:
    """Collects the rows that events change, keyed by table and primary key (the last
    change of a row wins; its ``first_position`` is the first change's)."""

    rows: dict[str, dict[tuple[Any, ...], Row]] = field(default_factory=dict)
    controls: dict[str, list[Row]] = field(default_factory=dict)
    event_types: Counter[str] = field(default_factory=Counter)
    #: ``rm_owed`` keys whose fee event came: their rows go.
    gone: set[tuple[str, str]] = field(default_factory=set)
    #: Per arena whose rewards may have changed: its reward margin and incumbent now, and
    #: the earliest arrival among its changed PASSes and blocking submissions (None: none).
    rewards: dict[str, tuple[str, str, ArrivalOrder | None]] = field(default_factory=dict)
    events: int = 0

    def observe(
        self, fold: LedgerFold, position: int, stream: str, event: Event, touched: Touched
    ) -> None:
        """Takes the rows ``event`` (at ``position``) changed, from ``fold`` as it stands
        right after the event."""
        self.events += 1
        self.event_types[event.event_type] += 1
        for sid in touched.submissions:
            sub = fold.submission(sid)
            if sub is not None:
                row = _submission(sub, position)
                row["reward_group"] = fold.reward_group(sid)
                self._put("rm_submissions", (sid,), row)
                self._note_reward(fold, sub)
        for aid in touched.attempts:
            attempt = fold.attempt(aid)
            if attempt is not None:
                self._put("rm_attempts", (aid,), _attempt(attempt, position))
        for ref in touched.payments:
            payment = fold.payment(ref)
            if payment is not None:
                self._put("rm_payments", (ref,), _payment(payment, position))
        for credit_id in touched.credits:
            credit = fold.credit(credit_id)
            if credit is not None:
                self._put("rm_credits", (credit_id,), _credit(credit, position))
        for arena_id in touched.arenas:
            arena = fold.arena(arena_id)
            if arena is not None:
                self._put("rm_arenas", (arena_id,), _arena(arena, position))
                self.controls[arena_id] = _controls(arena)
                noted = self.rewards.get(arena_id)
                margin, incumbent = _reward_header(arena)
                self.rewards[arena_id] = (margin, incumbent, None if noted is None else noted[2])
        if touched.decided or touched.no_decision or touched.holds_placed:
            counts = fold.counts()
            for name, keys, table in (
                ("decided", touched.decided, counts.decided),
                ("no_decision", touched.no_decision, counts.no_decision),
                ("holds_placed", touched.holds_placed, counts.holds_placed),
            ):
                for key in keys:
                    row = {"counter": name, "key": key, "value": table.get(key, 0)}
                    self._put("rm_counters", (name, key), row)
        for kind, keys, owner in (
            ("payment", touched.owed_payments, fold.owed_payment),
            ("credit", touched.owed_credits, fold.owed_credit),
        ):
            for ref in keys:
                owner_id = owner(ref)
                if owner_id is None:
                    self.rows.get("rm_owed", {}).pop((kind, ref), None)
                    self.gone.add((kind, ref))
                else:
                    self.gone.discard((kind, ref))
                    self._put("rm_owed", (kind, ref),
                              {"kind": kind, "ref": ref, "submission_id": owner_id})
        if type(event) is WindowMeasured:
            aid = stream.partition("-")[2]
            self._put("rm_windows", (aid, position), _window(aid, position, event))
        elif type(event) is QualificationStarted:
            sid = stream.partition("-")[2]
            self._put("rm_qualifications", (sid, position), {
                "submission_id": sid, "position": position, "attempt_id": event.attempt_id,
            })
        elif type(event) is SettlementComputed:
            self._put("rm_settlements", (position,), _settlement(position, event))
            for claim in event.claims:
                sid = claim["submission_id"]
                self._put("rm_claims", (position, sid), {
                    "position": position, "submission_id": sid, "block": event.block,
                    "arena_id": claim["arena_id"], "hotkey": claim["hotkey"],
                    "incumbent_digest": claim["incumbent_digest"],
                    "speedup_ppm": claim["speedup_ppm"], "arrival_block": claim["block"],
                    "credit": claim["credit"],
                })
            for hotkey, weight in event.weights_ppm.items():
                self._put("rm_weights", (position, hotkey), {
                    "position": position, "hotkey": hotkey, "block": event.block,
                    "weight_ppm": weight,
                })

    def _note_reward(self, fold: LedgerFold, sub: SubmissionState) -> None:
        """Notes the submission's arena for the reward walk, from the submission on when it
        is a PASS or blocks one (any other change leaves every reward status as it was)."""
        arena_id = sub.arena_id
        noted = self.rewards.get(arena_id)
        if noted is None:
            arena = fold.arena(arena_id)
            if arena is None:
                return
            noted = (*_reward_header(arena), None)
        if sub.hotkey != CONTROL_HOTKEY and (
            sub.status == "QUALIFIED" or sub.status in BLOCKING_STATUSES
        ):
            key = (*sub.arrival_key, sub.submission_id)
            if noted[2] is None or key < noted[2]:
                noted = (noted[0], noted[1], key)
        self.rewards[arena_id] = noted

    def _put(self, table: str, key: tuple[Any, ...], row: Row) -> None:
        rows = self.rows.get(table)
        if rows is None:
            rows = self.rows[table] = {}
        found = rows.get(key)
        if found is not None and "first_position" in row:
            row["first_position"] = found["first_position"]
        rows[key] = row

    def write(self, conn: Connection) -> None:
        """Stores the collected rows through ``conn`` and forgets them."""
        read_models.delete_owed(conn, sorted(self.gone))
        for table, rows in self.rows.items():
            read_models.upsert(conn, table, list(rows.values()))
        for arena_id, controls in self.controls.items():
            read_models.replace_controls(conn, arena_id, controls)
        read_models.add_event_types(conn, self.event_types)
        if self.rewards:
            keeper = read_models.RewardRows(conn, CONTROL_HOTKEY)
            for arena_id, (margin, incumbent, changed) in sorted(self.rewards.items()):
                walk_rewards(keeper, arena_id, margin, incumbent, changed)
        self.rows.clear()
        self.controls.clear()
        self.event_types.clear()
        self.gone.clear()
        self.rewards.clear()


# --- reward statuses ----------------------------------------------------------------------------


def _reward_header(arena: ArenaState) -> tuple[str, str]:
    """Returns the reward margin of the arena's commission in force and its incumbent."""
    commission = arena.commissions[arena.commission_digest].event
    return str(commission.policy.reward_margin), arena.incumbent_digest


def walk_rewards(
    keeper: read_models.RewardRows,
    arena_id: str,
    margin: str,
    incumbent: str,
    changed: read_models.ArrivalOrder | None,
) -> None:
    """Brings the arena's reward statuses and frontier up to the rows just written.

    settlement-rules.v1 judges a PASS once every earlier arrival of its arena is terminal
    or a completed NO_DECISION: the PASSes before the arena's first blocking submission
    (the frontier) are rewarded or lost_potential, every later one pending. The statuses
    before both the old frontier and ``changed`` (the earliest PASS or blocking submission
    the batch changed) are as they were, so the walk starts at the earlier of the two with
    each group's latest rewarded PASS before it as its best, judges up to the new frontier,
    and sets pending from there up to the old one. A new reward margin (or incumbent, when
    a PASS ranks under it for want of a recorded group) judges the arena from its start.
    """
    stored = keeper.frontier(arena_id)
    whole = stored is None or stored[1] != margin or (
        stored[2] != incumbent and keeper.has_ungrouped_pass(arena_id)
    )
    old = None
    if stored is not None and stored[0] is not None:
        old = keeper.order_of(stored[0])
    new = keeper.first_blocking(arena_id, BLOCKING_STATUSES)
    # Where the walk starts (None: the arena's start, when whole) and ends (None: the end).
    start: read_models.ArrivalOrder | None = None
    if not whole:
        candidates = [k for k in (changed, old) if k is not None]
        if not candidates:  # every PASS assessed and nothing that reaches one changed
            keeper.put_frontier(arena_id, None if new is None else new[5], margin, incumbent)
            if new is None:
                return
            candidates = [new]
        start = min(candidates)
        if new is not None and new < start:
            start = new
    end = None if whole or old is None or new is None else max(old, new)
    rows = keeper.passes(arena_id, None if start is None else start[0],
                         None if end is None else end[0])
    rows = [row for row in rows
            if (start is None or row[0] >= start) and (end is None or row[0] < end)]
    best: dict[str, str] = {}
    if start is not None:
        for order, group, speedup in keeper.rewarded(arena_id):
            if order < start:
                best[group or incumbent] = speedup
    judged = [row for row in rows if new is None or row[0] < new]
    statuses: list[str] = list(judge_passes(
        margin, best, [(group or incumbent, speedup) for _, group, speedup, _ in judged]))
    frontier = new
    if len(statuses) < len(judged):  # a speedup the rules refuse: the walk stops there
        frontier = judged[len(statuses)][0]
    statuses += ["pending"] * (len(rows) - len(statuses))
    keeper.set_statuses([
        (row[0][5], status) for row, status in zip(rows, statuses, strict=True)
        if row[3] != status
    ])
    keeper.put_frontier(arena_id, None if frontier is None else frontier[5], margin, incumbent)


# --- rows ---------------------------------------------------------------------------------------


def _submission(sub: SubmissionState, position: int) -> Row:
    fee = sub.fee
    block, index, subindex = sub.arrival_key[:3]
    return {
        "submission_id": sub.submission_id,
        "arena_id": sub.arena_id,
        "hotkey": sub.hotkey,
        "content_hash": sub.content_hash,
        "delta_digest": sub.delta_digest,
        "target": sub.target,
        "arrival_block": block,
        "arrival_event_index": index,
        "arrival_event_subindex": subindex,
        "payment_ref": sub.payment_ref,
        "status": sub.status,
        "fee_kind": None if fee is None else fee.kind,
        "fee_ref": None if fee is None else fee.ref,
        "fee_amount_rao": None if fee is None else fee.amount_rao,
        "rejection": sub.rejection,
        "attempts": sub.attempts,
        "attempt_id": sub.attempt_id,
        "requeues": sub.requeues,
        "verdict": sub.verdict,
        "reason": sub.reason,
        "disposition": sub.disposition,
        "hold_reason": sub.hold_reason,
        "expired_block": sub.expired_block,
        "stated_reason": stated_reason(sub),
        "first_position": position,
        "last_position": position,
        # Judged by walk_rewards when the batch's rows are written; a PASS is pending until.
        "reward_status": (
            "pending" if sub.status == "QUALIFIED" and sub.hotkey != CONTROL_HOTKEY else None
        ),
    }


def state_of(row: Row) -> SubmissionState:
    """Returns the SubmissionState an ``rm_submissions`` row holds (every field is there)."""
    fee = None
    if row["fee_kind"] is not None:
        fee = Fee(row["fee_kind"], row["fee_ref"], row["fee_amount_rao"])
    return SubmissionState(
        submission_id=row["submission_id"],
        arena_id=row["arena_id"],
        hotkey=row["hotkey"],
        content_hash=row["content_hash"],
        delta_digest=row["delta_digest"],
        target=row["target"],
        arrival_key=(
            row["arrival_block"], row["arrival_event_index"], row["arrival_event_subindex"],
            row["hotkey"], row["content_hash"],
        ),
        payment_ref=row["payment_ref"],
        status=row["status"],
        fee=fee,
        rejection=row["rejection"],
        attempts=row["attempts"],
        attempt_id=row["attempt_id"],
        requeues=row["requeues"],
        verdict=row["verdict"],
        reason=row["reason"],
        disposition=row["disposition"],
        hold_reason=row["hold_reason"],
        expired_block=row["expired_block"],
    )


def _attempt(attempt: AttemptState | AttemptSummary, position: int) -> Row:
    decision = attempt.decision
    return {
        "attempt_id": attempt.attempt_id,
        "submission_id": attempt.submission_id,
        "arena_id": attempt.arena_id,
        "commission_digest": attempt.commission_digest,
        "plan": attempt.plan,
        "claimed_block": attempt.claimed_block,
        "status": attempt.status,
        "verdict": None if decision is None else decision.verdict,
        "reason": None if decision is None else decision.reason,
        "disposition": None if decision is None else decision.disposition,
        "speedup": None if decision is None else decision.speedup,
        "pass_line": None if decision is None else decision.pass_line,
        "look_window": None if decision is None else decision.look_window,
        "decided_block": attempt.decided_block,
        "first_position": position,
        "last_position": position,
    }


def _payment(payment: PaymentState, position: int) -> Row:
    return {**payment._asdict(), "first_position": position, "last_position": position}


def _credit(credit: CreditState, position: int) -> Row:
    return {**credit._asdict(), "first_position": position, "last_position": position}


def _arena(arena: ArenaState, position: int) -> Row:
    return {
        "arena_id": arena.arena_id,
        "status": arena.status,
        "commission_digest": arena.commission_digest,
        "fee_rao": arena.fee_rao,
        "incumbent_digest": arena.incumbent_digest,
        "incumbent_block": arena.incumbent_block,
        "retired_block": arena.retired_block,
        "retired_reason": arena.retired_reason,
        "first_position": position,
        "last_position": position,
    }


def _controls(arena: ArenaState) -> list[Row]:
    return [
        {
            "arena_id": arena.arena_id,
            "control_id": control_id,
            "seq": seq,
            "kind": control.kind,
            "delta_digest": control.delta_digest,
            "expected_verdict": control.expected_verdict,
            "expected_reason": control.expected_reason,
        }
        for seq, (control_id, control) in enumerate(arena.controls.items())
    ]


def _window(attempt_id: str, position: int, event: WindowMeasured) -> Row:
    fields = event.__dict__  # pydantic's __getattr__ makes attribute reads slow
    stock, candidate = fields["stock_cost_ns"], fields["candidate_cost_ns"]
    return {
        "attempt_id": attempt_id,
        "position": position,
        "window": fields["window"],
        "orientation": fields["orientation"],
        "stock_cost_ns": stock,
        "candidate_cost_ns": candidate,
        "ratio": canonical_decimal(ratio(candidate, stock)),
    }


def _settlement(position: int, event: SettlementComputed) -> Row:
    return {
        "position": position,
        "block": event.block,
        "as_of_position": event.as_of_position,
        "settlement_digest": event.settlement_digest,
        "weights_ppm": canonical_bytes(event.weights_ppm).decode(),
    }


# --- what a submission row says -----------------------------------------------------------------


def submission_row(
    sub: SubmissionState, describe: Callable[[str], ReasonCode | None] = describe
) -> dict[str, Any]:
    """Returns one submission as a JSON-ready row with its stated cause and next step."""
    return _row_with_words(sub, stated_reason(sub), describe)


def _row_with_words(
    sub: SubmissionState, reason: str, describe: Callable[[str], ReasonCode | None]
) -> dict[str, Any]:
    info = describe(reason) if reason else None
    return {
        "submission_id": sub.submission_id,
        "arena_id": sub.arena_id,
        "hotkey": sub.hotkey,
        "content_hash": sub.content_hash,
        "arrival": list(sub.arrival_key[:3]),
        "status": sub.status,
        "verdict": sub.verdict,
        "reason": reason,
        "cause": info.cause if info else _STATUS_TEXT.get(sub.status, ("", ""))[0],
        "next_step": info.next_step if info else _STATUS_TEXT.get(sub.status, ("", ""))[1],
        "attempts": sub.attempts,
    }


def stated_reason(sub: SubmissionState) -> str:
    """Returns the reason code that says why the submission is where it is ('' while it
    waits in ARRIVED, QUEUED or QUALIFYING)."""
    if sub.status in _WAITING:
        # Requeued (by the retry budget or an operator) and maybe claimed again: the last
        # attempt's reason no longer states why the submission is where it is.
        return ""
    if sub.status == "REJECTED":
        return str(sub.rejection or "")
    if sub.status == "HELD":
        return str(sub.hold_reason or "")
    if sub.status == "EXPIRED":
        return "sla_expired"
    return str(sub.reason or "")


#: Statuses a submission waits in; an earlier attempt's reason is not their cause.
_WAITING = frozenset(("ARRIVED", "QUEUED", "QUALIFYING"))

_STATUS_TEXT = {
    "ARRIVED": ("recorded, intake not yet decided", "wait for intake"),
    "QUEUED": ("admitted and waiting for a validator", "wait: the queue runs in arrival order"),
    "QUALIFYING": ("being evaluated", "wait for the verdict"),
    "QUALIFIED": ("passed", "nothing: rewards follow at settlement"),
    "HELD": ("held by an operator (see the reason)", "wait for an operator to release the hold"),
}


# --- rebuild and check --------------------------------------------------------------------------


def _recorded(conn: Connection, last: int) -> Iterator[tuple[int, str, Any, Event]]:
    """Yields (position, stream, payload, event) for positions 1 to ``last`` through
    ``conn`` (upcast to the current schema, as every fold reads them)."""
    decode = CATALOGUE.decode
    for position, stream, kind, version, data in read_models.recorded_rows(conn, last):
        payload = loads(data, where=f"position {position}")
        yield position, stream, payload, decode(kind, version, payload)


def rebuild(
    source: Connection, target: Connection | None = None, progress: Progress | None = None
) -> int:
    """Folds the ledger ``source`` holds into read model rows written through ``target``
    (``source`` itself when None: the ledger's own tables, emptied first). Returns the
    position the rows reflect (the head ``source`` sees)."""
    target = source if target is None else target
    last = read_models.head_position(source)
    read_models.clear(target)
    fold, rows = LedgerFold(), ReadModelRows()
    tick = ticker(progress, "building the read models", last)
    for position, stream, payload, event in _recorded(source, last):
        _, touched = fold.apply_tracked(position, stream, event, payload)
        rows.observe(fold, position, stream, event, touched)
        if rows.events >= rebuild_flush_events:
            rows.write(target)
            rows.events = 0
        if tick is not None:
            tick(position)
    rows.write(target)
    read_models.set_position(target, last)
    return last


@dataclass(frozen=True)
class Difference:
    """Names the first place the stored read models differ from a rebuild of the events."""

    table: str
    key: tuple[Any, ...]
    stored: Row | None
    rebuilt: Row | None

    def describe(self) -> str:
        """Returns the difference in words (which row, and the first column that differs)."""
        where = f"{self.table} row ({', '.join(map(repr, self.key))})"
        if self.stored is None:
            return f"{where} is missing from the stored read models"
        if self.rebuilt is None:
            return f"{where} is stored, but the events give no such row"
        for name, value in self.rebuilt.items():
            if self.stored.get(name) != value:
                return (f"{where}: column {name} is {self.stored.get(name)!r} stored, "
                        f"{value!r} from the events")
        return f"{where} differs"


def check(source: Connection, progress: Progress | None = None) -> Difference | None:
    """Rebuilds the read models into a scratch SQLite copy and compares them with the
    stored ones, table by table in key order; returns the first difference, or None."""
    with read_models.scratch_copy() as target:
        rebuild(source, target, progress)
        found = read_models.first_difference(source, target)
    return None if found is None else Difference(*found)


def rebuild_ledger(url: str, progress: Progress | None = None) -> int:
    """Rebuilds the read models of the ledger at ``url`` from its events, in one transaction
    that holds the head lock (appends wait for it); returns the position they reflect."""
    with EventStore(url) as store:
        store.require_initialised()
        with store.writing() as conn:
            return rebuild(conn, progress=progress)


def check_ledger(url: str, progress: Progress | None = None) -> int:
    """Compares the read models of the ledger at ``url`` with a rebuild from its events in a
    scratch copy; returns the position checked. IntegrityError (exit 4) names the first
    difference: the read models are a cache of the events, which win (``rebuild_ledger``)."""
    # alembic: imported by the commands that need it, not at every CLI start
    from ledger import migrate

    with EventStore(url) as store:
        store.require_initialised()
        revision = migrate.current(url)
        if revision != SCHEMA_REVISION:
            raise SchemaNotInitialised(
                f"the ledger is at schema revision {revision}, which has no read models: run "
                "`arena-ledger db upgrade`", url=safe_url(url), revision=revision,
                reason="schema_revision",
            )
        with store.reading() as conn:
            stored = read_models.position(conn)
            head = read_models.head_position(conn)
            if stored is None:
                raise IntegrityError(
                    "the ledger has no read models: run `arena-ledger db upgrade`",
                    reason="read_models_missing",
                )
            if stored != head:
                raise IntegrityError(
                    f"the read models reflect position {stored}, but the head is {head}: events "
                    "were appended without the machines' guard. Run `arena-ledger projections "
                    "rebuild`",
                    reason="read_models_behind", position=stored, head=head,
                )
            found = check(conn, progress)
    if found is not None:
        raise IntegrityError(
            f"the read models differ from the events: {found.describe()}. The events win: "
            "run `arena-ledger projections rebuild`",
            reason="read_model_mismatch", table=found.table, key=list(found.key),
        )
    return head

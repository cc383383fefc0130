"""Runs the arena's processes over the store: each one an atomic, machine-checked append.

This is the application layer (ports and adapters): it composes the event store with the
pure machines. Every domain event — appended here or through ``arena-ledger append`` — is
decided by ``machines.projection.LedgerFold`` *inside* the append transaction, with the fold
at the head it has just locked (seeded from the read models there, ``services.seeded_fold``,
or caught up with every committed event), so two validators sharing a PostgreSQL ledger can
never both act on the same state. In the same transaction the guard writes the read models
the accepted events change (``services.projections``); the queries read them
(``services.read_view``). A refused event is not recorded; the caller gets ``Refused``
carrying the machine, state, event and a stable reason code.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from pydantic import ValidationError

from ledger import read_models
from ledger.archive import DiskArchive
from ledger.records import ANY, NO_STREAM, AppendResult, EventDraft, ExpectedVersion, RecordedEvent
from ledger.store import DEFAULT_URL, EventStore, PreparedEvent
from machines import submission as submission_machine
from machines.arena import commission_digest
from machines.attempt import explain, work_mismatch_fault
from machines.control import CONTROL_HOTKEY
from machines.intake import Admission, Rejection, intake
from machines.projection import LedgerFold, Touched
from machines.reasons import describe
from machines.settlement_rules import Settlement, explain_rewards, settlement_payload
from machines.submission import STATES
from services.limits import submission_prefix_min
from services.projections import ReadModelRows, submission_row
from services.read_view import ReadView, read_view
from services.replay import decoded_rows
from services.seeded_fold import ReadModelArchive, seeded_fold
from services.settlements import (
    arena_inputs,
    check_recorded,
    compute,
    compute_from_read_models,
    fee_summary,
    rewards,
)
from vocabulary.catalogue import CATALOGUE, schema_error
from vocabulary.codec import digest, loads
from vocabulary.errors import (
    ConcurrencyConflict,
    InvalidInput,
    LedgerError,
    NotFound,
    Refused,
    SchemaError,
)
from vocabulary.events import (
    AttemptClaimed,
    AttemptDecided,
    ControlRegistered,
    CreditGranted,
    CreditSpent,
    EmissionPolicySet,
    Event,
    HoldReleased,
    InfrastructureFault,
    PaymentConsumed,
    QualificationStarted,
    SettlementComputed,
    SubmissionAdmitted,
    SubmissionArrived,
    SubmissionExpired,
    SubmissionHeld,
    SubmissionRejected,
    SubmissionRequeued,
    SubmissionResolved,
    WindowMeasured,
)
from vocabulary.fields import is_digest, require_as_of, require_hotkey
from vocabulary.limits import json_integer_abs_max

if TYPE_CHECKING:
    from sqlalchemy import Connection

    from machines.refusal import Refusal
    from machines.submission import SubmissionState

__all__ = [
    "CONTROL_HOTKEY",
    "ArenaLedger",
    "DomainGuard",
    "HistoryPage",
    "IntakeOutcome",
    "refused_error",
    "require_prefix_length",
    "slice_history",
    "submission_id",
]

def _sealed_rules_version(fold: LedgerFold, arena_id: str, commission: str) -> str:
    """Returns the policy_version the attempt's commission sealed (its rules version)."""
    arena = fold.arena(arena_id)
    assert arena is not None, "an attempt is claimed only under a commissioned arena"
    return arena.commissions[commission].params.rules_version


def refused_error(refusal: Refusal, index: int | None = None) -> Refused:
    """Turns a machine's refusal into the ``Refused`` exception the CLI reports (exit 1)."""
    detail = f" ({refusal.detail})" if refusal.detail else ""
    error = Refused(
        f"{refusal.event_type} refused by the {refusal.machine} machine in state "
        f"{refusal.state}: {refusal.code}{detail}; nothing was written",
        machine=refusal.machine,
        state=refusal.state,
        event_type=refusal.event_type,
        reason=refusal.code,
        detail=refusal.detail,
    )
    if index is not None:
        error.context["index"] = index
    return error


class DomainGuard:
    """Decides each batch with the machines inside the append transaction (an AppendGuard)."""

    def __init__(
        self, fold: LedgerFold | None = None, as_of: int | None = None, seeded: bool = False
    ) -> None:
        self.fold = fold if fold is not None else LedgerFold()
        #: Start the fold from the read models at the head (``services.seeded_fold``) rather
        #: than folding every event: a fresh process decides at the cost of what the batch
        #: touches (a live submission is loaded when a rule first reads it).
        #: Turned off for good when the read models do not reflect the head (events appended
        #: without the guard): the fold then catches up event by event, as it always did.
        self.seeded = seeded and fold is None and as_of is None
        self._archive: ReadModelArchive | None = None
        #: The position a batch this guard accepted moved a seeded fold to, until the append
        #: is confirmed committed (``confirm``); a fold ahead of what committed is seeded anew.
        self._pending: int | None = None
        self._fresh = False
        #: The latest EmissionPolicySet folded so far (settlements use it from its position on).
        self.emission_policy: EmissionPolicySet | None = None
        #: Fold no further than this position, and decide no batch (a read-only view of the
        #: ledger as it stood then; ``ArenaLedger.as_of``). None: every committed event.
        self.as_of = as_of

    def catch_up(self, store: EventStore, conn: Connection | None = None) -> int:
        """Folds every committed event after the fold's position; returns how many.

        Reads them up to the head as raw rows, decoded without a RecordedEvent per event
        (``services.replay.decoded_rows``; through ``conn``, inside its transaction, when
        given), with the cyclic collector paused: about half the time a RecordedEvent and
        ``CATALOGUE.decode`` per event took with the collector on (docs/benchmarks.md).
        """
        if self.seeded:
            self._seed_if_stale(store, conn)
            if self.seeded:
                return 0
        last = store.head(conn).position
        if self.as_of is not None:
            last = min(last, self.as_of)
        apply, count = self.fold.apply, 0
        first = self.fold.position + 1
        for row, payload, event in decoded_rows(store, first, last, conn):
            apply(row[0], row[1], event, payload)
            if type(event) is EmissionPolicySet:  # decode returns catalogue classes, exactly
                self.emission_policy = event
            count += 1
        return count

    def _seed_if_stale(self, store: EventStore, conn: Connection | None) -> None:
        """Seeds the fold from the read models unless it already stands at the head, with
        every batch it accepted confirmed; turns seeding off when they cannot seed it."""
        if conn is None:
            with store.reading() as own:
                self._seed_if_stale(store, own)
            if self._archive is not None:
                self._archive.conn = None  # later reads open their own connection
            return
        head = store.head(conn).position
        if self._fresh and self._pending is None and self.fold.position == head:
            return
        if not read_models.exists(conn) or read_models.position(conn) != head:
            self.seeded, self.fold, self._archive = False, LedgerFold(), None
            return
        self.fold, self._archive, self.emission_policy = seeded_fold(store, conn)
        self._fresh, self._pending = True, None

    def release(self) -> None:
        """Forgets the connection a seeded fold's archive read through (a snapshot that is
        closing): its later reads open their own."""
        if self._archive is not None:
            self._archive.conn = None

    def confirm(self, result: AppendResult) -> None:
        """Notes that an append this guard accepted committed (``ArenaLedger`` calls it)."""
        if (
            self._pending is not None
            and not result.already_recorded
            and result.positions
            and result.positions[-1] == self._pending
        ):
            self._pending = None

    def __call__(self, store: EventStore, conn: Connection, batch: Sequence[PreparedEvent]) -> None:
        """Raises ``Refused`` for the first event of ``batch`` the machines refuse
        (InvalidInput for any batch at all, when the guard is a view ``as_of`` a position)."""
        if self.as_of is not None:
            raise read_only(self.as_of)
        self.catch_up(store, conn)
        archive = self._archive if self.seeded else None
        if archive is not None:
            archive.conn = conn  # read-throughs see this transaction: the fold's position
        try:
            self._decide(conn, batch)
        finally:
            if archive is not None:
                archive.conn = None

    def _decide(self, conn: Connection, batch: Sequence[PreparedEvent]) -> None:
        decoded = []
        for prepared in batch:
            payload = loads(prepared.payload_bytes)
            event = CATALOGUE.decode(prepared.type, prepared.schema_version, payload)
            decoded.append((prepared.stream, event, payload))
        # The read models follow the batch only from the head they reflect: behind it
        # (events appended without this guard), they wait for `projections rebuild`.
        base = self.fold.position
        rows = ReadModelRows() if read_models.position(conn) == base else None
        observe = None
        if rows is not None:
            fold = self.fold

            def observe(index: int, touched: Touched) -> None:
                stream, event, _ = decoded[index]
                rows.observe(fold, base + index + 1, stream, event, touched)

        for index, refusal in enumerate(self.fold.decide_batch(decoded, observe)):
            if refusal is not None:
                raise refused_error(refusal, index)
        for index, (_, event, payload) in enumerate(decoded):
            if isinstance(event, SettlementComputed):
                self._check_settlement(index, event, payload)
        if self.seeded:
            # The batch will commit (or the fold is seeded anew): fold it now, before its
            # rows are written, while the read-throughs still show the position before it.
            self._pending = base + len(decoded)
            for index, (stream, event, payload) in enumerate(decoded):
                self.fold.apply(base + index + 1, stream, event, payload)
                if type(event) is EmissionPolicySet:
                    self.emission_policy = event
        if rows is not None:
            rows.write(conn)
            read_models.set_position(conn, base + len(batch))

    def _check_settlement(self, index: int, event: SettlementComputed, payload: Any) -> None:
        if index != 0:
            raise Refused(
                "a SettlementComputed must open its batch (it is computed as of the position "
                "before it); nothing was written",
                reason="settlement_not_at_head",
                index=index,
            )
        reader = None
        if self.seeded and self._archive is not None and self._archive.conn is not None:
            # The seeded fold's archive reads this transaction: so does the settlement.
            reader = read_models.Reader(self._archive.conn, self.fold.position)
        difference = check_recorded(self.fold, self.emission_policy, event, payload, reader)
        if difference is not None:
            name, recorded, recomputed = difference
            raise Refused(
                f"SettlementComputed differs from the ledger at field {name!r}: recorded "
                f"{_short(recorded)}, recomputed {_short(recomputed)}; nothing was written",
                reason="settlement_mismatch",
                field=name,
                index=index,
            )


E = TypeVar("E", bound=Event)
Op = TypeVar("Op", SubmissionHeld, HoldReleased, SubmissionRequeued)


def read_only(as_of: int) -> InvalidInput:
    """Returns the error of a write through a view of the ledger as of ``as_of``."""
    return InvalidInput(
        f"this is the ledger as of position {as_of}, a view for reading: it appends nothing; "
        "open the ledger without as_of to write",
        path="as_of",
    )


def _model(cls: type[E], data: dict[str, Any]) -> E:
    """Validates ``data`` as ``cls``; bad input becomes a SchemaError naming the field."""
    try:
        return cls.model_validate(data)
    except ValidationError as exc:
        raise schema_error(cls.event_type, cls.schema_version, exc) from None


def _stated(event: Op) -> Op:
    """Returns an operator's hold, release or requeue, unless its reason is blank.

    The schema takes any reason up to 256 characters (a PASS decision's is empty), but an
    operator's action on a miner's submission is what an auditor later asks about: the
    guard asks for words. InvalidInput names ``$.payload.reason``; nothing is written.
    """
    if not event.reason.strip():
        raise InvalidInput(
            f"{event.event_type} needs a reason an auditor can read (it is recorded with "
            f"the action); got {event.reason!r}",
            path="$.payload.reason",
        )
    return event


def _short(value: Any, limit: int = 120) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def submission_id(arrived: dict[str, Any]) -> str:
    """Returns digest(``arena-ledger.arrival``, the arrival fields) (docs/concepts.md)."""
    arrival = arrived["arrival"]
    return digest(
        "arena-ledger.arrival",
        {
            "arena_id": arrived["arena_id"],
            "block": arrival["block"],
            "event_index": arrival["event_index"],
            "event_subindex": arrival["event_subindex"],
            "miner_hotkey": arrived["miner_hotkey"],
            "content_hash": arrived["content_hash"],
        },
    )


@dataclass(frozen=True)
class IntakeOutcome:
    """Reports an intake: the submission id, admitted or not, the reason and the positions."""

    submission_id: str
    admitted: bool
    reason: str
    fee: dict[str, Any] | None
    positions: tuple[int, ...]
    already_recorded: bool = False

    def to_json(self) -> dict[str, Any]:
        """Returns the outcome as a JSON-ready object."""
        return {
            "submission_id": self.submission_id,
            "admitted": self.admitted,
            "reason": self.reason,
            "fee": self.fee,
            "positions": list(self.positions),
            "already_recorded": self.already_recorded,
        }


@dataclass(frozen=True)
class HistoryPage:
    """Is one page of a hotkey's ``history``: its rows are ``history``'s rows ``start`` to
    ``start + len(rows)``, of ``total``; ``previous`` and ``next`` are the submission ids to
    page on from (``before=previous``, ``after=next``), None on the first or last page."""

    position: int
    rows: list[dict[str, Any]]
    total: int
    start: int
    previous: str | None
    next: str | None


@dataclass
class ArenaLedger:
    """Is the library entry point: a store guarded by the machines, plus every process."""

    url: str = DEFAULT_URL
    actor: str = "local"
    #: Keep finished submissions in a temporary file (``ledger.archive.DiskArchive``), not in
    #: memory: for a long-running process, whose fold otherwise grows by ~2 KB per
    #: submission ever recorded. Every answer is the same; the fold is slower (docs/machines.md).
    archive_finished: bool = False
    #: Read the ledger as it stood at this position: every query answers what the events up
    #: to it say (a later event is not seen), and nothing can be appended (InvalidInput).
    #: Past the head it is the head. None: the ledger up to its head, writable.
    as_of: int | None = None
    #: Start the machines' fold from the read models at the head instead of folding every
    #: event (``services.seeded_fold``): the default. False folds the whole ledger from
    #: nothing, as a replay does.
    seed_from_read_models: bool = True
    store: EventStore = field(init=False)
    guard: DomainGuard = field(init=False)

    def __post_init__(self) -> None:
        require_as_of(self.as_of)
        fold = None
        if self.archive_finished:

            fold = LedgerFold(archive=DiskArchive())
        self.guard = DomainGuard(fold, self.as_of, seeded=self.seed_from_read_models)
        self.store = EventStore(self.url, guard=self.guard)
        self.store.require_initialised()

    def close(self) -> None:
        """Releases the store's connections (and drops the archive, if any)."""
        self.store.close()
        archive = self.guard.fold.archive
        if archive is not None:
            archive.close()

    def __enter__(self) -> ArenaLedger:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def fold(self) -> LedgerFold:
        """Returns the machines' fold, caught up with every committed event (up to
        ``as_of``, when set)."""
        self.guard.catch_up(self.store)
        return self.guard.fold

    def read_stream(self, stream: str) -> list[RecordedEvent]:
        """Returns a stream's recorded events in version order (up to ``as_of``, when set)."""
        records = self.store.read_stream(stream)
        as_of = self.as_of
        return list(records) if as_of is None else [r for r in records if r.position <= as_of]

    def _seen(self) -> str:
        """Returns " as of position N" for a view ``as_of`` a position, else "": what a
        not-found message adds, since the thing may exist later (N: the fold's position,
        which is the head when ``as_of`` is past it)."""
        return _seen(self.fold if self.as_of is not None else None)

    def _writable(self) -> None:
        """Raises InvalidInput when this is a view ``as_of`` a position (before any work; the
        guard refuses such a view's batches too)."""
        if self.as_of is not None:
            raise read_only(self.as_of)

    @contextmanager
    def _view(self) -> Iterator[ReadView | None]:
        """Yields the read models over one snapshot when they can answer a current-state
        question (``services.read_view``), else None: the caller folds the ledger."""
        if self.as_of is not None:
            yield None
            return
        with read_view(self.store) as view:
            yield view

    def append(
        self,
        batch: Sequence[tuple[str, Event] | tuple[str, Event, ExpectedVersion]],
        *,
        key: str | None = None,
    ) -> AppendResult:
        """Appends event models atomically (each checked by its machine)."""
        self._writable()
        drafts = [
            EventDraft.of(item[0], item[1], item[2] if len(item) == 3 else ANY) for item in batch
        ]
        return self._append(drafts, key)

    def _append(self, drafts: Sequence[EventDraft], key: str | None = None) -> AppendResult:
        """Appends through the guard and tells it the batch committed."""
        result = self.store.append(drafts, idempotency_key=key, actor=self.actor)
        self.guard.confirm(result)
        return result

    # -- arenas ----------------------------------------------------------------------------

    def commission(self, payload: dict[str, Any]) -> AppendResult:
        """Appends ArenaCommissioned (a first commission or a re-commission).

        The arena's current commission sent again (the same digest: a retried command) is
        not appended a second time, which would also reset an incumbent advanced since: the
        recorded one is returned (``already_recorded``). A re-commission changes something.
        """
        self._writable()
        arena_id = payload.get("arena_id")
        if not isinstance(arena_id, str):
            raise InvalidInput("the commission needs an arena_id", path="$.arena_id")
        stream = f"arena-{arena_id}"
        draft = EventDraft(stream, "ArenaCommissioned", payload)
        arena = self.fold.arena(arena_id)
        if arena is not None and not arena.retired:  # a retired arena refuses it (append)
            recorded = loads(self.store.prepare([draft])[0].payload_bytes)
            sent = commission_digest(arena.commission.event, recorded)
            latest: RecordedEvent | None = None
            for event in self.store.read_stream(stream):
                if event.type == "ArenaCommissioned":
                    latest = event  # the current commission, as stored now
            if latest is not None and commission_digest(
                arena.commission.event, latest.payload
            ) == sent:
                return AppendResult((latest.position,), True, (latest.entry_hash,))
        return self._append([draft])

    def register_control(self, arena_id: str, control: dict[str, Any]) -> AppendResult:
        """Appends ControlRegistered to an arena."""
        event = _model(ControlRegistered, control)
        return self.append([(f"arena-{arena_id}", event)])

    def grant_credit(self, credit_id: str, hotkey: str, amount_rao: int, note: str) -> AppendResult:
        """Appends CreditGranted on a new credit stream.

        A credit id is granted once. A retry of the same grant returns the recorded one
        (``already_recorded``); the same id with other terms is Refused
        (``credit_exists``, naming the recorded grant), not a conflict to retry.
        """
        event = _model(
            CreditGranted,
            {"credit_id": credit_id, "hotkey": hotkey, "amount_rao": amount_rao, "note": note},
        )
        stream = f"credit-{credit_id}"
        try:
            return self.append([(stream, event, NO_STREAM)])
        except ConcurrencyConflict:
            recorded = next(iter(self.store.read_stream(stream)), None)
            if recorded is None:
                raise
        granted = recorded.event()
        if granted == event:
            return AppendResult((recorded.position,), True, (recorded.entry_hash,))
        terms = (
            f"to {granted.hotkey}, {granted.amount_rao:,} rao"
            if isinstance(granted, CreditGranted)
            else f"as {recorded.type}"
        )
        raise Refused(
            f"credit {credit_id!r} was already granted at position {recorded.position} "
            f"({terms}); a credit id is granted once: choose another",
            reason="credit_exists", credit_id=credit_id, position=recorded.position,
        )

    def set_emission_policy(
        self,
        half_life_blocks: int,
        burn_hotkey: str,
        validator_hotkey: str,
        rules_version: str = "settlement-rules.v1",
        control_max_age_blocks: int | None = None,
    ) -> AppendResult:
        """Appends EmissionPolicySet to the settlement stream.

        A settlement-rules.v1 policy is written without ``rules_version`` (as every policy
        was before v2), so it has the bytes it always had; settlement-rules.v2 needs
        ``control_max_age_blocks``, and v1 refuses one.
        """
        data: dict[str, Any] = {
            "half_life_blocks": half_life_blocks,
            "burn_hotkey": burn_hotkey,
            "validator_hotkey": validator_hotkey,
        }
        if rules_version != "settlement-rules.v1":
            data["rules_version"] = rules_version
        gated = rules_version == "settlement-rules.v2"
        if control_max_age_blocks is not None:
            data["control_max_age_blocks"] = control_max_age_blocks
        known = rules_version in ("settlement-rules.v1", "settlement-rules.v2")
        if known and gated == (control_max_age_blocks is None):  # else the schema says why
            path = "$.payload.control_max_age_blocks"
            raise InvalidInput(
                f"{path}: settlement-rules.v2 needs control_max_age_blocks (a positive "
                "number of blocks); nothing was written" if gated else
                f"{path}: control_max_age_blocks is a settlement-rules.v2 setting, and the "
                f"policy names {rules_version}; nothing was written",
                path=path,
            )
        event = _model(EmissionPolicySet, data)
        return self.append([("settlement", event)])

    # -- intake ----------------------------------------------------------------------------

    def intake(
        self,
        arrival: dict[str, Any],
        *,
        payment_amount_rao: int | None = None,
        block: int | None = None,
    ) -> IntakeOutcome:
        """Records an arrival and its intake outcome in one atomic, idempotent append.

        ``arrival`` holds SubmissionArrived's fields; its ``submission_id`` is derived from
        them, so one given must be that one (SchemaError otherwise, nothing written);
        ``payment_amount_rao`` is what the chain shows for its payment_ref (None: none).
        """
        self._writable()  # before a retry returns what was recorded

        if not isinstance(arrival, dict):
            raise SchemaError("the arrival must be a JSON object", path="$")
        amount = payment_amount_rao
        if amount is not None and (
            type(amount) is not int or not 0 <= amount <= json_integer_abs_max
        ):
            raise SchemaError(
                "payment_amount_rao must be a non-negative integer", path="payment_amount_rao"
            )
        if block is not None and (type(block) is not int or not 0 <= block <= json_integer_abs_max):
            raise SchemaError("block must be a non-negative integer", path="block")
        fields = {k: v for k, v in arrival.items() if k != "submission_id"}
        try:
            sid = submission_id(fields)
        except (KeyError, TypeError, LedgerError):
            sid = "0" * 64  # a malformed arrival: validation below names the bad field
        arrived = _model(SubmissionArrived, {**fields, "submission_id": sid})
        stated = arrival.get("submission_id", sid)
        if stated != sid:
            # The id is derived from the arrival (docs/concepts.md); one stated otherwise (a
            # mistyped copy, another system's id) would be dropped without a word.
            raise SchemaError(
                f"submission_id {stated!r} is not the id of this arrival: its fields give "
                f"{sid} (the id is derived from them; omit it, or state that one)",
                path="$.submission_id",
            )
        fold = self.fold
        if fold.arena(arrived.arena_id) is None:
            raise NotFound(
                f"arena {arrived.arena_id!r} is not commissioned", arena_id=arrived.arena_id
            )
        state = fold.submission(sid)
        outcome: Admission | Rejection
        decided = state is not None and (state.fee is not None or state.rejection is not None)
        if state is not None and decided:
            # Intake was decided already: rebuild the recorded batch so a retry hits the
            # idempotency key instead of re-deriving under a ledger that has moved on.
            if state.fee is not None:
                outcome = Admission(*state.fee)
            else:
                outcome = Rejection(str(state.rejection))
        else:
            # An arrival recorded on its own (appended raw, or held before intake and
            # released) is decided here as a new one is, and its outcome appended after it.
            current = state or submission_machine.start(arrived)
            outcome = intake(current, fold.intake_context(current, payment_amount_rao))
        at = arrived.arrival.block if block is None else block
        stream = f"submission-{sid}"
        fee = None
        decision: list[tuple[str, Event] | tuple[str, Event, ExpectedVersion]] = []
        if isinstance(outcome, Admission):
            fee = {"kind": outcome.kind, "ref": outcome.ref, "amount_rao": outcome.amount_rao}
            decision.append((stream, _model(SubmissionAdmitted, {"block": at, "fee": fee})))
            decision.extend(self._fee_events(sid, arrived.arena_id, outcome))
        else:
            decision.append((stream, SubmissionRejected(block=at, reason=outcome.reason)))
        whole = [(stream, arrived, NO_STREAM), *decision]
        if state is not None and not decided:
            result = self.append(decision, key=f"intake-outcome-{sid}")
        else:
            try:
                result = self.append(whole, key=f"intake-{sid}")
            except ConcurrencyConflict:
                if not decided:
                    raise
                # Decided by an intake of an arrival recorded on its own: that intake's key
                # answers its retry. Else it was decided by appends without intake's keys
                # (raw, or through ``append``): what is recorded answers, when it is what
                # this intake records. A conflict ("re-read and retry") would be answered
                # the same on every retry.
                try:
                    result = self.append(decision, key=f"intake-outcome-{sid}")
                except (Refused, ConcurrencyConflict):
                    result = self._recorded_intake(sid, [(stream, arrived), *decision])
        reason = "" if isinstance(outcome, Admission) else outcome.reason
        return IntakeOutcome(
            sid, fee is not None, reason, fee, result.positions, result.already_recorded
        )

    def _recorded_intake(
        self, sid: str, batch: Sequence[tuple[str, Event] | tuple[str, Event, ExpectedVersion]]
    ) -> AppendResult:
        """Returns where ``batch`` (an intake's arrival, outcome and fee event) is recorded,
        each event equal to one of its stream's, as an already-recorded append.

        Raises InvalidInput naming the first event that is recorded otherwise, or not at all.
        """
        found: list[RecordedEvent] = []
        for item in batch:
            stream, event = item[0], item[1]
            recorded = [r for r in self.read_stream(stream) if r.type == event.event_type]
            same = next((r for r in recorded if r.event() == event), None)
            if same is None:
                how = "with other fields" if recorded else "nowhere"
                raise InvalidInput(
                    f"the intake of submission {sid} was recorded by appends without intake's "
                    f"key, not as this intake records it: its {event.event_type} in stream "
                    f"{stream!r} is recorded {how}; nothing was written",
                    submission_id=sid,
                    stream=stream,
                    event_type=event.event_type,
                )
            found.append(same)
        found.sort(key=lambda r: r.position)
        return AppendResult(
            tuple(r.position for r in found), True, tuple(r.entry_hash for r in found)
        )

    @staticmethod
    def _fee_events(
        sid: str, arena_id: str, admission: Any
    ) -> list[tuple[str, Event, ExpectedVersion]]:
        if admission.kind == "payment":
            consumed = PaymentConsumed(
                payment_ref=admission.ref,
                submission_id=sid,
                arena_id=arena_id,
                amount_rao=admission.amount_rao,
            )
            return [(f"payment-{admission.ref}", consumed, NO_STREAM)]
        if admission.kind == "credit":
            return [(f"credit-{admission.ref}", CreditSpent(submission_id=sid), ANY)]
        return []

    # -- attempts --------------------------------------------------------------------------

    def claim(
        self,
        *,
        attempt_id: str,
        pair_id: str,
        validator_hotkey: str,
        block: int,
        submission_id: str | None = None,
        arena_id: str | None = None,
        plan: str = "normal",
    ) -> AttemptClaimed:
        """Claims a QUEUED submission (or the arena's next): claim + QualificationStarted."""
        self._writable()
        if submission_id is not None:
            self._require_whole_id(submission_id)
        fold = self.fold
        if submission_id is None:
            if arena_id is None:
                raise InvalidInput("claim needs a submission id or an arena", path="submission_id")
            nxt = fold.next_claimable(arena_id)
            if nxt is None:
                raise NotFound(f"arena {arena_id!r} has no claimable submission", arena_id=arena_id)
            submission_id = nxt.submission_id
        sub = fold.submission(submission_id)
        if sub is None:
            raise NotFound(
                f"submission {submission_id} does not exist", submission_id=submission_id
            )
        arena = fold.arena(sub.arena_id)
        assert arena is not None
        claimed = _model(
            AttemptClaimed,
            {
                "attempt_id": attempt_id,
                "submission_id": submission_id,
                "arena_id": sub.arena_id,
                "commission_digest": arena.commission_digest,
                "pair_id": pair_id,
                "validator_hotkey": validator_hotkey,
                "claimed_block": block,
                "plan": plan,
            },
        )
        self.append(
            [
                (f"attempt-{attempt_id}", claimed, NO_STREAM),
                (f"submission-{submission_id}", QualificationStarted(attempt_id=attempt_id)),
            ],
            key=f"claim-{attempt_id}",
        )
        return claimed

    def record(self, attempt_id: str, event: Event) -> Event:
        """Appends one measurement to an attempt; a token-count mismatch becomes work_mismatch.

        Returns the event actually recorded.
        """
        if isinstance(event, WindowMeasured) and (
            event.stock_output_tokens != event.candidate_output_tokens
        ):

            event = work_mismatch_fault(event)
        self.append([(f"attempt-{attempt_id}", event)])
        return event

    def fault(self, attempt_id: str, code: str, stage: str, detail: str) -> Event:
        """Appends an InfrastructureFault to an attempt."""
        event = _model(InfrastructureFault, {"code": code, "stage": stage, "detail": detail})
        return self.record(attempt_id, event)

    def conclude(self, attempt_id: str, block: int) -> AttemptDecided:
        """Appends the decision the fold derives (AttemptDecided + SubmissionResolved)."""
        self._writable()  # before a retry returns what was recorded
        fold = self.fold
        state = fold.attempt(attempt_id)
        if state is None:
            raise NotFound(f"attempt {attempt_id} does not exist", attempt_id=attempt_id)
        decision = fold.derive_decision(attempt_id)
        if decision is None:
            raise Refused(
                f"attempt {attempt_id} cannot be concluded yet: it is in state {state.status} "
                "and its evidence decides nothing so far; nothing was written",
                reason="attempt_not_decidable",
                state=state.status,
                attempt_id=attempt_id,
            )
        decided = _model(
            AttemptDecided,
            {
                **decision._asdict(),
                "decided_block": block,
                # The attempt's commission seals it; the machine refuses any other.
                "rules_version": _sealed_rules_version(fold, state.arena_id,
                                                       state.commission_digest),
            },
        )
        sid = state.submission_id
        resolved = SubmissionResolved(
            attempt_id=attempt_id,
            verdict=decision.verdict,
            reason=decision.reason,
            disposition=decision.disposition,
        )
        batch: list[tuple[str, Event] | tuple[str, Event, ExpectedVersion]] = [
            (f"attempt-{attempt_id}", decided),
            (f"submission-{sid}", resolved),
        ]
        self.append(batch, key=f"conclude-{attempt_id}")
        return decided

    # -- holds, requeues, expiry -----------------------------------------------------------

    def _require_whole_id(self, sid: str) -> None:
        """Raises InvalidInput unless ``sid`` is a whole submission id (64 lowercase hex).

        A write names exactly what it acts on: the prefix (or capitals) ``explain`` takes is
        refused here, and the message names the submission it stands for, when one does (it
        would otherwise surface as a malformed stream name the operator never typed).
        """
        if is_digest(sid):
            return
        fold = self.fold
        full = _resolve_prefix(fold, sid)
        exists = full != sid and fold.submission(full) is not None
        meant = f"; {sid!r} stands for submission {full}" if exists else ""
        raise InvalidInput(
            f"a submission is named here by its whole id, 64 lowercase hex characters{meant}",
            path="submission_id",
        )

    def hold(self, sid: str, reason: str, block: int) -> AppendResult:
        """Appends SubmissionHeld (any non-terminal submission)."""
        self._require_whole_id(sid)
        event = _stated(_model(SubmissionHeld, {"reason": reason, "block": block}))
        return self.append([(f"submission-{sid}", event)])

    def release(self, sid: str, reason: str, block: int, operator: str) -> AppendResult:
        """Appends HoldReleased, naming the operator."""
        self._require_whole_id(sid)
        fields = {"reason": reason, "block": block, "operator": operator}
        event = _stated(_model(HoldReleased, fields))
        return self.append([(f"submission-{sid}", event)])

    def requeue(self, sid: str, reason: str, block: int) -> AppendResult:
        """Appends SubmissionRequeued for a completed NO_DECISION."""
        self._require_whole_id(sid)
        event = _stated(_model(SubmissionRequeued, {"reason": reason, "block": block}))
        return self.append([(f"submission-{sid}", event)])

    def expire(self, block: int, sid: str | None = None) -> list[str]:
        """Expires the given submission, or every live one whose SLA has passed at ``block``."""
        self._writable()
        if sid is not None:
            self._require_whole_id(sid)
        due = [s.submission_id for s in self.fold.expirable(block)]
        targets = due if sid is None else [sid]
        if not targets:
            return []
        events: list[tuple[str, Event] | tuple[str, Event, ExpectedVersion]] = [
            (f"submission-{s}", SubmissionExpired(block=block, reason="sla_expired"))
            for s in targets
        ]
        self.append(events)
        return targets

    # -- settlement ------------------------------------------------------------------------

    @contextmanager
    def _settlement_reader(self) -> Iterator[read_models.Reader | None]:
        """Yields the read models with the guard's seeded fold at their head (one snapshot),
        for a settlement computed from them; None when the fold is not seeded (a view as
        of a position, or read models behind the head): the caller computes from the fold."""
        if not self.guard.seeded:
            yield None
            return
        with self.store.reading() as conn:
            try:
                self.guard.catch_up(self.store, conn)
                seeded = self.guard.seeded  # still: the read models reflect this head
                yield read_models.Reader(conn, self.guard.fold.position) if seeded else None
            finally:
                self.guard.release()

    def weights(self, block: int) -> Settlement:
        """Computes the settlement at ``block`` as of the head (or ``as_of``) without
        appending it: as of a recorded SettlementComputed's ``as_of_position``, the same
        settlement, digest and all."""
        with self._settlement_reader() as reader:
            if reader is not None:
                return compute_from_read_models(
                    reader, self.guard.fold.arenas(), self.guard.emission_policy, block
                )
        fold = self.fold
        return compute(fold, self.guard.emission_policy, block)

    def settle(self, block: int) -> tuple[Settlement, AppendResult]:
        """Appends SettlementComputed for ``block`` as of the head; returns it and the positions."""
        self._writable()
        settlement = self.weights(block)
        draft = EventDraft("settlement", "SettlementComputed", settlement_payload(settlement))
        result = self._append([draft])
        return settlement, result

    def rewards(
        self, arena_id: str | None = None, hotkey: str | None = None
    ) -> list[dict[str, Any]]:
        """Explains every PASS's reward status (rewarded, lost_potential, pending), or one
        hotkey's PASSes.

        NotFound for an ``arena_id`` that was never commissioned (an empty list would read
        as "no PASS yet" for a misspelt name); InvalidInput for a ``hotkey`` no submission
        can carry.
        """
        if hotkey is not None:
            require_hotkey(hotkey)
        with self._settlement_reader() as reader:
            if reader is not None:
                fold = self.guard.fold
                _require_commissioned(fold, arena_id)
                arenas = [a for a in fold.arenas() if arena_id is None or a.arena_id == arena_id]
                rows = explain_rewards(arena_inputs(reader, arenas, arena_id))
        if reader is None:
            fold = self.fold
            _require_commissioned(fold, arena_id, self.as_of is not None)
            rows = rewards(fold, arena_id)
        return rows if hotkey is None else [row for row in rows if row["hotkey"] == hotkey]

    def fees(self, arena_id: str | None = None) -> dict[str, Any]:
        """Returns fee totals per arena and overall, credits apart (NotFound for an
        ``arena_id`` that was never commissioned)."""
        with self._view() as view:
            if view is not None:
                _require_arena(view, arena_id)
                return view.fees(arena_id)
        fold = self.fold
        _require_commissioned(fold, arena_id, self.as_of is not None)
        return fee_summary(fold, arena_id)

    # -- queries ---------------------------------------------------------------------------

    def attempt_events(self, attempt_id: str) -> list[Event]:
        """Returns an attempt stream's events as models (NotFound when absent)."""
        if not attempt_id:
            raise InvalidInput("the attempt id is empty: give the id of an attempt",
                               path="attempt_id")
        events = [r.event() for r in self.read_stream(f"attempt-{attempt_id}")]
        if not events:
            raise NotFound(
                f"attempt {attempt_id} does not exist{self._seen()}", attempt_id=attempt_id
            )
        return events

    def explain_attempt(self, attempt_id: str) -> dict[str, Any]:
        """Returns every number behind an attempt's verdict (windows, looks, audit, quality)."""
        events = self.attempt_events(attempt_id)
        claimed = events[0]
        if not isinstance(claimed, AttemptClaimed):
            raise ValueError("an attempt stream starts with AttemptClaimed")
        state = self._arena_fold(claimed.arena_id).refold_attempt(events)
        document = explain(state)
        recorded = next((e for e in reversed(events) if isinstance(e, AttemptDecided)), None)
        decision = document.get("decision") or {}
        document.update(
            {
                "submission_id": claimed.submission_id,
                "arena_id": claimed.arena_id,
                "recorded": None if recorded is None else recorded.model_dump(),
                "verdict": decision.get("verdict"),
                "reason": decision.get("reason"),
                "disposition": decision.get("disposition"),
                "speedup": decision.get("speedup"),
                "pass_line": decision.get("pass_line"),
                "look_window": decision.get("look_window"),
            }
        )
        return document

    def _arena_fold(self, arena_id: str) -> LedgerFold:
        """Returns a fold of the arena's own stream (its commissions, which an attempt's
        refold reads), or the whole fold when that is already caught up (a view as of a
        position, or a writer's)."""
        if self.as_of is not None or self.guard.fold.position > 0:
            return self.fold
        fold = LedgerFold()
        for record in self.read_stream(f"arena-{arena_id}"):
            fold.apply(record.position, record.stream, record.event(), record.payload)
        return fold

    def explain_submission(self, sid: str) -> dict[str, Any]:
        """Returns a submission's status, stated cause, next step and every attempt explained.

        ``sid`` is the 64-character id or a prefix of it that names one submission, at
        least ``submission_prefix_min`` characters (the tables show the first 16).
        """
        require_prefix_length(sid)
        with self._view() as view:
            if view is not None:
                sid = _resolve_prefix(view, sid)
                sub = view.submission(sid)
        if view is None:
            fold = self.fold
            sid = _resolve_prefix(fold, sid)
            sub = fold.submission(sid)
        if sub is None:
            raise NotFound(
                f"submission {sid} does not exist{self._seen()} (give its 64-character id, "
                "or a prefix of "
                f"at least {submission_prefix_min} characters that only it starts with)",
                submission_id=sid,
            )
        attempts = [  # in the order they were claimed
            str(e.payload["attempt_id"])
            for e in self.read_stream(f"submission-{sid}")
            if e.type == "QualificationStarted"
        ]
        row = submission_row(sub, describe)
        explained = [self.explain_attempt(str(a)) for a in attempts]
        latest = explained[-1] if explained else {}
        row.update(
            {
                "attempts": explained,
                "speedup": latest.get("speedup"),
                "pass_line": latest.get("pass_line"),
                "look_window": latest.get("look_window"),
                "looks": latest.get("looks", []),
            }
        )
        return row

    def submissions(
        self, arena_id: str | None = None, hotkey: str | None = None, status: str | None = None
    ) -> list[dict[str, Any]]:
        """Lists submissions in arrival-key order per arena with status, cause and next step
        (NotFound for an ``arena_id`` that was never commissioned, InvalidInput for a
        ``status`` no submission can be in)."""
        if status is not None and status.upper() not in STATES:
            raise InvalidInput(
                f"unknown submission status {status!r}; the statuses are {', '.join(STATES)}",
                path="status",
            )
        if hotkey is not None:
            require_hotkey(hotkey)  # a hotkey no submission can carry would list nothing
        with self._view() as view:
            if view is not None:
                _require_arena(view, arena_id or None)
                found = view.submissions(arena_id or None, hotkey, status and status.upper())
                return [submission_row(sub, describe) for sub in found]
        fold = self.fold
        if arena_id:
            _require_commissioned(fold, arena_id, self.as_of is not None)
            arenas = [arena_id]
        else:
            arenas = [a.arena_id for a in fold.arenas()]
        rows = []
        for arena in arenas:
            for sub in fold.submissions(arena):
                if hotkey is not None and sub.hotkey != hotkey:
                    continue
                if status is not None and sub.status != status.upper():
                    continue
                rows.append(submission_row(sub, describe))
        return rows

    def history(self, hotkey: str) -> tuple[int, list[dict[str, Any]]]:
        """Returns every submission of ``hotkey`` as a row with its fee, the attempts it was
        evaluated in and the positions of its first and latest events, in arrival-key order,
        with the position the answer is as of."""
        require_hotkey(hotkey)
        with self._view() as view:
            if view is not None:
                return view.position, _history_rows(*view.history(hotkey))
        fold = self.fold
        found = [
            sub
            for arena in fold.arenas()
            for sub in fold.submissions(arena.arena_id)
            if sub.hotkey == hotkey
        ]
        extra = {}
        for sub in found:
            recorded = self.read_stream(f"submission-{sub.submission_id}")
            extra[sub.submission_id] = {
                "attempt_ids": [str(r.payload["attempt_id"]) for r in recorded
                                if r.type == "QualificationStarted"],
                "arrived_position": recorded[0].position if recorded else None,
                "latest_position": recorded[-1].position if recorded else None,
            }
        return fold.position, _history_rows(found, extra)

    def controls(self, arena_id: str) -> list[dict[str, Any]]:
        """Returns the arena's controls with expected and observed outcomes."""
        with self._view() as view:
            if view is not None:
                _require_arena(view, arena_id)
                return [dataclasses.asdict(row) for row in view.controls(arena_id)]
        fold = self.fold
        _require_commissioned(fold, arena_id, self.as_of is not None)
        return [dataclasses.asdict(row) for row in fold.controls(arena_id)]

    def history_page(
        self, hotkey: str, limit: int, after: str | None = None, before: str | None = None
    ) -> HistoryPage:
        """Returns a page of ``history(hotkey)``'s rows: the first ``limit`` of them, or the
        ``limit`` after the submission ``after``, or the ``limit`` before ``before`` (a
        submission id of the hotkey's: a key into its history, which later arrivals do not
        shift), with how many there are and where the page starts.

        From the read models: the hotkey's rows sorted in SQL, the page's kept, and only the
        page's attempts read. Where they cannot answer (a view ``as_of`` a position, read
        models behind the head) it slices the whole ``history``: a fold, and a read of every
        submission's stream.
        """
        require_hotkey(hotkey)
        _require_page(limit, after, before)
        with self._view() as view:
            if view is not None:
                keys = {}
                for name, sid in (("after", after), ("before", before)):
                    if sid is not None:
                        keys[name] = view.history_key(hotkey, sid)
                        if keys[name] is None:
                            raise _no_history_cursor(name, sid, hotkey)
                subs, extra, total, start = view.history_page(
                    hotkey, limit, keys.get("after"), keys.get("before"))
                rows = _history_rows(subs, extra)
                return _history_page(view.position, rows, total, start)
        position, rows = self.history(hotkey)
        return slice_history(hotkey, position, rows, limit, after, before)


_HEX = frozenset("0123456789abcdef")


def _history_rows(
    subs: list[SubmissionState], extra: dict[str, dict[str, Any]]
) -> list[dict[str, Any]]:
    """Returns ``history``'s rows: each submission's row, fee and ``extra``, in arrival-key
    order across arenas."""
    rows = []
    for sub in subs:
        row = submission_row(sub, describe)
        row["fee"] = None if sub.fee is None else dict(sub.fee._asdict())
        rows.append({**row, **extra[sub.submission_id]})
    rows.sort(key=lambda r: (*r["arrival"], r["content_hash"], r["arena_id"]))
    return rows


def _require_arena(view: ReadView, arena_id: str | None) -> None:
    """Is ``_require_commissioned`` on the read models (which are never a view as of)."""
    if arena_id is not None and not view.has_arena(arena_id):
        raise NotFound(f"arena {arena_id!r} is not commissioned", arena_id=arena_id)


def require_prefix_length(text: str) -> None:
    """Refuses a submission id too short to look one up by: hex shorter than
    ``submission_prefix_min`` (reported as "does not exist" it read as a wrong id, not a
    short one), or nothing at all."""
    if not text:
        raise InvalidInput("the submission id is empty: give its 64-character id, or a prefix "
                           f"of at least {submission_prefix_min}", path="submission_id")
    if len(text) < submission_prefix_min and _HEX.issuperset(text.lower()):
        raise InvalidInput(
            f"{text!r} is {len(text)} characters, shorter than a submission id prefix may be: "
            f"give at least {submission_prefix_min} characters of the id (the tables show 16), "
            "or all 64",
            path="submission_id",
        )


def _resolve_prefix(source: LedgerFold | ReadView, text: str) -> str:
    """Returns the one submission id that starts with ``text`` (any case; a whole id in any
    case is that id), or ``text`` itself when it is too short or too long, not hex or no
    id's prefix (NotFound follows).

    InvalidInput when more than one submission starts with it: which one was meant is not
    for the ledger to guess.
    """
    lowered = text.lower()
    if len(text) > 64 or len(text) < submission_prefix_min or not _HEX.issuperset(lowered):
        return text
    if len(text) == 64:
        return lowered  # a whole id in capitals, as some tools print hashes
    if isinstance(source, ReadView):
        found = source.ids_starting_with(lowered)  # at most two: one more than an answer
        count = source.count_starting_with(lowered) if len(found) > 1 else len(found)
    else:
        found = [
            sub.submission_id
            for arena in source.arenas()
            for sub in source.submissions(arena.arena_id)
            if sub.submission_id.startswith(lowered)
        ]
        count = len(found)
    if count > 1:
        raise InvalidInput(
            f"{count} submissions start with {text!r}; give more of the id",
            path="submission_id",
        )
    return found[0] if found else text


def _require_commissioned(fold: LedgerFold, arena_id: str | None, view: bool = False) -> None:
    """Raises NotFound when ``arena_id`` (None: every arena) names no arena of ``fold``.

    Takes the fold the caller already caught up (``ArenaLedger.fold`` reads the head again);
    for a ``view`` as of a position the message says which.
    """
    if arena_id is not None and fold.arena(arena_id) is None:
        seen = _seen(fold if view else None)
        raise NotFound(f"arena {arena_id!r} is not commissioned{seen}", arena_id=arena_id)


def _seen(fold: LedgerFold | None) -> str:
    """Returns " as of position N" (N: ``fold``'s position), or "" for no fold."""
    return "" if fold is None else f" as of position {fold.position}"


def slice_history(
    hotkey: str, position: int, rows: list[dict[str, Any]], limit: int,
    after: str | None = None, before: str | None = None,
) -> HistoryPage:
    """Returns the page of ``history``'s ``rows`` (of ``hotkey``, as of ``position``) that
    ``ArenaLedger.history_page`` gives for ``limit``, ``after`` and ``before``."""
    _require_page(limit, after, before)
    start = 0
    for name, sid in (("after", after), ("before", before)):
        if sid is not None:
            found = [i for i, row in enumerate(rows) if row["submission_id"] == sid]
            if not found:
                raise _no_history_cursor(name, sid, hotkey)
            start = found[0] + 1 if name == "after" else max(0, found[0] - limit)
            end = start + limit if name == "after" else found[0]
            return _history_page(position, rows[start:end], len(rows), start)
    return _history_page(position, rows[:limit], len(rows), start)


def _history_page(position: int, rows: list[dict[str, Any]], total: int,
                  start: int) -> HistoryPage:
    """Returns the page of ``rows`` at ``start`` of ``total``, with the ids to page on from."""
    previous = rows[0]["submission_id"] if rows and start > 0 else None
    more = bool(rows) and start + len(rows) < total
    return HistoryPage(position, rows, total, start, previous,
                       rows[-1]["submission_id"] if more else None)


def _require_page(limit: int, after: str | None, before: str | None) -> None:
    """Refuses a page of no rows, or one asked to start both after and before a row."""
    if limit < 1:
        raise InvalidInput(f"limit must be at least 1, not {limit}", path="limit")
    if after is not None and before is not None:
        raise InvalidInput("give after or before, not both: a page runs one way from a row",
                           path="before")


def _no_history_cursor(name: str, sid: str, hotkey: str) -> InvalidInput:
    """Returns the error for a page cursor that names no submission of the hotkey."""
    return InvalidInput(
        f"{name}={sid!r} is no submission of hotkey {hotkey!r}: give the whole id of one of "
        "its submissions (the page's links carry one)", path=name)

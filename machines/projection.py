"""Folds the whole ledger, in position order, into every projection the machines define.

``LedgerFold`` routes each event to its stream's machine, adds the cross-stream checks
(intake, claims against the queue and the current commission, resolutions against the
attempt's recorded decision, SLA from the arena's policy) and keeps the projections:
arenas, submissions per arena in arrival-key order, attempts, payments, credits, the queue of
claimable submissions, and the indexes intake reads.

The same code path answers ``decide`` (would this event be refused now?) and ``apply``
(record it): ``decide_batch`` applies a batch with every write journaled, then rolls the
journal back, so a verdict about an atomic append sees the batch's earlier events.

Memory: live submissions and undecided attempts keep their full state. A decided attempt
is reduced to an ``AttemptSummary`` (no windows, looks or audit counts) unless the fold was
built with ``detail=True``; ``refold_attempt`` rebuilds the full state from its stream on
demand for ``explain``. By default a terminal submission keeps its state in memory (about
2 KB with its attempt summary, payment and reward group). Given an ``Archive``
(``ledger.archive.DiskArchive``), the fold moves each submission that becomes terminal,
with everything only it referenced, into the archive after the event that finished it;
then memory follows the live submissions, not the ledger's length. Every rule and query
reads an archived submission back when it needs one (a repeated submission, attempt or
payment id is refused exactly as before; ``submissions``, ``payments``, ``snapshot`` list
archived ones too), so the two kinds of fold answer every question alike. A fold started
with ``seed`` and a ``LiveSource`` (the guard's, from the read models) holds not even the
live submissions at first: the archive gives a live one's record when a rule first reads
it, and the fold loads it then; the queries over live submissions add the ones the source
lists that are still unloaded.
"""

from __future__ import annotations

import marshal
import pickle
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import fields
from itertools import chain
from operator import attrgetter, itemgetter
from typing import Any, NamedTuple, Protocol, TypeVar

from machines import arena as arena_machine
from machines import attempt as attempt_machine
from machines import calibration as calibration_machine
from machines import submission as submission_machine
from machines.arena import ArenaState, Payload
from machines.arithmetic import Decision
from machines.attempt import AttemptState, AttemptSummary, ClaimContext
from machines.calibration import CalibrationState
from machines.control import ControlRow, control_rows
from machines.intake import (
    Admission,
    CreditView,
    FailedRef,
    IntakeContext,
    Rejection,
    epoch_of,
    intake,
)
from machines.payment import CreditState, PaymentState, credit_step, payment_step
from machines.refusal import ABSENT, Refusal
from machines.submission import (
    FAILED,
    HELD,
    LIVE,
    QUEUED,
    TERMINALS,
    ArrivalKey,
    Fee,
    SubmissionContext,
    SubmissionState,
    submission_id_of,
)
from vocabulary.events import (
    ArenaCommissioned,
    ArenaRetired,
    AttemptClaimed,
    AttemptDecided,
    AuditNodeGraded,
    CalibrationConcluded,
    CalibrationStarted,
    CalibrationWindowMeasured,
    ControlRegistered,
    CreditGranted,
    CreditSpent,
    EmissionPolicySet,
    Event,
    HoldReleased,
    IncumbentAdvanced,
    InfrastructureFault,
    PaymentConsumed,
    PaymentReleased,
    QualificationStarted,
    QualityGraded,
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

__all__ = [
    "Archive",
    "Finished",
    "FoldCounts",
    "LedgerFold",
    "LiveSource",
    "Record",
    "Touched",
    "encode_finished",
]

#: What ``consume`` reads: (position, stream, event type, event model).
Record = tuple[int, str, str, Event]

K = TypeVar("K")
V = TypeVar("V")
_MISSING: Any = object()
_PAYMENT, _CREDIT = "payment", "credit"


class _Popped(NamedTuple):
    """Journals a deleted key: its value and where it stood in its dict's order."""

    value: Any
    at: int


def _reinsert(table: dict[Any, Any], key: Any, value: Any, index: int) -> None:
    """Puts ``key`` back at ``index`` of ``table``'s order (in place: the dict is shared)."""
    if index >= len(table):
        table[key] = value
        return
    items = list(table.items())
    items.insert(index, (key, value))
    table.clear()
    table.update(items)


_SUBMISSION_EVENTS = (
    SubmissionHeld, HoldReleased, SubmissionRequeued, SubmissionExpired, QualificationStarted,
)
_ATTEMPT_EVENTS = (
    WindowMeasured, AuditNodeGraded, QualityGraded, InfrastructureFault, AttemptDecided,
)


_ATTEMPT_TABLE = attempt_machine.TABLE
#: The attempt table's moves by (state, event class), as ``Table.step`` finds them.
_ATTEMPT_MOVES = _ATTEMPT_TABLE.by_class
_SUBMISSION_TABLE = submission_machine.TABLE
#: ``tuple.__new__(Cls, values)`` builds a named tuple without its Python-level ``__new__``.
_new_tuple = tuple.__new__

#: One plain SubmissionContext per SLA value (they are immutable, so they can be shared).
_CONTEXTS: dict[int, SubmissionContext] = {}
#: What submission_machine.step passes when given no context.
_NO_CONTEXT = SubmissionContext()


class Archive(Protocol):
    """Keeps records (bytes) out of memory and gives them back (``ledger.archive.DiskArchive``).

    ``put`` keeps a record under (space, key), with a ``tag`` to list it by and the
    ``links`` (space, name) it can also be found under; ``link`` names one more; ``get``,
    ``target``, ``values`` and ``links`` read them back (None when absent). ``might_hold``
    answers False when (space, key) certainly names neither (a filter in memory): the fold
    asks it first about the new ids most events carry.
    """

    def put(
        self,
        space: str,
        key: str,
        value: bytes,
        tag: str = "",
        links: Sequence[tuple[str, str]] = (),
    ) -> None: ...

    def link(self, space: str, key: str, target: str) -> None: ...

    def get(self, space: str, key: str) -> bytes | None: ...

    def target(self, space: str, key: str) -> str | None: ...

    def might_hold(self, space: str, key: str) -> bool: ...

    def values(self, space: str, tag: str | None = None) -> Iterator[bytes]: ...

    def links(self, space: str) -> Iterator[tuple[str, str]]: ...

    def close(self) -> None: ...


class LiveSource(Protocol):
    """Lists the live submissions a lazily seeded fold has not loaded (``LedgerFold.seed``'s
    ``source``; the read models, ``services.seeded_fold``).

    ``states`` returns the states of the live submissions of ``arena_id`` (every arena when
    None) whose status is one of ``statuses`` and, when ``arrived_by`` is given, whose arrival
    block is at most that, in arrival-key order, the first ``limit`` when given; ``records``
    returns the whole records (state, reward group, attempts, payment, spent credit) of the
    live submissions (of one arena when given). Either may name submissions the fold has
    loaded since: the fold skips those, as its own state is the newer.
    """

    def states(
        self,
        arena_id: str | None,
        statuses: Sequence[str],
        arrived_by: int | None = None,
        limit: int | None = None,
    ) -> list[SubmissionState]: ...

    def records(self, arena_id: str | None = None) -> list[Finished]: ...


class Finished(NamedTuple):
    """Is what the fold archives of a finished submission: everything only it referenced."""

    state: SubmissionState
    group: str | None
    attempts: dict[str, AttemptState | AttemptSummary]
    payment: PaymentState | None
    credit: CreditState | None = None


class _ReadThrough(Mapping[K, V]):
    """Is a mapping over one of the fold's dicts and the archive its older entries went to.

    Subclasses say how to ``get`` one entry and how to list them all (``merged``, for
    ``snapshot``); intake reads them through ``get``.
    """

    def get(self, key: K, default: Any = None) -> Any:
        raise NotImplementedError

    def merged(self) -> dict[K, V]:
        """Returns every entry, archived then in memory (memory wins: it is newer)."""
        raise NotImplementedError

    def __getitem__(self, key: K) -> V:
        found: V | None = self.get(key)
        if found is None:
            raise KeyError(key)
        return found

    def __iter__(self) -> Iterator[K]:
        return iter(self.merged())

    def __len__(self) -> int:
        return len(self.merged())


class _FailedIndex(_ReadThrough[tuple[str, str], FailedRef]):
    """Is intake's ``failed`` on an archiving fold: the fold's dict, then the archive.

    The first FAILED submission of a (commission, content hash) is indexed as it is
    resolved: in the dict (where a batch being decided journals it too) until the fold
    archives the submission, right after that event; from then on as a link "failed" →
    the submission, spelled in its record's row (no row of its own). The reason is the
    archived state's: a FAILED submission's state never changes again.
    """

    def __init__(self, hot: dict[tuple[str, str], FailedRef], archive: Archive) -> None:
        self.hot, self.archive = hot, archive

    def get(self, key: tuple[str, str], default: Any = None) -> Any:
        found = self.hot.get(key)
        if found is not None:
            return found
        name = _failed_name(key)
        archive = self.archive
        if not archive.might_hold("failed", name):  # nearly every intake: a new content hash
            return default
        sid = archive.target("failed", name)
        if sid is None:
            return default
        data = archive.get("submission", sid)
        return default if data is None else _failed_ref(sid, data)

    def merged(self) -> dict[tuple[str, str], FailedRef]:
        archive = self.archive
        merged: dict[tuple[str, str], FailedRef] = {}
        for name, sid in archive.links("failed"):
            data = archive.get("submission", sid)
            if data is not None:
                commission, _, content = name.partition(":")
                merged[(commission, content)] = _failed_ref(sid, data)
        merged.update(self.hot)
        return merged


def _failed_name(key: tuple[str, str]) -> str:
    return f"{key[0]}:{key[1]}"  # two digests: hex, no colon


def _failed_ref(sid: str, data: bytes) -> FailedRef:
    return FailedRef(sid, _decode_finished(data).state.reason or "")


class _Admissions(_ReadThrough[tuple[str, int], int]):
    """Counts admissions per (hotkey, epoch) in memory for recent epochs, archived per epoch.

    Arrivals come in block order give or take, so intake counts the latest epochs; each
    older epoch is one archive record (hotkey → count), read back if a late arrival needs
    it and written again, merged, when it is archived anew.
    """

    def __init__(self, hot: dict[tuple[str, int], int], archive: Archive) -> None:
        self.hot, self.archive = hot, archive
        self.latest = -1  # the latest epoch counted; epochs before latest - 1 are archived

    def get(self, key: tuple[str, int], default: Any = None) -> Any:
        found = self.hot.get(key)
        if found is not None or key[1] >= self.latest - 1:
            return default if found is None else found
        return self._epoch(key[1]).get(key[0], default)

    def counted(self, epoch: int) -> None:
        """Notes an admission in ``epoch``; archives the epochs it leaves behind."""
        if epoch <= self.latest:
            return
        self.latest = epoch
        old: dict[int, dict[str, int]] = {}
        for key in [key for key in self.hot if key[1] < epoch - 1]:
            old.setdefault(key[1], {})[key[0]] = self.hot.pop(key)
        for number, counts in old.items():
            merged = self._epoch(number) | counts
            self.archive.put("admission", str(number), marshal.dumps((number, merged)))

    def _epoch(self, number: int) -> dict[str, int]:
        data = self.archive.get("admission", str(number))
        return {} if data is None else dict(marshal.loads(data)[1])

    def merged(self) -> dict[tuple[str, int], int]:
        merged: dict[tuple[str, int], int] = {}
        for data in self.archive.values("admission"):
            epoch, counts = marshal.loads(data)
            merged.update(((hotkey, epoch), n) for hotkey, n in counts.items())
        merged.update(self.hot)
        return merged


_SUBMISSION_FIELDS = tuple(f.name for f in fields(SubmissionState))
_FEE_AT = _SUBMISSION_FIELDS.index("fee")
#: A state's field values in field order, read from its ``__dict__`` in one C call.
_FIELD_VALUES = itemgetter(*_SUBMISSION_FIELDS)


def encode_finished(record: Finished) -> bytes:
    """Returns a finished submission's record as the bytes an ``Archive`` keeps."""
    return _encode_finished(record)


def _encode_finished(record: Finished) -> bytes:
    """Returns an archived submission as ``marshal`` bytes (pickle is several times slower).

    Every value is a str, int, None or tuple once the named tuples are spelled as plain
    tuples; ``_decode_finished`` rebuilds the same objects. A full ``AttemptState`` (an
    attempt still running when its submission finished, e.g. expired) is pickled inside.
    """
    # itemgetter and indexes rather than a comprehension and attribute reads: this runs
    # once per finished submission, on replay's hot path.
    values = _FIELD_VALUES(record.state.__dict__)
    fee = values[_FEE_AT]
    if fee is not None:
        values = (*values[:_FEE_AT], tuple(fee), *values[_FEE_AT + 1 :])
    attempts: list[tuple[str, Any]] = []
    for aid, state in record.attempts.items():
        if type(state) is AttemptSummary:
            decision = state[7]  # .decision
            plain = None if decision is None else tuple(decision)
            attempts.append((aid, (*state[:7], plain, state[8])))
        else:
            attempts.append((aid, pickle.dumps(state)))
    payment = None if record.payment is None else tuple(record.payment)
    credit = None if record.credit is None else tuple(record.credit)
    return marshal.dumps((values, record.group, attempts, payment, credit))


def _decode_finished(data: bytes) -> Finished:
    """Rebuilds the record ``_encode_finished`` wrote."""
    encoded, group, attempts, payment, credit = marshal.loads(data)
    values = list(encoded)
    if values[_FEE_AT] is not None:
        values[_FEE_AT] = Fee(*values[_FEE_AT])
    decoded: dict[str, AttemptState | AttemptSummary] = {}
    for aid, found in attempts:
        if type(found) is bytes:
            decoded[aid] = pickle.loads(found)
        else:
            *head, decision, decided_block = found
            plain = None if decision is None else Decision(*decision)
            decoded[aid] = AttemptSummary._make((*head, plain, decided_block))
    return Finished(
        SubmissionState(*values),
        group,
        decoded,
        None if payment is None else PaymentState(*payment),
        None if credit is None else CreditState(*credit),
    )


#: What a lookup takes from an archived submission's record.
_STATE_OF = attrgetter("state")
_GROUP_OF = attrgetter("group")
_PAYMENT_OF = attrgetter("payment")
_CREDIT_OF = attrgetter("credit")


def _merged(view: Mapping[K, V]) -> dict[K, V]:
    if isinstance(view, _ReadThrough):
        return view.merged()
    return dict(view)


def _arrival_key_of(state: SubmissionState) -> ArrivalKey:
    return state.arrival_key


def _fee_text(fee: Fee) -> str:
    """Names the fee a submission was admitted with, for a refused fee event's detail."""
    return f"the submission was admitted with fee {fee.kind} {fee.ref!r} of {fee.amount_rao} rao"


class Touched(NamedTuple):
    """Names what one event changed in the fold's projections (``LedgerFold.decide_batch``'s
    observer and ``apply_tracked`` report it): submission ids, attempt ids, payment refs,
    credit ids, arena ids, the keys of the three counters ``counts`` reports, and the payment
    refs and credit ids an admission owes its fee event for (``owed_payment``)."""

    submissions: tuple[str, ...]
    attempts: tuple[str, ...]
    payments: tuple[str, ...]
    credits: tuple[str, ...]
    arenas: tuple[str, ...]
    decided: tuple[str, ...]
    no_decision: tuple[str, ...]
    holds_placed: tuple[str, ...]
    owed_payments: tuple[str, ...]
    owed_credits: tuple[str, ...]


class FoldCounts(NamedTuple):
    """Counts what the folded events did, for ``stats``: decided attempts and NO_DECISION
    verdicts per arena, and holds placed (a submission entering HELD) per hold reason.

    Only events the machines accepted count; a snapshot of the fold carries them, so a
    command restored from one reports the whole ledger without reading it again.
    """

    decided: dict[str, int]
    no_decision: dict[str, int]
    holds_placed: dict[str, int]


def _owed_text(owner: str) -> str:
    """Says whose admission a payment or credit already pays, for a refusal's detail."""
    return f"it pays the fee of submission {owner[:16]}'s admission"


def _refuse(machine: str, state: str, event: Event, code: str, detail: str = "") -> Refusal:
    return Refusal(machine, state, event.event_type, code, detail)


class LedgerFold:
    """Consumes (position, stream, event) in order and keeps every machine's projection."""

    def __init__(
        self,
        *,
        detail: bool = False,
        archive: Archive | None = None,
        admitted: Callable[[dict[tuple[str, int], int]], Mapping[tuple[str, int], int]]
        | None = None,
        failures: Callable[[dict[tuple[str, str], FailedRef]], Mapping[tuple[str, str], FailedRef]]
        | None = None,
    ) -> None:
        self.position = 0
        self.detail = detail
        #: Where finished submissions go (None: they stay in memory, as they always did).
        self.archive = archive
        #: Called with each submission's record as it is archived (before it leaves
        #: memory), so a reader that mirrors the fold (the settlement tracker) takes what
        #: it needs then instead of reading it back from the archive.
        self.archive_listeners: list[Callable[[Finished], None]] = []
        self._attempts_of: dict[str, list[str]] = {}  # live submission -> its attempt ids
        #: The live submissions this fold was seeded without (``seed``'s ``source``): each is
        #: loaded when a rule first reads it; the queries add the ones still unloaded.
        self.live_source: LiveSource | None = None
        self._finished: list[str] = []  # terminal since the event began: archived after it
        self.events = 0
        self.refusals: list[tuple[int, str, Refusal]] = []
        self._arenas: dict[str, ArenaState] = {}
        self._subs: dict[str, SubmissionState] = {}
        self._attempts: dict[str, AttemptState | AttemptSummary] = {}
        self._payments: dict[str, PaymentState] = {}
        self._credits: dict[str, CreditState] = {}
        #: Calibrations by id, in start order (few and small: never archived).
        self._calibrations: dict[str, CalibrationState] = {}
        self._unspent: dict[str, dict[str, int]] = {}
        self._credit_of: dict[str, str] = {}
        self._admissions: dict[tuple[str, int], int] = {}
        self._failed: dict[tuple[str, str], FailedRef] = {}
        #: A submission indexed in ``_failed`` as it finished → its key (archiving only).
        self._failed_of: dict[str, tuple[str, str]] = {}
        # Admissions whose fee event has not come yet: payment ref (or credit id) -> the
        # submission admitted with it. Intake counts such a payment as used and offers no
        # such credit, so one payment or credit cannot admit two submissions before its
        # PaymentConsumed or CreditSpent; the fee event must match the admission. Empty
        # between appends of a well-formed ledger (intake appends both together).
        self._owed_payments: dict[str, str] = {}
        self._owed_credits: dict[str, str] = {}
        #: What intake reads: the dicts themselves, or views that read the archive too.
        self._admitted: Mapping[tuple[str, int], int] = self._admissions
        self._failures: Mapping[tuple[str, str], FailedRef] = self._failed
        if archive is not None:
            self._admitted = _Admissions(self._admissions, archive)
            self._failures = _FailedIndex(self._failed, archive)
        # Read-throughs given by the caller (the store's read models: ``seed``), over the
        # dicts this fold writes: what they find there wins, as it is the newer.
        if admitted is not None:
            self._admitted = admitted(self._admissions)
        if failures is not None:
            self._failures = failures(self._failed)
        self._by_arena: dict[str, dict[str, ArrivalKey]] = {}
        self._queued: dict[str, dict[str, ArrivalKey]] = {}
        self._live: dict[str, ArrivalKey] = {}
        self._group: dict[str, str] = {}
        # FoldCounts' tables: attempts decided and NO_DECISION verdicts per arena, holds
        # placed per reason (written with _put, so a decide_batch leaves them as they were).
        self._decided: dict[str, int] = {}
        self._no_decision: dict[str, int] = {}
        self._holds_placed: dict[str, int] = {}
        self._journal: list[tuple[dict[Any, Any], Any, Any]] | None = None
        #: The last (state, decision) ``derive_decision`` derived: the replay derives an
        #: AttemptDecided's decision to check it, then applies it; states are immutable, so
        #: while the attempt's state is that same object the derivation still holds.
        self._derived: tuple[AttemptState | None, Decision | None] = (None, None)
        self._routes = self._build_routes()
        # Why: the kind and category of an event class are pydantic class attributes, which
        # cost a metaclass lookup on every read; apply and consume read them per event.
        self._dispatch = {
            kind: (kind.event_type, kind.category, handler)
            for kind, handler in self._routes.items()
        }

    def _build_routes(self) -> dict[type[Event], Callable[[str, Any, Payload], Refusal | None]]:
        routes: dict[type[Event], Callable[[str, Any, Payload], Refusal | None]] = {
            ArenaCommissioned: self._on_arena,
            ControlRegistered: self._on_arena,
            IncumbentAdvanced: self._on_arena,
            ArenaRetired: self._on_arena,
            SubmissionArrived: self._on_arrived,
            SubmissionAdmitted: self._on_intake,
            SubmissionRejected: self._on_intake,
            SubmissionResolved: self._on_resolved,
            AttemptClaimed: self._on_claimed,
            PaymentConsumed: self._on_payment,
            PaymentReleased: self._on_payment,
            CreditGranted: self._on_credit,
            CreditSpent: self._on_credit,
            EmissionPolicySet: self._on_settlement,
            SettlementComputed: self._on_settlement,
            CalibrationStarted: self._on_calibration,
            CalibrationWindowMeasured: self._on_calibration,
            CalibrationConcluded: self._on_calibration,
        }
        routes.update({kind: self._on_submission for kind in _SUBMISSION_EVENTS})
        routes.update({kind: self._on_attempt for kind in _ATTEMPT_EVENTS})
        return routes

    # --- entry points ---------------------------------------------------------------------

    def seed(
        self,
        position: int,
        arenas: Iterable[ArenaState],
        live: Iterable[Finished],
        unspent: Iterable[CreditState],
        counts: FoldCounts,
        owed_payments: Mapping[str, str],
        owed_credits: Mapping[str, str],
        source: LiveSource | None = None,
        calibrations: Iterable[CalibrationState] = (),
    ) -> None:
        """Starts an archiving fold at ``position`` from the state a fold of the ledger up to
        there holds in memory, instead of folding every event: the arenas, the live
        submissions (each with its reward group, attempts, payment and spent credit, as a
        ``Finished`` record holds them), the unspent credits in grant order, the counts, and
        the admissions whose fee event has not come. Everything finished is in the archive,
        and the admissions and failures the constructor's read-throughs answer. Only on a
        fold that has folded nothing yet.

        With a ``source``, ``live`` may leave live submissions out: the archive gives each
        one's record when a rule first reads it (the fold then loads it, as ``live`` would
        have), and the queries that list live submissions (``queue``, ``next_claimable``,
        ``expirable``, ``submissions``, ``snapshot``…) add the ones ``source`` lists and the
        fold has not loaded. A write then costs what it touches, not the live state.
        ``calibrations`` are the calibrations as a fold of their streams holds them.
        """
        if self.position or self.events or self.archive is None:
            raise ValueError("seed starts an archiving fold that has folded nothing")
        self.position = self.events = position
        self.live_source = source
        for arena in arenas:
            self._arenas[arena.arena_id] = arena
            # Made here, not by a journaled write: a submission loaded during a decide_batch
            # is indexed in them, and its rollback must not drop the dict it went into.
            self._by_arena.setdefault(arena.arena_id, {})
            self._queued.setdefault(arena.arena_id, {})
        for record in live:
            self._load(record)
        for calibration in calibrations:
            self._calibrations[calibration.calibration_id] = calibration
        for credit in unspent:
            self._credits[credit.credit_id] = credit
            self._unspent.setdefault(credit.hotkey, {})[credit.credit_id] = credit.amount_rao
        self._decided.update(counts.decided)
        self._no_decision.update(counts.no_decision)
        self._holds_placed.update(counts.holds_placed)
        self._owed_payments.update(owed_payments)
        self._owed_credits.update(owed_credits)

    def _load(self, record: Finished) -> None:
        """Puts a live submission's record into memory as a fold of the ledger holds it:
        state, indexes, reward group, attempts, payment and spent credit.

        Not a change of state (the fold held it all along, unloaded), so nothing is
        journaled and a ``decide_batch``'s rollback keeps it: what is in memory already is
        newer and stays. Its arena's index dicts exist from ``seed`` on (a journaled write
        that made one would take the entry with it when rolled back); a submission of an
        arena commissioned since is never unloaded, as this fold made it.
        """
        sub = record.state
        sid = sub.submission_id
        self._subs.setdefault(sid, sub)
        if record.group is not None:
            self._group.setdefault(sid, record.group)
        for aid, attempt in record.attempts.items():
            self._attempts.setdefault(aid, attempt)
        if record.attempts:
            self._attempts_of.setdefault(sid, list(record.attempts))
        if record.payment is not None:
            self._payments.setdefault(record.payment.payment_ref, record.payment)
        if record.credit is not None:
            self._credits.setdefault(record.credit.credit_id, record.credit)
            self._credit_of.setdefault(sid, record.credit.credit_id)
        sub = self._subs[sid]  # the newer, when memory held it already
        key = sub.arrival_key
        self._by_arena.setdefault(sub.arena_id, {}).setdefault(sid, key)
        self._live.setdefault(sid, key)
        if sub.status == QUEUED:
            self._queued.setdefault(sub.arena_id, {}).setdefault(sid, key)

    def apply(
        self, position: int, stream: str, event: Event, payload: Payload = None
    ) -> Refusal | None:
        """Folds one recorded event; a refused one changes nothing and is kept in ``refusals``.

        ``payload`` is the recorded payload (only ArenaCommissioned uses it, for the
        commission digest). Positions must increase; a replay starts from a fresh fold.
        """
        if position <= self.position:
            raise ValueError(f"position {position} is not after {self.position}")
        # _route, inlined: this is the replay's hot path.
        category, _, ident = stream.partition("-")
        route = self._dispatch.get(type(event))
        if route is not None and category == route[1]:
            refusal = route[2](ident, event, payload)
        else:
            refusal = self._route(stream, event, payload)
        self.position = position
        self.events += 1
        if refusal is not None:
            self.refusals.append((position, stream, refusal))
        if self._finished:
            self._archive_finished()
        return refusal

    def consume(self, records: Iterable[Record]) -> int:
        """Folds records (position, stream, type, event) in order; returns how many refused."""
        refusals = self.refusals
        before = len(refusals)
        dispatch, slow = self._dispatch, self._route
        # ``apply``, inlined: this loop is the replay's hot path.
        for position, stream, event_type, event in records:
            route = dispatch.get(type(event))
            kind = event.event_type if route is None else route[0]
            if event_type != kind:
                raise ValueError(f"position {position}: type {event_type} is not {kind}")
            if position <= self.position:
                raise ValueError(f"position {position} is not after {self.position}")
            category, _, ident = stream.partition("-")
            if route is not None and category == route[1]:
                refusal = route[2](ident, event, None)
            else:
                refusal = slow(stream, event, None)
            self.position = position
            self.events += 1
            if self._finished:
                self._archive_finished()
            if refusal is not None:
                refusals.append((position, stream, refusal))
        return len(refusals) - before

    def decide(self, stream: str, event: Event, payload: Payload = None) -> Refusal | None:
        """Returns the refusal ``event`` would get if appended to ``stream`` now, or None."""
        return self.decide_batch([(stream, event, payload)])[0]

    def decide_batch(
        self,
        batch: Sequence[tuple[str, Event, Payload]],
        observe: Callable[[int, Touched], None] | None = None,
    ) -> list[Refusal | None]:
        """Decides the events of one atomic append in order, each seeing the ones before it.

        Nothing changes: every write is journaled and rolled back. Append the batch only
        if every entry is None. ``observe``, when given, is called after each accepted
        event with its index and what it changed (``Touched``), while the fold still shows
        the state after it: the read models are written from there, in the same transaction.
        """
        if self._journal is not None:
            raise RuntimeError("decide_batch is not re-entrant")
        journal: list[tuple[dict[Any, Any], Any, Any]] = []
        self._journal = journal
        try:
            if observe is None:
                return [self._route(stream, event, payload) for stream, event, payload in batch]
            refusals: list[Refusal | None] = []
            for index, (stream, event, payload) in enumerate(batch):
                mark = len(journal)
                refusal = self._route(stream, event, payload)
                refusals.append(refusal)
                if refusal is None:
                    observe(index, self._touched(journal, mark))
            return refusals
        finally:
            # Indexed from the end rather than reversed(): mypyc (an optional compiled
            # build, see setup.py) cannot compile a reversed() of this list's tuples.
            for index in range(len(journal) - 1, -1, -1):
                table, key, old = journal[index]
                if old is _MISSING:
                    del table[key]
                elif type(old) is _Popped:
                    _reinsert(table, key, old.value, old.at)
                else:
                    table[key] = old
            # Only once every write is undone: an interrupt in the loop above leaves the fold
            # ``deciding``, neither re-entered nor kept as a snapshot.
            self._journal = None

    def apply_tracked(
        self, position: int, stream: str, event: Event, payload: Payload = None
    ) -> tuple[Refusal | None, Touched]:
        """Folds one recorded event like ``apply`` and returns what it changed.

        The writes go through the journal (the path ``decide_batch`` takes, which makes the
        same changes) and are kept: a rebuild of the read models folds the ledger this way,
        so it sees exactly what the guard sees when it writes them. Not on an archiving fold.
        """
        if self.archive is not None:
            raise ValueError("apply_tracked folds without an archive")
        if position <= self.position:
            raise ValueError(f"position {position} is not after {self.position}")
        if self._journal is not None:
            raise RuntimeError("apply_tracked is not re-entrant")
        journal: list[tuple[dict[Any, Any], Any, Any]] = []
        self._journal = journal
        try:
            refusal = self._route(stream, event, payload)
        finally:
            self._journal = None
        self.position = position
        self.events += 1
        if refusal is not None:
            self.refusals.append((position, stream, refusal))
        return refusal, self._touched(journal, 0)

    def _touched(self, journal: list[tuple[dict[Any, Any], Any, Any]], mark: int) -> Touched:
        """Returns the keys of the projections written by ``journal[mark:]``, in first-write
        order (the journal records every write a decided or tracked event makes)."""
        spaces = {
            id(self._subs): 0, id(self._attempts): 1, id(self._payments): 2,
            id(self._credits): 3, id(self._arenas): 4, id(self._decided): 5,
            id(self._no_decision): 6, id(self._holds_placed): 7, id(self._owed_payments): 8,
            id(self._owed_credits): 9,
        }
        found: list[dict[Any, None]] = [{} for _ in range(10)]
        for index in range(mark, len(journal)):
            table, key, _ = journal[index]
            space = spaces.get(id(table))
            if space is not None:
                found[space][key] = None
        return Touched(*(tuple(keys) for keys in found))

    @property
    def deciding(self) -> bool:
        """Tells whether a ``decide_batch`` is under way, or was cut short while it undid its
        writes (then the fold is no fold of the ledger, and must not be used again)."""
        return self._journal is not None

    # --- the archive ----------------------------------------------------------------------

    def _archive_finished(self) -> None:
        """Moves the submissions that just became terminal, and all only they held, out.

        Terminal states absorb every later event, so an archived submission is only ever
        read again: by a rule that needs history (a repeated arrival, attempt or payment
        id is refused with the archived state, exactly as before) or by a query.
        """
        archive = self.archive
        assert archive is not None
        subs, attempts_held, attempts_of = self._subs, self._attempts, self._attempts_of
        listeners = self.archive_listeners
        for sid in self._finished:
            sub = subs.pop(sid)
            del self._by_arena[sub.arena_id][sid]
            attempts: dict[str, AttemptState | AttemptSummary] = {}
            links: list[tuple[str, str]] = []
            for aid in attempts_of.pop(sid, ()):
                state = attempts_held.pop(aid, None)
                if state is not None:
                    attempts[aid] = state
                    links.append(("attempt", aid))
            payment = None
            fee = sub.fee
            ref = fee.ref if fee is not None and fee.kind == "payment" else sub.payment_ref
            if ref is not None:
                found = self._payments.get(ref)
                if found is not None and found.submission_id == sid:
                    payment = self._payments.pop(ref)
                    links.append(("payment", ref))
            credit = None
            credit_id = self._credit_of.pop(sid, None)
            if credit_id is not None:
                credit = self._credits.pop(credit_id, None)
                if credit is not None:
                    links.append(("credit", credit.credit_id))
            failed = self._failed_of.pop(sid, None) if self._failed_of else None
            if failed is not None:
                del self._failed[failed]
                links.append(("failed", _failed_name(failed)))
            # Finished(...) without its Python-level __new__ (once per finished submission).
            finished = _new_tuple(
                Finished, (sub, self._group.pop(sid, None), attempts, payment, credit)
            )
            for listener in listeners:
                listener(finished)
            archive.put("submission", sid, _encode_finished(finished), sub.arena_id, links)
        self._finished.clear()

    def finished_record(self, space: str, key: str) -> Finished | None:
        """Returns the archived record a submission id, attempt id, payment ref or credit id
        names (space "submission", "attempt", "payment" or "credit"), or None."""
        archive = self.archive
        if archive is None:
            return None
        if space != "submission":
            sid = archive.target(space, key)
            if sid is None:
                return None
            key = sid
        found = archive.get("submission", key)
        return None if found is None else _decode_finished(found)

    def _arrival_key(self, sid: str) -> ArrivalKey:
        state = self._sub(sid)
        assert state is not None  # only asked of submissions the fold holds
        return state.arrival_key

    def _held(
        self, table: dict[str, V], space: str, key: str, pick: Callable[[Finished], V | None]
    ) -> V | None:
        """Returns ``table[key]``, else what ``pick`` takes from the archived record it names."""
        found = table.get(key)
        if found is None and self.archive is not None and self.archive.might_hold(space, key):
            record = self.finished_record(space, key)
            if record is None:
                return None
            sub = record.state
            if (
                self.live_source is not None
                and sub.status not in TERMINALS
                and sub.submission_id not in self._subs
            ):
                self._load(record)  # a live submission seeded unloaded, read for the first time
            return pick(record)
        return found

    def _sub(self, sid: str) -> SubmissionState | None:
        """Returns a submission's state, live or archived, or None."""
        return self._held(self._subs, "submission", sid, _STATE_OF)

    def _attempt(self, aid: str) -> AttemptState | AttemptSummary | None:
        """Returns an attempt's state, in memory or archived with its submission, or None."""
        return self._held(self._attempts, "attempt", aid, lambda record: record.attempts.get(aid))

    def _credit(self, credit_id: str) -> CreditState | None:
        """Returns a credit's state, in memory or archived with its submission, or None."""
        return self._held(self._credits, "credit", credit_id, _CREDIT_OF)

    def _payment(self, ref: str) -> PaymentState | None:
        """Returns a payment's state, in memory or archived with its submission, or None."""
        return self._held(self._payments, "payment", ref, _PAYMENT_OF)

    # --- journaled writes -----------------------------------------------------------------

    def _put(self, table: dict[K, V], key: K, value: V) -> None:
        if self._journal is not None:
            self._journal.append((table, key, table.get(key, _MISSING)))
        table[key] = value

    def _pop(self, table: dict[K, V], key: K) -> None:
        if key in table:
            if self._journal is not None:
                # Put back where it stood, not at the end: a dict's order is state (a
                # hotkey's unspent credits are offered in grant order), and a decide that
                # changed it would make this fold and a replay admit with different credits.
                self._journal.append((table, key, _Popped(table[key], list(table).index(key))))
            del table[key]

    def _count(self, table: dict[str, int], key: str) -> None:
        """Adds one to ``table[key]`` (journaled, like every write of a decide_batch)."""
        self._put(table, key, table.get(key, 0) + 1)

    def _inner(self, table: dict[str, dict[K, V]], key: str) -> dict[K, V]:
        inner = table.get(key)
        if inner is None:
            inner = {}
            self._put(table, key, inner)
        return inner

    # --- routing --------------------------------------------------------------------------

    def _route(self, stream: str, event: Event, payload: Payload) -> Refusal | None:
        category, _, ident = stream.partition("-")
        if category != event.category:
            machine = event.category or "ledger"
            return _refuse(machine, ABSENT, event, "wrong_stream", f"stream {stream!r}")
        handler = self._routes.get(type(event))
        if handler is None:
            return _refuse(category, ABSENT, event, "event_type_unknown", type(event).__name__)
        return handler(ident, event, payload)

    def _on_settlement(self, ident: str, event: Event, _: Payload) -> Refusal | None:
        # The settlement stream is folded by machines.settlement_rules; here it only has to be
        # the one stream named exactly "settlement".
        if ident:
            return _refuse("settlement", ABSENT, event, "stream_id_mismatch", ident)
        return None

    def _on_arena(self, ident: str, event: Event, payload: Payload) -> Refusal | None:
        if type(event) is ArenaCommissioned and event.arena_id != ident:
            return _refuse("arena", ABSENT, event, "stream_id_mismatch", event.arena_id)
        result = arena_machine.step(self._arenas.get(ident), event, payload)
        if isinstance(result, Refusal):
            return result
        self._put(self._arenas, ident, result)
        return None

    def _on_calibration(self, ident: str, event: Event, _: Payload) -> Refusal | None:
        state = self._calibrations.get(ident)
        arena_digest = None
        if type(event) is CalibrationStarted:
            if event.calibration_id != ident:
                return _refuse("calibration", ABSENT, event, "stream_id_mismatch",
                               event.calibration_id)
            if state is None and event.arena_id is not None:
                arena = self._arenas.get(event.arena_id)
                if arena is None:
                    return _refuse("calibration", ABSENT, event, "arena_unknown",
                                   event.arena_id)
                sealed = arena.commission.event
                arena_digest = calibration_machine.measured_digest(
                    sealed.engine.model_dump(), sealed.model.model_dump(),
                    sealed.hardware.model_dump())
        result = calibration_machine.step(state, event, arena_digest)
        if isinstance(result, Refusal):
            return result
        self._put(self._calibrations, ident, result)
        return None

    # --- submissions ----------------------------------------------------------------------

    def _store(self, old: SubmissionState | None, new: SubmissionState) -> None:
        if self._journal is not None:
            self._store_journaled(old, new)
            return
        # _store_journaled with plain dict writes: the same changes, without a journal.
        sid, status = new.submission_id, new.status
        self._subs[sid] = new
        if old is None:
            key = new.arrival_key
            by_arena = self._by_arena.get(new.arena_id)
            if by_arena is None:
                by_arena = self._by_arena[new.arena_id] = {}
            by_arena[sid] = key
            self._live[sid] = key
        elif status == old.status:
            return
        elif old.status == QUEUED:
            self._queued[new.arena_id].pop(sid, None)
        if status == QUEUED:
            queued = self._queued.get(new.arena_id)
            if queued is None:
                queued = self._queued[new.arena_id] = {}
            queued[sid] = new.arrival_key
        elif status == HELD:
            self._count(self._holds_placed, str(new.hold_reason))
        if status in TERMINALS:
            self._live.pop(sid, None)
            if self.archive is not None:
                self._finished.append(sid)

    def _store_journaled(self, old: SubmissionState | None, new: SubmissionState) -> None:
        sid = new.submission_id
        self._put(self._subs, sid, new)
        if old is None:
            self._put(self._inner(self._by_arena, new.arena_id), sid, new.arrival_key)
            self._put(self._live, sid, new.arrival_key)
        elif new.status == old.status:
            return
        if old is not None and old.status == QUEUED:
            self._pop(self._queued[new.arena_id], sid)
        if new.status == QUEUED:
            self._put(self._inner(self._queued, new.arena_id), sid, new.arrival_key)
        elif new.status == HELD:
            self._count(self._holds_placed, str(new.hold_reason))
        if new.terminal:
            self._pop(self._live, sid)

    def _context(self, state: SubmissionState | None) -> SubmissionContext:
        arena = None if state is None else self._arenas.get(state.arena_id)
        # arena.commission.params is arena.params, without the property call (per event).
        sla = (
            submission_machine.sla_blocks_default
            if arena is None
            else arena.commission.params.sla_blocks
        )
        context = _CONTEXTS.get(sla)
        if context is None:
            context = _CONTEXTS[sla] = SubmissionContext(sla_blocks=sla)
        return context

    def _on_arrived(self, ident: str, event: SubmissionArrived, _: Payload) -> Refusal | None:
        old: SubmissionState | None = self._subs.get(ident)
        # might_hold first: a new id (nearly every arrival, claim and payment) is then
        # answered in one call, not four (_sub, _held, finished_record, archive.get).
        if old is None and self.archive is not None and self.archive.might_hold(
            "submission", ident
        ):
            old = self._sub(ident)
        if old is not None:
            return submission_machine.decide(old, event)  # the refusal: the stream has started
        arena = self._arenas.get(event.arena_id)
        if event.submission_id != ident:
            return _refuse("submission", ABSENT, event, "stream_id_mismatch", ident[:16])
        if arena is None:
            return _refuse("submission", ABSENT, event, "arena_unknown", event.arena_id)
        if submission_id_of(event) != ident:
            return _refuse("submission", ABSENT, event, "submission_id_mismatch")
        self._store(None, submission_machine.start(event))  # step(None, arrival), inlined
        if self._journal is None:
            self._group[ident] = arena.incumbent_digest  # _put without a journal (hot path)
        else:
            self._put(self._group, ident, arena.incumbent_digest)
        return None

    def _on_submission(self, ident: str, event: Event, _: Payload) -> Refusal | None:
        old: SubmissionState | None = self._subs.get(ident)
        if old is None and self.archive is not None:
            old = self._sub(ident)
        # ``type(...) is``: routes are keyed by the exact class (isinstance on a pydantic
        # class goes through ABCMeta's __instancecheck__ when it fails).
        if type(event) is QualificationStarted:
            claimed = self._attempts.get(event.attempt_id)
            if claimed is None and self.archive is not None:
                claimed = self._attempt(event.attempt_id)
            if claimed is None:
                if old is not None:
                    # Claimed first (its AttemptClaimed names the submission): an attempt id
                    # started unclaimed could later be claimed for another submission, whose
                    # verdict would then resolve this one.
                    return _refuse(
                        "submission", old.status, event, "attempt_not_claimed", event.attempt_id
                    )
            elif claimed.submission_id != ident or claimed.decision is not None:
                # Another submission's attempt, or a decided one whose verdict would be
                # replayed by the next SubmissionResolved.
                status = ABSENT if old is None else old.status
                return _refuse("submission", status, event, "attempt_mismatch", event.attempt_id)
        if old is None:
            return submission_machine.decide(old, event)  # the refusal: no stream yet
        # submission_machine.step less its SubmissionArrived check: none is routed here.
        result = _SUBMISSION_TABLE.step(old, event, self._context(old))
        if isinstance(result, Refusal):
            return result
        self._store(old, result)
        return None

    def _on_resolved(self, ident: str, event: SubmissionResolved, _: Payload) -> Refusal | None:
        old: SubmissionState | None = self._subs.get(ident)
        if old is None and self.archive is not None:
            old = self._sub(ident)
        attempt = self._attempts.get(event.attempt_id)
        if attempt is None and self.archive is not None:
            attempt = self._attempt(event.attempt_id)
        decided = None if attempt is None else attempt.decision
        if old is None:
            return submission_machine.decide(old, event)  # the refusal: no stream yet
        # SubmissionContext(sla, check_resolution=True, attempt_decision=decided), built
        # without its Python-level __new__ (once per resolution).
        context = _new_tuple(SubmissionContext, (self._context(old).sla_blocks, True, decided))
        # submission_machine.step less its SubmissionArrived check: none is routed here.
        result = _SUBMISSION_TABLE.step(old, event, context)
        if isinstance(result, Refusal):
            return result
        assert attempt is not None
        self._store(old, result)
        if result.status == FAILED:
            self._index_failure(result, attempt.commission_digest)
        return None

    def _index_failure(self, sub: SubmissionState, commission: str) -> None:
        key = (commission, sub.content_hash)
        first = self._failures.get(key)
        if first is None or sub.arrival_key < self._arrival_key(first.submission_id):
            self._put(self._failed, key, FailedRef(sub.submission_id, sub.reason or ""))
            if self.archive is not None and self._journal is None:
                # The submission is archived after this event: the entry becomes a link
                # of its record then (_archive_finished), and leaves the dict.
                self._failed_of[sub.submission_id] = key

    # --- intake ---------------------------------------------------------------------------

    def intake_context(
        self, submission: SubmissionState, payment_amount_rao: int | None
    ) -> IntakeContext:
        """Returns the intake context of a submission from the fold's projections.

        ``payment_amount_rao`` is what the chain shows for the submission's payment_ref
        (None: not found); the ledger cannot know it before PaymentConsumed.
        """
        arena = self._arenas[submission.arena_id]
        ref = submission.payment_ref
        paid = None if ref is None else self._payment(ref)
        if paid is not None:
            consumed = {ref: paid.submission_id}
        else:  # admitted with, and its PaymentConsumed still to come: used all the same
            owed = None if ref is None else self._owed_payments.get(ref)
            consumed = {} if owed is None else {ref: owed}
        unspent = self._unspent.get(submission.hotkey)
        taken = self._owed_credits
        credits = [] if not unspent else [
            CreditView(c, a) for c, a in unspent.items() if not taken or c not in taken
        ]
        sid = submission.submission_id
        own = self._credit_of.get(sid)
        if own is not None:
            credits.insert(0, CreditView(own, self._credits[own].amount_rao, sid))
        elif self.archive is not None and sid not in self._subs:
            # Archived: its spent credit left _credit_of and _credits with its record.
            record = self.finished_record("submission", sid)
            spent = None if record is None else record.credit
            if spent is not None:
                credits.insert(0, CreditView(spent.credit_id, spent.amount_rao, sid))
        # IntakeContext(...) without its Python-level __new__ (once per intake).
        return _new_tuple(IntakeContext, (
            arena, payment_amount_rao, consumed, credits, self._admitted, self._failures
        ))

    def intake(
        self, submission_id: str, payment_amount_rao: int | None = None
    ) -> Admission | Rejection:
        """Returns the intake outcome of an ARRIVED submission (what to append next).

        The submission may be archived (finished): the outcome is then the same as a fold that
        keeps everything gives, and appending it is refused the same way.
        """
        sub = self._subs.get(submission_id) or self._sub(submission_id)
        if sub is None:
            raise KeyError(submission_id)
        return intake(sub, self.intake_context(sub, payment_amount_rao))

    def _intake_refusal(self, old: SubmissionState, event: Event) -> Refusal | None:
        if type(event) is SubmissionAdmitted:  # exact: routes are keyed by the class
            fee = event.fee.__dict__  # pydantic's __getattr__ makes attribute reads slow
            kind, amount = fee["kind"], fee["amount_rao"]
            derived = intake(old, self.intake_context(old, amount if kind == "payment" else None))
            recorded: Admission | Rejection = _new_tuple(Admission, (kind, fee["ref"], amount))
        else:
            assert isinstance(event, SubmissionRejected)
            # A rejection for a short payment is the appender's chain observation; every
            # other rule is checked with the payment assumed sufficient.
            fee_rao = self._arenas[old.arena_id].fee_rao
            short = event.reason == "eval_cost_payment_invalid"
            derived = intake(old, self.intake_context(old, 0 if short else fee_rao))
            recorded = Rejection(event.reason)
        if derived != recorded:
            return _refuse(
                "submission", old.status, event, "intake_mismatch", f"intake gives {derived}"
            )
        return self._prepaid_refusal(old, event, recorded)

    def _prepaid_refusal(
        self, old: SubmissionState, event: Event, recorded: Admission | Rejection
    ) -> Refusal | None:
        """Refuses an intake outcome that does not match a fee taken before it: a payment
        consumed, or a credit spent, for the submission ahead of its admission (an order
        intake allows) must be exactly the fee the admission records, and a rejected
        submission must have paid nothing."""
        sid, ref = old.submission_id, old.payment_ref
        paid = None if ref is None else self._payments.get(ref)
        if paid is not None and paid.submission_id == sid:
            taken = f"payment {ref!r} of {paid.amount_rao} rao"
            if recorded == (_PAYMENT, ref, paid.amount_rao):
                return None
        else:
            credit = self._credit_of.get(sid)
            if credit is None:
                return None
            taken = f"credit {credit!r}"
            if type(recorded) is Admission and recorded[:2] == (_CREDIT, credit):
                return None
        return _refuse(
            "submission", old.status, event, "fee_mismatch", f"{taken} was taken for it first"
        )

    def _on_intake(self, ident: str, event: Event, _: Payload) -> Refusal | None:
        old: SubmissionState | None = self._subs.get(ident)
        if old is None and self.archive is not None:
            old = self._sub(ident)
        if old is None:
            return submission_machine.decide(old, event)  # the refusal: no stream yet
        # submission_machine.step less its SubmissionArrived check: none is routed here.
        result = _SUBMISSION_TABLE.step(old, event, _NO_CONTEXT)
        if isinstance(result, Refusal):
            return result
        refusal = self._intake_refusal(old, event)
        if refusal is not None:
            return refusal
        self._store(old, result)
        if type(event) is SubmissionAdmitted:
            fee = result.fee
            if fee is None or fee.kind == "waived":
                pass
            elif fee.kind == "payment":
                # Consumed already (by this one, intake says) when in _payments: a live
                # submission's payment is in memory, so no archive read.
                if fee.ref not in self._payments:
                    self._put(self._owed_payments, fee.ref, ident)
            elif self._credit_of.get(ident) != fee.ref:  # else spent already, on this one
                self._put(self._owed_credits, fee.ref, ident)
            key = (old.hotkey, epoch_of(old.arrival_block))
            admitted = self._admitted.get(key, 0) + 1
            if self._journal is None:
                self._admissions[key] = admitted  # _put without a journal (hot path)
                if type(self._admitted) is _Admissions:
                    self._admitted.counted(key[1])
            else:
                self._put(self._admissions, key, admitted)
        return None

    # --- attempts -------------------------------------------------------------------------

    def _on_claimed(self, ident: str, event: AttemptClaimed, _: Payload) -> Refusal | None:
        existing = self._attempts.get(ident)
        if existing is None and self.archive is not None and self.archive.might_hold(
            "attempt", ident
        ):  # might_hold first: see _on_arrived
            existing = self._attempt(ident)
        if existing is not None:
            return _refuse("attempt", existing.status, event, "stream_already_started")
        fields = event.__dict__  # pydantic's __getattr__ makes attribute reads slow
        if fields["attempt_id"] != ident:
            return _refuse("attempt", ABSENT, event, "stream_id_mismatch", event.attempt_id)
        owed = self._owed_payments or self._owed_credits
        sid = fields["submission_id"]
        if owed and (
            sid in self._owed_payments.values() or sid in self._owed_credits.values()
        ):  # rare: both are empty between the appends of a well-formed ledger
            return _refuse("attempt", ABSENT, event, "fee_unpaid", sid[:16])
        arena = self._arenas.get(fields["arena_id"])
        # ClaimContext(submission, arena) without its Python-level __new__ (per claim).
        context = _new_tuple(ClaimContext, (self._sub(fields["submission_id"]), arena))
        refusal = attempt_machine.decide_claim(event, context)
        if refusal is not None:
            return refusal
        assert arena is not None
        params = arena.commissions[fields["commission_digest"]].params
        opened = attempt_machine.claim(event, params)
        if self._journal is None:
            self._attempts[ident] = opened  # _put without a journal (hot path)
        else:
            self._put(self._attempts, ident, opened)
        if self.archive is not None:  # the attempts to archive with the submission
            self._put(self._attempts_of, sid, [*self._attempts_of.get(sid, ()), ident])
        return None

    def _on_attempt(self, ident: str, event: Event, _: Payload) -> Refusal | None:
        state = self._attempts.get(ident)
        if state is None and self.archive is not None:
            state = self._attempt(ident)
        if type(state) is AttemptState and state.fault is None:
            # attempt_machine.step, less the checks that cannot refuse here: the state
            # exists, has no fault, and AttemptClaimed is routed to _on_claimed.
            move = _ATTEMPT_MOVES.get((state.status, type(event)))
            if move is None:
                # The refusal, or a move not met yet: step finds it and keeps it by class.
                result = _ATTEMPT_TABLE.step(state, event, None)
            elif self._derived[0] is state and type(event) is AttemptDecided:
                # The table's AttemptDecided rule with the decision derive_decision has just
                # derived for this very state (the replay checks it before applying).
                result = attempt_machine.record_decision(state, event, self._derived[1])
            else:
                result = move(state, event, None)
        elif type(state) is AttemptSummary:
            return _refuse("attempt", state.status, event, "terminal_state")
        else:
            assert state is None or isinstance(state, AttemptState)
            result = attempt_machine.step(state, event)
        if isinstance(result, Refusal):
            return result
        assert type(result) is AttemptState
        decision = result.decision
        if decision is not None:  # DECIDED is terminal: this event is the AttemptDecided
            self._count(self._decided, result.arena_id)
            if decision.verdict == "NO_DECISION":
                self._count(self._no_decision, result.arena_id)
        kept = result if decision is None or self.detail else result.summary()
        if self._journal is None:
            self._attempts[ident] = kept  # _put without a journal, inlined (hot path)
        else:
            self._put(self._attempts, ident, kept)
        return None

    # --- payments and credits -------------------------------------------------------------

    def _on_payment(self, ident: str, event: Event, _: Payload) -> Refusal | None:
        state = self._payments.get(ident)
        if state is None and self.archive is not None and self.archive.might_hold(
            "payment", ident
        ):  # might_hold first: see _on_arrived
            state = self._payment(ident)
        if state is None and type(event) is PaymentConsumed:  # exact: routes use the class
            fields = event.__dict__  # pydantic's __getattr__ makes attribute reads slow
            if fields["payment_ref"] != ident:
                return _refuse("payment", ABSENT, event, "stream_id_mismatch", event.payment_ref)
            sub = self._subs.get(fields["submission_id"])
            if sub is None and self.archive is not None:
                sub = self._sub(fields["submission_id"])
            if sub is None:
                return _refuse("payment", ABSENT, event, "submission_unknown")
            if sub.arena_id != fields["arena_id"]:
                return _refuse("payment", ABSENT, event, "arena_mismatch", sub.arena_id)
            fee = sub.fee  # None: not admitted yet (the admission must then name this)
            if fee is None:  # before the admission: the payment its arrival names
                owner = self._owed_payments.get(ident)
                if owner is not None and owner != sub.submission_id:
                    return _refuse("payment", ABSENT, event, "fee_mismatch", _owed_text(owner))
                if sub.payment_ref != ident:
                    return _refuse("payment", ABSENT, event, "fee_mismatch",
                                   f"the submission's arrival names payment {sub.payment_ref!r}")
            elif (
                fee.kind != "payment" or fee.ref != ident or fee.amount_rao != fields["amount_rao"]
            ):
                return _refuse("payment", ABSENT, event, "fee_mismatch", _fee_text(fee))
        result = payment_step(state, event)
        if isinstance(result, Refusal):
            return result
        if self._journal is None:
            self._payments[ident] = result  # _put without a journal (hot path)
        else:
            self._put(self._payments, ident, result)
        if state is None:
            self._pop(self._owed_payments, ident)
        return None

    def _on_credit(self, ident: str, event: Event, _: Payload) -> Refusal | None:
        state = self._credit(ident)
        if isinstance(event, CreditGranted) and state is None and event.credit_id != ident:
            return _refuse("credit", ABSENT, event, "stream_id_mismatch", event.credit_id)
        if isinstance(event, CreditSpent) and state is not None and state.status != "SPENT":
            sub = self._subs.get(event.submission_id)
            if sub is None and self.archive is not None:
                sub = self._sub(event.submission_id)
            if sub is None:
                return _refuse("credit", state.status, event, "submission_unknown")
            if sub.hotkey != state.hotkey:
                return _refuse("credit", state.status, event, "credit_hotkey_mismatch")
            fee = sub.fee  # None: not admitted yet (the admission must then name this)
            if fee is None:  # before the admission: only one that names no payment
                owner = self._owed_credits.get(ident)
                if owner is not None and owner != sub.submission_id:
                    return _refuse("credit", state.status, event, "fee_mismatch", _owed_text(owner))
                if sub.payment_ref is not None:
                    return _refuse("credit", state.status, event, "fee_mismatch",
                                   f"the submission's arrival names payment {sub.payment_ref!r}")
            elif fee.kind != "credit" or fee.ref != ident:
                return _refuse("credit", state.status, event, "fee_mismatch", _fee_text(fee))
        result = credit_step(state, event)
        if isinstance(result, Refusal):
            return result
        self._put(self._credits, ident, result)
        if isinstance(event, CreditGranted):
            self._put(self._inner(self._unspent, result.hotkey), ident, result.amount_rao)
        else:
            assert isinstance(event, CreditSpent)
            self._pop(self._unspent[result.hotkey], ident)
            self._put(self._credit_of, event.submission_id, ident)
            self._pop(self._owed_credits, ident)
        return None

    # --- queries --------------------------------------------------------------------------

    def arena(self, arena_id: str) -> ArenaState | None:
        """Returns an arena's state, or None."""
        return self._arenas.get(arena_id)

    def arenas(self) -> list[ArenaState]:
        """Returns every arena, by arena_id."""
        return [self._arenas[a] for a in sorted(self._arenas)]

    def counts(self) -> FoldCounts:
        """Returns what the folded events did (``FoldCounts``), as copies sorted by key."""
        return FoldCounts(
            dict(sorted(self._decided.items())),
            dict(sorted(self._no_decision.items())),
            dict(sorted(self._holds_placed.items())),
        )

    def submission(self, submission_id: str) -> SubmissionState | None:
        """Returns a submission's state (live or archived), or None."""
        return self._sub(submission_id)

    def submissions(self, arena_id: str) -> list[SubmissionState]:
        """Returns an arena's submissions in arrival-key order, with their status."""
        index = self._by_arena.get(arena_id, {})
        found = [self._subs[sid] for sid in index]
        found += self._unloaded(arena_id, LIVE)
        if self.archive is not None:
            found += [
                _decode_finished(data).state for data in self.archive.values("submission", arena_id)
            ]
        return sorted(found, key=_arrival_key_of)

    def _unloaded(
        self,
        arena_id: str | None,
        statuses: Sequence[str],
        arrived_by: int | None = None,
        limit: int | None = None,
    ) -> list[SubmissionState]:
        """Returns the live submissions ``live_source`` lists that the fold has not loaded
        (``LiveSource.states``; none without a source)."""
        source = self.live_source
        if source is None:
            return []
        subs = self._subs
        found = source.states(arena_id, statuses, arrived_by, limit)
        return [sub for sub in found if sub.submission_id not in subs]

    def live_submissions(self) -> int:
        """Returns how many submissions are not terminal."""
        return len(self._live) + len(self._unloaded(None, LIVE))

    def queue(self, arena_id: str) -> list[SubmissionState]:
        """Returns the arena's claimable (QUEUED) submissions in arrival-key order."""
        index = self._queued.get(arena_id, {})
        found = [self._subs[sid] for sid in index] + self._unloaded(arena_id, (QUEUED,))
        return sorted(found, key=_arrival_key_of)

    def next_claimable(self, arena_id: str) -> SubmissionState | None:
        """Returns the earliest-arriving QUEUED submission of an arena, or None."""
        index = self._queued.get(arena_id)
        found = self._subs[min(index, key=index.__getitem__)] if index else None
        if self.live_source is not None:
            # The source's first queued ones: the loaded among them are at most the arena's
            # loaded submissions, so one more is the earliest unloaded one, if any.
            limit = len(self._by_arena.get(arena_id, ())) + 1
            unloaded = self._unloaded(arena_id, (QUEUED,), limit=limit)[:1]
            if unloaded and (found is None or unloaded[0].arrival_key < found.arrival_key):
                found = unloaded[0]
        return found

    def expirable(self, block: int) -> list[SubmissionState]:
        """Returns the live submissions whose SLA has passed at finalized ``block``."""
        due = []
        for sid in self._live:
            sub = self._subs[sid]
            if submission_machine.sla_due(sub, block, self._context(sub).sla_blocks):
                due.append(sub)
        if self.live_source is not None:
            # SLA per arena: its current commission's, as ``_context`` gives it.
            for arena in self._arenas.values():
                arrived_by = block - arena.commission.params.sla_blocks
                due += self._unloaded(arena.arena_id, LIVE, arrived_by=arrived_by)
        return sorted(due, key=_arrival_key_of)

    def reward_group(self, submission_id: str) -> str | None:
        """Returns the incumbent_digest current when the submission's arrival was recorded."""
        return self._held(self._group, "submission", submission_id, _GROUP_OF)

    def resolution(self, submission_id: str) -> Decision | None:
        """Returns the recorded decision of the submission's current attempt, or None.

        For a resolved submission this carries what SubmissionResolved does not: the
        speedup, pass line and look window (settlement reads the speedup of a PASS).
        """
        sub = self._sub(submission_id)
        if sub is None or sub.attempt_id is None:
            return None
        found = self._attempt(sub.attempt_id)
        return None if found is None else found.decision

    def attempt(self, attempt_id: str) -> AttemptState | AttemptSummary | None:
        """Returns an attempt: full state while live (or with ``detail``), else its summary."""
        return self._attempt(attempt_id)

    def derive_decision(self, attempt_id: str) -> Decision | None:
        """Returns what the attempt's AttemptDecided must carry now, or None."""
        state = self._attempts.get(attempt_id)
        if state is None and self.archive is not None:
            state = self._attempt(attempt_id)
        if state is None:
            return None
        if isinstance(state, AttemptSummary):
            return state.decision
        decision = attempt_machine.derive_decision(state)
        self._derived = (state, decision)  # for the apply of the AttemptDecided that follows
        return decision

    def refold_attempt(self, events: Iterable[Event]) -> AttemptState:
        """Rebuilds an attempt's full state (windows, looks, audit) from its stream's events."""
        stream = iter(events)
        claimed = next(stream)
        if not isinstance(claimed, AttemptClaimed):
            raise ValueError("an attempt stream starts with AttemptClaimed")
        commission = self._arenas[claimed.arena_id].commissions[claimed.commission_digest]
        return attempt_machine.fold(claimed, commission.params, stream)

    def owed_payment(self, payment_ref: str) -> str | None:
        """Returns the submission admitted with this payment before its PaymentConsumed came,
        or None."""
        return self._owed_payments.get(payment_ref)

    def owed_credit(self, credit_id: str) -> str | None:
        """Returns the submission admitted with this credit before its CreditSpent came, or
        None."""
        return self._owed_credits.get(credit_id)

    def payments(self) -> list[PaymentState]:
        """Returns every consumed payment (released ones included), archived ones too."""
        if self.archive is None:
            return list(self._payments.values())
        return list(self._with_archived()["payments"].values())

    def credits(self) -> list[CreditState]:
        """Returns every granted credit (spent or not), archived ones too."""
        if self.archive is None:
            return list(self._credits.values())
        return list(self._with_archived()["credits"].values())

    def payment(self, payment_ref: str) -> PaymentState | None:
        """Returns a consumed payment, or None."""
        return self._payment(payment_ref)

    def credit(self, credit_id: str) -> CreditState | None:
        """Returns a credit, or None."""
        return self._credit(credit_id)

    def finished_records(self, arena_id: str | None = None) -> Iterator[Finished]:
        """Yields the archived records (those of one arena when given); none without archive.

        What the fold keeps in memory (``held_*``) wins over a record's copy: a payment or
        credit read back and changed after its submission was archived is the newer.
        """
        if self.archive is None:
            return
        for data in self.archive.values("submission", arena_id):
            yield _decode_finished(data)

    def held_submissions(self, arena_id: str) -> list[SubmissionState]:
        """Returns the arena's submissions in memory: the live ones (all, without archive),
        with those a lazily seeded fold has not loaded yet."""
        subs = self._subs
        return [subs[sid] for sid in self._by_arena.get(arena_id, ())] + self._unloaded(
            arena_id, LIVE
        )

    def held_payment_refs(self) -> list[str]:
        """Returns the refs of the payments in memory (all of them, without archive)."""
        return list(self._payments)

    def held_credit_ids(self) -> list[str]:
        """Returns the ids of the credits in memory (all of them, without archive)."""
        return list(self._credits)

    def calibration(self, calibration_id: str) -> CalibrationState | None:
        """Returns a calibration, or None."""
        return self._calibrations.get(calibration_id)

    def calibrations(self, arena_id: str | None = None) -> list[CalibrationState]:
        """Returns the calibrations (of one arena when given) in the order they started."""
        return [c for c in self._calibrations.values()
                if arena_id is None or c.arena_id == arena_id]

    def controls(self, arena_id: str) -> list[ControlRow]:
        """Returns the arena's control report (as_expected / unexpected / pending)."""
        arena = self._arenas.get(arena_id)
        return [] if arena is None else control_rows(arena, self.submissions(arena_id))

    def snapshot(self) -> dict[str, Any]:
        """Returns every projection as plain containers (for equality checks and debugging)."""
        merged = self._with_archived()
        return {
            "position": self.position,
            "arenas": dict(self._arenas),
            "submissions": merged["submissions"],
            "attempts": merged["attempts"],
            "payments": merged["payments"],
            "credits": merged["credits"],
            "unspent": {k: dict(v) for k, v in self._unspent.items() if v},
            "owed": {"payments": dict(self._owed_payments), "credits": dict(self._owed_credits)},
            "admissions": _merged(self._admitted),
            "failed": _merged(self._failures),
            "queued": self._queued_keys(),
            "live": {**self._live, **self._unloaded_keys(LIVE)},
            "groups": merged["groups"],
            "counts": self.counts()._asdict(),
            "calibrations": dict(self._calibrations),
        }

    def _unloaded_keys(self, statuses: Sequence[str]) -> dict[str, ArrivalKey]:
        """Returns the arrival keys of the unloaded live submissions in ``statuses``."""
        return {sub.submission_id: sub.arrival_key for sub in self._unloaded(None, statuses)}

    def _queued_keys(self) -> dict[str, dict[str, ArrivalKey]]:
        """Returns the queued submissions' arrival keys per arena, unloaded ones too."""
        queued = {k: dict(v) for k, v in self._queued.items() if v}
        for sub in self._unloaded(None, (QUEUED,)):
            queued.setdefault(sub.arena_id, {})[sub.submission_id] = sub.arrival_key
        return queued

    def _with_archived(self) -> dict[str, dict[str, Any]]:
        """Returns submissions, attempts, groups, payments and credits by id, archived too.

        One pass over the archive (and over the live records a lazily seeded fold has not
        loaded); an entry in memory wins (a payment or an attempt read back and changed
        after its submission was archived is the newer).
        """
        merged: dict[str, dict[str, Any]] = {
            "submissions": dict(self._subs),
            "attempts": dict(self._attempts),
            "groups": dict(self._group),
            "payments": dict(self._payments),
            "credits": dict(self._credits),
        }
        source = self.live_source
        unloaded = [] if source is None else source.records()
        archived = [] if self.archive is None else self.archive.values("submission")
        for record in chain(unloaded, map(_decode_finished, archived)):
            sid = record.state.submission_id
            merged["submissions"].setdefault(sid, record.state)
            if record.group is not None:
                merged["groups"].setdefault(sid, record.group)
            for aid, state in record.attempts.items():
                merged["attempts"].setdefault(aid, state)
            if record.payment is not None:
                merged["payments"].setdefault(record.payment.payment_ref, record.payment)
            if record.credit is not None:
                merged["credits"].setdefault(record.credit.credit_id, record.credit)
        return merged

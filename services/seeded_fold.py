"""Starts the guard's fold from the read models: what the writes decide from, at the cost of
what the write touches, not of the ledger's length nor of its live state.

A fold of the whole ledger that archives finished submissions (``LedgerFold(archive=…)``)
keeps in memory only the arenas, the live submissions with their attempts, payments and
credits, the unspent credits, the counts and the fees admissions still owe; everything else
it reads back from its archive when a rule needs it (a repeated id, a payment released after
its submission finished, the first FAILED submission of a content hash, the admissions of a
hotkey in an epoch). The read models hold all of that, written in the same transactions as
the events. ``seeded_fold`` builds the small part of it in memory (the arenas, folded from
their own streams; the unspent credits, counters and owed fees) and leaves every live
submission in the tables: ``ReadModelArchive`` answers the archive's questions, a live
submission's record included (the fold loads it into memory the first time a rule reads it),
and ``LiveRows`` lists the live submissions the fold has not loaded, for its queue, its
next claimable submission and its expirable ones (indexed queries on ``rm_submissions``). So
the fold decides every event as the fold of the whole ledger does
(``tests/integration/test_seeded_fold.py`` holds them to each other).

The read-throughs answer for the position the fold is at only while nothing newer is
committed: the guard uses such a fold inside the append transaction, after taking the
append lock, and seeds it again whenever the head is not where the fold is.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from ledger import read_models
from ledger.store import EventStore
from machines import attempt as attempt_machine
from machines.arena import ArenaState
from machines.arithmetic import Decision
from machines.attempt import AttemptState, AttemptSummary
from machines.calibration import CalibrationState
from machines.intake import FailedRef, epoch_blocks
from machines.payment import CreditState, PaymentState
from machines.projection import Finished, FoldCounts, LedgerFold, encode_finished
from machines.submission import LIVE, TERMINALS, SubmissionState
from services.projections import state_of
from vocabulary.catalogue import CATALOGUE
from vocabulary.codec import loads
from vocabulary.events import AttemptClaimed, EmissionPolicySet, Event

if TYPE_CHECKING:
    from collections.abc import Sequence

    from sqlalchemy import Connection

__all__ = ["LiveRows", "ReadModelArchive", "seeded_fold"]

Row = dict[str, Any]


class ReadModelArchive:
    """Is the archive of a seeded fold: finished submissions and their records, read from
    the read models through ``conn`` (the guard sets it to the append transaction's)."""

    def __init__(self, store: EventStore, conn: Connection | None = None) -> None:
        self.store = store
        self.conn = conn
        #: Arena states by id, for refolding an attempt still open (set by ``seeded_fold``:
        #: the fold's own arenas as they stand, those commissioned after seeding too).
        self.arenas: Mapping[str, ArenaState] = {}

    def _reader(self) -> _Reading:
        return _Reading(self)

    # -- the Archive protocol ---------------------------------------------------------------

    def put(self, space: str, key: str, value: bytes, tag: str = "",
            links: Sequence[tuple[str, str]] = ()) -> None:
        """Keeps nothing: the read models were written with the events."""

    def link(self, space: str, key: str, target: str) -> None:
        """Keeps nothing: the read models were written with the events."""

    def get(self, space: str, key: str) -> bytes | None:
        """Returns a submission's record (space "submission"), or None: a finished one's, or
        a live one's that the seeded fold has not loaded (it loads it then)."""
        if space != "submission":
            return None
        with self._reader() as reader:
            row = reader.submission(key)
            if row is None:
                return None
            return encode_finished(self._finished(reader, [row])[0])

    def target(self, space: str, key: str) -> str | None:
        """Returns the submission an attempt, payment or credit belongs to, or None."""
        table = _TARGETS.get(space)
        if table is None:
            return None
        with self._reader() as reader:
            row = reader.row(table[0], **{table[1]: key})
        return None if row is None else row["submission_id"]

    def might_hold(self, space: str, key: str) -> bool:
        """Tells whether the tables know the id (no filter in memory: one indexed seek)."""
        if space == "submission":
            with self._reader() as reader:
                return reader.submission(key) is not None
        return self.target(space, key) is not None

    def values(self, space: str, tag: str | None = None) -> Iterator[bytes]:
        """Returns the records of the finished submissions (of arena ``tag`` when given)."""
        if space != "submission":
            return iter(())
        with self._reader() as reader:
            rows = reader.submissions_in(sorted(TERMINALS), tag)
            records = self._finished(reader, rows)
        return iter([encode_finished(record) for record in records])

    def links(self, space: str) -> Iterator[tuple[str, str]]:
        """Lists no links: the read-throughs answer the fold's failures and admissions."""
        return iter(())

    def close(self) -> None:
        """Holds nothing to close."""

    # -- records ----------------------------------------------------------------------------

    def _finished(self, reader: read_models.Reader, rows: list[Row]) -> list[Finished]:
        """Returns each submission's record as the fold archives it: state, reward group,
        attempts, the payment of its fee and the credit it spent."""
        return _records(reader, rows, self.arenas)


_TARGETS = {
    "attempt": ("rm_attempts", "attempt_id"),
    "payment": ("rm_payments", "payment_ref"),
    "credit": ("rm_credits", "credit_id"),
}


class _Reading:
    """Yields a Reader on the archive's connection, or on a connection of its own."""

    def __init__(self, archive: ReadModelArchive) -> None:
        self.archive = archive
        self.own: Any = None

    def __enter__(self) -> read_models.Reader:
        conn = self.archive.conn
        if conn is None:
            self.own = self.archive.store.engine.connect()
            conn = self.own
        return read_models.Reader(conn, 0)

    def __exit__(self, *exc: object) -> None:
        if self.own is not None:
            self.own.close()


def _records(
    reader: read_models.Reader, rows: list[Row], arenas: Mapping[str, ArenaState]
) -> list[Finished]:
    sids = [row["submission_id"] for row in rows]
    attempts: dict[str, dict[str, AttemptState | AttemptSummary]] = {sid: {} for sid in sids}
    found = reader.rows_by("rm_attempts", "submission_id", sids)
    running = _running(reader, [row["attempt_id"] for row in found if row["verdict"] is None],
                       arenas)
    for row in found:
        attempts[row["submission_id"]][row["attempt_id"]] = (
            running[row["attempt_id"]] if row["verdict"] is None else _summary(row)
        )
    payments: dict[str, list[PaymentState]] = {}
    for row in reader.rows_by("rm_payments", "submission_id", sids):
        payments.setdefault(row["submission_id"], []).append(_payment(row))
    credits: dict[str, CreditState] = {
        row["submission_id"]: _credit(row)
        for row in reader.rows_by("rm_credits", "submission_id", sids)
    }
    records = []
    for row in rows:
        sub = state_of(row)
        sid = sub.submission_id
        fee = sub.fee
        ref = fee.ref if fee is not None and fee.kind == "payment" else sub.payment_ref
        payment = next((p for p in payments.get(sid, ()) if p.payment_ref == ref), None)
        records.append(Finished(sub, row["reward_group"], attempts[sid], payment,
                                credits.get(sid)))
    return records


def _summary(row: Row) -> AttemptSummary:
    """Returns a decided attempt as a fold keeps it: its summary."""
    decision = Decision(row["verdict"], row["reason"], row["disposition"], row["speedup"],
                        row["pass_line"], row["look_window"])
    return AttemptSummary(
        row["attempt_id"], row["submission_id"], row["arena_id"], row["commission_digest"],
        row["plan"], row["claimed_block"], row["status"], decision, row["decided_block"],
    )


def _running(
    reader: read_models.Reader, attempt_ids: list[str], arenas: Mapping[str, ArenaState]
) -> dict[str, AttemptState]:
    """Returns the whole state of each attempt not decided yet (windows, looks, audit
    counts), folded from its stream; the streams are read together."""
    events: dict[str, list[Event]] = {aid: [] for aid in attempt_ids}
    decode = CATALOGUE.decode
    rows = reader.stream_events([f"attempt-{aid}" for aid in attempt_ids])
    for _, stream, kind, version, payload in rows:
        events[stream.partition("-")[2]].append(decode(kind, version, loads(payload)))
    running = {}
    for aid, found in events.items():
        claimed = found[0]
        assert isinstance(claimed, AttemptClaimed)
        params = arenas[claimed.arena_id].commissions[claimed.commission_digest].params
        running[aid] = attempt_machine.fold(claimed, params, found[1:])
    return running


def _payment(row: Row) -> PaymentState:
    return PaymentState(row["payment_ref"], row["submission_id"], row["arena_id"],
                        row["amount_rao"], row["status"], row["release_reason"])


def _credit(row: Row) -> CreditState:
    return CreditState(row["credit_id"], row["hotkey"], row["amount_rao"], row["note"],
                       row["status"], row["submission_id"])


class LiveRows:
    """Lists the live submissions of a seeded fold from ``rm_submissions`` (its
    ``LiveSource``): through the archive's connection, in the fold's arrival-key order."""

    def __init__(self, archive: ReadModelArchive) -> None:
        self.archive = archive

    def states(
        self,
        arena_id: str | None,
        statuses: Sequence[str],
        arrived_by: int | None = None,
        limit: int | None = None,
    ) -> list[SubmissionState]:
        """Returns the states of the submissions in ``statuses`` (of one arena, arrived at
        or before ``arrived_by``, the first ``limit``, when given), in arrival-key order."""
        with self.archive._reader() as reader:
            rows = reader.submissions_arrived(statuses, arena_id, arrived_by, limit)
        return [state_of(row) for row in rows]

    def records(self, arena_id: str | None = None) -> list[Finished]:
        """Returns the records of the live submissions (of one arena when given)."""
        with self.archive._reader() as reader:
            return _records(reader, reader.submissions_in(LIVE, arena_id), self.archive.arenas)


class _ArenasOf(Mapping[str, ArenaState]):
    """Is a fold's arenas as they stand now, by id (``LedgerFold.arena``)."""

    def __init__(self, fold: LedgerFold) -> None:
        self.fold = fold

    def __getitem__(self, arena_id: str) -> ArenaState:
        found = self.fold.arena(arena_id)
        if found is None:
            raise KeyError(arena_id)
        return found

    def __iter__(self) -> Iterator[str]:
        return iter([arena.arena_id for arena in self.fold.arenas()])

    def __len__(self) -> int:
        return len(self.fold.arenas())


class _Admitted(Mapping[tuple[str, int], int]):
    """Counts a hotkey's admissions in an epoch: the fold's own count once it has one, else
    the read models' (submissions of that hotkey and epoch that an admission gave a fee)."""

    def __init__(self, hot: dict[tuple[str, int], int], archive: ReadModelArchive) -> None:
        self.hot, self.archive = hot, archive

    def get(self, key: tuple[str, int], default: Any = None) -> Any:
        found = self.hot.get(key)
        if found is not None:
            return found
        hotkey, epoch = key
        with self.archive._reader() as reader:
            count = reader.admissions(hotkey, epoch * epoch_blocks, (epoch + 1) * epoch_blocks - 1)
        return count if count else default

    def __getitem__(self, key: tuple[str, int]) -> int:
        found = self.get(key)
        if found is None:
            raise KeyError(key)
        return int(found)

    def __iter__(self) -> Iterator[tuple[str, int]]:
        # Every key a whole fold would hold (for ``LedgerFold.snapshot``; no rule iterates).
        with self.archive._reader() as reader:
            arrivals = reader.admitted_arrivals()
        found = {(hotkey, block // epoch_blocks) for hotkey, block in arrivals}
        return iter(sorted(found | set(self.hot)))

    def __len__(self) -> int:
        return sum(1 for _ in self)


class _Failures(Mapping[tuple[str, str], FailedRef]):
    """Finds the first FAILED submission of a (commission, content hash): the fold's own
    entry once it has one, else the earliest-arriving one in the read models."""

    def __init__(self, hot: dict[tuple[str, str], FailedRef], archive: ReadModelArchive) -> None:
        self.hot, self.archive = hot, archive

    def get(self, key: tuple[str, str], default: Any = None) -> Any:
        found = self.hot.get(key)
        if found is not None:
            return found
        commission, content = key
        with self.archive._reader() as reader:
            rows = reader.failed_with(content, commission)
        if not rows:
            return default
        first = min((state_of(row) for row in rows), key=lambda sub: sub.arrival_key)
        return FailedRef(first.submission_id, first.reason or "")

    def __getitem__(self, key: tuple[str, str]) -> FailedRef:
        found = self.get(key)
        if found is None:
            raise KeyError(key)
        return found  # type: ignore[no-any-return]

    def __iter__(self) -> Iterator[tuple[str, str]]:
        # Every key a whole fold would hold (for ``LedgerFold.snapshot``; no rule iterates).
        with self.archive._reader() as reader:
            found = set(reader.failed_keys())
        return iter(sorted(found | set(self.hot)))

    def __len__(self) -> int:
        return sum(1 for _ in self)


def seeded_fold(
    store: EventStore, conn: Connection
) -> tuple[LedgerFold, ReadModelArchive, EmissionPolicySet | None]:
    """Returns a fold at the head ``conn`` sees, started from the read models (which must
    reflect that head), its archive, and the latest EmissionPolicySet."""
    reader = read_models.Reader(conn, read_models.head_position(conn))
    archive = ReadModelArchive(store, conn)
    fold = LedgerFold(
        archive=archive,
        admitted=lambda hot: _Admitted(hot, archive),
        failures=lambda hot: _Failures(hot, archive),
    )
    arenas, calibrations = _arenas(reader)
    archive.arenas = _ArenasOf(fold)
    unspent = [_credit(row) for row in reader.unspent_credits()]
    tables: dict[str, dict[str, int]] = {"decided": {}, "no_decision": {}, "holds_placed": {}}
    for name, key, value in reader.counters():
        tables[name][key] = value
    counts = FoldCounts(tables["decided"], tables["no_decision"], tables["holds_placed"])
    owed: dict[str, dict[str, str]] = {"payment": {}, "credit": {}}
    for kind, ref, sid in reader.owed():
        owed[kind][ref] = sid
    # No live submission is read here: each is loaded when a rule first reads it, and the
    # queries list the unloaded ones from rm_submissions (LiveRows).
    fold.seed(reader.position, arenas.values(), (), unspent, counts, owed["payment"],
              owed["credit"], LiveRows(archive), calibrations)
    policy = None
    found = reader.latest_of_type("EmissionPolicySet")
    if found is not None:
        decoded = CATALOGUE.decode("EmissionPolicySet", found[0], loads(found[1]))
        assert isinstance(decoded, EmissionPolicySet)
        policy = decoded
    return fold, archive, policy


def _arenas(
    reader: read_models.Reader,
) -> tuple[dict[str, ArenaState], list[CalibrationState]]:
    """Folds every arena's own stream (its commissions, controls, incumbent, retirement)
    and every calibration's, read in one query: arena events touch nothing but their arena,
    and a calibration reads nothing but its arena's commission as it stood, so one fold of
    all their streams in position order holds each as a fold of the ledger does."""
    fold = LedgerFold()
    decode = CATALOGUE.decode
    streams = [f"arena-{arena_id}" for arena_id in reader.arena_ids()]
    streams += reader.streams_of_type("CalibrationStarted")
    for position, stream, kind, version, data in reader.stream_events(streams):
        payload = loads(data)
        fold.apply(position, stream, decode(kind, version, payload), payload)
    return {arena.arena_id: arena for arena in fold.arenas()}, fold.calibrations()

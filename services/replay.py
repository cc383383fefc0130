"""Replays a ledger from nothing and re-derives every recorded decision and settlement.

Replay is how a second validator checks a first one: it reads the events in position order
(from a store or an exported bundle), recomputes the hash chain, folds every machine from
an empty state, and compares each recorded AttemptDecided, SubmissionResolved and
SettlementComputed with what the machines derive at that point, field by field. The first
divergence is reported with its position, stream, field, recorded and recomputed values.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from operator import attrgetter
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson
from pydantic import ValidationError

from ledger import read_models
from ledger.archive import DiskArchive
from ledger.chain import GENESIS_HASH, Row, chained
from ledger.records import RecordedEvent
from ledger.verify import head_and_last_position, raw_rows
from machines.projection import LedgerFold
from services.gc_pause import CollectorPaused, ticks_between_freezes
from services.projections import check
from services.settlements import SettlementTracker
from vocabulary.catalogue import CATALOGUE
from vocabulary.codec import loads
from vocabulary.errors import InvalidInput, LedgerError
from vocabulary.events import (
    AttemptDecided,
    EmissionPolicySet,
    Event,
    SettlementComputed,
    SubmissionResolved,
)
from vocabulary.fields import is_digest

if TYPE_CHECKING:
    from sqlalchemy import Connection

    from ledger.store import EventStore

__all__ = [
    "Divergence",
    "ReplayReport",
    "Row",
    "decoded_rows",
    "decoder",
    "expected_digest",
    "parse_payload",
    "replay_bundle",
    "replay_events",
    "replay_rows",
    "replay_store",
]

_DECISION_FIELDS = ("verdict", "reason", "disposition", "speedup", "pass_line", "look_window")


@dataclass(frozen=True)
class Divergence:
    """Names the first place where the recorded ledger and the recomputation part."""

    position: int
    stream: str
    type: str
    field: str
    recorded: Any
    recomputed: Any
    code: str

    def to_json(self) -> dict[str, Any]:
        """Returns the divergence as a JSON-ready object."""
        return {
            "position": self.position,
            "stream": self.stream,
            "type": self.type,
            "field": self.field,
            "recorded": self.recorded,
            "recomputed": self.recomputed,
            "code": self.code,
        }


@dataclass(frozen=True)
class ReadModelCheck:
    """Says how a replayed store's read models stand: ``ok`` and in words."""

    ok: bool
    detail: str


@dataclass
class ReplayReport:
    """Sums up a replay: counts, the last settlement digest and the first divergence."""

    events: int = 0
    verdicts_checked: int = 0
    resolutions_checked: int = 0
    settlements_checked: int = 0
    last_position: int = 0
    head_hash: str = GENESIS_HASH
    settlement_digest: str | None = None
    divergence: Divergence | None = None
    expected_digest: str | None = None
    notes: list[str] = field(default_factory=list)
    #: ``replay_bundle`` given a verifier: the bundle's own verification
    #: (``ledger.bundle.BundleReport``: signature, Merkle root, digests), else None. Not in
    #: ``to_json``: the report is the same from every source.
    bundle: Any = None
    #: How the store's read models stand against the events (``replay_store`` with
    #: ``check_read_models``), or None: not checked (a bundle, a replay short of the head).
    read_models: ReadModelCheck | None = None

    @property
    def ok(self) -> bool:
        """Tells whether everything matched (and the expected digest, when given)."""
        if self.divergence is not None:
            return False
        if self.read_models is not None and not self.read_models.ok:
            return False
        return self.expected_digest is None or self.expected_digest == self.settlement_digest

    def to_json(self) -> dict[str, Any]:
        """Returns the report as a JSON-ready object."""
        return {
            "ok": self.ok,
            "events": self.events,
            "last_position": self.last_position,
            "head_hash": self.head_hash,
            "verdicts_checked": self.verdicts_checked,
            "resolutions_checked": self.resolutions_checked,
            "settlements_checked": self.settlements_checked,
            "settlement_digest": self.settlement_digest,
            "expected_digest": self.expected_digest,
            "divergence": None if self.divergence is None else self.divergence.to_json(),
        } | ({} if self.read_models is None else {
            "read_models": {"ok": self.read_models.ok, "detail": self.read_models.detail},
        })


def parse_payload(data: bytes) -> Any:
    """Parses recorded payload bytes exactly as ``codec.loads`` does, taking a fast path.

    orjson parses, then re-encodes with sorted keys; when that gives back the very bytes
    (an ASCII document), the bytes are the canonical form of the parsed value: no duplicate
    key (the re-encoding would be shorter), no whitespace, no other spelling of a number
    or string, valid UTF-8, so ``codec.loads`` would have returned an equal value without
    raising. Anything else (non-canonical, duplicate keys, non-ASCII, invalid) takes
    ``codec.loads`` itself, which raises or returns exactly as it always did.
    """
    if data.isascii():
        try:
            value = _orjson_loads(data)
            if type(value) is dict and _orjson_dumps(value, option=_SORT_KEYS) == data:
                return value
        except _ORJSON_ERRORS:
            pass  # e.g. an integer beyond 64 bits, or nesting orjson refuses: the slow path
    return loads(data)


_orjson_loads = orjson.loads
_orjson_dumps = orjson.dumps
_SORT_KEYS = orjson.OPT_SORT_KEYS
_ORJSON_ERRORS = (orjson.JSONDecodeError, orjson.JSONEncodeError)


def decoder() -> Callable[[str, int, Any], Event]:
    """Returns ``CATALOGUE.decode`` with the current-version case looked up once per type.

    For a payload recorded at its type's current version ``CATALOGUE.decode`` upcasts
    nothing and validates with the current model; this calls that model's validator
    directly (``model_validate`` with its defaults). Other versions and unknown types go
    through ``CATALOGUE.decode``, which upcasts or raises as it always does.
    """
    current, slow = _current_validators(), CATALOGUE.decode

    def decode(kind: str, schema_version: int, payload: Any) -> Event:
        found = current.get(kind)
        if found is not None and found[0] == schema_version:
            try:
                event: Event = found[1](payload)
            except ValidationError:  # CATALOGUE.decode raises the SchemaError naming it
                return slow(kind, schema_version, payload)
            return event
        return slow(kind, schema_version, payload)

    return decode


def _current_validators() -> dict[str, tuple[int, Callable[[Any], Event]]]:
    """Returns type → (current schema version, its model's ``validate_python``)."""
    return {
        kind: (version, CATALOGUE.model(kind).__pydantic_validator__.validate_python)
        for kind, version in CATALOGUE.types.items()
    }


def decoded_rows(
    store: EventStore, first: int, last: int, conn: Connection | None = None
) -> Iterator[tuple[tuple[Any, ...], Any, Event]]:
    """Yields (row, payload, event) for positions ``first`` to ``last`` of ``store``.

    The row is the driver's (``ledger.verify.raw_rows``; through ``conn``, inside its
    transaction, when given), the payload parsed as ``RecordedEvent.payload`` parses it
    (orjson) and the event what ``CATALOGUE.decode`` returns for it (``decoder``), without a
    RecordedEvent per event. The bytes are trusted: neither the hash chain nor the
    canonical form is checked (replay checks both). The read runs with the cyclic collector
    paused (``services.gc_pause``; pausing costs a few calls, so a guard's read of one new
    event pays it too). A database failure raises the LedgerError the store raises for
    it. The guard's catch-up and ``stats`` fold the ledger through this.
    """
    if last < first:
        return
    decode, parse = decoder(), _orjson_loads
    with CollectorPaused() as paused:
        for row in raw_rows(store, first, last, conn):
            payload = parse(row[5])
            yield row, payload, decode(row[3], row[4], payload)
            if row[0] % ticks_between_freezes == 0:
                paused.tick()


#: What the replay loop looks up once per event by its type (``_Replayer._kinds``).
_Kind = tuple[
    int,
    Callable[[Any], Event],
    Callable[[int, str, Any, Any], "Divergence | None"] | None,
    tuple[int, set[str]] | None,
    bool,
]


class _Replayer:
    """Folds rows from nothing and checks them; one instance per replay."""

    def __init__(self, report: ReplayReport, archive_finished: bool = True) -> None:

        # Finished submissions go to a temporary file, so memory follows live state; the
        # tracker takes what settlement needs of each one as it leaves (fold.archive_listeners).
        self.fold = LedgerFold(archive=DiskArchive() if archive_finished else None)
        self.settlements = SettlementTracker(self.fold)
        self.report = report
        self.policy: EmissionPolicySet | None = None
        self.checks: dict[type, Callable[[int, str, Any, Any], Divergence | None]] = {
            AttemptDecided: self._check_decided,
            SubmissionResolved: self._check_resolved,
            EmissionPolicySet: self._policy_set,
            SettlementComputed: self._check_settlement,
        }

    def replay(self, rows: Iterable[Row], progress: Callable[[int], None] | None) -> None:
        """Runs ``run`` with the cyclic collector paused (``services.gc_pause``); then closes
        the archive, if any."""
        try:
            with CollectorPaused() as paused:
                self.run(rows, progress, paused.tick)
        finally:
            if self.fold.archive is not None:
                self.fold.archive.close()

    def run(
        self,
        rows: Iterable[Row],
        progress: Callable[[int], None] | None,
        freeze: Callable[[], None],
    ) -> None:
        """Replays ``rows`` in order until the end or the first divergence; calls ``freeze``
        every ``ticks_between_freezes`` positions."""
        report, fold, tracker = self.report, self.fold, self.settlements
        apply, note, checks = fold.apply, tracker.note, self.checks
        # tracker.note, inlined for all but AttemptDecided (a set add per event; ``bound``
        # takes the place of its size check every _FROZEN_EVERY positions).
        touches = tracker.touches
        # decoder(), inlined (a call per event less): the current version's validator,
        # else CATALOGUE.decode (upcasts, or raises). One lookup by the row's type gives
        # the validator and what the loop does with the event (see _kinds).
        kinds, slow = self._kinds(), CATALOGUE.decode
        # parse_payload, inlined likewise: its fast path here, codec.loads for the rest.
        fast_loads, dumps, sort_keys, orjson_error = (
            _orjson_loads, _orjson_dumps, _SORT_KEYS, _ORJSON_ERRORS
        )
        expected, head, counted = 1, GENESIS_HASH, 0
        divergence: Divergence | None = None
        try:
            for row, computed in chained(bytes(32), rows):
                position, stream, _, kind, schema, data, _, _, entry = row
                if position != expected or computed.hex() != entry:
                    divergence = _chain_divergence(row, computed, expected)
                    if progress is not None:
                        progress(position)
                    break
                if type(data) is not bytes:
                    data = bytes(data)  # a driver's memoryview (psycopg 3 gives bytes)
                payload = None
                if data.isascii():
                    try:
                        payload = fast_loads(data)
                        if type(payload) is not dict or dumps(payload, option=sort_keys) != data:
                            payload = None
                    except orjson_error:
                        payload = None
                found = kinds.get(kind)
                try:
                    if payload is None:
                        payload = loads(data)  # not canonical ASCII: codec.loads raises or agrees
                    if found is not None and found[0] == schema:
                        _, validate, check, touch, decided = found
                        try:
                            event = validate(payload)
                        except ValidationError:
                            event = slow(kind, schema, payload)  # the SchemaError naming it
                    else:
                        event = slow(kind, schema, payload)
                        model = type(event)
                        check, touch = checks.get(model), touches.get(model)
                        decided = model is AttemptDecided
                except LedgerError as exc:  # not JSON, an unknown type or version, off schema
                    divergence = _unreadable(position, stream, kind, exc)
                    if progress is not None:
                        progress(position)
                    break
                if check is not None:
                    divergence = check(position, stream, event, payload)
                if divergence is None:
                    # Noted before it is folded (see SettlementTracker.note).
                    if touch is not None:
                        touch[1].add(stream[touch[0] :])
                    elif decided:
                        note(stream, event)
                    refusal = apply(position, stream, event, payload)
                    if refusal is not None:
                        divergence = _refused(position, stream, kind, refusal)
                counted += 1
                expected += 1
                head = entry
                if progress is not None:
                    progress(position)
                if divergence is not None:
                    break
                if position % _FROZEN_EVERY == 0:
                    freeze()
                    tracker.bound()
        finally:
            report.events += counted
            report.last_position = expected - 1
            report.head_hash = head
            report.divergence = divergence

    def _kinds(self) -> dict[str, _Kind]:
        """Returns event type → (current schema version, its model's validator, the check,
        the tracker's touch, whether it is an AttemptDecided) for the replay loop."""
        checks, touches = self.checks, self.settlements.touches
        kinds: dict[str, _Kind] = {}
        for kind, (version, validate) in _current_validators().items():
            model = CATALOGUE.model(kind)
            kinds[kind] = (
                version, validate, checks.get(model), touches.get(model), model is AttemptDecided
            )
        return kinds

    def _check_decided(
        self, position: int, stream: str, event: AttemptDecided, _: Any
    ) -> Divergence | None:
        self.report.verdicts_checked += 1
        derived = self.fold.derive_decision(stream.partition("-")[2])
        recorded = (
            event.verdict,
            event.reason,
            event.disposition,
            event.speedup,
            event.pass_line,
            event.look_window,
        )
        if derived is not None and derived == recorded:
            return None  # equal field by field; _compare names the first field otherwise
        return _compare(position, stream, event, None if derived is None else derived._asdict())

    def _check_resolved(
        self, position: int, stream: str, event: SubmissionResolved, _: Any
    ) -> Divergence | None:
        self.report.resolutions_checked += 1
        attempt = self.fold.attempt(event.attempt_id)
        decision = None if attempt is None else attempt.decision
        if decision is not None and (decision.verdict, decision.reason, decision.disposition) == (
            event.verdict,
            event.reason,
            event.disposition,
        ):
            return None
        return _compare(position, stream, event, None if decision is None else decision._asdict())

    def _policy_set(
        self, _position: int, _stream: str, event: EmissionPolicySet, _: Any
    ) -> Divergence | None:
        self.policy = event
        return None

    def _check_settlement(
        self, position: int, stream: str, event: SettlementComputed, payload: Any
    ) -> Divergence | None:
        self.report.settlements_checked += 1
        try:
            difference = self.settlements.check_recorded(self.policy, event, payload)
        except LedgerError as exc:
            return Divergence(
                position,
                stream,
                event.event_type,
                "settlement",
                None,
                exc.message,
                exc.context.get("reason", exc.code),
            )
        if difference is not None:
            name, recorded, recomputed = difference
            return Divergence(
                position,
                stream,
                event.event_type,
                name,
                recorded,
                recomputed,
                "settlement_mismatch",
            )
        self.report.settlement_digest = event.settlement_digest
        return None


#: Positions between two freezes of the paused collector (``services.gc_pause``), and
#: between two of the settlement tracker's size checks.
_FROZEN_EVERY = ticks_between_freezes


def _compare(
    position: int, stream: str, event: Any, derived: dict[str, Any] | None
) -> Divergence | None:
    kind = event.event_type
    if derived is None:
        return Divergence(
            position, stream, kind, "verdict", event.verdict, None, "decision_not_derivable"
        )
    for name in _DECISION_FIELDS:
        if name not in type(event).model_fields:
            continue
        recorded = getattr(event, name)
        if recorded != derived[name]:
            return Divergence(
                position, stream, kind, name, recorded, derived[name], "decision_mismatch"
            )
    return None


def _chain_divergence(row: Row, computed: bytes, expected: int) -> Divergence:
    """Names a row that is not the next position, or whose entry hash is not its content's."""
    position, stream, kind, entry = row[0], row[1], row[3], row[8]
    if position != expected:
        return Divergence(expected, stream, kind, "position", position, expected, "gap")
    return Divergence(
        position, stream, kind, "entry_hash", entry, computed.hex(), "hash_mismatch"
    )


def _unreadable(position: int, stream: str, kind: str, error: LedgerError) -> Divergence:
    """Names an event whose payload cannot be read as its type: not JSON in canonical form,
    a type or schema version the catalogue does not know, or off its schema (the field the
    error's path names, else the event as a whole)."""
    path = error.context.get("path")
    field = "event"
    if isinstance(path, str) and path.startswith("$.payload."):
        field = path.removeprefix("$.payload.")
    return Divergence(position, stream, kind, field, None, error.message, error.code)


def _refused(position: int, stream: str, kind: str, refusal: Any) -> Divergence:
    """Names the field a fold's refusal points at (the recorded value is the event's)."""
    detail = refusal.detail
    return Divergence(position, stream, kind, _field_of(detail), None, detail, refusal.code)


def _field_of(detail: str) -> str:
    """Returns the field a refusal's detail names ("window: expected 2, got 3" → window).

    Machines spell a detail that concerns one field as ``field: …``; any other detail (an
    id, "intake gives …", "node 3 rank 0") concerns the event as a whole.
    """
    head, colon, _ = detail.partition(":")
    return head if colon and head.isidentifier() else "event"


_row_of = attrgetter(
    "position",
    "stream",
    "version",
    "type",
    "schema_version",
    "payload_bytes",
    "recorded_at",
    "actor",
    "entry_hash",
)


def replay_rows(
    rows: Iterable[Row],
    *,
    expect: str | None = None,
    progress: Callable[[int], None] | None = None,
    archive_finished: bool = True,
) -> ReplayReport:
    """Replays raw rows (position order, from 1); stops at the first divergence.

    With ``archive_finished`` (the default) the fold keeps finished submissions in a
    temporary file (``ledger.archive.DiskArchive``, deleted at the end), so the replay's
    memory follows the ledger's live state rather than its length; False keeps everything
    in memory (faster, and what the benchmark compares against). ``progress``, when
    given, is called with each position as it is done, the one a divergence stops at
    included (the CLI's progress bar).
    """
    report = ReplayReport(expected_digest=expected_digest(expect))
    _Replayer(report, archive_finished).replay(rows, progress)
    return report


def expected_digest(expect: str | None) -> str | None:
    """Returns the settlement digest a replay is asked to reproduce, in lowercase.

    InvalidInput unless it is 64 hex characters (a SHA-256, as settle prints it): anything
    else could never match, and would be reported only after replaying the whole ledger.
    """
    if expect is None:
        return None
    lowered = expect.lower()
    if not is_digest(lowered):
        raise InvalidInput(
            "the expected settlement digest must be 64 hex characters (a SHA-256, as "
            f"settle prints it); got {expect!r}",
            path="--expect",
        )
    return lowered


def replay_events(
    records: Iterable[RecordedEvent],
    *,
    expect: str | None = None,
    progress: Callable[[int], None] | None = None,
    archive_finished: bool = True,
) -> ReplayReport:
    """Replays ``records`` (position order, from 1); stops at the first divergence."""
    return replay_rows(
        map(_row_of, records), expect=expect, progress=progress,
        archive_finished=archive_finished,
    )


def replay_store(
    store: EventStore,
    as_of: int | None = None,
    *,
    expect: str | None = None,
    progress: Callable[[int], None] | None = None,
    archive_finished: bool = True,
    check_read_models: bool = False,
) -> ReplayReport:
    """Replays the store from position 1 to ``as_of`` (default: the head), from raw pages.

    With ``check_read_models``, a replay to the head that matched then holds the ledger's
    read models to a rebuild from the events (``services.projections.check``), and says
    how they stand in ``report.read_models``; a difference makes the report not ok.

    The same replay as ``replay_events(store.read_all(1, to_position=...))``, reading the
    driver's rows a position window at a time (``ledger.verify.raw_rows``) instead of
    building a RecordedEvent per event. The rows must reach that position, and a replay to
    the head must end on the head row's entry hash with nothing stored past it, as
    ``verify`` holds them (``_short_of_head``): a store whose last events were deleted does
    not replay OK to an earlier settlement. A database failure while reading raises the
    LedgerError the store raises for it (e.g. SchemaNotInitialised, StoreUnavailable).
    """
    # The windowed raw-cursor reader verify_chain uses, and its one-statement head read.

    head, stored_max = head_and_last_position(store)
    last = head.position if as_of is None else min(as_of, head.position)
    to_head = last == head.position
    report = replay_rows(
        raw_rows(store, 1, last), expect=expect, progress=progress,
        archive_finished=archive_finished,
    )
    if report.divergence is None:
        report.divergence = _short_of_head(report, last, head if to_head else None, stored_max)
    if check_read_models and to_head and report.divergence is None:
        report.read_models = _read_models_stand(store)
    return report


def _read_models_stand(store: EventStore) -> ReadModelCheck:
    """Says how the store's read models stand against a rebuild from its events."""
    with store.reading() as conn:
        if not read_models.exists(conn):
            return ReadModelCheck(
                True, "none this release reads (the ledger is at a revision before 0007)"
            )
        at, head = read_models.position(conn), read_models.head_position(conn)
        if at != head:
            return ReadModelCheck(
                False, f"behind: they reflect position {at}, the head is {head} (run "
                "`arena-ledger projections rebuild`)",
            )
        found = check(conn)
    if found is None:
        return ReadModelCheck(True, f"match the events up to position {head}")
    return ReadModelCheck(False, f"differ: {found.describe()} (the events win: run "
                                 "`arena-ledger projections rebuild`)")


def _short_of_head(
    report: ReplayReport, last: int, head: Any, stored_max: int
) -> Divergence | None:
    """Names where a store's rows fall short of what its head row says, or None.

    ``last`` is the position the replay was to reach; ``head`` the head row when it was
    to reach the head (else None), and ``stored_max`` the largest stored position, read
    with it. A divergence here concerns no event (its stream and type are empty).
    """
    if report.last_position < last:  # the events from here on are gone
        missing = report.last_position + 1
        return Divergence(missing, "", "", "position", None, missing, "gap")
    if head is None:
        return None
    if report.head_hash != head.entry_hash:
        return Divergence(
            head.position, "", "", "entry_hash", head.entry_hash, report.head_hash,
            "head_mismatch",
        )
    if stored_max > head.position:  # the head row was moved back: events lie past it
        return Divergence(
            head.position + 1, "", "", "position", stored_max, head.position, "head_mismatch"
        )
    return None


def replay_bundle(
    bundle: Path,
    as_of: int | None = None,
    *,
    expect: str | None = None,
    progress: Callable[[int], None] | None = None,
    archive_finished: bool = True,
    verifier: Any = None,
    origin: str | None = None,
) -> ReplayReport:
    """Replays an exported bundle's events.jsonl up to ``as_of`` (default: all of it).

    Each line is checked as ``read_bundle_events`` checks it; a bad line, or an events file
    whose count, head hash, SHA-256 or size is not its manifest's, raises IntegrityError
    naming it (``read_bundle_rows``). Given a ``verifier`` (``ledger.note.Verifier``), the
    bundle is first verified whole as ``verify_bundle`` does (the checkpoint's signature,
    its ``origin``, the Merkle root), before anything is folded; ``report.bundle`` then
    holds that BundleReport.
    """
    from ledger.bundle import read_bundle_rows, verify_bundle

    checked = None if verifier is None else verify_bundle(bundle, verifier, origin=origin)
    rows, _ = read_bundle_rows(bundle, as_of)
    report = replay_rows(
        rows, expect=expect, progress=progress, archive_finished=archive_finished
    )
    report.bundle = checked
    return report

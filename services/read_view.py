"""Answers current-state questions from the read models with indexed queries.

``ArenaLedger`` asks this first: it gives the same answers the fold gives (the suite holds
the two to each other), at the cost of the rows a question touches. A ``ReadView`` is
``None`` where the read models cannot answer: a view as of a position, a ledger whose
read models are behind its head (events appended without the machines' guard), or one at
an older schema revision. The caller then folds the ledger, as before.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from ledger import read_models
from ledger.store import EventStore
from machines.control import ControlRow, control_report
from machines.projection import FoldCounts
from machines.settlement_rules import fee_summary
from machines.submission import SubmissionState
from services.projections import state_of
from vocabulary.events import ControlRegistered

__all__ = ["ReadView", "read_view"]


@contextmanager
def read_view(store: EventStore) -> Iterator[ReadView | None]:
    """Yields a ReadView over one snapshot of ``store``, or None when its read models do
    not reflect the head (or it has none)."""
    with read_models.reader(store) as found:
        yield None if found is None else ReadView(found)


class ReadView:
    """Answers in the machines' types from the read models of one snapshot, at ``position``."""

    def __init__(self, reader: read_models.Reader) -> None:
        self.reader = reader
        self.position = reader.position

    def arena_ids(self) -> list[str]:
        """Returns every commissioned arena's id, sorted."""
        return self.reader.arena_ids()

    def has_arena(self, arena_id: str) -> bool:
        """Tells whether ``arena_id`` was ever commissioned."""
        return self.reader.has_arena(arena_id)

    def submission(self, sid: str) -> SubmissionState | None:
        """Returns a submission's state, or None."""
        row = self.reader.submission(sid)
        return None if row is None else state_of(row)

    def ids_starting_with(self, prefix: str, limit: int = 2) -> list[str]:
        """Returns up to ``limit`` submission ids that start with ``prefix``."""
        return self.reader.ids_starting_with(prefix, limit)

    def count_starting_with(self, prefix: str) -> int:
        """Returns how many submission ids start with ``prefix``."""
        return self.reader.count_starting_with(prefix)

    def submissions(
        self, arena_id: str | None = None, hotkey: str | None = None, status: str | None = None
    ) -> list[SubmissionState]:
        """Returns the submissions the filters select, by arena and then arrival key (the
        order the fold lists them in)."""
        found = [state_of(row) for row in self.reader.submissions(arena_id, hotkey, status)]
        return sorted(found, key=_arena_then_arrival)

    def history(
        self, hotkey: str
    ) -> tuple[list[SubmissionState], dict[str, dict[str, Any]]]:
        """Returns the hotkey's submissions (by arena, then arrival key) and, per submission,
        the attempts it was evaluated in (in order) and the positions of its first and
        latest events (what ``history`` adds to a row): two queries."""
        rows = self.reader.submissions(hotkey=hotkey)
        extra: dict[str, dict[str, Any]] = {
            row["submission_id"]: {"attempt_ids": [], "arrived_position": row["first_position"],
                                   "latest_position": row["last_position"]}
            for row in rows
        }
        for sid, aid in self.reader.qualifications_of(hotkey):
            extra[sid]["attempt_ids"].append(aid)
        subs = sorted((state_of(row) for row in rows), key=_arena_then_arrival)
        return subs, extra

    def controls(self, arena_id: str) -> list[ControlRow]:
        """Returns the arena's control report, as ``LedgerFold.controls`` does."""
        registered = {
            str(row["control_id"]): ControlRegistered(
                control_id=row["control_id"], kind=row["kind"],
                delta_digest=row["delta_digest"], expected_verdict=row["expected_verdict"],
                expected_reason=row["expected_reason"],
            )
            for row in self.reader.controls(arena_id)
        }
        digests = sorted({c.delta_digest for c in registered.values()})
        subs: list[SubmissionState] = []
        if digests:
            rows = self.reader.submissions(arena_id, delta_digests=digests)
            subs = sorted((state_of(row) for row in rows), key=_arena_then_arrival)
        return control_report(registered, subs)

    def fees(self, arena_id: str | None = None) -> dict[str, Any]:
        """Returns the fee summary ``services.settlements.fee_summary`` gives."""
        arenas = self.arena_ids() if arena_id is None else [arena_id]
        summary: dict[str, Any] = fee_summary(arenas, self.reader.fee_sums(arena_id)).to_dict()
        return summary

    def counts(self) -> FoldCounts:
        """Returns what ``LedgerFold.counts`` returns."""
        tables: dict[str, dict[str, int]] = {"decided": {}, "no_decision": {}, "holds_placed": {}}
        for name, key, value in self.reader.counters():
            tables[name][key] = value
        return FoldCounts(*(dict(sorted(tables[n].items())) for n in tables))

    def status_counts(self) -> list[tuple[str, str, int]]:
        """Returns (arena, status, submissions) for every arena and status that has any."""
        return self.reader.status_counts()

    def held_reasons(self) -> dict[str, int]:
        """Returns how many submissions are HELD now, per hold reason."""
        return self.reader.held_reasons()

    def event_types(self) -> dict[str, int]:
        """Returns events per type, as ``EventStore.type_counts`` does at the head."""
        return self.reader.event_types()

    def history_key(self, hotkey: str, sid: str) -> tuple[Any, ...] | None:
        """Returns the key ``history`` orders the hotkey's submission ``sid`` by (arrival
        block, event index, subindex, content hash, arena), or None when ``sid`` is no
        submission of the hotkey."""
        row = self.reader.submission(sid)
        if row is None or row["hotkey"] != hotkey:
            return None
        return (row["arrival_block"], row["arrival_event_index"],
                row["arrival_event_subindex"], row["content_hash"], row["arena_id"])

    def history_page(
        self, hotkey: str, limit: int, after: tuple[Any, ...] | None = None,
        before: tuple[Any, ...] | None = None,
    ) -> tuple[list[SubmissionState], dict[str, dict[str, Any]], int, int]:
        """Returns a page of ``history``: the hotkey's first ``limit`` submissions in
        history order after the key ``after`` (or the last ``limit`` before ``before``), what
        ``history`` adds to their rows, how many submissions the hotkey has, and how many come
        before the page: a few queries, none of them reading another page's attempts."""
        rows = self.reader.history_rows(hotkey, limit, after, before)
        total, skipped = self.reader.history_count(hotkey, after or before)
        if after is not None:
            start = skipped + 1  # ``after``'s own row comes before the page too
        elif before is not None:
            start = skipped - len(rows)  # the page ends where ``before``'s row starts
        else:
            start = 0
        extra: dict[str, dict[str, Any]] = {
            row["submission_id"]: {"attempt_ids": [], "arrived_position": row["first_position"],
                                   "latest_position": row["last_position"]}
            for row in rows
        }
        for sid, aid in self.reader.qualifications_of_submissions(list(extra)):
            extra[sid]["attempt_ids"].append(aid)
        return [state_of(row) for row in rows], extra, total, start


def _arena_then_arrival(sub: SubmissionState) -> tuple[Any, ...]:
    return (sub.arena_id, sub.arrival_key)

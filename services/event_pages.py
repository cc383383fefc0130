"""Browses the recorded events a page at a time: filters checked as they enter, pages read
newest first down an index, one event with the hash it chains to.

``arena-ledger events`` and the dashboard's ``/events`` share the filter checks (a misspelt
type or stream category is refused, not answered "0 events") and the event objects
(``RecordedEvent.to_json``, what ``events --json`` prints). A page costs one or two indexed
queries whatever the ledger's size: nothing here reads the ledger through.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, NamedTuple

from ledger.records import RecordedEvent
from ledger.store import EventStore
from vocabulary.catalogue import CATALOGUE, check_stream_name
from vocabulary.errors import InvalidInput

__all__ = [
    "CLI_NAMES",
    "QUERY_NAMES",
    "EventFilter",
    "EventPage",
    "FilterNames",
    "event_detail",
    "event_page",
]


class FilterNames(NamedTuple):
    """Names the filters as the person typed them, for the errors: options or parameters."""

    stream: str
    stream_prefix: str
    type: str
    #: Between a name and its value in a suggestion: "--stream-prefix x" or "stream_prefix=x".
    joiner: str

    def given(self, name: str, value: str) -> str:
        """Returns how the person would give ``value`` to the filter called ``name``."""
        return f"{name}{self.joiner}{value}"


CLI_NAMES = FilterNames("--stream", "--stream-prefix", "--type", " ")
QUERY_NAMES = FilterNames("stream", "stream_prefix", "type", "=")


@dataclass(frozen=True, slots=True)
class EventFilter:
    """Selects events: one stream, or streams starting with a prefix, of some types, recorded
    in a span of time. Build it with ``checked`` where input enters."""

    stream: str | None = None
    stream_prefix: str | None = None
    types: tuple[str, ...] = ()
    #: recorded_at >= this and < ``recorded_to``, as the ledger spells instants.
    recorded_from: str | None = None
    recorded_to: str | None = None

    @classmethod
    def checked(
        cls,
        stream: str | None = None,
        stream_prefix: str | None = None,
        types: tuple[str, ...] | list[str] | None = None,
        *,
        names: FilterNames = CLI_NAMES,
        recorded_from: str | None = None,
        recorded_to: str | None = None,
    ) -> EventFilter:
        """Returns the filter, refusing one no ledger could match (``InvalidInput`` naming
        the option or parameter): an unknown type, a malformed stream name, a stream or
        prefix of no event type's category."""
        for name in types or ():
            _check_type(name, names)
        if stream is not None:
            _check_whole_stream(stream, names)
            _check_category(stream, names.stream, exact=True)
        if stream_prefix is not None:
            _check_category(stream_prefix, names.stream_prefix, exact=False)
        return cls(stream, stream_prefix, tuple(types or ()), recorded_from, recorded_to)

    def store_args(self) -> dict[str, Any]:
        """Returns the filter as ``EventStore.read_all`` and ``read_back`` take it."""
        return {"stream": self.stream, "stream_prefix": self.stream_prefix,
                "types": self.types or None}

    def time_args(self) -> dict[str, Any]:
        """Returns the span of time as ``EventStore.read_all`` takes it."""
        return {"recorded_from": self.recorded_from, "recorded_to": self.recorded_to}

    def to_json(self) -> dict[str, Any]:
        """Returns the filters a page was read with (None or [] where there is none)."""
        return {"stream": self.stream, "stream_prefix": self.stream_prefix,
                "types": list(self.types)}


def _check_type(name: str, names: FilterNames) -> None:
    """Refuses a type no ledger can hold: a misspelt one would list "0 events"."""
    known = CATALOGUE.types
    if name not in known:
        raise InvalidInput(
            f"unknown event type {name!r}{CATALOGUE.suggestion(name)}; the types are "
            f"{', '.join(sorted(known))}",
            path=names.type,
        )


def _check_whole_stream(stream: str, names: FilterNames) -> None:
    """Refuses a stream that is not a whole stream name, pointing a submission stream cut
    short (its id to the 16 characters the tables show) to the prefix filter."""
    try:
        check_stream_name(stream, names.stream)
    except InvalidInput as exc:
        category, _, ident = stream.partition("-")
        hexadecimal = set(ident) <= set("0123456789abcdef")
        if category != "submission" or not 0 < len(ident) < 64 or not hexadecimal:
            raise
        raise type(exc)(
            f"{exc.message}: {names.stream} takes a whole stream name, and a submission's id "
            f"is 64 hex characters, not {len(ident)}; to list the streams that start with it, "
            f"give {names.given(names.stream_prefix, stream)}",
            **exc.context,
        ) from None


def _check_category(text: str, name: str, *, exact: bool) -> None:
    """Refuses a stream or prefix that no event type's stream can match.

    Every event type belongs to one stream category (``arena-…``, ``settlement``, …), so a
    misspelt category (``sub-x``, prefix ``atempt-``) would list "0 events". A prefix
    matches when it begins a category's streams (``sub``, ``attempt-``) or goes on into
    their ids (``attempt-7``).
    """
    categories = sorted({CATALOGUE.model(kind).category or "" for kind in CATALOGUE.types})
    if exact:  # a name check_stream_name has passed: category-id, or settlement
        matches = text.partition("-")[0] in categories
    else:
        heads = [c if c == "settlement" else f"{c}-" for c in categories]
        matches = any(
            head.startswith(text) or (head != "settlement" and text.startswith(head))
            for head in heads
        )
    if matches:
        return
    shown = ", ".join(c if c == "settlement" else f"{c}-…" for c in categories)
    raise InvalidInput(
        f"no event type belongs to a stream {'named' if exact else 'starting with'} "
        f"{text!r}; the streams are {shown}",
        path=name,
    )


@dataclass(frozen=True, slots=True)
class EventPage:
    """Is one page of events, newest first, and the cursors of the pages beside it."""

    events: list[RecordedEvent]
    filter: EventFilter
    limit: int
    #: The ledger's head when read, and the position the page was read as of (None: the head).
    head: int
    as_of: int | None
    #: ``after=`` of the next newer page, ``before=`` of the next older; None: no such page.
    newer_after: int | None
    older_before: int | None

    def to_json(self) -> dict[str, Any]:
        """Returns the page as the API answers it; its events as ``events --json`` prints
        them."""
        return {
            "order": "newest_first",
            "head": self.head,
            "as_of": self.as_of,
            "filters": self.filter.to_json(),
            "limit": self.limit,
            "newer_after": self.newer_after,
            "older_before": self.older_before,
            "events": [recorded.to_json() for recorded in self.events],
        }


def event_page(
    store: EventStore,
    events: EventFilter,
    limit: int,
    *,
    after: int | None = None,
    before: int | None = None,
    as_of: int | None = None,
) -> EventPage:
    """Returns up to ``limit`` events matching ``events``, newest first.

    Without a cursor, the newest; with ``before=P``, the newest below P (the next older
    page); with ``after=P``, the oldest above P (the next newer page), shown newest first.
    ``as_of=P`` reads the ledger as of position P: nothing above it is listed or linked.
    ``limit`` is a page's (the caller bounds it); the page costs two or three indexed reads.
    """
    if after is not None and before is not None:
        raise InvalidInput("give after= or before=, not both: each names one page", path="before")
    head = store.head().position
    top = head if as_of is None else min(as_of, head)
    filters = events.store_args()
    if after is not None:
        rows = list(store.read_all(after + 1, limit + 1, to_position=top, **filters))
        shown = list(reversed(rows[:limit]))
        newer = shown[0].position if len(rows) > limit else None
        below = shown[-1].position - 1 if shown else min(after, top)
        older = below + 1 if store.read_back(below, 1, **filters) else None
    else:
        upper = top if before is None else min(before - 1, top)
        rows = store.read_back(upper, limit + 1, **filters)
        shown = rows[:limit]
        older = shown[-1].position if len(rows) > limit else None
        above = shown[0].position + 1 if shown else upper + 1
        newer = None
        if before is not None and next(iter(store.read_all(above, 1, to_position=top,
                                                           **filters)), None):
            newer = above - 1
    return EventPage(shown, events, limit, head, as_of, newer, older)


def event_detail(store: EventStore, position: int) -> dict[str, Any]:
    """Returns one event (as ``events --json`` prints it), the entry hash it chains to and
    the head; ``NotFound`` when no event is at ``position``."""
    recorded = store.get(position)
    return {
        "event": recorded.to_json(),
        "previous_hash": store.entry_hash_at(position - 1),
        "head": store.head().position,
    }

"""Follows the ledger: the events that commit after a position, a batch at a time, as they
come (``arena-ledger events --follow`` and the dashboard's live stream).

A poll reads the head (one row) and, only when it has moved, the matching events up to it:
an idle follower costs one indexed read per interval, and a filter that matches nothing
still advances the cursor to the head, so no poll reads an event twice. Appends commit in
position order (the head row is locked while one writes), so a position the head has
passed is final: nothing can appear below it later.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator

from ledger.records import RecordedEvent
from ledger.store import EventStore
from services.event_pages import EventFilter
from vocabulary import limits
from vocabulary.errors import InvalidInput

__all__ = [
    "Follower",
    "follow",
    "follow_batch_events_max",
    "follow_interval_s",
    "follow_interval_s_max",
    "follow_interval_s_min",
]

#: Most events one poll reads (and one batch carries): a follower that starts far behind
#: catches up a bounded batch at a time.
follow_batch_events_max = limits.read_page_events
#: Seconds between polls that found nothing new, by default, and the bounds a caller may
#: ask for: faster than 50 ms is a busy loop on the database, slower than a minute is not
#: following.
follow_interval_s = 0.5
follow_interval_s_min = 0.05
follow_interval_s_max = 60.0


class Follower:
    """Holds a cursor (the last position examined) and reads what matches beyond it.

    The store is handed to each ``poll``, not kept: a server polls from whichever worker
    thread is free, each with a store of its own.
    """

    def __init__(self, after: int, events: EventFilter | None = None,
                 batch_events_max: int = follow_batch_events_max) -> None:
        if after < 0:
            raise InvalidInput(f"after must be 0 or more, not {after}", path="after")
        if batch_events_max < 1:
            raise InvalidInput(f"batch_events_max must be 1 or more, not {batch_events_max}",
                               path="batch_events_max")
        self.position = after
        self.events = events if events is not None else EventFilter()
        self.batch_events_max = batch_events_max

    def poll(self, store: EventStore) -> list[RecordedEvent]:
        """Returns the next matching events after the cursor (at most a batch, oldest first;
        empty when none has committed) and moves the cursor past what it examined."""
        head = store.head().position
        if head <= self.position:
            return []
        batch = list(store.read_all(
            self.position + 1, self.batch_events_max, to_position=head,
            **self.events.store_args(), **self.events.time_args(),
        ))
        # A full batch may have more behind it; a short one examined everything to the head.
        full = len(batch) == self.batch_events_max
        self.position = batch[-1].position if full else head
        return batch


def follow(
    store: EventStore,
    after: int,
    events: EventFilter | None = None,
    *,
    interval_s: float = follow_interval_s,
    batch_events_max: int = follow_batch_events_max,
    sleep: Callable[[float], None] = time.sleep,
) -> Iterator[list[RecordedEvent]]:
    """Yields the matching events after position ``after`` in batches (oldest first, never
    empty), forever: first those already recorded, then each as it commits.

    Between polls that find nothing new it calls ``sleep(interval_s)``; after a full batch
    it polls again at once. It ends only when the caller stops iterating (or ``sleep``
    raises, as Ctrl-C does).
    """
    if not follow_interval_s_min <= interval_s <= follow_interval_s_max:
        raise InvalidInput(f"the interval must be between {follow_interval_s_min} and "
                           f"{follow_interval_s_max} seconds, not {interval_s}",
                           path="interval_s")
    follower = Follower(after, events, batch_events_max)
    while True:
        batch = follower.poll(store)
        if batch:
            yield batch
        if len(batch) < follower.batch_events_max:
            sleep(interval_s)

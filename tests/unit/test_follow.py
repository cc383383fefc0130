"""Following the ledger (services.follow): what is recorded comes first, then each commit in
position order; a poll sleeps only when it found nothing new or less than a batch; filters
hold, and the cursor passes what they leave out, so no event is read twice.

The store is a real SQLite file; the fake ``sleep`` is where time passes: it appends what
"commits meanwhile" and ends the follow by raising, as Ctrl-C does.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from ledger import migrate
from ledger.records import EventDraft, RecordedEvent
from ledger.store import EventStore
from services.event_pages import EventFilter
from services.follow import (
    Follower,
    follow,
    follow_interval_s_max,
    follow_interval_s_min,
)
from vocabulary.errors import InvalidInput


class Stop(Exception):
    """Ends a follow from inside ``sleep``, as KeyboardInterrupt does in the CLI."""


@pytest.fixture
def store(tmp_path: Path) -> Iterator[EventStore]:
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    migrate.upgrade(url)
    with EventStore(url) as opened:
        yield opened


def spent(stream: str, n: int) -> EventDraft:
    return EventDraft(stream, "CreditSpent",
                      {"submission_id": hashlib.sha256(str(n).encode()).hexdigest()})


def retired(stream: str, n: int) -> EventDraft:
    return EventDraft(stream, "ArenaRetired", {"block": n, "reason": f"r{n}"})


def scripted_sleep(store: EventStore, commits: list[list[EventDraft]],
                   log: list[object]) -> Callable[[float], None]:
    """A sleep that logs its interval, appends the next batch of ``commits`` (an empty one
    commits nothing), and stops the follow when none is left."""
    pending = iter(commits)

    def sleep(seconds: float) -> None:
        log.append(("sleep", seconds))
        batch = next(pending, None)
        if batch is None:
            raise Stop
        if batch:
            store.append(batch)

    return sleep


def run(batches: Iterator[list[RecordedEvent]], log: list[object]) -> None:
    with pytest.raises(Stop):
        for batch in batches:
            log.append([r.position for r in batch])


def test_the_recorded_events_come_first_then_each_commit_in_order(store: EventStore) -> None:
    store.append([spent("credit-a", 1), spent("credit-a", 2), spent("credit-b", 3)])
    log: list[object] = []
    sleep = scripted_sleep(store, [[spent("credit-a", 4)], [],
                                   [spent("credit-b", 5), spent("credit-c", 6)]], log)
    run(follow(store, 0, interval_s=0.25, sleep=sleep), log)
    # Nothing new at the second look: a sleep, no empty batch.
    assert log == [[1, 2, 3], ("sleep", 0.25), [4], ("sleep", 0.25), ("sleep", 0.25),
                   [5, 6], ("sleep", 0.25)]


def test_a_full_batch_is_followed_at_once_and_a_short_one_sleeps(store: EventStore) -> None:
    store.append([spent("credit-a", n) for n in range(1, 6)])
    log: list[object] = []
    sleep = scripted_sleep(store, [[spent("credit-a", 6)]], log)
    run(follow(store, 0, batch_events_max=2, sleep=sleep), log)
    assert log == [[1, 2], [3, 4], [5], ("sleep", 0.5), [6], ("sleep", 0.5)]


def test_following_resumes_after_the_position_given(store: EventStore) -> None:
    store.append([spent("credit-a", n) for n in range(1, 5)])
    log: list[object] = []
    run(follow(store, 2, sleep=scripted_sleep(store, [], log)), log)
    assert log == [[3, 4], ("sleep", 0.5)]


def test_filters_hold_while_following(store: EventStore) -> None:
    store.append([spent("credit-a", 1), retired("arena-x", 2), spent("credit-b", 3)])
    log: list[object] = []
    sleep = scripted_sleep(store, [[retired("arena-y", 4), spent("credit-a", 5)],
                                   [spent("credit-b", 6)]], log)
    run(follow(store, 0, EventFilter.checked(stream_prefix="credit-"), sleep=sleep), log)
    assert log == [[1, 3], ("sleep", 0.5), [5], ("sleep", 0.5), [6], ("sleep", 0.5)]

    log.clear()
    only_a = EventFilter.checked(stream="credit-a", types=["CreditSpent"])
    run(follow(store, 0, only_a, sleep=scripted_sleep(store, [], log)), log)
    assert log == [[1, 5], ("sleep", 0.5)]


def test_the_cursor_passes_what_the_filter_leaves_out(store: EventStore) -> None:
    # A filter that matches nothing still moves the cursor to the head: the next poll reads
    # only what committed since, not every unmatched event again.
    follower = Follower(0, EventFilter.checked(types=["ArenaRetired"]), batch_events_max=2)
    store.append([spent("credit-a", n) for n in range(1, 6)])
    assert follower.poll(store) == []
    assert follower.position == 5
    store.append([retired("arena-x", 6), spent("credit-a", 7), retired("arena-x", 8),
                  retired("arena-x", 9)])
    first = follower.poll(store)
    assert [r.position for r in first] == [6, 8]
    assert follower.position == 8  # a full batch: the cursor stops at its last event
    assert [r.position for r in follower.poll(store)] == [9]
    assert follower.position == 9
    assert follower.poll(store) == []


def test_a_time_filter_holds_too(store: EventStore) -> None:
    store.append([spent("credit-a", 1)])
    recorded_at = store.get(1).recorded_at
    follower = Follower(0, EventFilter(recorded_from=recorded_at + "~"))  # after any instant
    assert follower.poll(store) == [] and follower.position == 1
    assert [r.position for r in Follower(0, EventFilter(recorded_to=recorded_at + "~"))
            .poll(store)] == [1]


@pytest.mark.parametrize("interval_s", [0.0, follow_interval_s_min / 2,
                                        follow_interval_s_max + 1])
def test_an_interval_out_of_bounds_is_refused(store: EventStore, interval_s: float) -> None:
    with pytest.raises(InvalidInput) as refused:
        next(follow(store, 0, interval_s=interval_s, sleep=lambda _: None))
    assert refused.value.context["path"] == "interval_s"
    assert str(follow_interval_s_min) in refused.value.message


def test_a_negative_start_or_an_empty_batch_is_refused() -> None:
    with pytest.raises(InvalidInput) as refused:
        Follower(-1)
    assert refused.value.context["path"] == "after"
    with pytest.raises(InvalidInput) as refused:
        Follower(0, batch_events_max=0)
    assert refused.value.context["path"] == "batch_events_max"

"""Fills a store with events across four streams for the operator-path suites (backup,
restore, upgrade).
"""

from __future__ import annotations

from collections.abc import Callable

from ledger.records import EventDraft
from ledger.store import EventStore

Draft = Callable[..., EventDraft]


def fill(store: EventStore, draft: Draft, count: int) -> None:
    streams = ("arena-b", "credit-b", "submission-" + "cd" * 32, "settlement")
    store.append([draft(streams[n % 4], n) for n in range(1, count + 1)])

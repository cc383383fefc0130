"""Proves that concurrent writers on shared streams lose nothing and a tailing reader skips none.

Four writer processes (``reliability_harness.py concurrent-writer``) read the exact versions
of one or two shared streams, then append with those expected versions, for
``ci_concurrency_s`` seconds, so they collide; a tailing reader process polls ``read_all``
from its last position throughout. ``concurrency_campaign`` names every check;
``python bench/reliability.py`` runs it for a minute per backend.
"""

from __future__ import annotations

from pathlib import Path

from reliability_harness import ci_concurrency_s, concurrency_campaign

from ledger.store import EventStore


def test_concurrent_writers_lose_nothing_and_conflicts_write_nothing(
    store: EventStore, tmp_path: Path
) -> None:
    report = concurrency_campaign(store.url, tmp_path, writers=4, seconds=ci_concurrency_s)
    assert report.other_errors == []
    assert report.appends > 0
    assert report.conflicts > 0, "the writers never collided; the test proves nothing"
    assert report.events_lost == 0
    assert report.final_head == report.events == store.head().position
    assert report.tailed_events == report.final_head

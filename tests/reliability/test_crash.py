"""Proves that a writer killed with SIGKILL at any point loses nothing and leaves nothing half.

A child process (``reliability_harness.py crash-writer``, not a fork of pytest) appends
batches of 1 to 300 events, each under its idempotency key, and acknowledges each commit on
a pipe; the parent kills it at seeded random points, reopens the ledger and checks it
(``crash_campaign`` names every check). CI runs ``ci_crash_kills`` kills per backend;
``python bench/reliability.py`` runs 50 or more.
"""

from __future__ import annotations

from reliability_harness import ci_crash_kills, crash_batch, crash_campaign, seed

from ledger.store import EventStore


def test_a_killed_writer_loses_no_acknowledged_batch_and_leaves_none_partial(
    store: EventStore,
) -> None:
    report = crash_campaign(store.url, ci_crash_kills, seed)
    assert report.kills == ci_crash_kills
    assert report.events_lost == 0
    assert report.retries_recorded_once == ci_crash_kills
    assert report.committed_unacknowledged + report.rolled_back == ci_crash_kills
    assert report.final_head == report.acknowledged_events == store.head().position
    assert store.verify().ok


def test_crash_batches_are_deterministic_and_span_the_copy_path() -> None:
    # The retry must send byte-identical content, and some batches must be large enough
    # (64 events or more) to take PostgreSQL's COPY path while being killed.
    first = crash_batch("t", 7)
    assert first == crash_batch("t", 7)
    sizes = [len(crash_batch("t", i)[1]) for i in range(200)]
    assert min(sizes) == 1
    assert max(sizes) >= 64

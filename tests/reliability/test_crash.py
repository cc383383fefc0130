"""Proves that a writer killed with SIGKILL at any point loses nothing and leaves nothing half.

A child process (``reliability_harness.py crash-writer``, not a fork of pytest) appends
batches of 1 to 300 events, each under its idempotency key, and acknowledges each commit on
a pipe; the parent kills it at seeded random points, reopens the ledger and checks it
(``crash_campaign`` names every check). CI runs ``ci_crash_kills`` kills per backend;
``python bench/reliability.py`` runs 50 or more.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
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


_DOMAIN_WRITER = """
import sys
sys.path.append(sys.argv[2])
from bench import fold
from services.arena_ledger import ArenaLedger
items = [(s, e) for _, s, _, e in fold.generate(3_000, 41, 16, emission_share_ppm=150_000)]
with ArenaLedger(sys.argv[1], actor="crash") as ledger:
    for at in range(0, len(items), 20):
        result = ledger.append(items[at:at + 20])
        print(result.positions[-1], flush=True)
"""


@pytest.mark.parametrize("kill_after", [3, 17, 41])
def test_a_writer_killed_mid_append_leaves_read_models_equal_to_its_events(
    store: EventStore, kill_after: int
) -> None:
    """A domain writer (the guard writing read models in each append's transaction) is
    killed after ``kill_after`` acknowledged batches, at a moment no one chooses: the
    read models then equal a rebuild from the events, and the next writer seeds from them."""
    from services import projections
    from services.arena_ledger import ArenaLedger

    root = str(Path(__file__).resolve().parents[2])
    env = {**os.environ, "PYTHONPATH": root}
    child = subprocess.Popen([sys.executable, "-c", _DOMAIN_WRITER, store.url, root],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    assert child.stdout is not None
    acknowledged = 0
    for _ in range(kill_after):
        line = child.stdout.readline()
        assert line, child.stderr.read().decode() if child.stderr else ""
        acknowledged = int(line)
    time.sleep(random.Random(kill_after).uniform(0, 0.05))  # somewhere in the next append
    child.send_signal(signal.SIGKILL)
    child.wait(timeout=30)
    head = store.head().position
    assert head >= acknowledged  # nothing acknowledged is lost
    assert projections.check_ledger(store.url) == head
    with ArenaLedger(store.url, actor="next") as ledger:
        assert ledger.fold.position == head and ledger.guard.seeded

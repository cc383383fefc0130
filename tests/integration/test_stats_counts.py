"""Holds ``stats`` to an independent count of the recorded events, and stats restored from a
fold snapshot to stats folded from nothing, on both backends.

stats reads its machine figures (decided attempts and NO_DECISION verdicts per arena, holds
placed per reason) from ``LedgerFold.counts``, which a fold snapshot carries, and its events
by type from one query. The oracle here is the way stats counted before: a plain fold of every
recorded event, comparing each submission's status before and after each one. The ledger is
bench/fold.py's generated one (arenas, payments, credits, holds, requeues, expiries).
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from snapshot_ledger import (  # same directory, prepend mode
    CUT,
    EVENTS,
    generated_events,
    write_events,
)

from ledger import migrate
from ledger.store import EventStore
from machines.projection import LedgerFold
from services import fold_cache as snapshot
from services import operations as ops
from services.fold_cache import SnapshotCache
from vocabulary.events import AttemptClaimed, AttemptDecided

SEED = 11  # a ledger of its own: NO_DECISIONs in several arenas and a hold before CUT

def _oracle(url: str, last: int) -> dict[str, Any]:
    """Counts stats' machine figures and types by reading every event up to ``last``."""
    fold = LedgerFold()
    types: Counter[str] = Counter()
    decided: Counter[str] = Counter()
    no_decision: Counter[str] = Counter()
    holds: Counter[str] = Counter()
    arena_of: dict[str, str] = {}
    with EventStore(url) as store:
        for recorded in store.read_all(to_position=last):
            event = recorded.event()
            types[recorded.type] += 1
            stream = recorded.stream
            sid = stream.removeprefix("submission-") if stream.startswith("submission-") else ""
            was = fold.submission(sid) if sid else None
            assert fold.apply(recorded.position, stream, event, recorded.payload) is None
            now = fold.submission(sid) if sid else None
            if now is not None and now.status == "HELD" and (was is None or was.status != "HELD"):
                holds[str(now.hold_reason)] += 1
            if isinstance(event, AttemptClaimed):
                arena_of[event.attempt_id] = event.arena_id
            elif isinstance(event, AttemptDecided):
                arena = arena_of[stream.removeprefix("attempt-")]
                decided[arena] += 1
                no_decision[arena] += event.verdict == "NO_DECISION"
    return {
        "types": dict(sorted(types.items())),
        "decided": dict(decided),
        "no_decision": {arena: n for arena, n in no_decision.items() if n},
        "holds_placed": dict(sorted(holds.items())),
    }


def _figures(doc: dict[str, Any]) -> dict[str, Any]:
    return {
        "types": doc["events"]["by_type"],
        "decided": {a: row["decided"] for a, row in doc["no_decision"].items() if row["decided"]},
        "no_decision": {
            a: row["no_decision"] for a, row in doc["no_decision"].items() if row["no_decision"]
        },
        "holds_placed": doc["holds"]["placed"],
    }


@pytest.fixture(scope="module")
def events() -> list[tuple[str, Any]]:
    return generated_events(SEED)


@pytest.fixture
def url(store_url: str, events: list[tuple[str, Any]]) -> str:
    migrate.upgrade(store_url)
    write_events(store_url, events[:CUT])
    return store_url


@pytest.fixture
def loads(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Snapshots are written past 300 folded events; records the position of each restore."""
    monkeypatch.setattr(snapshot, "snapshot_events_min", 300)
    restored: list[int] = []
    load = SnapshotCache.load

    def recording(self: SnapshotCache, *args: Any, **kwargs: Any) -> Any:
        found = load(self, *args, **kwargs)
        restored.append(0 if found is None else found.position)
        return found

    monkeypatch.setattr(SnapshotCache, "load", recording)
    return restored


def test_stats_counts_what_the_recorded_events_did(url: str) -> None:
    oracle = _oracle(url, CUT)
    # The generated ledger exercises every figure: NO_DECISIONs in several arenas, a hold.
    assert len(oracle["no_decision"]) >= 2 and sum(oracle["holds_placed"].values()) >= 1
    doc = ops.stats(url)
    assert _figures(doc) == oracle
    # In code-point order on every backend (a PostgreSQL collation may order otherwise).
    assert list(doc["events"]["by_type"]) == sorted(oracle["types"])
    assert _figures(ops.stats(url, as_of=CUT // 2)) == _oracle(url, CUT // 2)


def test_stats_restored_from_a_snapshot_is_stats_folded_from_nothing(
    url: str, events: list[tuple[str, Any]], tmp_path: Path, loads: list[int]
) -> None:
    directory = tmp_path / "snapshots"
    first = ops.stats(url, snapshot_dir=directory)
    assert loads == [0] and list(directory.iterdir())  # folded from nothing, then written
    assert first == ops.stats(url)
    write_events(url, events[CUT:])

    restored = ops.stats(url, snapshot_dir=directory)

    head = restored["head"]["position"]
    assert loads == [0, CUT] and head >= EVENTS  # restored at CUT, the rest folded on top
    assert restored == ops.stats(url)
    assert _figures(restored) == _oracle(url, head)
    # That command wrote a snapshot at the head: a view before it folds from nothing, one
    # at or past it is restored; each answers as a view folded from nothing does.
    assert ops.stats(url, as_of=head - 1, snapshot_dir=directory) == ops.stats(
        url, as_of=head - 1
    )
    assert ops.stats(url, as_of=10**9, snapshot_dir=directory) == ops.stats(url, as_of=10**9)
    assert loads == [0, CUT, 0, head]

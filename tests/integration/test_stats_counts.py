"""Holds ``stats`` to an independent count of the recorded events, answered from the fold and
from the read models, on both backends.

stats reads its machine figures (decided attempts and NO_DECISION verdicts per arena, holds
placed per reason) from the read models when they stand at the head, else from
``LedgerFold.counts``, and its events by type from one query. The oracle here is the way stats
counted before: a plain fold of every recorded event, comparing each submission's status
before and after each one. The ledger is bench/fold.py's generated one (arenas, payments,
credits, holds, requeues, expiries), appended without the domain guard as the benchmark does,
so the read models stay behind the head until ``projections rebuild``.
"""

from __future__ import annotations

import importlib
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from ledger import migrate
from ledger.records import EventDraft
from ledger.store import EventStore
from machines.projection import LedgerFold
from services import operations as ops
from services.projections import rebuild_ledger
from vocabulary.events import AttemptClaimed, AttemptDecided

_ROOT = Path(__file__).resolve().parents[2]
#: Events generated; the first CUT are written before the ledger grows by the rest.
EVENTS, CUT = 2_400, 2_000

SEED = 11  # a ledger of its own: NO_DECISIONs in several arenas and a hold before CUT


def generated_events(seed: int) -> list[tuple[str, Any]]:
    if str(_ROOT) not in sys.path:
        sys.path.append(str(_ROOT))
    generate = importlib.import_module("bench.fold").generate
    return [(stream, event) for _, stream, _, event in generate(EVENTS, seed, 32, 150_000)]


def write_events(url: str, events: list[tuple[str, Any]]) -> None:
    """Appends ``events`` without the domain guard (the benchmark's way), in batches."""
    with EventStore(url) as store:
        for start in range(0, len(events), 1_000):
            chunk = events[start : start + 1_000]
            store.append([EventDraft.of(stream, event) for stream, event in chunk], actor="t")

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


def test_stats_counts_what_the_recorded_events_did(url: str) -> None:
    oracle = _oracle(url, CUT)
    # The generated ledger exercises every figure: NO_DECISIONs in several arenas, a hold.
    assert len(oracle["no_decision"]) >= 2 and sum(oracle["holds_placed"].values()) >= 1
    doc = ops.stats(url)
    assert _figures(doc) == oracle
    # In code-point order on every backend (a PostgreSQL collation may order otherwise).
    assert list(doc["events"]["by_type"]) == sorted(oracle["types"])
    assert _figures(ops.stats(url, as_of=CUT // 2)) == _oracle(url, CUT // 2)


def test_stats_of_a_grown_ledger_from_the_fold_and_from_the_read_models_count_every_event(
    url: str, events: list[tuple[str, Any]], monkeypatch: pytest.MonkeyPatch
) -> None:
    write_events(url, events[CUT:])

    folded = ops.stats(url)  # the read models stand at position 0: stats folds the ledger

    head = folded["head"]["position"]
    assert head >= EVENTS
    assert _figures(folded) == _oracle(url, head)
    assert rebuild_ledger(url) == head  # now the read models answer at the head
    with monkeypatch.context() as patched:

        def unfolded(fold: LedgerFold) -> Any:
            raise AssertionError("stats folded the ledger; its read models stand at the head")

        patched.setattr(ops, "_fold_figures", unfolded)
        assert ops.stats(url) == folded
    # A view as of a position folds the ledger up to it, whatever the read models hold.
    assert _figures(ops.stats(url, as_of=head - 1)) == _oracle(url, head - 1)
    assert ops.stats(url, as_of=10**9)["head"] == folded["head"]

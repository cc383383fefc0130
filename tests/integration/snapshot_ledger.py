"""Generates and writes the ledger the snapshot and stats suites fold: bench/fold.py's
generated events (arenas, payments, credits, holds, requeues, expiries), appended without
the domain guard as the benchmark does.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from typing import Any

from ledger.records import EventDraft
from ledger.store import EventStore

_ROOT = Path(__file__).resolve().parents[2]
#: Events generated; the first CUT are written before the snapshot, the rest after it.
EVENTS, CUT = 2_400, 2_000


def generated_events(seed: int = 5, events: int = EVENTS) -> list[tuple[str, Any]]:
    if str(_ROOT) not in sys.path:
        sys.path.append(str(_ROOT))
    generate = importlib.import_module("bench.fold").generate
    return [(stream, event) for _, stream, _, event in generate(events, seed, 32, 150_000)]


def write_events(url: str, events: list[tuple[str, Any]]) -> None:
    """Appends ``events`` without the domain guard (the benchmark's way), in batches."""
    with EventStore(url) as store:
        for start in range(0, len(events), 1_000):
            chunk = events[start : start + 1_000]
            store.append([EventDraft.of(stream, event) for stream, event in chunk], actor="t")

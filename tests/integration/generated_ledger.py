"""Builds realistic domain ledgers for the read-model tests from the benchmark's generator.

``bench/fold.py`` yields a ledger the machines accept event by event (payments, credits,
rejections, holds, requeues, expiries, a re-commission); these helpers append it through the
guarded ``ArenaLedger`` in batches, add controls and settlements, and read every answer the
read models give next to what the fold gives (``ArenaLedger(as_of=head)`` folds).
"""

from __future__ import annotations

import importlib
import random
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from sqlalchemy import text

from services.arena_ledger import ArenaLedger
from services.operations import history_at, stats
from vocabulary.events import Event

_ROOT = Path(__file__).resolve().parents[2]

Item = tuple[str, Event]


def generated(events: int, seed: int) -> list[Item]:
    """Returns (stream, event) of a generated ledger of about ``events`` events."""
    if str(_ROOT) not in sys.path:
        sys.path.append(str(_ROOT))
    fold = importlib.import_module("bench.fold")
    # A share of 150,000 ppm per arena: together they fit in the pool, so the ledger settles.
    records = fold.generate(events, seed, 16, emission_share_ppm=150_000)
    return [(stream, event) for _, stream, _, event in records]


def batches(items: Sequence[Item], rng: random.Random, largest: int) -> Iterator[list[Item]]:
    """Splits ``items`` into consecutive batches of 1 to ``largest`` events."""
    at = 0
    while at < len(items):
        size = rng.randint(1, largest)
        yield list(items[at:at + size])
        at += size


def answers(url: str, as_of: int | None = None) -> dict[str, Any]:
    """Returns every current-state answer a query command gives, from the read models
    (``as_of`` None) or from the fold (``as_of`` the head)."""
    with ArenaLedger(url, actor="test", as_of=as_of) as ledger:
        fold_arenas = ledger.fold.arenas() if as_of is not None else None
        arenas = (
            [a.arena_id for a in fold_arenas] if fold_arenas is not None
            else _arena_ids(ledger)
        )
        rows = ledger.submissions()
        hotkeys = sorted({row["hotkey"] for row in rows})
        sids = [row["submission_id"] for row in rows]
        found: dict[str, Any] = {
            "submissions": rows,
            "fees": ledger.fees(),
            "per_arena": {
                arena: {
                    "submissions": ledger.submissions(arena),
                    "fees": ledger.fees(arena),
                    "controls": ledger.controls(arena),
                }
                for arena in arenas
            },
            "by_hotkey": {hotkey: ledger.submissions(hotkey=hotkey) for hotkey in hotkeys[:6]},
            "by_status": {s: ledger.submissions(status=s) for s in ("QUEUED", "FAILED", "HELD")},
            "explained": [ledger.explain_submission(s) for s in sids[:: max(1, len(sids) // 8)]],
            "prefixes": [ledger.explain_submission(sid[:12]) for sid in sids[:3]],
        }
    found["history"] = {h: history_at(url, h, as_of)[1] for h in hotkeys[:4]}
    figures = stats(url, as_of)
    found["stats"] = {k: figures[k] for k in ("events", "submissions", "holds", "no_decision")}
    return found


def reward_statuses(url: str) -> tuple[dict[str, str], dict[str, str]]:
    """Returns {submission: reward status} of every PASS as the read models keep it
    (``rm_submissions.reward_status``) and as a fold of every event assesses it."""
    with ArenaLedger(url, actor="test") as ledger:
        head = ledger.store.head().position
        with ledger.store.reading() as conn:
            stored = {str(sid): str(status) for sid, status in conn.execute(text(
                "SELECT submission_id, reward_status FROM rm_submissions "
                "WHERE reward_status IS NOT NULL"))}
    with ArenaLedger(url, actor="test", as_of=head) as folded:
        assessed = {row["submission_id"]: row["status"] for row in folded.rewards()}
    return stored, assessed


def _arena_ids(ledger: ArenaLedger) -> list[str]:
    with ledger._view() as view:
        assert view is not None, "the read models should answer at the head"
        return view.arena_ids()

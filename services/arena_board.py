"""Answers the dashboard's arena questions: what each arena sealed, who leads it, how its
controls and fees stand, and the reward status of every PASS.

Every figure comes from a method the CLI answers the same question with
(``ArenaLedger.rewards``, ``controls``, ``fees``) or from the read models
(``ReadView.status_counts``); nothing here folds the ledger on its own, so a page costs what
those queries cost. Documents are plain JSON-ready dicts.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

from machines.arena import ArenaState
from machines.control import AS_EXPECTED, PENDING, UNEXPECTED, ControlRow, latest_complete_run
from machines.submission import STATES
from services.arena_ledger import ArenaLedger
from services.earnings import REWARD_STATUSES
from services.read_view import read_view
from vocabulary.errors import NotFound

__all__ = ["CONTROL_HEALTH", "arena_detail", "arenas_overview", "control_health", "leader"]

#: What an arena's controls say, from its latest complete control run: ``none`` when the
#: arena has no control registered, ``pending`` while no run of them has completed.
CONTROL_HEALTH = (AS_EXPECTED, UNEXPECTED, PENDING, "none")


def arenas_overview(ledger: ArenaLedger) -> dict[str, Any]:
    """Returns every commissioned arena's summary (``arena_detail``'s ``arena``), by id,
    with the fee totals across arenas and the position the ledger was read at."""
    fold = ledger.fold
    position = fold.position
    arenas = fold.arenas()
    by_arena: dict[str, list[dict[str, Any]]] = {}
    for row in ledger.rewards():
        by_arena.setdefault(str(row["arena_id"]), []).append(row)
    fees = ledger.fees()
    counts = _status_counts(ledger)
    return {
        "as_of_position": position,
        "arenas": [
            _summary(arena, by_arena.get(arena.arena_id, []), ledger.controls(arena.arena_id),
                     fees["arenas"][arena.arena_id], counts.get(arena.arena_id, {}))
            for arena in arenas
        ],
        "fees_total": fees["total"],
    }


def arena_detail(ledger: ArenaLedger, arena_id: str) -> dict[str, Any]:
    """Returns one arena's summary with its leaderboard, controls and fees: ``rewards``,
    ``controls`` and ``fees`` are exactly what ``rewards --arena``, ``controls`` and
    ``fees --arena`` print with ``--json`` (NotFound for an arena never commissioned)."""
    fold = ledger.fold
    arena = fold.arena(arena_id)
    if arena is None:
        raise NotFound(f"arena {arena_id!r} is not commissioned", arena_id=arena_id)
    rewards = ledger.rewards(arena_id)
    controls = ledger.controls(arena_id)
    fees = ledger.fees(arena_id)
    counts = _status_counts(ledger, arena_id).get(arena_id, {})
    return {
        "as_of_position": fold.position,
        "arena": _summary(arena, rewards, controls, fees["arenas"][arena_id], counts),
        "rewards": rewards,
        "controls": controls,
        "fees": fees,
    }


def leader(arena: ArenaState, rewards: Iterable[Mapping[str, Any]]) -> dict[str, Any] | None:
    """Returns the best rewarded PASS of the arena's current reward group (its submission,
    hotkey, block and speedup), or None while that group has none.

    Within a group each rewarded PASS beats the best before it by the reward margin, so the
    best is the last one rewarded; a pending PASS may be faster but is not judged yet, and a
    lost_potential one never set the bar.
    """
    best = None
    for row in rewards:
        if row["status"] == "rewarded" and row["incumbent_digest"] == arena.incumbent_digest:
            best = row
    if best is None:
        return None
    return {k: best[k] for k in ("submission_id", "hotkey", "block", "speedup")}


def control_health(rows: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """Returns what an arena's control rows (``ArenaLedger.controls``) say: the health of
    their latest complete run (``CONTROL_HEALTH``), the block of that run and the controls
    it found unexpected, and how many controls are registered."""
    found = [ControlRow(**row) for row in rows]
    registered = len({row.control_id for row in found})
    latest = latest_complete_run(found)
    unexpected = [row.control_id for row in latest if row.outcome == UNEXPECTED]
    if not found:
        health = "none"
    elif not latest:
        health = PENDING
    else:
        health = UNEXPECTED if unexpected else AS_EXPECTED
    return {"health": health, "block": latest[0].block if latest else None,
            "unexpected": unexpected, "registered": registered}


def _summary(
    arena: ArenaState,
    rewards: list[dict[str, Any]],
    controls: list[dict[str, Any]],
    fees: dict[str, int],
    counts: Mapping[str, int],
) -> dict[str, Any]:
    """Returns one arena's summary: its sealed commission, incumbent and leader, PASSes by
    reward status, controls' health, fees collected and submissions by status."""
    commission = arena.commission
    event = commission.event.model_dump(mode="json")
    passes = Counter(str(row["status"]) for row in rewards)
    return {
        "arena_id": arena.arena_id,
        "status": arena.status,
        "retired_block": arena.retired_block,
        "retired_reason": arena.retired_reason,
        "commissioned_block": commission.block,
        "commission_digest": commission.digest,
        "policy_digest": commission.policy_digest,
        "policy": event["policy"],
        "model": event["model"],
        "hardware": event["hardware"],
        "engine": event["engine"],
        "fee_rao": arena.fee_rao,
        "emission_share_ppm": commission.event.emission_share_ppm,
        "incumbent": {"digest": arena.incumbent_digest, "block": arena.incumbent_block,
                      "leader": leader(arena, rewards)},
        "passes": {**{s: passes.get(s, 0) for s in REWARD_STATUSES}, "total": len(rewards)},
        "controls": control_health(controls),
        "fees": fees,
        "submissions": {**{s: counts.get(s, 0) for s in STATES}, "total": sum(counts.values())},
    }


def _status_counts(ledger: ArenaLedger, arena_id: str | None = None) -> dict[str, dict[str, int]]:
    """Returns submissions per status per arena (``arena_id``'s only, when given): one
    grouped query on the read models' (status, arena) index, or, where they cannot answer,
    the rows ``ArenaLedger.submissions`` lists."""
    found: dict[str, dict[str, int]] = {}
    with read_view(ledger.store) as view:
        if view is not None and arena_id is not None:
            return {arena_id: view.reader.arena_status_counts(arena_id, STATES)}
        if view is not None:
            for arena, status, count in view.status_counts():
                found.setdefault(arena, {})[status] = count
            return found
    for row in ledger.submissions(arena_id):
        per = found.setdefault(str(row["arena_id"]), {})
        per[str(row["status"])] = per.get(str(row["status"]), 0) + 1
    return found

"""Answers the dashboard's arena questions: what each arena sealed, who leads it, how its
controls and fees stand, and the reward status of every PASS.

Every figure comes from a method the CLI answers the same question with
(``ArenaLedger.rewards``, ``controls``, ``fees``) or from the read models
(``ReadView.status_counts``); nothing here folds the ledger on its own, so a page costs what
those queries cost. Documents are plain JSON-ready dicts.

The overview assesses no arena in full: each leader is the reward rule run on the rows of
the arena's current reward group and its live submissions only (``group_leaders``), the same
leader the full assessment names. PASSes by reward status need the whole arena assessed, so
only the arena's own page gives them.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ledger import read_models
from machines import settlement_rules as rules
from machines.arena import ArenaState
from machines.control import (
    AS_EXPECTED,
    CONTROL_HOTKEY,
    PENDING,
    UNEXPECTED,
    ControlRow,
    latest_complete_run,
)
from machines.submission import STATES
from services.arena_ledger import ArenaLedger
from services.earnings import REWARD_STATUSES
from services.read_view import read_view
from vocabulary.errors import InvalidInput, NotFound

__all__ = [
    "CONTROL_HEALTH",
    "LEADERBOARD_PAGE",
    "arena_detail",
    "arenas_overview",
    "control_health",
    "group_leaders",
    "leader",
    "reward_rows",
]

#: What an arena's controls say, from its latest complete control run: ``none`` when the
#: arena has no control registered, ``pending`` while no run of them has completed.
CONTROL_HEALTH = (AS_EXPECTED, UNEXPECTED, PENDING, "none")
#: PASSes one leaderboard page lists unless told otherwise.
LEADERBOARD_PAGE = 100


def arenas_overview(ledger: ArenaLedger) -> dict[str, Any]:
    """Returns every commissioned arena's summary (``arena_detail``'s ``arena``), by id,
    with the fee totals across arenas and the position the ledger was read at."""
    fold = ledger.fold
    position = fold.position
    arenas = fold.arenas()
    leaders = group_leaders(ledger, arenas)
    fees = ledger.fees()
    counts = _status_counts(ledger)
    health = _control_healths(ledger, [arena.arena_id for arena in arenas])
    return {
        "as_of_position": position,
        "arenas": [
            _summary(arena, *leaders[arena.arena_id], health[arena.arena_id],
                     fees["arenas"][arena.arena_id], counts.get(arena.arena_id, {}))
            for arena in arenas
        ],
        "fees_total": fees["total"],
    }


def arena_detail(
    ledger: ArenaLedger, arena_id: str, *, offset: int = 0, limit: int = LEADERBOARD_PAGE
) -> dict[str, Any]:
    """Returns one arena's summary with a page of its leaderboard, its PASSes by reward
    status, controls and fees: ``rewards`` is rows ``offset`` to ``offset + limit`` of what
    ``rewards --arena`` prints with ``--json`` (``page`` says where they stand), ``controls``
    and ``fees`` are what ``controls`` and ``fees --arena`` print (NotFound for an arena
    never commissioned; InvalidInput for an offset past the last PASS)."""
    fold = ledger.fold
    arena = fold.arena(arena_id)
    if arena is None:
        raise NotFound(f"arena {arena_id!r} is not commissioned", arena_id=arena_id)
    rewards = ledger.rewards(arena_id)
    page = _page(rewards, arena_id, offset, limit)
    controls = ledger.controls(arena_id)
    fees = ledger.fees(arena_id)
    counts = _status_counts(ledger, arena_id).get(arena_id, {})
    passes = Counter(str(row["status"]) for row in rewards)
    return {
        "as_of_position": fold.position,
        "arena": _summary(arena, leader(arena, rewards), len(rewards), control_health(controls),
                          fees["arenas"][arena_id], counts),
        "passes": {**{s: passes.get(s, 0) for s in REWARD_STATUSES}, "total": len(rewards)},
        "rewards": rewards[offset:offset + limit],
        "page": page,
        "controls": controls,
        "fees": fees,
    }


def reward_rows(
    ledger: ArenaLedger, arena_id: str, *, offset: int = 0, limit: int
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Returns rows ``offset`` to ``offset + limit`` of ``ArenaLedger.rewards(arena_id)``
    (what ``rewards --arena --json`` prints) and where they stand (``arena_detail``'s
    ``page``)."""
    rewards = ledger.rewards(arena_id)
    return rewards[offset:offset + limit], _page(rewards, arena_id, offset, limit)


def group_leaders(
    ledger: ArenaLedger, arenas: Sequence[ArenaState]
) -> dict[str, tuple[dict[str, Any] | None, int]]:
    """Returns each arena's leader (``leader``) and how many PASSes it has, by arena id,
    without assessing every PASS.

    The leader is the last rewarded PASS of the current reward group, and whether a PASS
    of a group is rewarded depends only on the PASSes of that group before it and on the
    live submissions before it (any one makes it pending): assessing exactly those rows
    (one indexed query per arena) judges the group's PASSes as assessing the whole arena
    does. Where the read models cannot answer, the arenas are assessed in full.
    """
    with read_view(ledger.store) as view:
        if view is not None:
            totals = view.reader.pass_counts(CONTROL_HOTKEY)
            return {
                arena.arena_id: (_group_leader(view.reader, arena),
                                 totals.get(arena.arena_id, 0))
                for arena in arenas
            }
    by_arena: dict[str, list[dict[str, Any]]] = {}
    for row in ledger.rewards():
        by_arena.setdefault(str(row["arena_id"]), []).append(row)
    return {a.arena_id: (leader(a, by_arena.get(a.arena_id, [])),
                         len(by_arena.get(a.arena_id, []))) for a in arenas}


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
    return _health([ControlRow(**row) for row in rows])


def _health(found: Sequence[ControlRow]) -> dict[str, Any]:
    """Is ``control_health`` of the rows as ``ControlRow``s."""
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


def _group_leader(reader: read_models.Reader, arena: ArenaState) -> dict[str, Any] | None:
    """Returns the leader of the arena's current reward group from the rows of that group
    and of the arena's live submissions (``group_leaders`` says why that is exact)."""
    group = arena.incumbent_digest
    inputs = [
        # A live submission's verdict changes nothing in an assessment: it blocks by its
        # status alone, and is never judged.
        rules.SubmissionInput.folded(
            sid, hotkey, content, (block, index, sub), status, group,
            "PASS" if status == "QUALIFIED" else None,
            speedup if status == "QUALIFIED" else None,
        )
        for sid, hotkey, content, block, index, sub, status, speedup in reader.group_rows(
            arena.arena_id, group, rules.BLOCKING_STATUSES, CONTROL_HOTKEY)
    ]
    commission = arena.commission.event
    assessed = rules.assess_rewards([rules.ArenaInput(
        arena.arena_id, commission.emission_share_ppm, commission.policy.reward_margin, inputs
    )])
    best = next((a for a in reversed(assessed) if a.status == "rewarded"), None)
    return None if best is None else leader(arena, [best.to_dict()])


def _page(rows: Sequence[Any], arena_id: str, offset: int, limit: int) -> dict[str, Any]:
    """Returns where rows ``offset`` to ``offset + limit`` of the arena's PASSes stand: the
    offsets of the pages before and after (None at either end) and the total; InvalidInput
    for an offset past the last PASS."""
    total = len(rows)
    if offset and offset >= total:
        raise InvalidInput(
            f"offset {offset} is past the last of arena {arena_id}'s {total} PASSes: give an "
            f"offset below {total}", path="offset")
    return {
        "offset": offset,
        "limit": limit,
        "total": total,
        "previous_offset": max(offset - limit, 0) if offset else None,
        "next_offset": offset + limit if offset + limit < total else None,
    }


def _summary(
    arena: ArenaState,
    best: dict[str, Any] | None,
    passes: int,
    controls: dict[str, Any],
    fees: dict[str, int],
    counts: Mapping[str, int],
) -> dict[str, Any]:
    """Returns one arena's summary: its sealed commission, incumbent and leader (``best``),
    how many PASSes it has, its controls' health (``control_health``), fees collected and
    submissions by status."""
    commission = arena.commission
    event = commission.event.model_dump(mode="json")
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
                      "leader": best},
        "passes_total": passes,
        "controls": controls,
        "fees": fees,
        "submissions": {**{s: counts.get(s, 0) for s in STATES}, "total": sum(counts.values())},
    }


def _control_healths(ledger: ArenaLedger, arena_ids: Sequence[str]) -> dict[str, dict[str, Any]]:
    """Returns each arena's ``control_health``, by id: from the read models' control rows as
    ``ArenaLedger.controls`` reads them (without copying each into a dict), or, where they
    cannot answer, from ``ArenaLedger.controls``."""
    with read_view(ledger.store) as view:
        if view is not None:
            return {arena_id: _health(view.controls(arena_id)) for arena_id in arena_ids}
    return {arena_id: control_health(ledger.controls(arena_id)) for arena_id in arena_ids}


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

"""Answers the dashboard's settlement pages: every recorded settlement, newest first, and
one settlement in full (its weights, claims per arena, rules versions and how to reproduce
it), as plain JSON-ready documents.

A settlement is its SettlementComputed event, shown as recorded: the read models only find
the events (``rm_settlements``' key pages the list, ``rm_attempts`` leads from a claim to
the decision that made it a PASS). Where the read models lag the head (events appended
without the machines' guard, until a rebuild), the list is read from the events' type index
instead and the decision rules versions are unknown (None); nothing folds the ledger.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, NamedTuple

import orjson

from ledger import read_models
from ledger.store import EventStore
from machines.settlement_rules import (
    RULES_VERSION,
    check_settlement_digest,
    describe_suspension,
)
from vocabulary.catalogue import CATALOGUE
from vocabulary.errors import NotFound

__all__ = ["SETTLEMENT", "settlement_detail", "settlement_page"]

SETTLEMENT = "SettlementComputed"
DECIDED = "AttemptDecided"


class _Recorded(NamedTuple):
    """Is one SettlementComputed as stored: where, when, and its payload (current schema)."""

    position: int
    recorded_at: str
    payload: dict[str, Any]


def _recorded(position: int, recorded_at: str, version: int, data: bytes) -> _Recorded:
    payload = CATALOGUE.upcast(SETTLEMENT, version, orjson.loads(data))
    return _Recorded(position, recorded_at, payload)


def settlement_page(store: EventStore, limit: int, before: int | None = None) -> dict[str, Any]:
    """Returns up to ``limit`` recorded settlements before position ``before`` (from the
    newest when None), newest first, each with its block, digest, rules versions and
    totals; ``next_before`` is where the next page starts (None on the last page)."""
    versions: dict[str, str] | None = None
    with read_models.reader(store) as reader:
        if reader is not None:
            rows = [_recorded(*row) for row in reader.settlements_before(before, limit + 1)]
            total = reader.settlement_count()
            versions = _decision_versions(reader, _claimed(rows[:limit]))
    if reader is None:
        rows, total = _scan(store, before, limit + 1)
    shown = rows[:limit]
    return {
        "settlements": [_summary(row, versions) for row in shown],
        "recorded": total,
        "limit": limit,
        "before": before,
        "next_before": shown[-1].position if len(rows) > limit else None,
    }


def _scan(store: EventStore, before: int | None, keep: int) -> tuple[list[_Recorded], int]:
    """Returns the ``keep`` settlements newest before ``before``, newest first, and how
    many are recorded: one pass over the events' (type, position) index."""
    kept: deque[_Recorded] = deque(maxlen=keep)
    total = 0
    for event in store.read_all(1, types=[SETTLEMENT]):
        total += 1
        if before is None or event.position < before:
            kept.append(_recorded(event.position, event.recorded_at, event.schema_version,
                                  event.payload_bytes))
    return list(reversed(kept)), total


def settlement_detail(store: EventStore, position: int) -> dict[str, Any]:
    """Returns the settlement recorded at ``position``: the payload as recorded, its weights
    largest first, its claims per arena, the rules versions it used, totals and the commands
    that reproduce it. NotFound when ``position`` holds no event, or another event (named)."""
    head = store.head().position
    if position > head:
        raise NotFound(f"no event at position {position}: the ledger's head is {head}",
                       position=position)
    event = store.get(position)
    if event.type != SETTLEMENT:
        raise NotFound(
            f"position {position} holds {event.type} (stream {event.stream}), not a "
            f"settlement ({SETTLEMENT})",
            position=position,
        )
    row = _recorded(position, event.recorded_at, event.schema_version, event.payload_bytes)
    with read_models.reader(store) as reader:
        versions = None if reader is None else _decision_versions(reader, _claimed([row]))
    return {**_summary(row, versions), **_detail(row, versions)}


def _summary(row: _Recorded, versions: Mapping[str, str] | None) -> dict[str, Any]:
    """Returns what the list shows of one settlement."""
    payload = row.payload
    claims = payload["claims"]
    return {
        "position": row.position,
        "recorded_at": row.recorded_at,
        "block": payload["block"],
        "as_of_position": payload["as_of_position"],
        "settlement_digest": payload["settlement_digest"],
        "rules": _rules(payload, claims, versions),
        # settlement-rules.v2: the arenas whose pool went to the burn hotkey (v1: none).
        "suspended": [item["arena_id"] for item in payload.get("suspensions", [])],
        "totals": {
            "claims": len(claims),
            "credit": sum(int(c["credit"]) for c in claims),
            "hotkeys": len(payload["weights_ppm"]),
            "weight_ppm": sum(int(w) for w in payload["weights_ppm"].values()),
            "fees": payload["fees"]["total"],
        },
    }


def _detail(row: _Recorded, versions: Mapping[str, str] | None) -> dict[str, Any]:
    """Returns what only the settlement's own page shows."""
    payload = row.payload
    weights = sorted(payload["weights_ppm"].items(), key=lambda hw: (-int(hw[1]), hw[0]))
    return {
        "payload": payload,
        "weights": [{"hotkey": hotkey, "weight_ppm": ppm} for hotkey, ppm in weights],
        "arenas": _arenas(payload, versions),
        "reproduce": {
            # Replaying to the settlement's own position ends on it: the digest replay
            # reports is this one's, recomputed from every event before it.
            "replay": f"arena-ledger replay --as-of {row.position} "
                      f"--expect {payload['settlement_digest']}",
            "weights": f"arena-ledger weights --block {payload['block']} "
                       f"--as-of {payload['as_of_position']} --json",
        },
    }


def _rules(payload: Mapping[str, Any], claims: Sequence[Mapping[str, Any]],
           versions: Mapping[str, str] | None) -> dict[str, Any]:
    """Returns the rules versions a settlement used: the settlement rules its digest was
    computed under (None when no version this build knows gives it) and the decision rules
    of its claims' PASS verdicts (None when the read models cannot say)."""
    matches = check_settlement_digest(payload)
    return {
        # A v1 payload omits its rules version; a later version's names it.
        "settlement_rules_version": payload.get("rules_version", RULES_VERSION)
        if matches else None,
        "digest_matches": matches,
        "decision_rules_versions": None if versions is None else _versions_of(claims, versions),
    }


def _versions_of(claims: Iterable[Mapping[str, Any]], versions: Mapping[str, str]) -> list[str]:
    return sorted({versions[c["submission_id"]] for c in claims
                   if c["submission_id"] in versions})


def _arenas(payload: Mapping[str, Any], versions: Mapping[str, str] | None) -> list[dict[str, Any]]:
    """Returns each arena's claims, credit and fees, arenas by id."""
    fees = payload["fees"]["arenas"]
    claims = payload["claims"]
    suspended = {item["arena_id"]: item for item in payload.get("suspensions", [])}
    names = sorted({*fees, *(c["arena_id"] for c in claims), *suspended})
    found = []
    for arena_id in names:
        own = [c for c in claims if c["arena_id"] == arena_id]
        suspension = suspended.get(arena_id)
        found.append({
            "arena_id": arena_id,
            "claims": own,
            "credit": sum(int(c["credit"]) for c in own),
            "fees": fees.get(arena_id),
            "decision_rules_versions": None if versions is None else _versions_of(own, versions),
            "suspension": None if suspension is None else {
                **suspension, "why": describe_suspension(suspension)},
        })
    return found


def _claimed(rows: Iterable[_Recorded]) -> list[str]:
    """Returns the submissions the settlements' claims name, each once, sorted."""
    return sorted({c["submission_id"] for row in rows for c in row.payload["claims"]})


def _decision_versions(reader: read_models.Reader, sids: Sequence[str]) -> dict[str, str]:
    """Maps each claimed submission to the rules version of the decision that passed it."""
    found = {}
    for sid, version, data in reader.passing_decisions(sids):
        found[sid] = str(CATALOGUE.upcast(DECIDED, version, orjson.loads(data))["rules_version"])
    return found

"""Replays a store the way ``arena-ledger replay`` reads it, and forges a settlement's weights
around the guard: the short-hands the replay suites share.
"""

from __future__ import annotations

import copy
from typing import Any

from settled_ledger import (  # the shared builder (same directory, prepend import mode)
    ALICE,
    BOB,
)

from ledger.store import EventStore
from machines.settlement_rules import RULES_VERSION, settlement_digest
from services.replay import ReplayReport, replay_events

HEAD = 92  # build_settled: settlements at 81, 91 and 92


def replay(url: str, *, as_of: int | None = None, expect: str | None = None) -> ReplayReport:
    """Replays the store at ``url`` the way `arena-ledger replay [--as-of N]` reads it."""
    with EventStore(url) as store:
        head = store.head().position
        to = head if as_of is None else min(as_of, head)
        return replay_events(store.read_all(1, to_position=to), expect=expect)


# --- forgeries caught at their position -----------------------------------------------------


def forge_weights(payload: dict[str, Any], digest: str) -> dict[str, Any]:
    forged = copy.deepcopy(payload)
    forged["weights_ppm"][ALICE] += 1
    forged["weights_ppm"][BOB] -= 1
    if digest == "recomputed":  # a self-consistent forgery: the digest covers the forged weights
        document = {k: v for k, v in forged.items() if k != "settlement_digest"}
        document["rules_version"] = RULES_VERSION
        forged["settlement_digest"] = settlement_digest(document)
    return forged

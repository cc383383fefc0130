"""Answers a miner's first question: what one hotkey submitted, earned and paid.

``arena-ledger earnings --hotkey HOTKEY`` renders ``hotkey_earnings``: the hotkey's
submissions counted by status, its PASS verdicts by reward status (as ``rewards`` judges
them), its weight and claims in every recorded settlement that gave it any, the fees its
submissions paid (consumed, refunded, net, and those paid by a credit, as ``fees`` counts
them), and the credits granted to it. Everything is as of the ledger's position (``as_of``).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from machines.payment import RELEASED
from machines.projection import LedgerFold
from machines.submission import STATES, SubmissionState
from services.arena_ledger import ArenaLedger
from services.settlements import rewards
from vocabulary.fields import require_hotkey

__all__ = ["REWARD_STATUSES", "hotkey_earnings"]

#: The reward statuses of a PASS (``rewards``), in the order they are reported.
REWARD_STATUSES = ("rewarded", "pending", "lost_potential")


def hotkey_earnings(ledger: ArenaLedger, hotkey: str) -> dict[str, Any]:
    """Returns one hotkey's submissions, rewards, settlements, fees and credits as a
    JSON-ready document, as of the position ``ledger`` reads (InvalidInput for text that is
    no hotkey: a misspelt one would read as a hotkey that did nothing)."""
    require_hotkey(hotkey)
    fold = ledger.fold
    mine = {
        sub.submission_id: sub
        for arena in fold.arenas()
        for sub in fold.submissions(arena.arena_id)
        if sub.hotkey == hotkey
    }
    statuses = Counter(sub.status for sub in mine.values())
    passes = Counter(str(row["status"]) for row in rewards(fold) if row["hotkey"] == hotkey)
    return {
        "hotkey": hotkey,
        "as_of_position": fold.position,
        "submissions": {**{s: statuses.get(s, 0) for s in STATES}, "total": len(mine)},
        "passes": {**{s: passes.get(s, 0) for s in REWARD_STATUSES},
                   "total": sum(passes.values())},
        "settlements": _settlements(ledger, hotkey, fold.position),
        "fees": _fees(fold, mine),
        "credits": _credits(fold, hotkey),
    }


def _settlements(ledger: ArenaLedger, hotkey: str, position: int) -> dict[str, Any]:
    """Returns the recorded settlements that gave ``hotkey`` a weight or a claim, and how
    many settlements there were up to ``position``."""
    rows, count = [], 0
    for event in ledger.store.read_all(1, to_position=position, stream="settlement",
                                       types=["SettlementComputed"]):
        count += 1
        payload = event.payload
        weight = int(payload["weights_ppm"].get(hotkey, 0))
        claims = [
            {k: claim[k] for k in ("arena_id", "submission_id", "block", "speedup_ppm",
                                   "credit")}
            for claim in payload["claims"] if claim["hotkey"] == hotkey
        ]
        if weight or claims:
            rows.append({"position": event.position, "block": payload["block"],
                         "as_of_position": payload["as_of_position"], "weight_ppm": weight,
                         "claims": claims})
    return {"recorded": count, "with_weight": rows}


def _fees(fold: LedgerFold, mine: dict[str, SubmissionState]) -> dict[str, int]:
    """Returns what ``mine``'s submissions paid: payments consumed and refunded, the net,
    and the fees credits paid (the keys of ``fees``' rows)."""
    consumed = released = 0
    for payment in fold.payments():
        if payment.submission_id in mine:
            consumed += payment.amount_rao
            if payment.status == RELEASED:
                released += payment.amount_rao
    fees_by_credit = [mine[c.submission_id].fee for c in fold.credits()
                      if c.submission_id is not None and c.submission_id in mine]
    by_credit = sum(fee.amount_rao for fee in fees_by_credit if fee is not None)
    return {"consumed_rao": consumed, "released_rao": released,
            "net_rao": consumed - released, "credits_spent_rao": by_credit}


def _credits(fold: LedgerFold, hotkey: str) -> dict[str, int]:
    """Returns the credits granted to ``hotkey``: how many and how much, and how many paid
    a submission's fee."""
    granted = [c for c in fold.credits() if c.hotkey == hotkey]
    return {"granted": len(granted), "granted_rao": sum(c.amount_rao for c in granted),
            "spent": sum(1 for c in granted if c.submission_id is not None)}

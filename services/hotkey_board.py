"""Answers the dashboard's hotkey page: what one miner submitted, was weighted, paid and
was granted.

``hotkey_board`` returns ``ArenaLedger.history``'s rows (what ``arena-ledger history
--hotkey HK --json`` prints) with the hotkey's weight and claims in every recorded
settlement, the payments of its submissions with their totals, and the credits granted to
it. The totals are the ones ``arena-ledger earnings --hotkey HK`` reports; they come from
indexed read-model queries (``ledger.read_models.Reader``), and from the events of a few
types where the read models cannot answer (a view as of a position, read models behind the
head): nothing folds the ledger.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from ledger import read_models
from machines.payment import CONSUMED, GRANTED, RELEASED, SPENT
from services.arena_ledger import ArenaLedger
from vocabulary.events import (
    CreditGranted,
    CreditSpent,
    PaymentConsumed,
    PaymentReleased,
    SettlementComputed,
)

__all__ = ["CLAIM_FIELDS", "hotkey_board"]

#: A claim's fields as ``earnings`` lists them (``block``: the submission's arrival block).
CLAIM_FIELDS = ("arena_id", "submission_id", "block", "speedup_ppm", "credit")


def hotkey_board(ledger: ArenaLedger, hotkey: str) -> dict[str, Any]:
    """Returns one hotkey's submissions, settlements, payments and credits as a JSON-ready
    document (InvalidInput for text that is no hotkey; a hotkey with no events gets empty
    lists, as ``history`` gives it).

    ``settlements`` lists every recorded settlement with the hotkey's ``weight_ppm`` in it
    (0 where it had none) and its ``claims``; ``fees`` and ``credit_totals`` have the keys
    and values of ``earnings``' ``fees`` and ``credits``.
    """
    position, rows = ledger.history(hotkey)  # checks the hotkey first
    with _reader(ledger) as reader:
        # Another snapshot than history's: read from it only when nothing was appended
        # between the two, so every part of the page is as of one position.
        if reader is not None and reader.position == position:
            money = _from_read_models(reader, hotkey)
        else:
            money = _from_events(ledger, hotkey, rows, position)
    fees = _fees(money["payments"], money.pop("credit_fees_rao"))
    return {"hotkey": hotkey, "as_of_position": position, "submissions": rows, **money,
            "fees": fees, "credit_totals": _credit_totals(money["credits"])}


@contextmanager
def _reader(ledger: ArenaLedger) -> Iterator[read_models.Reader | None]:
    """Yields the read models' reader when they answer for ``ledger`` (at its head)."""
    if ledger.as_of is not None:
        yield None
        return
    with read_models.reader(ledger.store) as found:
        yield found


def _from_read_models(reader: read_models.Reader, hotkey: str) -> dict[str, Any]:
    """Reads the hotkey's settlements, payments and credits from the read models."""
    claims: dict[int, list[dict[str, Any]]] = {}
    for claim in reader.claims_of(hotkey):
        # rm_claims keeps the settlement block as ``block``; a claim's own is its arrival.
        claims.setdefault(int(claim["position"]), []).append(
            {k: claim["arrival_block" if k == "block" else k] for k in CLAIM_FIELDS})
    settlements = [
        {**row, "claims": _ordered(claims.get(int(row["position"]), []))}
        for row in reader.settlements_of(hotkey)
    ]
    payments = [_payment(row["payment_ref"], row["submission_id"], row["arena_id"],
                         row["amount_rao"], row["status"], row["release_reason"],
                         row["first_position"])
                for row in reader.payments_of(hotkey)]
    credits = [_credit(row["credit_id"], row["amount_rao"], row["note"], row["status"],
                       row["submission_id"], row["first_position"])
               for row in reader.credits_of(hotkey)]
    return {"settlements": settlements, "payments": payments, "credits": credits,
            "credit_fees_rao": reader.credit_fees_of(hotkey)}


def _from_events(ledger: ArenaLedger, hotkey: str, rows: list[dict[str, Any]],
                 position: int) -> dict[str, Any]:
    """Reads the same from the events of the settlement, payment and credit types up to
    ``position`` (the types' index; no submission's or attempt's events are read), given
    the hotkey's ``history`` rows."""
    fees = {str(row["submission_id"]): row["fee"] for row in rows}
    credits, credit_fees = _credits_from_events(ledger, hotkey, fees, position)
    return {"settlements": _settlements_from_events(ledger, hotkey, position),
            "payments": _payments_from_events(ledger, fees, position),
            "credits": credits, "credit_fees_rao": credit_fees}


def _settlements_from_events(ledger: ArenaLedger, hotkey: str,
                             position: int) -> list[dict[str, Any]]:
    """Returns every SettlementComputed up to ``position`` with the hotkey's weight and
    claims in it."""
    found = []
    for event in ledger.store.read_all(1, to_position=position, stream="settlement",
                                       types=[SettlementComputed.event_type]):
        payload = event.payload
        claims = [{k: claim[k] for k in CLAIM_FIELDS}
                  for claim in payload["claims"] if claim["hotkey"] == hotkey]
        found.append({"position": event.position, "block": payload["block"],
                      "as_of_position": payload["as_of_position"],
                      "weight_ppm": int(payload["weights_ppm"].get(hotkey, 0)),
                      "claims": _ordered(claims)})
    return found


def _payments_from_events(ledger: ArenaLedger, fees: dict[str, Any],
                          position: int) -> list[dict[str, Any]]:
    """Returns the payments of the submissions in ``fees`` (the hotkey's), consumed and
    perhaps released up to ``position``."""
    found: dict[str, dict[str, Any]] = {}
    types = [PaymentConsumed.event_type, PaymentReleased.event_type]
    for event in ledger.store.read_all(1, to_position=position, types=types):
        model = event.event()
        if isinstance(model, PaymentConsumed) and model.submission_id in fees:
            found[model.submission_id] = _payment(
                model.payment_ref, model.submission_id, model.arena_id, model.amount_rao,
                CONSUMED, None, event.position)
        elif isinstance(model, PaymentReleased) and model.submission_id in found:
            found[model.submission_id].update(status=RELEASED, release_reason=model.reason)
    return list(found.values())


def _credits_from_events(ledger: ArenaLedger, hotkey: str, fees: dict[str, Any],
                         position: int) -> tuple[list[dict[str, Any]], int]:
    """Returns the credits granted to the hotkey up to ``position`` and the fees, in rao,
    that credits paid for the submissions in ``fees`` (the hotkey's)."""
    found: dict[str, dict[str, Any]] = {}
    paid = 0
    types = [CreditGranted.event_type, CreditSpent.event_type]
    for event in ledger.store.read_all(1, to_position=position, types=types):
        model = event.event()
        if isinstance(model, CreditGranted) and model.hotkey == hotkey:
            found[model.credit_id] = _credit(model.credit_id, model.amount_rao, model.note,
                                             GRANTED, None, event.position)
        elif isinstance(model, CreditSpent):
            spent = found.get(event.stream.partition("-")[2])  # the stream is credit-<id>
            if spent is not None:
                spent.update(status=SPENT, submission_id=model.submission_id)
            fee = fees.get(model.submission_id)
            if fee is not None:
                paid += int(fee["amount_rao"])
    return list(found.values()), paid


def _ordered(claims: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Returns claims in the settlement document's order: arena, arrival block, id."""
    return sorted(claims, key=lambda c: (c["arena_id"], c["block"], c["submission_id"]))


def _payment(ref: str, sid: str, arena_id: str, amount: int, status: str,
             release_reason: str | None, position: int) -> dict[str, Any]:
    return {"payment_ref": ref, "submission_id": sid, "arena_id": arena_id,
            "amount_rao": int(amount), "status": status, "release_reason": release_reason,
            "consumed_position": int(position)}


def _credit(credit_id: str, amount: int, note: str, status: str, sid: str | None,
            position: int) -> dict[str, Any]:
    return {"credit_id": credit_id, "amount_rao": int(amount), "note": note,
            "status": status, "submission_id": sid, "granted_position": int(position)}


def _fees(payments: list[dict[str, Any]], credit_fees: int) -> dict[str, int]:
    """Returns ``earnings``' fee totals: payments consumed and refunded, the net, and the
    fees credits paid."""
    consumed = sum(p["amount_rao"] for p in payments)
    released = sum(p["amount_rao"] for p in payments if p["status"] == RELEASED)
    return {"consumed_rao": consumed, "released_rao": released,
            "net_rao": consumed - released, "credits_spent_rao": credit_fees}


def _credit_totals(credits: list[dict[str, Any]]) -> dict[str, int]:
    """Returns ``earnings``' credit totals: how many granted, how much, how many spent."""
    return {"granted": len(credits), "granted_rao": sum(c["amount_rao"] for c in credits),
            "spent": sum(1 for c in credits if c["submission_id"] is not None)}

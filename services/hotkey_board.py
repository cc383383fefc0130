"""Answers the dashboard's hotkey page: what one miner submitted, was weighted, paid and
was granted, a bounded page at a time.

``hotkey_board`` returns a page of ``ArenaLedger.history``'s rows (what ``arena-ledger
history --hotkey HK --json`` prints; ``ArenaLedger.history_page``), the hotkey's weight and
claims in the latest recorded settlements, and its latest payments and credits, each list
at most ``limit`` long and each with its total. The fee and credit totals are the ones
``arena-ledger earnings --hotkey HK`` reports, over all of the hotkey's payments and
credits; they come from indexed read-model queries and SQL sums (``ledger.read_models.
Reader``), and from the events of a few types where the read models cannot answer (a view
as of a position, read models behind the head): nothing folds the ledger then but
``history`` itself.
"""

from __future__ import annotations

from typing import Any

from ledger import read_models
from machines.payment import CONSUMED, GRANTED, RELEASED, SPENT
from services.arena_ledger import ArenaLedger, HistoryPage, slice_history
from vocabulary.events import (
    CreditGranted,
    CreditSpent,
    PaymentConsumed,
    PaymentReleased,
    SettlementComputed,
)

__all__ = ["CLAIM_FIELDS", "DEFAULT_LIMIT", "hotkey_board"]

#: A claim's fields as ``earnings`` lists them (``block``: the submission's arrival block).
CLAIM_FIELDS = ("arena_id", "submission_id", "block", "speedup_ppm", "credit")

#: Rows per list when the caller names no limit.
DEFAULT_LIMIT = 100


def hotkey_board(ledger: ArenaLedger, hotkey: str, limit: int = DEFAULT_LIMIT,
                 after: str | None = None, before: str | None = None) -> dict[str, Any]:
    """Returns one hotkey's submissions, settlements, payments and credits as a JSON-ready
    document (InvalidInput for text that is no hotkey, a ``limit`` below 1, or an ``after``
    or ``before`` that is no submission of the hotkey; a hotkey with no events gets empty
    lists, as ``history`` gives it).

    ``submissions`` is the page of ``history``'s rows ``ArenaLedger.history_page`` gives for
    ``limit``, ``after`` and ``before``; ``page`` says where it starts and the ids to page
    on from. ``settlements`` are the latest ``limit`` recorded settlements, newest first,
    with the hotkey's ``weight_ppm`` in each (0 where it had none) and its ``claims``;
    ``payments`` and ``credits`` the latest ``limit``, newest first; ``totals`` counts
    each list in full. ``fees`` and ``credit_totals`` have the keys and values of
    ``earnings``' ``fees`` and ``credits``.
    """
    if ledger.as_of is None:
        page = ledger.history_page(hotkey, limit, after, before)  # checks its input first
        with read_models.reader(ledger.store) as reader:
            # Another snapshot than the page's: read from it only when nothing was appended
            # between the two, so every part of the page is as of one position.
            if reader is not None and reader.position == page.position:
                return _document(hotkey, limit, page, _from_read_models(reader, hotkey, limit))
    # No read models to answer: the whole history, whose fees the payments' events need.
    position, rows = ledger.history(hotkey)
    page = slice_history(hotkey, position, rows, limit, after, before)
    return _document(hotkey, limit, page, _from_events(ledger, hotkey, rows, position, limit))


def _document(hotkey: str, limit: int, page: HistoryPage,
              money: dict[str, Any]) -> dict[str, Any]:
    """Returns the board's document from the history page and the rest."""
    return {
        "hotkey": hotkey, "as_of_position": page.position, "limit": limit,
        "submissions": page.rows,
        "page": {"start": page.start, "previous": page.previous, "next": page.next},
        "settlements": money["settlements"], "payments": money["payments"],
        "credits": money["credits"],
        "totals": {"submissions": page.total, **money["totals"]},
        "fees": money["fees"], "credit_totals": money["credit_totals"],
    }


def _from_read_models(reader: read_models.Reader, hotkey: str, limit: int) -> dict[str, Any]:
    """Reads the hotkey's latest settlements, payments and credits, and the totals over all
    of them, from the read models."""
    found = reader.latest_settlements_of(hotkey, limit)
    claims: dict[int, list[dict[str, Any]]] = {}
    if found:
        for claim in reader.claims_of_since(hotkey, int(found[-1]["position"])):
            # rm_claims keeps the settlement block as ``block``; a claim's own is its arrival.
            claims.setdefault(int(claim["position"]), []).append(
                {k: claim["arrival_block" if k == "block" else k] for k in CLAIM_FIELDS})
    settlements = [{**row, "claims": _ordered(claims.get(int(row["position"]), []))}
                   for row in found]
    latest, paid, consumed, released = reader.latest_payments_of(hotkey, limit)
    payments = [_payment(row["payment_ref"], row["submission_id"], row["arena_id"],
                         row["amount_rao"], row["status"], row["release_reason"],
                         row["first_position"])
                for row in latest]
    credits = [_credit(row["credit_id"], row["amount_rao"], row["note"], row["status"],
                       row["submission_id"], row["first_position"])
               for row in reader.latest_credits_of(hotkey, limit)]
    granted, granted_rao, spent = reader.credit_totals_of(hotkey)
    return {
        "settlements": settlements, "payments": payments, "credits": credits,
        "totals": {"settlements": reader.settlement_count(), "payments": paid,
                   "credits": granted},
        "fees": _fees(consumed, released, reader.credit_fees_of(hotkey)),
        "credit_totals": {"granted": granted, "granted_rao": granted_rao, "spent": spent},
    }


def _from_events(ledger: ArenaLedger, hotkey: str, rows: list[dict[str, Any]],
                 position: int, limit: int) -> dict[str, Any]:
    """Reads the same from the events of the settlement, payment and credit types up to
    ``position`` (the types' index; no submission's or attempt's events are read), given
    the hotkey's ``history`` rows: every one of them, the latest ``limit`` kept."""
    fees = {str(row["submission_id"]): row["fee"] for row in rows}
    credits, credit_fees = _credits_from_events(ledger, hotkey, fees, position)
    settlements = _settlements_from_events(ledger, hotkey, position)
    payments = _payments_from_events(ledger, fees, position)
    consumed = sum(p["amount_rao"] for p in payments)
    released = sum(p["amount_rao"] for p in payments if p["status"] == RELEASED)
    return {
        "settlements": _latest(settlements, "position", limit),
        "payments": _latest(payments, "consumed_position", limit),
        "credits": _latest(credits, "granted_position", limit),
        "totals": {"settlements": len(settlements), "payments": len(payments),
                   "credits": len(credits)},
        "fees": _fees(consumed, released, credit_fees),
        "credit_totals": {
            "granted": len(credits), "granted_rao": sum(c["amount_rao"] for c in credits),
            "spent": sum(1 for c in credits if c["submission_id"] is not None)},
    }


def _latest(rows: list[dict[str, Any]], position: str, limit: int) -> list[dict[str, Any]]:
    """Returns the ``limit`` rows of the latest ``position``, newest first."""
    return sorted(rows, key=lambda row: int(row[position]), reverse=True)[:limit]


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


def _fees(consumed: int, released: int, credit_fees: int) -> dict[str, int]:
    """Returns ``earnings``' fee totals: payments consumed and refunded, the net, and the
    fees credits paid."""
    return {"consumed_rao": consumed, "released_rao": released,
            "net_rao": consumed - released, "credits_spent_rao": credit_fees}

"""Answers the dashboard's submission page: ``explain submission`` plus the events behind it.

``submission_board`` is ``ArenaLedger.explain_submission``'s document (what
``arena-ledger explain submission SID --json`` prints) with a ``timeline``: the positions,
types and times of the submission's events, its attempts' and its fee's, read stream by
stream from the store (a few indexed reads; nothing is folded). ``ratio_lines`` turns an
attempt's looks into the horizontal lines its window chart draws.
"""

from __future__ import annotations

from decimal import Context, Decimal
from typing import Any

from ledger.records import RecordedEvent
from services.arena_ledger import ArenaLedger
from vocabulary.events import SubmissionAdmitted

__all__ = ["STOCK_RATIO", "ratio_lines", "submission_board", "timeline"]

#: The cost ratio (candidate / stock) of a candidate exactly as fast as stock.
STOCK_RATIO = 1.0

#: Display arithmetic only (nothing here feeds a verdict): the machines' 34 digits.
_DISPLAY = Context(prec=34)

#: A look's outcomes that end the speed stage without a pass (the last look's split).
_LAST_LOOK_FAILS = frozenset({"candidate_slower", "speed_threshold_not_met"})


def submission_board(ledger: ArenaLedger, sid: str) -> dict[str, Any]:
    """Returns ``explain_submission(sid)``'s document plus ``timeline`` (``timeline``).

    ``sid`` is what ``explain_submission`` takes: the 64-character id or a prefix of at
    least ``submission_prefix_min`` characters that only it starts with (InvalidInput when
    too short or ambiguous, NotFound when no submission has it).
    """
    document = ledger.explain_submission(sid)
    attempts = [str(a["attempt_id"]) for a in document["attempts"]]
    document["timeline"] = timeline(ledger, str(document["submission_id"]), attempts)
    return document


def timeline(ledger: ArenaLedger, sid: str, attempt_ids: list[str]) -> list[dict[str, Any]]:
    """Returns the events of submission ``sid`` in position order: its own stream, its
    attempts' streams, its payment's stream and the CreditSpent that paid its fee (a
    credit's grant belongs to the hotkey, not to one submission)."""
    own = ledger.read_stream(f"submission-{sid}")
    found: list[RecordedEvent] = list(own)
    for attempt_id in attempt_ids:
        found += ledger.read_stream(f"attempt-{attempt_id}")
    admitted = next((r.event() for r in own if r.type == SubmissionAdmitted.event_type), None)
    if isinstance(admitted, SubmissionAdmitted):
        fee = admitted.fee
        if fee.kind == "payment":
            found += ledger.read_stream(f"payment-{fee.ref}")
        elif fee.kind == "credit":
            found += [r for r in ledger.read_stream(f"credit-{fee.ref}")
                      if r.payload.get("submission_id") == sid]
    found.sort(key=lambda r: r.position)
    return [
        {"position": r.position, "stream": r.stream, "version": r.version, "type": r.type,
         "recorded_at": r.recorded_at}
        for r in found
    ]


def ratio_lines(attempt: dict[str, Any]) -> list[dict[str, Any]]:
    """Returns the horizontal lines of an attempt's window chart, in cost-ratio space
    (r = candidate / stock, so lower is faster): stock (1), each look's pass line, the
    failing side of a last look that did not pass, and the futility limit.

    A look at window k passes when its speedup S = 1 / sqrt(R1 * R2) is at least 1 + L
    (R_o: orientation o's pooled cost ratio, L: the look's pass line), that is when
    sqrt(R1 * R2) <= 1 / (1 + L): the pass line is drawn at 1 / (1 + L). A last look that
    does not pass fails ``candidate_slower`` when S <= 1 / (1 + L), that is when
    sqrt(R1 * R2) >= 1 + L: that line is drawn at 1 + L. Futility compares R1 with
    1 + futility_margin, which is already a ratio. Each line is ``{"y", "label", "kind",
    "window"}`` with ``y`` a float (the chart's unit) and ``window`` the look's (None for
    stock and futility).
    """
    lines: list[dict[str, Any]] = [
        {"y": STOCK_RATIO, "label": "stock (ratio 1)", "kind": "stock", "window": None}
    ]
    for look in attempt.get("looks", []):
        if look["pass_line"] is None:  # a look without a critical value cannot pass
            continue
        one_plus = _DISPLAY.add(Decimal(1), Decimal(look["pass_line"]))
        window = int(look["window"])
        lines.append({"y": float(_DISPLAY.divide(Decimal(1), one_plus)),
                      "label": f"pass line, look {window}", "kind": "pass", "window": window})
        if look["outcome"] in _LAST_LOOK_FAILS:
            lines.append({"y": float(one_plus), "label": f"slower line, look {window}",
                          "kind": "slower", "window": window})
    if attempt.get("futility_limit") is not None:
        lines.append({"y": float(Decimal(attempt["futility_limit"])),
                      "label": "futility limit (R1)", "kind": "futility", "window": None})
    return lines

"""Checks the Payment and Credit machines at their edges (machines/payment.py).

A non-opening event on an unopened payment or credit stream is refused
``stream_not_started``, and the folds leave a refused event out, as their docstrings say.
"""

from __future__ import annotations

from machines import payment as P
from machines import samples
from machines.refusal import Refusal
from vocabulary.events import (
    CreditGranted,
    CreditSpent,
    PaymentConsumed,
    PaymentReleased,
)

SID = samples.hex64("submission-1")
OTHER_SID = samples.hex64("submission-2")


# --- Payment and credit ----------------------------------------------------------------


def _consumed(sid: str = SID) -> PaymentConsumed:
    return PaymentConsumed(payment_ref="pay-1", submission_id=sid, arena_id="mlp-arena",
                           amount_rao=5)


def test_an_unopened_payment_or_credit_stream_refuses_with_stream_not_started() -> None:
    released = P.payment_step(None, PaymentReleased(submission_id=SID, reason="expired"))
    assert isinstance(released, Refusal)
    assert (released.machine, released.code) == ("payment", "stream_not_started")
    spent = P.credit_step(None, CreditSpent(submission_id=SID))
    assert isinstance(spent, Refusal)
    assert (spent.machine, spent.code) == ("credit", "stream_not_started")


def test_the_payment_and_credit_folds_leave_refused_events_out() -> None:
    # A second PaymentConsumed and a release for another submission are refused, so the
    # fold still holds the consumed payment; a release for its own submission then applies.
    payment = P.fold_payment([
        _consumed(), _consumed(OTHER_SID),
        PaymentReleased(submission_id=OTHER_SID, reason="expired"),
    ])
    assert payment == P.PaymentState("pay-1", SID, "mlp-arena", 5, P.CONSUMED, None)
    refunded = P.fold_payment([
        _consumed(), PaymentReleased(submission_id=SID, reason="expired"),
        PaymentReleased(submission_id=SID, reason="again"),
    ])
    assert refunded == P.PaymentState("pay-1", SID, "mlp-arena", 5, P.RELEASED, "expired")
    grant = CreditGranted(credit_id="cr-1", hotkey="5Miner", amount_rao=9, note="n")
    credit = P.fold_credit([
        grant, grant, CreditSpent(submission_id=SID), CreditSpent(submission_id=OTHER_SID),
    ])
    assert credit == P.CreditState("cr-1", "5Miner", 9, "n", P.SPENT, SID)

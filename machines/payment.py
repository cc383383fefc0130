"""Folds ``payment-<payment_ref>`` and ``credit-<credit_id>`` streams.

A payment stream is opened by PaymentConsumed (appended with "no stream" expected, so a
payment pays at most once) and may end RELEASED (refund). A credit stream is opened by
CreditGranted and ends SPENT. Both terminal states absorb nothing.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import NamedTuple

from machines.refusal import ABSENT, Refusal
from machines.table import Guard, Table, evolve
from vocabulary.events import (
    CreditGranted,
    CreditSpent,
    Event,
    PaymentConsumed,
    PaymentReleased,
)

__all__ = [
    "CONSUMED",
    "CREDIT_TABLE",
    "GRANTED",
    "PAYMENT_TABLE",
    "RELEASED",
    "SPENT",
    "CreditState",
    "PaymentState",
    "credit_step",
    "fold_credit",
    "fold_payment",
    "payment_step",
]

CONSUMED = "CONSUMED"
RELEASED = "RELEASED"
GRANTED = "GRANTED"
SPENT = "SPENT"


class PaymentState(NamedTuple):
    """Is one consumed payment: what it paid for, how much, and whether it was released.

    A named tuple (not a dataclass like the other states): the fold keeps one per payment for
    the ledger's whole history, and a tuple takes about a quarter of the memory.
    """

    payment_ref: str
    submission_id: str
    arena_id: str
    amount_rao: int
    status: str = CONSUMED
    release_reason: str | None = None


class CreditState(NamedTuple):
    """Is one operator-granted credit: its hotkey, amount and the submission it paid for."""

    credit_id: str
    hotkey: str
    amount_rao: int
    note: str
    status: str = GRANTED
    submission_id: str | None = None


def _release(state: PaymentState, event: PaymentReleased, _: None) -> PaymentState | Refusal:
    if event.submission_id != state.submission_id:
        return PAYMENT_TABLE.refuse(
            state.status, event.event_type, "payment_submission_mismatch",
            f"submission_id: paid for {state.submission_id[:16]}, "
            f"event names {event.submission_id[:16]}",
        )
    return evolve(state, status=RELEASED, release_reason=event.reason)


def _spend(state: CreditState, event: CreditSpent, target: str) -> CreditState:
    return evolve(state, status=target, submission_id=event.submission_id)


#: The payment machine (CONSUMED → RELEASED).
PAYMENT_TABLE: Table[PaymentState, None] = Table(
    machine="payment",
    states=(CONSUMED, RELEASED),
    initial=CONSUMED,
    opening="PaymentConsumed",
    terminals=frozenset({RELEASED}),
    rules={(CONSUMED, "PaymentReleased"): Guard((RELEASED,), _release, "same submission")},
    refusals={(CONSUMED, "PaymentConsumed"): "stream_already_started"},
)

#: The credit machine (GRANTED → SPENT).
CREDIT_TABLE: Table[CreditState, None] = Table(
    machine="credit",
    states=(GRANTED, SPENT),
    initial=GRANTED,
    opening="CreditGranted",
    terminals=frozenset({SPENT}),
    rules={(GRANTED, "CreditSpent"): SPENT},
    effects={"CreditSpent": _spend},
    refusals={(GRANTED, "CreditGranted"): "stream_already_started"},
)


def payment_step(state: PaymentState | None, event: Event) -> PaymentState | Refusal:
    """Returns the payment after ``event``, or the refusal of it."""
    if state is None:
        if isinstance(event, PaymentConsumed):
            fields = event.__dict__  # pydantic's __getattr__ makes attribute reads slow
            return PaymentState(
                fields["payment_ref"], fields["submission_id"], fields["arena_id"],
                fields["amount_rao"],
            )
        return PAYMENT_TABLE.refuse(ABSENT, event.event_type, "stream_not_started")
    return PAYMENT_TABLE.step(state, event, None)


def credit_step(state: CreditState | None, event: Event) -> CreditState | Refusal:
    """Returns the credit after ``event``, or the refusal of it."""
    if state is None:
        if isinstance(event, CreditGranted):
            return CreditState(event.credit_id, event.hotkey, event.amount_rao, event.note)
        return CREDIT_TABLE.refuse(ABSENT, event.event_type, "stream_not_started")
    return CREDIT_TABLE.step(state, event, None)


def fold_payment(events: Iterable[Event]) -> PaymentState | None:
    """Folds a whole payment stream; refused events leave the state unchanged."""
    state: PaymentState | None = None
    for event in events:
        result = payment_step(state, event)
        state = state if isinstance(result, Refusal) else result
    return state


def fold_credit(events: Iterable[Event]) -> CreditState | None:
    """Folds a whole credit stream; refused events leave the state unchanged."""
    state: CreditState | None = None
    for event in events:
        result = credit_step(state, event)
        state = state if isinstance(result, Refusal) else result
    return state

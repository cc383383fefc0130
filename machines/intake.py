"""Applies the intake rules (docs/machines.md) to an arrived submission, in order.

1. An arena whose ``fee_rao`` is 0 admits with fee kind ``waived`` and skips rules 2 to 4.
2. No payment named and no unspent credit → ``missing_eval_cost_payment``.
3. The named payment already consumed (by another submission) → ``eval_cost_payment_used``.
4. The named payment not on chain, or below the arena fee → ``eval_cost_payment_invalid``.
5. A 17th admission for the hotkey in its admission epoch → ``hotkey_epoch_admission_limit``.
6. The same content_hash already FAILED under the arena's current commission →
   ``duplicate_of:<first 16 hex of that submission>:<its reason>`` (a PASS is never replayed).
7. Arena retired → ``arena_retired``.

Choices beyond the rules above: the admission epoch is that of the *arrival* block (a chain
fact every validator agrees on); a submission without a payment spends the hotkey's first
unspent credit in grant order, whatever its amount, and records the arena fee as the
amount; a payment or credit already consumed by
*this* submission counts as available (so the order of events in one atomic append does not
matter). The outcome is data: an ``Admission`` or a ``Rejection``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import NamedTuple

from machines.arena import ArenaState
from machines.limits import admissions_per_epoch_max
from machines.reasons import duplicate_reason
from machines.submission import SubmissionState

__all__ = [
    "Admission",
    "CreditView",
    "FailedRef",
    "IntakeContext",
    "Rejection",
    "epoch_blocks",
    "epoch_of",
    "intake",
]

#: Blocks per admission epoch.
epoch_blocks = 360


def epoch_of(block: int) -> int:
    """Returns the admission epoch of a block (``block // 360``)."""
    return block // epoch_blocks


class Admission(NamedTuple):
    """Admits a submission: the fee SubmissionAdmitted records (kind, ref, amount)."""

    kind: str
    ref: str
    amount_rao: int


class Rejection(NamedTuple):
    """Rejects a submission with a stable reason (SubmissionRejected's reason)."""

    reason: str


class CreditView(NamedTuple):
    """Is an unspent credit as intake sees it (``spent_by`` set only for this submission)."""

    credit_id: str
    amount_rao: int
    spent_by: str | None = None


class FailedRef(NamedTuple):
    """Names the earliest-arriving FAILED submission of a content hash under a commission."""

    submission_id: str
    reason: str


class IntakeContext(NamedTuple):
    """Is everything intake reads besides the arrival itself.

    - ``arena``: the arena's folded state (current commission digest, fee, retired).
    - ``payment_amount_rao``: the amount the chain shows for the arrival's payment_ref
      (None: no such payment on chain, or no ref).
    - ``consumed_payments``: payment_ref → submission_id that consumed it.
    - ``credits``: the hotkey's unspent credits, in grant order.
    - ``admissions``: (hotkey, epoch) → admissions so far.
    - ``failed``: (commission_digest, content_hash) → earliest FAILED submission.

    A named tuple: the fold builds one per intake decision, and a frozen dataclass's
    ``__init__`` costs several times as much.
    """

    arena: ArenaState
    payment_amount_rao: int | None
    consumed_payments: Mapping[str, str]
    credits: Sequence[CreditView]
    admissions: Mapping[tuple[str, int], int]
    failed: Mapping[tuple[str, str], FailedRef]


#: ``tuple.__new__(Cls, values)`` builds a named tuple without its Python-level ``__new__``
#: (about a third of the cost); the fold decides intake once per arrival.
_new_tuple = tuple.__new__
_WAIVED = Admission("waived", "", 0)


def _fee(arrived: SubmissionState, context: IntakeContext) -> Admission | Rejection:
    fee = context.arena.fee_rao
    if fee == 0:
        return _WAIVED
    ref = arrived.payment_ref
    if ref is None:
        for credit in context.credits:
            if credit.spent_by in (None, arrived.submission_id):
                return _new_tuple(Admission, ("credit", credit.credit_id, fee))
        return Rejection("missing_eval_cost_payment")
    consumer = context.consumed_payments.get(ref)
    if consumer is not None and consumer != arrived.submission_id:
        return Rejection("eval_cost_payment_used")
    amount = context.payment_amount_rao
    if amount is None or amount < fee:
        return Rejection("eval_cost_payment_invalid")
    return _new_tuple(Admission, ("payment", ref, amount))


def intake(arrived: SubmissionState, context: IntakeContext) -> Admission | Rejection:
    """Returns the intake outcome of an arrived submission: the first rejecting rule, or admission.

    ``arrived`` is the submission's folded state (``machines.submission.start(event)`` for a
    SubmissionArrived that is not in the ledger yet).
    """
    outcome = _fee(arrived, context)
    if type(outcome) is Rejection:
        return outcome
    epoch = epoch_of(arrived.arrival_block)
    if context.admissions.get((arrived.hotkey, epoch), 0) >= admissions_per_epoch_max:
        return Rejection("hotkey_epoch_admission_limit")
    arena = context.arena
    failed = context.failed.get((arena.commission_digest, arrived.content_hash))
    if failed is not None:
        return Rejection(duplicate_reason(failed.submission_id, failed.reason))
    if arena.retired:
        return Rejection("arena_retired")
    return outcome

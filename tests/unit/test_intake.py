"""Checks the intake rules, each alone and in their documented order."""

from __future__ import annotations

from typing import Any

import pytest

from machines import arena, samples, submission
from machines.intake import (
    Admission,
    CreditView,
    FailedRef,
    IntakeContext,
    Rejection,
    epoch_of,
    intake,
)
from vocabulary.events import ArenaRetired

FEE = 1_000_000_000
BLOCK = 3_600  # epoch 10


def _arena(fee: int = FEE, retired: bool = False) -> arena.ArenaState:
    state = arena.start(samples.commissioned(fee_rao=fee))
    if not retired:
        return state
    retired_state = arena.apply(state, ArenaRetired(block=5, reason="done"))
    assert retired_state is not None
    return retired_state


def _sub(**fields: Any) -> submission.SubmissionState:
    return submission.start(samples.arrived(block=BLOCK, **fields))


def _context(**fields: Any) -> IntakeContext:
    base: dict[str, Any] = {
        "arena": _arena(),
        "payment_amount_rao": FEE,
        "consumed_payments": {},
        "credits": (),
        "admissions": {},
        "failed": {},
    }
    base.update(fields)
    return IntakeContext(**base)


def test_payment_admits_with_the_paid_amount() -> None:
    sub = _sub(payment_ref="pay-1")
    outcome = intake(sub, _context(payment_amount_rao=FEE + 5))
    assert outcome == Admission("payment", "pay-1", FEE + 5)


def test_zero_fee_waives_and_skips_fee_rules() -> None:
    sub = _sub(payment_ref="pay-1")
    context = _context(arena=_arena(fee=0), consumed_payments={"pay-1": "x" * 64})
    assert intake(sub, context) == Admission("waived", "", 0)


def test_missing_payment_without_credit() -> None:
    assert intake(_sub(), _context()) == Rejection("missing_eval_cost_payment")


def test_credit_pays_when_no_payment_is_named() -> None:
    credits = (CreditView("cr-1", 1), CreditView("cr-2", FEE))
    assert intake(_sub(), _context(credits=credits)) == Admission("credit", "cr-1", FEE)


def test_payment_reuse_is_refused_but_own_consumption_is_not() -> None:
    sub = _sub(payment_ref="pay-1")
    used = _context(consumed_payments={"pay-1": "f" * 64})
    assert intake(sub, used) == Rejection("eval_cost_payment_used")
    own = _context(consumed_payments={"pay-1": sub.submission_id})
    assert intake(sub, own) == Admission("payment", "pay-1", FEE)


@pytest.mark.parametrize("amount", [None, 0, FEE - 1])
def test_short_or_missing_payment_is_invalid(amount: int | None) -> None:
    sub = _sub(payment_ref="pay-1")
    assert intake(sub, _context(payment_amount_rao=amount)) == Rejection(
        "eval_cost_payment_invalid"
    )


def test_seventeenth_admission_in_an_epoch_is_rejected() -> None:
    sub = _sub(payment_ref="pay-1")
    assert epoch_of(BLOCK) == 10 and epoch_of(BLOCK - 1) == 9
    sixteen = _context(admissions={(sub.hotkey, 10): 16})
    assert intake(sub, sixteen) == Rejection("hotkey_epoch_admission_limit")
    fifteen = _context(admissions={(sub.hotkey, 10): 15, (sub.hotkey, 9): 99})
    assert intake(sub, fifteen) == Admission("payment", "pay-1", FEE)


def test_duplicate_of_a_failure_under_the_same_commission() -> None:
    sub = _sub(payment_ref="pay-1")
    state = _arena()
    first = "ab" * 32
    failed = {(state.commission_digest, sub.content_hash): FailedRef(first, "candidate_slower")}
    assert intake(sub, _context(failed=failed)) == Rejection(
        f"duplicate_of:{first[:16]}:candidate_slower"
    )
    elsewhere = {("9" * 64, sub.content_hash): FailedRef(first, "candidate_slower")}
    assert isinstance(intake(sub, _context(failed=elsewhere)), Admission)


def test_retired_arena_rejects_last() -> None:
    sub = _sub(payment_ref="pay-1")
    assert intake(sub, _context(arena=_arena(retired=True))) == Rejection("arena_retired")
    # Fee rules come first: a retired arena still reports a missing payment.
    assert intake(_sub(), _context(arena=_arena(retired=True))) == Rejection(
        "missing_eval_cost_payment"
    )


def test_rules_apply_in_domain_order() -> None:
    sub = _sub(payment_ref="pay-1")
    state = _arena(retired=True)
    everything = _context(
        arena=state,
        consumed_payments={"pay-1": "f" * 64},
        payment_amount_rao=1,
        admissions={(sub.hotkey, 10): 16},
        failed={(state.commission_digest, sub.content_hash): FailedRef("e" * 64, "futility")},
    )
    order = [
        ("consumed_payments", {}, "eval_cost_payment_used"),
        ("payment_amount_rao", FEE, "eval_cost_payment_invalid"),
        ("admissions", {}, "hotkey_epoch_admission_limit"),
        ("failed", {}, f"duplicate_of:{'e' * 16}:futility"),
    ]
    fields = everything._asdict()
    for name, cleared, expected in order:
        assert intake(sub, IntakeContext(**fields)) == Rejection(expected)
        fields[name] = cleared
    assert intake(sub, IntakeContext(**fields)) == Rejection("arena_retired")

"""Builds settlements from the folded ledger and checks recorded ones (DOMAIN §7).

The arithmetic is ``machines.settlement`` (pure); this module feeds it from a
``LedgerFold`` caught up to a position: every arena's submissions in arrival-key order with
status, verdict, recorded speedup and reward group, the emission policy in force, and the
fee records. A SettlementComputed is accepted (at append and in replay) only when it was
computed as of the position right before it and equals, byte for byte, what the ledger
up to that position gives.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ledger.domain import CONTROL_HOTKEY
from ledger.errors import Refused
from ledger.events import EmissionPolicySet, SettlementComputed

if TYPE_CHECKING:
    from machines.projection import LedgerFold
    from machines.settlement import Settlement, SettlementInput

__all__ = ["check_recorded", "compute", "fee_summary", "rewards", "settlement_input"]


def settlement_input(
    fold: LedgerFold, policy: EmissionPolicySet | None, block: int
) -> SettlementInput:
    """Returns the settlement input of the ledger as folded, at settlement ``block``."""
    from machines import settlement as rules

    if policy is None:
        raise Refused(
            "settle is refused until the settlement stream holds an EmissionPolicySet; "
            "nothing was written",
            reason="emission_policy_missing",
        )
    arenas = [_arena_input(fold, arena) for arena in fold.arenas()]
    return rules.SettlementInput(
        block=block,
        as_of_position=fold.position,
        policy=rules.EmissionPolicy.from_event(policy),
        arenas=arenas,
        fees=_fee_records(fold),
    )


#: Statuses that matter to rewards: a PASS, or an earlier arrival that blocks one.
_RELEVANT = frozenset({"QUALIFIED", "ARRIVED", "QUEUED", "QUALIFYING", "HELD"})


def _arena_input(fold: LedgerFold, arena: Any) -> Any:
    from machines import settlement as rules

    policy = arena.commissions[arena.commission_digest].event.policy
    subs = []
    for sub in fold.submissions(arena.arena_id):
        if sub.hotkey == CONTROL_HOTKEY:
            continue  # the validator's own control runs: never rewarded, never blocking
        if sub.status not in _RELEVANT:
            continue  # finished without a PASS: blocks nothing and earns nothing
        resolution = fold.resolution(sub.submission_id) if sub.status == "QUALIFIED" else None
        block, index, subindex = sub.arrival_key[:3]
        subs.append(
            rules.SubmissionInput(
                submission_id=sub.submission_id,
                hotkey=sub.hotkey,
                content_hash=sub.content_hash,
                block=block,
                event_index=index,
                event_subindex=subindex,
                status=sub.status,
                incumbent_digest=fold.reward_group(sub.submission_id) or arena.incumbent_digest,
                verdict="PASS" if sub.status == "QUALIFIED" else _verdict(sub),
                speedup=None if resolution is None else resolution.speedup,
            )
        )
    return rules.ArenaInput(
        arena_id=arena.arena_id,
        emission_share_ppm=arena.commissions[arena.commission_digest].event.emission_share_ppm,
        reward_margin=policy.reward_margin,
        submissions=subs,
    )


def _verdict(sub: Any) -> str | None:
    verdict = sub.verdict
    return None if verdict == "PASS" else verdict


def _fee_records(fold: LedgerFold) -> Any:
    from machines import settlement as rules

    payments = [
        rules.PaymentRecord(p.arena_id, p.payment_ref, p.amount_rao, p.status == "RELEASED")
        for p in fold.payments()
    ]
    credits = []
    for credit in fold.credits():
        if credit.submission_id is None:
            continue
        sub = fold.submission(credit.submission_id)
        if sub is None or sub.fee is None:
            continue
        credits.append(rules.CreditRecord(sub.arena_id, credit.credit_id, sub.fee.amount_rao))
    return rules.FeeRecords(payments=payments, credits=credits)


def compute(fold: LedgerFold, policy: EmissionPolicySet | None, block: int) -> Settlement:
    """Computes the settlement of the ledger as folded, at ``block``."""
    from machines import settlement as rules

    return rules.compute_settlement(settlement_input(fold, policy, block))


def check_recorded(
    fold: LedgerFold,
    policy: EmissionPolicySet | None,
    event: SettlementComputed,
    payload: dict[str, Any],
) -> tuple[str, Any, Any] | None:
    """Returns (field, recorded, recomputed) of the first difference, or None when equal.

    The fold must stand at the position right before the SettlementComputed.
    """
    from machines import settlement as rules

    if event.as_of_position != fold.position:
        return ("as_of_position", event.as_of_position, fold.position)
    expected = rules.settlement_payload(compute(fold, policy, event.block))
    differing = rules.diff_settlement_payload(expected, payload)
    if not differing:
        return None
    # Name the substance (weights, claims, fees) before the digest that merely follows it.
    name = next((n for n in differing if n != "settlement_digest"), differing[0])
    return (name, payload.get(name), expected.get(name))


def rewards(fold: LedgerFold, arena_id: str | None = None) -> list[dict[str, Any]]:
    """Explains every PASS: its group, the best before it, rewarded/lost_potential/pending."""
    from machines import settlement as rules

    arenas = [
        _arena_input(fold, a) for a in fold.arenas() if arena_id is None or a.arena_id == arena_id
    ]
    return rules.explain_rewards(arenas)


def fee_summary(fold: LedgerFold, arena_id: str | None = None) -> dict[str, Any]:
    """Returns payments consumed and released, credits, and totals, per arena and overall."""
    from machines import settlement as rules

    arena_ids = [a.arena_id for a in fold.arenas() if arena_id is None or a.arena_id == arena_id]
    records = _fee_records(fold)
    if arena_id is not None:
        records = rules.FeeRecords(
            payments=[p for p in records.payments if p.arena_id == arena_id],
            credits=[c for c in records.credits if c.arena_id == arena_id],
        )
    summary: dict[str, Any] = rules.summarize_fees(arena_ids, records).to_dict()
    return summary

"""Tests settlement-rules.v1: reward assessment, claims, weights, fees and the digest."""

from __future__ import annotations

import hashlib
import random
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from machines.settlement_rules import (
    BLOCKING_STATUSES,
    ArenaInput,
    Claim,
    CreditRecord,
    EmissionPolicy,
    FeeRecords,
    PaymentRecord,
    RewardAssessment,
    RewardScan,
    SettlementInput,
    SubmissionInput,
    assess_rewards,
    build_claims,
    check_settlement_digest,
    claim_credit,
    compute_settlement,
    compute_weights,
    diff_settlement_payload,
    explain_rewards,
    largest_remainder,
    settle_assessed,
    settlement_payload,
    speedup_to_ppm,
    summarize_fees,
)
from vocabulary.codec import canonical_bytes
from vocabulary.errors import InvalidInput
from vocabulary.events import EmissionPolicySet, SettlementComputed
from vocabulary.fields import is_arena_id, is_digest, is_hotkey, is_local_id, require_hotkey


def hexid(name: str) -> str:
    """Returns a stable 64-hex id for a readable test name."""
    return hashlib.sha256(name.encode()).hexdigest()


INC_MLP = hexid("incumbent-mlp")
INC_MLP_2 = hexid("incumbent-mlp-2")
INC_CACHE = hexid("incumbent-cache")
POLICY = EmissionPolicy(half_life_blocks=1000, burn_hotkey="burn", validator_hotkey="val")


def sub(
    name: str,
    hotkey: str,
    block: int,
    status: str,
    speedup: str | None = None,
    incumbent: str = INC_MLP,
    event_index: int = 0,
) -> SubmissionInput:
    """Builds a submission whose verdict follows from its status, as the machine would."""
    verdict = {"QUALIFIED": "PASS", "FAILED": "FAIL", "NO_DECISION": "NO_DECISION"}.get(status)
    return SubmissionInput(
        submission_id=hexid(name),
        hotkey=hotkey,
        content_hash=hexid("content-" + name),
        block=block,
        event_index=event_index,
        event_subindex=0,
        status=status,
        incumbent_digest=incumbent,
        verdict=verdict,
        speedup=speedup,
    )


# The hand-computed world: arena "mlp" (600,000 ppm) and arena "cache" (300,000 ppm);
# the remaining 100,000 ppm go to burn. h = 1000 blocks. reward_margin = 0.015.
MLP_SUBS = (
    sub("s1", "alice", 100, "QUALIFIED", "1.019129"),  # first PASS of its group: rewarded
    sub("s2", "bob", 110, "NO_DECISION"),  # completed NO_DECISION: never blocks
    sub("s3", "carol", 120, "QUALIFIED", "1.030000"),  # below 1.034415935: lost_potential
    sub("s4", "bob", 130, "QUALIFIED", "1.040000"),  # at least 1.034415935: rewarded
    sub("s5", "alice", 140, "FAILED"),  # terminal: never blocks, never earns
)


def cache_subs(c1_status: str) -> tuple[SubmissionInput, ...]:
    """Returns arena "cache": c1 (carol) in ``c1_status`` arrived before c2 (alice) PASSed."""
    return (
        sub("c1", "carol", 200, c1_status, incumbent=INC_CACHE),
        sub("c2", "alice", 210, "QUALIFIED", "1.050000", incumbent=INC_CACHE),
    )


def world(block: int, c1_status: str = "HELD", fees: FeeRecords | None = None) -> SettlementInput:
    """Returns the hand-computed settlement input at ``block``."""
    return SettlementInput(
        block=block,
        as_of_position=42,
        policy=POLICY,
        arenas=(
            ArenaInput("mlp", 600_000, "0.015", MLP_SUBS),
            ArenaInput("cache", 300_000, "0.015", cache_subs(c1_status)),
        ),
        fees=fees or FeeRecords(),
    )


# --- the hand-computed settlement -----------------------------------------------------------


def test_hand_computed_settlement_at_block_1100() -> None:
    result = compute_settlement(world(1100))
    # Claims: s1 and s4 (s3 lost, c2 pending behind the HELD c1).
    # s1: speedup_ppm = floor(1.019129 * 10^6) = 1,019,129; gain = 19,129; age = 1100-100 = 1000
    #     credit = floor(19,129 * 1000 / (1000 + 1000)) = floor(19,129,000 / 2000)
    #            = floor(9,564.5) = 9,564
    # s4: speedup_ppm = 1,040,000; gain = 40,000; age = 1100-130 = 970
    #     credit = floor(40,000 * 1000 / 1970) = floor(40,000,000 / 1970); 1970 * 20,304 =
    #            39,998,880, remainder 1,120 -> 20,304
    assert [
        (c.submission_id, c.hotkey, c.speedup_ppm, c.block, c.credit) for c in result.claims
    ] == [
        (hexid("s1"), "alice", 1_019_129, 100, 9_564),
        (hexid("s4"), "bob", 1_040_000, 130, 20_304),
    ]
    # Pool mlp = 600,000 ppm, sum(credit) = 9,564 + 20,304 = 29,868.
    # alice: 600,000 * 9,564 = 5,738,400,000 = 29,868 * 192,125 + 10,500 -> 192,125 r 10,500
    # bob:   600,000 * 20,304 = 12,182,400,000 = 29,868 * 407,874 + 19,368 -> 407,874 r 19,368
    # floors sum to 599,999: the 1 ppm left goes to the larger remainder, bob -> 407,875.
    # Pool cache = 300,000 ppm has no credit (c2 pending) -> burn.
    # burn = 1,000,000 - (600,000 + 300,000) = 100,000, plus 300,000 = 400,000.
    assert dict(result.weights_ppm) == {"alice": 192_125, "bob": 407_875, "burn": 400_000}
    assert sum(result.weights_ppm.values()) == 1_000_000


def test_age_decay_shifts_weight_at_block_2100() -> None:
    result = compute_settlement(world(2100))
    # s1: age 2000 -> floor(19,129,000 / 3000) = floor(6,376.33) = 6,376
    # s4: age 1970 -> floor(40,000,000 / 2970) = floor(13,468.01) = 13,468
    assert [c.credit for c in result.claims] == [6_376, 13_468]
    # sum = 19,844. alice: 600,000 * 6,376 = 3,825,600,000 = 19,844 * 192,783 + 14,148
    #                bob: 600,000 * 13,468 = 8,080,800,000 = 19,844 * 407,216 + 5,696
    # floors sum to 599,999; this time alice has the larger remainder -> 192,784.
    assert dict(result.weights_ppm) == {"alice": 192_784, "bob": 407_216, "burn": 400_000}


def test_earlier_held_blocks_until_resolved_then_hotkey_sums_across_arenas() -> None:
    held = {a.submission_id: a for a in assess_rewards(world(1100, "HELD").arenas)}
    assert held[hexid("c2")].status == "pending"
    assert held[hexid("c2")].blocked_by == (hexid("c1"),)
    # HoldReleased puts c1 back in QUEUED: it may still PASS first, so it still blocks.
    released = {a.submission_id: a for a in assess_rewards(world(1100, "QUEUED").arenas)}
    assert released[hexid("c2")].status == "pending"
    # Once c1 is resolved (FAIL), c2 is assessed: first PASS of its group -> rewarded.
    result = compute_settlement(world(1100, "FAILED"))
    # c2: speedup_ppm 1,050,000; gain 50,000; age 1100-210 = 890
    #     credit = floor(50,000,000 / 1890) = 26,455 (1890 * 26,455 = 49,999,950, r 50)
    assert result.claims[0].submission_id == hexid("c2")
    assert result.claims[0].credit == 26_455
    # cache pool 300,000 goes entirely to alice; alice also holds 192,125 from mlp:
    # alice = 492,125; bob = 407,875; burn = 100,000 (only the unassigned share).
    assert dict(result.weights_ppm) == {"alice": 492_125, "bob": 407_875, "burn": 100_000}


def test_explain_rewards_names_group_best_threshold_and_blockers() -> None:
    explained = {e["submission_id"]: e for e in explain_rewards(world(1100).arenas)}
    assert set(explained) == {hexid(n) for n in ("s1", "s3", "s4", "c2")}
    assert explained[hexid("s1")]["status"] == "rewarded"
    assert explained[hexid("s1")]["best_before"] is None
    # s3 needed 1.019129 * 1.015 = 1.034415935 and had 1.030000.
    assert explained[hexid("s3")] == {
        "arena_id": "mlp",
        "incumbent_digest": INC_MLP,
        "submission_id": hexid("s3"),
        "hotkey": "carol",
        "block": 120,
        "speedup": "1.030000",
        "status": "lost_potential",
        "best_before": {"submission_id": hexid("s1"), "speedup": "1.019129"},
        "required_speedup": "1.034415935",
        "blocked_by": [],
    }
    # s4 is judged against s1 (the best), not against the lost s3.
    assert explained[hexid("s4")]["status"] == "rewarded"
    assert explained[hexid("s4")]["best_before"]["submission_id"] == hexid("s1")
    assert explained[hexid("c2")]["status"] == "pending"
    assert explained[hexid("c2")]["blocked_by"] == [hexid("c1")]


def test_fees_sum_payments_per_arena_and_report_credits_apart() -> None:
    records = FeeRecords(
        payments=[
            PaymentRecord("mlp", "pay-1", 500),
            PaymentRecord("mlp", "pay-2", 500, released=True),
            PaymentRecord("cache", "pay-3", 700),
        ],
        credits=[CreditRecord("mlp", "credit-1", 500)],
    )
    fees = compute_settlement(world(1100, fees=records)).fees.to_dict()
    # mlp: consumed 500 + 500 = 1,000; released 500; net 500; credits 500 (not revenue).
    # cache: consumed 700, net 700. total: consumed 1,700, released 500, net 1,200.
    assert fees == {
        "arenas": {
            "cache": {
                "consumed_rao": 700,
                "credits_spent_rao": 0,
                "net_rao": 700,
                "released_rao": 0,
            },
            "mlp": {
                "consumed_rao": 1000,
                "credits_spent_rao": 500,
                "net_rao": 500,
                "released_rao": 500,
            },
        },
        "total": {
            "consumed_rao": 1700,
            "credits_spent_rao": 500,
            "net_rao": 1200,
            "released_rao": 500,
        },
    }


def test_an_arena_paid_only_by_credits_has_no_revenue() -> None:
    # "cache" is named and "mlp" only appears in the records: neither consumed a payment.
    records = FeeRecords(
        credits=[CreditRecord("cache", "credit-9", 300), CreditRecord("mlp", "credit-8", 200)]
    )
    credits_only = {"consumed_rao": 0, "released_rao": 0, "net_rao": 0}
    assert summarize_fees(["cache"], records).to_dict() == {
        "arenas": {
            "cache": {**credits_only, "credits_spent_rao": 300},
            "mlp": {**credits_only, "credits_spent_rao": 200},
        },
        "total": {**credits_only, "credits_spent_rao": 500},
    }


def test_fees_list_arenas_without_records_with_zeros() -> None:
    summary = summarize_fees(["quiet"], FeeRecords())
    assert summary.to_dict()["arenas"] == {
        "quiet": {"consumed_rao": 0, "credits_spent_rao": 0, "net_rao": 0, "released_rao": 0}
    }


# --- reward assessment rules ----------------------------------------------------------------


# Listed here, not read from BLOCKING_STATUSES: a status dropped from that constant would
# drop its own case too. docs/settlement.md: every earlier arrival not terminal and not a completed
# NO_DECISION blocks; ARRIVED (intake undecided) may still be admitted and PASS.
@pytest.mark.parametrize("status", ["ARRIVED", "QUEUED", "QUALIFYING", "HELD"])
def test_earlier_unresolved_submission_blocks_a_pass(status: str) -> None:
    assert status in BLOCKING_STATUSES
    arena = ArenaInput(
        "a", 1, "0.015", [sub("x", "k1", 5, status), sub("p", "k2", 6, "QUALIFIED", "1.1")]
    )
    (assessment,) = assess_rewards([arena])
    assert assessment.status == "pending"
    assert assessment.blocked_by == (hexid("x"),)


@pytest.mark.parametrize("status", ["REJECTED", "FAILED", "EXPIRED", "NO_DECISION"])
def test_earlier_terminal_or_parked_submission_does_not_block(status: str) -> None:
    arena = ArenaInput(
        "a", 1, "0.015", [sub("x", "k1", 5, status), sub("p", "k2", 6, "QUALIFIED", "1.1")]
    )
    (assessment,) = assess_rewards([arena])
    assert assessment.status == "rewarded"
    assert assessment.blocked_by == ()


def test_later_unresolved_submission_does_not_block() -> None:
    arena = ArenaInput(
        "a", 1, "0.015", [sub("p", "k2", 6, "QUALIFIED", "1.1"), sub("x", "k1", 7, "HELD")]
    )
    assert assess_rewards([arena])[0].status == "rewarded"


def test_arrival_key_not_input_order_decides_who_is_first() -> None:
    # Same block: event_index decides; the list order is the reverse of arrival.
    late = sub("late", "k1", 9, "QUALIFIED", "1.050000", event_index=3)
    early = sub("early", "k2", 9, "QUALIFIED", "1.040000", event_index=1)
    result = {
        a.submission_id: a.status
        for a in assess_rewards([ArenaInput("a", 1, "0.015", [late, early])])
    }
    # early is first -> rewarded; late needs 1.04 * 1.015 = 1.0556 -> lost_potential.
    assert result == {hexid("early"): "rewarded", hexid("late"): "lost_potential"}


def test_one_event_position_is_ordered_by_hotkey_then_content_hash() -> None:
    # docs/concepts.md: the arrival key is (block, event_index, event_subindex, miner_hotkey,
    # content_hash). Two arrivals of one event position go by hotkey, whatever their ids:
    # hexid("x-b") sorts before hexid("x-a"), so an order by id would put b first.
    a = sub("x-a", "a", 7, "QUALIFIED", "1.010000")
    b = sub("x-b", "b", 7, "QUALIFIED", "1.020000")
    assert hexid("x-b") < hexid("x-a")
    result = {
        r.submission_id: r.status for r in assess_rewards([ArenaInput("a", 1, "0.015", [b, a])])
    }
    # a is first -> rewarded; b needs 1.01 * 1.015 = 1.02515 > 1.02 -> lost_potential.
    assert result == {hexid("x-a"): "rewarded", hexid("x-b"): "lost_potential"}


def test_pending_pass_keeps_every_later_pass_pending() -> None:
    subs = [
        sub("held", "k0", 1, "HELD"),
        sub("p1", "k1", 2, "QUALIFIED", "1.010000"),
        sub("p2", "k2", 3, "QUALIFIED", "1.500000"),  # would be rewarded, but p1 is undecided
        sub("p3", "k3", 4, "QUALIFIED", "1.600000", incumbent=INC_MLP_2),  # other group too
    ]
    result = assess_rewards([ArenaInput("a", 1, "0.015", subs)])
    assert [a.status for a in result] == ["pending", "pending", "pending"]
    assert all(a.blocked_by == (hexid("held"),) for a in result)


def test_threshold_is_inclusive() -> None:
    # best 1.000000, margin 0.015 -> required exactly 1.015.
    subs = [
        sub("b", "k1", 1, "QUALIFIED", "1.000000"),
        sub("under", "k2", 2, "QUALIFIED", "1.014999"),
        sub("equal", "k3", 3, "QUALIFIED", "1.015000"),
    ]
    result = assess_rewards([ArenaInput("a", 1, "0.015", subs)])
    assert [a.status for a in result] == ["rewarded", "lost_potential", "rewarded"]
    assert result[1].required_speedup == "1.015"


def test_new_incumbent_starts_a_new_group() -> None:
    subs = [
        sub("old", "k1", 1, "QUALIFIED", "1.200000", incumbent=INC_MLP),
        sub("new", "k2", 2, "QUALIFIED", "1.010000", incumbent=INC_MLP_2),
        sub("old2", "k3", 3, "QUALIFIED", "1.210000", incumbent=INC_MLP),
    ]
    result = assess_rewards([ArenaInput("a", 1, "0.015", subs)])
    # "new" is first in its own group; "old2" is below 1.2 * 1.015 = 1.218 in the old group.
    assert [a.status for a in result] == ["rewarded", "rewarded", "lost_potential"]
    assert result[1].best_before is None


def test_rewarded_pass_raises_the_bar_for_the_next() -> None:
    subs = [
        sub("a1", "k1", 1, "QUALIFIED", "1.000000"),
        sub("a2", "k2", 2, "QUALIFIED", "1.020000"),  # >= 1.015 -> rewarded, new best
        sub("a3", "k3", 3, "QUALIFIED", "1.030000"),  # needs 1.02 * 1.015 = 1.0353
    ]
    result = assess_rewards([ArenaInput("a", 1, "0.015", subs)])
    assert [a.status for a in result] == ["rewarded", "rewarded", "lost_potential"]
    assert result[2].required_speedup == "1.0353"


# --- claims and credit ----------------------------------------------------------------------


def test_speedup_to_ppm_floors() -> None:
    assert speedup_to_ppm("1.019129") == 1_019_129
    assert speedup_to_ppm("1.0191299") == 1_019_129
    assert speedup_to_ppm("2") == 2_000_000


def test_claim_credit_halves_after_one_half_life() -> None:
    assert claim_credit(1_100_000, 50, 50, 1000) == 100_000  # age 0: the whole gain
    assert claim_credit(1_100_000, 50, 1050, 1000) == 50_000  # age h: half
    # The decay is hyperbolic, h / (h + age), not exponential: age 2h keeps a third,
    # floor(100,000 * 1000 / 3000) = floor(33,333.3) = 33,333; age 3h keeps a quarter.
    assert claim_credit(1_100_000, 50, 2050, 1000) == 33_333
    assert claim_credit(1_100_000, 50, 3050, 1000) == 25_000


def test_claim_credit_is_never_negative() -> None:
    assert claim_credit(999_000, 0, 10, 1000) == 0


def test_a_pass_at_exactly_stock_speed_earns_no_credit() -> None:
    # A zero pass line (z = 0, g = 0) lets a PASS record speedup "1.000000": its gain is
    # zero, so it earns nothing and cannot take a pool from the burn hotkey.
    assert claim_credit(1_000_000, 50, 50, 1000) == 0
    assert claim_credit(1_000_001, 50, 50, 1000) == 1  # the smallest gain there is
    assert claim_credit(0, 50, 50, 1000) == 0  # the lowest speedup_ppm accepted
    assert compute_weights([_claim("a", "k", 0)], {"a": 400_000}, "burn") == {"burn": 1_000_000}


@pytest.mark.parametrize(
    ("speedup_ppm", "half_life", "accepted"),
    [(2**63, 1, True), (2**63 + 1, 1, False), (-1, 1, False), (1_000_000, 0, False)],
)
def test_claim_credit_inputs_take_their_whole_range_and_nothing_beyond(
    speedup_ppm: int, half_life: int, accepted: bool
) -> None:
    if accepted:
        assert claim_credit(speedup_ppm, 0, 0, half_life) == speedup_ppm - 1_000_000
        return
    with pytest.raises(InvalidInput, match=r"must be an integer in \["):
        claim_credit(speedup_ppm, 0, 0, half_life)


def test_settlement_before_claim_block_is_refused() -> None:
    with pytest.raises(InvalidInput, match="before claim block 130") as info:
        compute_settlement(world(129))
    assert info.value.context["reason"] == "settlement_block_before_claim"
    assert info.value.context["submission_id"] == hexid("s4")


def test_claims_are_sorted_by_arena_block_and_id() -> None:
    result = compute_settlement(world(5000, "FAILED"))
    assert [c.arena_id for c in result.claims] == ["cache", "mlp", "mlp"]
    assert [c.block for c in result.claims] == [210, 100, 130]


# --- weights --------------------------------------------------------------------------------


def test_largest_remainder_ties_go_to_the_smaller_hotkey() -> None:
    # 100 / 3 = 33 each, remainders all equal (1), one ppm left -> "a" by hotkey order.
    assert largest_remainder(100, {"c": 1, "a": 1, "b": 1}) == {"a": 34, "b": 33, "c": 33}
    assert largest_remainder(101, {"c": 1, "b": 1, "a": 1}) == {"a": 34, "b": 34, "c": 33}


def test_largest_remainder_prefers_larger_remainder_over_hotkey_order() -> None:
    # a: 100 * 1 / 3 = 33 r 1; b: 100 * 2 / 3 = 66 r 2 -> the left ppm goes to b.
    assert largest_remainder(100, {"a": 1, "b": 2}) == {"a": 33, "b": 67}


def test_largest_remainder_with_no_credit_is_empty() -> None:
    assert largest_remainder(500, {"a": 0}) == {}


def test_a_single_unit_of_credit_takes_the_whole_pool_and_zero_credit_is_not_listed() -> None:
    assert largest_remainder(600_000, {"a": 1}) == {"a": 600_000}
    assert largest_remainder(600_000, {"b": 0, "a": 1, "c": 0}) == {"a": 600_000}
    # The largest credit a claim can carry (speedup_ppm up to 2**63) is taken as it is.
    assert largest_remainder(7, {"a": 2**63, "b": 2**63}) == {"a": 4, "b": 3}
    with pytest.raises(InvalidInput, match="credit of a"):
        largest_remainder(7, {"a": 2**63 + 1})


def test_a_weight_of_one_ppm_is_kept() -> None:
    weights = compute_weights([_claim("a", "k", 5)], {"a": 1}, "burn")
    assert weights == {"burn": 999_999, "k": 1}


def _claim(arena: str, hotkey: str, credit: int) -> Claim:
    return Claim(
        arena, INC_MLP, hexid(arena + hotkey + str(credit)), hotkey, 1_000_000 + credit, 0, credit
    )


def test_burn_hotkey_that_also_mines_gets_the_sum() -> None:
    claims = [_claim("a", "burn", 1), _claim("a", "k", 3)]
    # pool a = 400,000: burn 100,000, k 300,000; unassigned 600,000 -> burn.
    assert compute_weights(claims, {"a": 400_000}, "burn") == {"burn": 700_000, "k": 300_000}


def test_no_arenas_burns_everything() -> None:
    assert compute_weights([], {}, "burn") == {"burn": 1_000_000}


def test_full_shares_leave_nothing_to_burn() -> None:
    assert compute_weights([_claim("a", "k", 5)], {"a": 1_000_000}, "burn") == {"k": 1_000_000}


def test_shares_over_one_million_are_refused() -> None:
    with pytest.raises(InvalidInput, match="sum to 1000001 ppm") as info:
        SettlementInput(
            block=1,
            as_of_position=1,
            policy=POLICY,
            arenas=[ArenaInput("a", 600_000, "0.015"), ArenaInput("b", 400_001, "0.015")],
        )
    assert info.value.context["reason"] == "emission_shares_exceed_total"
    with pytest.raises(InvalidInput):
        compute_weights([], {"a": 700_000, "b": 300_001}, "burn")


def test_claim_for_unknown_arena_is_refused() -> None:
    with pytest.raises(InvalidInput, match="no emission share"):
        compute_weights([_claim("ghost", "k", 1)], {"a": 1}, "burn")


# --- payload and digest ---------------------------------------------------------------------


def test_payload_is_a_valid_settlement_computed_and_verifies_itself() -> None:
    result = compute_settlement(world(1100))
    payload = settlement_payload(result)
    event = SettlementComputed.model_validate(payload)
    assert event.settlement_digest == result.settlement_digest
    assert set(payload) == {
        "block",
        "as_of_position",
        "claims",
        "weights_ppm",
        "fees",
        "settlement_digest",
    }
    assert check_settlement_digest(payload)
    tampered = dict(
        payload, weights_ppm={**payload["weights_ppm"], "bob": 407_874, "burn": 400_001}
    )
    assert not check_settlement_digest(tampered)


def test_diff_names_the_fields_that_differ() -> None:
    before = settlement_payload(compute_settlement(world(1100)))
    after = settlement_payload(compute_settlement(world(2100)))
    assert diff_settlement_payload(before, before) == ()
    assert diff_settlement_payload(before, after) == (
        "block",
        "claims",
        "settlement_digest",
        "weights_ppm",
    )
    assert diff_settlement_payload(before, {k: v for k, v in before.items() if k != "fees"}) == (
        "fees",
    )


def test_document_bytes_are_pinned() -> None:
    # One claim, h = 10, block 20: credit = floor(500,000 * 10 / (10 + 10)) = 250,000.
    inputs = SettlementInput(
        block=20,
        as_of_position=7,
        policy=EmissionPolicy(10, "burn", "val"),
        arenas=[ArenaInput("a", 250_000, "0.015", [sub("only", "k", 10, "QUALIFIED", "1.500000")])],
        fees=FeeRecords(payments=[PaymentRecord("a", "pay", 9)]),
    )
    result = compute_settlement(inputs)
    expected = (
        '{"as_of_position":7,"block":20,"claims":[{"arena_id":"a","block":10,"credit":250000,'
        f'"hotkey":"k","incumbent_digest":"{INC_MLP}","speedup_ppm":1500000,'
        f'"submission_id":"{hexid("only")}"}}],'
        '"fees":{"arenas":{"a":{"consumed_rao":9,"credits_spent_rao":0,"net_rao":9,'
        '"released_rao":0}},"total":{"consumed_rao":9,"credits_spent_rao":0,"net_rao":9,'
        '"released_rao":0}},"rules_version":"settlement-rules.v1",'
        '"weights_ppm":{"burn":750000,"k":250000}}'
    )
    assert canonical_bytes(result.document()).decode() == expected
    wrapped = b'{"domain":"arena-ledger.settlement","payload":' + expected.encode() + b"}"
    assert result.settlement_digest == hashlib.sha256(wrapped).hexdigest()


def test_hand_computed_digest_is_pinned() -> None:
    # A regression pin: any change to the rules or the document format changes this value.
    digest = compute_settlement(world(1100)).settlement_digest
    assert digest == PINNED_DIGEST


PINNED_DIGEST = "ca365ace43880522da08320b9f7af4a1a2ea59f7ef964c4f2b2cd47c57561521"


# --- inputs ---------------------------------------------------------------------------------


def test_policy_from_event() -> None:
    event = EmissionPolicySet(half_life_blocks=7200, burn_hotkey="burn", validator_hotkey="v")
    assert EmissionPolicy.from_event(event) == EmissionPolicy(7200, "burn", "v")


def test_lists_become_tuples() -> None:
    arena = ArenaInput("a", 1, "0.015", [sub("x", "k", 1, "FAILED")])
    assert isinstance(arena.submissions, tuple)
    hash(arena)


#: Refusals of the fields that depend on how they were combined: SubmissionInput.folded
#: checks these itself, and leaves the rest to the event schemas.
_COMBINATION_REFUSALS = [
    ({"status": "LOST"}, "is not one of"),
    ({"status": "QUALIFIED", "verdict": "PASS", "speedup": None}, "speedup must be"),
    ({"status": "QUALIFIED", "verdict": "PASS", "speedup": "1.50"}, "speedup must be"),
    ({"status": "QUALIFIED", "verdict": "PASS", "speedup": "-1.000000"}, "non-negative"),
    ({"status": "QUALIFIED", "verdict": None, "speedup": "1.5"}, "a PASS is exactly"),
    ({"status": "QUEUED", "verdict": "PASS"}, "a PASS is exactly a QUALIFIED"),
    ({"verdict": "MAYBE"}, "is not PASS, FAIL"),
]


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        *_COMBINATION_REFUSALS,
        ({"block": -1}, "block must be"),
        ({"block": True}, "block must be"),
        ({"hotkey": "has space"}, "hotkey must be"),
        ({"incumbent_digest": "ABC"}, "incumbent_digest must be"),
    ],
)
def test_bad_submission_is_refused(changes: dict[str, Any], message: str) -> None:
    with pytest.raises(InvalidInput, match=message):
        replace(sub("x", "k", 1, "FAILED"), **changes)


def _folded(base: SubmissionInput) -> SubmissionInput:
    return SubmissionInput.folded(
        base.submission_id,
        base.hotkey,
        base.content_hash,
        (base.block, base.event_index, base.event_subindex),
        base.status,
        base.incumbent_digest,
        base.verdict,
        base.speedup,
    )


@given(
    status=st.sampled_from(
        ["ARRIVED", "QUEUED", "QUALIFYING", "HELD", "QUALIFIED", "FAILED", "NO_DECISION"]
    ),
    verdict=st.sampled_from([None, "FAIL", "NO_DECISION"]),
    speedup=st.sampled_from(["1.019129", "0.000000", "2", "1.5"]),
    block=st.integers(0, 2**53 - 1),
)
def test_folded_input_equals_the_checked_one(
    status: str, verdict: str | None, speedup: str, block: int
) -> None:
    qualified = status == "QUALIFIED"
    checked = replace(
        sub("x", "k", 1, "FAILED"),
        status=status,
        verdict="PASS" if qualified else verdict,
        speedup=speedup if qualified else None,
        block=block,
    )
    made = _folded(checked)
    assert made == checked and hash(made) == hash(checked)
    assert made.__dict__ == checked.__dict__
    assert type(made) is SubmissionInput


@pytest.mark.parametrize(("changes", "message"), _COMBINATION_REFUSALS)
def test_folded_input_refuses_what_the_checked_one_refuses(
    changes: dict[str, Any], message: str
) -> None:
    # The fields folded() checks itself: anything wrong there takes the checked constructor.
    base = sub("x", "k", 1, "FAILED")
    fields = {**base.__dict__, **changes}
    with pytest.raises(InvalidInput, match=message):
        SubmissionInput.folded(
            fields["submission_id"],
            fields["hotkey"],
            fields["content_hash"],
            (fields["block"], fields["event_index"], fields["event_subindex"]),
            fields["status"],
            fields["incumbent_digest"],
            fields["verdict"],
            fields["speedup"],
        )


def test_duplicates_are_refused() -> None:
    x = sub("x", "k", 1, "FAILED")
    with pytest.raises(InvalidInput, match="appears twice"):
        ArenaInput("a", 1, "0.015", [x, x])
    with pytest.raises(InvalidInput, match="under two arenas"):
        SettlementInput(
            1, 1, POLICY, [ArenaInput("a", 1, "0.015", [x]), ArenaInput("b", 1, "0.015", [x])]
        )
    with pytest.raises(InvalidInput, match="arena a is listed twice"):
        SettlementInput(1, 1, POLICY, [ArenaInput("a", 1, "0.015"), ArenaInput("a", 1, "0.015")])
    with pytest.raises(InvalidInput, match="pay-1 is recorded twice"):
        FeeRecords(payments=[PaymentRecord("a", "pay-1", 1), PaymentRecord("b", "pay-1", 2)])


def test_inputs_take_their_whole_range() -> None:
    # The bounds themselves are accepted: no share, the whole emission, the shortest
    # half-life, the largest block an event can carry.
    assert ArenaInput("a", 0, "0").emission_share_ppm == 0
    assert ArenaInput("a", 1_000_000, "0").emission_share_ppm == 1_000_000
    assert EmissionPolicy(1, "burn", "v").half_life_blocks == 1
    assert replace(sub("x", "k", 1, "FAILED"), block=2**53 - 1).block == 2**53 - 1
    with pytest.raises(InvalidInput, match=r"block must be an integer in \[0, 9007199254740991\]"):
        replace(sub("x", "k", 1, "FAILED"), block=2**53)
    with pytest.raises(InvalidInput, match="half_life_blocks"):
        EmissionPolicy(0, "burn", "v")


def test_bad_margin_and_share_are_refused() -> None:
    with pytest.raises(InvalidInput, match="reward_margin"):
        ArenaInput("a", 1, "1.5e-2")
    with pytest.raises(InvalidInput, match="emission_share_ppm"):
        ArenaInput("a", 1_000_001, "0.015")


# --- properties -----------------------------------------------------------------------------

HOTKEYS = st.sampled_from(["alice", "bob", "carol", "dave", "burn"])
ARENA_IDS = ["a", "b", "c"]


@st.composite
def claim_sets(draw: st.DrawFn) -> tuple[list[Claim], dict[str, int]]:
    """Draws claims with random credit and emission shares that sum to at most 1,000,000."""
    cuts = sorted(draw(st.lists(st.integers(0, 1_000_000), min_size=3, max_size=3)))
    shares = {"a": cuts[0], "b": cuts[1] - cuts[0], "c": cuts[2] - cuts[1]}
    claims = []
    for i in range(draw(st.integers(0, 12))):
        arena = draw(st.sampled_from(ARENA_IDS))
        ppm = draw(st.integers(900_000, 3_000_000))
        block = draw(st.integers(0, 10_000))
        settle = block + draw(st.integers(0, 100_000))
        credit = claim_credit(ppm, block, settle, draw(st.integers(1, 50_000)))
        claims.append(Claim(arena, INC_MLP, hexid(f"claim-{i}"), draw(HOTKEYS), ppm, block, credit))
    return claims, shares


@given(claim_sets(), st.randoms(use_true_random=False))
def test_weights_sum_to_one_million_whatever_the_order(
    drawn: tuple[list[Claim], dict[str, int]], rnd: random.Random
) -> None:
    claims, shares = drawn
    weights = compute_weights(claims, shares, "burn")
    assert sum(weights.values()) == 1_000_000
    assert all(v > 0 for v in weights.values())
    shuffled = list(claims)
    rnd.shuffle(shuffled)
    reordered_shares = dict(sorted(shares.items(), reverse=True))
    assert compute_weights(shuffled, reordered_shares, "burn") == weights
    assert compute_weights(claims, shares, "burn") == weights


@given(st.integers(0, 1_000_000), st.dictionaries(HOTKEYS, st.integers(0, 10**9), max_size=5))
def test_largest_remainder_stays_within_one_of_the_exact_share(
    pool: int, credits: dict[str, int]
) -> None:
    shares = largest_remainder(pool, credits)
    total = sum(credits.values())
    if total == 0:
        assert shares == {}
        return
    assert sum(shares.values()) == pool
    for hotkey, ppm in shares.items():
        exact_floor = pool * credits[hotkey] // total
        assert exact_floor <= ppm <= exact_floor + 1


STATUSES = st.sampled_from(
    [
        "QUALIFIED",
        "QUALIFIED",
        "QUALIFIED",
        "FAILED",
        "NO_DECISION",
        "HELD",
        "QUEUED",
        "REJECTED",
        "EXPIRED",
    ]
)


@st.composite
def settlement_inputs(draw: st.DrawFn) -> SettlementInput:
    """Draws a whole settlement input: arenas, submissions in random states, fee records."""
    arenas = []
    for arena_id, share in (("a", 300_000), ("b", 500_000)):
        subs = []
        for i in range(draw(st.integers(0, 8))):
            status = draw(STATUSES)
            ppm = draw(st.integers(1_000_000, 1_300_000))
            speedup = f"{ppm // 1_000_000}.{ppm % 1_000_000:06d}" if status == "QUALIFIED" else None
            subs.append(
                sub(
                    f"{arena_id}-{i}",
                    draw(HOTKEYS),
                    draw(st.integers(0, 500)),
                    status,
                    speedup,
                    incumbent=draw(st.sampled_from([INC_MLP, INC_MLP_2])),
                    event_index=i,
                )
            )
        arenas.append(ArenaInput(arena_id, share, "0.015", subs))
    payments = [
        PaymentRecord(
            draw(st.sampled_from(ARENA_IDS[:2])),
            f"pay-{i}",
            draw(st.integers(0, 10**9)),
            draw(st.booleans()),
        )
        for i in range(draw(st.integers(0, 4)))
    ]
    return SettlementInput(draw(st.integers(500, 5_000)), 99, POLICY, arenas, FeeRecords(payments))


@given(settlement_inputs(), st.randoms(use_true_random=False))
def test_settlement_is_deterministic_and_independent_of_input_order(
    inputs: SettlementInput, rnd: random.Random
) -> None:
    first = compute_settlement(inputs)
    assert sum(first.weights_ppm.values()) == 1_000_000
    arenas = [
        replace(a, submissions=rnd.sample(list(a.submissions), len(a.submissions)))
        for a in inputs.arenas
    ]
    rnd.shuffle(arenas)
    payments = rnd.sample(list(inputs.fees.payments), len(inputs.fees.payments))
    shuffled = replace(inputs, arenas=arenas, fees=FeeRecords(payments))
    again = compute_settlement(shuffled)
    assert again.settlement_digest == first.settlement_digest
    assert settlement_payload(again) == settlement_payload(first)
    assert compute_settlement(inputs) == first
    assert check_settlement_digest(settlement_payload(first))


@given(settlement_inputs())
def test_every_pass_is_explained_and_only_rewarded_ones_claim(inputs: SettlementInput) -> None:
    result = compute_settlement(inputs)
    passes = {s.submission_id for a in inputs.arenas for s in a.submissions if s.is_pass}
    assert {a.submission_id for a in result.assessments} == passes
    rewarded = {a.submission_id for a in result.assessments if a.status == "rewarded"}
    assert {
        c.submission_id for c in build_claims(result.assessments, inputs.block, 1000)
    } == rewarded
    for a in result.assessments:
        assert (a.status == "pending") == bool(a.blocked_by)


# Input refusals, orderings and the reward scan's staleness, as docs/concepts.md, docs/settlement.md
# and the module's docstrings state them; expected values are worked by hand.


INCUMBENT = hexid("incumbent")


def arrival(
    name: str,
    hotkey: str,
    at: tuple[int, int, int],
    status: str = "QUALIFIED",
    speedup: str | None = None,
) -> SubmissionInput:
    """Builds a submission arriving at ``at`` = (block, event_index, event_subindex)."""
    verdict = {"QUALIFIED": "PASS", "FAILED": "FAIL", "NO_DECISION": "NO_DECISION"}.get(status)
    return SubmissionInput(
        submission_id=hexid(name),
        hotkey=hotkey,
        content_hash=hexid("content-" + name),
        block=at[0],
        event_index=at[1],
        event_subindex=at[2],
        status=status,
        incumbent_digest=INCUMBENT,
        verdict=verdict,
        speedup=speedup,
    )


# --- inputs ---------------------------------------------------------------------------------


@pytest.mark.parametrize("released", [1, 0, "yes", None])
def test_a_payment_released_flag_that_is_not_a_bool_is_refused(released: object) -> None:
    # docs/settlement.md, Refusals: a field of the wrong type is `settlement_input_invalid`.
    # PaymentRecord.released is a bool; 1 or "yes" would count a payment as refunded by
    # truthiness, silently moving it out of net_rao.
    with pytest.raises(InvalidInput, match="released must be a bool") as info:
        PaymentRecord("a", "pay-1", 5, released=released)  # type: ignore[arg-type]
    assert info.value.context["reason"] == "settlement_input_invalid"
    assert info.value.context["field"] == "released"


@pytest.mark.parametrize(
    ("build", "field"),
    [
        (lambda: PaymentRecord("a", "pay-1", -1), "amount_rao"),
        (lambda: PaymentRecord("a", "pay-1", True), "amount_rao"),
        (lambda: PaymentRecord("a", "Pay 1", 5), "payment_ref"),
        (lambda: PaymentRecord("a", "p" * 65, 5), "payment_ref"),
        (lambda: CreditRecord("a", "credit-1", -1), "amount_rao"),
        (lambda: CreditRecord("a", "Credit 1", 5), "credit_id"),
    ],
)
def test_fee_records_refuse_amounts_and_ids_out_of_shape(
    build: Callable[[], object], field: str
) -> None:
    # Money is a non-negative integer in rao; payment_ref and credit_id are 1-64 characters
    # of [a-z0-9._-] (docs/concepts.md). A negative amount would lower net_rao or the credit sum.
    with pytest.raises(InvalidInput, match=f"{field} must be") as info:
        build()
    assert info.value.context["reason"] == "settlement_input_invalid"
    assert info.value.context["field"] == field


@pytest.mark.parametrize(
    ("burn", "validator", "field"),
    [
        ("", "val", "burn_hotkey"),
        ("has space", "val", "burn_hotkey"),
        ("burn", "", "validator_hotkey"),
        ("burn", "x" * 65, "validator_hotkey"),
    ],
)
def test_policy_hotkeys_must_be_hotkeys(burn: str, validator: str, field: str) -> None:
    # docs/concepts.md: hotkeys are 1-64 printable non-space characters. A burn hotkey that is
    # not one would take the burned share of every settlement.
    with pytest.raises(InvalidInput, match=f"{field} must be a hotkey") as info:
        EmissionPolicy(1000, burn, validator)
    assert info.value.context["reason"] == "settlement_input_invalid"


def test_an_arena_listing_something_else_than_a_submission_input_is_refused() -> None:
    # A clear InvalidInput naming the field, not an AttributeError from a later check.
    with pytest.raises(InvalidInput, match="not a SubmissionInput") as info:
        ArenaInput("a", 1, "0.015", [{"submission_id": hexid("x")}])  # type: ignore[list-item]
    assert info.value.context["reason"] == "settlement_input_invalid"
    assert info.value.context["field"] == "submissions"


@pytest.mark.parametrize(
    "build",
    [
        lambda: arrival("x", 5, (1, 0, 0), "FAILED"),  # type: ignore[arg-type]
        lambda: ArenaInput(5, 1, "0.015"),  # type: ignore[arg-type]
        lambda: EmissionPolicy(1000, None, "val"),  # type: ignore[arg-type]
        lambda: PaymentRecord("a", 5, 1),  # type: ignore[arg-type]
        lambda: CreditRecord("a", None, 1),  # type: ignore[arg-type]
    ],
    ids=["hotkey", "arena_id", "burn_hotkey", "payment_ref", "credit_id"],
)
def test_a_text_field_that_is_not_a_string_is_refused_as_invalid_input(
    build: Callable[[], object],
) -> None:
    # docs/settlement.md, Inputs: bad input raises vocabulary.errors.InvalidInput when the
    # dataclass is built; Refusals: a field of the wrong type is `settlement_input_invalid`.
    # (A non-string reward_margin is refused that way already.)
    with pytest.raises(InvalidInput) as info:
        build()
    assert info.value.context["reason"] == "settlement_input_invalid"


def test_largest_remainder_refuses_a_pool_that_is_not_a_ppm_count() -> None:
    # A pool is a non-negative integer number of ppm; a negative one would hand out negative
    # weights (floor(-1 * 1 / 1) = -1 for "a").
    with pytest.raises(InvalidInput, match="pool_ppm must be an integer") as info:
        largest_remainder(-1, {"a": 1})
    assert info.value.context["reason"] == "settlement_input_invalid"
    with pytest.raises(InvalidInput, match="pool_ppm must be an integer"):
        largest_remainder(1.5, {"a": 1})  # type: ignore[arg-type]


@pytest.mark.parametrize("arena_id", ["Mlp", "-mlp", "", "a" * 64, "mlp arena"])
def test_an_arena_id_that_is_not_a_slug_is_refused(arena_id: str) -> None:
    # docs/concepts.md: arena_id is a slug [a-z0-9][a-z0-9-]{0,62}.
    with pytest.raises(InvalidInput, match="arena_id must be an arena slug") as info:
        ArenaInput(arena_id, 1, "0.015")
    assert info.value.context["reason"] == "settlement_input_invalid"


# --- reward assessment ----------------------------------------------------------------------


def test_event_index_orders_before_event_subindex() -> None:
    # docs/concepts.md: the arrival key is (block, event_index, event_subindex, hotkey, hash).
    # "a" is at (9, 1, 5), "b" at (9, 2, 0): (9, 1, 5) < (9, 2, 0), so "a" is first, even
    # though its event_subindex is the larger one.
    a = arrival("a", "ka", (9, 1, 5), speedup="1.010000")
    b = arrival("b", "kb", (9, 2, 0), speedup="1.020000")
    assert a.arrival_key == (9, 1, 5, "ka", hexid("content-a"))
    result = assess_rewards([ArenaInput("x", 1, "0.015", [b, a])])
    # a: first of its group -> rewarded. b needs 1.01 * 1.015 = 1.02515 > 1.02 -> lost.
    assert [(r.submission_id, r.status) for r in result] == [
        (hexid("a"), "rewarded"),
        (hexid("b"), "lost_potential"),
    ]
    assert result[1].required_speedup == "1.02515"


def test_assessments_are_listed_by_arena_id_whatever_the_input_order() -> None:
    # assess_rewards' docstring: "by arena id, then in arrival-key order within each arena".
    # Arena "b" is given first, and its PASS arrived earlier (block 1) than arena "a"'s.
    in_b = arrival("in-b", "k1", (1, 0, 0), speedup="1.100000")
    in_a = arrival("in-a", "k2", (5, 0, 0), speedup="1.100000")
    arenas = [ArenaInput("b", 1, "0.015", [in_b]), ArenaInput("a", 1, "0.015", [in_a])]
    assert [r.arena_id for r in assess_rewards(arenas)] == ["a", "b"]
    assert [e["submission_id"] for e in explain_rewards(arenas)] == [hexid("in-a"), hexid("in-b")]


def test_best_before_quotes_the_recorded_speedup_string() -> None:
    # docs/settlement.md: explain_rewards gives the group's best before a PASS as
    # {submission_id, speedup}, the speedup as recorded. "0.0000001" is a canonical decimal
    # (accepted); it must come back as written, not as Decimal's "1E-7".
    slow = arrival("slow", "k1", (1, 0, 0), speedup="0.0000001")
    fast = arrival("fast", "k2", (2, 0, 0), speedup="1.000000")
    explained = explain_rewards([ArenaInput("a", 1, "0.015", [slow, fast])])
    assert explained[1]["best_before"] == {"submission_id": hexid("slow"), "speedup": "0.0000001"}
    # required = 0.0000001 * 1.015 = 0.0000001015; 1.0 >= it -> rewarded.
    assert explained[1]["required_speedup"] == "0.0000001015"
    assert explained[1]["status"] == "rewarded"


# --- claims ---------------------------------------------------------------------------------


@pytest.mark.parametrize("speedup", ["-1.000000", "1.5e0", "1.50", "abc"])
def test_speedup_to_ppm_refuses_what_is_not_a_recorded_speedup(speedup: str) -> None:
    # speedup_to_ppm reads a recorded speedup: a non-negative decimal, canonical or in the
    # fixed 6-place form (docs/concepts.md). "-1.000000" would give a negative speedup_ppm,
    # "1.5e0" and "1.50" are not how a speedup is spelled.
    with pytest.raises(InvalidInput, match="speedup must be a non-negative decimal") as info:
        speedup_to_ppm(speedup)
    assert info.value.context["reason"] == "settlement_input_invalid"


def _same_block_claims() -> tuple[SubmissionInput, SubmissionInput]:
    # Two PASSes of one block; "x-2" arrives first (event_index 1) but has the larger id.
    first = arrival("x-2", "k1", (9, 1, 0), speedup="1.100000")
    second = arrival("x-1", "k2", (9, 2, 0), speedup="1.200000")
    assert hexid("x-1") < hexid("x-2")
    return first, second


def test_settlement_claims_are_sorted_by_arena_block_and_id_not_arrival() -> None:
    # Claim.sort_key / build_claims' docstring: claims are sorted by (arena_id, block,
    # submission_id). Both PASSes are rewarded: x-2 is first of its group; x-1 has
    # 1.2 >= 1.1 * 1.015 = 1.1165. Arrival order is x-2, x-1; equal blocks leave the id to
    # decide: x-1 < x-2.
    first, second = _same_block_claims()
    inputs = SettlementInput(
        block=9,
        as_of_position=1,
        policy=POLICY,
        arenas=[ArenaInput("a", 500_000, "0.015", [first, second])],
    )
    result = compute_settlement(inputs)
    # age 0: credit = gain. x-1: 1,200,000 - 10^6 = 200,000; x-2: 100,000.
    assert [(c.submission_id, c.credit) for c in result.claims] == [
        (hexid("x-1"), 200_000),
        (hexid("x-2"), 100_000),
    ]
    assert [c["submission_id"] for c in result.document()["claims"]] == [
        hexid("x-1"),
        hexid("x-2"),
    ]


def test_build_claims_sorts_assessments_given_in_any_order() -> None:
    first, second = _same_block_claims()
    assessed = assess_rewards([ArenaInput("a", 1, "0.015", [first, second])])
    assert [a.submission_id for a in assessed] == [hexid("x-2"), hexid("x-1")]  # arrival
    claims = build_claims(assessed, 9, 1000)
    assert [c.submission_id for c in claims] == [hexid("x-1"), hexid("x-2")]


@pytest.mark.parametrize(
    ("claim_block", "settlement_block", "field"),
    [
        (-1, 100, "claim_block"),  # a negative block
        (2**53, 2**53, "claim_block"),  # past the largest block an event can carry
        (0, 2**53, "settlement_block"),
        (0, 1100.0, "settlement_block"),  # a float: blocks are integers
        (0, -1, "settlement_block"),  # negative: a bad field, not an early settlement
    ],
)
def test_claim_credit_refuses_blocks_that_are_not_block_numbers(
    claim_block: object, settlement_block: object, field: str
) -> None:
    # docs/settlement.md, Refusals: a negative block (a field of the wrong type or shape) is
    # `settlement_input_invalid`; blocks are integers in [0, 2**53 - 1] like every block
    # an event carries, and no float is ever formed.
    with pytest.raises(InvalidInput, match=f"{field} must be an integer") as info:
        claim_credit(1_100_000, claim_block, settlement_block, 1000)  # type: ignore[arg-type]
    assert info.value.context["reason"] == "settlement_input_invalid"
    assert info.value.context["field"] == field


# --- fees -----------------------------------------------------------------------------------


def test_fee_summary_lists_arenas_sorted_by_id() -> None:
    # FeeSummary's docstring: fees per arena, sorted by arena id. "c" and "a" are named
    # (in that order); "b" only appears in a record, so it comes after them in the sums.
    records = FeeRecords(payments=[PaymentRecord("b", "pay-1", 7)])
    summary = summarize_fees(["c", "a"], records)
    assert [arena_id for arena_id, _ in summary.arenas] == ["a", "b", "c"]
    assert list(summary.to_dict()["arenas"]) == ["a", "b", "c"]
    assert summary.total.net_rao == 7


# --- settling assessments made elsewhere ----------------------------------------------------


def _rewarded_at(block: int) -> tuple[RewardAssessment, ...]:
    only = arrival("only", "k", (block, 0, 0), speedup="1.500000")
    return assess_rewards([ArenaInput("a", 1, "0.015", [only])])


@pytest.mark.parametrize(("block", "position"), [(-1, 0), (True, 0), (0, -1), (2**53, 0)])
def test_settle_assessed_refuses_what_settlement_input_refuses(
    block: object, position: object
) -> None:
    # settle_assessed checks what SettlementInput checks on construction: block and
    # as_of_position are integers in [0, 2**53 - 1]. With no assessment nothing else would
    # stop a settlement document from carrying block -1.
    fees = summarize_fees(["a"], FeeRecords())
    with pytest.raises(InvalidInput, match="must be an integer") as info:
        settle_assessed(block, position, POLICY, {"a": 1}, (), fees)  # type: ignore[arg-type]
    assert info.value.context["reason"] == "settlement_input_invalid"
    with pytest.raises(InvalidInput, match="must be an integer"):
        SettlementInput(block, position, POLICY)  # type: ignore[arg-type]


def test_settle_assessed_refuses_shares_first_like_compute_settlement() -> None:
    # Shares summing to 1,000,001 ppm and a claim arriving after the settlement block:
    # SettlementInput refuses the shares on construction, before any claim is built, so
    # compute_settlement says `emission_shares_exceed_total`. settle_assessed ("the same
    # code as compute_settlement") must give the same refusal for the same inputs.
    shares = {"a": 600_000, "b": 400_001}
    with pytest.raises(InvalidInput) as via_input:
        SettlementInput(
            10,
            1,
            POLICY,
            [
                ArenaInput(
                    "a", 600_000, "0.015", [arrival("only", "k", (50, 0, 0), speedup="1.5")]
                ),
                ArenaInput("b", 400_001, "0.015"),
            ],
        )
    assert via_input.value.context["reason"] == "emission_shares_exceed_total"
    fees = summarize_fees(shares, FeeRecords())
    with pytest.raises(InvalidInput) as via_assessed:
        settle_assessed(10, 1, POLICY, shares, _rewarded_at(50), fees)
    assert via_assessed.value.context["reason"] == "emission_shares_exceed_total"


# --- the incremental reward scan ------------------------------------------------------------


def test_putting_again_the_last_dropped_submission_turns_the_scan_stale() -> None:
    # RewardScan's docstring: a dropped submission that is put again (a requeued
    # NO_DECISION) turns the scan stale, and rewarded() then refuses.
    # mark_every_walked = 1, keep_walked = 0: walking p1, n, p2 sets marks at 0, 1 and 2
    # and ends at 3 >= 2 * 0 + 1, so the scan drops up to the last mark at or before 3,
    # mark 2: p1 and n are dropped and n is the last one dropped.
    p1 = arrival("p1", "k1", (1, 0, 0), speedup="1.100000")
    n = arrival("n", "k2", (2, 0, 0), status="NO_DECISION")
    p2 = arrival("p2", "k3", (3, 0, 0), speedup="1.000000")
    scan = RewardScan(ArenaInput("a", 1, "0.015"), mark_every_walked=1, keep_walked=0)
    for s in (p1, n, p2):
        scan.put(s.submission_id, s)
    # p1 rewarded (first); p2 needs 1.1 * 1.015 = 1.1165 -> lost_potential.
    assert [a.submission_id for a in scan.rewarded()] == [hexid("p1")]
    assert scan.dropped == 2 and not scan.stale
    requeued = arrival("n", "k2", (2, 0, 0), status="QUEUED")  # same arrival key, same id
    scan.put(requeued.submission_id, requeued)
    assert scan.stale
    with pytest.raises(ValueError, match="stale"):
        scan.rewarded()


def test_a_scan_that_dropped_nothing_rolls_back_instead_of_turning_stale() -> None:
    # RewardScan's docstring: only a change that reaches the dropped part turns the scan
    # stale; a change inside the walked prefix rolls back to a mark. mark_every_walked = 2,
    # keep_walked = 0: walking s1, s5 sets only mark 0 and ends at 2 >= 2 * 0 + 2, but the
    # last mark at or before 2 is mark 0, so nothing is dropped.
    s1 = arrival("s1", "k1", (1, 0, 0), speedup="1.100000")
    s5 = arrival("s5", "k5", (5, 0, 0), speedup="1.210000")
    scan = RewardScan(ArenaInput("a", 1, "0.015"), mark_every_walked=2, keep_walked=0)
    for s in (s1, s5):
        scan.put(s.submission_id, s)
    # s1 first -> rewarded; s5 has 1.21 >= 1.1 * 1.015 = 1.1165 -> rewarded.
    assert [a.submission_id for a in scan.rewarded()] == [hexid("s1"), hexid("s5")]
    assert scan.dropped == 0
    s3 = arrival("s3", "k3", (3, 0, 0), speedup="1.200000")  # between the two
    scan.put(s3.submission_id, s3)
    assert not scan.stale
    # s3 has 1.2 >= 1.1165 -> rewarded, best 1.2; s5 now needs 1.2 * 1.015 = 1.218 > 1.21.
    assert [a.submission_id for a in scan.rewarded()] == [hexid("s1"), hexid("s3")]


@pytest.mark.parametrize(
    ("every", "keep", "message"),
    [(0, None, "mark_every_walked must be at least 1"), (1, -1, "keep_walked must be at least 0")],
)
def test_a_scan_refuses_bounds_it_cannot_walk_with(
    every: int, keep: int | None, message: str
) -> None:
    # A mark every 0 submissions would divide by zero on the first walk; a negative keep
    # would drop past the walk. Both are refused when the scan is built.
    with pytest.raises(ValueError, match=message):
        RewardScan(ArenaInput("a", 1, "0.015"), mark_every_walked=every, keep_walked=keep)


@pytest.mark.parametrize("value", [5, None, b"5Miner", ["5Miner"]])
def test_the_field_predicates_answer_false_for_anything_but_a_string(value: object) -> None:
    # Every caller checks the predicate and names the field; a TypeError raised from inside
    # the predicate (re.fullmatch of a non-string) escaped as a traceback instead.
    assert not any(check(value) for check in (is_arena_id, is_local_id, is_digest, is_hotkey))
    with pytest.raises(InvalidInput) as info:
        require_hotkey(value, path="$.hotkey")
    assert info.value.context == {"path": "$.hotkey"}

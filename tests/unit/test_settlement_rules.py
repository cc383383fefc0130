"""Holds ``machines.settlement_rules`` to rules a mutation review of it found untested.

Each test pins one behaviour DOMAIN §3/§7, docs/settlement.md or the module's docstrings
promise and tests/unit/test_settlement.py lets slip: input refusals (a non-bool
``released``, negative fee amounts, malformed payment_ref/credit_id/arena_id/hotkeys, an
arena listing a non-SubmissionInput, blocks out of range in ``claim_credit`` and
``settle_assessed``, a negative pool, a speedup that is not a recorded decimal), the
arrival key ordering event_index before event_subindex, assessments listed by arena id,
the recorded speedup string in ``best_before``, claims and fee rows sorted as documented,
``settle_assessed`` refusing shares before claims as ``compute_settlement`` does, and
``RewardScan`` turning stale exactly when a change reaches its dropped prefix (and
refusing bounds it cannot walk with). Expected values are worked by hand from those rules,
never read back from the code. One test pins a bug the review found: a non-string text
field raised TypeError instead of the documented InvalidInput (vocabulary.fields' predicates
now answer False for a non-string).
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from test_settlement import hexid  # same directory, prepend import mode

from machines.settlement_rules import (
    ArenaInput,
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
    claim_credit,
    compute_settlement,
    explain_rewards,
    largest_remainder,
    settle_assessed,
    speedup_to_ppm,
    summarize_fees,
)
from vocabulary.errors import InvalidInput
from vocabulary.fields import is_arena_id, is_digest, is_hotkey, is_local_id, require_hotkey

INCUMBENT = hexid("incumbent")
POLICY = EmissionPolicy(half_life_blocks=1000, burn_hotkey="burn", validator_hotkey="val")


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
    # of [a-z0-9._-] (DOMAIN §3). A negative amount would lower net_rao or the credit sum.
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
    # DOMAIN §3: hotkeys are 1-64 printable non-space characters. A burn hotkey that is
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
    # DOMAIN §3: arena_id is a slug [a-z0-9][a-z0-9-]{0,62}.
    with pytest.raises(InvalidInput, match="arena_id must be an arena slug") as info:
        ArenaInput(arena_id, 1, "0.015")
    assert info.value.context["reason"] == "settlement_input_invalid"


# --- reward assessment ----------------------------------------------------------------------


def test_event_index_orders_before_event_subindex() -> None:
    # DOMAIN §3: the arrival key is (block, event_index, event_subindex, hotkey, hash).
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
    # fixed 6-place form (DOMAIN §6). "-1.000000" would give a negative speedup_ppm,
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

"""Settles one realistic ledger built through ``ArenaLedger``, on SQLite and PostgreSQL.

Every event goes through the guarded store (the machines decide it inside the append), and
every weight, credit and fee is checked against numbers worked out by hand below. The
builder functions are shared with tests/integration/test_replay.py and
tests/e2e/test_cli_settlement.py.

The ledger (arena policy of ``machines.samples.policy``: W = 4, z = {3: 2, 4: 1.5},
sigma_w = sigma_b = 0.01, g = 0, reward_margin 0.015; stock cost 1,000,000,000 ns per window):

=====  =====  ======  =====  ===========  =================================================
name   arena  hotkey  block  window cost  outcome
=====  =====  ======  =====  ===========  =================================================
a1     mlp-a  Alice   1000   0.98 x 3     PASS at look 3, speedup 1/0.98 = "1.020408"
b1     mlp-b  Carol   1005   0.97 x 3     HELD before evaluation; later released, then FAIL
                                          slot_audit_failed (one audit violation)
a2     mlp-a  Bob     1010   0.97 x 3     NO_DECISION quality_drift, COMPLETE (payment
                                          refunded by PaymentReleased)
b2     mlp-b  Alice   1015   0.96 x 3     PASS "1.041667" (pending while b1 blocks it)
a3     mlp-a  Carol   1020   0.97 x 3     PASS "1.030928" < 1.020408 x 1.015 = 1.03571412:
                                          lost_potential
a4     mlp-a  Bob     1030   0.95 x 3     PASS "1.052632" ≥ 1.03571412: rewarded
a5     mlp-a  Alice   1040   1.02 x 4     FAIL candidate_slower; paid with a credit
=====  =====  ======  =====  ===========  =================================================

Look 3 (n1 = 2, n2 = 1): SE = sqrt((0.0001 x 1.5 + 0.0002) / 4) = 0.0093541, pass line
L = exp(2 x SE) - 1 = 0.018884; with every window at ratio r, S = exp(-(ln r + ln r)/2) = 1/r.
a5 at look 4: S = 1/1.02 = 0.980392 ≤ 1/(1 + 0.013075): candidate_slower.

Emission shares: mlp-a 600,000, mlp-b 300,000; the other 100,000 always burn.
Positions: 2 commissions, 7 intakes x 3 events and one CreditGranted (3..24), the hold (25),
five look-3 PASS/NO_DECISION evaluations x 9 events (claim 2, windows 3, audit, quality,
decision 2) and a5's 8 (claim 2, windows 4, decision 2), one PaymentReleased: 79 events;
EmissionPolicySet at 80.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import text

from ledger import migrate
from ledger.records import AppendResult, EventDraft
from machines import samples
from machines.attempt import AttemptState
from machines.settlement_rules import (
    RULES_VERSION,
    check_settlement_digest,
    settlement_digest,
    settlement_payload,
)
from services.arena_ledger import ArenaLedger
from vocabulary.errors import NotFound, Refused
from vocabulary.events import PaymentReleased

ALICE, BOB, CAROL = "5Alice", "5Bob", "5Carol"
BURN, VALIDATOR, OPERATOR = "5Burn", "5Validator", "5Operator"
ARENA_A, ARENA_B = "mlp-a", "mlp-b"
FEE_A, FEE_B = 1_000_000_000, 2_000_000_000
SHARE_A, SHARE_B = 600_000, 300_000
HALF_LIFE_BLOCKS = 1_000
STOCK_NS = 1_000_000_000
INCUMBENT = samples.hex64("incumbent-0")

#: Events before EmissionPolicySet (see the module docstring); the policy is at 80.
HEAD_BEFORE_POLICY = 79

# --- hand-computed settlements ------------------------------------------------------------
# credit = floor((speedup_ppm - 1,000,000) * h / (h + (b - arrival block))), h = 1000.
#
# Settlement 1, block 2000, b1 HELD (so b2 is pending and mlp-b has no credit):
#   a1 Alice: 20,408 * 1000 / (1000 + 1000) = 20,408,000 / 2000 = 10,204
#   a4 Bob:   52,632 * 1000 / (1000 + 970)  = 52,632,000 / 1970 = 26,716 (r 1,480)
#   pool mlp-a 600,000, Σcredit = 36,920:
#     Alice 600,000 * 10,204 = 6,122,400,000  = 36,920 * 165,828 + 30,240
#     Bob   600,000 * 26,716 = 16,029,600,000 = 36,920 * 434,171 + 6,680
#     floors sum to 599,999; the spare ppm goes to the larger remainder: Alice.
#   pool mlp-b (no credit) and the unshared 100,000 burn: 300,000 + 100,000.
WEIGHTS_1 = {ALICE: 165_829, BOB: 434_171, BURN: 400_000}
# Settlement 2, block 2000, b1 released and FAILed: b2 is rewarded.
#   b2 Alice: 41,667 * 1000 / (1000 + 985) = 41,667,000 / 1985 = 20,990 (r 1,850)
#   pool mlp-b: all 300,000 to Alice (the only credit); pool mlp-a as in settlement 1.
WEIGHTS_2 = {ALICE: 165_829 + 300_000, BOB: 434_171, BURN: 100_000}
# Settlement 3, block 3000 (every claim 1000 blocks older):
#   a1: 20,408,000 / 3000 = 6,802 (r 2,000); a4: 52,632,000 / 2970 = 17,721 (r 630);
#   b2: 41,667,000 / 2985 = 13,958 (r 2,370)
#   pool mlp-a Σ = 24,523:
#     Alice 600,000 * 6,802  = 4,081,200,000  = 24,523 * 166,423 + 8,771
#     Bob   600,000 * 17,721 = 10,632,600,000 = 24,523 * 433,576 + 15,752
#     this time Bob has the larger remainder and takes the spare ppm.
WEIGHTS_3 = {ALICE: 166_423 + 300_000, BOB: 433_577, BURN: 100_000}

# mlp-a: a1..a4 paid 1e9 each, a2 refunded, a5 paid by credit; mlp-b: b1, b2 paid 2e9 each.
FEES_A = {"consumed_rao": 4_000_000_000, "released_rao": 1_000_000_000,
          "net_rao": 3_000_000_000, "credits_spent_rao": 1_000_000_000}
FEES_B = {"consumed_rao": 4_000_000_000, "released_rao": 0,
          "net_rao": 4_000_000_000, "credits_spent_rao": 0}
FEES_TOTAL = {"consumed_rao": 8_000_000_000, "released_rao": 1_000_000_000,
              "net_rao": 7_000_000_000, "credits_spent_rao": 1_000_000_000}


# --- the builder (shared with test_replay.py and the e2e test) ----------------------------


class FixedClock:
    """Stamps appends 2025-01-01T00:00:00Z, +1 s, +2 s…: the same bytes on every backend."""

    def __init__(self) -> None:
        self.ticks = 0

    def __call__(self) -> str:
        stamp = datetime(2025, 1, 1, tzinfo=UTC) + timedelta(seconds=self.ticks)
        self.ticks += 1
        return stamp.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def open_ledger(url: str) -> ArenaLedger:
    """Migrates ``url`` and opens an ArenaLedger on it whose store uses a FixedClock.

    The clock is the only input of the entry hashes that is not in the events, so with it
    the same script gives byte-identical ledgers (and head hashes) on both backends.
    """
    migrate.upgrade(url)
    ledger = ArenaLedger(url)
    ledger.store.clock = FixedClock()
    return ledger


def _commission(ledger: ArenaLedger, arena_id: str, share: int, fee: int) -> None:
    event = samples.commissioned(arena_id, fee_rao=fee, emission_share_ppm=share)
    ledger.commission(event.model_dump(mode="json", exclude_unset=True))


def intake(ledger: ArenaLedger, arena_id: str, hotkey: str, name: str, block: int,
            paid: int | None) -> str:
    ref = None if paid is None else f"pay-{name}"
    arrival = samples.arrived(arena_id, hotkey=hotkey, content=name, block=block,
                              payment_ref=ref).model_dump(mode="json", exclude_unset=True)
    del arrival["submission_id"]
    outcome = ledger.intake(arrival, payment_amount_rao=paid)
    assert outcome.admitted, outcome
    assert outcome.fee is not None
    assert outcome.fee["kind"] == ("credit" if paid is None else "payment")
    return outcome.submission_id


def evaluate(ledger: ArenaLedger, sid: str, attempt_id: str, candidate_ns: int, *,
             audit_violations: int = 0, drift: bool = False, conclude: bool = True) -> Any:
    """Claims ``sid`` and records windows (every one at candidate_ns / stock), audit, quality.

    Windows run until speed is decided; the audit (64 calls on one node) only after a speed
    PASS, quality only when the audit passed. Returns the AttemptDecided (None when
    ``conclude`` is False: the attempt is then left decidable but undecided).
    """
    ledger.claim(attempt_id=attempt_id, pair_id="pair-1", validator_hotkey=VALIDATOR,
                 block=1_100, submission_id=sid)
    state = ledger.fold.attempt(attempt_id)
    assert isinstance(state, AttemptState)
    while state.speed is None:
        index = state.last_window + 1
        orientation = state.params.orientation(index)
        ledger.record(attempt_id, samples.window(index, orientation, STOCK_NS, candidate_ns))
        state = ledger.fold.attempt(attempt_id)
        assert isinstance(state, AttemptState)
    if state.status == "AUDIT":
        ledger.record(attempt_id, samples.audit(calls=64, violations=audit_violations))
        if ledger.fold.derive_decision(attempt_id) is None:
            ledger.record(attempt_id, samples.quality(drift_within_envelope=not drift))
    return ledger.conclude(attempt_id, block=1_200) if conclude else None


def build_before_policy(ledger: ArenaLedger) -> dict[str, str]:
    """Writes the 79 events of the module docstring; returns {name: submission_id}."""
    _commission(ledger, ARENA_A, SHARE_A, FEE_A)
    _commission(ledger, ARENA_B, SHARE_B, FEE_B)
    sids = {
        "a1": intake(ledger, ARENA_A, ALICE, "a1", 1_000, FEE_A),
        "b1": intake(ledger, ARENA_B, CAROL, "b1", 1_005, FEE_B),
        "a2": intake(ledger, ARENA_A, BOB, "a2", 1_010, FEE_A),
        "b2": intake(ledger, ARENA_B, ALICE, "b2", 1_015, FEE_B),
        "a3": intake(ledger, ARENA_A, CAROL, "a3", 1_020, FEE_A),
        "a4": intake(ledger, ARENA_A, BOB, "a4", 1_030, FEE_A),
    }
    # Granted above the fee: a credit counts at the fee its admission recorded (the arena's
    # fee at intake, docs/settlement.md), not at what was granted.
    ledger.grant_credit("cr-alice", ALICE, 3 * FEE_A, "operator credit")
    sids["a5"] = intake(ledger, ARENA_A, ALICE, "a5", 1_040, None)
    ledger.hold(sids["b1"], "evidence under review", 1_050)
    evaluate(ledger, sids["a1"], "att-a1", 980_000_000)
    evaluate(ledger, sids["a2"], "att-a2", 970_000_000, drift=True)
    refund = PaymentReleased(submission_id=sids["a2"], reason="no decision: refunded")
    ledger.append([("payment-pay-a2", refund)])
    evaluate(ledger, sids["b2"], "att-b2", 960_000_000)
    evaluate(ledger, sids["a3"], "att-a3", 970_000_000)
    evaluate(ledger, sids["a4"], "att-a4", 950_000_000)
    evaluate(ledger, sids["a5"], "att-a5", 1_020_000_000)
    assert ledger.store.head().position == HEAD_BEFORE_POLICY
    return sids


def set_policy(ledger: ArenaLedger) -> AppendResult:
    """Appends the EmissionPolicySet (h = 1000, burn 5Burn) at position 80."""
    return ledger.set_emission_policy(HALF_LIFE_BLOCKS, BURN, VALIDATOR)


def release_and_fail_b1(ledger: ArenaLedger, sids: dict[str, str]) -> None:
    """Releases the held b1 (it is QUEUED again) and evaluates it to FAIL slot_audit_failed."""
    ledger.release(sids["b1"], "evidence checked", 2_100, OPERATOR)
    evaluate(ledger, sids["b1"], "att-b1", 970_000_000, audit_violations=1)


@dataclass
class Settled:
    """Is the fully built ledger: submission ids and its three settlements (payload, position)."""

    sids: dict[str, str]
    settlements: list[tuple[dict[str, Any], int]]


def build_settled(ledger: ArenaLedger) -> Settled:
    """Builds everything: settles at 2000 (b1 held), then 2000 and 3000 after b1 FAILs.

    Positions: policy 80, settlement 81, release 82, b1's evaluation 83..90, settlements
    91 and 92.
    """
    sids = build_before_policy(ledger)
    set_policy(ledger)
    settled = []
    settlement, result = ledger.settle(2_000)
    settled.append((settlement_payload(settlement), result.first))
    release_and_fail_b1(ledger, sids)
    for block in (2_000, 3_000):
        settlement, result = ledger.settle(block)
        settled.append((settlement_payload(settlement), result.first))
    return Settled(sids, settled)


# --- fixtures and helpers -----------------------------------------------------------------


@pytest.fixture
def ledger(store_url: str) -> Iterator[ArenaLedger]:
    """Yields a guarded ArenaLedger on a freshly migrated database of each backend."""
    opened = open_ledger(store_url)
    try:
        yield opened
    finally:
        opened.close()


def _rows(ledger: ArenaLedger) -> int:
    with ledger.store.engine.connect() as conn:
        return int(conn.execute(text("SELECT COUNT(*) FROM events")).scalar_one())


def _statuses(ledger: ArenaLedger, sids: dict[str, str]) -> list[tuple[str, str, list[str]]]:
    names = {sid: name for name, sid in sids.items()}
    return [(names[r["submission_id"]], r["status"], [names[b] for b in r["blocked_by"]])
            for r in ledger.rewards()]


def _forged(payload: dict[str, Any], *, digest: str) -> dict[str, Any]:
    """Moves one ppm from Bob to Alice (the sum stays 1,000,000); keeps or redoes the digest."""
    forged = copy.deepcopy(payload)
    forged["weights_ppm"][ALICE] += 1
    forged["weights_ppm"][BOB] -= 1
    if digest == "recomputed":
        document = {k: v for k, v in forged.items() if k != "settlement_digest"}
        document["rules_version"] = RULES_VERSION
        forged["settlement_digest"] = settlement_digest(document)
        assert check_settlement_digest(forged)
    return forged


# --- tests ----------------------------------------------------------------------------------


def test_settle_and_weights_are_refused_until_an_emission_policy_is_set(
    ledger: ArenaLedger,
) -> None:
    build_before_policy(ledger)
    for call in (ledger.settle, ledger.weights):
        with pytest.raises(Refused) as caught:
            call(2_000)
        assert caught.value.context["reason"] == "emission_policy_missing"
        # Says what computes nothing (weights is a preview too) and how to proceed.
        assert "no settlement (settle, weights" in caught.value.message
        assert "`arena-ledger emission-policy`" in caught.value.message
    assert ledger.store.head().position == HEAD_BEFORE_POLICY
    assert _rows(ledger) == HEAD_BEFORE_POLICY

    assert set_policy(ledger).positions == (80,)
    _, result = ledger.settle(2_000)
    assert result.positions == (81,)


def test_first_settlement_burns_the_pool_blocked_by_a_held_submission(
    ledger: ArenaLedger,
) -> None:
    sids = build_before_policy(ledger)
    set_policy(ledger)
    preview = settlement_payload(ledger.weights(2_000))
    assert ledger.store.head().position == 80  # weights previews, it never appends

    settlement, result = ledger.settle(2_000)
    payload = settlement_payload(settlement)
    assert payload == preview
    assert result.positions == (81,)
    assert payload["as_of_position"] == 80 and payload["block"] == 2_000
    assert payload["weights_ppm"] == WEIGHTS_1
    assert sum(payload["weights_ppm"].values()) == 1_000_000
    assert payload["claims"] == [
        {"arena_id": ARENA_A, "block": 1_000, "credit": 10_204, "hotkey": ALICE,
         "incumbent_digest": INCUMBENT, "speedup_ppm": 1_020_408, "submission_id": sids["a1"]},
        {"arena_id": ARENA_A, "block": 1_030, "credit": 26_716, "hotkey": BOB,
         "incumbent_digest": INCUMBENT, "speedup_ppm": 1_052_632, "submission_id": sids["a4"]},
    ]
    # The recorded event holds exactly that payload, and its digest covers its own fields.
    recorded = ledger.store.get(81)
    assert (recorded.stream, recorded.type) == ("settlement", "SettlementComputed")
    assert recorded.payload == payload
    assert check_settlement_digest(recorded.payload)


def test_rewards_name_lost_potential_pending_and_the_completed_no_decision_blocks_nothing(
    ledger: ArenaLedger,
) -> None:
    sids = build_before_policy(ledger)
    # a2 (NO_DECISION, COMPLETE) arrived before a3 and a4, yet both are assessed; b2 waits
    # for the held b1, which arrived earlier in mlp-b.
    assert _statuses(ledger, sids) == [
        ("a1", "rewarded", []), ("a3", "lost_potential", []), ("a4", "rewarded", []),
        ("b2", "pending", ["b1"]),
    ]
    rows = {r["submission_id"]: r for r in ledger.rewards(ARENA_A)}
    assert [r["arena_id"] for r in rows.values()] == [ARENA_A] * 3
    a3 = rows[sids["a3"]]
    assert a3["speedup"] == "1.030928"
    assert a3["best_before"] == {"submission_id": sids["a1"], "speedup": "1.020408"}
    assert a3["required_speedup"] == "1.03571412"  # 1.020408 * 1.015
    assert rows[sids["a4"]]["speedup"] == "1.052632"
    assert rows[sids["a4"]]["required_speedup"] == "1.03571412"
    assert rows[sids["a1"]]["best_before"] is None

    ledger.release(sids["b1"], "evidence checked", 2_100, OPERATOR)
    # Released is QUEUED again: it may still PASS first, so b2 stays pending.
    assert _statuses(ledger, sids)[-1] == ("b2", "pending", ["b1"])
    evaluate(ledger, sids["b1"], "att-b1", 970_000_000, audit_violations=1)
    assert ledger.fold.submission(sids["b1"]).status == "FAILED"  # type: ignore[union-attr]
    assert _statuses(ledger, sids)[-1] == ("b2", "rewarded", [])


def test_weights_after_release_and_decay_over_blocks(ledger: ArenaLedger) -> None:
    built = build_settled(ledger)
    (first, p1), (second, p2), (third, p3) = built.settlements
    assert (p1, p2, p3) == (81, 91, 92)
    assert first["weights_ppm"] == WEIGHTS_1
    assert second["weights_ppm"] == WEIGHTS_2
    assert third["weights_ppm"] == WEIGHTS_3
    for payload, _ in built.settlements:
        assert sum(payload["weights_ppm"].values()) == 1_000_000
    assert (second["as_of_position"], third["as_of_position"]) == (90, 91)
    credits = [(c["submission_id"], c["credit"]) for c in third["claims"]]
    sids = built.sids
    # Sorted by (arena_id, block, submission_id): a1, a4 in mlp-a, then b2 in mlp-b.
    assert credits == [(sids["a1"], 6_802), (sids["a4"], 17_721), (sids["b2"], 13_958)]
    assert [c["credit"] for c in second["claims"]] == [10_204, 26_716, 20_990]
    # The same ledger state gives different digests at different blocks.
    assert len({p["settlement_digest"] for p, _ in built.settlements}) == 3


def test_fees_per_arena_report_the_credit_paid_submission_apart(ledger: ArenaLedger) -> None:
    build_before_policy(ledger)
    fees = ledger.fees()
    assert fees == {"arenas": {ARENA_A: FEES_A, ARENA_B: FEES_B}, "total": FEES_TOTAL}
    assert ledger.fees(ARENA_A) == {"arenas": {ARENA_A: FEES_A}, "total": FEES_A}
    assert ledger.fees(ARENA_B) == {"arenas": {ARENA_B: FEES_B}, "total": FEES_B}
    set_policy(ledger)
    settlement, _ = ledger.settle(2_000)
    assert settlement_payload(settlement)["fees"] == fees


def test_an_arena_never_commissioned_is_not_found_rather_than_an_empty_report(
    ledger: ArenaLedger,
) -> None:
    # A misspelt arena must not read as "no PASS, no fees, no submissions yet".
    build_before_policy(ledger)
    head = ledger.store.head()
    for query in (ledger.rewards, ledger.fees, ledger.submissions, ledger.controls):
        with pytest.raises(NotFound) as caught:
            query("mlp-z")
        assert caught.value.message == "arena 'mlp-z' is not commissioned", query
        assert caught.value.context["arena_id"] == "mlp-z"
    assert ledger.store.head() == head
    # A commissioned arena still answers with its own rows.
    passes = [r for r in ledger.rewards() if r["arena_id"] == ARENA_B]
    assert passes and ledger.rewards(ARENA_B) == passes
    subs = ledger.submissions(ARENA_B)
    assert subs and {r["arena_id"] for r in subs} == {ARENA_B}


@pytest.mark.parametrize("digest", ["kept", "recomputed"])
def test_a_settlement_with_a_changed_weight_is_refused_and_nothing_is_written(
    ledger: ArenaLedger, digest: str
) -> None:
    build_before_policy(ledger)
    set_policy(ledger)
    honest = settlement_payload(ledger.weights(2_000))
    forged = _forged(honest, digest=digest)
    head = ledger.store.head()

    with pytest.raises(Refused) as caught:
        ledger.store.append([EventDraft("settlement", "SettlementComputed", forged)])

    # Even a forger who recomputes the digest over the forged weights must be told which
    # content field is wrong: the digest only follows from the weights.
    assert caught.value.context["reason"] == "settlement_mismatch"
    assert caught.value.context["field"] == "weights_ppm", caught.value.message
    # The message shows both values (each cut to 120 characters: test_domain_inputs).
    assert caught.value.message == (
        f"SettlementComputed differs from the ledger at field 'weights_ppm': recorded "
        f"{forged['weights_ppm']!r}, recomputed {honest['weights_ppm']!r}; nothing was written"
    )
    assert ledger.store.head() == head
    assert _rows(ledger) == 80
    assert ledger.store.verify().ok
    # The honest payload is accepted through the very same path.
    accepted = ledger.store.append([EventDraft("settlement", "SettlementComputed", honest)])
    assert accepted.positions == (81,)


def test_a_settlement_not_computed_as_of_the_head_is_refused(ledger: ArenaLedger) -> None:
    sids = build_before_policy(ledger)
    set_policy(ledger)
    stale = settlement_payload(ledger.weights(2_000))  # as of position 80
    ledger.release(sids["b1"], "evidence checked", 2_100, OPERATOR)  # the head moves to 81

    with pytest.raises(Refused) as caught:
        ledger.store.append([EventDraft("settlement", "SettlementComputed", stale)])

    assert caught.value.context["reason"] == "settlement_mismatch"
    assert caught.value.context["field"] == "as_of_position"
    assert "recorded 80, recomputed 81" in caught.value.message
    assert ledger.store.head().position == 81
    assert _rows(ledger) == 81


def test_a_settlement_must_open_its_batch(ledger: ArenaLedger) -> None:
    build_before_policy(ledger)
    set_policy(ledger)
    honest = settlement_payload(ledger.weights(2_000))
    policy = EventDraft("settlement", "EmissionPolicySet", {
        "half_life_blocks": HALF_LIFE_BLOCKS, "burn_hotkey": BURN, "validator_hotkey": VALIDATOR})

    with pytest.raises(Refused) as caught:
        ledger.store.append([policy, EventDraft("settlement", "SettlementComputed", honest)])

    assert caught.value.context["reason"] == "settlement_not_at_head"
    assert ledger.store.head().position == 80

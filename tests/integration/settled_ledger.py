"""Builds one realistic settled ledger through ``ArenaLedger`` (every event goes through the
guarded store: the machines decide it inside the append).

The settlement, replay, as-of and archive suites build it, and the e2e CLI suites load this
module by path (tests/scenario_loader.py). Every number below is worked out by hand.

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

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from ledger import migrate
from ledger.records import AppendResult
from machines import samples
from machines.attempt import AttemptState
from machines.settlement_rules import (
    settlement_payload,
)
from services.arena_ledger import ArenaLedger
from vocabulary.events import PaymentReleased

ALICE, BOB, CAROL = "5Alice", "5Bob", "5Carol"
BURN, VALIDATOR, OPERATOR = "5Burn", "5Validator", "5Operator"
ARENA_A, ARENA_B = "mlp-a", "mlp-b"
FEE_A, FEE_B = 1_000_000_000, 2_000_000_000
SHARE_A, SHARE_B = 600_000, 300_000
HALF_LIFE_BLOCKS = 1_000
STOCK_NS = 1_000_000_000

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

# mlp-a: a1..a4 paid 1e9 each, a2 refunded, a5 paid by credit; mlp-b: b1, b2 paid 2e9 each.
FEES_A = {"consumed_rao": 4_000_000_000, "released_rao": 1_000_000_000,
          "net_rao": 3_000_000_000, "credits_spent_rao": 1_000_000_000}
FEES_B = {"consumed_rao": 4_000_000_000, "released_rao": 0,
          "net_rao": 4_000_000_000, "credits_spent_rao": 0}
FEES_TOTAL = {"consumed_rao": 8_000_000_000, "released_rao": 1_000_000_000,
              "net_rao": 7_000_000_000, "credits_spent_rao": 1_000_000_000}


# --- the builder --------------------------------------------------------------------------


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

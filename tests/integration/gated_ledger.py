"""Builds settled_ledger.py's ledger under settlement-rules.v2, with control runs.

Arena mlp-a registers one control, ``honest`` (the ``fast_mlp`` delta, expected FAIL
speed_threshold_not_met), run on a FakeEngine; mlp-b registers none. After the 79 events of
settled_ledger.py:

=====  ==============================  ==================================================
block  what                            settlement (control_max_age_blocks = 500)
=====  ==============================  ==================================================
1900   controls of mlp-a: as expected
-      EmissionPolicySet v2, max 500
2000   settle                          mlp-a fresh (age 100); mlp-b controls_stale (no
                                       run): its 300,000 burn, as b1 blocks it anyway
2050   controls of mlp-a: PASS         (the control was expected to FAIL: unexpected)
2100   settle                          mlp-a control_unexpected (run 2050, honest) too:
                                       everything burns
2100   controls of mlp-a: as expected
2600   settle                          run 2100 is exactly 500 old: fresh again
2601   settle                          501 old: mlp-a controls_stale (run 2100)
=====  ==============================  ==================================================
"""

from __future__ import annotations

from typing import Any

from settled_ledger import ARENA_A, BURN, HALF_LIFE_BLOCKS, VALIDATOR, build_before_policy

from engine_bridge.deltas import registered
from engine_bridge.hooks import NodeTally
from engine_bridge.protocol import FakeEngine
from machines import samples
from machines.settlement_rules import RULES_VERSION_V2, settlement_payload
from services.arena_ledger import ArenaLedger
from services.evaluation import run_controls

MAX_AGE_BLOCKS = 500
STOCK_NS = 1_000_000_000
#: The settlement blocks, in the order the builder settles.
SETTLE_BLOCKS = (2_000, 2_100, 2_600, 2_601)


def control_engine(outcome: str) -> FakeEngine:
    """Returns a FakeEngine on which the ``fast_mlp`` control costs the worked example's
    windows ("pass": a PASS, unexpected) or as much as stock ("fail": as expected)."""
    worked = dict(enumerate((c for _, c in samples.WORKED_EXAMPLE_COSTS), start=1))

    def cost(lane_id: str, delta: Any, window: int) -> int:
        faster = outcome == "pass" and delta is not None and window != 0
        return worked[window] if faster else STOCK_NS

    tallies = [NodeTally(f"model.layers.{i}.mlp", 0, calls=32, min_score=1.0) for i in range(4)]
    return FakeEngine(cost_ns=cost, tallies=tallies)


def run_controls_at(ledger: ArenaLedger, block: int, outcome: str) -> None:
    """Runs mlp-a's controls at ``block`` with the outcome ``control_engine`` scripts."""
    run_controls(ledger, control_engine(outcome), arena_id=ARENA_A, block=block)


def build_gated(ledger: ArenaLedger) -> list[tuple[dict[str, Any], int]]:
    """Builds the ledger of the module docstring; returns each settlement's payload and
    position, in SETTLE_BLOCKS order."""
    build_before_policy(ledger)
    ledger.register_control(ARENA_A, {
        "control_id": "honest", "kind": "honest", "delta_digest": registered("fast_mlp").digest,
        "expected_verdict": "FAIL", "expected_reason": "speed_threshold_not_met"})
    run_controls_at(ledger, 1_900, "fail")
    ledger.set_emission_policy(HALF_LIFE_BLOCKS, BURN, VALIDATOR, RULES_VERSION_V2,
                               MAX_AGE_BLOCKS)
    settled = []
    for block in SETTLE_BLOCKS:
        if block == 2_100:
            run_controls_at(ledger, 2_050, "pass")
        settlement, result = ledger.settle(block)
        settled.append((settlement_payload(settlement), result.first))
        if block == 2_100:
            run_controls_at(ledger, 2_100, "fail")
    return settled

"""Tests the stage-timing tool's arithmetic against the fake engine's scripted costs."""

from __future__ import annotations

import time

from engine_bridge.deltas import DeltaSpec
from engine_bridge.protocol import FakeEngine
from engine_bridge.stage_timings import (
    COMPARED_DELTAS,
    compare_deltas,
    repeat_speed,
    time_attempt,
)

#: Scripted window costs (ns) by lane: stock and each compared delta.
COSTS = {"stock": 1_000_000_000, "faithful": 1_000_000_000, "fast_mlp": 500_000_000,
         "fused_gate_up": 800_000_000, "slow": 2_000_000_000}


def test_compare_deltas_gives_each_delta_its_median_cost_and_ratio_to_stock() -> None:
    order: list[str] = []

    def cost(lane: str, delta: DeltaSpec | None, window: int) -> int:
        order.append(lane)
        return COSTS[lane]

    engine = FakeEngine(cost_ns=cost)
    result = compare_deltas(engine, rounds=3)
    assert result == {name: {"median_ms": COSTS[name] / 1e6,
                             "median_ratio": COSTS[name] / COSTS["stock"]}
                      for name in ("stock", *COMPARED_DELTAS)}
    lanes = ["stock", *COMPARED_DELTAS]
    # One warm-up run a lane, then rounds that alternate the lanes' order.
    assert order == lanes + lanes + lanes[::-1] + lanes
    assert engine.live == []


def test_time_attempt_runs_four_windows_by_default_and_times_each_stage() -> None:
    engine = FakeEngine()
    before = time.perf_counter()
    result = time_attempt(engine, "fast_mlp")
    elapsed = time.perf_counter() - before
    assert [p["window"] for p in result["windows"]] == [1, 2, 3, 4]
    assert result["audit"] == [] and result["quality"]["tokens_scored"] == 128
    timings = result["timings"]
    stages = timings["speed_s"] + timings["audit_s"] + timings["quality_s"]
    assert all(timings[key] >= 0 for key in ("speed_s", "audit_s", "quality_s"))
    # The stages lie within the whole, which lies within what this test measured around it.
    assert stages <= timings["total_s"] <= elapsed
    assert engine.live == []


def test_repeat_speed_reports_each_orientation_and_the_speedup_that_cancels_a_lane_bias() -> None:
    # The candidate costs 0.8 s on lane A (orientation 1) and 1.25 s on lane B (orientation
    # 2) against stock's 1 s: a lane bias of 1.25 / 0.8 that S cancels exactly.
    def cost(lane: str, delta: DeltaSpec | None, window: int) -> int:
        if delta is None:
            return 1_000_000_000
        return 800_000_000 if lane == "A" else 1_250_000_000

    engine = FakeEngine(cost_ns=cost)
    result = repeat_speed(engine, "faithful", attempts=2)
    assert result["window_ratios"] == {"orientation_1": [0.8] * 4, "orientation_2": [1.25] * 4}
    assert (result["R1"], result["R2"], result["S"]) == ([0.8] * 2, [1.25] * 2, [1.0] * 2)
    assert result["window_ratio_sd_log"] > 0.2 and result["wall_s_per_window"] >= 0
    assert engine.live == []

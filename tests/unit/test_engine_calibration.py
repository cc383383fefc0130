"""Tests A/A calibration windows against the fake engine: stock on both lanes, fresh lane
boots per orientation and boot round, each lane's cost where the rules expect it."""

from __future__ import annotations

from engine_bridge.calibration import iter_calibration_windows
from engine_bridge.deltas import DeltaSpec
from engine_bridge.prompt_slice import load_replay_slice
from engine_bridge.protocol import FakeEngine
from vocabulary.events import CalibrationWindowMeasured

REPLAY = load_replay_slice()


def _lane_cost(lane: str, delta: DeltaSpec | None, window: int) -> int:
    # Lane A is 3% slower than lane B by itself; window k adds k microseconds to both.
    assert delta is None  # A/A: no candidate anywhere
    return (1_030_000_000 if lane == "A" else 1_000_000_000) + 1_000 * window


def test_each_boot_round_boots_stock_lanes_afresh_per_orientation() -> None:
    engine = FakeEngine(cost_ns=_lane_cost)
    payloads = list(iter_calibration_windows(engine, REPLAY, windows=3, boots=2))
    assert [(p["boot"], p["window"], p["orientation"]) for p in payloads] == [
        (1, 1, 1), (1, 2, 2), (1, 3, 2), (2, 1, 1), (2, 2, 2), (2, 3, 2)]
    assert len(engine.booted) == 2 * 2 * 2  # two lanes, two orientations, two rounds
    assert {delta for _, delta, _ in engine.booted} == {None}
    assert engine.live == []  # every lane shut down


def test_lane_costs_are_named_by_lane_whatever_the_orientation() -> None:
    engine = FakeEngine(cost_ns=_lane_cost)
    for payload in iter_calibration_windows(engine, REPLAY, windows=4, boots=2):
        window = payload["window"]
        assert payload["lane_a_cost_ns"] == 1_030_000_000 + 1_000 * window
        assert payload["lane_b_cost_ns"] == 1_000_000_000 + 1_000 * window
        CalibrationWindowMeasured.model_validate(payload)  # the event takes it as it is

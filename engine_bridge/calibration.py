"""Runs A/A calibration windows: stock on both lanes, laid out like an attempt's windows.

Each boot round is one ``iter_windows`` run with no candidate, so its lanes are booted fresh
per orientation (and warmed up) exactly as an attempt's are, and its faults are the speed
stage's. A payload names each lane's cost: in orientation 1 the candidate's role is lane A,
in orientation 2 lane B (``speed.lane_roles``), so the ratio the rules take,
ln(candidate role / stock role), is oriented as a speed window's (docs/calibration.md).
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

from engine_bridge.prompt_slice import ReplaySlice
from engine_bridge.protocol import Engine
from engine_bridge.speed import LANE_A, iter_windows, lane_roles

__all__ = ["iter_calibration_windows"]


def iter_calibration_windows(
    engine: Engine, replay: ReplaySlice, *, windows: int, boots: int, warmup_runs: int = 1,
    first_boot: int = 1,
) -> Generator[dict[str, Any], None, None]:
    """Yields CalibrationWindowMeasured payloads, boot rounds ``first_boot``..``boots``.

    Raises EngineFault (stage "speed") on the window that failed; payloads already yielded
    stay valid. Closing the generator shuts the lanes down.
    """
    for boot in range(first_boot, boots + 1):
        for payload in iter_windows(engine, None, replay, windows=windows,
                                    warmup_runs=warmup_runs):
            candidate_lane, _ = lane_roles(payload["orientation"])
            in_a = candidate_lane == LANE_A
            yield {
                "boot": boot,
                "window": payload["window"],
                "orientation": payload["orientation"],
                "lane_a_cost_ns": payload["candidate_cost_ns" if in_a else "stock_cost_ns"],
                "lane_b_cost_ns": payload["stock_cost_ns" if in_a else "candidate_cost_ns"],
                "output_tokens": payload["stock_output_tokens"],
            }

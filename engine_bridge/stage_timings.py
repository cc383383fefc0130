"""Times one full attempt (speed windows, audit, quality) stage by stage on this machine.

Run ``python -m engine_bridge.stage_timings [--engine inline|subprocess] [--delta NAME]``;
it prints seconds per stage and the window payloads. ``--compare N`` instead runs N
interleaved rounds of one window per lane (stock and each registered speed-relevant delta)
and prints each delta's median cost ratio to stock. A measurement, not a test: nothing
here asserts a time.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from collections.abc import Sequence
from typing import Any

from engine_bridge.deltas import registered
from engine_bridge.hooks import run_audit
from engine_bridge.prompt_slice import load_replay_slice
from engine_bridge.protocol import Engine
from engine_bridge.quality import grade_quality
from engine_bridge.reference_model import write_reference_model
from engine_bridge.speed import iter_windows

__all__ = ["compare_deltas", "main", "time_attempt"]

#: Deltas whose speed is worth comparing (the others fail the audit anyway).
COMPARED_DELTAS = ("faithful", "fast_mlp", "fused_gate_up", "slow")


def time_attempt(engine: Engine, delta_name: str, windows: int = 4) -> dict[str, Any]:
    """Runs windows, audit and quality for a registered delta; returns timings and payloads."""
    replay = load_replay_slice()
    candidate = registered(delta_name)
    timings: dict[str, float] = {}
    start = time.perf_counter()
    payloads = list(iter_windows(engine, candidate, replay, windows=windows))
    timings["speed_s"] = time.perf_counter() - start
    mark = time.perf_counter()
    audit = run_audit(engine, candidate, replay)
    timings["audit_s"] = time.perf_counter() - mark
    mark = time.perf_counter()
    quality = grade_quality(engine, candidate, replay).payload
    timings["quality_s"] = time.perf_counter() - mark
    timings["total_s"] = time.perf_counter() - start
    return {"timings": timings, "windows": payloads, "audit": audit, "quality": quality}


def compare_deltas(engine: Engine, rounds: int,
                   names: Sequence[str] = COMPARED_DELTAS) -> dict[str, dict[str, float]]:
    """Returns per delta the median window cost (ms) and median ratio to stock, interleaved."""
    replay = load_replay_slice()
    lanes = {"stock": engine.boot_lane("stock")}
    lanes |= {name: engine.boot_lane(name, registered(name)) for name in names}
    costs: dict[str, list[int]] = {name: [] for name in lanes}
    ratios: dict[str, list[float]] = {name: [] for name in names}
    for lane in lanes.values():
        lane.ready()
        lane.run_window(replay)  # warm-up
    for index in range(rounds):
        order = list(lanes) if index % 2 == 0 else list(reversed(lanes))
        for name in order:
            costs[name].append(lanes[name].run_window(replay).cost_ns)
        for name in names:
            ratios[name].append(costs[name][-1] / costs["stock"][-1])
    for lane in lanes.values():
        lane.shutdown()
    return {name: {"median_ms": statistics.median(costs[name]) / 1e6,
                   "median_ratio": statistics.median(ratios[name]) if name in ratios else 1.0}
            for name in lanes}


def main(argv: Sequence[str] | None = None) -> int:
    """Builds the reference model in a temporary folder and prints one attempt's timings."""
    parser = argparse.ArgumentParser(prog="python -m engine_bridge.stage_timings")
    parser.add_argument("--engine", choices=("inline", "subprocess"), default="inline")
    parser.add_argument("--delta", default="fast_mlp")
    parser.add_argument("--windows", type=int, default=4)
    parser.add_argument("--compare", type=int, default=0, metavar="ROUNDS")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as folder:
        mark = time.perf_counter()
        write_reference_model(folder)
        engine: Engine
        if args.engine == "inline":
            from engine_bridge.torch_engine import TorchReferenceEngine

            engine = TorchReferenceEngine(folder)
        else:
            from engine_bridge.subprocess_lane import SubprocessEngine

            engine = SubprocessEngine(folder)
        setup_s = time.perf_counter() - mark
        if args.compare:
            print(json.dumps(compare_deltas(engine, args.compare), indent=2, sort_keys=True))
            engine.shutdown()
            return 0
        result = time_attempt(engine, args.delta, args.windows)
        engine.shutdown()
    result["timings"]["setup_s"] = setup_s
    print(json.dumps(result, indent=2, sort_keys=True))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

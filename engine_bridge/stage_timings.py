"""Times one full attempt (speed windows, audit, quality) stage by stage on this machine.

Run ``python -m engine_bridge.stage_timings [--engine inline|subprocess] [--delta NAME]``;
it prints seconds per stage and the window payloads. ``--compare N`` instead runs N
interleaved rounds of one window per lane (stock and each registered speed-relevant delta)
and prints each delta's median cost ratio to stock. ``--mlp N`` times one MLP node
alone: N interleaved rounds of ``--calls`` calls of the stock module and of each compared
delta's module on the decode (4 rows) and prefill (64 rows) shapes, on the thread's CPU
time, and prints each module's median time per call and its speedup over stock. ``--repeat N``
runs only the speed stage, N times, and prints each window's cost ratio (candidate /
stock), each attempt's R1, R2 and S (docs/machines.md) and the median wall time per
window (boots and warm-ups included): with ``--delta faithful`` that is an A/A check of
the two lanes. ``--clock thread_time`` makes the lanes read their own CPU time (default:
wall time). A measurement, not a test: nothing here asserts a time.
"""

from __future__ import annotations

import argparse
import json
import math
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
from engine_bridge.threads import pin_torch_threads

__all__ = ["MLP_SHAPES", "compare_deltas", "compare_mlp_calls", "main", "repeat_speed",
           "time_attempt"]

#: Deltas whose speed is worth comparing (the others fail the audit anyway).
COMPARED_DELTAS = ("faithful", "fast_mlp", "fused_gate_up", "slow")
#: The MLP input shapes of the sealed slice: a decode step and a prefill of 4 requests.
MLP_SHAPES = {"decode": (4, 1), "prefill": (4, 16)}


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


def repeat_speed(engine: Engine, delta_name: str, attempts: int,
                 windows: int = 4) -> dict[str, Any]:
    """Runs the speed stage ``attempts`` times; returns window ratios, R1, R2, S and wall."""
    replay = load_replay_slice()
    ratios: dict[int, list[float]] = {1: [], 2: []}
    looks: dict[str, list[float]] = {"R1": [], "R2": [], "S": []}
    walls: list[float] = []
    for _ in range(attempts):
        start = time.perf_counter()
        payloads = list(iter_windows(engine, registered(delta_name), replay, windows=windows))
        walls.append((time.perf_counter() - start) / windows)
        sums = {}
        for orientation in (1, 2):
            mine = [p for p in payloads if p["orientation"] == orientation]
            ratios[orientation] += [p["candidate_cost_ns"] / p["stock_cost_ns"] for p in mine]
            sums[orientation] = (sum(p["candidate_cost_ns"] for p in mine)
                                 / sum(p["stock_cost_ns"] for p in mine))
        looks["R1"].append(round(sums[1], 3))
        looks["R2"].append(round(sums[2], 3))
        looks["S"].append(round(1 / math.sqrt(sums[1] * sums[2]), 3))
    every = ratios[1] + ratios[2]
    return {"window_ratios": {f"orientation_{o}": [round(r, 3) for r in ratios[o]]
                              for o in (1, 2)},
            "window_ratio_sd_log": round(statistics.pstdev(math.log(r) for r in every), 4),
            **looks, "wall_s_per_window": round(statistics.median(walls), 3)}


def compare_mlp_calls(model_dir: str, rounds: int, calls: int = 200,
                      names: Sequence[str] = ("faithful", "fast_mlp", "fused_gate_up")
                      ) -> dict[str, dict[str, dict[str, float]]]:
    """Returns per shape and module the median µs per MLP call and the speedup over stock.

    The modules are layer 0's stock MLP of the reference model and each delta built from
    it; each round times ``calls`` calls of every module on the thread's CPU time, in an
    order that alternates between rounds. The speedup is the median of the per-round
    ratios stock time / module time.
    """
    import torch

    from engine_bridge.deltas import build_candidate
    from engine_bridge.reference_model import load_reference_model

    pin_torch_threads(torch)  # one thread, as in every lane

    stock = load_reference_model(model_dir, expected_sha256=None).model.layers[0].mlp
    modules = {"stock": stock} | {name: build_candidate(registered(name), stock)
                                  for name in names}
    generator = torch.Generator().manual_seed(0)
    result: dict[str, dict[str, dict[str, float]]] = {}
    for shape_name, (batch, tokens) in MLP_SHAPES.items():
        x = torch.randn(batch, tokens, stock.gate_proj.in_features, generator=generator)
        times: dict[str, list[float]] = {name: [] for name in modules}
        with torch.inference_mode():
            for module in modules.values():
                module(x)  # warm-up
            for index in range(rounds):
                order = list(modules) if index % 2 == 0 else list(reversed(modules))
                for name in order:
                    start = time.thread_time_ns()
                    for _ in range(calls):
                        modules[name](x)
                    times[name].append((time.thread_time_ns() - start) / calls / 1e3)
        result[shape_name] = {
            name: {"median_us": round(statistics.median(times[name]), 2),
                   "speedup": round(statistics.median(
                       s / t for s, t in zip(times["stock"], times[name], strict=True)), 3)}
            for name in modules}
    return result


def main(argv: Sequence[str] | None = None) -> int:
    """Builds the reference model in a temporary folder and prints one attempt's timings."""
    parser = argparse.ArgumentParser(prog="python -m engine_bridge.stage_timings")
    parser.add_argument("--engine", choices=("inline", "subprocess"), default="inline")
    parser.add_argument("--delta", default="fast_mlp")
    parser.add_argument("--windows", type=int, default=4)
    parser.add_argument("--compare", type=int, default=0, metavar="ROUNDS")
    parser.add_argument("--mlp", type=int, default=0, metavar="ROUNDS")
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--repeat", type=int, default=0, metavar="ATTEMPTS")
    parser.add_argument("--clock", choices=("perf_counter", "thread_time"),
                        default="perf_counter")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as folder:
        mark = time.perf_counter()
        write_reference_model(folder)
        if args.mlp:
            print(json.dumps(compare_mlp_calls(folder, args.mlp, args.calls), indent=2))
            return 0
        engine: Engine
        if args.engine == "inline":
            from engine_bridge.torch_engine import TorchReferenceEngine

            engine = TorchReferenceEngine(folder, clock=(
                time.thread_time_ns if args.clock == "thread_time" else time.perf_counter_ns))
        else:
            from engine_bridge.subprocess_lane import SubprocessEngine

            engine = SubprocessEngine(folder, clock=args.clock)
        setup_s = time.perf_counter() - mark
        if args.compare or args.repeat:
            print(json.dumps(compare_deltas(engine, args.compare) if args.compare else
                             repeat_speed(engine, args.delta, args.repeat, args.windows),
                             indent=2, sort_keys=True))
            engine.shutdown()
            return 0
        result = time_attempt(engine, args.delta, args.windows)
        engine.shutdown()
    result["timings"]["setup_s"] = setup_s
    print(json.dumps(result, indent=2, sort_keys=True))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

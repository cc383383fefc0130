"""Runs paired speed windows and yields one WindowMeasured payload per window.

Window k runs the sealed slice ``window_runs`` (2) times on each arm, interleaved ABBA:
odd windows run candidate, stock, stock, candidate; even windows stock, candidate,
candidate, stock. Each arm thus runs first and last equally often, and a load that rises
or falls steadily through the window costs both arms the same. Orientation 1 is windows
1..floor(W/2) with the candidate on lane A and stock on lane B; orientation 2 is the rest
with the lanes swapped, so a lane that is faster by itself (a cooler GPU, a core with
fewer interrupts) favours each arm equally often. Lanes are booted fresh for each
orientation and warmed up with one unmeasured run each of the slice's first batch (every
shape the slice uses; the batches differ only in their tokens).

An arm's cost in the payload is the mean of its runs: the sum of the lanes' own clock
readings (integer ns) over its ``window_runs`` runs, floor-divided by ``window_runs``, so
it stays the cost of serving the slice once and the ratio of two arms is the ratio of
their raw sums (to within 1 ns). No run is discarded: a median or trimmed statistic
would also discard a candidate's own slow runs. The token counts are those of the arm's
first run. The two arms must generate the same number of tokens in every run pair, a
lane's boot id must not change while it serves windows, and every run's cost must be
positive; otherwise the attempt stops with ``work_mismatch``, ``pod_service_restart`` or
``evidence_unavailable``.

:func:`iter_windows` is a generator: the runner appends each payload as it arrives and
simply stops iterating when the state machine says speed is decided; closing the
generator shuts the lanes down. :func:`run_windows` is the same with a callback.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Generator
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from engine_bridge.decimals import floor_decimal
from engine_bridge.deltas import DeltaSpec
from engine_bridge.limits import rate_places, window_runs, windows_max, windows_min
from engine_bridge.prompt_slice import ReplaySlice
from engine_bridge.protocol import (
    STAGE_SPEED,
    Engine,
    FaultCode,
    Lane,
    WindowRun,
    engine_fault,
    wrap_unexpected,
)
from vocabulary.errors import LedgerError, LimitExceeded

__all__ = [
    "LANE_A",
    "LANE_B",
    "OnWindow",
    "iter_windows",
    "lane_roles",
    "orientation_of",
    "run_windows",
    "window_payload",
]

LANE_A = "A"
LANE_B = "B"
NS_PER_S = Decimal(1_000_000_000)
NS_PER_MS = Decimal(1_000_000)
#: Receives each WindowMeasured payload; returns False to stop before the next window.
OnWindow = Callable[[dict[str, Any]], bool]


def orientation_of(window: int, windows: int) -> int:
    """Returns 1 for windows 1..floor(W/2) and 2 for the rest (docs/machines.md)."""
    if not windows_min <= windows <= windows_max:
        raise LimitExceeded(f"windows must be {windows_min}..{windows_max}, got {windows}",
                            windows=windows)
    if not 1 <= window <= windows:
        raise LimitExceeded(f"window must be 1..{windows}, got {window}", window=window)
    return 1 if window <= windows // 2 else 2


def lane_roles(orientation: int) -> tuple[str, str]:
    """Returns (candidate lane, stock lane) for an orientation."""
    return (LANE_A, LANE_B) if orientation == 1 else (LANE_B, LANE_A)


@dataclass
class _Pair:
    orientation: int
    candidate: Lane
    stock: Lane
    candidate_boot: str = ""
    stock_boot: str = ""

    def shutdown(self) -> None:
        """Stops both lanes, ignoring lanes that already died."""
        for lane in (self.candidate, self.stock):
            # A lane that is already dead has nothing left to stop.
            with contextlib.suppress(Exception):
                lane.shutdown()


def _boot_pair(engine: Engine, candidate: DeltaSpec | None, orientation: int, replay: ReplaySlice,
               warmup_runs: int) -> _Pair:
    candidate_lane, stock_lane = lane_roles(orientation)
    cand = engine.boot_lane(candidate_lane, candidate, stage=STAGE_SPEED)
    try:
        stock = engine.boot_lane(stock_lane, None, stage=STAGE_SPEED)
    except BaseException:
        cand.shutdown()
        raise
    pair = _Pair(orientation, cand, stock)
    try:
        cand.ready()
        stock.ready()
        first_batch = _first_batch(replay)
        for _ in range(warmup_runs):
            cand.run_window(first_batch, window=0)
            stock.run_window(first_batch, window=0)
        pair.candidate_boot, pair.stock_boot = cand.boot_id, stock.boot_id
    except BaseException:
        pair.shutdown()
        raise
    return pair


def _first_batch(replay: ReplaySlice) -> ReplaySlice:
    # Warming up on one batch compiles and allocates for every shape a window uses.
    return dataclasses.replace(replay, requests=replay.requests[:replay.batch_size])


def _arm_order(window: int) -> list[str]:
    """Returns the arms' run order in a window: ABBA, candidate first in odd windows."""
    first, second = ("candidate", "stock") if window % 2 == 1 else ("stock", "candidate")
    order: list[str] = []
    for pair in range(window_runs):
        order += [first, second] if pair % 2 == 0 else [second, first]
    return order


def _measure(pair: _Pair, replay: ReplaySlice, window: int) -> tuple[WindowRun, WindowRun]:
    lanes = {"candidate": (pair.candidate, pair.candidate_boot),
             "stock": (pair.stock, pair.stock_boot)}
    runs: dict[str, list[WindowRun]] = {"candidate": [], "stock": []}
    for role in _arm_order(window):
        lane, boot = lanes[role]
        run = lane.run_window(replay, window=window)
        if run.boot_id != boot:
            raise engine_fault(FaultCode.POD_SERVICE_RESTART, f"{role} lane restarted before "
                               f"window {window} (boot {boot} -> {run.boot_id})",
                               stage=STAGE_SPEED, window=window)
        if run.cost_ns <= 0:
            raise engine_fault(FaultCode.EVIDENCE_UNAVAILABLE, f"window {window}: a lane "
                               "reported a non-positive cost; its clock is not usable",
                               stage=STAGE_SPEED, window=window)
        runs[role].append(run)
    for cand_run, stock_run in zip(runs["candidate"], runs["stock"], strict=True):
        if cand_run.output_tokens != stock_run.output_tokens:
            raise engine_fault(FaultCode.WORK_MISMATCH, f"window {window}: candidate generated "
                               f"{cand_run.output_tokens} tokens, stock "
                               f"{stock_run.output_tokens}", stage=STAGE_SPEED, window=window)
    return _mean_run(runs["stock"]), _mean_run(runs["candidate"])


def _mean_run(runs: list[WindowRun]) -> WindowRun:
    """Folds an arm's runs into one: the mean cost, the first run's outputs, every timing."""
    cost = sum(run.cost_ns for run in runs) // len(runs)
    timings = tuple(t for run in runs for t in run.timings)
    return WindowRun(cost, runs[0].output_token_ids, timings, runs[0].boot_id)


def _rates(run: WindowRun) -> tuple[str, str]:
    # Tokens per second over the whole window, and the mean time to first token in ms,
    # both computed from integers and rounded down to rate_places.
    tps = Decimal(run.output_tokens) * NS_PER_S / Decimal(max(run.cost_ns, 1))
    ttfts = [t.ttft_ns for t in run.timings] or [0]
    ttft_ms = Decimal(sum(ttfts)) / Decimal(len(ttfts)) / NS_PER_MS
    return floor_decimal(tps, rate_places), floor_decimal(ttft_ms, rate_places)


def window_payload(window: int, orientation: int, stock: WindowRun, candidate: WindowRun,
                   *, include_rates: bool = False) -> dict[str, Any]:
    """Returns the WindowMeasured payload of one measured window (integers only).

    With ``include_rates`` it adds the optional per-arm ``*_decode_tps`` (output tokens per
    second of window) and ``*_ttft_ms`` (mean time to first token) as decimal strings.
    """
    payload: dict[str, Any] = {
        "window": window, "orientation": orientation,
        "stock_cost_ns": stock.cost_ns, "candidate_cost_ns": candidate.cost_ns,
        "stock_output_tokens": stock.output_tokens,
        "candidate_output_tokens": candidate.output_tokens}
    if include_rates:
        for arm, run in (("stock", stock), ("candidate", candidate)):
            payload[f"{arm}_decode_tps"], payload[f"{arm}_ttft_ms"] = _rates(run)
    return payload


def iter_windows(engine: Engine, candidate: DeltaSpec | None, replay: ReplaySlice, *,
                 windows: int,
                 warmup_runs: int = 1, include_rates: bool = False,
                 first_window: int = 1) -> Generator[dict[str, Any], None, None]:
    """Yields WindowMeasured payloads for windows first_window..W in order; stop to stop.

    Raises EngineFault (stage "speed") on the window that failed; payloads already
    yielded stay valid. Any other exception from a lane becomes
    ``unproven_infrastructure_failure``. ``first_window`` > 1 resumes an attempt whose
    earlier windows are recorded: its orientation's lanes are booted (and warmed up) afresh.
    ``candidate`` None runs stock on both lanes (an A/A calibration, docs/calibration.md).
    """
    orientation_of(first_window, windows)  # validates W and the start before anything boots
    pair: _Pair | None = None
    try:
        for window in range(first_window, windows + 1):
            orientation = orientation_of(window, windows)
            if pair is None or pair.orientation != orientation:
                if pair is not None:
                    pair.shutdown()
                    pair = None
                pair = _boot_pair(engine, candidate, orientation, replay, warmup_runs)
            stock_run, cand_run = _measure(pair, replay, window)
            yield window_payload(window, orientation, stock_run, cand_run,
                                 include_rates=include_rates)
    except LedgerError:
        raise
    except Exception as exc:
        raise wrap_unexpected(exc, stage=STAGE_SPEED,
                              code=FaultCode.UNPROVEN_INFRASTRUCTURE_FAILURE) from exc
    finally:
        if pair is not None:
            pair.shutdown()


def run_windows(engine: Engine, candidate: DeltaSpec, replay: ReplaySlice, *, windows: int,
                on_window: OnWindow, warmup_runs: int = 1, include_rates: bool = False,
                first_window: int = 1) -> list[dict[str, Any]]:
    """Runs windows, handing each payload to ``on_window`` until it returns False.

    Returns the payloads measured. On a fault the callback has already received every
    earlier window, and the EngineFault propagates.
    """
    measured: list[dict[str, Any]] = []
    stream = iter_windows(engine, candidate, replay, windows=windows, warmup_runs=warmup_runs,
                          include_rates=include_rates, first_window=first_window)
    try:
        for payload in stream:
            measured.append(payload)
            if not on_window(payload):
                break
    finally:
        stream.close()
    return measured

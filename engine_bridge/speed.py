"""Runs paired speed windows and yields one WindowMeasured payload per window.

Window k runs the sealed slice once on each arm. Orientation 1 is windows 1..floor(W/2)
with the candidate on lane A and stock on lane B; orientation 2 is the rest with the
lanes swapped, so a lane that is faster by itself (a better core, a cooler GPU) favours
each arm equally often. Lanes are booted fresh for each orientation and warmed up with
one unmeasured run each. Odd windows run the candidate first and even windows stock
first, so neither arm always inherits the other's cache state. Costs are the lanes' own
clock readings (integer ns). The two arms must generate the same number of tokens, a
lane's boot id must not change while it serves windows, and costs must be positive;
otherwise the attempt stops with ``work_mismatch``, ``pod_service_restart`` or
``evidence_unavailable``.

:func:`iter_windows` is a generator: the runner appends each payload as it arrives and
simply stops iterating when the state machine says speed is decided; closing the
generator shuts the lanes down. :func:`run_windows` is the same with a callback.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Generator
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from engine_bridge.decimals import floor_decimal
from engine_bridge.deltas import DeltaSpec
from engine_bridge.limits import rate_places, windows_max, windows_min
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
        for _ in range(warmup_runs):
            cand.run_window(replay, window=0)
            stock.run_window(replay, window=0)
        pair.candidate_boot, pair.stock_boot = cand.boot_id, stock.boot_id
    except BaseException:
        pair.shutdown()
        raise
    return pair


def _measure(pair: _Pair, replay: ReplaySlice, window: int) -> tuple[WindowRun, WindowRun]:
    if window % 2 == 1:
        cand_run = pair.candidate.run_window(replay, window=window)
        stock_run = pair.stock.run_window(replay, window=window)
    else:
        stock_run = pair.stock.run_window(replay, window=window)
        cand_run = pair.candidate.run_window(replay, window=window)
    for role, run, boot in (("candidate", cand_run, pair.candidate_boot),
                            ("stock", stock_run, pair.stock_boot)):
        if run.boot_id != boot:
            raise engine_fault(FaultCode.POD_SERVICE_RESTART, f"{role} lane restarted before "
                               f"window {window} (boot {boot} -> {run.boot_id})",
                               stage=STAGE_SPEED, window=window)
    if min(cand_run.cost_ns, stock_run.cost_ns) <= 0:
        raise engine_fault(FaultCode.EVIDENCE_UNAVAILABLE, f"window {window}: a lane reported "
                           "a non-positive cost; its clock is not usable", stage=STAGE_SPEED,
                           window=window)
    if cand_run.output_tokens != stock_run.output_tokens:
        raise engine_fault(FaultCode.WORK_MISMATCH, f"window {window}: candidate generated "
                           f"{cand_run.output_tokens} tokens, stock {stock_run.output_tokens}",
                           stage=STAGE_SPEED, window=window)
    return stock_run, cand_run


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

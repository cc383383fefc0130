"""Tests the paired speed windows against the fake engine and an injected clock."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from engine_bridge.deltas import DeltaSpec, registered
from engine_bridge.hooks import AuditSpec
from engine_bridge.prompt_slice import load_replay_slice
from engine_bridge.protocol import FakeEngine, FakeLane, FaultCode, RequestTiming, WindowRun
from engine_bridge.speed import (
    iter_windows,
    lane_roles,
    orientation_of,
    run_windows,
    window_payload,
)
from vocabulary.catalogue import CATALOGUE
from vocabulary.errors import EngineFault, LimitExceeded

REPLAY = load_replay_slice()
CANDIDATE = registered("fast_mlp")


def _ratios_cost(ratios: dict[int, float]) -> Any:
    # Stock costs 1 s; the candidate costs ratio[k] s in window k (docs/machines.md worked example).
    def cost(lane: str, delta: DeltaSpec | None, window: int) -> int:
        if delta is None or window == 0:
            return 1_000_000_000
        return round(ratios[window] * 1_000_000_000)

    return cost


@pytest.mark.parametrize(("windows", "expected"), [
    (2, [1, 2]), (3, [1, 2, 2]), (4, [1, 1, 2, 2]), (5, [1, 1, 2, 2, 2]),
])
def test_orientation_splits_at_half(windows: int, expected: list[int]) -> None:
    assert [orientation_of(k, windows) for k in range(1, windows + 1)] == expected


def test_orientation_refuses_out_of_range() -> None:
    with pytest.raises(LimitExceeded):
        orientation_of(1, 6)
    with pytest.raises(LimitExceeded):
        orientation_of(5, 4)
    with pytest.raises(LimitExceeded, match=r"window must be 1\.\.4, got 0"):
        orientation_of(0, 4)


@pytest.mark.parametrize(("windows", "first"), [(4, 5), (4, 0), (6, 1)])
def test_a_start_outside_the_windows_is_refused_before_anything_boots(
    windows: int, first: int
) -> None:
    # Checked up front: a start past W (or a W outside 2..5) would otherwise yield no
    # window at all, as if the speed stage had nothing left to do.
    engine = FakeEngine()
    with pytest.raises(LimitExceeded):
        list(iter_windows(engine, CANDIDATE, REPLAY, windows=windows, first_window=first))
    assert engine.booted == []


def test_lane_roles_swap_between_orientations() -> None:
    assert lane_roles(1) == ("A", "B")
    assert lane_roles(2) == ("B", "A")


def test_worked_example_costs_come_from_the_injected_clock() -> None:
    engine = FakeEngine(cost_ns=_ratios_cost({1: 0.990, 2: 0.985, 3: 0.975, 4: 0.980}))
    payloads = list(iter_windows(engine, CANDIDATE, REPLAY, windows=4))
    assert payloads[0] == {"window": 1, "orientation": 1, "stock_cost_ns": 1_000_000_000,
                           "candidate_cost_ns": 990_000_000, "stock_output_tokens": 128,
                           "candidate_output_tokens": 128}
    assert [p["candidate_cost_ns"] for p in payloads] == [990_000_000, 985_000_000,
                                                          975_000_000, 980_000_000]
    assert all(type(v) is int for p in payloads for v in p.values())


def test_candidate_lane_is_a_then_b_and_lanes_reboot_per_orientation() -> None:
    engine = FakeEngine()
    list(iter_windows(engine, CANDIDATE, REPLAY, windows=4))
    assert engine.booted == [("A", "fast_mlp", "speed"), ("B", None, "speed"),
                             ("B", "fast_mlp", "speed"), ("A", None, "speed")]
    assert engine.live == []


def test_arms_alternate_which_goes_first() -> None:
    order: list[tuple[int, str]] = []

    def cost(lane: str, delta: DeltaSpec | None, window: int) -> int:
        if window:
            order.append((window, "candidate" if delta else "stock"))
        return 1

    list(iter_windows(FakeEngine(cost_ns=cost), CANDIDATE, REPLAY, windows=4))
    # Two runs an arm a window, ABBA: each arm runs first and last equally often.
    abba, baab = ["candidate", "stock", "stock", "candidate"], [
        "stock", "candidate", "candidate", "stock"]
    assert order == [(k, arm) for k, arms in ((1, abba), (2, baab), (3, abba), (4, baab))
                     for arm in arms]


def test_an_arms_cost_is_the_floored_mean_of_its_runs() -> None:
    # Two runs an arm a window: stock 1 s then 3 s (mean 2 s); the candidate 5 ns then
    # 6 ns (mean 5.5 ns, floored to 5). Tokens are those of one run of the slice.
    runs: dict[str, int] = {"stock": 0, "candidate": 0}

    def cost(lane: str, delta: DeltaSpec | None, window: int) -> int:
        if window == 0:
            return 1
        arm = "candidate" if delta else "stock"
        runs[arm] += 1
        first = runs[arm] % 2 == 1
        if arm == "stock":
            return 1_000_000_000 if first else 3_000_000_000
        return 5 if first else 6

    [payload] = list(iter_windows(FakeEngine(cost_ns=cost), CANDIDATE, REPLAY, windows=2))[:1]
    assert (payload["stock_cost_ns"], payload["candidate_cost_ns"]) == (2_000_000_000, 5)
    assert payload["stock_output_tokens"] == payload["candidate_output_tokens"] == 128


def test_warm_up_serves_the_first_batch_and_windows_the_whole_slice() -> None:
    served: list[tuple[int, tuple[tuple[int, ...], ...]]] = []

    @dataclass(eq=False)
    class _Recording(FakeEngine):
        def boot_lane(self, lane_id: str, delta: DeltaSpec | None = None, *,
                      audit: AuditSpec | None = None, stage: str = "speed") -> FakeLane:
            lane = super().boot_lane(lane_id, delta, audit=audit, stage=stage)
            original = lane.run_window

            def run_window(replay: Any, *, window: int = 0) -> WindowRun:
                served.append((window, replay.requests))
                return original(replay, window=window)

            lane.run_window = run_window  # type: ignore[method-assign]
            return lane

    list(iter_windows(_Recording(), CANDIDATE, REPLAY, windows=2))
    warm = [requests for window, requests in served if window == 0]
    measured = [requests for window, requests in served if window > 0]
    assert warm == [REPLAY.requests[:REPLAY.batch_size]] * 4  # 2 lanes x 2 orientations
    assert measured == [REPLAY.requests] * 8  # 2 windows x 2 arms x 2 runs


def test_a_token_mismatch_in_the_second_run_is_work_mismatch() -> None:
    runs = {"n": 0}

    def script(lane: FakeLane, window: int, run: WindowRun) -> WindowRun:
        if lane.delta is None:
            return run
        runs["n"] += 1
        if runs["n"] < 2:  # the candidate's first run matches stock; its second is short
            return run
        return WindowRun(run.cost_ns, run.output_token_ids[:-1], run.timings, run.boot_id)

    seen, fault = _speed_fault(script)
    assert seen == []
    assert fault.context["fault_code"] == "work_mismatch"


def test_token_count_mismatch_is_work_mismatch() -> None:
    engine = FakeEngine(candidate_tokens_short=1)
    with pytest.raises(EngineFault) as caught:
        list(iter_windows(engine, CANDIDATE, REPLAY, windows=2))
    assert caught.value.context["fault_code"] == "work_mismatch"
    assert caught.value.context["stage"] == "speed"
    assert engine.live == []


def test_fault_in_window_three_keeps_windows_one_and_two() -> None:
    engine = FakeEngine(fail={("speed", "fast_mlp", 3): FaultCode.ADAPTER_REQUEST_FAILED})
    seen: list[dict[str, Any]] = []
    with pytest.raises(EngineFault) as caught:
        run_windows(engine, CANDIDATE, REPLAY, windows=4, on_window=lambda p: seen.append(p)
                    or True)
    assert [p["window"] for p in seen] == [1, 2]
    assert caught.value.context["fault_code"] == "adapter_request_failed"
    assert engine.live == []


def test_engine_kill_control_on_the_fake_keeps_earlier_windows() -> None:
    seen: list[int] = []
    with pytest.raises(EngineFault) as caught:
        for payload in iter_windows(FakeEngine(), registered("engine_kill", window="2"),
                                    REPLAY, windows=4):
            seen.append(payload["window"])
    assert seen == [1]
    assert caught.value.context["fault_code"] == "engine_killed"


def test_pod_restart_control_is_detected_by_boot_id() -> None:
    with pytest.raises(EngineFault) as caught:
        list(iter_windows(FakeEngine(), registered("pod_restart", window="3"), REPLAY,
                          windows=4))
    assert caught.value.context["fault_code"] == "pod_service_restart"


def test_callback_stop_runs_no_further_window_and_shuts_lanes() -> None:
    engine = FakeEngine()
    measured = run_windows(engine, CANDIDATE, REPLAY, windows=4,
                           on_window=lambda p: p["window"] < 3)
    assert [p["window"] for p in measured] == [1, 2, 3]
    assert engine.live == []


def test_breaking_out_of_the_generator_shuts_lanes() -> None:
    engine = FakeEngine()
    stream = iter_windows(engine, CANDIDATE, REPLAY, windows=4)
    assert next(stream)["window"] == 1
    assert len(engine.live) == 2
    stream.close()
    assert engine.live == []


def test_unexpected_lane_error_becomes_unproven_failure() -> None:
    def cost(lane: str, delta: DeltaSpec | None, window: int) -> int:
        if window == 2:
            raise RuntimeError("driver hiccup")
        return 1

    with pytest.raises(EngineFault) as caught:
        list(iter_windows(FakeEngine(cost_ns=cost), CANDIDATE, REPLAY, windows=2))
    assert caught.value.context["fault_code"] == "unproven_infrastructure_failure"


def test_boot_failure_is_adapter_start_failed() -> None:
    engine = FakeEngine(fail={("speed", "stock", 0): FaultCode.ADAPTER_START_FAILED})
    with pytest.raises(EngineFault) as caught:
        list(iter_windows(engine, CANDIDATE, REPLAY, windows=2))
    assert caught.value.context["fault_code"] == "adapter_start_failed"
    assert engine.live == []


def test_optional_rates_are_canonical_decimals() -> None:
    engine = FakeEngine(cost_ns=lambda lane, delta, window: 2_000_000_000 if delta else
                        1_000_000_000)
    [first, _] = list(iter_windows(engine, CANDIDATE, REPLAY, windows=2, include_rates=True))
    assert first["stock_decode_tps"] == "128" and first["candidate_decode_tps"] == "64"
    assert first["stock_ttft_ms"] == "500" and first["candidate_ttft_ms"] == "1000"
    assert CATALOGUE.validate("WindowMeasured", 1, first, stream="attempt-x")
    plain = next(iter_windows(FakeEngine(), CANDIDATE, REPLAY, windows=2))
    assert "stock_decode_tps" not in plain


def test_a_clock_that_does_not_move_is_evidence_unavailable() -> None:
    engine = FakeEngine(cost_ns=lambda lane, delta, window: 0)
    with pytest.raises(EngineFault) as caught:
        list(iter_windows(engine, CANDIDATE, REPLAY, windows=2))
    assert caught.value.context["fault_code"] == "evidence_unavailable"


def _run(cost_ns: int, tokens: int, ttfts_ns: tuple[int, ...]) -> WindowRun:
    timings = tuple(RequestTiming(i, t, cost_ns, 1) for i, t in enumerate(ttfts_ns))
    return WindowRun(cost_ns, ((7,) * tokens,), timings, "boot")


def test_window_rates_are_computed_exactly_and_rounded_down() -> None:
    # 1 token in 3 ns is 333,333,333.33… tokens/s; a mean first token of 2.500001 ms.
    stock = _run(3, 1, (2_000_001, 3_000_001))
    candidate = _run(1, 1, ())
    payload = window_payload(3, 2, stock, candidate, include_rates=True)
    assert payload == {
        "window": 3, "orientation": 2, "stock_cost_ns": 3, "candidate_cost_ns": 1,
        "stock_output_tokens": 1, "candidate_output_tokens": 1,
        "stock_decode_tps": "333333333.333", "stock_ttft_ms": "2.5",
        "candidate_decode_tps": "1000000000", "candidate_ttft_ms": "0",
    }
    assert CATALOGUE.validate("WindowMeasured", 1, payload, stream="attempt-x")
    # Without include_rates (the default) the payload holds integers only.
    assert window_payload(3, 2, stock, candidate) == {
        key: value for key, value in payload.items() if not key.endswith(("_tps", "_ms"))}


def test_each_lane_warms_up_once_per_orientation_by_default() -> None:
    warmups: list[tuple[str, str | None]] = []

    def cost(lane: str, delta: DeltaSpec | None, window: int) -> int:
        if window == 0:
            warmups.append((lane, None if delta is None else delta.name))
        return 1_000_000_000

    measured = list(iter_windows(FakeEngine(cost_ns=cost), CANDIDATE, REPLAY, windows=4))
    assert len(measured) == 4
    expected = [("A", "fast_mlp"), ("B", None), ("B", "fast_mlp"), ("A", None)]
    assert warmups == expected
    warmups.clear()
    payloads = run_windows(FakeEngine(cost_ns=cost), CANDIDATE, REPLAY, windows=4,
                           on_window=lambda payload: True)
    assert warmups == expected
    assert all("stock_decode_tps" not in payload for payload in payloads)


# Speed windows (docs/engine.md, speed.py): a stock lane restart is pod_service_restart, a zero-
# cost arm is evidence_unavailable, a candidate generating more tokens is work_mismatch, each arm
# reports its own token count, a resumed attempt keeps its window's orientation, and odd window
# counts split at half.


# --- speed windows ----------------------------------------------------------------------


@dataclass(eq=False)
class _ScriptedLane(FakeLane):
    """A fake lane whose measured run can be rewritten per window by the engine's script."""

    def run_window(self, replay: Any, *, window: int = 0) -> WindowRun:
        run = super().run_window(replay, window=window)
        script = getattr(self.engine, "script", None)
        return run if script is None or window == 0 else script(self, window, run)


@dataclass(eq=False)
class _ScriptedEngine(FakeEngine):
    script: Any = None

    def boot_lane(self, lane_id: str, delta: DeltaSpec | None = None, *,
                  audit: AuditSpec | None = None, stage: str = "speed") -> FakeLane:
        lane = super().boot_lane(lane_id, delta, audit=audit, stage=stage)
        self.live.remove(lane)
        scripted = _ScriptedLane(self, lane_id, delta, audit, stage)
        self.live.append(scripted)
        return scripted


def _speed_fault(script: Any, windows: int = 2) -> tuple[list[int], EngineFault]:
    engine = _ScriptedEngine(script=script)
    seen: list[int] = []
    with pytest.raises(EngineFault) as caught:
        for payload in iter_windows(engine, CANDIDATE, REPLAY, windows=windows):
            seen.append(payload["window"])
    assert engine.live == []
    return seen, caught.value


def test_a_stock_lane_restart_is_pod_service_restart() -> None:
    # speed.py: a lane's boot id must not change while it serves windows; stock's changes
    # before window 2, so window 1 is kept and window 2 faults.
    def script(lane: FakeLane, window: int, run: WindowRun) -> WindowRun:
        if lane.delta is None and window == 2:
            return WindowRun(run.cost_ns, run.output_token_ids, run.timings, "restarted")
        return run

    seen, fault = _speed_fault(script)
    assert seen == [1]
    assert (fault.context["fault_code"], fault.context["window"]) == ("pod_service_restart", 2)


@pytest.mark.parametrize("zero_arm", ["candidate", "stock"])
def test_one_arm_with_a_zero_cost_is_evidence_unavailable(zero_arm: str) -> None:
    # speed.py: costs must be positive; one arm at 0 ns (the other at 1 s) is enough.
    def script(lane: FakeLane, window: int, run: WindowRun) -> WindowRun:
        arm = "stock" if lane.delta is None else "candidate"
        cost = 0 if arm == zero_arm else run.cost_ns
        return WindowRun(cost, run.output_token_ids, run.timings, run.boot_id)

    seen, fault = _speed_fault(script)
    assert seen == []
    assert fault.context["fault_code"] == "evidence_unavailable"


def test_a_candidate_that_generates_more_tokens_is_work_mismatch() -> None:
    # docs/machines.md: token counts must match between arms, in either direction. The candidate
    # adds one token to its last request: 129 against stock's 128.
    def script(lane: FakeLane, window: int, run: WindowRun) -> WindowRun:
        if lane.delta is None:
            return run
        ids = (*run.output_token_ids[:-1], (*run.output_token_ids[-1], 0))
        return WindowRun(run.cost_ns, ids, run.timings, run.boot_id)

    seen, fault = _speed_fault(script)
    assert seen == []
    assert fault.context["fault_code"] == "work_mismatch"


def test_window_payload_reports_each_arms_own_token_count() -> None:
    # The payload's fields are per arm: stock 3 tokens, candidate 2 (the ledger, not this
    # function, turns the mismatch into work_mismatch).
    stock = WindowRun(10, ((1, 2, 3),), (), "s")
    candidate = WindowRun(20, ((1, 2),), (), "c")
    assert window_payload(1, 1, stock, candidate) == {
        "window": 1, "orientation": 1, "stock_cost_ns": 10, "candidate_cost_ns": 20,
        "stock_output_tokens": 3, "candidate_output_tokens": 2}


def test_a_resumed_attempt_keeps_the_orientation_of_its_window() -> None:
    # W = 4: orientation 1 is windows 1..2. Resuming at window 3 runs windows 3 and 4 in
    # orientation 2, so the candidate boots on lane B and stock on lane A.
    engine = FakeEngine()
    payloads = list(iter_windows(engine, CANDIDATE, REPLAY, windows=4, first_window=3))
    assert [(p["window"], p["orientation"]) for p in payloads] == [(3, 2), (4, 2)]
    assert engine.booted == [("B", "fast_mlp", "speed"), ("A", None, "speed")]


@pytest.mark.parametrize(("windows", "orientations"), [
    (3, [1, 2, 2]),  # ⌊3/2⌋ = 1
    (5, [1, 1, 2, 2, 2]),  # ⌊5/2⌋ = 2
])
def test_odd_window_counts_split_at_half_through_the_generator(
    windows: int, orientations: list[int]
) -> None:
    engine = FakeEngine()
    payloads = list(iter_windows(engine, CANDIDATE, REPLAY, windows=windows))
    assert [p["orientation"] for p in payloads] == orientations
    assert [p["window"] for p in payloads] == list(range(1, windows + 1))
    assert engine.booted == [("A", "fast_mlp", "speed"), ("B", None, "speed"),
                             ("B", "fast_mlp", "speed"), ("A", None, "speed")]

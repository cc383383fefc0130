"""Pins the audit arithmetic and speed-window rules that a mutation review found unguarded.

Each test states a rule of DOMAIN §6, docs/engine.md or a module docstring in the bridge
(hooks.py, speed.py, decimals.py, quality.py) and checks it on a hand-worked input, so a
small change to that arithmetic (a threshold compared after a float-to-text round trip,
min_score that is not the minimum, a merge that keeps the larger count, an Inf in the
stock output that scores 0, a stock lane restart or a zero-cost arm that goes unnoticed,
a resumed attempt that restarts orientation 1) fails here. Expected values come from the
texts and are worked out in the comments, never copied from the code's output.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from typing import Any

import pytest
from test_engine_audit_math import BAND, BAR  # same directory, prepend import mode
from test_engine_speed import CANDIDATE, REPLAY

from engine_bridge.decimals import floor_decimal, parse_decimal
from engine_bridge.deltas import DeltaSpec, registered
from engine_bridge.hooks import AuditSpec, NodeTally, classify, run_audit, tallies_to_payloads
from engine_bridge.protocol import FakeEngine, FakeLane, WindowRun
from engine_bridge.speed import iter_windows, window_payload
from vocabulary.catalogue import CATALOGUE
from vocabulary.errors import CanonicalFormError, EngineFault

# --- audit: classification is exact decimal arithmetic ---------------------------------


def test_a_float_just_below_a_decimal_bar_is_a_near_miss_not_ok() -> None:
    # The float nearest 0.984 is 0.98399999999999998578…, below the bfloat16 bar "0.984":
    # compared exactly as decimals it is a near miss (0.954 ≤ it < 0.984), although its
    # shortest repr "0.984" equals the bar.
    just_below, below_band = 0.984, 0.954
    assert Decimal(just_below) < Decimal("0.984")
    assert classify(just_below, Decimal("0.984"), Decimal("0.03")) == "near_miss"
    # The float nearest 0.954 (= 0.984 − 0.03) is 0.95399999999999995914…, below the
    # band's floor: a violation, not a near miss.
    assert Decimal(below_band) < Decimal("0.954")
    assert classify(below_band, Decimal("0.984"), Decimal("0.03")) == "violation"


# --- audit: one node's tally ------------------------------------------------------------


def test_min_score_is_the_smallest_comparable_score_not_the_first_or_last() -> None:
    # Scores 0.25, 1.0, 0.75: the minimum is 0.25 (a violation: below 0.99999 − 0.03),
    # 1.0 is clean and 0.75 another violation.
    tally = NodeTally("model.layers.0.mlp", 0)
    for score in (0.25, 1.0, 0.75):
        tally.record(score, BAR, BAND)
    payload = tally.to_payload("0.99999")
    assert (payload["calls"], payload["violations"], payload["near_misses"]) == (3, 2, 0)
    assert payload["min_score"] == "0.25"


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")])
def test_a_nan_or_inf_score_is_uncomparable_and_never_enters_min_score(bad: float) -> None:
    # DOMAIN §6: NaN or Inf is uncomparable; docs/engine.md: uncomparable calls do not
    # enter min_score. Calls: 0.5, bad, so calls 2, uncomparable 1, min_score "0.5".
    tally = NodeTally("model.layers.0.mlp", 0)
    tally.record(0.5, BAR, BAND)
    tally.record(bad, BAR, BAND)
    payload = tally.to_payload("0.99999")
    assert (payload["calls"], payload["uncomparable"], payload["violations"]) == (2, 1, 1)
    assert payload["min_score"] == "0.5"
    only_bad = NodeTally("model.layers.0.mlp", 0)
    only_bad.record(bad, BAR, BAND)
    assert only_bad.to_payload("0.99999")["min_score"] == "0"


def test_merging_two_receipts_adds_violations_and_keeps_the_lower_min_score() -> None:
    # Two scheduler processes of one rank: violations 2 + 3 = 5; min(0.25, 0.75) = 0.25,
    # whichever receipt is merged last.
    node = "model.layers.0.mlp"
    tally = NodeTally(node, 0, calls=4, violations=2, min_score=0.25)
    tally.merge(NodeTally(node, 0, calls=5, violations=3, min_score=0.75))
    assert (tally.calls, tally.violations, tally.min_score) == (9, 5, 0.25)


def test_payload_bar_is_spelled_canonically_whatever_the_policy_spelling() -> None:
    # docs/engine.md: payloads hold canonical decimal strings only; "0.99000" is 0.99.
    [payload] = tallies_to_payloads([NodeTally("model.layers.0.mlp", 0, calls=1,
                                               min_score=1.0)], "0.99000")
    assert payload["bar"] == "0.99"
    assert CATALOGUE.validate("AuditNodeGraded", 1, payload, stream="attempt-x")
    engine = FakeEngine(tallies=[NodeTally("model.layers.0.mlp", 0, calls=1, min_score=1.0)])
    [through_lane] = run_audit(engine, registered("faithful"), REPLAY, bar="0.984000")
    assert through_lane["bar"] == "0.984"


# --- audit: the score itself (torch) ----------------------------------------------------


@pytest.mark.parametrize("bad", [float("inf"), float("nan")])
def test_inf_or_nan_in_the_stock_output_is_uncomparable(bad: float) -> None:
    # DOMAIN §6 / docs/engine.md: NaN/Inf in *either* output is uncomparable (None), not a
    # violation scoring 0.
    torch = pytest.importorskip("torch")
    from engine_bridge.hooks import score_outputs

    stock = torch.tensor([bad, 1.0])
    assert score_outputs(torch.ones(2), stock) is None


def test_a_tiny_but_nonzero_stock_output_is_scored_by_the_formula() -> None:
    # Only ‖r‖ = 0 is special. r = 2^-120 (a normal float32), c = 1.5 · 2^-120, both exact:
    # ‖c − r‖ / ‖r‖ = 0.5, so the score is 1 − 0.5 = 0.5, not 0.
    torch = pytest.importorskip("torch")
    from engine_bridge.hooks import score_outputs

    r = torch.tensor([2.0 ** -120], dtype=torch.float32)
    assert score_outputs(r * 1.5, r) == 0.5


def test_a_broadcastable_shape_mismatch_is_uncomparable() -> None:
    # Shapes (1, 3) and (2, 3) broadcast in torch arithmetic, but they differ: uncomparable.
    torch = pytest.importorskip("torch")
    from engine_bridge.hooks import score_outputs

    assert score_outputs(torch.ones(1, 3), torch.ones(2, 3)) is None
    assert score_outputs(torch.ones(2, 3), torch.ones(1, 3)) is None


# --- decimals ---------------------------------------------------------------------------


def test_floor_decimal_refuses_infinity_with_the_projects_error() -> None:
    # STYLE: faults raise from the LedgerError root; Decimal's InvalidOperation is not one.
    for value in (float("inf"), float("-inf")):
        with pytest.raises(CanonicalFormError):
            floor_decimal(value, 6)


@pytest.mark.parametrize("text", ["NaN", "Infinity", "-Infinity", "sNaN"])
def test_a_non_finite_bar_is_refused(text: str) -> None:
    # A NaN bar would make every comparison raise later, inside the audit lane.
    with pytest.raises(CanonicalFormError):
        parse_decimal(text, field="bar")
    with pytest.raises(CanonicalFormError):
        AuditSpec(registered("faithful"), bar=text)


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
    # DOMAIN §6: token counts must match between arms, in either direction. The candidate
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

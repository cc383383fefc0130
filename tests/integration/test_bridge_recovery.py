"""Tests that no crash or unexpected exception leaves an attempt stranded or half-recorded.

Each test drives ``services.evaluation`` against a real ledger (SQLite and PostgreSQL) with
``FakeEngine`` on a ``ManualClock`` (exact speed decisions), or with the in-process torch
engine where only its refusal of a file delta matters. ``Crash`` stands for the validator
process dying (SIGKILL, OOM, Ctrl-C): a BaseException nothing in the runner may catch.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from runner_bench import (  # same directory, prepend import mode
    ARENA,
    BLOCK,
    FAST_MLP,
    NODES,
    STOCK_NS,
    WORKED,
    Bench,
    Crash,
    clean_tallies,
    crash_controls_in_window_3,
)

from engine_bridge.deltas import DeltaSpec, load_file_delta
from engine_bridge.hooks import AuditSpec, NodeTally, tallies_to_payloads
from engine_bridge.prompt_slice import ReplaySlice
from engine_bridge.protocol import FakeEngine, FakeLane, TokenScores
from ledger import migrate
from services.arena_ledger import ArenaLedger
from services.evaluation import control_run_id, evaluate, run_controls
from vocabulary.errors import InvalidInput
from vocabulary.events import AuditNodeGraded


@pytest.fixture
def ledger(store_url: str) -> Iterator[ArenaLedger]:
    migrate.upgrade(store_url)
    with ArenaLedger(store_url, actor="recovery-test") as opened:
        Bench(opened).commission()
        yield opened


def admit(ledger: ArenaLedger, delta: DeltaSpec) -> str:
    return Bench(ledger).admit(delta)


def worked_engine(cls: type[FakeEngine] = FakeEngine) -> FakeEngine:
    """Returns a fake whose candidate passes speed at look 3 (so audit and quality run)."""
    def cost(lane_id: str, delta: DeltaSpec | None, window: int) -> int:
        return STOCK_NS if delta is None or window == 0 else WORKED[window]

    return cls(cost_ns=cost)


def outcome(ledger: ArenaLedger, attempt_id: str) -> tuple[str, str, str]:
    state = ledger.fold.attempt(attempt_id)
    assert state is not None and state.decision is not None, state
    d = state.decision
    return (d.verdict, d.reason, d.disposition)


# --- the audit is appended whole ------------------------------------------------------------


def test_a_crash_right_after_the_first_audit_append_leaves_the_whole_audit(
        ledger: ArenaLedger, monkeypatch: pytest.MonkeyPatch) -> None:
    sid = admit(ledger, FAST_MLP)
    engine = worked_engine()
    # Node 3 violates on every call: losing its event would turn a FAIL into a PASS.
    engine.tallies = clean_tallies()[:3]
    engine.tallies.append(NodeTally(NODES[3], 0, calls=32, violations=32, min_score=0.2))
    append = ledger.append

    def append_then_die(batch: Sequence[Any], **kwargs: Any) -> Any:
        result = append(batch, **kwargs)
        if any(isinstance(item[1], AuditNodeGraded) for item in batch):
            raise Crash("validator killed right after an audit append")
        return result

    monkeypatch.setattr(ledger, "append", append_then_die)
    with pytest.raises(Crash):
        evaluate(ledger, engine, submission_id=sid, attempt_id="att-1", block=BLOCK)
    monkeypatch.undo()

    state = ledger.fold.attempt("att-1")
    assert state is not None and state.status == "AUDIT"
    assert sorted(state.audit or {}) == list(NODES)
    assert ledger.conclude("att-1", BLOCK).reason == "slot_audit_failed"

    # Appending the same audit again (a retry that cannot know the first one landed) is an
    # idempotent repeat, not a refusal as audit_node_repeated.
    head = ledger.store.head().position
    payloads = tallies_to_payloads(engine.tallies, "0.99999")
    repeat = ledger.append([("attempt-att-1", AuditNodeGraded.model_validate(p))
                            for p in payloads], key="audit-att-1")
    assert repeat.already_recorded
    assert ledger.store.head().position == head


# --- host failures in the audit are faults, never a miner's FAIL ----------------------------


def test_a_host_failure_noted_by_the_audit_hook_is_recorded_as_a_fault(
        ledger: ArenaLedger) -> None:
    sid = admit(ledger, FAST_MLP)
    engine = worked_engine()
    engine.tallies = clean_tallies()
    engine.tallies[2] = NodeTally(NODES[2], 0, calls=31, min_score=1.0,
                                  infrastructure_error="OutOfMemoryError: CUDA out of memory")
    result = evaluate(ledger, engine, submission_id=sid, attempt_id="att-1", block=BLOCK)

    assert (result.decision["verdict"], result.decision["reason"],
            result.decision["disposition"]) == (
        "NO_DECISION", "unproven_infrastructure_failure", "HOLD")
    assert "AuditNodeGraded" not in Bench(ledger).types("att-1")
    [fault] = Bench(ledger).payloads("att-1", "InfrastructureFault")
    assert fault["stage"] == "audit" and "OutOfMemoryError" in fault["detail"]
    assert NODES[2] in fault["detail"]


# --- misuse raises before the claim; unexpected exceptions become faults --------------------


def test_an_untrusted_file_delta_in_process_is_refused_before_the_claim(
        ledger: ArenaLedger, tmp_path: Path) -> None:
    from engine_bridge.torch_engine import TorchReferenceEngine

    delta_file = tmp_path / "delta.py"
    delta_file.write_text("def build_mlp(stock):\n    return stock\n")
    spec = load_file_delta(delta_file)
    sid = admit(ledger, spec)
    head = ledger.store.head().position
    # No model folder: the refusal must come before anything boots or is written.
    engine = TorchReferenceEngine(tmp_path / "no-model")

    with pytest.raises(InvalidInput, match="file deltas run arbitrary code"):
        evaluate(ledger, engine, submission_id=sid, attempt_id="att-1", block=BLOCK,
                 candidate=spec)

    assert ledger.store.head().position == head
    assert ledger.fold.attempt("att-1") is None
    submission = ledger.fold.submission(sid)
    assert submission is not None and submission.status == "QUEUED"


@dataclass(eq=False)
class _BrokenLane(FakeLane):
    """A lane whose adapter raises a plain exception (not an EngineFault) in one stage."""

    def run_window(self, replay: ReplaySlice, *, window: int = 0) -> Any:
        if self.stage == "audit" == self.engine.broken_stage:  # type: ignore[attr-defined]
            raise RuntimeError("audit adapter lost its connection")
        return super().run_window(replay, window=window)

    def score_tokens(self, sequences: Sequence[Sequence[int]],
                     first_scored: Sequence[int]) -> list[TokenScores]:
        if self.stage == "quality" == self.engine.broken_stage:  # type: ignore[attr-defined]
            raise ValueError("quality adapter returned garbage")
        return super().score_tokens(sequences, first_scored)


@dataclass(eq=False)
class _BrokenEngine(FakeEngine):
    broken_stage: str = "audit"

    def boot_lane(self, lane_id: str, delta: DeltaSpec | None = None, *,
                  audit: AuditSpec | None = None, stage: str = "speed") -> FakeLane:
        lane = super().boot_lane(lane_id, delta, audit=audit, stage=stage)
        broken = _BrokenLane(self, lane_id, delta, audit, stage)
        self.live[self.live.index(lane)] = broken
        return broken


@pytest.mark.parametrize(("stage", "message"), [
    ("audit", "RuntimeError: audit adapter lost its connection"),
    ("quality", "ValueError: quality adapter returned garbage"),
])
def test_an_unexpected_exception_in_audit_or_quality_concludes_the_attempt(
        ledger: ArenaLedger, stage: str, message: str) -> None:
    sid = admit(ledger, FAST_MLP)
    engine = worked_engine(_BrokenEngine)
    assert isinstance(engine, _BrokenEngine)
    engine.broken_stage = stage
    engine.tallies = clean_tallies()

    result = evaluate(ledger, engine, submission_id=sid, attempt_id="att-1", block=BLOCK)

    assert result.fault == "unproven_infrastructure_failure"
    assert outcome(ledger, "att-1") == ("NO_DECISION", "unproven_infrastructure_failure",
                                        "HOLD")
    [fault] = Bench(ledger).payloads("att-1", "InfrastructureFault")
    assert (fault["stage"], fault["detail"]) == (stage, message)
    assert engine.live == []


# --- run_controls finishes what a crash interrupted -----------------------------------------


def _register_honest(ledger: ArenaLedger) -> None:
    ledger.register_control(ARENA, {
        "control_id": "honest", "kind": "honest", "delta_digest": FAST_MLP.digest,
        "expected_verdict": "FAIL", "expected_reason": "speed_threshold_not_met"})


def _windows(ledger: ArenaLedger, attempt_id: str) -> list[int]:
    return [int(p["window"]) for p in Bench(ledger).payloads(attempt_id, "WindowMeasured")]


def test_a_control_run_that_crashed_mid_speed_is_resumed_by_the_retry(
        ledger: ArenaLedger) -> None:
    _register_honest(ledger)
    run = control_run_id("honest", 1_200)

    crash_controls_in_window_3(ledger)
    state = ledger.fold.attempt(run)
    assert state is not None and state.status == "SPEED" and _windows(ledger, run) == [1, 2]

    engine = FakeEngine()
    report = run_controls(ledger, engine, arena_id=ARENA, block=1_200)

    # Windows 3 and 4 are measured on freshly booted orientation-2 lanes; 1 and 2 stay.
    assert _windows(ledger, run) == [1, 2, 3, 4]
    assert [(lane, stage) for lane, _, stage in engine.booted] == [
        ("B", "speed"), ("A", "speed")]
    assert outcome(ledger, run) == ("FAIL", "speed_threshold_not_met", "COMPLETE")
    assert [(r["control_id"], r["verdict"], r["outcome"]) for r in report] == [
        ("honest", "FAIL", "as_expected")]


@pytest.mark.parametrize("dies_in", ["intake", "claim", "conclude"])
def test_a_control_run_that_crashed_between_its_steps_is_finished_by_the_retry(
        ledger: ArenaLedger, monkeypatch: pytest.MonkeyPatch, dies_in: str) -> None:
    _register_honest(ledger)
    run = control_run_id("honest", 1_200)

    def die(*args: Any, **kwargs: Any) -> Any:
        raise Crash(f"validator killed before {dies_in}")

    monkeypatch.setattr(ledger, dies_in, die)
    with pytest.raises(Crash):
        run_controls(ledger, FakeEngine(), arena_id=ARENA, block=1_200)
    monkeypatch.undo()
    assert ledger.fold.credit(run) is not None

    report = run_controls(ledger, FakeEngine(), arena_id=ARENA, block=1_200)

    assert _windows(ledger, run) == [1, 2, 3, 4]
    assert outcome(ledger, run) == ("FAIL", "speed_threshold_not_met", "COMPLETE")
    assert [(r["control_id"], r["outcome"]) for r in report] == [("honest", "as_expected")]
    head = ledger.store.head().position
    engine = FakeEngine()
    assert run_controls(ledger, engine, arena_id=ARENA, block=1_200) == report
    assert ledger.store.head().position == head and engine.booted == []

"""Runs ``services.evaluation.evaluate`` and ``run_controls`` against a real ledger.

The first part drives the runner with ``FakeEngine`` on a ``ManualClock`` (scripted costs,
so speed decisions are exact) on SQLite and PostgreSQL: it stops where the attempt machine
says speed is decided, appends each measurement as it is taken, and turns every engine
fault into the NO_DECISION the machine derives. The second part boots the real CPU
reference engine once for one SQLite ledger and checks only what is deterministic there:
audit and fault outcomes of the controls, and a file delta's digest and clean audit. CPU
timings on this shared host are noise, so no real-engine test asserts a speed verdict.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from runner_bench import (
    ARENA,
    BLOCK,
    FAST_MLP,
    NODES,
    STOCK_NS,
    WORKED,
    Bench,
    clean_tallies,
    crash_controls_in_window_3,  # same directory
)

import engine_bridge.speed
from engine_bridge.deltas import DeltaSpec, load_file_delta, registered
from engine_bridge.hooks import AuditSpec, NodeTally
from engine_bridge.prompt_slice import load_replay_slice
from engine_bridge.protocol import Engine, FakeEngine, FakeLane, FaultCode, TokenScores
from ledger import migrate
from machines import samples
from services.arena_ledger import ArenaLedger
from services.evaluation import (
    CONTROL_HOTKEY,
    EvaluationResult,
    control_run_id,
    default_model_dir,
    evaluate,
    make_engine,
    resolve_delta,
    run_controls,
)
from vocabulary.errors import InvalidInput, NotFound, Refused, SchemaError
from vocabulary.events import ArenaRetired

WRONG_MLP = registered("wrong_mlp")


@pytest.fixture
def bench(store_url: str) -> Iterator[Bench]:
    migrate.upgrade(store_url)
    with ArenaLedger(store_url, actor="runner-test") as ledger:
        yield Bench(ledger)


def scripted(candidate_ns: Callable[[int], int]) -> tuple[FakeEngine, list[tuple[str, int]]]:
    """Returns a FakeEngine whose candidate costs ``candidate_ns(window)`` and a run log.

    Stock always costs 1 s; warm-up runs (window 0) cost 1 s on both arms. The log holds
    (arm, window) for every measured run, so a test sees which windows really ran.
    """
    runs: list[tuple[str, int]] = []

    def cost(lane_id: str, delta: DeltaSpec | None, window: int) -> int:
        if window == 0:
            return STOCK_NS
        runs.append(("stock" if delta is None else "candidate", window))
        return STOCK_NS if delta is None else candidate_ns(window)

    return FakeEngine(cost_ns=cost), runs


def decision(result: EvaluationResult) -> tuple[Any, ...]:
    d = result.decision
    return (d["verdict"], d["reason"], d["disposition"], d["speedup"], d["pass_line"],
            d["look_window"])


# --- FakeEngine: speed stops where the machine stops ---------------------------------------


def test_worked_example_passes_at_look_3_and_window_4_never_runs(bench: Bench) -> None:
    bench.commission()
    sid = bench.admit(FAST_MLP)
    engine, runs = scripted(WORKED.__getitem__)
    engine.tallies = clean_tallies()

    result = bench.run(engine, sid)

    assert result.to_json() == {
        "attempt_id": "att-1", "submission_id": sid, "windows": 3, "audit_nodes": 4,
        "quality": True, "fault": None, "verdict": "PASS", "reason": "",
        "disposition": "COMPLETE", "speedup": "1.019129", "pass_line": "0.018884",
        "look_window": 3,
    }
    # Each window runs the slice twice an arm, ABBA; window 4 never runs.
    abba, baab = ["candidate", "stock", "stock", "candidate"], [
        "stock", "candidate", "candidate", "stock"]
    assert runs == [(arm, k) for k, arms in ((1, abba), (2, baab), (3, abba)) for arm in arms]
    assert bench.types("att-1") == [
        "AttemptClaimed", "WindowMeasured", "WindowMeasured", "WindowMeasured",
        *["AuditNodeGraded"] * 4, "QualityGraded", "AttemptDecided"]
    windows = bench.payloads("att-1", "WindowMeasured")
    assert [(w["window"], w["orientation"], w["stock_cost_ns"], w["candidate_cost_ns"])
            for w in windows] == [(1, 1, STOCK_NS, 990_000_000), (2, 1, STOCK_NS, 985_000_000),
                                  (3, 2, STOCK_NS, 975_000_000)]
    assert [a["node"] for a in bench.payloads("att-1", "AuditNodeGraded")] == list(NODES)
    assert bench.stages == ["window"] * 3 + ["audit", "quality", "decided"]
    # Candidate on lane A in orientation 1, on lane B in orientation 2, then audit, quality.
    assert [(lane, stage) for lane, _, stage in engine.booted] == [
        ("A", "speed"), ("B", "speed"), ("B", "speed"), ("A", "speed"), ("audit", "audit"),
        ("A", "quality"), ("B", "quality"), ("B", "quality")]
    assert engine.live == []
    assert bench.status(sid) == "QUALIFIED"
    submission_types = [r.type for r in bench.ledger.store.read_stream(f"submission-{sid}")]
    assert submission_types[-2:] == ["QualificationStarted", "SubmissionResolved"]


def test_futility_stops_after_orientation_1(bench: Bench) -> None:
    bench.commission(futility_margin="0.05")
    sid = bench.admit(FAST_MLP)
    engine, runs = scripted(lambda window: 1_200_000_000)
    engine.tallies = clean_tallies()

    result = bench.run(engine, sid)

    assert decision(result) == ("FAIL", "futility", "COMPLETE", None, None, 2)
    assert (result.windows, result.audit_nodes, result.quality) == (2, 0, False)
    assert {window for _, window in runs} == {1, 2}
    assert bench.types("att-1") == [
        "AttemptClaimed", "WindowMeasured", "WindowMeasured", "AttemptDecided"]
    assert [stage for _, _, stage in engine.booted] == ["speed", "speed"]
    explained = bench.ledger.explain_attempt("att-1")
    assert (explained["r1"], explained["futility_limit"]) == ("1.2", "1.05")
    assert bench.status(sid) == "FAILED"


# --- FakeEngine: faults become NO_DECISION ------------------------------------------------


def test_token_mismatch_becomes_work_mismatch_and_keeps_earlier_windows(bench: Bench) -> None:
    bench.commission()
    sid = bench.admit(FAST_MLP)

    def cost(window: int) -> int:
        # From window 2 on the candidate generates one token fewer than stock. FakeEngine
        # reads candidate_tokens_short right after asking for the cost, so set it here.
        engine.candidate_tokens_short = 1 if window >= 2 else 0
        return WORKED[window]

    engine, runs = scripted(cost)
    result = bench.run(engine, sid)

    assert decision(result) == ("NO_DECISION", "work_mismatch", "COMPLETE", None, None, None)
    assert (result.windows, result.fault) == (1, "work_mismatch")
    assert max(window for _, window in runs) == 2
    assert bench.types("att-1") == [
        "AttemptClaimed", "WindowMeasured", "InfrastructureFault", "AttemptDecided"]
    fault = bench.payloads("att-1", "InfrastructureFault")[0]
    assert (fault["code"], fault["stage"]) == ("work_mismatch", "speed")
    assert "candidate generated 127 tokens, stock 128" in fault["detail"]
    assert [w["window"] for w in bench.ledger.explain_attempt("att-1")["windows"]] == [1]
    assert bench.status(sid) == "NO_DECISION"


def test_adapter_start_failed_at_boot_requeues_and_a_later_attempt_runs(bench: Bench) -> None:
    bench.commission()
    sid = bench.admit(FAST_MLP)
    broken = FakeEngine(fail={("speed", "fast_mlp", 0): FaultCode.ADAPTER_START_FAILED})

    result = bench.run(broken, sid, "att-1")

    assert decision(result) == ("NO_DECISION", "adapter_start_failed", "REQUEUE", None, None,
                                None)
    assert (result.windows, result.fault) == (0, "adapter_start_failed")
    assert bench.types("att-1") == ["AttemptClaimed", "InfrastructureFault", "AttemptDecided"]
    assert bench.status(sid) == "QUEUED"
    assert broken.booted == []

    # Nothing ran, so the submission is back in the queue and the next attempt decides it.
    engine, _ = scripted(WORKED.__getitem__)
    engine.tallies = clean_tallies()
    again = bench.run(engine, sid, "att-2")
    assert decision(again)[:3] == ("PASS", "", "COMPLETE")
    sub = bench.ledger.fold.submission(sid)
    assert sub is not None and (sub.status, sub.attempts) == ("QUALIFIED", 2)


class _DroppingLane(FakeLane):
    """A candidate lane whose scoring drops the last sequence (a broken adapter)."""

    def score_tokens(self, sequences: Sequence[Sequence[int]],
                     first_scored: Sequence[int]) -> list[TokenScores]:
        return super().score_tokens(sequences, first_scored)[:-1]


@dataclass
class _DroppingEngine(FakeEngine):
    def boot_lane(self, lane_id: str, delta: DeltaSpec | None = None, *,
                  audit: AuditSpec | None = None, stage: str = "speed") -> FakeLane:
        lane = super().boot_lane(lane_id, delta, audit=audit, stage=stage)
        if stage != "quality" or delta is None:
            return lane
        dropping = _DroppingLane(self, lane_id, delta, audit, stage)
        self.live[self.live.index(lane)] = dropping
        return dropping


def test_a_quality_lane_scoring_too_few_sequences_is_recorded_as_work_mismatch(
    bench: Bench,
) -> None:
    bench.commission()
    sid = bench.admit(FAST_MLP)
    engine = _DroppingEngine(cost_ns=scripted(WORKED.__getitem__)[0].cost_ns)
    engine.tallies = clean_tallies()

    result = bench.run(engine, sid)

    assert (result.windows, result.audit_nodes, result.quality) == (3, 4, False)
    assert result.fault == "work_mismatch"
    assert bench.types("att-1")[-2:] == ["InfrastructureFault", "AttemptDecided"]
    assert "QualityGraded" not in bench.types("att-1")
    fault = bench.payloads("att-1", "InfrastructureFault")[0]
    assert (fault["code"], fault["stage"]) == ("work_mismatch", "quality")
    sequences = len(load_replay_slice().requests)
    assert f"the candidate lane scored {sequences - 1} sequences, not {sequences}" in (
        fault["detail"])
    assert decision(result)[:2] == ("NO_DECISION", "work_mismatch")
    assert engine.live == []


def test_engine_killed_mid_window_keeps_the_measured_windows(bench: Bench) -> None:
    bench.commission()
    killer = registered("engine_kill", window="3")
    sid = bench.admit(killer)
    engine, runs = scripted(WORKED.__getitem__)

    # The digest has a non-default window, so the runner needs the spec itself.
    result = bench.run(engine, sid, candidate=killer)

    assert decision(result) == ("NO_DECISION", "engine_killed", "COMPLETE", None, None, None)
    assert (result.windows, result.fault) == (2, "engine_killed")
    assert ("candidate", 3) not in runs
    explained = bench.ledger.explain_attempt("att-1")
    assert [(w["window"], w["orientation"], w["ratio"]) for w in explained["windows"]] == [
        (1, 1, "0.99"), (2, 1, "0.985")]
    assert explained["fault"]["code"] == "engine_killed"
    assert (explained["verdict"], explained["disposition"]) == ("NO_DECISION", "COMPLETE")
    assert bench.types("att-1")[-2:] == ["InfrastructureFault", "AttemptDecided"]
    assert bench.stages[-2:] == ["fault", "decided"]
    assert bench.status(sid) == "NO_DECISION"


class Crash(BaseException):
    """Stands for the validator process dying: nothing in the runner may catch it."""


def test_a_crash_leaves_a_partial_attempt_that_a_fault_then_concludes(bench: Bench) -> None:
    bench.commission()
    sid = bench.admit(FAST_MLP)

    def cost(window: int) -> int:
        if window == 3:
            raise Crash
        return WORKED[window]

    engine, _ = scripted(cost)
    with pytest.raises(Crash):
        bench.run(engine, sid)

    assert bench.types("att-1") == ["AttemptClaimed", "WindowMeasured", "WindowMeasured"]
    with pytest.raises(Refused) as undecided:
        bench.ledger.conclude("att-1", BLOCK)
    assert undecided.value.context["reason"] == "attempt_not_decidable"
    bench.ledger.fault("att-1", "unproven_infrastructure_failure", "speed", "validator died")
    decided = bench.ledger.conclude("att-1", BLOCK + 5)
    assert (decided.verdict, decided.reason, decided.disposition) == (
        "NO_DECISION", "unproven_infrastructure_failure", "HOLD")
    assert bench.status(sid) == "HELD"


def test_the_audit_runs_with_the_arenas_sealed_bar_and_band(bench: Bench) -> None:
    # Every other test seals the default bar and band; a bfloat16 arena seals its own, and
    # the audit lane must grade against them (the ledger holds the recorded bar only).
    seen: list[AuditSpec] = []

    class Recording(FakeEngine):
        def boot_lane(self, lane_id: str, delta: DeltaSpec | None = None, *,
                      audit: AuditSpec | None = None, stage: str = "speed") -> FakeLane:
            if audit is not None:
                seen.append(audit)
            return super().boot_lane(lane_id, delta, audit=audit, stage=stage)

    bench.commission(audit={"bar": "0.984", "near_miss_band": "0.02", "min_calls": 8})
    sid = bench.admit(FAST_MLP)
    engine = Recording(cost_ns=scripted(WORKED.__getitem__)[0].cost_ns, tallies=clean_tallies())
    bench.run(engine, sid)
    assert [(spec.bar, spec.near_miss_band) for spec in seen] == [("0.984", "0.02")]


def test_a_control_run_resumed_after_its_audit_does_not_audit_again(bench: Bench) -> None:
    # The audit is recorded whole before quality starts: a validator that dies in quality
    # and runs again grades quality only, on fresh lanes, and reaches the same verdict.
    def cost(lane_id: str, delta: DeltaSpec | None, window: int) -> int:
        return STOCK_NS if delta is None or window == 0 else WORKED[window]

    class DiesInQuality(FakeEngine):
        def boot_lane(self, lane_id: str, delta: DeltaSpec | None = None, *,
                      audit: AuditSpec | None = None, stage: str = "speed") -> FakeLane:
            if stage == "quality":
                raise Crash("validator killed before quality")
            return super().boot_lane(lane_id, delta, audit=audit, stage=stage)

    from services.evaluation import control_run_id, run_controls

    bench.commission()
    bench.ledger.register_control(ARENA, {
        "control_id": "honest", "kind": "honest", "delta_digest": FAST_MLP.digest,
        "expected_verdict": "PASS"})
    run = control_run_id("honest", 1_200)
    with pytest.raises(Crash):
        run_controls(bench.ledger, DiesInQuality(cost_ns=cost, tallies=clean_tallies()),
                     arena_id=ARENA, block=1_200)
    state = bench.ledger.fold.attempt(run)
    assert state is not None and state.status == "AUDIT"
    again = FakeEngine(cost_ns=cost, tallies=clean_tallies())
    report = run_controls(bench.ledger, again, arena_id=ARENA, block=1_200)
    assert [stage for _, _, stage in again.booted] == ["quality"] * 3
    assert [(r["control_id"], r["verdict"], r["outcome"]) for r in report] == [
        ("honest", "PASS", "as_expected")]


# --- FakeEngine: calibration observation ---------------------------------------------------


def test_calibration_observation_audits_after_a_speed_fail_and_never_grades_quality(
        bench: Bench) -> None:
    bench.commission(audit_control_delta_digests=[WRONG_MLP.digest])
    slower = 1_100_000_000
    failing = bench.admit(WRONG_MLP, "c1", index=0)
    clean = bench.admit(WRONG_MLP, "c2", index=1)

    engine, runs = scripted(lambda window: slower)
    engine.tallies = [NodeTally(node, 0, calls=32, violations=32, min_score=0.81)
                      for node in NODES]
    result = bench.run(engine, failing, "cal-1", plan="calibration_observation")
    assert sorted({window for _, window in runs}) == [1, 2, 3, 4]

    # All four windows run (no futility margin), speed FAILs at window 4, the audit still
    # runs and its violations decide; the speed numbers stay those of the deciding look.
    assert decision(result) == ("FAIL", "slot_audit_failed", "COMPLETE", "0.909091",
                                "0.013075", 4)
    assert (result.windows, result.audit_nodes, result.quality) == (4, 4, False)
    assert bench.types("cal-1") == [
        "AttemptClaimed", *["WindowMeasured"] * 4, *["AuditNodeGraded"] * 4, "AttemptDecided"]
    assert "quality" not in [stage for _, _, stage in engine.booted]

    engine, _ = scripted(lambda window: slower)
    engine.tallies = clean_tallies()
    observed = bench.run(engine, clean, "cal-2", plan="calibration_observation")
    assert decision(observed) == ("FAIL", "candidate_slower", "COMPLETE", "0.909091",
                                  "0.013075", 4)
    assert (observed.audit_nodes, observed.quality) == (4, False)
    assert "QualityGraded" not in bench.types("cal-2")
    assert bench.stages.count("quality") == 0


def test_calibration_observation_of_an_unlisted_delta_is_refused_before_anything_runs(
        bench: Bench) -> None:
    bench.commission(audit_control_delta_digests=[WRONG_MLP.digest])
    sid = bench.admit(FAST_MLP)
    head = bench.ledger.store.head().position
    engine, runs = scripted(WORKED.__getitem__)

    with pytest.raises(Refused) as refused:
        bench.run(engine, sid, plan="calibration_observation")

    assert refused.value.context["reason"] == "calibration_observation_not_listed"
    assert bench.ledger.store.head().position == head
    assert (engine.booted, runs) == ([], [])


def test_an_unknown_submission_or_delta_is_refused_before_anything_runs(bench: Bench) -> None:
    bench.commission()
    engine = FakeEngine()
    with pytest.raises(NotFound):
        bench.run(engine, "0" * 64)
    unregistered = bench.admit(DeltaSpec("file", "build_mlp", {}, "/nowhere.py", "ab" * 32))
    head = bench.ledger.store.head().position
    with pytest.raises(NotFound, match="--delta-file"):
        bench.run(engine, unregistered)
    assert bench.ledger.store.head().position == head
    assert engine.booted == []


def test_run_controls_runs_each_control_once_per_block(bench: Bench) -> None:
    from services.evaluation import run_controls

    bench.commission()
    bench.ledger.register_control(ARENA, {
        "control_id": "honest", "kind": "honest", "delta_digest": FAST_MLP.digest,
        "expected_verdict": "FAIL", "expected_reason": "speed_threshold_not_met"})
    first = run_controls(bench.ledger, FakeEngine(), arena_id=ARENA, block=1_200)
    assert [(r["verdict"], r["reason"], r["outcome"]) for r in first] == [
        ("FAIL", "speed_threshold_not_met", "as_expected")]
    head = bench.ledger.store.head().position

    # Running it again at the same block (an operator retrying) reports the same runs and
    # appends nothing; it must not fail with a concurrency conflict that no retry can clear.
    engine = FakeEngine()
    again = run_controls(bench.ledger, engine, arena_id=ARENA, block=1_200)
    assert again == first
    assert bench.ledger.store.head().position == head
    assert engine.booted == []


def _register_honest(bench: Bench, control_id: str, delta: DeltaSpec) -> None:
    # The FakeEngine's flat costs make every delta exactly as fast as stock: a FAIL.
    bench.ledger.register_control(ARENA, {
        "control_id": control_id, "kind": "honest", "delta_digest": delta.digest,
        "expected_verdict": "FAIL", "expected_reason": "speed_threshold_not_met"})


def _control_runs(bench: Bench) -> list[tuple[str, int, int, int]]:
    """Returns (credit id, block, event index, subindex) of every control run, in order."""
    credits, arrivals = [], []
    for record in bench.ledger.store.read_all():
        if record.type == "CreditGranted":
            credits.append(str(record.payload["credit_id"]))
        elif record.type == "SubmissionArrived" and (
                record.payload["miner_hotkey"] == CONTROL_HOTKEY):
            arrival = record.payload["arrival"]
            arrivals.append((arrival["block"], arrival["event_index"],
                             arrival["event_subindex"]))
    assert len(credits) == len(arrivals)
    return [(credit, *arrival) for credit, arrival in zip(credits, arrivals, strict=True)]


def test_control_runs_are_named_and_ordered_as_documented(bench: Bench) -> None:
    from services.evaluation import run_controls

    bench.commission()
    _register_honest(bench, "beta", FAST_MLP)
    _register_honest(bench, "alpha", registered("faithful"))
    run_controls(bench.ledger, FakeEngine(), arena_id=ARENA, block=1_200)
    # Control-id order: the arrival's subindex is the control's index, event index 0.
    assert _control_runs(bench) == [("ctl-alpha-1200", 1_200, 0, 0),
                                    ("ctl-beta-1200", 1_200, 0, 1)]
    assert bench.types("ctl-alpha-1200")[0] == "AttemptClaimed"


def test_a_long_control_id_runs_at_every_block_under_its_own_id(bench: Bench) -> None:
    from services.evaluation import run_controls

    bench.commission()
    # Ids of 64 characters (the most an id may have) that differ only in the last one:
    # "ctl-<id>-<block>" cut to 64 would drop the block (each control would run at its
    # first block only) and that last character (the two would share one run).
    first, second = "c" * 63 + "1", "c" * 63 + "2"
    _register_honest(bench, first, FAST_MLP)
    _register_honest(bench, second, registered("faithful"))
    for runs_so_far, block in ((2, 1_200), (4, 1_300)):
        report = run_controls(bench.ledger, FakeEngine(), arena_id=ARENA, block=block)
        assert [r["outcome"] for r in report] == ["as_expected"] * runs_so_far
    runs = _control_runs(bench)
    assert [(block, subindex) for _, block, _, subindex in runs] == [
        (1_200, 0), (1_200, 1), (1_300, 0), (1_300, 1)]
    ids = [run for run, *_ in runs]
    assert len(set(ids)) == 4 and all(len(run) <= 64 for run in ids)
    assert all(run.startswith("ctl-" + "c" * 20) for run in ids)
    assert [run.endswith(f"-{block}") for run, block, *_ in runs] == [True] * 4


@pytest.mark.parametrize(("control_id", "block"), [
    ("a", 0), ("x" * 43, 2**53 - 1), ("x" * 44, 2**53 - 1), ("z" * 64, 0),
    ("z" * 64, 2**53 - 1)])
def test_a_control_run_id_is_a_valid_id_that_keeps_the_control_and_block(
    control_id: str, block: int,
) -> None:
    from services.evaluation import control_run_id
    from vocabulary.fields import is_local_id

    run = control_run_id(control_id, block)
    plain = f"ctl-{control_id}-{block}"
    assert is_local_id(run) and len(run) <= 64
    if len(plain) <= 64:
        assert run == plain
    else:
        tag = hashlib.sha256(control_id.encode()).hexdigest()[:12]
        assert run.endswith(f"-{tag}-{block}") and len(run) == 64
        assert run.startswith("ctl-" + control_id[:30])


@pytest.mark.parametrize(("inputs", "path", "words"), [
    ({"validator_hotkey": ""}, "$.payload.validator_hotkey", "got ''"),
    ({"validator_hotkey": "a b"}, "$.payload.validator_hotkey", "got 'a b'"),
    ({"block": -1}, "$.payload.claimed_block", "greater than or equal to 0"),
    ({"block": 2**53}, "$.payload.claimed_block", "less than or equal to"),
    ({"block": True}, "$.payload.claimed_block", "valid integer"),
])
def test_run_controls_refuses_bad_input_before_granting_anything(
        bench: Bench, inputs: dict[str, Any], path: str, words: str) -> None:
    from services.evaluation import run_controls

    bench.commission()
    _register_honest(bench, "honest", FAST_MLP)
    head = bench.ledger.store.head().position
    engine = FakeEngine()

    # The claim refused these after the run's credit was granted and its submission
    # admitted: an exit 1 that had written 4 events and left the control pending.
    with pytest.raises(SchemaError) as refused:
        run_controls(bench.ledger, engine, arena_id=ARENA, **{"block": 1_200, **inputs})

    assert refused.value.context["path"] == path
    assert words in refused.value.message
    assert bench.ledger.store.head().position == head
    assert engine.booted == []
    assert [r.get("verdict") for r in bench.ledger.controls(ARENA)] == [None]
    # The same run with good input runs from the start: nothing was half done.
    report = run_controls(bench.ledger, FakeEngine(), arena_id=ARENA, block=1_200)
    assert [r["outcome"] for r in report] == ["as_expected"]
    assert _control_runs(bench) == [("ctl-honest-1200", 1_200, 0, 0)]


def test_run_controls_refuses_a_control_whose_delta_is_unknown_before_any_append(
        bench: Bench) -> None:
    from services.evaluation import run_controls

    bench.commission()
    _register_honest(bench, "alpha", FAST_MLP)
    _register_honest(bench, "beta", DeltaSpec("file", "build_mlp", {}, "/nowhere.py", "ab" * 32))
    head = bench.ledger.store.head().position
    engine = FakeEngine()

    with pytest.raises(NotFound, match="control 'beta' names delta abab") as missing:
        run_controls(bench.ledger, engine, arena_id=ARENA, block=1_200)

    assert missing.value.context["control_id"] == "beta"
    assert bench.ledger.store.head().position == head  # alpha did not run either
    assert engine.booted == []


@pytest.mark.parametrize(("inputs", "path"), [
    ({"validator_hotkey": "a b"}, "$.payload.validator_hotkey"),
    ({"pair_id": "Pair 0"}, "$.payload.pair_id"),
    ({"plan": "fast"}, "$.payload.plan"),
    ({"attempt_id": "Bad Attempt"}, "$.payload.attempt_id"),
    ({"block": -1}, "$.payload.claimed_block"),
])
def test_evaluate_refuses_bad_claim_input_before_anything_runs(
        bench: Bench, inputs: dict[str, Any], path: str) -> None:
    bench.commission()
    sid = bench.admit(FAST_MLP)
    head = bench.ledger.store.head().position
    engine = FakeEngine()
    arguments = {"submission_id": sid, "attempt_id": "att-1", "block": BLOCK, **inputs}

    with pytest.raises(SchemaError) as refused:
        evaluate(bench.ledger, engine, **arguments)

    assert refused.value.context["path"] == path
    assert bench.ledger.store.head().position == head
    assert engine.booted == []
    assert bench.status(sid) == "QUEUED"


def test_a_passing_control_run_earns_no_reward_and_does_not_raise_the_bar(
        bench: Bench) -> None:
    from machines.settlement_rules import settlement_payload
    from services.evaluation import run_controls

    bench.commission()
    bench.ledger.set_emission_policy(7_200, "5Burn", "5Validator")
    bench.ledger.register_control(ARENA, {
        "control_id": "honest", "kind": "honest", "delta_digest": FAST_MLP.digest,
        "expected_verdict": "PASS"})
    engine, _ = scripted(WORKED.__getitem__)
    engine.tallies = clean_tallies()
    report = run_controls(bench.ledger, engine, arena_id=ARENA, block=1_005)
    assert [(r["verdict"], r["outcome"]) for r in report] == [("PASS", "as_expected")]
    # A miner arriving after the control run passes with the very same speedup.
    sid = bench.admit(FAST_MLP, "miner", block=1_006)
    engine, _ = scripted(WORKED.__getitem__)
    engine.tallies = clean_tallies()
    assert decision(bench.run(engine, sid, "miner-1"))[:4] == ("PASS", "", "COMPLETE",
                                                               "1.019129")

    # Control runs are the validator's own checks, paid by credits: the arena's pool goes
    # to the miner, not to CONTROL_HOTKEY, and the control's PASS is not the bar to beat.
    payload = settlement_payload(bench.ledger.weights(2_000))
    assert [c["hotkey"] for c in payload["claims"]] == ["5Miner"]
    assert payload["weights_ppm"] == {"5Burn": 500_000, "5Miner": 500_000}


# --- the real CPU reference engine ------------------------------------------------------------

FEE = 1_000
FAITHFUL_FILE = '''\
"""A faithful MLP: the stock math straight from the stock weights."""
import torch
import torch.nn.functional as F

ARENA_DELTA_ENTRY_POINT = "make_candidate"


class Faithful(torch.nn.Module):
    def __init__(self, stock):
        super().__init__()
        self.gate = stock.gate_proj.weight
        self.up = stock.up_proj.weight
        self.down = stock.down_proj.weight

    def forward(self, x, *args, **kwargs):
        return F.linear(F.silu(F.linear(x, self.gate)) * F.linear(x, self.up), self.down)


def make_candidate(stock):
    return Faithful(stock)
'''
#: (control delta, kind, expected verdict, expected reason)
REAL_CONTROLS = (("wrong_mlp", "wrong_mlp", "FAIL", "slot_audit_failed"),
                 ("skip_mlp", "skip_mlp", "FAIL", "slot_audit_failed"),
                 ("engine_kill", "engine_kill", "NO_DECISION", "engine_killed"))


@dataclass
class Reference:
    """Holds the module's real engine, its SQLite ledger and the file delta."""

    ledger: ArenaLedger
    engine: Engine
    delta_file: Path


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Reference]:
    pytest.importorskip("torch")
    from services.demo import demo_commission
    from services.evaluation import make_engine

    root = tmp_path_factory.mktemp("runner-real")
    delta_file = root / "faithful_delta.py"
    delta_file.write_text(FAITHFUL_FILE)
    url = f"sqlite:///{root / 'ledger.db'}"
    migrate.upgrade(url)
    commission = demo_commission(ARENA, 100)
    commission["fee_rao"] = FEE
    policy = commission["policy"]
    # The demo seals its noise from a calibration under v2; this bench pins the v1 policy the
    # demo sealed before, so these expectations do not hang on a calibration's outcome.
    del policy["noise_guard_alpha"]
    policy.update({"policy_version": "paired-windows.v1", "window_noise": "0.01",
                   "boot_noise": "0.005"})
    # The file delta is listed too, so its calibration observation always runs the audit.
    policy["audit_control_delta_digests"] = sorted(
        [registered("wrong_mlp").digest, registered("skip_mlp").digest,
         load_file_delta(delta_file).digest])
    engine = make_engine("torch-reference", engine_config={"cost_clock": "thread_time"})
    with ArenaLedger(url, actor="runner-real") as ledger:
        ledger.commission(commission)
        for name, kind, verdict, reason in REAL_CONTROLS:
            ledger.register_control(ARENA, {
                "control_id": name.replace("_", "-"), "kind": kind,
                "delta_digest": registered(name).digest, "expected_verdict": verdict,
                "expected_reason": reason})
        try:
            yield Reference(ledger, engine, delta_file)
        finally:
            engine.shutdown()


@pytest.mark.slow
def test_run_controls_on_the_real_engine_meet_their_expectations(reference: Reference) -> None:
    from services.evaluation import run_controls

    ledger = reference.ledger
    rows = run_controls(ledger, reference.engine, arena_id=ARENA, block=200)

    observed = {r["control_id"]: (r["verdict"], r["reason"], r["outcome"]) for r in rows}
    assert observed == {"wrong-mlp": ("FAIL", "slot_audit_failed", "as_expected"),
                        "skip-mlp": ("FAIL", "slot_audit_failed", "as_expected"),
                        "engine-kill": ("NO_DECISION", "engine_killed", "as_expected")}
    for name in ("wrong-mlp", "skip-mlp"):
        attempt = ledger.explain_attempt(f"ctl-{name}-200")
        assert attempt["plan"] == "calibration_observation"
        assert attempt["quality"] is None
        audited = [r.payload for r in ledger.store.read_stream(f"attempt-ctl-{name}-200")
                   if r.type == "AuditNodeGraded"]
        assert [(a["node"], a["calls"], a["violations"]) for a in audited] == [
            (node, 32, 32) for node in NODES]
    killed = ledger.explain_attempt("ctl-engine-kill-200")
    assert killed["plan"] == "normal"
    assert [w["window"] for w in killed["windows"]] == [1]
    assert (killed["fault"]["code"], killed["fault"]["stage"]) == ("engine_killed", "speed")
    # Each run is the control hotkey's submission, paid by a credit: not fee revenue.
    runs = ledger.submissions(ARENA, hotkey=CONTROL_HOTKEY)
    assert len(runs) == 3
    fees = ledger.fees(ARENA)["total"]
    assert (fees["consumed_rao"], fees["credits_spent_rao"]) == (0, 3 * FEE)


@pytest.mark.slow
def test_a_file_delta_is_named_by_its_sha256_and_audits_clean(reference: Reference) -> None:
    ledger, path = reference.ledger, reference.delta_file
    sha256 = hashlib.sha256(path.read_bytes()).hexdigest()
    spec = resolve_delta(sha256, str(path))
    assert (spec.kind, spec.name, spec.digest) == ("file", "make_candidate", sha256)
    with pytest.raises(InvalidInput, match="digest"):
        resolve_delta("ab" * 32, str(path))

    arrival = {"arena_id": ARENA, "miner_hotkey": "5FileMiner", "content_hash": sha256,
               "delta_digest": sha256, "target": "model.layers.*.mlp", "payment_ref": "pay-f1",
               "arrival": {"block": 300, "event_index": 0, "event_subindex": 0}}
    outcome = ledger.intake(arrival, payment_amount_rao=FEE)
    assert outcome.admitted
    result = evaluate(ledger, reference.engine, submission_id=outcome.submission_id,
                      attempt_id="file-1", block=310, plan="calibration_observation",
                      candidate=spec)

    audited = [r.payload for r in ledger.store.read_stream("attempt-file-1")
               if r.type == "AuditNodeGraded"]
    assert [(a["node"], a["calls"], a["violations"], a["near_misses"], a["uncomparable"])
            for a in audited] == [(node, 32, 0, 0, 0) for node in NODES]
    assert {a["min_score"] for a in audited} == {"1"}
    assert result.fault is None and result.audit_nodes == 4
    # Whether it is faster than stock is CPU noise; what follows from each case is not.
    if result.decision["verdict"] == "PASS":
        assert result.quality and result.decision["reason"] == ""
    else:
        assert not result.quality
        assert result.decision["verdict"] == "FAIL"
        assert result.decision["reason"] in ("futility", "candidate_slower",
                                             "speed_threshold_not_met")


# The runner's edges, against a real ledger: a mismatched window stops speed as work_mismatch, the
# given block and pair reach the claim and the decision, control runs check, pay for and resume
# their controls, and make_engine refuses what the commission does not seal.


@pytest.fixture
def rules_bench(store_url: str) -> Iterator[Bench]:
    migrate.upgrade(store_url)
    with ArenaLedger(store_url, actor="runner-rules") as ledger:
        bench = Bench(ledger)
        bench.commission()
        yield bench


def _windows(bench: Bench, attempt_id: str) -> list[int]:
    return [int(p["window"]) for p in bench.payloads(attempt_id, "WindowMeasured")]


def test_a_mismatched_window_that_reaches_the_ledger_stops_speed_as_work_mismatch(
    rules_bench: Bench, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The bridge refuses a token mismatch before yielding; this stands for a bridge that let
    # one through, which the ledger must still never take as a speed signal (docs/machines.md).
    payload_of = engine_bridge.speed.window_payload

    def short_in_window_2(window: int, *args: Any, **kwargs: Any) -> dict[str, Any]:
        payload = payload_of(window, *args, **kwargs)
        if window == 2:
            payload["candidate_output_tokens"] = payload["stock_output_tokens"] - 1
        return payload

    monkeypatch.setattr(engine_bridge.speed, "window_payload", short_in_window_2)
    sid = rules_bench.admit(FAST_MLP)
    engine, runs = scripted(WORKED.__getitem__)

    result = rules_bench.run(engine, sid)

    assert decision(result) == ("NO_DECISION", "work_mismatch", "COMPLETE", None, None, None)
    assert (result.windows, result.fault) == (1, "work_mismatch")
    assert max(window for _, window in runs) == 2  # window 3 is never measured
    assert rules_bench.types("att-1") == [
        "AttemptClaimed",
        "WindowMeasured",
        "InfrastructureFault",
        "AttemptDecided",
    ]
    assert _windows(rules_bench, "att-1") == [1]
    # Progress reports what the ledger holds: window 1, then the fault, then the decision.
    assert rules_bench.stages == ["window", "fault", "decided"]
    assert engine.live == []


def test_progress_reports_a_fault_with_its_code_and_stage(rules_bench: Bench) -> None:
    sid = rules_bench.admit(FAST_MLP)
    engine, _ = scripted(WORKED.__getitem__)
    engine.tallies = clean_tallies()
    engine.fail = {("audit", "stock", 0): FaultCode.ADAPTER_TIMEOUT}
    seen: list[tuple[str, dict[str, Any]]] = []

    evaluate(
        rules_bench.ledger,
        engine,
        submission_id=sid,
        attempt_id="att-1",
        block=BLOCK,
        progress=lambda stage, info: seen.append((stage, dict(info))),
    )

    faults = [info for stage, info in seen if stage == "fault"]
    assert faults == [{"code": "adapter_timeout", "stage": "audit"}]
    assert [stage for stage, _ in seen][-2:] == ["fault", "decided"]


def test_the_given_block_is_the_claims_and_the_decisions_block(rules_bench: Bench) -> None:
    sid = rules_bench.admit(FAST_MLP)
    engine, _ = scripted(WORKED.__getitem__)
    engine.tallies = clean_tallies()

    evaluate(rules_bench.ledger, engine, submission_id=sid, attempt_id="att-1", block=1_234)

    [claimed] = rules_bench.payloads("att-1", "AttemptClaimed")
    [decided] = rules_bench.payloads("att-1", "AttemptDecided")
    assert (claimed["claimed_block"], decided["decided_block"]) == (1_234, 1_234)


def test_a_resumed_control_run_holding_a_fault_is_only_concluded(rules_bench: Bench) -> None:
    ledger = rules_bench.ledger
    ledger.register_control(
        ARENA,
        {
            "control_id": "honest",
            "kind": "honest",
            "delta_digest": FAST_MLP.digest,
            "expected_verdict": "FAIL",
            "expected_reason": "speed_threshold_not_met",
        },
    )
    run = control_run_id("honest", 1_200)

    crash_controls_in_window_3(ledger)
    # The operator records what happened (docs/engine.md, "When the validator itself dies").
    ledger.fault(run, "engine_killed", "speed", "lane process killed in window 3")

    engine = FakeEngine()
    report = run_controls(ledger, engine, arena_id=ARENA, block=1_200)

    assert engine.booted == []
    assert _windows(rules_bench, run) == [1, 2]
    assert rules_bench.types(run)[-2:] == ["InfrastructureFault", "AttemptDecided"]
    assert [(r["control_id"], r["verdict"], r["reason"]) for r in report] == [
        ("honest", "NO_DECISION", "engine_killed")
    ]


def test_evaluate_claims_with_the_given_pair_and_validator(rules_bench: Bench) -> None:
    sid = rules_bench.admit(FAST_MLP)
    engine, _ = scripted(WORKED.__getitem__)
    engine.tallies = clean_tallies()

    evaluate(
        rules_bench.ledger,
        engine,
        submission_id=sid,
        attempt_id="att-1",
        block=BLOCK,
        pair_id="pair-7",
        validator_hotkey="5Checker",
    )

    [claimed] = rules_bench.payloads("att-1", "AttemptClaimed")
    assert (claimed["pair_id"], claimed["validator_hotkey"], claimed["plan"]) == (
        "pair-7",
        "5Checker",
        "normal",
    )


def _register(ledger: ArenaLedger, control_id: str, delta: DeltaSpec) -> None:
    # FakeEngine's flat costs make every delta exactly as fast as stock: a speed FAIL.
    ledger.register_control(
        ARENA,
        {
            "control_id": control_id,
            "kind": "honest",
            "delta_digest": delta.digest,
            "expected_verdict": "FAIL",
            "expected_reason": "speed_threshold_not_met",
        },
    )


def test_run_controls_claims_with_its_validator_and_reports_progress(rules_bench: Bench) -> None:
    ledger = rules_bench.ledger
    _register(ledger, "honest", FAST_MLP)
    seen: list[tuple[str, dict[str, Any]]] = []

    run_controls(
        ledger,
        FakeEngine(),
        arena_id=ARENA,
        block=1_200,
        validator_hotkey="5Ctl",
        progress=lambda stage, info: seen.append((stage, dict(info))),
    )

    [claimed] = rules_bench.payloads(control_run_id("honest", 1_200), "AttemptClaimed")
    assert claimed["validator_hotkey"] == "5Ctl"
    assert [stage for stage, _ in seen] == ["control", *["window"] * 4, "decided"]
    assert seen[0][1] == {"control_id": "honest", "kind": "honest"}


def test_a_resumed_control_run_reports_where_it_resumed_and_its_progress(
    rules_bench: Bench,
) -> None:
    ledger = rules_bench.ledger
    _register(ledger, "honest", FAST_MLP)

    crash_controls_in_window_3(ledger)
    seen: list[tuple[str, dict[str, Any]]] = []

    run_controls(
        ledger,
        FakeEngine(),
        arena_id=ARENA,
        block=1_200,
        progress=lambda stage, info: seen.append((stage, dict(info))),
    )

    assert seen[0] == (
        "control",
        {"control_id": "honest", "kind": "honest", "resumed_from": "SPEED"},
    )
    assert [(stage, info.get("window")) for stage, info in seen[1:]] == [
        ("window", 3),
        ("window", 4),
        ("decided", None),
    ]


def test_run_controls_refuses_an_arena_that_is_not_commissioned(rules_bench: Bench) -> None:
    head = rules_bench.ledger.store.head().position
    engine = FakeEngine()
    with pytest.raises(NotFound) as missing:
        run_controls(rules_bench.ledger, engine, arena_id="no-such-arena", block=1_200)
    assert missing.value.context["arena_id"] == "no-such-arena"
    assert rules_bench.ledger.store.head().position == head
    assert engine.booted == []


@dataclass(eq=False)
class _Refusing(FakeEngine):
    """An engine that refuses one delta as a candidate, as an in-process engine refuses an
    untrusted file delta, and records every candidate it was asked about."""

    refused: str = ""
    checked: list[str] = field(default_factory=list)

    def check_candidate(self, delta: DeltaSpec) -> None:
        self.checked.append(delta.name)
        if delta.name == self.refused:
            raise InvalidInput(f"this engine does not run {delta.name}", delta=delta.name)


def test_run_controls_has_the_engine_check_every_control_before_any_append(
    rules_bench: Bench,
) -> None:
    ledger = rules_bench.ledger
    _register(ledger, "alpha", FAST_MLP)
    _register(ledger, "beta", registered("faithful"))
    head = ledger.store.head().position
    engine = _Refusing(refused="faithful")

    with pytest.raises(InvalidInput, match="does not run faithful"):
        run_controls(ledger, engine, arena_id=ARENA, block=1_200)

    # alpha comes first and its delta is fine, but nothing of it may run or be written.
    assert ledger.store.head().position == head
    assert engine.booted == []


def test_make_engine_refuses_other_runtimes_and_clocks_before_anything_is_built(
    tmp_path: Path,
) -> None:
    for runtime in ("sglang", "torch", "fake"):
        with pytest.raises(InvalidInput, match="torch-reference only"):
            make_engine(runtime, model_dir=tmp_path / runtime)
        assert not (tmp_path / runtime).exists()
    with pytest.raises(InvalidInput) as clock:
        make_engine(
            "torch-reference",
            model_dir=tmp_path / "model",
            engine_config={"cost_clock": "process_time"},
        )
    assert clock.value.context["path"] == "$.engine.engine_config.cost_clock"


def test_make_engine_uses_wall_time_unless_the_commission_seals_thread_time(tmp_path: Path) -> None:
    clocks = []
    for config in (None, {}, {"cost_clock": "perf_counter"}, {"cost_clock": "thread_time"}):
        engine = make_engine("torch-reference", model_dir=tmp_path, engine_config=config)
        try:
            clocks.append(getattr(engine, "clock", None))
        finally:
            engine.shutdown()
    assert clocks == ["perf_counter", "perf_counter", "perf_counter", "thread_time"]


def test_the_model_folder_is_the_configured_one_else_the_user_cache(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("ARENA_LEDGER_MODEL_DIR", str(tmp_path / "models"))
    assert default_model_dir() == tmp_path / "models"
    monkeypatch.delenv("ARENA_LEDGER_MODEL_DIR")
    monkeypatch.setenv("HOME", str(tmp_path))
    assert default_model_dir() == tmp_path / ".cache" / "arena-ledger" / "reference-model"


def test_run_controls_checks_only_the_controls_it_is_about_to_run(rules_bench: Bench) -> None:
    ledger = rules_bench.ledger
    _register(ledger, "alpha", FAST_MLP)
    first = run_controls(ledger, _Refusing(), arena_id=ARENA, block=1_200)
    head = ledger.store.head().position

    # alpha already ran at this block: an engine that now refuses its delta is not asked.
    engine = _Refusing(refused="fast_mlp")
    assert run_controls(ledger, engine, arena_id=ARENA, block=1_200) == first
    assert (engine.checked, engine.booted) == ([], [])
    assert ledger.store.head().position == head


def test_a_control_run_is_paid_by_a_credit_of_the_arenas_fee(rules_bench: Bench) -> None:
    ledger = rules_bench.ledger
    document = samples.commissioned("fee-arena", fee_rao=2_500, sealed=samples.policy())
    ledger.commission(document.model_dump(mode="json", exclude_unset=True))
    ledger.register_control(
        "fee-arena",
        {
            "control_id": "honest",
            "kind": "honest",
            "delta_digest": FAST_MLP.digest,
            "expected_verdict": "FAIL",
            "expected_reason": "speed_threshold_not_met",
        },
    )

    run_controls(ledger, FakeEngine(), arena_id="fee-arena", block=1_200)

    run = control_run_id("honest", 1_200)
    [granted] = [
        r.payload for r in ledger.store.read_stream(f"credit-{run}") if r.type == "CreditGranted"
    ]
    assert (granted["hotkey"], granted["amount_rao"]) == (CONTROL_HOTKEY, 2_500)


def test_a_control_whose_intake_is_rejected_is_not_evaluated(rules_bench: Bench) -> None:
    ledger = rules_bench.ledger
    _register(ledger, "honest", FAST_MLP)
    ledger.append([(f"arena-{ARENA}", ArenaRetired(block=1_100, reason="closed"))])
    engine = FakeEngine()

    report = run_controls(ledger, engine, arena_id=ARENA, block=1_200)

    assert ledger.fold.attempt(control_run_id("honest", 1_200)) is None
    assert engine.booted == []
    assert [r.get("verdict") for r in report] == [None]


def test_a_resumed_control_run_needs_the_engine_to_accept_its_delta(rules_bench: Bench) -> None:
    ledger = rules_bench.ledger
    _register(ledger, "honest", FAST_MLP)

    crash_controls_in_window_3(ledger)
    head = ledger.store.head().position
    engine = _Refusing(refused="fast_mlp")

    with pytest.raises(InvalidInput, match="does not run fast_mlp"):
        run_controls(ledger, engine, arena_id=ARENA, block=1_200)

    assert (engine.checked, engine.booted) == (["fast_mlp"], [])
    assert ledger.store.head().position == head

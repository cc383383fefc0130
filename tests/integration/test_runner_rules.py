"""Pins rules of services.evaluation that the main runner tests leave loose.

Found by a hand-made mutation review of services/evaluation.py: each test here fails on one
small change to the module that the other tests let through. They drive the runner with
``FakeEngine`` on a ``ManualClock`` against a real ledger (SQLite and PostgreSQL) and pin,
from DOMAIN §4-§6 and docs/engine.md ("The runner"):

* a window whose arms' token counts differ never becomes a speed signal, even when it reaches
  the ledger (``ArenaLedger.record`` turns it into ``work_mismatch``): speed stops there, the
  result names the fault and counts only the windows recorded, and progress reports what the
  ledger holds (a ``fault``, not a ``window``);
* progress reports a fault with its code and stage (what ``arena-ledger evaluate`` prints);
* the block an evaluation is given is both the claim's and the decision's block, and the
  claim carries the given pair and validator;
* ``run_controls`` claims with its validator, reports ``control`` then each stage to its
  progress, and a resumed run reports ``resumed_from`` and then its own windows;
* a resumed control run whose evidence already holds a fault is only concluded, and one whose
  delta the engine now refuses raises before anything boots or is appended;
* ``run_controls`` refuses an arena that is not commissioned, has the engine check every
  control it is about to run (and only those) before its first append, pays each run with a
  credit of the arena's fee, and does not evaluate a control whose intake was rejected;
* ``make_engine`` refuses runtimes other than torch-reference and unknown cost clocks, uses
  wall time unless the commission seals ``thread_time``, and ``default_model_dir`` is
  ``$ARENA_LEDGER_MODEL_DIR`` or the user's cache.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from test_bridge_recovery import crash_controls_in_window_3  # same directory
from test_runner import (  # same directory, prepend import mode
    ARENA,
    BLOCK,
    FAST_MLP,
    WORKED,
    Bench,
    clean_tallies,
    decision,
    scripted,
)

import engine_bridge.speed
from engine_bridge.deltas import DeltaSpec, registered
from engine_bridge.protocol import FakeEngine, FaultCode
from ledger import migrate
from machines import samples
from services.arena_ledger import ArenaLedger
from services.evaluation import (
    CONTROL_HOTKEY,
    control_run_id,
    default_model_dir,
    evaluate,
    make_engine,
    run_controls,
)
from vocabulary.errors import InvalidInput, NotFound
from vocabulary.events import ArenaRetired


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
    # one through, which the ledger must still never take as a speed signal (DOMAIN §6).
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

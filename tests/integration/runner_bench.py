"""Builds the runner's test bench: a migrated ledger with an arena commissioned, scripted
costs, and the short-hands the runner and recovery suites share.

Those suites drive ``services.evaluation`` with ``FakeEngine`` on a ``ManualClock``, so
their speed decisions are exact.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from engine_bridge.deltas import DeltaSpec, registered
from engine_bridge.hooks import NodeTally
from engine_bridge.protocol import Engine, FakeEngine
from machines import samples
from services.arena_ledger import ArenaLedger
from services.evaluation import (
    EvaluationResult,
    evaluate,
    run_controls,
)

ARENA = "runner-arena"
BLOCK = 1_010
STOCK_NS = 1_000_000_000
#: Candidate costs of the docs/machines.md worked example, by window (window 4 must never run).
WORKED = {w: c for w, (_, c) in enumerate(samples.WORKED_EXAMPLE_COSTS, start=1)}
NODES = tuple(f"model.layers.{i}.mlp" for i in range(4))
FAST_MLP = registered("fast_mlp")


# --- a ledger and a scripted engine ------------------------------------------------------


@dataclass
class Bench:
    """Holds one migrated ledger and the short-hands the FakeEngine tests repeat."""

    ledger: ArenaLedger
    stages: list[str] = field(default_factory=list)
    attempt_id: str = ""

    def commission(self, **policy: Any) -> None:
        sealed = samples.policy(**policy)
        document = samples.commissioned(ARENA, fee_rao=0, sealed=sealed)
        self.ledger.commission(document.model_dump(mode="json", exclude_unset=True))

    def admit(self, delta: DeltaSpec, content: str = "c1", index: int = 0,
              block: int = 1_000) -> str:
        arrival = {"arena_id": ARENA, "miner_hotkey": "5Miner",
                   "content_hash": samples.hex64(content), "delta_digest": delta.digest,
                   "target": "model.layers.*.mlp",
                   "arrival": {"block": block, "event_index": index, "event_subindex": 0}}
        outcome = self.ledger.intake(arrival)
        assert outcome.admitted, outcome
        return outcome.submission_id

    def run(self, engine: Engine, sid: str, attempt_id: str = "att-1", *,
            plan: str = "normal", candidate: DeltaSpec | None = None) -> EvaluationResult:
        self.attempt_id = attempt_id
        return evaluate(self.ledger, engine, submission_id=sid, attempt_id=attempt_id,
                        block=BLOCK, plan=plan, candidate=candidate, progress=self.progress)

    def progress(self, stage: str, info: dict[str, Any]) -> None:
        self.stages.append(stage)
        if stage == "window":
            # Appended as measured: the ledger holds this window when the runner reports it.
            recorded = [p["window"] for p in self.payloads(self.attempt_id, "WindowMeasured")]
            assert recorded[-1] == info["window"], (recorded, info)
        if stage == "fault":  # likewise the fault: recorded before it is reported
            faults = self.payloads(self.attempt_id, "InfrastructureFault")
            assert faults and faults[-1]["code"] == info["code"], (faults, info)

    def types(self, attempt_id: str) -> list[str]:
        return [r.type for r in self.ledger.store.read_stream(f"attempt-{attempt_id}")]

    def payloads(self, attempt_id: str, event_type: str) -> list[dict[str, Any]]:
        return [dict(r.payload) for r in self.ledger.store.read_stream(f"attempt-{attempt_id}")
                if r.type == event_type]

    def status(self, sid: str) -> str:
        sub = self.ledger.fold.submission(sid)
        assert sub is not None
        return str(sub.status)


def clean_tallies(calls: int = 32) -> list[NodeTally]:
    return [NodeTally(node, 0, calls=calls, min_score=1.0) for node in NODES]


class Crash(BaseException):
    """Stands for the validator process dying."""


def crash_controls_in_window_3(ledger: ArenaLedger) -> None:
    """Runs the arena's controls at block 1,200 on an engine whose validator dies in window 3
    (the process is gone: nothing records a fault)."""

    def crashing(lane_id: str, delta: DeltaSpec | None, window: int) -> int:
        if window == 3:
            raise Crash("validator killed in window 3")
        return STOCK_NS

    with pytest.raises(Crash):
        run_controls(ledger, FakeEngine(cost_ns=crashing), arena_id=ARENA, block=1_200)

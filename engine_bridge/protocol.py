"""Defines the engine port: the ``Engine`` and ``Lane`` protocols, faults, clock and a fake.

An *engine* boots *lanes*. A lane is one running engine instance, stock or with one
delta installed (or stock with the audit hook). It runs a window of the replay slice,
scores teacher-forced token sequences, reports audit tallies, and shuts down. Lanes
measure their own cost with an injectable monotonic clock (``Callable[[], int]``,
nanoseconds; default :func:`time.perf_counter_ns`). Every failure the attempt must record
is an :class:`~vocabulary.errors.EngineFault` whose ``fault_code`` is one of the
InfrastructureFault codes (docs/events.md). Nothing here imports torch.
"""

from __future__ import annotations

import itertools
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from engine_bridge.limits import detail_chars_max
from vocabulary.errors import EngineFault, LedgerError

if TYPE_CHECKING:
    from engine_bridge.deltas import DeltaSpec
    from engine_bridge.grading import AuditSpec, NodeTally
    from engine_bridge.prompt_slice import ReplaySlice

__all__ = [
    "STAGE_AUDIT",
    "STAGE_QUALITY",
    "STAGE_SPEED",
    "Clock",
    "Engine",
    "FakeEngine",
    "FakeLane",
    "FaultCode",
    "Lane",
    "ManualClock",
    "RequestTiming",
    "TokenScores",
    "WindowRun",
    "default_clock",
    "engine_fault",
    "infrastructure_fault_payload",
    "wrap_unexpected",
]

#: A monotonic clock in integer nanoseconds.
Clock = Callable[[], int]
default_clock: Clock = time.perf_counter_ns

STAGE_SPEED = "speed"
STAGE_AUDIT = "audit"
STAGE_QUALITY = "quality"


class FaultCode(StrEnum):
    """Lists the closed set of InfrastructureFault codes (docs/events.md)."""

    ENGINE_KILLED = "engine_killed"
    POD_SERVICE_RESTART = "pod_service_restart"
    ADAPTER_START_FAILED = "adapter_start_failed"
    ADAPTER_REQUEST_FAILED = "adapter_request_failed"
    ADAPTER_TIMEOUT = "adapter_timeout"
    WORK_MISMATCH = "work_mismatch"
    EVIDENCE_UNAVAILABLE = "evidence_unavailable"
    UNPROVEN_INFRASTRUCTURE_FAILURE = "unproven_infrastructure_failure"


def engine_fault(code: FaultCode, message: str, *, stage: str, **context: Any) -> EngineFault:
    """Returns an EngineFault carrying ``code`` (a plain string) and the attempt stage."""
    return EngineFault(message, fault_code=FaultCode(code).value, stage=stage, **context)


def wrap_unexpected(exc: BaseException, *, stage: str, code: FaultCode) -> LedgerError:
    """Returns ``exc`` if it is already a LedgerError, else an EngineFault with ``code``."""
    if isinstance(exc, LedgerError):
        return exc
    return engine_fault(code, f"{type(exc).__name__}: {exc}", stage=stage)


def infrastructure_fault_payload(fault: EngineFault) -> dict[str, str]:
    """Returns the InfrastructureFault payload {code, stage, detail} of an EngineFault."""
    code = FaultCode(getattr(fault, "fault_code", FaultCode.UNPROVEN_INFRASTRUCTURE_FAILURE))
    detail = fault.message if len(fault.message) <= detail_chars_max else (
        fault.message[: detail_chars_max - 3] + "...")
    return {"code": code.value, "stage": str(getattr(fault, "stage", "")), "detail": detail}


@dataclass(frozen=True)
class RequestTiming:
    """Times one request of a window, from the window's start (all requests arrive then)."""

    request: int
    ttft_ns: int
    latency_ns: int
    output_tokens: int


@dataclass(frozen=True)
class WindowRun:
    """Reports one lane's run of the replay slice: cost, outputs, timings, boot identity."""

    cost_ns: int
    output_token_ids: tuple[tuple[int, ...], ...]
    timings: tuple[RequestTiming, ...]
    boot_id: str

    @property
    def output_tokens(self) -> int:
        """Returns the number of generated tokens over all requests."""
        return sum(len(ids) for ids in self.output_token_ids)


@dataclass(frozen=True)
class TokenScores:
    """Scores one teacher-forced sequence at every position from ``first_scored`` on.

    ``argmax_ids[j]`` is the lane's most likely token at that position and
    ``teacher_logprobs[j]`` the natural-log probability it gives the teacher's token.
    """

    argmax_ids: tuple[int, ...]
    teacher_logprobs: tuple[float, ...]


@runtime_checkable
class Lane(Protocol):
    """Runs one engine instance: stock, stock plus one delta, or stock with the audit hook."""

    @property
    def lane_id(self) -> str:
        """Returns the lane's name ("A", "B", ...)."""

    @property
    def boot_id(self) -> str:
        """Returns an id that changes whenever the engine behind the lane restarts."""

    def ready(self) -> None:
        """Blocks until the lane has booted; raises adapter_start_failed or adapter_timeout."""

    def run_window(self, replay: ReplaySlice, *, window: int = 0) -> WindowRun:
        """Serves every request of the slice greedily and returns the measured run."""

    def score_tokens(self, sequences: Sequence[Sequence[int]],
                     first_scored: Sequence[int]) -> list[TokenScores]:
        """Scores each full sequence teacher-forced from its ``first_scored`` position on."""

    def audit_tallies(self) -> list[NodeTally]:
        """Returns the audit hook's tallies per node and rank (audit lanes only)."""

    def shutdown(self) -> None:
        """Stops the lane; safe to call twice."""


@runtime_checkable
class Engine(Protocol):
    """Boots lanes of one runtime ("torch-reference" or "sglang")."""

    runtime: str

    def boot_lane(self, lane_id: str, delta: DeltaSpec | None = None, *,
                  audit: AuditSpec | None = None, stage: str = STAGE_SPEED) -> Lane:
        """Starts booting a lane (stock when ``delta`` is None); call ``ready()`` to wait."""

    def check_candidate(self, delta: DeltaSpec) -> None:
        """Raises InvalidInput if this engine would refuse ``delta`` (misuse); boots nothing.

        The runner calls it before the claim, so a refusal writes nothing to the ledger.
        """

    def shutdown(self) -> None:
        """Stops every lane this engine still has."""


class ManualClock:
    """Is a clock that moves only when told to (picklable; for tests and the fake engine)."""

    def __init__(self, start_ns: int = 0) -> None:
        self.now_ns = start_ns

    def __call__(self) -> int:
        return self.now_ns

    def advance(self, ns: int) -> None:
        """Moves the clock forward by ``ns`` nanoseconds."""
        self.now_ns += ns


#: Decides a fake run's cost: (lane_id, delta or None, window) -> nanoseconds.
CostModel = Callable[[str, "DeltaSpec | None", int], int]


def _flat_cost(lane_id: str, delta: DeltaSpec | None, window: int) -> int:
    return 1_000_000_000


@dataclass(eq=False)
class FakeEngine:
    """Fakes an engine for unit tests: scripted costs on a ManualClock, canned outputs.

    ``candidate_tokens_short`` makes the candidate generate fewer tokens (work mismatch);
    ``fail`` maps (stage, delta name or "stock", window) to a FaultCode to raise there;
    ``tallies`` are returned by audit lanes; ``disagree`` positions change candidate argmax;
    ``logprob_shift`` moves the candidate's log-probabilities and ``reference_shift`` those
    of a stock lane on lane B (a reference that does not reproduce stock).
    """

    cost_ns: CostModel = _flat_cost
    clock: ManualClock = field(default_factory=ManualClock)
    candidate_tokens_short: int = 0
    fail: dict[tuple[str, str, int], FaultCode] = field(default_factory=dict)
    tallies: list[NodeTally] = field(default_factory=list)
    disagree: int = 0
    logprob_shift: float = 0.0
    reference_shift: float = 0.0
    runtime: str = "fake"
    booted: list[tuple[str, str | None, str]] = field(default_factory=list)
    live: list[FakeLane] = field(default_factory=list)

    def boot_lane(self, lane_id: str, delta: DeltaSpec | None = None, *,
                  audit: AuditSpec | None = None, stage: str = STAGE_SPEED) -> FakeLane:
        """Returns a fake lane and records (lane, delta name, stage)."""
        self._maybe_fail(stage, delta, 0)
        self.booted.append((lane_id, delta.name if delta else None, stage))
        lane = FakeLane(self, lane_id, delta, audit, stage)
        self.live.append(lane)
        return lane

    def check_candidate(self, delta: DeltaSpec) -> None:
        """Accepts every delta: the fake runs no candidate code."""

    def shutdown(self) -> None:
        """Shuts down every live fake lane."""
        for lane in list(self.live):
            lane.shutdown()

    def _maybe_fail(self, stage: str, delta: DeltaSpec | None, window: int) -> None:
        code = self.fail.get((stage, delta.name if delta else "stock", window))
        if code is not None:
            raise engine_fault(code, f"fake {code.value} at {stage} window {window}",
                               stage=stage)


_boot_counter = itertools.count(1)


@dataclass(eq=False)
class FakeLane:
    """Fakes one lane of a :class:`FakeEngine`."""

    engine: FakeEngine
    lane_id: str
    delta: DeltaSpec | None
    audit: AuditSpec | None
    stage: str
    boot_id: str = field(default_factory=lambda: f"fake-{next(_boot_counter)}-{uuid.uuid4().hex}")

    def ready(self) -> None:
        """Returns at once: a fake lane boots instantly."""

    def run_window(self, replay: ReplaySlice, *, window: int = 0) -> WindowRun:
        """Advances the fake clock by the scripted cost and returns canned outputs.

        Honours the fault-control deltas like the real lanes: ``pod_restart`` changes the
        boot id before its window, ``engine_kill`` raises engine_killed in it.
        """
        self.engine._maybe_fail(self.stage, self.delta, window)
        if window > 0 and window == self._control_window("pod_restart"):
            self.boot_id = f"fake-restarted-{uuid.uuid4().hex}"
        if window > 0 and window == self._control_window("engine_kill"):
            raise engine_fault(FaultCode.ENGINE_KILLED, f"fake lane {self.lane_id} killed",
                               stage=self.stage)
        start = self.engine.clock()
        self.engine.clock.advance(self.engine.cost_ns(self.lane_id, self.delta, window))
        cost = self.engine.clock() - start
        short = self.engine.candidate_tokens_short if self.delta is not None else 0
        ids = [tuple((r[j % len(r)] + 1) % replay.vocab_size
                     for j in range(replay.max_new_tokens)) for r in replay.requests]
        if short:
            ids[-1] = ids[-1][: max(0, len(ids[-1]) - short)]
        timings = tuple(RequestTiming(i, cost // 2, cost, len(x)) for i, x in enumerate(ids))
        return WindowRun(cost, tuple(ids), timings, self.boot_id)

    def _control_window(self, name: str) -> int | None:
        delta = self.delta
        if delta is None or delta.kind != "registered" or delta.name != name:
            return None
        return delta.param_int("window")

    def score_tokens(self, sequences: Sequence[Sequence[int]],
                     first_scored: Sequence[int]) -> list[TokenScores]:
        """Echoes the teacher tokens, disagreeing at the first ``disagree`` positions."""
        out, budget = [], self.engine.disagree if self.delta is not None else 0
        shift = self.engine.logprob_shift if self.delta is not None else (
            self.engine.reference_shift if self.lane_id == "B" else 0.0)
        for seq, first in zip(sequences, first_scored, strict=True):
            argmax = []
            for token in seq[first:]:
                argmax.append(token + 1 if budget > 0 else token)
                budget -= 1
            out.append(TokenScores(tuple(argmax), tuple(-0.5 + shift for _ in argmax)))
        return out

    def audit_tallies(self) -> list[NodeTally]:
        """Returns the engine's scripted tallies."""
        return list(self.engine.tallies)

    def shutdown(self) -> None:
        """Removes the lane from the engine's live list."""
        if self in self.engine.live:
            self.engine.live.remove(self)

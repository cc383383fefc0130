"""Runs an A/A noise calibration on an engine and records it (``arena-ledger calibrate``).

CalibrationStarted, then one CalibrationWindowMeasured per window as it is measured, then
the CalibrationConcluded the fold derives: a crash leaves a valid, unconcluded calibration
(a new one is started under another id). An engine fault ends the run with the EngineFault
(exit 6); the windows recorded stay. docs/calibration.md has the arithmetic.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from importlib import metadata
from typing import Any

from pydantic import ValidationError

from engine_bridge.calibration import iter_calibration_windows
from engine_bridge.prompt_slice import load_replay_slice
from engine_bridge.protocol import Engine
from machines.calibration import CalibrationState, derive_conclusion, measured_digest
from services.arena_ledger import ArenaLedger
from services.calibration import SealCheck, seal_check
from services.evaluation import arena_engine, make_engine
from vocabulary.catalogue import schema_error
from vocabulary.codec import digest
from vocabulary.errors import InvalidInput, NotFound
from vocabulary.events import (
    CalibrationConcluded,
    CalibrationStarted,
    CalibrationWindowMeasured,
)

__all__ = ["CalibrationReport", "calibrate", "default_calibration_id", "reference_target",
           "run_calibration"]

Progress = Callable[[str, dict[str, Any]], None]


@dataclass
class CalibrationReport:
    """Reports one calibration: its id, what it measured and concluded, and the seal check."""

    calibration_id: str
    arena_id: str | None
    windows: int = 0
    conclusion: dict[str, Any] = field(default_factory=dict)
    check: SealCheck | None = None

    def to_json(self) -> dict[str, Any]:
        """Returns the report as a JSON-ready object."""
        check = self.check
        return {
            "calibration_id": self.calibration_id,
            "arena_id": self.arena_id,
            "windows": self.windows,
            **self.conclusion,
            "seal_below_bounds": [s._asdict() for s in check.shortfalls] if check else [],
        }


def default_calibration_id(arena_id: str | None, block: int) -> str:
    """Returns ``cal-<arena or reference>-<block>``, the id a calibration gets by default."""
    return f"cal-{arena_id or 'reference'}-{block}"[:64]


def reference_target() -> dict[str, Any]:
    """Returns the engine, model and hardware of an arena-less calibration: the torch
    reference engine on this host's CPU (what ``make_engine("torch-reference")`` boots)."""
    try:
        torch_version = metadata.version("torch")
    except metadata.PackageNotFoundError:
        torch_version = "unknown"
    return {
        "model": {"name": "arena-ledger/reference-llama-1m", "revision": "seed-20250101"},
        "hardware": {"gpu": "cpu", "count": 1},
        "engine": {
            "runtime": "torch-reference", "runtime_version": f"torch-{torch_version}",
            "image_digest": "sha256:" + digest("arena-ledger.reference-image", {}),
            "engine_config": {"cost_clock": "thread_time"}, "engine_env": {},
        },
    }


def calibrate(
    ledger: ArenaLedger, engine: Engine, *, calibration_id: str, arena_id: str | None,
    windows: int, boots: int, confidence: str, block: int, validator_hotkey: str,
    target: dict[str, Any] | None = None, progress: Progress | None = None,
) -> CalibrationReport:
    """Records a calibration of ``engine`` (the arena's, or ``target``'s) and concludes it."""
    fold = ledger.fold
    if arena_id is not None:
        arena = fold.arena(arena_id)
        if arena is None:
            raise NotFound(f"arena {arena_id!r} is not commissioned", arena_id=arena_id)
        sealed = arena.commission.event
        target = {name: getattr(sealed, name).model_dump()
                  for name in ("engine", "model", "hardware")}
    target = target or reference_target()
    if fold.calibration(calibration_id) is not None:
        raise InvalidInput(f"calibration {calibration_id} already exists; choose another --id",
                           path="--id", calibration_id=calibration_id)
    started = _started({
        "calibration_id": calibration_id, "arena_id": arena_id, **target,
        "measured_digest": measured_digest(target["engine"], target["model"],
                                           target["hardware"]),
        "validator_hotkey": validator_hotkey, "block": block, "windows": windows,
        "boots": boots, "confidence": confidence,
    })
    stream = f"calibration-{calibration_id}"
    replay = load_replay_slice()  # before the append: a missing slice leaves nothing behind
    ledger.append([(stream, started)])
    notify = progress or (lambda stage, info: None)
    report = CalibrationReport(calibration_id, arena_id)
    for payload in iter_calibration_windows(engine, replay, windows=windows, boots=boots):
        ledger.append([(stream, CalibrationWindowMeasured.model_validate(payload))])
        report.windows += 1
        notify("window", payload)
    state = ledger.fold.calibration(calibration_id)
    assert isinstance(state, CalibrationState)
    derived = derive_conclusion(state)
    assert derived is not None  # every planned window was just recorded
    concluded = CalibrationConcluded.model_validate({**derived, "concluded_block": block})
    ledger.append([(stream, concluded)], key=f"calibration-concluded-{calibration_id}")
    report.conclusion = concluded.model_dump()
    if arena_id is not None:
        report.check = seal_check(ledger.fold, arena_id)
    return report


def run_calibration(
    ledger: ArenaLedger, *, arena_id: str | None, windows: int, boots: int, confidence: str,
    block: int, validator_hotkey: str = "validator", calibration_id: str | None = None,
    progress: Progress | None = None,
) -> CalibrationReport:
    """Boots the arena's engine (the torch reference engine without an arena), calibrates,
    and shuts it down. Inputs are checked before the engine boots."""
    if arena_id is not None and ledger.fold.arena(arena_id) is None:
        raise NotFound(f"arena {arena_id!r} is not commissioned", arena_id=arena_id)
    ident = calibration_id or default_calibration_id(arena_id, block)
    target = None if arena_id is not None else reference_target()
    _check_plan(ident, arena_id, windows, boots, confidence, block, validator_hotkey, target)
    if ledger.fold.calibration(ident) is not None:
        raise InvalidInput(f"calibration {ident} already exists; choose another --id",
                           path="--id", calibration_id=ident)
    engine = arena_engine(ledger, arena_id) if arena_id is not None else make_engine(
        "torch-reference", engine_config={"cost_clock": "thread_time"})
    try:
        return calibrate(
            ledger, engine, calibration_id=ident, arena_id=arena_id, windows=windows,
            boots=boots, confidence=confidence, block=block, validator_hotkey=validator_hotkey,
            target=target, progress=progress,
        )
    finally:
        engine.shutdown()


def _check_plan(ident: str, arena_id: str | None, windows: int, boots: int, confidence: str,
                block: int, validator_hotkey: str, target: dict[str, Any] | None) -> None:
    """Validates the CalibrationStarted a run would append, so bad input boots nothing."""
    target = target or reference_target()
    _started({
        "calibration_id": ident, "arena_id": arena_id, **target, "measured_digest": "0" * 64,
        "validator_hotkey": validator_hotkey, "block": block, "windows": windows,
        "boots": boots, "confidence": confidence,
    })


def _started(document: dict[str, Any]) -> CalibrationStarted:
    """Validates a CalibrationStarted; bad input becomes a SchemaError naming the field."""
    try:
        return CalibrationStarted.model_validate(document)
    except ValidationError as exc:
        raise schema_error(CalibrationStarted.event_type, 1, exc) from None

"""Evaluates a submission for real: claim, paired windows, audit, quality, conclude.

Every measurement is appended as it happens, through the machines, so a crash leaves a
valid partial attempt that a later fault event or conclusion completes. The runner asks the
ledger's fold after each window whether speed is decided and stops there (futility, a
passing look, or under paired-windows.v2 the noise guard), exactly where the attempt machine
says the evaluation stops; the conclusion carries the rules version the arena sealed.
"""

from __future__ import annotations

import functools
import hashlib
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError, create_model

from engine_bridge.deltas import DeltaSpec, load_file_delta, registered_by_digest
from engine_bridge.extra import require_engine_extra
from engine_bridge.hooks import run_audit
from engine_bridge.prompt_slice import load_replay_slice
from engine_bridge.protocol import Engine, infrastructure_fault_payload
from engine_bridge.quality import grade_quality
from engine_bridge.speed import run_windows
from engine_bridge.subprocess_lane import SubprocessEngine
from services.arena_ledger import CONTROL_HOTKEY, ArenaLedger
from vocabulary.catalogue import schema_error
from vocabulary.codec import digest
from vocabulary.errors import EngineFault, InvalidInput, NotFound
from vocabulary.events import (
    AttemptClaimed,
    AuditNodeGraded,
    ControlRegistered,
    InfrastructureFault,
    QualityGraded,
    WindowMeasured,
)

__all__ = [
    "CONTROL_HOTKEY",
    "EvaluationResult",
    "check_claim_fields",
    "control_run_id",
    "controls_at",
    "default_model_dir",
    "evaluate",
    "make_engine",
    "resolve_delta",
    "run_controls",
]

Progress = Callable[[str, dict[str, Any]], None]


@dataclass
class EvaluationResult:
    """Reports one evaluation: the attempt, what was appended and the decision."""

    attempt_id: str
    submission_id: str
    windows: int = 0
    audit_nodes: int = 0
    quality: bool = False
    fault: str | None = None
    decision: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """Returns the result as a JSON-ready object."""
        return {
            "attempt_id": self.attempt_id,
            "submission_id": self.submission_id,
            "windows": self.windows,
            "audit_nodes": self.audit_nodes,
            "quality": self.quality,
            "fault": self.fault,
            **self.decision,
        }


def default_model_dir() -> Path:
    """Returns where the reference model is built (``$ARENA_LEDGER_MODEL_DIR`` or a cache)."""
    configured = os.environ.get("ARENA_LEDGER_MODEL_DIR")
    if configured:
        return Path(configured)
    return Path.home() / ".cache" / "arena-ledger" / "reference-model"


def make_engine(
    runtime: str,
    *,
    model_dir: Path | None = None,
    in_process: bool = False,
    engine_config: dict[str, Any] | None = None,
) -> Engine:
    """Boots the engine adapter for a commission's runtime (torch-reference here).

    ``engine_config["cost_clock"]`` picks the lanes' cost clock: ``perf_counter`` (wall
    time, the default and what GPU hosts use) or ``thread_time`` (CPU time of the lane,
    steadier on a shared CPU host).
    """
    if runtime != "torch-reference":
        raise InvalidInput(
            f"runtime {runtime!r} needs a GPU host with sglang; this machine runs "
            "torch-reference only (see docs/engine.md)",
            runtime=runtime,
        )
    # The engine extra (numpy, torch) is imported only when an engine boots; without it,
    # one line naming the extra rather than a ModuleNotFoundError from deep inside.
    require_engine_extra()
    from engine_bridge.reference_model import ensure_reference_model

    directory = ensure_reference_model(model_dir or default_model_dir())
    if in_process:
        from engine_bridge.torch_engine import TorchReferenceEngine

        return TorchReferenceEngine(directory)

    clock = str((engine_config or {}).get("cost_clock", "perf_counter"))
    if clock not in ("perf_counter", "thread_time"):
        raise InvalidInput(
            f"cost_clock {clock!r} is not perf_counter or thread_time",
            path="$.engine.engine_config.cost_clock",
        )
    return SubprocessEngine(directory, clock=clock)  # type: ignore[arg-type]


def resolve_delta(delta_digest: str, delta_file: str | None = None) -> DeltaSpec:
    """Finds the candidate: a registered delta by digest, or a file whose sha256 matches."""
    if delta_file is not None:
        spec = load_file_delta(delta_file)
        if spec.digest != delta_digest:
            raise InvalidInput(
                f"delta file {delta_file} has digest {spec.digest}, but the submission "
                f"names {delta_digest}",
                path=delta_file,
            )
        return spec
    try:
        return registered_by_digest(delta_digest)
    except NotFound:
        raise NotFound(
            f"no registered delta has digest {delta_digest}; pass --delta-file with the "
            "submission's delta",
            digest=delta_digest,
        ) from None


@functools.cache
def _claim_fields(names: tuple[str, ...]) -> type[BaseModel]:
    """Returns a model of the named AttemptClaimed fields, with the event's own rules."""
    fields = AttemptClaimed.model_fields
    definitions: dict[str, Any] = {name: (fields[name].annotation, fields[name]) for name in names}
    return create_model(
        "AttemptClaimedFields", __config__=AttemptClaimed.model_config, **definitions
    )


def check_claim_fields(**values: object) -> None:
    """Raises the SchemaError the claim's AttemptClaimed would raise for these fields.

    ``values`` are AttemptClaimed fields by name (``validator_hotkey``, ``claimed_block``,
    ``pair_id``, ``attempt_id``, ``plan``). ``run_controls`` appends a credit and an intake
    before each claim, and the CLI boots the engine before it: both check the claim's inputs
    first, by the event schema's own field rules, so bad input is refused naming its field
    (``$.payload.validator_hotkey``) and changes nothing.
    """
    try:
        _claim_fields(tuple(sorted(values))).model_validate(values)
    except ValidationError as exc:
        raise schema_error(AttemptClaimed.event_type, AttemptClaimed.schema_version, exc) from None


def evaluate(
    ledger: ArenaLedger,
    engine: Engine,
    *,
    submission_id: str,
    attempt_id: str,
    block: int,
    pair_id: str = "pair-0",
    validator_hotkey: str = "validator",
    plan: str = "normal",
    candidate: DeltaSpec | None = None,
    progress: Progress | None = None,
) -> EvaluationResult:
    """Runs one attempt end to end and concludes it; returns what was recorded."""
    sub = ledger.fold.submission(submission_id)
    if sub is None:
        raise NotFound(f"submission {submission_id} does not exist", submission_id=submission_id)
    check_claim_fields(
        attempt_id=attempt_id,
        pair_id=pair_id,
        validator_hotkey=validator_hotkey,
        claimed_block=block,
        plan=plan,
    )
    spec = candidate or resolve_delta(sub.delta_digest)
    # Misuse must raise before the claim: after it, only a fault or a decision may end the
    # attempt, and an exception that is neither would strand it in CLAIMED.
    engine.check_candidate(spec)
    replay = load_replay_slice()
    ledger.claim(
        attempt_id=attempt_id,
        pair_id=pair_id,
        validator_hotkey=validator_hotkey,
        block=block,
        submission_id=submission_id,
        plan=plan,
    )
    result = EvaluationResult(attempt_id, submission_id)
    return _complete(ledger, engine, spec, replay, result, block, progress)


def _complete(
    ledger: ArenaLedger,
    engine: Engine,
    spec: DeltaSpec,
    replay: Any,
    result: EvaluationResult,
    block: int,
    progress: Progress | None,
) -> EvaluationResult:
    """Runs what the claimed attempt still lacks, from where the ledger says it stands.

    A fresh claim runs everything. A resumed attempt (``run_controls`` after a crash)
    measures the windows after the last recorded one, audits if no audit was recorded
    (audits are appended whole), grades quality if the audit passes, then concludes.
    """
    notify = progress or (lambda stage, info: None)
    attempt_id = result.attempt_id
    try:
        if _stage(ledger, attempt_id) in ("CLAIMED", "SPEED") and not _speed_decided(
            ledger, attempt_id
        ):
            _speed(ledger, engine, spec, replay, result, notify)
        if _stage(ledger, attempt_id) == "AUDIT" and not _audited(ledger, attempt_id):
            _audit(ledger, engine, spec, replay, result, notify)
        # An audit that passes decides nothing by itself: quality comes next.
        audit_passes = ledger.fold.derive_decision(attempt_id) is None
        if _stage(ledger, attempt_id) == "AUDIT" and audit_passes:
            _quality(ledger, engine, spec, replay, result, notify)
    except EngineFault as fault:
        payload = infrastructure_fault_payload(fault)
        result.fault = payload["code"]
        ledger.fault(attempt_id, payload["code"], payload["stage"], payload["detail"])
        notify("fault", {"code": payload["code"], "stage": payload["stage"]})  # now held
    decided = ledger.conclude(attempt_id, block)
    result.decision = {
        k: v
        for k, v in decided.model_dump().items()
        if k in ("verdict", "reason", "disposition", "speedup", "pass_line", "look_window")
    }
    notify("decided", result.decision)
    return result


def _stage(ledger: ArenaLedger, attempt_id: str) -> str:
    state = ledger.fold.attempt(attempt_id)
    if state is None:
        return "NONE"
    if getattr(state, "fault", None) is not None or state.decision is not None:
        return "DECIDED"
    return str(state.status)


def _speed_decided(ledger: ArenaLedger, attempt_id: str) -> bool:
    return getattr(ledger.fold.attempt(attempt_id), "speed", None) is not None


def _audited(ledger: ArenaLedger, attempt_id: str) -> bool:
    return bool(getattr(ledger.fold.attempt(attempt_id), "audit_ranks", ()))


def _speed(
    ledger: ArenaLedger,
    engine: Engine,
    spec: DeltaSpec,
    replay: Any,
    result: EvaluationResult,
    notify: Progress,
) -> None:
    attempt_id = result.attempt_id
    state = ledger.fold.attempt(attempt_id)
    windows = state.params.windows  # type: ignore[union-attr]
    first = len(state.windows) + 1  # type: ignore[union-attr]  # > 1 when resuming

    def on_window(payload: dict[str, Any]) -> bool:
        recorded = ledger.record(attempt_id, WindowMeasured.model_validate(payload))
        if isinstance(recorded, InfrastructureFault):  # a token mismatch: work_mismatch
            # The ledger holds that fault, not this window: report what it holds.
            result.fault = recorded.code
            notify("fault", {"code": recorded.code, "stage": recorded.stage})
            return False
        result.windows += 1
        notify("window", payload)
        now = ledger.fold.attempt(attempt_id)
        decided = now is None or now.decision is not None
        return not decided and getattr(now, "speed", None) is None

    run_windows(engine, spec, replay, windows=windows, on_window=on_window, first_window=first)


def _audit(
    ledger: ArenaLedger,
    engine: Engine,
    spec: DeltaSpec,
    replay: Any,
    result: EvaluationResult,
    notify: Progress,
) -> None:
    params = ledger.fold.attempt(result.attempt_id).params  # type: ignore[union-attr]
    payloads = run_audit(
        engine, spec, replay, bar=str(params.audit_bar), near_miss_band=str(params.near_miss_band)
    )
    stream = f"attempt-{result.attempt_id}"
    if payloads:
        # One atomic batch: a crash between per-node appends would leave a partial audit
        # the machine cannot tell from a whole one (a missing node's violations would never
        # count). The key makes a repeat of the same batch a no-op, not audit_node_repeated.
        ledger.append(
            [(stream, AuditNodeGraded.model_validate(p)) for p in payloads],
            key=f"audit-{result.attempt_id}",
        )
    result.audit_nodes += len(payloads)
    notify("audit", {"nodes": len(payloads)})


def _quality(
    ledger: ArenaLedger,
    engine: Engine,
    spec: DeltaSpec,
    replay: Any,
    result: EvaluationResult,
    notify: Progress,
) -> None:
    report = grade_quality(engine, spec, replay)
    ledger.record(result.attempt_id, QualityGraded.model_validate(report.payload))
    result.quality = True
    notify("quality", report.payload)


def control_run_id(control_id: str, block: int) -> str:
    """Returns the credit and attempt id of a control's run at ``block``.

    That is ``ctl-<control_id>-<block>`` when it fits the 64 characters of an id. A longer
    one keeps the id's first characters, then 12 hex digits of the SHA-256 of the whole
    control id, then the block: cutting the plain form short would drop the block (the
    control would run at its first block only) or the characters that tell two controls
    apart (the second would never run).
    """
    run = f"ctl-{control_id}-{block}"
    if len(run) <= 64:
        return run
    tail = f"-{hashlib.sha256(control_id.encode()).hexdigest()[:12]}-{block}"
    return f"ctl-{control_id[: 64 - len('ctl-') - len(tail)]}{tail}"


def run_controls(
    ledger: ArenaLedger,
    engine: Engine,
    *,
    arena_id: str,
    block: int,
    validator_hotkey: str = "validator",
    progress: Progress | None = None,
) -> list[dict[str, Any]]:
    """Submits and evaluates every registered control of an arena; returns the control report.

    Each control run is an ordinary submission from ``CONTROL_HOTKEY``, paid by a credit
    granted for it (so it is reported apart from fee revenue), whose content hash names the
    control and the block, so a control expected to FAIL is never refused as a duplicate.
    The inputs and every control's delta are checked before the first append: bad input
    changes nothing, where a refusal at a claim would leave a granted credit and an admitted
    submission behind.
    """
    check_claim_fields(validator_hotkey=validator_hotkey, claimed_block=block)
    arena = ledger.fold.arena(arena_id)
    if arena is None:
        raise NotFound(f"arena {arena_id!r} is not commissioned", arena_id=arena_id)
    candidates = _control_candidates(ledger, engine, arena.controls, block)
    for index, (control_id, control) in enumerate(sorted(arena.controls.items())):
        run = control_run_id(control_id, block)
        # The attempt, not the credit, says how far a run got: a crash may fall anywhere
        # between the credit's grant and the conclusion, and a retry finishes the run.
        attempt = ledger.fold.attempt(run)
        if attempt is not None:
            if attempt.status != "DECIDED":
                if progress is not None:
                    progress("control", {"control_id": control_id, "kind": control.kind,
                                         "resumed_from": attempt.status})
                _resume(ledger, engine, run, block, progress)
            continue  # this control already ran at this block: the report covers it
        if ledger.fold.credit(run) is None:
            ledger.grant_credit(run, CONTROL_HOTKEY, arena.fee_rao, f"control run {control_id}")
        arrival = {
            "arena_id": arena_id,
            "miner_hotkey": CONTROL_HOTKEY,
            "content_hash": digest(
                "arena-ledger.control-run", {"control_id": control_id, "block": block}
            ),
            "delta_digest": control.delta_digest,
            "target": "model.layers.*.mlp",
            "arrival": {"block": block, "event_index": 0, "event_subindex": index},
        }
        outcome = ledger.intake(arrival)  # idempotent: a retry gets what was recorded
        if not outcome.admitted:
            continue
        if progress is not None:
            progress("control", {"control_id": control_id, "kind": control.kind})
        # A listed audit control is observed even when it is slower: the audit must run.
        listed = control.delta_digest in arena.params.calibration_digests
        evaluate(
            ledger,
            engine,
            submission_id=outcome.submission_id,
            attempt_id=run,
            block=block,
            validator_hotkey=validator_hotkey,
            progress=progress,
            plan="calibration_observation" if listed else "normal",
            candidate=candidates[control_id],
        )
    return ledger.controls(arena_id)


def controls_at(ledger: ArenaLedger, arena_id: str, block: int) -> list[dict[str, Any]]:
    """Returns the control report's rows of the runs ``run_controls`` made at ``block`` only.

    Each run is found by its own id (``control_run_id``, its credit's and its attempt's),
    not by time: the runs of other blocks, the forever-pending ones of an interrupted run
    among them, and another validator's runs made meanwhile are left out.
    """
    fold = ledger.fold
    arena = fold.arena(arena_id)
    if arena is None:
        raise NotFound(f"arena {arena_id!r} is not commissioned", arena_id=arena_id)
    runs = set()
    for control_id in arena.controls:
        run = control_run_id(control_id, block)
        for found in (fold.attempt(run), fold.credit(run)):
            if found is not None and found.submission_id is not None:
                runs.add(found.submission_id)
    return [row for row in ledger.controls(arena_id) if row["submission_id"] in runs]


def _control_candidates(
    ledger: ArenaLedger, engine: Engine, controls: Mapping[str, ControlRegistered], block: int
) -> dict[str, DeltaSpec]:
    """Resolves the delta of every control not yet claimed at ``block``, as ``evaluate``
    would before its claim, and has the engine check it: this runs before the first credit
    is granted, so a control whose delta is missing or refused leaves nothing behind."""
    candidates: dict[str, DeltaSpec] = {}
    for control_id, control in sorted(controls.items()):
        if ledger.fold.attempt(control_run_id(control_id, block)) is not None:
            continue  # resumed or skipped: its delta was resolved when it was claimed
        try:
            spec = resolve_delta(control.delta_digest)
        except NotFound:
            raise NotFound(
                f"control {control_id!r} names delta {control.delta_digest}, which is not a "
                "registered delta; nothing was run",
                control_id=control_id,
                digest=control.delta_digest,
            ) from None
        engine.check_candidate(spec)
        candidates[control_id] = spec
    return candidates


def _resume(
    ledger: ArenaLedger, engine: Engine, attempt_id: str, block: int, progress: Progress | None
) -> EvaluationResult:
    """Finishes a claimed, unconcluded control run where its recorded evidence stops."""
    state = ledger.fold.attempt(attempt_id)
    assert state is not None
    sub = ledger.fold.submission(state.submission_id)
    assert sub is not None
    spec = resolve_delta(sub.delta_digest)
    engine.check_candidate(spec)
    result = EvaluationResult(attempt_id, state.submission_id)
    return _complete(ledger, engine, spec, load_replay_slice(), result, block, progress)


def arena_engine(ledger: ArenaLedger, arena_id: str | None) -> Engine:
    """Boots the engine an arena's commission seals (its runtime and engine config).

    An arena the ledger does not hold gets the torch reference engine; the use case that
    asked then refuses the arena by name, as it would without an engine.
    """
    arena = ledger.fold.arena(arena_id) if arena_id is not None else None
    if arena is None:
        return make_engine("torch-reference")
    sealed = arena.commission.event.engine
    return make_engine(sealed.runtime, engine_config=dict(sealed.engine_config))


def default_attempt_id(submission_id: str, block: int) -> str:
    """Returns the attempt id an evaluation records when none is given."""
    return f"{submission_id[:16]}-{block}"


def evaluate_submission(
    ledger: ArenaLedger,
    submission_id: str,
    *,
    block: int,
    attempt_id: str | None = None,
    pair_id: str = "pair-0",
    validator_hotkey: str = "validator",
    plan: str = "normal",
    delta_file: str | None = None,
    progress: Progress | None = None,
) -> EvaluationResult:
    """Evaluates one submission on its arena's engine, booted here and shut down after.

    The claim's fields are checked before the engine boots; the candidate is the registered
    delta of the submission's digest, or ``delta_file``.
    """
    typed = {"attempt_id": attempt_id} if attempt_id is not None else {}
    check_claim_fields(
        **typed, pair_id=pair_id, validator_hotkey=validator_hotkey, claimed_block=block,
        plan=plan,
    )
    sub = ledger.fold.submission(submission_id)
    candidate = resolve_delta(sub.delta_digest, delta_file) if sub is not None else None
    engine = arena_engine(ledger, sub.arena_id if sub is not None else None)
    try:
        return evaluate(
            ledger, engine, submission_id=submission_id,
            attempt_id=attempt_id or default_attempt_id(submission_id, block), block=block,
            pair_id=pair_id, validator_hotkey=validator_hotkey, plan=plan,
            candidate=candidate, progress=progress,
        )
    finally:
        engine.shutdown()


def run_arena_controls(
    ledger: ArenaLedger,
    arena_id: str,
    *,
    block: int,
    validator_hotkey: str = "validator",
    progress: Progress | None = None,
) -> list[dict[str, Any]]:
    """Runs every registered control of an arena on its engine, booted here and shut down."""
    check_claim_fields(validator_hotkey=validator_hotkey, claimed_block=block)
    engine = arena_engine(ledger, arena_id)
    try:
        return run_controls(
            ledger, engine, arena_id=arena_id, block=block, validator_hotkey=validator_hotkey,
            progress=progress,
        )
    finally:
        engine.shutdown()

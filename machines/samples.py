"""Builds well-formed example events: the docs/machines.md worked example, tests, docs and bench.

Everything here is deterministic (ids derive from the arguments), so a rendered document or
a generated benchmark ledger is the same on every run.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

from machines.arithmetic import RULES_VERSION, RULES_VERSION_V2, Decision
from machines.calibration import measured_digest
from machines.submission import submission_id_of
from vocabulary.events import (
    ArenaCommissioned,
    AttemptClaimed,
    AttemptDecided,
    AuditNodeGraded,
    CalibrationStarted,
    CalibrationWindowMeasured,
    Policy,
    PolicyV2,
    QualityGraded,
    SubmissionArrived,
    WindowMeasured,
)

__all__ = [
    "CALIBRATION_EXAMPLE_COSTS",
    "WORKED_EXAMPLE_COSTS",
    "arrived",
    "audit",
    "calibration_started",
    "calibration_windows",
    "claimed",
    "commission_document",
    "commissioned",
    "decided",
    "hex64",
    "policy",
    "policy_v2",
    "quality",
    "window",
    "worked_example_policy",
]

#: The worked example's (stock, candidate) costs in ns, window by window (docs/machines.md).
WORKED_EXAMPLE_COSTS = (
    (1_000_000_000, 990_000_000),
    (1_000_000_000, 985_000_000),
    (1_000_000_000, 975_000_000),
    (1_000_000_000, 980_000_000),
)


#: The calibration worked example (docs/calibration.md): (lane A, lane B) costs in ns of
#: 2 boot rounds of W = 4 windows (orientation 1: windows 1-2, orientation 2: windows 3-4).
CALIBRATION_EXAMPLE_COSTS = (
    (1_010_000_000, 1_000_000_000), (1_030_000_000, 1_000_000_000),
    (1_020_000_000, 1_000_000_000), (1_000_000_000, 1_000_000_000),
    (1_040_000_000, 1_000_000_000), (1_020_000_000, 1_000_000_000),
    (1_040_000_000, 1_000_000_000), (1_020_000_000, 1_000_000_000),
)


def hex64(seed: str) -> str:
    """Returns a deterministic 64-hex digest-shaped string for ``seed``."""
    return hashlib.sha256(seed.encode()).hexdigest()


def policy(**overrides: Any) -> Policy:
    """Returns a valid sealed policy (W = 4, noise 0.01, z = {3: 2, 4: 1.5}) with overrides."""
    document: dict[str, Any] = {
        "policy_version": RULES_VERSION,
        "windows": 4,
        "z": {"3": "2", "4": "1.5"},
        "window_noise": "0.01",
        "boot_noise": "0.01",
        "audit": {"bar": "0.99999", "min_calls": 8},
    }
    document.update(overrides)
    return Policy.model_validate(document)


def policy_v2(**overrides: Any) -> PolicyV2:
    """Returns a valid sealed paired-windows.v2 policy: ``policy``'s values plus the noise
    guard at α = 0.001, with overrides."""
    document: dict[str, Any] = {
        "policy_version": RULES_VERSION_V2,
        "windows": 4,
        "z": {"3": "2", "4": "1.5"},
        "window_noise": "0.01",
        "boot_noise": "0.01",
        "noise_guard_alpha": "0.001",
        "audit": {"bar": "0.99999", "min_calls": 8},
    }
    document.update(overrides)
    return PolicyV2.model_validate(document)


def worked_example_policy() -> Policy:
    """Returns the policy of the worked example (no futility, g = 0)."""
    return policy()


def commissioned(
    arena_id: str = "mlp-arena", *, fee_rao: int = 1_000_000_000, block: int = 100,
    sealed: Policy | PolicyV2 | None = None, incumbent: str = "incumbent-0", **overrides: Any,
) -> ArenaCommissioned:
    """Returns an ArenaCommissioned with a small, valid engine description."""
    return ArenaCommissioned.model_validate(commission_document(
        arena_id, fee_rao=fee_rao, block=block, sealed=sealed, incumbent=incumbent, **overrides
    ))


def commission_document(
    arena_id: str = "mlp-arena", *, fee_rao: int = 1_000_000_000, block: int = 100,
    sealed: Policy | PolicyV2 | None = None, incumbent: str = "incumbent-0", **overrides: Any,
) -> dict[str, Any]:
    """Returns ``commissioned``'s payload as an appender writes it: the sealed policy spells
    only the fields it sets, not the model's defaults."""
    document: dict[str, Any] = {
        "arena_id": arena_id,
        "commissioned_block": block,
        "model": {"name": "tiny-llama", "revision": "r1"},
        "hardware": {"gpu": "H200", "count": 1},
        "engine": {
            "runtime": "torch-reference",
            "runtime_version": "2.13.0",
            "image_digest": "sha256:" + hex64("image"),
            "engine_config": {"tp": 1},
            "engine_env": {},
        },
        "policy": (sealed or policy()).model_dump(mode="json", exclude_unset=True),
        "fee_rao": fee_rao,
        "incumbent_digest": hex64(incumbent),
        "emission_share_ppm": 500_000,
    }
    document.update(overrides)
    return document


def arrived(
    arena_id: str = "mlp-arena", *, hotkey: str = "5Miner", content: str = "delta-1",
    block: int = 1_000, index: int = 0, subindex: int = 0, payment_ref: str | None = None,
    delta_digest: str | None = None,
) -> SubmissionArrived:
    """Returns a SubmissionArrived whose submission_id is the correct arrival digest."""
    fields: dict[str, Any] = {
        "submission_id": "0" * 64,
        "arena_id": arena_id,
        "miner_hotkey": hotkey,
        "content_hash": hex64(content),
        "delta_digest": delta_digest or hex64("delta:" + content),
        "target": "model.layers.*.mlp",
        "arrival": {"block": block, "event_index": index, "event_subindex": subindex},
    }
    if payment_ref is not None:
        fields["payment_ref"] = payment_ref
    draft = SubmissionArrived.model_validate(fields)
    return SubmissionArrived.model_validate({**fields, "submission_id": submission_id_of(draft)})


def claimed(
    submission_id: str, commission_digest: str, *, attempt_id: str = "att-1",
    arena_id: str = "mlp-arena", plan: str = "normal", block: int = 1_010,
) -> AttemptClaimed:
    """Returns an AttemptClaimed of a submission under a commission."""
    return AttemptClaimed(
        attempt_id=attempt_id,
        submission_id=submission_id,
        arena_id=arena_id,
        commission_digest=commission_digest,
        pair_id="pair-1",
        validator_hotkey="5Validator",
        claimed_block=block,
        plan=plan,
    )


def window(
    index: int, orientation: int, stock: int, candidate: int, *, tokens: int = 512,
    candidate_tokens: int | None = None,
) -> WindowMeasured:
    """Returns a WindowMeasured with equal output token counts unless told otherwise."""
    return WindowMeasured(
        window=index,
        orientation=orientation,
        stock_cost_ns=stock,
        candidate_cost_ns=candidate,
        stock_output_tokens=tokens,
        candidate_output_tokens=tokens if candidate_tokens is None else candidate_tokens,
    )


def audit(
    node: str = "model.layers.0.mlp", rank: int = 0, calls: int = 64, *, violations: int = 0,
    near_misses: int = 0, uncomparable: int = 0,
) -> AuditNodeGraded:
    """Returns an AuditNodeGraded for one node and rank; its lowest score is one the counts
    allow under the sample policy's bar (0.99999, band 0.03)."""
    min_score = "0.5" if violations else "0.99" if near_misses else "0.999995"
    return AuditNodeGraded(
        node=node, rank=rank, calls=calls, violations=violations, near_misses=near_misses,
        uncomparable=uncomparable, min_score=min_score, bar="0.99999",
    )


def quality(*, drift_within_envelope: bool = True, regression: bool = False) -> QualityGraded:
    """Returns a QualityGraded."""
    return QualityGraded(
        tokens_scored=4096, argmax_agreement="0.998",
        drift_within_envelope=drift_within_envelope, regression=regression,
    )


def decided(
    decision: Decision, *, block: int = 1_020, rules_version: str = RULES_VERSION
) -> AttemptDecided:
    """Returns the AttemptDecided that records ``decision`` under ``rules_version``."""
    fields: Mapping[str, Any] = {
        "verdict": decision.verdict,
        "reason": decision.reason,
        "disposition": decision.disposition,
        "speedup": decision.speedup,
        "pass_line": decision.pass_line,
        "look_window": decision.look_window,
        "decided_block": block,
        "rules_version": rules_version,
    }
    return AttemptDecided.model_validate(fields)


def calibration_started(
    calibration_id: str = "cal-1", *, arena: ArenaCommissioned | None = None, windows: int = 4,
    boots: int = 2, confidence: str = "0.95", block: int = 200,
) -> CalibrationStarted:
    """Returns a CalibrationStarted measuring ``arena``'s engine (``commissioned()``'s when
    None; the calibration names the arena only when one is given)."""
    target = arena or commissioned()
    parts = {name: getattr(target, name).model_dump() for name in ("engine", "model", "hardware")}
    return CalibrationStarted.model_validate({
        "calibration_id": calibration_id,
        "arena_id": arena.arena_id if arena is not None else None,
        **parts,
        "measured_digest": measured_digest(parts["engine"], parts["model"], parts["hardware"]),
        "validator_hotkey": "5Validator", "block": block, "windows": windows, "boots": boots,
        "confidence": confidence,
    })


def calibration_windows(
    costs: tuple[tuple[int, int], ...] = CALIBRATION_EXAMPLE_COSTS, windows: int = 4,
) -> list[CalibrationWindowMeasured]:
    """Returns CalibrationWindowMeasured events of (lane A, lane B) costs in planned order."""
    events = []
    for index, (lane_a, lane_b) in enumerate(costs):
        window = index % windows + 1
        events.append(CalibrationWindowMeasured(
            boot=index // windows + 1, window=window,
            orientation=1 if window <= windows // 2 else 2,
            lane_a_cost_ns=lane_a, lane_b_cost_ns=lane_b, output_tokens=128,
        ))
    return events

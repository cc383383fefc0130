"""Defines the v1 event catalogue (docs/events.md) as frozen, strict pydantic models.

A shipped schema version is never edited: a change adds a new model version and an
upcaster in ``vocabulary.catalogue``. Each model names its ``event_type``, ``schema_version``
and the stream ``category`` it belongs to.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Annotated, Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from vocabulary.fields import (
    ArenaId,
    Block,
    DecimalStr,
    Digest,
    Fixed6,
    Hotkey,
    LocalId,
    NonNegInt,
    PositiveInt,
    Rao,
    Reason,
)
from vocabulary.limits import (
    calibration_boots_max,
    calibration_boots_min,
    calibration_windows_max,
    calibration_windows_min,
)

__all__ = [
    "ALL_EVENTS_V1",
    "FAULT_CODES",
    "POLICY_VERSIONS",
    "ArenaCommissioned",
    "ArenaRetired",
    "AttemptClaimed",
    "AttemptDecided",
    "AuditNodeGraded",
    "AuditPolicy",
    "CalibrationConcluded",
    "CalibrationStarted",
    "CalibrationWindowMeasured",
    "ControlRegistered",
    "CreditGranted",
    "CreditSpent",
    "EmissionPolicySet",
    "Event",
    "HoldReleased",
    "IncumbentAdvanced",
    "InfrastructureFault",
    "PaymentConsumed",
    "PaymentReleased",
    "Policy",
    "PolicyV2",
    "QualificationStarted",
    "QualityGraded",
    "SealedPolicy",
    "SettlementComputed",
    "SubmissionAdmitted",
    "SubmissionArrived",
    "SubmissionExpired",
    "SubmissionHeld",
    "SubmissionRejected",
    "SubmissionRequeued",
    "SubmissionResolved",
    "WindowMeasured",
]

#: The closed list of InfrastructureFault codes (docs/events.md).
FAULT_CODES = (
    "engine_killed",
    "pod_service_restart",
    "adapter_start_failed",
    "adapter_request_failed",
    "adapter_timeout",
    "work_mismatch",
    "evidence_unavailable",
    "unproven_infrastructure_failure",
)

Verdict = Literal["PASS", "FAIL", "NO_DECISION"]
Disposition = Literal["COMPLETE", "REQUEUE", "HOLD"]
FaultCode = Literal[
    "engine_killed",
    "pod_service_restart",
    "adapter_start_failed",
    "adapter_request_failed",
    "adapter_timeout",
    "work_mismatch",
    "evidence_unavailable",
    "unproven_infrastructure_failure",
]
ControlKind = Literal[
    "identity",
    "honest",
    "wrong_mlp",
    "skip_mlp",
    "wrong_cache",
    "corrupted_cache",
    "engine_kill",
    "pod_restart",
    "custom",
]

_STRICT = ConfigDict(frozen=True, extra="forbid", strict=True)


class _Part(BaseModel):
    model_config = _STRICT


class Event(BaseModel):
    """Is the base of every event: frozen, strict, no unknown fields."""

    model_config = _STRICT
    event_type: ClassVar[str]
    schema_version: ClassVar[int] = 1
    category: ClassVar[str | None] = None


# --- arena ----------------------------------------------------------------------------------


class ModelRef(_Part):
    name: str = Field(min_length=1, max_length=256)
    revision: str = Field(min_length=1, max_length=256)


class Hardware(_Part):
    gpu: str = Field(min_length=1, max_length=128)
    count: PositiveInt


class EngineSpec(_Part):
    runtime: Literal["sglang", "torch-reference"]
    runtime_version: str = Field(min_length=1, max_length=128)
    image_digest: str = Field(min_length=1, max_length=256)
    engine_config: dict[str, Any]
    engine_env: dict[str, str]


class AuditPolicy(_Part):
    bar: DecimalStr
    near_miss_band: DecimalStr = "0.03"
    near_miss_rate_max: DecimalStr = "0.01"
    min_calls: PositiveInt


def _z_keys_are_windows(value: dict[str, str]) -> dict[str, str]:
    """Refuses a z key that is not a window index 1..5 spelled plainly (both policies)."""
    for key in value:
        if not key.isdigit() or not 1 <= int(key) <= 5 or str(int(key)) != key:
            raise ValueError(f"z key {key!r} is not a window index 1..5")
    return value


class Policy(_Part):
    """Is the sealed `paired-windows.v1` policy (docs/machines.md)."""

    policy_version: Literal["paired-windows.v1"]
    windows: int = Field(ge=2, le=5)
    z: dict[str, DecimalStr]
    window_noise: DecimalStr
    boot_noise: DecimalStr
    required_gain: DecimalStr = "0"
    futility_margin: DecimalStr | None = None
    audit: AuditPolicy
    reward_margin: DecimalStr = "0.015"
    audit_control_delta_digests: list[Digest] = Field(default_factory=list)
    sla_blocks: PositiveInt = 500_000

    @field_validator("z")
    @classmethod
    def _z_keys_are_windows(cls, value: dict[str, str]) -> dict[str, str]:
        return _z_keys_are_windows(value)

    @model_validator(mode="after")
    def _noise_in_range(self) -> Policy:
        from decimal import Decimal

        noises = [Decimal(self.window_noise), Decimal(self.boot_noise)]
        if any(n < 0 or n > Decimal("0.02") for n in noises):
            raise ValueError("window_noise and boot_noise must lie in [0, 0.02]")
        if all(n == 0 for n in noises):
            raise ValueError("at least one of window_noise and boot_noise must be > 0")
        if Decimal(self.required_gain) < 0:
            raise ValueError("required_gain must be >= 0")
        if any(int(k) > self.windows for k in self.z):
            raise ValueError("z names a window past `windows`")
        return self


#: The seal range of window_noise and boot_noise under paired-windows.v2: wide enough for the
#: window-to-window spread a shared CPU host shows (docs/domain.md, the noise guard).
_V2_NOISE_MAX = Decimal("0.25")
#: noise_guard_alpha's range [10^-9, 0.5): below 10^-9 the bound passes 37 at one degree of
#: freedom (two windows 8.6 σw apart), a seal that says little, and 1 − α nears the last of
#: the 34 digits the bound is computed in; at 0.5 it trips on half of the honest attempts.
_V2_ALPHA_MIN = Decimal("0.000000001")
_V2_ALPHA_MAX = Decimal("0.5")


class PolicyV2(_Part):
    """Is the sealed `paired-windows.v2` policy: v1's fields, a wider noise seal, and the
    noise guard's level ``noise_guard_alpha`` (docs/machines.md)."""

    policy_version: Literal["paired-windows.v2"]
    #: At least 3: with 2 windows no orientation holds two, and the guard could never look.
    windows: int = Field(ge=3, le=5)
    z: dict[str, DecimalStr]
    window_noise: DecimalStr
    boot_noise: DecimalStr
    noise_guard_alpha: DecimalStr
    required_gain: DecimalStr = "0"
    futility_margin: DecimalStr | None = None
    audit: AuditPolicy
    reward_margin: DecimalStr = "0.015"
    audit_control_delta_digests: list[Digest] = Field(default_factory=list)
    sla_blocks: PositiveInt = 500_000

    @field_validator("z")
    @classmethod
    def _z_keys_are_windows(cls, value: dict[str, str]) -> dict[str, str]:
        return _z_keys_are_windows(value)

    @model_validator(mode="after")
    def _sealed_values_in_range(self) -> PolicyV2:
        window_noise, boot_noise = Decimal(self.window_noise), Decimal(self.boot_noise)
        if not 0 <= boot_noise <= _V2_NOISE_MAX:
            raise ValueError("boot_noise must lie in [0, 0.25]")
        if not 0 < window_noise <= _V2_NOISE_MAX:
            raise ValueError("window_noise must lie in (0, 0.25]: the noise guard divides by it")
        if not _V2_ALPHA_MIN <= Decimal(self.noise_guard_alpha) < _V2_ALPHA_MAX:
            raise ValueError("noise_guard_alpha must lie in [0.000000001, 0.5)")
        if Decimal(self.required_gain) < 0:
            raise ValueError("required_gain must be >= 0")
        if any(int(k) > self.windows for k in self.z):
            raise ValueError("z names a window past `windows`")
        return self


#: Every decision-rules version a commission may seal, oldest first.
POLICY_VERSIONS = ("paired-windows.v1", "paired-windows.v2")

#: A commission's sealed policy, picked by its ``policy_version``.
SealedPolicy = Annotated[Policy | PolicyV2, Field(discriminator="policy_version")]


class ArenaCommissioned(Event):
    """Records that an arena was commissioned (or re-commissioned) with a sealed policy."""

    event_type: ClassVar[str] = "ArenaCommissioned"
    category: ClassVar[str | None] = "arena"
    arena_id: ArenaId
    commissioned_block: Block
    model: ModelRef
    hardware: Hardware
    engine: EngineSpec
    policy: SealedPolicy
    fee_rao: Rao
    incumbent_digest: Digest
    emission_share_ppm: int = Field(ge=0, le=1_000_000)


class ControlRegistered(Event):
    """Records a known-good, known-bad or fault control delta of an arena."""

    event_type: ClassVar[str] = "ControlRegistered"
    category: ClassVar[str | None] = "arena"
    control_id: LocalId
    kind: ControlKind
    delta_digest: Digest
    expected_verdict: Verdict
    expected_reason: Reason | None = None


class IncumbentAdvanced(Event):
    """Records a new incumbent; it starts a new reward group."""

    event_type: ClassVar[str] = "IncumbentAdvanced"
    category: ClassVar[str | None] = "arena"
    incumbent_digest: Digest
    block: Block
    reason: Reason


class ArenaRetired(Event):
    """Records that an arena takes no new arrivals."""

    event_type: ClassVar[str] = "ArenaRetired"
    category: ClassVar[str | None] = "arena"
    block: Block
    reason: Reason


# --- submission -----------------------------------------------------------------------------


class Arrival(_Part):
    block: Block
    event_index: NonNegInt
    event_subindex: NonNegInt


class SubmissionArrived(Event):
    """Records a miner's submission as it arrived on chain."""

    event_type: ClassVar[str] = "SubmissionArrived"
    category: ClassVar[str | None] = "submission"
    submission_id: Digest
    arena_id: ArenaId
    miner_hotkey: Hotkey
    content_hash: Digest
    delta_digest: Digest
    target: str = Field(min_length=1, max_length=256)
    arrival: Arrival
    payment_ref: LocalId | None = None


class Fee(_Part):
    kind: Literal["payment", "credit", "waived"]
    ref: str = Field(max_length=64)
    amount_rao: Rao


class SubmissionAdmitted(Event):
    """Records that a submission passed intake and is queued."""

    event_type: ClassVar[str] = "SubmissionAdmitted"
    category: ClassVar[str | None] = "submission"
    block: Block
    fee: Fee


class SubmissionRejected(Event):
    """Records that intake refused a submission (terminal)."""

    event_type: ClassVar[str] = "SubmissionRejected"
    category: ClassVar[str | None] = "submission"
    block: Block
    reason: Reason


class QualificationStarted(Event):
    """Records that an attempt was claimed for the submission."""

    event_type: ClassVar[str] = "QualificationStarted"
    category: ClassVar[str | None] = "submission"
    attempt_id: LocalId


class SubmissionResolved(Event):
    """Records the verdict of the submission's current attempt."""

    event_type: ClassVar[str] = "SubmissionResolved"
    category: ClassVar[str | None] = "submission"
    attempt_id: LocalId
    verdict: Verdict
    reason: Reason
    disposition: Disposition


class SubmissionHeld(Event):
    """Records that an operator or the retry budget parked the submission."""

    event_type: ClassVar[str] = "SubmissionHeld"
    category: ClassVar[str | None] = "submission"
    reason: Reason
    block: Block


class HoldReleased(Event):
    """Records that an operator released a hold; the submission is queued again."""

    event_type: ClassVar[str] = "HoldReleased"
    category: ClassVar[str | None] = "submission"
    reason: Reason
    block: Block
    operator: Hotkey


class SubmissionRequeued(Event):
    """Records that a completed NO_DECISION was queued again."""

    event_type: ClassVar[str] = "SubmissionRequeued"
    category: ClassVar[str | None] = "submission"
    reason: Reason
    block: Block


class SubmissionExpired(Event):
    """Records that a submission outlived its SLA in blocks (terminal)."""

    event_type: ClassVar[str] = "SubmissionExpired"
    category: ClassVar[str | None] = "submission"
    block: Block
    reason: Reason


# --- payment and credit ---------------------------------------------------------------------


class PaymentConsumed(Event):
    """Records that an on-chain payment paid one submission's evaluation fee."""

    event_type: ClassVar[str] = "PaymentConsumed"
    category: ClassVar[str | None] = "payment"
    payment_ref: LocalId
    submission_id: Digest
    arena_id: ArenaId
    amount_rao: Rao


class PaymentReleased(Event):
    """Records that a consumed payment was given back (refund)."""

    event_type: ClassVar[str] = "PaymentReleased"
    category: ClassVar[str | None] = "payment"
    submission_id: Digest
    reason: Reason


class CreditGranted(Event):
    """Records an operator-granted evaluation credit for a hotkey."""

    event_type: ClassVar[str] = "CreditGranted"
    category: ClassVar[str | None] = "credit"
    credit_id: LocalId
    hotkey: Hotkey
    amount_rao: Rao
    note: str = Field(max_length=512)


class CreditSpent(Event):
    """Records that a credit paid one submission's evaluation."""

    event_type: ClassVar[str] = "CreditSpent"
    category: ClassVar[str | None] = "credit"
    submission_id: Digest


# --- attempt --------------------------------------------------------------------------------


class AttemptClaimed(Event):
    """Records that a validator claimed one qualification run on one pair."""

    event_type: ClassVar[str] = "AttemptClaimed"
    category: ClassVar[str | None] = "attempt"
    attempt_id: LocalId
    submission_id: Digest
    arena_id: ArenaId
    commission_digest: Digest
    pair_id: LocalId
    validator_hotkey: Hotkey
    claimed_block: Block
    plan: Literal["normal", "calibration_observation"]


class WindowMeasured(Event):
    """Records one paired speed window (costs in ns, output token counts)."""

    event_type: ClassVar[str] = "WindowMeasured"
    category: ClassVar[str | None] = "attempt"
    window: int = Field(ge=1, le=5)
    orientation: int = Field(ge=1, le=2)  # strict int: True is not a window orientation
    stock_cost_ns: PositiveInt
    candidate_cost_ns: PositiveInt
    stock_output_tokens: NonNegInt
    candidate_output_tokens: NonNegInt
    stock_decode_tps: DecimalStr | None = None
    candidate_decode_tps: DecimalStr | None = None
    stock_ttft_ms: DecimalStr | None = None
    candidate_ttft_ms: DecimalStr | None = None


class AuditNodeGraded(Event):
    """Records the eager audit of one node on one rank."""

    event_type: ClassVar[str] = "AuditNodeGraded"
    category: ClassVar[str | None] = "attempt"
    node: str = Field(min_length=1, max_length=256)
    rank: NonNegInt
    calls: NonNegInt
    violations: NonNegInt
    near_misses: NonNegInt
    uncomparable: NonNegInt
    min_score: DecimalStr
    bar: DecimalStr


class QualityGraded(Event):
    """Records the pristine quality check of the candidate."""

    event_type: ClassVar[str] = "QualityGraded"
    category: ClassVar[str | None] = "attempt"
    tokens_scored: NonNegInt
    argmax_agreement: DecimalStr
    drift_within_envelope: bool
    regression: bool


class InfrastructureFault(Event):
    """Records an infrastructure fault that removes the attempt's authority."""

    event_type: ClassVar[str] = "InfrastructureFault"
    category: ClassVar[str | None] = "attempt"
    code: FaultCode
    stage: str = Field(min_length=1, max_length=64)
    detail: str = Field(max_length=2048)


class AttemptDecided(Event):
    """Records the attempt's verdict exactly as the attempt machine derived it."""

    event_type: ClassVar[str] = "AttemptDecided"
    category: ClassVar[str | None] = "attempt"
    verdict: Verdict
    reason: Reason
    disposition: Disposition
    speedup: Fixed6 | None
    pass_line: Fixed6 | None
    look_window: int | None = Field(ge=1, le=5)
    decided_block: Block
    #: The policy_version of the commission the attempt was claimed under.
    rules_version: Literal["paired-windows.v1", "paired-windows.v2"]


# --- settlement -----------------------------------------------------------------------------


SettlementRules = Literal["settlement-rules.v1", "settlement-rules.v2"]


class EmissionPolicySet(Event):
    """Records the emission policy settlements use from this position on.

    ``rules_version`` and ``control_max_age_blocks`` came with settlement-rules.v2 as
    optional fields: a policy that omits them is settlement-rules.v1, so the payloads
    recorded before them keep their bytes. ``control_max_age_blocks`` is given exactly
    under settlement-rules.v2.
    """

    event_type: ClassVar[str] = "EmissionPolicySet"
    category: ClassVar[str | None] = "settlement"
    half_life_blocks: PositiveInt
    burn_hotkey: Hotkey
    validator_hotkey: Hotkey
    rules_version: SettlementRules = "settlement-rules.v1"
    control_max_age_blocks: PositiveInt | None = None

    @model_validator(mode="after")
    def _gate_age_with_v2(self) -> EmissionPolicySet:
        gated = self.rules_version == "settlement-rules.v2"
        if gated and self.control_max_age_blocks is None:
            raise ValueError("settlement-rules.v2 needs control_max_age_blocks")
        if not gated and self.control_max_age_blocks is not None:
            raise ValueError(
                f"control_max_age_blocks is a settlement-rules.v2 setting, not "
                f"{self.rules_version}"
            )
        return self


class SettlementComputed(Event):
    """Records a settlement: claims, weights (ppm), fees and their digest.

    A settlement-rules.v2 payload also names its ``rules_version`` and lists the arenas it
    ``suspensions`` (both absent from a v1 payload, whose bytes stay as they were).
    """

    event_type: ClassVar[str] = "SettlementComputed"
    category: ClassVar[str | None] = "settlement"
    block: Block
    as_of_position: NonNegInt
    claims: list[dict[str, Any]]
    weights_ppm: dict[str, int]
    fees: dict[str, Any]
    settlement_digest: Digest
    rules_version: Literal["settlement-rules.v2"] | None = None
    suspensions: list[dict[str, Any]] | None = None

    @model_validator(mode="after")
    def _suspensions_with_v2(self) -> SettlementComputed:
        if (self.rules_version is None) != (self.suspensions is None):
            raise ValueError("rules_version and suspensions come together (settlement-rules.v2)")
        return self


# --- calibration ----------------------------------------------------------------------------


class CalibrationStarted(Event):
    """Records an A/A noise calibration: what it measures and its plan (docs/calibration.md)."""

    event_type: ClassVar[str] = "CalibrationStarted"
    category: ClassVar[str | None] = "calibration"
    calibration_id: LocalId
    #: The arena whose commissioned engine is measured; null for an engine no arena seals yet.
    arena_id: ArenaId | None
    model: ModelRef
    hardware: Hardware
    engine: EngineSpec
    #: digest("arena-ledger.calibration-target", {engine, hardware, model}).
    measured_digest: Digest
    validator_hotkey: Hotkey
    block: Block
    #: Windows per boot round, laid out as an attempt's W.
    windows: int = Field(ge=calibration_windows_min, le=calibration_windows_max)
    boots: int = Field(ge=calibration_boots_min, le=calibration_boots_max)
    confidence: DecimalStr

    @field_validator("confidence")
    @classmethod
    def _confidence_in_range(cls, value: str) -> str:
        number = Decimal(value)
        if not Decimal("0.5") <= number <= Decimal("0.9999") or number != round(number, 4):
            raise ValueError("confidence must lie in [0.5, 0.9999] with at most 4 places")
        return value


class CalibrationWindowMeasured(Event):
    """Records one A/A window: stock on both lanes, each lane's cost in ns."""

    event_type: ClassVar[str] = "CalibrationWindowMeasured"
    category: ClassVar[str | None] = "calibration"
    boot: int = Field(ge=1, le=calibration_boots_max)
    window: int = Field(ge=1, le=5)
    orientation: int = Field(ge=1, le=2)
    lane_a_cost_ns: PositiveInt
    lane_b_cost_ns: PositiveInt
    output_tokens: NonNegInt


class CalibrationConcluded(Event):
    """Records the noise estimates, bounds and seal exactly as the calibration rules derive
    them from the calibration's windows."""

    event_type: ClassVar[str] = "CalibrationConcluded"
    category: ClassVar[str | None] = "calibration"
    window_noise: Fixed6
    boot_noise: Fixed6
    window_noise_bound: Fixed6
    boot_noise_bound: Fixed6
    window_dof: PositiveInt
    boot_dof: PositiveInt
    seal_window_noise: DecimalStr
    seal_boot_noise: DecimalStr
    seal_policy_version: Literal["paired-windows.v1", "paired-windows.v2"] | None
    concluded_block: Block
    rules_version: Literal["calibration.v1"]


ALL_EVENTS_V1: tuple[type[Event], ...] = (
    ArenaCommissioned,
    ControlRegistered,
    IncumbentAdvanced,
    ArenaRetired,
    SubmissionArrived,
    SubmissionAdmitted,
    SubmissionRejected,
    QualificationStarted,
    SubmissionResolved,
    SubmissionHeld,
    HoldReleased,
    SubmissionRequeued,
    SubmissionExpired,
    PaymentConsumed,
    PaymentReleased,
    CreditGranted,
    CreditSpent,
    AttemptClaimed,
    WindowMeasured,
    AuditNodeGraded,
    QualityGraded,
    InfrastructureFault,
    AttemptDecided,
    EmissionPolicySet,
    SettlementComputed,
    CalibrationStarted,
    CalibrationWindowMeasured,
    CalibrationConcluded,
)

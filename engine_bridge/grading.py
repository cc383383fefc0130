"""Grades audited calls: what to audit, the bar and band, and each node's tally of calls.

These are plain values the engine port speaks in (``Engine.audit`` takes an ``AuditSpec``
and returns ``NodeTally``s), so they live apart from the hooks that run inside an engine.
"""

from __future__ import annotations

import math
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, Literal

from engine_bridge.decimals import canonical_decimal, floor_decimal, parse_decimal
from engine_bridge.deltas import DEFAULT_TARGET_MODULES, DeltaSpec
from engine_bridge.limits import audit_min_score_places

__all__ = [
    "DEFAULT_BAR",
    "DEFAULT_NEAR_MISS_BAND",
    "AuditSpec",
    "NodeTally",
    "Verdict",
    "classify",
]

#: The float32 bar and band of policy paired-windows.v1 (docs/engine.md, eager audit).
DEFAULT_BAR = "0.99999"
DEFAULT_NEAR_MISS_BAND = "0.03"
Verdict = Literal["ok", "near_miss", "violation", "uncomparable"]


@dataclass(frozen=True)
class AuditSpec:
    """Says what to audit: the candidate delta, the node patterns, bar and band."""

    candidate: DeltaSpec
    target_modules: tuple[str, ...] = DEFAULT_TARGET_MODULES
    bar: str = DEFAULT_BAR
    near_miss_band: str = DEFAULT_NEAR_MISS_BAND
    session: str = field(default_factory=lambda: uuid.uuid4().hex)
    receipts_dir: str | None = None

    def __post_init__(self) -> None:
        parse_decimal(self.bar, field="bar")
        parse_decimal(self.near_miss_band, field="near_miss_band")

    def to_config(self) -> dict[str, Any]:
        """Returns the JSON-ready hook ``config`` SGLang hands to each factory."""
        return {"candidate": self.candidate.to_dict(), "target_modules": list(self.target_modules),
                "bar": self.bar, "near_miss_band": self.near_miss_band,
                "session": self.session, "receipts_dir": self.receipts_dir}

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> AuditSpec:
        """Rebuilds the spec inside a scheduler process from the hook config."""
        return cls(DeltaSpec.from_dict(config["candidate"]), tuple(config["target_modules"]),
                   config["bar"], config["near_miss_band"], config["session"],
                   config.get("receipts_dir"))


def classify(score: float | None, bar: Decimal, band: Decimal) -> Verdict:
    """Grades one call's score against the bar (exact decimal comparison)."""
    if score is None or not math.isfinite(score):
        return "uncomparable"
    exact = Decimal(score)
    if exact >= bar:
        return "ok"
    return "near_miss" if exact >= bar - band else "violation"


@dataclass
class NodeTally:
    """Counts one node's audited calls on one rank."""

    node: str
    rank: int
    calls: int = 0
    violations: int = 0
    near_misses: int = 0
    uncomparable: int = 0
    min_score: float | None = None
    first_error: str | None = None
    #: The first host failure that kept a call from being compared (the call is not counted).
    infrastructure_error: str | None = None

    def record(self, score: float | None, bar: Decimal, band: Decimal) -> None:
        """Adds one call with its score (None when uncomparable)."""
        self.calls += 1
        verdict = classify(score, bar, band)
        if verdict == "uncomparable":
            self.uncomparable += 1
            return
        assert score is not None
        self.min_score = score if self.min_score is None else min(self.min_score, score)
        self.violations += verdict == "violation"
        self.near_misses += verdict == "near_miss"

    def merge(self, other: NodeTally) -> None:
        """Adds another tally of the same node and rank (e.g. two receipt files)."""
        self.calls += other.calls
        self.violations += other.violations
        self.near_misses += other.near_misses
        self.uncomparable += other.uncomparable
        if other.min_score is not None:
            self.min_score = other.min_score if self.min_score is None else min(
                self.min_score, other.min_score)
        self.first_error = self.first_error or other.first_error
        self.infrastructure_error = self.infrastructure_error or other.infrastructure_error

    def to_payload(self, bar: str) -> dict[str, Any]:
        """Returns the AuditNodeGraded payload; min_score is "0" with no comparable call."""
        low = 0.0 if self.min_score is None else self.min_score
        return {"node": self.node, "rank": self.rank, "calls": self.calls,
                "violations": self.violations, "near_misses": self.near_misses,
                "uncomparable": self.uncomparable,
                "min_score": floor_decimal(low, audit_min_score_places),
                "bar": canonical_decimal(Decimal(bar))}

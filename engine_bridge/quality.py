"""Grades pristine quality: the candidate's next-token choices against a fresh stock engine.

A pristine stock lane (no hooks, no delta) on lane A generates the slice greedily. That
lane and a candidate lane on lane B then score every sequence (prompt + stock continuation)
teacher-forced, so one early disagreement cannot cascade into the rest of a sequence.
Finally a second pristine stock lane on lane B scores the same sequences: the *reference
check*. Thresholds live in :class:`QualityPolicy`:

* ``argmax_agreement``: the share of scored positions where the candidate's most likely
  token is the stock greedy token.
* ``regression`` (FAIL ``quality_regression``): agreement below ``agreement_min``, or a
  *candidate drift* (the largest absolute difference, in nats, between the log-probabilities
  the candidate and stock give the stock token) above ``candidate_drift_max_nats``, or NaN.
* ``drift_within_envelope`` (else NO_DECISION ``quality_drift``): the *reference drift*,
  the same measure between the two pristine stock lanes, is within
  ``reference_envelope_nats``. It says whether the comparison itself has authority: when
  stock does not reproduce stock across the two lanes (nondeterministic kernels, mismatched
  devices), no candidate can be judged, which is never the miner's fault.
"""
from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from engine_bridge.decimals import floor_decimal, parse_decimal
from engine_bridge.deltas import DeltaSpec
from engine_bridge.limits import quality_ratio_places
from engine_bridge.prompt_slice import ReplaySlice
from engine_bridge.protocol import (
    STAGE_QUALITY,
    Engine,
    FaultCode,
    Lane,
    TokenScores,
    engine_fault,
    wrap_unexpected,
)
from vocabulary.errors import LedgerError

__all__ = [
    "DEFAULT_AGREEMENT_MIN",
    "DEFAULT_CANDIDATE_DRIFT_MAX_NATS",
    "DEFAULT_REFERENCE_ENVELOPE_NATS",
    "QualityPolicy",
    "QualityReport",
    "assess_quality",
    "grade_quality",
]

#: Below this share of agreeing positions the candidate regresses quality.
DEFAULT_AGREEMENT_MIN = "0.99"
#: Largest candidate-vs-stock teacher-token log-probability gap (nats) that is not a regression.
DEFAULT_CANDIDATE_DRIFT_MAX_NATS = "0.05"
#: Largest stock-vs-stock gap (nats) across lanes for which the comparison has authority.
DEFAULT_REFERENCE_ENVELOPE_NATS = "0.01"


@dataclass(frozen=True)
class QualityPolicy:
    """Holds the quality thresholds as decimal strings."""

    agreement_min: str = DEFAULT_AGREEMENT_MIN
    candidate_drift_max_nats: str = DEFAULT_CANDIDATE_DRIFT_MAX_NATS
    reference_envelope_nats: str = DEFAULT_REFERENCE_ENVELOPE_NATS

    def __post_init__(self) -> None:
        parse_decimal(self.agreement_min, field="agreement_min")
        parse_decimal(self.candidate_drift_max_nats, field="candidate_drift_max_nats")
        parse_decimal(self.reference_envelope_nats, field="reference_envelope_nats")


@dataclass(frozen=True)
class QualityReport:
    """Holds the QualityGraded payload plus the raw figures behind it (for logs and docs)."""

    payload: dict[str, Any]
    agreeing: int
    candidate_drift_nats: float
    reference_drift_nats: float


def _max_gap(left: Sequence[TokenScores], right: Sequence[TokenScores]) -> float:
    gap = 0.0
    for a, b in zip(left, right, strict=True):
        if len(a.teacher_logprobs) != len(b.teacher_logprobs):
            raise engine_fault(FaultCode.WORK_MISMATCH, "quality scores cover different "
                               "positions on two lanes", stage=STAGE_QUALITY)
        for x, y in zip(a.teacher_logprobs, b.teacher_logprobs, strict=True):
            d = abs(x - y)
            gap = d if math.isnan(d) or d > gap else gap
    return gap


def _within(value: float, limit: str) -> bool:
    return math.isfinite(value) and Decimal(value) <= Decimal(limit)


def assess_quality(stock_tokens: Sequence[Sequence[int]], stock: Sequence[TokenScores],
                   candidate: Sequence[TokenScores], reference: Sequence[TokenScores],
                   policy: QualityPolicy = QualityPolicy()) -> QualityReport:
    """Compares candidate and reference-stock scores with stock scores over the stock tokens.

    Every lane must have scored one entry per stock sequence: a lane that returns another
    number is ``work_mismatch`` (an EngineFault, like any other disagreement in shape).
    """
    for lane, scores in (("stock", stock), ("candidate", candidate), ("reference", reference)):
        if len(scores) != len(stock_tokens):
            raise engine_fault(FaultCode.WORK_MISMATCH, f"the {lane} lane scored "
                               f"{len(scores)} sequences, not {len(stock_tokens)}",
                               stage=STAGE_QUALITY)
    scored = agreeing = 0
    for tokens, c in zip(stock_tokens, candidate, strict=True):
        if len(tokens) != len(c.argmax_ids):
            raise engine_fault(FaultCode.WORK_MISMATCH, "candidate scores cover different "
                               "positions than the stock tokens", stage=STAGE_QUALITY)
        scored += len(tokens)
        agreeing += sum(int(a == t) for a, t in zip(c.argmax_ids, tokens, strict=True))
    if scored == 0:
        raise engine_fault(FaultCode.EVIDENCE_UNAVAILABLE, "no token was scored",
                           stage=STAGE_QUALITY)
    candidate_drift = _max_gap(stock, candidate)
    reference_drift = _max_gap(stock, reference)
    share = Decimal(agreeing) / Decimal(scored)
    regression = (share < Decimal(policy.agreement_min)
                  or not _within(candidate_drift, policy.candidate_drift_max_nats))
    payload = {"tokens_scored": scored,
               "argmax_agreement": floor_decimal(share, quality_ratio_places),
               "drift_within_envelope": _within(reference_drift,
                                                policy.reference_envelope_nats),
               "regression": regression}
    return QualityReport(payload, agreeing, candidate_drift, reference_drift)


def grade_quality(engine: Engine, candidate: DeltaSpec, replay: ReplaySlice,
                  policy: QualityPolicy = QualityPolicy()) -> QualityReport:
    """Runs the pristine comparison and the reference check on fresh lanes; returns the report.

    ``report.payload`` is the QualityGraded payload. Raises EngineFault (stage "quality");
    any other exception from a lane becomes ``unproven_infrastructure_failure``.
    """
    try:
        stock = engine.boot_lane("A", None, stage=STAGE_QUALITY)
        try:
            generated, sequences, first, stock_scores = _pristine(stock, replay)
            cand_scores = _score_on(engine, "B", candidate, sequences, first)
            reference_scores = _score_on(engine, "B", None, sequences, first)
        finally:
            stock.shutdown()
        return assess_quality(generated, stock_scores, cand_scores, reference_scores, policy)
    except LedgerError:
        raise
    except Exception as exc:
        raise wrap_unexpected(exc, stage=STAGE_QUALITY,
                              code=FaultCode.UNPROVEN_INFRASTRUCTURE_FAILURE) from exc


def _pristine(stock: Lane, replay: ReplaySlice) -> tuple[
        tuple[tuple[int, ...], ...], list[list[int]], list[int], list[TokenScores]]:
    stock.ready()
    generated = stock.run_window(replay).output_token_ids
    sequences = [list(p) + list(g) for p, g in zip(replay.requests, generated, strict=True)]
    first = [replay.prompt_tokens] * len(sequences)
    return generated, sequences, first, stock.score_tokens(sequences, first)


def _score_on(engine: Engine, lane_id: str, delta: DeltaSpec | None,
              sequences: list[list[int]], first: list[int]) -> list[TokenScores]:
    lane = engine.boot_lane(lane_id, delta, stage=STAGE_QUALITY)
    try:
        lane.ready()
        return lane.score_tokens(sequences, first)
    finally:
        lane.shutdown()

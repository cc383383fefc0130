"""Tests quality grading arithmetic on synthetic scores and through the fake engine."""

from __future__ import annotations

import pytest

from engine_bridge.deltas import registered
from engine_bridge.prompt_slice import load_replay_slice
from engine_bridge.protocol import FakeEngine, TokenScores
from engine_bridge.quality import QualityPolicy, assess_quality, grade_quality
from vocabulary.errors import EngineFault


def _scores(ids: list[int], lps: list[float]) -> TokenScores:
    return TokenScores(tuple(ids), tuple(lps))


STOCK = [_scores([1, 2, 3], [-1.0, -2.0, -0.5])]


def test_identical_scores_agree_fully_within_envelope() -> None:
    report = assess_quality([[1, 2, 3]], STOCK, STOCK, STOCK)
    assert report.payload == {"tokens_scored": 3, "argmax_agreement": "1",
                              "drift_within_envelope": True, "regression": False}
    assert report.candidate_drift_nats == report.reference_drift_nats == 0.0


def test_agreement_is_floored_and_regression_uses_the_policy() -> None:
    tokens = [list(range(128))]
    stock = [_scores(list(range(128)), [-1.0] * 128)]
    one_off = [_scores([999, *range(1, 128)], [-1.0] * 128)]
    report = assess_quality(tokens, stock, one_off, stock)
    assert report.payload["argmax_agreement"] == "0.992187"  # 127/128 rounded down
    assert report.payload["regression"] is False
    strict = assess_quality(tokens, stock, one_off, stock, QualityPolicy(agreement_min="0.995"))
    assert strict.payload["regression"] is True


@pytest.mark.parametrize(("candidate_lp", "regression"), [
    (-1.04, False), (-1.06, True), (float("nan"), True)])
def test_candidate_drift_beyond_its_limit_is_a_regression(candidate_lp: float,
                                                          regression: bool) -> None:
    stock = [_scores([5], [-1.0])]
    report = assess_quality([[5]], stock, [_scores([5], [candidate_lp])], stock)
    assert report.payload["regression"] is regression
    assert report.payload["drift_within_envelope"] is True  # stock reproduced itself


@pytest.mark.parametrize(("reference_lp", "within"), [
    (-1.005, True), (-1.02, False), (float("nan"), False)])
def test_reference_drift_decides_the_envelope(reference_lp: float, within: bool) -> None:
    stock = [_scores([5], [-1.0])]
    report = assess_quality([[5]], stock, stock, [_scores([5], [reference_lp])])
    assert report.payload["drift_within_envelope"] is within
    assert report.payload["regression"] is False


def test_mismatched_positions_are_work_mismatch() -> None:
    with pytest.raises(EngineFault) as caught:
        assess_quality([[1, 2]], [_scores([1, 2], [0.0, 0.0])], [_scores([1], [0.0])],
                       [_scores([1, 2], [0.0, 0.0])])
    assert caught.value.context["fault_code"] == "work_mismatch"


def test_grade_quality_through_the_fake_engine_shuts_lanes() -> None:
    engine = FakeEngine(disagree=3, logprob_shift=0.5)
    report = grade_quality(engine, registered("wrong_mlp"), load_replay_slice())
    assert report.payload == {"tokens_scored": 128, "argmax_agreement": "0.976562",
                              "drift_within_envelope": True, "regression": True}
    assert engine.live == []
    assert engine.booted == [("A", None, "quality"), ("B", "wrong_mlp", "quality"),
                             ("B", None, "quality")]


def test_unreproducible_reference_is_outside_the_envelope() -> None:
    engine = FakeEngine(reference_shift=0.02)
    report = grade_quality(engine, registered("faithful"), load_replay_slice())
    assert report.payload["drift_within_envelope"] is False
    assert report.payload["regression"] is False


def test_agreement_at_exactly_the_minimum_is_no_regression() -> None:
    # 99 of 100 positions agree: the share equals agreement_min (0.99), which passes.
    tokens = [list(range(100))]
    stock = [_scores(list(range(100)), [-1.0] * 100)]
    one_off = [_scores([999, *range(1, 100)], [-1.0] * 100)]
    report = assess_quality(tokens, stock, one_off, stock)
    assert (report.agreeing, report.payload["argmax_agreement"]) == (99, "0.99")
    assert report.payload["regression"] is False
    two_off = [_scores([999, 998, *range(2, 100)], [-1.0] * 100)]
    assert assess_quality(tokens, stock, two_off, stock).payload["regression"] is True


def test_drift_at_exactly_its_limit_is_within_it() -> None:
    # 0.5 nats is exact in binary, so the drift equals the limit to the last digit.
    stock = [_scores([5], [-1.0])]
    shifted = [_scores([5], [-1.5])]
    policy = QualityPolicy(candidate_drift_max_nats="0.5", reference_envelope_nats="0.5")
    at_limit = assess_quality([[5]], stock, shifted, shifted, policy)
    assert at_limit.candidate_drift_nats == at_limit.reference_drift_nats == 0.5
    assert at_limit.payload["regression"] is False
    assert at_limit.payload["drift_within_envelope"] is True
    below = QualityPolicy(candidate_drift_max_nats="0.4999", reference_envelope_nats="0.4999")
    past = assess_quality([[5]], stock, shifted, shifted, below)
    assert past.payload["regression"] is True
    assert past.payload["drift_within_envelope"] is False


def test_the_largest_gap_of_all_positions_is_the_drift() -> None:
    stock = [_scores([1, 2], [-1.0, -1.0]), _scores([3], [-1.0])]
    candidate = [_scores([1, 2], [-1.25, -1.0]), _scores([3], [-1.5])]
    report = assess_quality([[1, 2], [3]], stock, candidate, stock)
    assert report.candidate_drift_nats == 0.5
    assert report.payload["tokens_scored"] == 3


def test_nothing_scored_is_evidence_unavailable() -> None:
    empty = [_scores([], [])]
    with pytest.raises(EngineFault) as caught:
        assess_quality([[]], empty, empty, empty)
    assert caught.value.context["fault_code"] == "evidence_unavailable"
    assert "no token was scored" in caught.value.message


@pytest.mark.parametrize("short", ["stock", "candidate", "reference"])
def test_a_lane_scoring_another_number_of_sequences_is_work_mismatch(short: str) -> None:
    two = [_scores([1], [-1.0]), _scores([2], [-1.0])]
    lanes = {"stock": two, "candidate": two, "reference": two, short: two[:1]}
    with pytest.raises(EngineFault) as caught:
        assess_quality([[1], [2]], lanes["stock"], lanes["candidate"], lanes["reference"])
    assert caught.value.context["fault_code"] == "work_mismatch"
    assert f"the {short} lane scored 1 sequences, not 2" in caught.value.message


def test_a_lane_scoring_other_positions_is_work_mismatch() -> None:
    stock = [_scores([1, 2], [-1.0, -1.0])]
    shorter = [_scores([1, 2], [-1.0])]
    with pytest.raises(EngineFault) as caught:
        assess_quality([[1, 2]], stock, stock, shorter)
    assert caught.value.context["fault_code"] == "work_mismatch"
    assert "different positions on two lanes" in caught.value.message

"""Checks the paired-windows.v1 arithmetic against DOMAIN §6, digit for digit."""

from __future__ import annotations

import decimal
from decimal import Decimal

import pytest

from machines import samples
from machines.arithmetic import (
    CONTEXT,
    FAULT_DISPOSITIONS,
    NodeTally,
    SpeedResult,
    audit_outcome,
    classify_final,
    compile_policy,
    fault_disposition,
    futile,
    ln,
    look,
    node_outcome,
    quality_outcome,
    ratio,
)


def _worked_look() -> tuple[Decimal, Decimal, SpeedResult]:
    params = compile_policy(samples.worked_example_policy())
    r1 = ratio(990_000_000 + 985_000_000, 2_000_000_000)
    seen = look(params, 3, r1, ln(r1), ratio(975_000_000, 1_000_000_000))
    assert seen.outcome == "pass"
    return seen.speedup, seen.pass_line or Decimal(0), SpeedResult.of_look(seen)


def test_worked_example_gives_the_recorded_digits() -> None:
    speedup, line, result = _worked_look()
    assert str(speedup)[:9] == "1.0191289"  # S ≈ 1.0191290
    assert str(line)[:9] == "0.0188843"  # L ≈ 0.0188844
    assert (result.verdict, result.reason) == ("PASS", "")
    assert (result.speedup, result.pass_line, result.look_window) == ("1.019129", "0.018884", 3)


def test_worked_example_se_and_ratios() -> None:
    params = compile_policy(samples.worked_example_policy())
    line = params.lines[3]
    assert line is not None
    assert (line.n1, line.n2) == (2, 1)
    assert str(line.se).startswith("0.00935414")  # SE ≈ 0.0093541
    assert ratio(1_975_000_000, 2_000_000_000) == Decimal("0.9875")
    assert params.lines[1] is None and params.lines[2] is None


def test_arithmetic_ignores_the_callers_decimal_context() -> None:
    expected = _worked_look()
    with decimal.localcontext() as ctx:
        ctx.prec = 5
        ctx.rounding = decimal.ROUND_DOWN
        assert _worked_look() == expected
    with decimal.localcontext() as ctx:
        ctx.prec = 3
        ctx.traps[decimal.Inexact] = ctx.traps[decimal.Rounded] = True
        assert _worked_look() == expected


def test_orientation_split_follows_floor_of_half() -> None:
    for windows, first in ((2, 1), (3, 1), (4, 2), (5, 2)):
        z = {str(k): "2" for k in range(first + 1, windows + 1)}
        params = compile_policy(samples.policy(windows=windows, z=z))
        assert [params.orientation(k) for k in range(1, windows + 1)] == (
            [1] * first + [2] * (windows - first)
        )


def test_futility_compares_r1_with_one_plus_margin() -> None:
    params = compile_policy(samples.policy(futility_margin="0.05"))
    assert futile(params, Decimal("1.050000001"))
    assert not futile(params, Decimal("1.05"))
    assert not futile(compile_policy(samples.policy()), Decimal("9"))
    assert SpeedResult.futility(params) == SpeedResult("FAIL", "futility", None, None, 2)


def test_final_classification_uses_the_mirror_of_the_pass_line() -> None:
    line = Decimal("0.02")
    mirror = CONTEXT.divide(Decimal(1), Decimal("1.02"))
    assert classify_final(mirror, line) == "candidate_slower"
    assert classify_final(mirror + Decimal("1e-30"), line) == "speed_threshold_not_met"
    assert classify_final(Decimal("1.01"), line) == "speed_threshold_not_met"
    assert classify_final(Decimal(1), None) == "candidate_slower"
    assert classify_final(Decimal("1.0001"), None) == "speed_threshold_not_met"


def test_last_look_fails_slower_or_not_met() -> None:
    params = compile_policy(samples.worked_example_policy())
    r1 = Decimal("1.03")
    slower = look(params, 4, r1, ln(r1), Decimal("1.03"))
    assert slower.outcome == "candidate_slower"
    r1 = Decimal("0.995")
    not_met = look(params, 4, r1, ln(r1), Decimal("0.995"))
    assert not_met.outcome == "speed_threshold_not_met"
    assert SpeedResult.of_look(not_met).reason == "speed_threshold_not_met"
    assert SpeedResult.of_look(not_met).pass_line is not None


def test_a_look_without_z_cannot_pass() -> None:
    params = compile_policy(samples.policy(z={"4": "1.5"}))
    r1 = Decimal("0.5")
    early = look(params, 3, r1, ln(r1), Decimal("0.5"))
    assert early.outcome == "continue" and early.pass_line is None


def test_required_gain_raises_the_line() -> None:
    plain = compile_policy(samples.policy()).lines[3]
    gained = compile_policy(samples.policy(required_gain="0.01")).lines[3]
    assert plain is not None and gained is not None
    assert plain.pass_line is not None and gained.pass_line is not None
    grown = CONTEXT.multiply(CONTEXT.add(1, plain.pass_line), Decimal("1.01"))
    expected = CONTEXT.subtract(grown, 1)
    assert abs(gained.pass_line - expected) < Decimal("1e-30")


@pytest.mark.parametrize(
    ("tally", "outcome"),
    [
        (NodeTally(64, 0, 0, 0), ""),
        (NodeTally(64, 1, 0, 0), "slot_audit_failed"),
        (NodeTally(64, 0, 0, 1), "slot_audit_failed"),
        (NodeTally(100, 0, 1, 0), ""),  # exactly 1 % is not above 1 %
        (NodeTally(100, 0, 2, 0), "slot_audit_failed"),
        (NodeTally(7, 0, 0, 0), "audit_not_covered"),
        (NodeTally(7, 1, 0, 0), "slot_audit_failed"),  # a violation beats thin coverage
    ],
)
def test_node_outcomes(tally: NodeTally, outcome: str) -> None:
    params = compile_policy(samples.policy())  # min_calls 8, rate max 0.01
    assert node_outcome(params, tally) == outcome


def test_audit_outcome_aggregates_nodes() -> None:
    params = compile_policy(samples.policy())
    ok, thin, bad = NodeTally(64), NodeTally(3), NodeTally(64, 1)
    assert audit_outcome(params, {}) == "audit_not_covered"
    assert audit_outcome(params, {"a": ok}) == ""
    assert audit_outcome(params, {"a": ok, "b": thin}) == "audit_not_covered"
    assert audit_outcome(params, {"a": thin, "b": bad}) == "slot_audit_failed"


def test_node_tally_sums_ranks() -> None:
    tally = NodeTally().add(samples.audit(rank=0, calls=5)).add(samples.audit(rank=1, calls=4))
    assert tally == NodeTally(9, 0, 0, 0, "0.999995")


def test_node_tally_sums_every_count_and_keeps_the_lowest_score() -> None:
    # explain shows these sums: each count is added over the ranks, none cancels another.
    ranks = [
        samples.audit(rank=0, calls=8, violations=1, near_misses=2, uncomparable=1),
        samples.audit(rank=1, calls=8, violations=1, near_misses=1, uncomparable=1),
        samples.audit(rank=2, calls=8, violations=2, near_misses=0, uncomparable=0),
    ]
    scores = ["0.9", "0.80", "0.95"]  # the lowest in the middle
    tally = NodeTally()
    for graded, score in zip(ranks, scores, strict=True):
        tally = tally.add(graded.model_copy(update={"min_score": score}))
    assert tally == NodeTally(24, 4, 3, 2, "0.80")


def test_a_speedup_exactly_on_the_pass_line_passes() -> None:
    # DOMAIN §6: S - 1 >= L passes, the line included. With z = 0 and g = 0 the line is
    # exactly 0, and equal costs in both orientations give S = exp(0) = 1 exactly.
    params = compile_policy(samples.policy(z={"3": "0", "4": "1.5"}))
    one = Decimal(1)
    seen = look(params, 3, one, ln(one), one)
    assert (seen.speedup, seen.pass_line, seen.outcome) == (one, 0, "pass")
    below = look(params, 3, one, ln(one), ratio(1_000_000_001, 1_000_000_000))
    assert below.outcome == "continue"


@pytest.mark.parametrize("text", ["1.1", "0.975", "2", "1.000000001"])
def test_ln_is_correctly_rounded_to_34_digits(text: str) -> None:
    # DOMAIN §6: precision 34, ln correctly rounded. The reference is the same logarithm
    # at 60 digits, rounded half-even to 34 significant digits; each value here differs at
    # 35 digits, so a wider context would not pass.
    wide = decimal.Context(prec=60).ln(Decimal(text))
    rounded = decimal.Context(prec=34, rounding=decimal.ROUND_HALF_EVEN).plus(wide)
    assert ln(Decimal(text)) == rounded
    assert ln(Decimal(text)) != decimal.Context(prec=35).plus(wide)


def test_quality_drift_beats_regression() -> None:
    assert quality_outcome(True, False) == ""
    assert quality_outcome(True, True) == "quality_regression"
    assert quality_outcome(False, True) == "quality_drift"
    assert quality_outcome(False, False) == "quality_drift"


def test_fault_dispositions_follow_domain() -> None:
    assert {c for c, d in FAULT_DISPOSITIONS.items() if d == "REQUEUE"} == {
        "adapter_start_failed", "adapter_request_failed",
    }
    assert {c for c, d in FAULT_DISPOSITIONS.items() if d == "HOLD"} == {
        "unproven_infrastructure_failure", "evidence_unavailable",
    }
    assert fault_disposition("engine_killed") == "COMPLETE"
    assert len(FAULT_DISPOSITIONS) == 8

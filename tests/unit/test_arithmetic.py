"""Checks the paired-windows.v1 arithmetic against docs/machines.md, digit for digit."""

from __future__ import annotations

import decimal
from decimal import Decimal

import pytest
from fast_path_reference import machine_looks, reference_looks

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
    quick_outcome,
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
    # docs/machines.md: S - 1 >= L passes, the line included. With z = 0 and g = 0 the line is
    # exactly 0, and equal costs in both orientations give S = exp(0) = 1 exactly.
    params = compile_policy(samples.policy(z={"3": "0", "4": "1.5"}))
    one = Decimal(1)
    seen = look(params, 3, one, ln(one), one)
    assert (seen.speedup, seen.pass_line, seen.outcome) == (one, 0, "pass")
    below = look(params, 3, one, ln(one), ratio(1_000_000_001, 1_000_000_000))
    assert below.outcome == "continue"


@pytest.mark.parametrize("text", ["1.1", "0.975", "2", "1.000000001"])
def test_ln_is_correctly_rounded_to_34_digits(text: str) -> None:
    # docs/machines.md: precision 34, ln correctly rounded. The reference is the same logarithm
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


# The 34-digit context's rounding and exponent range, the float pre-filter's neutral point and
# relative tolerance, the pass test S − 1 ≥ L and SE's single rounding. Expected values come from
# the formulas of docs/machines.md, computed by hand or at a wider precision here.


BILLION = 1_000_000_000


#: A stock cost of 2**34 ns makes candidate / stock a binary fraction with 34 places: an
#: odd candidate cost gives a 35-digit quotient ending in 5, a tie at precision 34.
TIE_STOCK = 2**34


WIDE = decimal.Context(prec=80)


def test_a_window_ratio_on_a_tie_rounds_half_even() -> None:
    # (2**34 + 1) / 2**34 = 1 + 2**-34 = 1.0000000000582076609134674072265625 exactly
    # (35 digits). At 34 digits the tie goes to the even neighbour ...562 (half-up: ...563).
    assert ratio(TIE_STOCK + 1, TIE_STOCK) == Decimal("1.000000000058207660913467407226562")
    # (2**34 + 3) / 2**34 = 1.0000000001746229827404022216796875: the 34th digit 7 is odd,
    # so the tie goes up to ...688 (half-down: ...687).
    assert ratio(TIE_STOCK + 3, TIE_STOCK) == Decimal("1.000000000174622982740402221679688")


def test_futility_at_a_ratio_tie_follows_the_half_even_r1() -> None:
    # docs/machines.md: R1 > 1 + f → FAIL futility, R1 computed at precision 34. Each margin below
    # makes 1 + f a 34-digit number next to the tie of the test above.
    low = samples.policy(
        windows=2, z={"2": "2"}, futility_margin="0.000000000058207660913467407226562"
    )
    # R1 rounds (half-even) to exactly 1 + f: not above it, so the attempt goes on.
    params = compile_policy(low)
    assert not futile(params, ratio(TIE_STOCK + 1, TIE_STOCK))
    assert machine_looks(params, [(TIE_STOCK, TIE_STOCK + 1)])[0][0] is None
    high = samples.policy(
        windows=2, z={"2": "2"}, futility_margin="0.000000000174622982740402221679687"
    )
    # R1 rounds (half-even) up to ...688, one unit above 1 + f = ...687: futility.
    params = compile_policy(high)
    assert futile(params, ratio(TIE_STOCK + 3, TIE_STOCK))
    speed = machine_looks(params, [(TIE_STOCK, TIE_STOCK + 3)])[0][0]
    assert speed == SpeedResult("FAIL", "futility", None, None, 1)


def test_a_line_above_ten_to_the_99_keeps_its_digits() -> None:
    # W = 2, σw = σb = 0.01: SE = sqrt((1e-4 · (1/1 + 1/1) + 2e-4) / 4) = 0.01 exactly, so
    # z = 30000 gives L = exp(300) − 1 ≈ 1.94e130: a legal policy, whose line the context's
    # exponent range must hold (the reference is the same formula at 80 digits).
    params = compile_policy(samples.policy(windows=2, z={"2": "30000"}))
    line = params.lines[2]
    assert line is not None and line.pass_line is not None
    expected = WIDE.subtract(WIDE.exp(Decimal(300)), 1)
    assert abs(line.pass_line - expected) <= expected * Decimal("1e-33")
    one = Decimal(1)
    seen = look(params, 2, one, ln(one), one)
    assert seen.outcome == "speed_threshold_not_met"  # S = 1 > 1 / (1 + L) ≈ 5e-131


def test_a_tiny_window_noise_keeps_all_digits_of_se() -> None:
    # σw = 1e-60, σb = 0, look 5 of W = 5 (n1 = 2, n2 = 3): SE = 1e-60 · sqrt((1/2 + 1/3) / 4)
    # = 1e-60 · sqrt(5/24). Its variance (about 2e-121) is far inside the context's exponent
    # range; a narrower range would keep only a few of its digits.
    tiny = "0." + "0" * 59 + "1"
    params = compile_policy(
        samples.policy(windows=5, z={"5": "1"}, window_noise=tiny, boot_noise="0")
    )
    line = params.lines[5]
    assert line is not None and (line.n1, line.n2) == (2, 3)
    expected = WIDE.multiply(Decimal("1e-60"), WIDE.sqrt(WIDE.divide(5, 24)))
    assert abs(line.se - expected) <= expected * Decimal("1e-33")


def _last_look_without_a_line(candidate_last: int) -> SpeedResult | None:
    # W = 4, z only for window 3: the last look (window 4) has no pass line. Every window
    # costs 1e9 ns on both lanes except the candidate's last one, so R1 = 1 and
    # S = sqrt(2e9 / (1e9 + candidate_last)).
    params = compile_policy(samples.policy(z={"3": "2"}))
    costs = [(BILLION, BILLION)] * 3 + [(BILLION, candidate_last)]
    after = machine_looks(params, costs)
    assert after == reference_looks(params, costs)  # the fast path agrees with the Decimal look
    assert after[2][0] is None  # look 3: S = 1, L > 0: continue
    return after[3][0]


def test_the_last_look_without_a_line_splits_at_exactly_one() -> None:
    # No pass line: FAIL candidate_slower when S <= 1, else speed_threshold_not_met
    # (classify_final). S = sqrt(2e9 / (2e9 - 20)) ≈ 1 + 5e-9, and ≈ 1 - 5e-9 with + 20:
    # both within 1e-7 of 1, so a pre-filter split anywhere but at 1 gets one of them wrong.
    above = _last_look_without_a_line(BILLION - 20)
    assert above == SpeedResult("FAIL", "speed_threshold_not_met", "1.000000", None, 4)
    below = _last_look_without_a_line(BILLION + 20)
    assert below == SpeedResult("FAIL", "candidate_slower", "1.000000", None, 4)
    assert classify_final(Decimal("1.000000005"), None) == "speed_threshold_not_met"


def test_the_pre_filter_tolerance_is_relative_to_a_large_threshold() -> None:
    # W = 2, SE = 0.01, z = 1400: the gate 1 + L = exp(14) ≈ 1.2e6, where one unit in the
    # last place of a float is about 2.3e-10. An estimate 1e-13 (relative) from the gate is
    # within the estimate's error budget: only the Decimal look may decide it, on either
    # side. An absolute tolerance (1e-11) would call both.
    params = compile_policy(samples.policy(windows=2, z={"2": "1400"}))
    quick = params.quick[2]
    assert quick is not None and quick.gate is not None
    assert 1.2e6 < quick.gate < 1.21e6
    for nudge in (1e-13, -1e-13, 5e-12, -5e-12):
        assert quick_outcome(quick, quick.gate * (1 + nudge), last=False) is None
        assert quick_outcome(quick, quick.gate * (1 + nudge), last=True) is None
    assert quick_outcome(quick, quick.gate * (1 + 1e-9), last=False) == "pass"
    assert quick_outcome(quick, quick.gate * (1 - 1e-9), last=False) == "continue"


def test_the_pass_test_subtracts_one_from_s_in_the_34_digit_context() -> None:
    # docs/machines.md passes a look when S − 1 ≥ L, every operation at precision 34. The form
    # matters only where 1 + L < 0.1 (here z · SE = −3): S then has digits down to 1e-35,
    # S − 1 (about −0.95) only to 1e-34, so S − 1 rounds, while S ≥ 1 + L would not.
    # S and L below are recomputed step by step in a fresh 34-digit half-even context.
    c34 = decimal.Context(prec=34, rounding=decimal.ROUND_HALF_EVEN)
    params = compile_policy(samples.policy(windows=2, z={"2": "-300"}))  # SE = 0.01
    line = c34.subtract(c34.exp(c34.multiply(Decimal("-300"), Decimal("0.01"))), 1)
    r2 = Decimal("403.4287934927351226083871805433881")
    speedup = c34.exp(c34.minus(c34.divide(c34.add(0, c34.ln(r2)), 2)))  # R1 = 1: ln R1 = 0
    assert WIDE.add(1, line) > speedup  # S is below 1 + L in exact arithmetic ...
    assert c34.subtract(speedup, 1) == line  # ... but S − 1 at 34 digits reaches L
    one = Decimal(1)
    seen = look(params, 2, one, ln(one), r2)
    assert (seen.speedup, seen.pass_line) == (speedup, line)
    assert seen.outcome == "pass"


def test_se_is_the_correctly_rounded_root_of_the_quarter_variance() -> None:
    # docs/machines.md: SE = sqrt((σw² (1/n1 + 1/n2) + 2 σb²) / 4). In the worked example (look 3:
    # n1 = 2, n2 = 1, σw = σb = 0.01) the variance 1e-4 · 1.5 + 2e-4 = 3.5e-4 and its quarter
    # are exact, so SE is sqrt(8.75e-5) correctly rounded to 34 digits. Halving a rounded
    # sqrt(3.5e-4) instead rounds twice and ends ...375, not ...373.
    line = compile_policy(samples.worked_example_policy()).lines[3]
    assert line is not None
    c34 = decimal.Context(prec=34, rounding=decimal.ROUND_HALF_EVEN)
    expected = c34.plus(WIDE.sqrt(WIDE.divide(Decimal("0.00035"), 4)))
    assert str(expected) == "0.009354143466934853463959371830791373"
    assert line.se == expected

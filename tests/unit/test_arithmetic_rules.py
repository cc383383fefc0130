"""Pins rules of the paired-windows.v1 arithmetic that a mutation review found unpinned.

A hand-made mutation review of ``machines/arithmetic.py`` found mutants that the rest of the
suite let through; each test here fails on one or more of them:

- the context's tie rule (ROUND_HALF_EVEN) where a window ratio lands exactly on a tie at
  the 35th digit, which decides a futility FAIL;
- the context's exponent range: a large but legal z, and a tiny but legal noise, still get
  every one of their 34 digits;
- the last look of a window without a z entry (no pass line): the float pre-filter's
  neutral point is exactly 1, as the Decimal ``classify_final`` has it;
- the float pre-filter's tolerance is relative to the threshold, not absolute, so an
  estimate a few units in the last place from a large threshold is never decided by it;
- the pass test is S − 1 ≥ L in the 34-digit context, as DOMAIN writes it (not S ≥ 1 + L);
- SE is the root of the quarter variance, rounded once (not half a rounded root).

Expected values come from DOMAIN §6's formulas, computed by hand or with the ``decimal``
module at a wider precision in the test, never from the functions under test.
"""

from __future__ import annotations

import decimal
from decimal import Decimal

from test_machine_fast_paths import _machine, _reference

from machines import samples
from machines.arithmetic import (
    SpeedResult,
    classify_final,
    compile_policy,
    futile,
    ln,
    look,
    quick_outcome,
    ratio,
)

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
    # DOMAIN §6: R1 > 1 + f → FAIL futility, R1 computed at precision 34. Each margin below
    # makes 1 + f a 34-digit number next to the tie of the test above.
    low = samples.policy(
        windows=2, z={"2": "2"}, futility_margin="0.000000000058207660913467407226562"
    )
    # R1 rounds (half-even) to exactly 1 + f: not above it, so the attempt goes on.
    params = compile_policy(low)
    assert not futile(params, ratio(TIE_STOCK + 1, TIE_STOCK))
    assert _machine(params, [(TIE_STOCK, TIE_STOCK + 1)])[0][0] is None
    high = samples.policy(
        windows=2, z={"2": "2"}, futility_margin="0.000000000174622982740402221679687"
    )
    # R1 rounds (half-even) up to ...688, one unit above 1 + f = ...687: futility.
    params = compile_policy(high)
    assert futile(params, ratio(TIE_STOCK + 3, TIE_STOCK))
    speed = _machine(params, [(TIE_STOCK, TIE_STOCK + 3)])[0][0]
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
    after = _machine(params, costs)
    assert after == _reference(params, costs)  # the fast path agrees with the Decimal look
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
    # DOMAIN §6 passes a look when S − 1 ≥ L, every operation at precision 34. The form
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
    # DOMAIN §6: SE = sqrt((σw² (1/n1 + 1/n2) + 2 σb²) / 4). In the worked example (look 3:
    # n1 = 2, n2 = 1, σw = σb = 0.01) the variance 1e-4 · 1.5 + 2e-4 = 3.5e-4 and its quarter
    # are exact, so SE is sqrt(8.75e-5) correctly rounded to 34 digits. Halving a rounded
    # sqrt(3.5e-4) instead rounds twice and ends ...375, not ...373.
    line = compile_policy(samples.worked_example_policy()).lines[3]
    assert line is not None
    c34 = decimal.Context(prec=34, rounding=decimal.ROUND_HALF_EVEN)
    expected = c34.plus(WIDE.sqrt(WIDE.divide(Decimal("0.00035"), 4)))
    assert str(expected) == "0.009354143466934853463959371830791373"
    assert line.se == expected

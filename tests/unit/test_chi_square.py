"""The chi-square distribution the noise guard and the calibration bounds read: exact digits,
checked against closed forms computed independently in floats."""

from __future__ import annotations

import decimal
import math
from decimal import Decimal

import pytest

from machines.chi_square import DOF_MAX, chi2_cdf, chi2_quantile


def _cdf_closed_form(x: float, dof: int) -> float:
    """P(X <= x) for dof 1..4 from erf and exp (independent of the Decimal series)."""
    half = x / 2
    if dof == 1:
        return math.erf(math.sqrt(half))
    if dof == 2:
        return 1 - math.exp(-half)
    if dof == 3:
        return math.erf(math.sqrt(half)) - math.sqrt(2 * x / math.pi) * math.exp(-half)
    if dof == 4:
        return 1 - math.exp(-half) * (1 + half)
    raise AssertionError(dof)


@pytest.mark.parametrize("dof", [1, 2, 3, 4])
@pytest.mark.parametrize("x", ["0.01", "0.5", "1", "3.2", "10.8", "25"])
def test_the_distribution_matches_its_closed_form(dof: int, x: str) -> None:
    assert float(chi2_cdf(Decimal(x), dof)) == pytest.approx(_cdf_closed_form(float(x), dof),
                                                            rel=1e-12, abs=1e-15)


def test_two_degrees_of_freedom_have_an_exact_upper_quantile() -> None:
    # For 2 degrees of freedom P(X > x) = exp(-x/2), so the 0.999 quantile is -2 ln 0.001.
    wide = decimal.Context(prec=50)
    exact = wide.multiply(Decimal(-2), Decimal("0.001").ln(wide))
    assert abs(wide.subtract(chi2_quantile(Decimal("0.999"), 2), exact)) < Decimal("1e-27")


@pytest.mark.parametrize(("probability", "dof", "table"), [
    ("0.999", 1, "10.828"), ("0.999", 3, "16.266"), ("0.999", 10, "29.588"),
    ("0.05", 1, "0.004"), ("0.05", 3, "0.352"), ("0.05", 10, "3.940"),
    ("0.95", 100, "124.342"),
])
def test_quantiles_agree_with_the_published_tables(probability: str, dof: int,
                                                   table: str) -> None:
    value = chi2_quantile(Decimal(probability), dof)
    assert value.quantize(Decimal("0.001")) == Decimal(table)


@pytest.mark.parametrize("dof", [1, 2, 5, 37])
@pytest.mark.parametrize("probability", ["0.001", "0.5", "0.999"])
def test_the_quantile_inverts_the_distribution(dof: int, probability: str) -> None:
    p = Decimal(probability)
    x = chi2_quantile(p, dof)
    assert chi2_cdf(x, dof) >= p
    # The smallest value tried: a hair below it the distribution is short of p.
    assert chi2_cdf(x - x * Decimal("1e-25"), dof) < p


def test_quantiles_grow_with_probability_and_degrees_of_freedom() -> None:
    levels = [Decimal(p) for p in ("0.01", "0.1", "0.5", "0.9", "0.99")]
    for dof in (1, 4, 12):
        values = [chi2_quantile(p, dof) for p in levels]
        assert values == sorted(values) and len(set(values)) == len(values)
    assert chi2_quantile(Decimal("0.9"), 3) < chi2_quantile(Decimal("0.9"), 4)


def test_the_callers_decimal_context_changes_no_digit() -> None:
    expected = chi2_quantile(Decimal("0.999"), 3)
    chi2_quantile.cache_clear()
    with decimal.localcontext(decimal.Context(prec=5, rounding=decimal.ROUND_DOWN)):
        assert chi2_quantile(Decimal("0.999"), 3) == expected


def test_nothing_lies_below_zero() -> None:
    assert chi2_cdf(Decimal(0), 3) == 0
    assert chi2_cdf(Decimal(-1), 3) == 0


@pytest.mark.parametrize("dof", [0, -1, DOF_MAX + 1, True, 2.0])
def test_degrees_of_freedom_out_of_range_are_refused(dof: object) -> None:
    with pytest.raises(ValueError, match="degrees of freedom"):
        chi2_quantile(Decimal("0.5"), dof)  # type: ignore[arg-type]


@pytest.mark.parametrize("probability", [Decimal(0), Decimal(1), Decimal("1.5"), 0.5])
def test_probabilities_outside_the_open_interval_are_refused(probability: object) -> None:
    with pytest.raises(ValueError, match="probability"):
        chi2_quantile(probability, 3)  # type: ignore[arg-type]


def test_a_non_finite_value_is_refused() -> None:
    with pytest.raises(ValueError, match="finite"):
        chi2_cdf(Decimal("NaN"), 2)

"""Computes the chi-square distribution in exact, reproducible Decimal arithmetic.

The noise guard of ``paired-windows.v2`` and the calibration's upper confidence bounds read
chi-square quantiles. A float library (or a table copied from one) could differ in the last
digit between platforms, and a sealed decision must not, so the quantile is computed here in
the rules' one 34-digit context (``machines.decimal_context``) by a fixed procedure:

- the distribution function is the regularized lower incomplete gamma function
  P(k/2, x/2) = (x/2)^(k/2) e^(-x/2) · Σ_{n≥0} (x/2)^n / Γ(k/2 + n + 1), summed until a term
  no longer changes the sum (every term is positive, so nothing cancels);
- Γ(k/2 + 1) is a factorial for even k and (2m)! √π / (4^m m!) for odd k = 2m + 1;
- the quantile is found by bisection, with a bracket that doubles from 1 and exactly
  ``BISECTIONS`` halvings, and is the upper end of the final bracket (the smallest value
  tried whose distribution is at least the probability), so the same inputs give the same
  digits everywhere.

Degrees of freedom run 1..``DOF_MAX``; probabilities lie strictly between 0 and 1.
"""

from __future__ import annotations

import functools
from decimal import Decimal

from machines.decimal_context import CONTEXT

__all__ = ["BISECTIONS", "DOF_MAX", "chi2_cdf", "chi2_quantile"]

_C = CONTEXT
_ZERO = Decimal(0)
_ONE = Decimal(1)
_TWO = Decimal(2)
#: π to 50 digits; the 34-digit context rounds it once, the same way everywhere.
_PI = Decimal("3.1415926535897932384626433832795028841971693993751")

#: The largest number of degrees of freedom the rules ask for (windows are at most 5 per
#: attempt; calibrations pool at most a few hundred windows).
DOF_MAX = 1_000
#: Halvings of the quantile's bracket: 2^-120 of a bracket below 2^14 is below 1e-31.
BISECTIONS = 120


def _check_dof(dof: int) -> None:
    if isinstance(dof, bool) or not isinstance(dof, int) or not 1 <= dof <= DOF_MAX:
        raise ValueError(f"degrees of freedom must be an integer in 1..{DOF_MAX}, got {dof!r}")


@functools.lru_cache(maxsize=256)
def _gamma_half(dof: int) -> Decimal:
    """Returns Γ(dof/2 + 1)."""
    if dof % 2 == 0:
        value = _ONE
        for factor in range(2, dof // 2 + 1):
            value = _C.multiply(value, Decimal(factor))
        return value
    m = dof // 2
    # Γ(m + 3/2) = (m + 1/2) · Γ(m + 1/2), and Γ(1/2) = √π.
    value = _C.sqrt(_PI)
    for step in range(m + 1):
        value = _C.multiply(value, _C.add(Decimal(step), Decimal("0.5")))
    return value


def chi2_cdf(x: Decimal, dof: int) -> Decimal:
    """Returns P(X ≤ x) for X chi-square with ``dof`` degrees of freedom (34 digits)."""
    _check_dof(dof)
    if not isinstance(x, Decimal) or not x.is_finite():
        raise ValueError(f"x must be a finite Decimal, got {x!r}")
    if x <= _ZERO:
        return _ZERO
    a = _C.divide(Decimal(dof), _TWO)
    z = _C.divide(x, _TWO)
    # (x/2)^(k/2): an integer power, times √z for odd k.
    power = _C.power(z, dof // 2)
    if dof % 2:
        power = _C.multiply(power, _C.sqrt(z))
    term = _C.divide(_C.multiply(power, _C.exp(_C.minus(z))), _gamma_half(dof))
    total = term
    n = 0
    while True:
        n += 1
        term = _C.divide(_C.multiply(term, z), _C.add(a, Decimal(n)))
        updated = _C.add(total, term)
        # Terms grow while a + n < z and shrink after: stop once past the peak and spent.
        if updated == total and _C.add(a, Decimal(n)) > z:
            break
        total = updated
    return min(total, _ONE)


@functools.lru_cache(maxsize=1024)
def chi2_quantile(probability: Decimal, dof: int) -> Decimal:
    """Returns the x with P(X ≤ x) = ``probability`` for ``dof`` degrees of freedom.

    The upper end of the final bisection bracket: the smallest value tried whose
    distribution reaches ``probability``. An upper critical value at level α is
    ``chi2_quantile(1 - α, dof)``; a lower one ``chi2_quantile(α, dof)``.
    """
    _check_dof(dof)
    if not isinstance(probability, Decimal) or not _ZERO < probability < _ONE:
        raise ValueError(f"probability must be a Decimal strictly between 0 and 1, "
                         f"got {probability!r}")
    low, high = _ZERO, _ONE
    while chi2_cdf(high, dof) < probability:
        low, high = high, _C.multiply(high, _TWO)
    for _ in range(BISECTIONS):
        middle = _C.divide(_C.add(low, high), _TWO)
        if chi2_cdf(middle, dof) < probability:
            low = middle
        else:
            high = middle
    return high

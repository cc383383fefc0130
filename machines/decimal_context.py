"""Holds the one ``decimal.Context`` every rule computes in (docs/machines.md).

Precision 34, ROUND_HALF_EVEN, traps on invalid operations, division by zero and overflow.
It is called explicitly rather than installed as the thread's context, so no caller's
``decimal`` settings can change a digit; ``ln``, ``exp`` and ``sqrt`` are correctly rounded,
so every platform reproduces every digit. It lives in a leaf module so that the decision
arithmetic and the statistics it uses (``machines.chi_square``) share it without a cycle.
"""

from __future__ import annotations

from decimal import ROUND_HALF_EVEN, Context, DivisionByZero, InvalidOperation, Overflow

__all__ = ["CONTEXT"]

CONTEXT = Context(
    prec=34,
    rounding=ROUND_HALF_EVEN,
    Emin=-999_999,
    Emax=999_999,
    capitals=1,
    clamp=0,
    flags=[],
    traps=[InvalidOperation, DivisionByZero, Overflow],
)

"""Spells measured values as canonical decimal strings (docs/concepts.md), never floats.

The canonical spelling itself is the ledger codec's (re-exported here); this module adds
the bridge's rounding of measurements and the parsing of decimal-string settings.
"""

from __future__ import annotations

import math
from decimal import ROUND_FLOOR, Decimal, InvalidOperation

from vocabulary.codec import canonical_decimal, is_canonical_decimal
from vocabulary.errors import CanonicalFormError

__all__ = ["canonical_decimal", "floor_decimal", "is_canonical_decimal", "parse_decimal"]


def floor_decimal(value: float | Decimal, places: int) -> str:
    """Rounds a measured value toward minus infinity to ``places`` and spells it canonically.

    Rounding down never overstates a score; a float is converted exactly first.
    """
    if isinstance(value, float) and not math.isfinite(value):
        raise CanonicalFormError(f"{value!r} has no canonical decimal form", value=repr(value))
    exact = Decimal(value)
    quantum = Decimal(1).scaleb(-places)
    return canonical_decimal(exact.quantize(quantum, rounding=ROUND_FLOOR))


def parse_decimal(text: str, *, field: str) -> Decimal:
    """Parses a decimal string from a policy or config; refuses floats and junk."""
    if not isinstance(text, str):
        raise CanonicalFormError(f"{field} must be a decimal string, got {type(text).__name__}",
                                 field=field)
    try:
        value = Decimal(text)
    except InvalidOperation as exc:
        raise CanonicalFormError(f"{field} is not a decimal: {text!r}", field=field) from exc
    if not value.is_finite():
        raise CanonicalFormError(f"{field} must be finite: {text!r}", field=field)
    return value

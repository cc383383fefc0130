"""Declares the constrained field types of the event catalogue (docs/concepts.md, Identities)."""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import AfterValidator, Field, StringConstraints

from vocabulary.codec import is_fixed6
from vocabulary.errors import InvalidInput
from vocabulary.limits import json_integer_abs_max

__all__ = [
    "DECIMAL_PATTERN",
    "DECIMAL_PROBLEM",
    "PATTERN_WORDS",
    "ArenaId",
    "Block",
    "DecimalStr",
    "Digest",
    "Fixed6",
    "Hotkey",
    "LocalId",
    "NonNegInt",
    "PositiveInt",
    "Rao",
    "Reason",
    "is_arena_id",
    "is_digest",
    "is_hotkey",
    "is_local_id",
    "require_as_of",
    "require_hotkey",
]

_ARENA_ID = re.compile(r"^[a-z0-9][a-z0-9-]{0,62}$")
_LOCAL_ID = re.compile(r"^[a-z0-9._-]{1,64}$")
_DIGEST = re.compile(r"^[0-9a-f]{64}$")
_HOTKEY = re.compile(r"^[\x21-\x7e]{1,64}$")


def is_arena_id(text: object) -> bool:
    """Tells whether ``text`` is an arena slug ``[a-z0-9][a-z0-9-]{0,62}`` (False for
    anything but a string, so a caller's check names the field instead of a TypeError)."""
    return isinstance(text, str) and _ARENA_ID.fullmatch(text) is not None


def is_local_id(text: object) -> bool:
    """Tells whether ``text`` is an appender-chosen id (1–64 of ``[a-z0-9._-]``)."""
    return isinstance(text, str) and _LOCAL_ID.fullmatch(text) is not None


def is_digest(text: object) -> bool:
    """Tells whether ``text`` is 64 lowercase hex characters."""
    return isinstance(text, str) and _DIGEST.fullmatch(text) is not None


def is_hotkey(text: object) -> bool:
    """Tells whether ``text`` is 1–64 printable non-space ASCII characters."""
    return isinstance(text, str) and _HOTKEY.fullmatch(text) is not None


def require_hotkey(text: object, path: str = "hotkey") -> None:
    """Raises InvalidInput naming ``path`` unless ``text`` is a hotkey (``is_hotkey``)."""
    if not is_hotkey(text):
        raise InvalidInput(PATTERN_WORDS[_HOTKEY.pattern], path=path)


def require_as_of(as_of: object, path: str = "as_of") -> None:
    """Raises InvalidInput naming ``path`` unless ``as_of`` is None or a position a query can
    be answered as of: an integer from 0 to 2**53 - 1 (past the head it is the head)."""
    if as_of is not None and (type(as_of) is not int or not 0 <= as_of <= json_integer_abs_max):
        raise InvalidInput(
            f"as_of is a position, an integer from 0 to 2**53 - 1; got {as_of!r}", path=path
        )


def _check_fixed6(text: str) -> str:
    if not is_fixed6(text):
        raise ValueError(f"{text!r} is not a result with exactly 6 decimal places")
    return text


#: The canonical-decimal spelling of ``codec.is_canonical_decimal``, anchored for pydantic-core,
#: which checks a pattern in Rust (a third of a WindowMeasured validation was the Python
#: callback this replaces). Rust's ``$`` matches only at the very end, like ``fullmatch``; a
#: test checks the two agree on generated strings. ``schema_error`` words its mismatch.
DECIMAL_PATTERN = r"^(?:0|-?(?:[1-9][0-9]*(?:\.[0-9]*[1-9])?|0\.[0-9]*[1-9]))$"
DECIMAL_PROBLEM = (
    "is not a decimal in canonical spelling (plain notation, no exponent, no '+', no "
    "trailing zeros after the point, '0' for zero)"
)

#: What each identifier pattern asks for, in words: ``schema_error`` adds them to pydantic's
#: "String should match pattern '…'" (an operator reads words; a program the pattern).
PATTERN_WORDS = {
    _ARENA_ID.pattern: "an arena id is 1-63 of a-z, 0-9 and '-', not starting with '-'",
    _LOCAL_ID.pattern: "an id is 1-64 of a-z, 0-9, '.', '_' and '-'",
    _DIGEST.pattern: "a digest is 64 lowercase hex characters",
    _HOTKEY.pattern: "a hotkey is 1-64 printable non-space ASCII characters",
}

DecimalStr = Annotated[str, StringConstraints(pattern=DECIMAL_PATTERN)]
Fixed6 = Annotated[str, AfterValidator(_check_fixed6)]
ArenaId = Annotated[str, StringConstraints(pattern=_ARENA_ID.pattern)]
LocalId = Annotated[str, StringConstraints(pattern=_LOCAL_ID.pattern)]
Digest = Annotated[str, StringConstraints(pattern=_DIGEST.pattern)]
Hotkey = Annotated[str, StringConstraints(pattern=_HOTKEY.pattern)]
Reason = Annotated[str, StringConstraints(max_length=256)]
NonNegInt = Annotated[int, Field(ge=0, le=json_integer_abs_max)]
PositiveInt = Annotated[int, Field(ge=1, le=json_integer_abs_max)]
Block = NonNegInt
Rao = NonNegInt

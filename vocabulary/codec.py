"""Encodes values as canonical JSON bytes (docs/concepts.md) and computes domain-separated digests.

Canonical JSON here is RFC 8785 (JCS) restricted to documents without floats: UTF-8, object
keys sorted by UTF-16 code units, no insignificant whitespace, integers only within
±(2**53 - 1). Floats, NaN and infinities are refused, so no two spellings of a value exist.
Measured values travel as integers or as canonical decimal strings (``is_canonical_decimal``).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from decimal import ROUND_HALF_EVEN, Context, Decimal
from typing import Any

import orjson

from vocabulary import limits
from vocabulary.errors import CanonicalFormError, LimitExceeded

__all__ = [
    "canonical_bytes",
    "canonical_decimal",
    "digest",
    "fixed6",
    "is_canonical_decimal",
    "loads",
    "normalise",
    "plain_canonical_bytes",
]

_CANONICAL_DECIMAL = re.compile(r"0|-?(?:[1-9][0-9]*(?:\.[0-9]*[1-9])?|0\.[0-9]*[1-9])")
# Quantizing must not depend on the caller's decimal context (precision, traps).
_FIXED_CONTEXT = Context(prec=34, rounding=ROUND_HALF_EVEN)
_FIXED6 = re.compile(r"-?(?:0|[1-9][0-9]*)\.[0-9]{6}")


def is_canonical_decimal(text: str) -> bool:
    """Tells whether ``text`` is a decimal in canonical spelling ("1.0224", not "1.02240")."""
    return _CANONICAL_DECIMAL.fullmatch(text) is not None


def is_fixed6(text: str) -> bool:
    """Tells whether ``text`` is a machine result in the fixed 6-place form (docs/concepts.md)."""
    return _FIXED6.fullmatch(text) is not None and text != "-0.000000"


def canonical_decimal(value: Decimal) -> str:
    """Spells a finite Decimal canonically: plain notation, no trailing zeros, "0" for zero."""
    if not value.is_finite():
        raise CanonicalFormError(f"decimal {value} is not finite", path="$")
    if value.is_zero():
        return "0"
    text = format(value, "f")
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    return text


def fixed6(value: Decimal) -> str:
    """Quantizes to exactly 6 places (ROUND_HALF_EVEN) and spells all six, e.g. "1.019129"."""
    quantized = value.quantize(
        Decimal("0.000001"), rounding=ROUND_HALF_EVEN, context=_FIXED_CONTEXT
    )
    text = format(quantized, "f")
    return "0.000000" if text == "-0.000000" else text


def _utf16_key(key: str) -> bytes:
    return key.encode("utf-16-be", "surrogatepass")


def _sorted_keys(obj: Mapping[Any, Any], path: str) -> list[str]:
    keys = list(obj)
    for key in keys:
        if type(key) is not str:
            raise CanonicalFormError(f"object key {key!r} at {path} is not a string", path=path)
    if all(k.isascii() for k in keys):
        keys.sort()
    else:
        keys.sort(key=_utf16_key)  # RFC 8785 §3.2.3 orders by UTF-16 code units
    return keys


def normalise(value: Any, path: str = "$", depth: int = 0) -> Any:
    """Returns ``value`` rebuilt with sorted keys, refusing whatever has no canonical form."""
    kind = type(value)
    if kind is str or value is None or kind is bool:
        return value
    if isinstance(value, str):  # a str subclass encodes as the plain string it holds,
        return str.__str__(value)  # not as its own __str__ spells it (an Enum's "E.A")
    if kind is int:
        if -limits.json_integer_abs_max <= value <= limits.json_integer_abs_max:
            return value
        raise CanonicalFormError(
            f"integer at {path} is outside ±(2**53 - 1)", path=path, value=value
        )
    if depth >= limits.json_depth_max:
        raise LimitExceeded(f"nesting at {path} is deeper than {limits.json_depth_max}", path=path)
    if isinstance(value, Mapping):
        return {k: normalise(value[k], f"{path}.{k}", depth + 1) for k in _sorted_keys(value, path)}
    if isinstance(value, Sequence) and not isinstance(value, (bytes, bytearray, memoryview)):
        return [normalise(v, f"{path}[{i}]", depth + 1) for i, v in enumerate(value)]
    if isinstance(value, float):
        raise CanonicalFormError(
            f"float at {path} is not allowed; use an integer or a decimal string",
            path=path,
            value=repr(value),
        )
    if isinstance(value, Decimal):
        raise CanonicalFormError(
            f"Decimal at {path} must be written as a canonical decimal string", path=path
        )
    raise CanonicalFormError(f"value of type {kind.__name__} at {path} has no JSON form", path=path)


def plain_canonical_bytes(payload: Any) -> bytes | None:
    """Returns canonical bytes when ``payload`` is plain JSON, or None to take the full walk.

    Plain means exact dict/list/str/int/bool/None, ASCII keys, integers within ±(2**53 - 1),
    nesting within limits. For such a document ``normalise`` would return an equal dict
    whose keys are in code-point order, which for ASCII keys is the UTF-16 order RFC 8785
    wants, so orjson's own key sort gives byte-identical output without rebuilding the
    document (the hot path of every append). Anything else (floats, tuples, Mappings,
    non-ASCII keys, lone surrogates) goes through ``normalise``, which raises as before.
    """
    if type(payload) is not dict or not _is_plain(payload, 0):
        return None
    try:
        return orjson.dumps(payload, option=orjson.OPT_SORT_KEYS)
    except orjson.JSONEncodeError:
        return None


def _is_plain(value: dict[str, Any] | list[Any], depth: int) -> bool:
    if depth >= limits.json_depth_max:  # ``normalise`` refuses a container this deep
        return False
    items = value.items() if type(value) is dict else enumerate(value)
    for key, item in items:
        if type(key) is str and not key.isascii():
            return False
        kind = type(item)
        if kind is str or kind is bool or item is None:
            continue
        if kind is int:
            if not -limits.json_integer_abs_max <= item <= limits.json_integer_abs_max:
                return False
        elif kind is dict or kind is list:
            if not _is_plain(item, depth + 1):
                return False
        else:
            return False
    return True


def canonical_bytes(value: Any) -> bytes:
    """Encodes ``value`` as canonical JSON bytes, refusing floats, NaN and out-of-range ints."""
    fast = plain_canonical_bytes(value)
    if fast is not None:
        return fast
    document = normalise(value)
    try:
        return orjson.dumps(document)
    except (TypeError, orjson.JSONEncodeError) as exc:  # e.g. lone surrogates in a string
        raise CanonicalFormError(f"value has no canonical JSON form: {exc}", path="$") from exc


def _refuse_constant(name: str) -> Any:
    raise CanonicalFormError(f"{name} is not allowed in a ledger document", path="$")


def _refuse_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise CanonicalFormError(f"duplicate object key {key!r}", path="$", key=key)
        result[key] = value
    return result


#: A ``\uD800``-``\uDFFF`` escape: half of a UTF-16 surrogate pair, or a lone one.
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")


def _refuse_lone_surrogates(value: Any, where: str) -> None:
    """Raises CanonicalFormError for a string or key holding a lone surrogate.

    JSON can spell one (``"\ud800"``) but it has no UTF-8 form: whatever took it in would
    fail later, outside this error's contract (verify-proof printed a TypeError). A pair
    spelt as two escapes is one character by then and passes.
    """
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            try:
                item.encode("utf-8")
            except UnicodeEncodeError as exc:
                raise CanonicalFormError(
                    f"{where} holds a lone UTF-16 surrogate (\\u{ord(item[exc.start]):04x}), "
                    "which has no UTF-8 form",
                    path="$",
                ) from None
        elif isinstance(item, dict):
            stack.extend(item)
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)


def loads(data: bytes | str, *, where: str = "input") -> Any:
    """Parses untrusted JSON strictly: valid UTF-8, no duplicate keys, no NaN or Infinity."""
    if isinstance(data, (bytes, bytearray)):
        try:
            text = bytes(data).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise CanonicalFormError(
                f"{where} is not valid UTF-8 (byte {exc.start})", path="$"
            ) from exc
    else:
        text = data
    try:
        value = json.loads(
            text, object_pairs_hook=_refuse_duplicates, parse_constant=_refuse_constant
        )
        if _SURROGATE_ESCAPE.search(text) is not None:  # rare: walk only then
            _refuse_lone_surrogates(value, where)
        return value
    except json.JSONDecodeError as exc:
        raise CanonicalFormError(
            f"{where} is not valid JSON: {exc.msg} at column {exc.colno}", path="$"
        ) from exc
    except RecursionError as exc:
        raise LimitExceeded(f"{where} is nested too deeply", path="$") from exc
    except ValueError as exc:  # e.g. an integer literal longer than Python will convert
        raise LimitExceeded(f"{where} holds a number too large to read: {exc}", path="$") from exc


def digest(domain: str, payload: Any) -> str:
    """Returns sha256 hex of canonical JSON ``{"domain": domain, "payload": payload}``."""
    return hashlib.sha256(canonical_bytes({"domain": domain, "payload": payload})).hexdigest()

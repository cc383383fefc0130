"""Generates hostile input for the ledger's entry points (hypothesis strategies) and tallies it.

Each strategy yields ``(category, value)`` so that a run can say how many inputs of each kind
it tried (``TALLY``; bench/reliability.py prints it). The categories are the ones named in
docs/reliability.md: non-canonical numbers, deep nesting, oversized payloads, unknown types
and versions, bad envelopes, wrong shapes.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Callable
from typing import Any

from hypothesis import strategies as st

from machines import samples
from vocabulary import limits
from vocabulary.catalogue import CATALOGUE
from vocabulary.events import ArenaCommissioned, AuditNodeGraded, SubmissionHeld, WindowMeasured

__all__ = [
    "TALLY",
    "bad_envelopes",
    "base_drafts",
    "hostile_values",
    "nested",
    "payload_mutations",
    "typed_paths",
]

#: Inputs tried, by category, across every test of the run (bench/reliability.py reads it).
TALLY: Counter[str] = Counter()

Path = tuple[str | int, ...]


def nested(depth: int, leaf: Any = 0) -> Any:
    """Returns arrays and objects nested ``depth`` deep, built without recursion."""
    value = leaf
    for level in range(depth):
        value = [value] if level % 2 else {"k": value}
    return value


def _tagged(category: str) -> Callable[[Any], tuple[str, Any]]:
    return lambda value: (category, value)


#: Values that have no canonical form anywhere in a payload: every one must be refused.
hostile_values = st.one_of(
    st.floats(allow_nan=False, allow_infinity=False).map(_tagged("float")),
    st.sampled_from([math.nan, math.inf, -math.inf]).map(_tagged("nan_or_infinity")),
    st.one_of(
        st.integers(min_value=limits.json_integer_abs_max + 1),
        st.integers(max_value=-limits.json_integer_abs_max - 1),
    ).map(_tagged("huge_integer")),
    st.integers(limits.json_depth_max + 1, 5_000).map(nested).map(_tagged("deep_nesting")),
    st.integers(limits.payload_bytes_max + 1, 3 * limits.payload_bytes_max)
    .map(lambda n: "x" * n).map(_tagged("oversized")),
    st.sampled_from(["\ud800", "a\udfffb", "\udbff\udbff"]).map(_tagged("lone_surrogate")),
    st.binary(max_size=16).map(_tagged("bytes")),
    st.decimals(allow_nan=False, allow_infinity=False).map(_tagged("decimal")),
    st.dictionaries(st.integers(), st.integers(), min_size=1, max_size=3)
    .map(_tagged("non_string_key")),
)


def _payload(event: Any) -> dict[str, Any]:
    document: dict[str, Any] = json.loads(event.model_dump_json(exclude_unset=True))
    return document


def base_drafts() -> list[tuple[str, str, dict[str, Any]]]:
    """Returns valid (stream, type, payload) triples the mutations start from."""
    return [
        (f"submission-{samples.hex64('s')}", SubmissionHeld.event_type,
         _payload(SubmissionHeld(reason="operator hold", block=7))),
        ("attempt-att-1", WindowMeasured.event_type, _payload(samples.window(1, 1, 10, 9))),
        ("attempt-att-1", AuditNodeGraded.event_type, _payload(samples.audit())),
        ("arena-mlp-arena", ArenaCommissioned.event_type, _payload(samples.commissioned())),
    ]


#: Subtrees whose schema is "any JSON object" (engine options): a wrong type is valid there.
_FREE_FORM = frozenset({"engine_config", "engine_env"})


def typed_paths(document: Any, prefix: Path = ()) -> list[Path]:
    """Lists every value's path in ``document``, outside free-form subtrees."""
    found: list[Path] = []
    items = (
        document.items() if isinstance(document, dict)
        else enumerate(document) if isinstance(document, list) else ()
    )
    for key, value in items:
        if key in _FREE_FORM:
            continue
        found.append((*prefix, key))
        found += typed_paths(value, (*prefix, key))
    return found


def all_paths(document: Any, prefix: Path = ()) -> list[Path]:
    """Lists every value's path in ``document``, free-form subtrees included."""
    found: list[Path] = []
    items = (
        document.items() if isinstance(document, dict)
        else enumerate(document) if isinstance(document, list) else ()
    )
    for key, value in items:
        found.append((*prefix, key))
        found += all_paths(value, (*prefix, key))
    return found


def replace(document: Any, path: Path, value: Any) -> Any:
    """Returns a deep copy of ``document`` with the value at ``path`` replaced."""
    copy = json.loads(json.dumps(document))
    target = copy
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    return copy


def delete(document: Any, path: Path) -> Any:
    """Returns a deep copy of ``document`` without the key at ``path``."""
    copy = json.loads(json.dumps(document))
    target = copy
    for key in path[:-1]:
        target = target[key]
    del target[path[-1]]
    return copy


def wrong_type(value: Any) -> st.SearchStrategy[Any]:
    """Returns JSON values of another type than ``value`` (never null: optionals take it)."""
    if isinstance(value, bool):
        return st.sampled_from([1, 0, "true", [], {}])
    if isinstance(value, int):
        return st.sampled_from([str(value), [value], {"v": value}, True])
    if isinstance(value, str):
        return st.sampled_from([1, [value], {"v": value}, False])
    if isinstance(value, list):
        return st.sampled_from([{}, "x", 1])
    return st.sampled_from([[], "x", 1])


@st.composite
def payload_mutations(
    draw: st.DrawFn, base: dict[str, Any], model: Any,
    reserved: frozenset[str] | set[str] = frozenset(),
) -> tuple[str, dict[str, Any]]:
    """Draws one hostile change to a valid payload; every result must be refused.

    ``reserved`` names fields the entry point drops or fills itself (never "unknown").
    """
    kind = draw(st.sampled_from(["hostile_value", "wrong_type", "missing_field",
                                 "unknown_field"]))
    if kind == "hostile_value":
        category, value = draw(hostile_values)
        path = draw(st.sampled_from(all_paths(base)))
        return category, replace(base, path, value)
    if kind == "wrong_type":
        path = draw(st.sampled_from(typed_paths(base)))
        target: Any = base
        for key in path:
            target = target[key]
        return "wrong_type", replace(base, path, draw(wrong_type(target)))
    if kind == "missing_field":
        required = [k for k, f in model.model_fields.items() if f.is_required() and k in base]
        return "missing_field", delete(base, (draw(st.sampled_from(required)),))
    name = draw(st.text(min_size=1, max_size=20).filter(
        lambda n: n not in base and n not in reserved))
    return "unknown_field", {**base, name: 1}


_KNOWN_TYPES = frozenset(CATALOGUE.types)


#: Envelope fields of a draft that must be refused: (category, field, value).
bad_envelopes = st.one_of(
    st.text(max_size=80).filter(lambda t: t not in _KNOWN_TYPES)
    .map(lambda v: ("unknown_type", "type", v)),
    st.one_of(st.integers(max_value=0), st.integers(min_value=2))
    .map(lambda v: ("unknown_schema_version", "schema_version", v)),
    st.one_of(
        st.text(max_size=200).filter(lambda t: "-" not in t or not t.islower()),
        st.text(st.characters(categories=["Cc"]), min_size=1).map(lambda t: f"submission-{t}"),
        st.just("x" * (limits.stream_name_chars_max + 1)),
        st.sampled_from(["settlement", "arena-", "Submission-ab", "submission-", "credit-x"]),
    ).map(lambda v: ("bad_stream", "stream", v)),
    st.sampled_from([None, 7, b"submission-ab", ["submission"]])
    .map(lambda v: ("non_string_stream", "stream", v)),
    st.one_of(st.integers(max_value=-1), st.floats(), st.text().filter(
        lambda t: t not in ("any", "no_stream")), st.just([1]), st.just(True))
    .map(lambda v: ("bad_expected_version", "expected_version", v)),
)

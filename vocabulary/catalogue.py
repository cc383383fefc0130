"""Keeps the registry of event schemas by (type, version) and the chain of pure upcasters.

Old events are never rewritten: on read, a payload recorded at version v is brought to the
current version by applying upcasters v→v+1→…→current. The chain is checked when a
catalogue is sealed (at import for the default one): every type's versions run 1..current
without a gap, each version below current has exactly one upcaster, and the current one has
none (so no cycle can exist).
"""

from __future__ import annotations

import copy
import difflib
import re
import types
import typing
from collections.abc import Callable, Mapping
from typing import Any

import orjson
from pydantic import ValidationError

from vocabulary import limits
from vocabulary.codec import canonical_bytes, normalise, plain_canonical_bytes
from vocabulary.errors import LimitExceeded, SchemaError, UnknownEventType
from vocabulary.events import ALL_EVENTS_V1, POLICY_VERSIONS, Event
from vocabulary.fields import (
    DECIMAL_PATTERN,
    DECIMAL_PROBLEM,
    PATTERN_WORDS,
    is_arena_id,
    is_digest,
    is_local_id,
)

__all__ = [
    "CATALOGUE",
    "Catalogue",
    "CatalogueError",
    "Upcaster",
    "check_stream_name",
    "schema_error",
    "stream_category",
]

Upcaster = Callable[[dict[str, Any]], dict[str, Any]]

_STREAM_NAME = re.compile(r"^[a-z][a-z0-9]*(?:-[a-z0-9._-]+)?$")
_CATEGORY_ID_CHECK: Mapping[str, Callable[[str], bool]] = {
    "arena": is_arena_id,
    "submission": is_digest,
    "attempt": is_local_id,
    "payment": is_local_id,
    "credit": is_local_id,
    "calibration": is_local_id,
}


class CatalogueError(Exception):
    """Reports a broken catalogue (gap or cycle in versions); a programming error."""


def stream_category(stream: str) -> str:
    """Returns the category of a stream name: the part before the first dash."""
    return stream.split("-", 1)[0]


def check_stream_name(stream: str, where: str = "stream") -> None:
    """Refuses a stream name that is too long or not of the form ``category-id``."""
    if not isinstance(stream, str) or not stream:
        raise SchemaError(f"{where} must be a non-empty string", path=where)
    if len(stream) > limits.stream_name_chars_max:
        raise LimitExceeded(
            f"{where} is longer than {limits.stream_name_chars_max} characters",
            path=where,
            stream=stream[:64],
        )
    if _STREAM_NAME.fullmatch(stream) is None:
        raise SchemaError(
            f"{where} {stream!r} is not a valid stream name (category-id, lowercase)",
            path=where,
            stream=stream,
        )
    category, _, ident = stream.partition("-")
    check = _CATEGORY_ID_CHECK.get(category)
    if check is not None and not check(ident):
        raise SchemaError(
            f"{where} {stream!r} does not carry a valid {category} id", path=where, stream=stream
        )
    if category == "settlement" and ident:
        raise SchemaError(f"{where} must be exactly 'settlement'", path=where, stream=stream)


#: The value types a flat payload may hold; exact types, so a subclass takes the full walk.
_CANONICAL_FLAT = orjson.OPT_SORT_KEYS | orjson.OPT_STRICT_INTEGER
_SCALARS = frozenset({str, int, bool, type(None)})


def _is_scalar(annotation: Any) -> bool:
    """Tells whether a field's values are JSON scalars: str, int, bool, None or a Literal."""
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _is_scalar(typing.get_args(annotation)[0])
    if origin in (typing.Union, types.UnionType, typing.Literal):
        return all(
            _is_scalar(arg) if origin is not typing.Literal else type(arg) in _SCALARS
            for arg in typing.get_args(annotation)
        )
    return annotation in _SCALARS


def _flat_fields(model: type[Event]) -> frozenset[str] | None:
    """Returns the field names of a model whose fields are all scalars, else None."""
    fields = model.model_fields
    if not all(_is_scalar(info.annotation) for info in fields.values()):
        return None
    if not all(name.isascii() for name in fields):
        return None
    return frozenset(fields)


class Catalogue:
    """Registers event models and upcasters; validates and upcasts payloads."""

    def __init__(self) -> None:
        self._models: dict[tuple[str, int], type[Event]] = {}
        #: Per flat (type, version): field names, the model's validator, its stream category
        #: and that category's stream-name prefix.
        self._flat: dict[
            tuple[str, int], tuple[frozenset[str], Callable[[Any], Any], str | None, str]
        ] = {}
        self._upcasters: dict[tuple[str, int], Upcaster] = {}
        self._current: dict[str, int] = {}

    def register(self, model: type[Event]) -> None:
        """Adds one (type, version) model; its type's current version is the highest one."""
        key = (model.event_type, model.schema_version)
        if key in self._models:
            raise CatalogueError(f"{key} is registered twice")
        self._models[key] = model
        flat = _flat_fields(model)
        if flat is not None:
            validator = model.__pydantic_validator__.validate_python
            self._flat[key] = (flat, validator, model.category, f"{model.category}-")
        self._current[model.event_type] = max(
            self._current.get(model.event_type, 0), model.schema_version
        )

    def register_upcaster(self, event_type: str, from_version: int, upcaster: Upcaster) -> None:
        """Adds the pure function that lifts ``event_type`` from ``from_version`` to the next."""
        key = (event_type, from_version)
        if key in self._upcasters:
            raise CatalogueError(f"upcaster {key} is registered twice")
        self._upcasters[key] = upcaster

    def seal(self) -> Catalogue:
        """Checks every type's version chain (no gap, no cycle, ends at current); returns self."""
        for event_type, current in self._current.items():
            for version in range(1, current + 1):
                if (event_type, version) not in self._models:
                    raise CatalogueError(f"{event_type} has no schema version {version}")
                has_up = (event_type, version) in self._upcasters
                if version < current and not has_up:
                    raise CatalogueError(
                        f"{event_type} v{version} has no upcaster to v{version + 1}"
                    )
                if version == current and has_up:
                    raise CatalogueError(f"{event_type} v{current} is current but has an upcaster")
        for event_type, version in self._upcasters:
            if event_type not in self._current:
                raise CatalogueError(f"upcaster for unknown type {event_type}")
            if not 1 <= version < self._current[event_type]:
                raise CatalogueError(
                    f"upcaster {event_type} v{version} starts at a version that does not exist"
                )
        return self

    @property
    def types(self) -> dict[str, int]:
        """Maps each event type to its current schema version."""
        return dict(self._current)

    def model(self, event_type: str, version: int | None = None) -> type[Event]:
        """Returns the model of ``event_type`` at ``version`` (current when None)."""
        current = self._current.get(event_type)
        if current is None:
            raise UnknownEventType(
                f"unknown event type {event_type!r}{self.suggestion(event_type)}",
                type=event_type, path="$.type",
            )
        version = current if version is None else version
        model = self._models.get((event_type, version))
        if model is None:
            raise UnknownEventType(
                f"{event_type} has no schema version {version} (current is {current})",
                type=event_type,
                schema_version=version,
                path="$.schema_version",
            )
        return model

    def suggestion(self, event_type: str) -> str:
        """Returns " (did you mean 'CreditGranted'?)" for a misspelt type, naming the known
        type closest to ``event_type`` (difflib's ratio, as Python's own NameError hints
        do), or "" when none is close."""
        close = difflib.get_close_matches(event_type, self._current, n=1, cutoff=0.75)
        return f" (did you mean {close[0]!r}?)" if close else ""

    def current_version(self, event_type: str) -> int:
        """Returns the current schema version of ``event_type``."""
        return self.model(event_type).schema_version

    def validate(
        self, event_type: str, version: int, payload: Any, stream: str | None = None
    ) -> bytes:
        """Checks a payload against its schema and returns its canonical bytes, or raises.

        A payload of a flat model (scalars only) that holds only the model's keys and exact
        scalar values takes one strict pydantic-core validation and one orjson encoding: it
        has a canonical form exactly when validation passes, every integer is within
        ±(2**53 - 1) (orjson's strict-integer option) and no string holds a lone surrogate
        (orjson refuses it); its keys are the model's ASCII field names, so orjson's key
        sort is RFC 8785's. Any problem on that path, and every other payload, takes the
        full walk, which raises the error it always raised.
        """
        flat = self._flat.get((event_type, version))
        if flat is not None and type(payload) is dict:
            fields, validate_python, category, prefix = flat
            if (
                payload.keys() <= fields
                and _SCALARS.issuperset(map(type, payload.values()))
                and (
                    stream is None
                    or category is None
                    or stream == category
                    or stream.startswith(prefix)
                )
            ):
                try:
                    validate_python(payload)
                    data = orjson.dumps(payload, option=_CANONICAL_FLAT)
                except (ValidationError, orjson.JSONEncodeError):
                    data = b""
                if data and len(data) <= limits.payload_bytes_max:
                    return _exact(data)
        return _exact(self._validate_walk(event_type, version, payload, stream))

    def _validate_walk(
        self, event_type: str, version: int, payload: Any, stream: str | None
    ) -> bytes:
        """Validates any payload, normalising it first when it is not plain JSON."""
        model = self.model(event_type, version)
        if not isinstance(payload, dict):
            raise SchemaError(f"payload of {event_type} must be a JSON object", path="$.payload")
        data: bytes | None = plain_canonical_bytes(payload)
        document = payload if data is not None else normalise(payload, "$.payload")
        try:
            model.model_validate(document)
        except ValidationError as exc:
            raise schema_error(event_type, version, exc) from None
        category = model.category
        if stream is not None and category is not None and stream_category(stream) != category:
            raise SchemaError(
                f"{event_type} belongs to a {model.category}-… stream, not {stream!r}",
                path="$.stream",
                stream=stream,
                type=event_type,
            )
        if data is None:
            data = canonical_bytes(document)
        if len(data) > limits.payload_bytes_max:
            raise LimitExceeded(
                f"payload of {event_type} is {len(data)} bytes; the limit is "
                f"{limits.payload_bytes_max}",
                path="$.payload",
                size_bytes=len(data),
            )
        return data

    def upcast(self, event_type: str, version: int, payload: dict[str, Any]) -> dict[str, Any]:
        """Lifts a recorded payload to the current version through the upcaster chain."""
        current = self.current_version(event_type)
        if version > current or version < 1:
            raise UnknownEventType(f"{event_type} has no schema version {version}", type=event_type)
        while version < current:
            # A deep copy: an upcaster that edits a nested value must not touch the caller's.
            payload = self._upcasters[(event_type, version)](copy.deepcopy(payload))
            version += 1
        return payload

    def decode(self, event_type: str, version: int, payload: dict[str, Any]) -> Event:
        """Returns the event as a model of the current version (upcasting on the way)."""
        lifted = self.upcast(event_type, version, payload)
        try:
            return self.model(event_type).model_validate(lifted)
        except ValidationError as exc:  # a recorded payload off its schema: damage, named
            raise schema_error(event_type, self.current_version(event_type), exc) from None


def _exact(data: bytes) -> bytes:
    """Returns an exact-size copy of orjson's output, whose bytes sit in a 4 KiB allocation.

    A batch keeps every payload until it commits: kept as orjson returns them, each event
    would hold a 4 KiB block and touch a fresh page, costing more than the rest of the
    validation; a copy of a few hundred bytes comes from the small-object allocator and
    the 4 KiB block is reused by the next encoding.
    """
    return bytes(memoryview(data))


#: The tags of the catalogue's discriminated unions (ArenaCommissioned's policy).
_UNION_TAGS = frozenset(POLICY_VERSIONS)


def schema_error(event_type: str, version: int, exc: ValidationError) -> SchemaError:
    """Turns a pydantic error into a SchemaError naming the first bad JSON path."""
    first = exc.errors()[0]
    # A discriminated union names the member it tried (a policy_version) in the location;
    # that is no JSON key, so the path leaves it out, as it did before v2 policies existed.
    parts = [p for p in first["loc"] if p not in _UNION_TAGS]
    if first["type"] == "union_tag_invalid":
        parts.append(str(first.get("ctx", {}).get("discriminator", "")).strip("'"))
    loc = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in parts)
    path = f"$.payload{loc}"
    message = first["msg"]
    if first["type"] == "string_pattern_mismatch":
        pattern = first.get("ctx", {}).get("pattern")
        if pattern == DECIMAL_PATTERN:
            message = f"{_shown(first['input'])} {DECIMAL_PROBLEM}"
        elif pattern in PATTERN_WORDS:
            message += f" ({PATTERN_WORDS[pattern]}; got {_shown(first['input'])})"
    return SchemaError(
        f"{event_type} v{version}: {path}: {message}",
        path=path,
        type=event_type,
        errors=len(exc.errors()),
    )


def _shown(value: Any, limit: int = 80) -> str:
    """Returns ``repr(value)``, cut to ``limit`` characters (an error quotes, not dumps)."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _default_catalogue() -> Catalogue:
    catalogue = Catalogue()
    for model in ALL_EVENTS_V1:
        catalogue.register(model)
    return catalogue.seal()


#: The catalogue of every shipped event type and version.
CATALOGUE = _default_catalogue()

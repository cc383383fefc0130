"""Reads JSON Lines event drafts (`arena-ledger append`), naming the line of any error."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import IO, Any

from ledger.records import EventDraft
from ledger.store import parse_expected_version
from services.limits import line_bytes_max
from vocabulary.codec import loads
from vocabulary.errors import (
    CanonicalFormError,
    InvalidInput,
    LedgerError,
    LimitExceeded,
    MalformedJson,
    SchemaError,
)

__all__ = ["DraftLine", "line_bytes_max", "read_drafts"]

_FIELDS = {"stream", "type", "schema_version", "payload", "expected_version", "idempotency_key"}


@dataclass(frozen=True, slots=True)
class DraftLine:
    """Is one parsed input line: its number, the draft and its idempotency key, if any."""

    line: int
    draft: EventDraft
    idempotency_key: str | None


def read_drafts(source: IO[bytes]) -> Iterator[DraftLine]:
    """Parses each non-blank line into a draft, raising an error that names the line."""
    number = 0
    # A line at a time, never more than one byte past the limit: a file with no line break
    # (/dev/zero) is refused at the limit, not read until memory runs out.
    while raw := source.readline(line_bytes_max + 1):
        number += 1
        if len(raw) > line_bytes_max:
            size = f"{len(raw)} bytes" if raw.endswith(b"\n") else f"over {line_bytes_max} bytes"
            raise LimitExceeded(
                f"line is {size}; the limit is {line_bytes_max}", line=number, path="$"
            )
        if not raw.strip():
            continue
        try:
            yield _parse(number, raw)
        except LedgerError as exc:
            exc.context["line"] = number
            raise


def _parse(number: int, raw: bytes) -> DraftLine:
    # Without its line break: a JSON error's column is then counted within this line (the
    # break made an error at the line's end read "at column 1", of a line that is not there).
    try:
        document: Any = loads(raw.rstrip(b"\r\n"), where=f"line {number}")
    except CanonicalFormError as exc:
        # Text that does not parse is not JSON at all, not JSON off its canonical form
        # (a float, a duplicate key): its own code, so the user looks for a typo.
        if isinstance(exc.__cause__, json.JSONDecodeError):
            raise MalformedJson(exc.message, **exc.context) from None
        raise
    if not isinstance(document, dict):
        raise SchemaError("each line must be a JSON object", path="$")
    unknown = sorted(set(document) - _FIELDS)
    if unknown:
        raise SchemaError(f"unknown field {unknown[0]!r}", path=f"$.{unknown[0]}")
    for required in ("stream", "type", "payload"):
        if required not in document:
            raise SchemaError(f"missing field {required!r}", path=f"$.{required}")
    stream, event_type = document["stream"], document["type"]
    if not isinstance(stream, str):
        raise SchemaError("stream must be a string", path="$.stream")
    if not isinstance(event_type, str):
        raise SchemaError("type must be a string", path="$.type")
    schema_version = document.get("schema_version")
    if schema_version is not None and (type(schema_version) is not int or schema_version < 1):
        raise SchemaError("schema_version must be a positive integer", path="$.schema_version")
    key = document.get("idempotency_key")
    if key is not None and not isinstance(key, str):
        raise InvalidInput("idempotency_key must be a string", path="$.idempotency_key")
    draft = EventDraft(
        stream=stream,
        type=event_type,
        payload=document["payload"],
        schema_version=schema_version,
        expected_version=parse_expected_version(
            document.get("expected_version"), "$.expected_version"
        ),
    )
    return DraftLine(number, draft, key)

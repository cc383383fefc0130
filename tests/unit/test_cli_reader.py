"""Unit tests of ``services.draft_lines.read_drafts``: the JSON Lines ``arena-ledger append`` reads.

Each error names its line (``context["line"]``) and the place in it (``path``); the line
limit holds at exactly ``line_bytes_max`` bytes, newline included.
"""

from __future__ import annotations

import io
from typing import Any

import orjson
import pytest

from ledger.records import ANY, NO_STREAM
from services.draft_lines import line_bytes_max, read_drafts
from vocabulary.errors import (
    CanonicalFormError,
    InvalidInput,
    LedgerError,
    LimitExceeded,
    MalformedJson,
    SchemaError,
)


def _line(**fields: Any) -> bytes:
    return orjson.dumps({"stream": "widget-1", "type": "WidgetMade", "payload": {"n": 1}, **fields})


def _read(*lines: bytes) -> list[Any]:
    return list(read_drafts(io.BytesIO(b"".join(line + b"\n" for line in lines))))


def _error(*lines: bytes) -> LedgerError:
    with pytest.raises(LedgerError) as caught:
        _read(*lines)
    return caught.value


def test_lines_become_drafts_numbered_as_in_the_file_blank_lines_skipped() -> None:
    read = _read(
        _line(),
        b"   ",
        _line(stream="widget-2", schema_version=2, expected_version=4, idempotency_key="k-1"),
        _line(expected_version="no_stream"),
    )
    assert [r.line for r in read] == [1, 3, 4]
    first, second, third = read
    assert (first.draft.stream, first.draft.type, first.draft.payload) == (
        "widget-1",
        "WidgetMade",
        {"n": 1},
    )
    assert first.draft.schema_version is None and first.draft.expected_version == ANY
    assert first.idempotency_key is None
    assert (second.draft.stream, second.draft.schema_version) == ("widget-2", 2)
    assert second.draft.expected_version == 4 and second.idempotency_key == "k-1"
    assert third.draft.expected_version == NO_STREAM


def test_a_line_of_exactly_the_limit_is_read_and_one_byte_more_is_refused_naming_it() -> None:
    body = _line()
    at_limit = body + b" " * (line_bytes_max - 1 - len(body))  # + the newline: the limit
    assert len(at_limit) + 1 == line_bytes_max
    assert [r.line for r in _read(_line(), at_limit)] == [1, 2]
    over = at_limit + b" "
    with pytest.raises(LimitExceeded) as caught:
        _read(_line(), over)
    error = caught.value
    assert error.context == {"line": 2, "path": "$"}
    assert error.message == f"line is {line_bytes_max + 1} bytes; the limit is {line_bytes_max}"


@pytest.mark.parametrize(
    ("line", "kind", "path", "message"),
    [
        (b"[1, 2]", SchemaError, "$", "each line must be a JSON object"),
        (
            b'{"stream": "s"',
            MalformedJson,
            "$",
            "line 2 is not valid JSON: Expecting ',' delimiter at column 15",
        ),
        (b'{"stream": "s",}', MalformedJson, "$", "line 2 is not valid JSON: Expecting "
         "property name enclosed in double quotes at column 16"),
        (b'{"stream": "s", "stream": "t"}', CanonicalFormError, "$",
         "duplicate object key 'stream'"),
        (_line(colour="red"), SchemaError, "$.colour", "unknown field 'colour'"),
        (b'{"stream": "s", "type": "T"}', SchemaError, "$.payload", "missing field 'payload'"),
        (b'{"type": "T", "payload": {}}', SchemaError, "$.stream", "missing field 'stream'"),
        (_line(stream=7), SchemaError, "$.stream", "stream must be a string"),
        (_line(type=["T"]), SchemaError, "$.type", "type must be a string"),
        (_line(schema_version=0), SchemaError, "$.schema_version", "schema_version must be"),
        (_line(schema_version=True), SchemaError, "$.schema_version", "schema_version must be"),
        (_line(schema_version="1"), SchemaError, "$.schema_version", "schema_version must be"),
        (_line(idempotency_key=5), InvalidInput, "$.idempotency_key", "idempotency_key must"),
        (_line(expected_version=-1), SchemaError, "$.expected_version", "$.expected_version must"),
        (_line(expected_version="later"), SchemaError, "$.expected_version", 'must be "any"'),
    ],
)
def test_a_bad_line_is_refused_naming_its_number_and_place(
    line: bytes, kind: type[LedgerError], path: str, message: str
) -> None:
    error = _error(_line(), line, _line())
    assert type(error) is kind, error
    assert error.context["line"] == 2 and error.context["path"] == path
    assert message in error.message


def test_schema_version_one_is_the_least_accepted() -> None:
    assert _read(_line(schema_version=1))[0].draft.schema_version == 1


def test_a_line_without_end_is_refused_after_one_byte_past_the_limit() -> None:
    # Read line by line with no bound, a file without a line break was read whole first.
    source = io.BytesIO(_line() + b"\n" + b"x" * (line_bytes_max * 20))
    with pytest.raises(LimitExceeded) as caught:
        list(read_drafts(source))
    assert caught.value.message == (
        f"line is over {line_bytes_max} bytes; the limit is {line_bytes_max}"
    )
    assert caught.value.context == {"line": 2, "path": "$"}
    assert source.tell() == len(_line()) + 1 + line_bytes_max + 1

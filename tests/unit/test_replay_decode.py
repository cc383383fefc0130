"""Checks replay's fast payload parse and decode against ``codec.loads`` and ``CATALOGUE.decode``.

Replay parses every recorded payload with orjson and accepts the result only when the
sorted-key re-encoding gives back the very bytes; everything else goes to ``codec.loads``.
These tests hold the fast path to the slow one: the same value (and types) where the slow
path returns, the same exception (class and message) where it raises, on hand-picked
spellings and on hypothesis-generated documents written canonically and otherwise.
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

import services.replay as replay_module
from ledger.chain import chain_rows
from machines import samples
from services.replay import decoder, parse_payload, replay_rows
from vocabulary.catalogue import CATALOGUE
from vocabulary.codec import canonical_bytes, loads
from vocabulary.errors import CanonicalFormError, LedgerError, SchemaError
from vocabulary.events import ControlRegistered

GOLDEN = Path(__file__).resolve().parents[1] / "fixtures" / "golden"


def _outcome(parse: Any, data: bytes) -> tuple[Any, ...]:
    try:
        value = parse(data)
    except (LedgerError, ValueError) as exc:
        return ("raised", type(exc), str(exc))
    return ("value", _typed(value))


def _typed(value: Any) -> Any:
    """Returns ``value`` with every scalar tagged by its type (1 and True and 1.0 differ)."""
    if isinstance(value, dict):
        return ("dict", [(k, _typed(v)) for k, v in value.items()])
    if isinstance(value, list):
        return ("list", [_typed(v) for v in value])
    return (type(value).__name__, repr(value))


def _same_as_slow(data: bytes) -> None:
    assert _outcome(parse_payload, data) == _outcome(loads, data), data


SPELLINGS = [
    b'{"a":1,"b":"x"}',
    b"{}",
    b'{"b":1,"a":2}',  # keys out of order: valid JSON, not canonical
    b'{"a": 1}',  # whitespace
    b'{"a":1,"a":1}',  # a duplicate key with the same value
    b'{"a":1,"a":2}',
    b'{"a":{"b":1,"b":2}}',  # a nested duplicate
    b'{"a":"\\u00e9"}',  # an escape a canonical writer would not use
    '{"a":"é"}'.encode(),  # non-ASCII: the slow path
    '{"é":1,"z":2}'.encode(),
    b'{"a":1.0}',
    b'{"a":1e5}',
    b'{"a":-0}',
    b'{"a":-0.0}',
    b'{"a":18446744073709551615}',  # 2**64 - 1: orjson reads it
    b'{"a":18446744073709551616}',  # 2**64: orjson refuses it, json reads it
    b'{"a":' + b"9" * 400 + b"}",
    b'{"a":NaN}',
    b'{"a":Infinity}',
    b'{"a":"\\ud800"}',  # a lone surrogate escape
    b'{"a":"\\u0001\\n\\"\\\\"}',
    b'{"a":"\xff"}',  # not UTF-8
    b'{"a":1} ',
    b'{"a":1}x',
    b"[1,2]",
    b'"text"',
    b"null",
    b"",
    b'{"a":' * 300 + b"1" + b"}" * 300,  # deeper than orjson.dumps writes
    b'{"a":' * 2000 + b"1" + b"}" * 2000,  # deeper than either parser reads
]


@pytest.mark.parametrize("data", SPELLINGS)
def test_the_fast_parse_returns_or_raises_exactly_as_codec_loads(data: bytes) -> None:
    _same_as_slow(data)


def test_refusals_of_the_slow_path_are_kept() -> None:
    with pytest.raises(CanonicalFormError, match="duplicate object key 'a'"):
        parse_payload(b'{"a":1,"a":1}')
    with pytest.raises(CanonicalFormError, match="NaN is not allowed"):
        parse_payload(b'{"a":NaN}')
    with pytest.raises(CanonicalFormError, match="not valid UTF-8"):
        parse_payload(b'{"a":"\xff"}')


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> list[bytes]:
    """Records every payload replay hands to ``codec.loads`` (its slow path)."""
    seen: list[bytes] = []

    def counted(data: bytes) -> Any:
        seen.append(data)
        return loads(data)

    monkeypatch.setattr(replay_module, "loads", counted)
    return seen


def test_only_canonical_ascii_documents_skip_codec_loads(calls: list[bytes]) -> None:
    assert parse_payload(b'{"a":[1,{"b":null}],"c":true}') == {"a": [1, {"b": None}], "c": True}
    assert calls == []
    for data in (b'{"c":1,"a":2}', b'{"a":1,"a":1}', '{"a":"é"}'.encode(), b'{"a": 1}'):
        with contextlib.suppress(CanonicalFormError):
            parse_payload(data)
        assert calls[-1] == data


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=4), children, max_size=4)
    ),
    max_leaves=12,
)


@given(st.dictionaries(st.text(max_size=4), json_values, max_size=5), st.randoms())
def test_generated_documents_parse_alike_in_every_spelling(
    document: dict[str, Any], rng: Any
) -> None:
    _same_as_slow(_compact(document, sort_keys=True).encode())
    _same_as_slow(orjson.dumps(document, option=orjson.OPT_SORT_KEYS) if _fits(document) else b"")
    _same_as_slow(json.dumps(document).encode())  # spaces, document order, \\u escapes
    _same_as_slow(json.dumps(document, separators=(",", ":"), ensure_ascii=False).encode())
    items = list(document.items())
    rng.shuffle(items)
    if items:
        key, value = items[0]
        duplicated = [*items, (key, value)]
        body = ",".join(f"{json.dumps(k)}:{_compact(v)}" for k, v in duplicated)
        _same_as_slow(("{" + body + "}").encode())


def _compact(value: Any, *, sort_keys: bool = False) -> str:
    return json.dumps(value, sort_keys=sort_keys, separators=(",", ":"), ensure_ascii=False)


def _fits(value: Any) -> bool:
    """Tells whether orjson can write ``value`` (its integers fit in 64 bits)."""
    if isinstance(value, dict):
        return all(_fits(v) for v in value.values())
    if isinstance(value, list):
        return all(_fits(v) for v in value)
    return type(value) is not int or -(2**63) <= value < 2**64


def _golden() -> list[tuple[str, int, Any]]:
    cases = []
    for path in sorted(GOLDEN.glob("*.v*.json")):
        kind, version = path.name.split(".")[:2]
        cases.append((kind, int(version[1:]), json.loads(path.read_text())))
    return cases


@pytest.mark.parametrize(("kind", "version", "payload"), _golden(), ids=lambda v: str(v)[:24])
def test_the_decoder_equals_catalogue_decode_on_every_golden_fixture(
    kind: str, version: int, payload: Any
) -> None:
    decode = decoder()
    assert decode(kind, version, payload) == CATALOGUE.decode(kind, version, payload)
    assert type(decode(kind, version, payload)) is CATALOGUE.model(kind)


def _raised(call: Any) -> tuple[Any, ...]:
    try:
        call()
    except ValidationError as exc:
        return (ValidationError, exc.errors(include_url=False))
    except LedgerError as exc:
        return (type(exc), str(exc), exc.context)
    raise AssertionError("no exception")


@pytest.mark.parametrize(
    ("kind", "version", "payload"),
    [
        ("AttemptDecided", 1, {}),
        ("AttemptDecided", 1, [1]),
        ("SubmissionHeld", 1, {"reason": "r", "block": 1, "extra": 1}),
        ("SubmissionHeld", 1, {"reason": "r", "block": True}),
        ("SubmissionHeld", 2, {"reason": "r", "block": 1}),
        ("SubmissionHeld", 0, {"reason": "r", "block": 1}),
        ("NoSuchEvent", 1, {}),
    ],
)
def test_the_decoder_refuses_what_catalogue_decode_refuses(
    kind: str, version: int, payload: Any
) -> None:
    decode = decoder()
    assert _raised(lambda: decode(kind, version, payload)) == _raised(
        lambda: CATALOGUE.decode(kind, version, payload)
    )


def test_catalogue_decode_names_a_payload_off_its_schema_as_a_schema_error() -> None:
    # A recorded payload off its schema is damage named by its path (one error line on the
    # command line), not pydantic's ValidationError (a traceback).
    with pytest.raises(SchemaError) as caught:
        CATALOGUE.decode("SubmissionHeld", 1, {"reason": "r", "block": 1, "extra": 1})
    assert caught.value.context["path"] == "$.payload.extra"
    assert caught.value.message == (
        "SubmissionHeld v1: $.payload.extra: Extra inputs are not permitted")


def _chained(drafts: list[tuple[str, str, int, bytes]]) -> list[Any]:
    """Returns a ledger of (stream, type, schema_version, payload bytes), entry hashes chained."""
    versions = dict.fromkeys((draft[0] for draft in drafts), 0)
    rows, _ = chain_rows(bytes(32), 0, versions, drafts, "2026-01-01T00:00:00Z", "tester")
    return list(rows)


def _one_row(kind: str, version: int, data: bytes) -> list[Any]:
    """Returns a one-event ledger (its entry hash chained) recording ``data`` as it is."""
    return _chained([("arena-a", kind, version, data)])


_RETIRED = CATALOGUE.types["ArenaRetired"]


@pytest.mark.parametrize("data", SPELLINGS)
@pytest.mark.parametrize("version", [_RETIRED, _RETIRED + 1])
def test_replay_parses_and_decodes_each_row_as_the_helpers_do(data: bytes, version: int) -> None:
    # A row the two helpers refuse (not JSON, off its schema, a version the catalogue does
    # not know) is a divergence at its position naming exactly their error, not an
    # exception out of the replay (a pydantic traceback on the command line, once).
    rows = _one_row("ArenaRetired", version, data)
    with pytest.raises(LedgerError) as refused:  # none of these is a valid ArenaRetired
        decoder()("ArenaRetired", version, parse_payload(data))
    report = replay_rows(rows)
    d = report.divergence
    assert d is not None and not report.ok
    assert (d.position, d.stream, d.type, d.recorded, d.code, d.recomputed) == (
        1, "arena-a", "ArenaRetired", None, refused.value.code, refused.value.message)
    path = refused.value.context.get("path", "")
    assert d.field == (path.removeprefix("$.payload.") if path.startswith("$.payload.")
                       else "event")
    assert (report.events, report.last_position) == (0, 0)


def test_replay_reads_canonical_payloads_without_codec_loads(calls: list[bytes]) -> None:
    canonical = b'{"block":5,"reason":"done"}'
    report = replay_rows(_one_row("ArenaRetired", _RETIRED, canonical))
    assert calls == []
    assert report.events == 1  # decoded and folded: refused, for no arena was commissioned
    assert report.divergence is not None and report.divergence.code != "hash_mismatch"
    spaced = b'{"block": 5, "reason": "done"}'
    report = replay_rows(_one_row("ArenaRetired", _RETIRED, spaced))
    assert calls == [spaced]
    assert report.events == 1


def _ledger(*events: tuple[str, Any]) -> list[Any]:
    """Returns chained rows recording ``(stream, event)`` pairs canonically, in order."""
    return _chained([
        (stream, event.event_type, CATALOGUE.types[event.event_type],
         canonical_bytes(event.model_dump(mode="json", exclude_unset=True)))
        for stream, event in events
    ])


def test_a_refusal_divergence_names_the_field_its_detail_names_or_the_event() -> None:
    # Machines spell a detail about one field as "field: …" (control_id_reused here); a
    # detail that is only a value (the arena id of a stream_id_mismatch) names no field.
    commissioned = samples.commissioned("mlp")
    control = ControlRegistered(control_id="ctl", kind="identity",
                                delta_digest=samples.hex64("delta"), expected_verdict="PASS")
    report = replay_rows(_ledger(("arena-mlp", commissioned), ("arena-mlp", control),
                                 ("arena-mlp", control)))
    assert report.divergence is not None
    assert (report.divergence.position, report.divergence.code, report.divergence.field) == (
        3, "control_id_reused", "control_id")
    assert report.divergence.recomputed == "control_id: ctl"
    report = replay_rows(_ledger(("arena-other", commissioned)))
    assert report.divergence is not None
    assert (report.divergence.code, report.divergence.field, report.divergence.recomputed) == (
        "stream_id_mismatch", "event", "mlp")


def test_payload_columns_a_driver_returns_as_memoryview_replay_alike() -> None:
    # SQLite and psycopg 3 return bytes; a driver that returns a memoryview (psycopg2 did)
    # must give the same report, chain and refusal included.
    rows = _ledger(("arena-mlp", samples.commissioned("mlp")),
                   ("arena-mlp", samples.commissioned("other")))
    viewed = [(*row[:5], memoryview(row[5]), *row[6:]) for row in rows]
    expected = replay_rows(rows)
    assert expected.divergence is not None and expected.divergence.code == "stream_id_mismatch"
    assert replay_rows(viewed).to_json() == expected.to_json()

"""Checks the v1 event catalogue (docs/events.md): golden payloads, schemas, upcasters, streams."""

from __future__ import annotations

import copy
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from upcast_widgets import (  # tests/, on sys.path through its conftest
    WidgetV1,
    WidgetV2,
    WidgetV3,
    widget_catalogue,
    widget_v1_to_v2,
    widget_v2_to_v3,
)

from vocabulary import limits
from vocabulary.catalogue import (
    CATALOGUE,
    CatalogueError,
    check_stream_name,
    stream_category,
)
from vocabulary.codec import canonical_bytes, digest, loads
from vocabulary.errors import CanonicalFormError, LimitExceeded, SchemaError, UnknownEventType
from vocabulary.events import ALL_EVENTS_V1, Event

GOLDEN_DIR = Path(__file__).resolve().parents[1] / "fixtures" / "golden"
_GOLDEN_NAME = re.compile(r"^(?P<type>[A-Za-z]+)\.v(?P<version>[1-9][0-9]*)\.json$")

#: The binding names and streams of docs/events.md; renaming one breaks outside consumers.
DOMAIN_TYPES = {
    "arena": ["ArenaCommissioned", "ControlRegistered", "IncumbentAdvanced", "ArenaRetired"],
    "submission": ["SubmissionArrived", "SubmissionAdmitted", "SubmissionRejected",
                   "QualificationStarted", "SubmissionResolved", "SubmissionHeld",
                   "HoldReleased", "SubmissionRequeued", "SubmissionExpired"],
    "payment": ["PaymentConsumed", "PaymentReleased"],
    "credit": ["CreditGranted", "CreditSpent"],
    "attempt": ["AttemptClaimed", "WindowMeasured", "AuditNodeGraded", "QualityGraded",
                "InfrastructureFault", "AttemptDecided"],
    "settlement": ["EmissionPolicySet", "SettlementComputed"],
    "calibration": ["CalibrationStarted", "CalibrationWindowMeasured", "CalibrationConcluded"],
}
EXAMPLE_STREAM = {
    "arena": "arena-qwen3-8b-mlp",
    "submission": "submission-" + "6d" * 32,
    "payment": "payment-pay-5218890-12",
    "credit": "credit-credit-2026-11-ops-1",
    "attempt": "attempt-att-6d3e1395-1",
    "settlement": "settlement",
    "calibration": "calibration-cal-qwen3-8b-mlp-5218800",
}
CATEGORY_OF = {t: c for c, types in DOMAIN_TYPES.items() for t in types}


def _all_versions() -> list[tuple[str, int]]:
    return sorted((t, v) for t, current in CATALOGUE.types.items() for v in range(1, current + 1))


def _golden_path(event_type: str, version: int) -> Path:
    return GOLDEN_DIR / f"{event_type}.v{version}.json"


def golden(event_type: str, version: int = 1) -> dict[str, Any]:
    """Returns a fresh copy of a golden payload (tests mutate it)."""
    value: dict[str, Any] = loads(_golden_path(event_type, version).read_bytes())
    return value


# -- the catalogue itself --------------------------------------------------------------------


def test_the_catalogue_holds_exactly_the_domain_types_at_version_one() -> None:
    assert CATALOGUE.types == {t: 1 for t in CATEGORY_OF}
    assert [m.event_type for m in ALL_EVENTS_V1] == list(dict.fromkeys(
        m.event_type for m in ALL_EVENTS_V1))  # no type twice


@pytest.mark.parametrize("event_type", sorted(CATEGORY_OF))
def test_each_type_belongs_to_its_domain_stream_category(event_type: str) -> None:
    model = CATALOGUE.model(event_type)
    assert model.category == CATEGORY_OF[event_type]
    assert model.schema_version == 1 and model.event_type == event_type
    assert model.model_config.get("frozen") is True
    assert model.model_config.get("extra") == "forbid"
    assert model.model_config.get("strict") is True


def test_the_default_catalogue_seals_cleanly() -> None:
    assert CATALOGUE.seal() is CATALOGUE


# -- golden fixtures -------------------------------------------------------------------------


@pytest.mark.parametrize(("event_type", "version"), _all_versions())
def test_every_catalogue_version_has_a_golden_fixture(event_type: str, version: int) -> None:
    path = _golden_path(event_type, version)
    assert path.is_file(), f"add {path.relative_to(GOLDEN_DIR.parents[1])} (a realistic payload)"


def test_no_golden_fixture_is_stray() -> None:
    known = set(_all_versions())
    for path in GOLDEN_DIR.glob("*.json"):
        match = _GOLDEN_NAME.match(path.name)
        assert match, f"{path.name} is not named <Type>.v<N>.json"
        assert (match["type"], int(match["version"])) in known, f"{path.name} is stray"


@pytest.mark.parametrize(("event_type", "version"), _all_versions())
def test_a_golden_payload_is_canonical_validates_and_round_trips(
    event_type: str, version: int
) -> None:
    raw = _golden_path(event_type, version).read_bytes()
    assert raw.endswith(b"\n") and not raw.endswith(b"\n\n")
    stored = raw[:-1]
    payload = loads(stored)

    assert canonical_bytes(payload) == stored  # the file is in canonical form
    assert CATALOGUE.validate(event_type, version, payload) == stored
    category = CATALOGUE.model(event_type, version).category
    assert category is not None
    assert CATALOGUE.validate(event_type, version, payload, EXAMPLE_STREAM[category]) == stored
    model = CATALOGUE.decode(event_type, version, payload)
    assert type(model).event_type == event_type
    # Nothing in the fixture is lost or added by the model (defaults stay unset).
    assert model.model_dump(mode="json", exclude_unset=True) == payload


def test_golden_payloads_are_internally_consistent() -> None:
    arrived = golden("SubmissionArrived")
    arrival_key = {"arena_id": arrived["arena_id"], **arrived["arrival"],
                   "miner_hotkey": arrived["miner_hotkey"],
                   "content_hash": arrived["content_hash"]}
    assert arrived["submission_id"] == digest("arena-ledger.arrival", arrival_key)
    claimed = golden("AttemptClaimed")
    assert claimed["submission_id"] == arrived["submission_id"]
    assert claimed["commission_digest"] == digest(
        "arena-ledger.commission", golden("ArenaCommissioned"))
    assert sum(golden("SettlementComputed")["weights_ppm"].values()) == 1_000_000


# -- strict schemas and error paths ----------------------------------------------------------


def _set(path: list[Any], value: Any) -> Callable[[dict[str, Any]], None]:
    def mutate(payload: dict[str, Any]) -> None:
        target = payload
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = value
    return mutate


def _delete(key: str) -> Callable[[dict[str, Any]], None]:
    return lambda payload: payload.pop(key)


@pytest.mark.parametrize(
    ("event_type", "mutate", "path"),
    [
        ("SubmissionArrived", _set(["arrival", "block"], "5218890"), "$.payload.arrival.block"),
        ("SubmissionArrived", _set(["arrival", "block"], -1), "$.payload.arrival.block"),
        ("SubmissionArrived", _set(["arrival", "extra"], 1), "$.payload.arrival.extra"),
        ("SubmissionArrived", _set(["unknown_field"], "x"), "$.payload.unknown_field"),
        ("SubmissionArrived", _delete("arena_id"), "$.payload.arena_id"),
        ("SubmissionArrived", _set(["submission_id"], "6D" * 32), "$.payload.submission_id"),
        ("SubmissionArrived", _set(["arena_id"], "Qwen"), "$.payload.arena_id"),
        ("SubmissionArrived", _set(["miner_hotkey"], "has space"), "$.payload.miner_hotkey"),
        ("WindowMeasured", _set(["stock_cost_ns"], True), "$.payload.stock_cost_ns"),
        ("WindowMeasured", _set(["stock_cost_ns"], "1000000000"), "$.payload.stock_cost_ns"),
        ("WindowMeasured", _set(["stock_cost_ns"], 0), "$.payload.stock_cost_ns"),
        ("WindowMeasured", _set(["orientation"], 3), "$.payload.orientation"),
        ("WindowMeasured", _set(["stock_decode_tps"], "1834.270"), "$.payload.stock_decode_tps"),
        ("AuditNodeGraded", _set(["min_score"], "0.99870"), "$.payload.min_score"),
        ("AuditNodeGraded", _set(["min_score"], "1e-3"), "$.payload.min_score"),
        ("AuditNodeGraded", _set(["calls"], "128"), "$.payload.calls"),
        ("QualityGraded", _set(["regression"], 0), "$.payload.regression"),
        ("QualityGraded", _set(["argmax_agreement"], "+0.9991"), "$.payload.argmax_agreement"),
        ("ArenaCommissioned", _set(["policy", "z", "3"], "2.0"), "$.payload.policy.z.3"),
        ("ArenaCommissioned", _set(["policy", "audit", "min_calls"], 0),
         "$.payload.policy.audit.min_calls"),
        ("ArenaCommissioned", _set(["policy", "window_noise"], "0.03"), "$.payload.policy"),
        ("ArenaCommissioned", _set(["engine", "runtime"], "vllm"), "$.payload.engine.runtime"),
        ("ArenaCommissioned", _set(["emission_share_ppm"], 1_000_001),
         "$.payload.emission_share_ppm"),
        ("AttemptDecided", _set(["speedup"], "1.01913"), "$.payload.speedup"),
        ("AttemptDecided", _set(["speedup"], "1.0191290"), "$.payload.speedup"),
        ("AttemptDecided", _set(["pass_line"], "-0.000000"), "$.payload.pass_line"),
        ("AttemptDecided", _set(["look_window"], 6), "$.payload.look_window"),
        ("AttemptDecided", _set(["verdict"], "pass"), "$.payload.verdict"),
        ("AttemptDecided", _set(["rules_version"], "paired-windows.v3"),
         "$.payload.rules_version"),
        ("AttemptClaimed", _set(["attempt_id"], "Att_1"), "$.payload.attempt_id"),
        ("AttemptClaimed", _set(["plan"], "fast"), "$.payload.plan"),
        ("InfrastructureFault", _set(["code"], "gpu_on_fire"), "$.payload.code"),
        ("SettlementComputed", _set(["claims", 0], "not an object"), "$.payload.claims[0]"),
        ("SettlementComputed", _set(["weights_ppm", "5Miner"], "1"),
         "$.payload.weights_ppm.5Miner"),
        ("SubmissionRejected", _set(["reason"], 5), "$.payload.reason"),
        ("SubmissionRejected", _set(["reason"], "x" * 257), "$.payload.reason"),
        ("SubmissionAdmitted", _set(["fee", "kind"], "cash"), "$.payload.fee.kind"),
    ],
)
def test_schema_errors_name_the_json_path(
    event_type: str, mutate: Callable[[dict[str, Any]], None], path: str
) -> None:
    payload = golden(event_type)
    mutate(payload)
    with pytest.raises(SchemaError) as caught:
        CATALOGUE.validate(event_type, 1, payload)
    err = caught.value
    assert err.path == path  # type: ignore[attr-defined]
    assert path in str(err) and event_type in str(err)
    assert err.code == "schema_invalid" and err.type == event_type  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("event_type", "mutate", "path"),
    [
        ("WindowMeasured", _set(["window"], 3.0), "$.payload.window"),
        ("ArenaCommissioned", _set(["engine", "engine_config", "temp"], 0.7),
         "$.payload.engine.engine_config.temp"),
        ("SettlementComputed", _set(["claims", 0, "speedup"], 1.019),
         "$.payload.claims[0].speedup"),
        ("AuditNodeGraded", _set(["calls"], 2**53), "$.payload.calls"),
    ],
)
def test_floats_and_oversized_integers_are_refused_by_the_codec_with_their_path(
    event_type: str, mutate: Callable[[dict[str, Any]], None], path: str
) -> None:
    payload = golden(event_type)
    mutate(payload)
    with pytest.raises(CanonicalFormError) as caught:
        CATALOGUE.validate(event_type, 1, payload)
    assert caught.value.path == path  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("field", "value"),
    [("speedup", None), ("pass_line", None), ("look_window", None), ("speedup", "0.000000"),
     ("speedup", "-0.000001"), ("pass_line", "12.000000")],
)
def test_attempt_decided_takes_fixed6_or_null(field: str, value: Any) -> None:
    payload = golden("AttemptDecided")
    payload[field] = value
    assert CATALOGUE.decode("AttemptDecided", 1, payload).model_dump()[field] == value


@pytest.mark.parametrize("text", ["0.99\n", "0.99 ", " 0.99", "0.990", "00.99"])
def test_a_decimal_field_refuses_every_non_canonical_spelling(text: str) -> None:
    payload = golden("QualityGraded")
    payload["argmax_agreement"] = text
    with pytest.raises(SchemaError) as caught:
        CATALOGUE.validate("QualityGraded", 1, payload)
    assert caught.value.path == "$.payload.argmax_agreement"  # type: ignore[attr-defined]


def test_a_fixed6_field_refuses_a_leading_zero_spelling() -> None:
    payload = golden("AttemptDecided")
    payload["speedup"] = "01.019129"  # the same value as "1.019129", spelled twice
    with pytest.raises(SchemaError):
        CATALOGUE.validate("AttemptDecided", 1, payload)


def test_optional_fields_may_be_omitted() -> None:
    arrived = golden("SubmissionArrived")
    del arrived["payment_ref"]
    assert CATALOGUE.decode("SubmissionArrived", 1, arrived).payment_ref is None
    measured = golden("WindowMeasured")
    for key in ("stock_decode_tps", "candidate_decode_tps", "stock_ttft_ms", "candidate_ttft_ms"):
        del measured[key]
    CATALOGUE.validate("WindowMeasured", 1, measured)


def test_a_payload_must_be_an_object() -> None:
    for payload in ([], "x", None, 1):
        with pytest.raises(SchemaError) as caught:
            CATALOGUE.validate("ArenaRetired", 1, payload)
        assert caught.value.path == "$.payload"  # type: ignore[attr-defined]


def test_a_payload_over_payload_bytes_max_is_refused() -> None:
    payload = golden("SettlementComputed")
    payload["fees"]["pad"] = "x" * limits.payload_bytes_max
    with pytest.raises(LimitExceeded) as caught:
        CATALOGUE.validate("SettlementComputed", 1, payload)
    assert caught.value.path == "$.payload"  # type: ignore[attr-defined]


def test_unknown_types_and_versions_are_refused() -> None:
    with pytest.raises(UnknownEventType):
        CATALOGUE.validate("SubmissionVanished", 1, {})
    with pytest.raises(UnknownEventType) as caught:
        CATALOGUE.validate("ArenaRetired", 2, golden("ArenaRetired"))
    assert caught.value.schema_version == 2  # type: ignore[attr-defined]
    with pytest.raises(UnknownEventType):
        CATALOGUE.upcast("ArenaRetired", 0, golden("ArenaRetired"))


def test_validation_leaves_the_callers_payload_alone() -> None:
    payload = golden("ArenaCommissioned")
    before = copy.deepcopy(payload)
    CATALOGUE.validate("ArenaCommissioned", 1, payload)
    assert payload == before


# -- streams ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "stream",
    ["arena-qwen3-8b-mlp", "arena-a", "arena-0", "arena-" + "a" * 63, "submission-" + "0f" * 32,
     "attempt-att.1_x-2", "attempt-" + "a" * 64, "payment-pay-1", "credit-c.1", "settlement"],
)
def test_valid_stream_names(stream: str) -> None:
    check_stream_name(stream)


@pytest.mark.parametrize(
    "stream",
    [
        "arena-" + "a" * 64,  # arena slug is 1..63
        "arena--x", "arena-Qwen", "arena-", "arena", "arena-a_b", "arena-a.b",
        "submission-abc", "submission-" + "0F" * 32, "submission-" + "0f" * 32 + "0",
        "attempt-" + "a" * 65, "attempt-a b", "attempt-A", "payment-", "credit-Ü",
        "settlement-1", "Settlement", "", "-x", "arena_x", " arena-a",
        "arena-qwen\n", "submission-" + "0f" * 32 + "\n", "settlement\n",
    ],
)
def test_invalid_stream_names_are_refused(stream: str) -> None:
    with pytest.raises(SchemaError) as caught:
        check_stream_name(stream)
    assert caught.value.path == "stream"  # type: ignore[attr-defined]


def test_an_overlong_stream_name_is_a_limit() -> None:
    with pytest.raises(LimitExceeded):
        check_stream_name("credit-" + "a" * limits.stream_name_chars_max)


def test_stream_category_is_the_part_before_the_first_dash() -> None:
    assert stream_category("submission-" + "0f" * 32) == "submission"
    assert stream_category("arena-qwen3-8b") == "arena"
    assert stream_category("settlement") == "settlement"


@pytest.mark.parametrize("event_type", sorted(CATEGORY_OF))
def test_an_event_in_another_categorys_stream_is_refused(event_type: str) -> None:
    category = CATEGORY_OF[event_type]
    wrong = next(s for c, s in EXAMPLE_STREAM.items() if c != category)
    with pytest.raises(SchemaError) as caught:
        CATALOGUE.validate(event_type, 1, golden(event_type), wrong)
    assert caught.value.path == "$.stream"  # type: ignore[attr-defined]
    assert caught.value.stream == wrong  # type: ignore[attr-defined]


# -- upcasters (a test-only type with three versions: tests/upcast_widgets.py) --------------


def test_reading_a_v1_payload_yields_the_v3_model() -> None:
    catalogue = widget_catalogue().seal()
    assert catalogue.types == {"TestWidgetRecorded": 3}
    assert catalogue.current_version("TestWidgetRecorded") == 3
    assert catalogue.decode("TestWidgetRecorded", 1, {"name": "gear"}) == WidgetV3(
        label="gear", size=4)
    assert catalogue.decode("TestWidgetRecorded", 2, {"name": "gear", "size": 9}) == WidgetV3(
        label="gear", size=9)
    assert catalogue.decode("TestWidgetRecorded", 3, {"label": "cog", "size": 1}) == WidgetV3(
        label="cog", size=1)
    assert catalogue.upcast("TestWidgetRecorded", 1, {"name": "gear"}) == {
        "label": "gear", "size": 4}


def test_old_versions_still_validate_as_recorded() -> None:
    catalogue = widget_catalogue().seal()
    assert catalogue.validate("TestWidgetRecorded", 1, {"name": "gear"}) == b'{"name":"gear"}'
    with pytest.raises(SchemaError):
        catalogue.validate("TestWidgetRecorded", 3, {"name": "gear"})
    with pytest.raises(UnknownEventType):
        catalogue.upcast("TestWidgetRecorded", 4, {"label": "x", "size": 1})


def test_upcasters_are_pure() -> None:
    recorded = {"name": "gear"}
    for upcaster, payload in ((widget_v1_to_v2, recorded), (widget_v2_to_v3, {"name": "g",
                                                                             "size": 1})):
        before = copy.deepcopy(payload)
        assert upcaster(payload) == upcaster(copy.deepcopy(payload))
        assert payload == before
    catalogue = widget_catalogue().seal()
    catalogue.decode("TestWidgetRecorded", 1, recorded)
    assert recorded == {"name": "gear"}


def test_the_catalogue_shields_the_recorded_payload_from_a_careless_upcaster() -> None:
    def careless(payload: dict[str, Any]) -> dict[str, Any]:
        payload["size"] = 1
        return payload

    catalogue = widget_catalogue(upcasters=((1, careless), (2, widget_v2_to_v3))).seal()
    recorded = {"name": "gear"}
    assert catalogue.decode("TestWidgetRecorded", 1, recorded).size == 1
    assert recorded == {"name": "gear"}


@pytest.mark.parametrize(
    ("models", "upcasters", "message"),
    [
        ((WidgetV1, WidgetV3), ((1, widget_v1_to_v2), (2, widget_v2_to_v3)), "version 2"),
        ((WidgetV1, WidgetV2, WidgetV3), ((1, widget_v1_to_v2),), "v2 has no upcaster to v3"),
        ((WidgetV1, WidgetV2, WidgetV3), ((2, widget_v2_to_v3),), "v1 has no upcaster to v2"),
        ((WidgetV1, WidgetV2), ((1, widget_v1_to_v2), (2, widget_v2_to_v3)), "current"),
        ((WidgetV1, WidgetV2, WidgetV3),
         ((1, widget_v1_to_v2), (2, widget_v2_to_v3), (3, widget_v2_to_v3)), "current"),
    ],
)
def test_seal_refuses_a_broken_chain(
    models: tuple[type[Event], ...], upcasters: tuple[tuple[int, Any], ...], message: str
) -> None:
    with pytest.raises(CatalogueError, match=message):
        widget_catalogue(models, upcasters).seal()


@pytest.mark.parametrize("from_version", [0, 4, 7])
def test_seal_refuses_an_upcaster_from_a_version_that_does_not_exist(from_version: int) -> None:
    catalogue = widget_catalogue()
    catalogue.register_upcaster("TestWidgetRecorded", from_version, widget_v1_to_v2)
    with pytest.raises(CatalogueError):
        catalogue.seal()


def test_seal_refuses_an_upcaster_for_an_unknown_type() -> None:
    catalogue = widget_catalogue()
    catalogue.register_upcaster("NoSuchThing", 1, widget_v1_to_v2)
    with pytest.raises(CatalogueError, match="unknown type"):
        catalogue.seal()


def test_registering_twice_is_refused() -> None:
    catalogue = widget_catalogue()
    with pytest.raises(CatalogueError):
        catalogue.register(WidgetV2)
    with pytest.raises(CatalogueError):
        catalogue.register_upcaster("TestWidgetRecorded", 1, widget_v1_to_v2)


# -- the flat-payload fast path gives exactly what the full walk gives -----------------------


class _Label(str):
    """A str subclass: the walk encodes it as the plain string it holds."""


class _Count(int):
    """An int subclass: the walk refuses it (no JSON form)."""


_ODD_VALUES = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**60), 2**60),
    st.integers(-(2**53) - 2, -(2**53) + 2), st.integers(2**53 - 2, 2**53 + 2),
    st.floats(allow_nan=True), st.text(max_size=6), st.sampled_from(["\ud800", "1.50", "0"]),
    st.builds(_Label, st.text(max_size=4)), st.builds(_Count, st.integers(0, 9)),
    st.lists(st.integers(0, 3), max_size=2), st.dictionaries(st.text(max_size=2), st.none()),
)


def _outcome(call: Callable[[], bytes]) -> tuple[str, str]:
    try:
        return "ok", call().decode("utf-8")
    except Exception as exc:  # the test compares whatever each path raises
        return type(exc).__name__, str(exc)


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_flat_payloads_validate_exactly_as_the_full_walk_does(data: st.DataObject) -> None:
    flat_types = sorted(t for t in CATEGORY_OF if (t, 1) in CATALOGUE._flat)
    event_type = data.draw(st.sampled_from(flat_types))
    payload = golden(event_type)
    for name in data.draw(st.lists(st.sampled_from(sorted(payload) or ["x"]), max_size=3)):
        payload[name] = data.draw(_ODD_VALUES)
    if data.draw(st.booleans()):
        payload[data.draw(st.sampled_from(["extra", "\u00e9", "block"]))] = data.draw(_ODD_VALUES)
    if payload and data.draw(st.booleans()):
        del payload[data.draw(st.sampled_from(sorted(payload)))]
    stream = data.draw(st.sampled_from([EXAMPLE_STREAM[CATEGORY_OF[event_type]],
                                        "arena-wrong-category", "attempt-x"]))
    fast = _outcome(lambda: CATALOGUE.validate(event_type, 1, payload, stream))
    walk = _outcome(lambda: CATALOGUE._validate_walk(event_type, 1, payload, stream))
    assert fast == walk


def test_the_append_path_types_are_flat_and_the_nested_ones_are_not() -> None:
    assert ("WindowMeasured", 1) in CATALOGUE._flat
    assert ("AuditNodeGraded", 1) in CATALOGUE._flat
    assert ("ArenaCommissioned", 1) not in CATALOGUE._flat  # engine_config is any JSON
    assert ("SettlementComputed", 1) not in CATALOGUE._flat


def test_validated_payloads_are_held_at_their_own_size() -> None:
    # A batch keeps every canonical payload until it commits; orjson's own result sits in a
    # 4 KiB block, which cost each event a fresh page. Both paths return exact-size bytes.
    import tracemalloc

    flat = [{"block": i, "reason": f"retired {i}"} for i in range(200)]
    kept: list[bytes] = []
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        kept.extend(CATALOGUE.validate("ArenaRetired", 1, p, "arena-a") for p in flat)
        kept.append(CATALOGUE.validate("ArenaRetired", 1, {"block": 1, "reason": "é" * 40},
                                       "arena-a"))
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert kept[0] == canonical_bytes(flat[0])
    assert held < len(kept) * 256, f"{held / len(kept):.0f} bytes held per payload"


def test_a_payload_that_is_not_plain_json_is_encoded_like_its_plain_twin() -> None:
    """Non-ASCII keys and a tuple take the full walk (normalise, then canonical_bytes); the
    bytes are those of the same document written as plain JSON, keys in UTF-16 order."""
    from machines import samples

    plain = samples.commission_document()
    plain["engine"]["engine_config"] = {"é": 1, "z": [1, 2], "a": "x"}
    twin = copy.deepcopy(plain)
    twin["engine"]["engine_config"] = {"é": 1, "z": (1, 2), "a": "x"}
    data = CATALOGUE.validate("ArenaCommissioned", 1, twin)
    assert data == CATALOGUE.validate("ArenaCommissioned", 1, plain)
    assert b'"engine_config":{"a":"x","z":[1,2],"\xc3\xa9":1}' in data


def test_a_schema_error_names_the_first_bad_field_and_words_decimals_plainly() -> None:
    """Of two bad fields the first is named (with the count); a decimal that is not in
    canonical spelling says so, any other pattern keeps pydantic's wording."""
    from machines import samples

    document = samples.commission_document()
    document["policy"] = {**document["policy"], "window_noise": "0.010"}
    with pytest.raises(SchemaError) as caught:
        CATALOGUE.validate("ArenaCommissioned", 1, document)
    assert caught.value.context["path"] == "$.payload.policy.window_noise"
    assert "'0.010' is not a decimal in canonical spelling" in caught.value.message
    document["emission_share_ppm"] = -1
    with pytest.raises(SchemaError) as caught:
        CATALOGUE.validate("ArenaCommissioned", 1, {**document, "arena_id": "Upper"})
    assert caught.value.context["path"] == "$.payload.arena_id"
    assert caught.value.context["errors"] == 3
    assert "should match pattern" in caught.value.message
    assert "canonical spelling" not in caught.value.message


@pytest.mark.parametrize(
    ("field", "value", "words"),
    [
        ("arena_id", "Upper", "an arena id is 1-63 of a-z, 0-9 and '-', not starting with '-'"),
        ("attempt_id", "has space", "an id is 1-64 of a-z, 0-9, '.', '_' and '-'"),
        ("commission_digest", "ABC", "a digest is 64 lowercase hex characters"),
        ("validator_hotkey", "a b", "a hotkey is 1-64 printable non-space ASCII characters"),
    ],
)
def test_a_pattern_mismatch_of_an_identifier_says_what_it_must_be(
    field: str, value: str, words: str
) -> None:
    """pydantic's wording (the pattern, for a program) stays; the words and the value quoted
    follow it, for a person."""
    from machines import samples

    payload = {**samples.claimed("0" * 64, "1" * 64).model_dump(), field: value}
    with pytest.raises(SchemaError) as caught:
        CATALOGUE.validate("AttemptClaimed", 1, payload)
    assert caught.value.context["path"] == f"$.payload.{field}"
    assert caught.value.message.endswith(f"' ({words}; got {value!r})"), caught.value.message
    assert "should match pattern '^" in caught.value.message


def test_a_schema_error_quotes_a_long_value_cut_to_80_characters() -> None:
    from machines import samples

    long = "x" * 500
    payload = {**samples.claimed("0" * 64, "1" * 64).model_dump(), "validator_hotkey": long}
    with pytest.raises(SchemaError) as caught:
        CATALOGUE.validate("AttemptClaimed", 1, payload)
    quoted = repr(long)[:79] + "…"
    assert caught.value.message.endswith(f"; got {quoted})"), caught.value.message
    document = samples.commission_document()
    document["policy"] = {**document["policy"], "window_noise": "0." + "0" * 200}
    with pytest.raises(SchemaError) as caught:
        CATALOGUE.validate("ArenaCommissioned", 1, document)
    assert f"{repr('0.' + '0' * 200)[:79]}… is not a decimal" in caught.value.message

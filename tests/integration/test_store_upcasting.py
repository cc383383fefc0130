"""Appends old schema versions through a store and reads them back upcast (docs/concepts.md).

Old events are never rewritten: the stored bytes stay those of the version they were
recorded at, and the store's catalogue lifts them to the current version on read.
"""

from __future__ import annotations

from typing import Any, ClassVar

import pytest
from upcast_widgets import (  # tests/, on sys.path through its conftest
    WidgetV1,
    WidgetV2,
    WidgetV3,  # tests/, through its conftest
    widget_catalogue,
    widget_v1_to_v2,
)

from ledger.records import EventDraft
from ledger.store import EventStore
from vocabulary import limits
from vocabulary.catalogue import CATALOGUE, Catalogue, CatalogueError, check_stream_name
from vocabulary.codec import canonical_bytes
from vocabulary.errors import (
    CanonicalFormError,
    LimitExceeded,
    SchemaError,
    UnknownEventType,
)
from vocabulary.events import Event


def test_old_versions_are_stored_as_recorded_and_read_back_as_current(
    widget_store: EventStore,
) -> None:
    catalogue = widget_store.catalogue
    widget_store.append([
        EventDraft("arena-widgets", "TestWidgetRecorded", {"name": "gear"}, schema_version=1),
        EventDraft("arena-widgets", "TestWidgetRecorded", {"name": "cog", "size": 9},
                   schema_version=2),
        EventDraft("arena-widgets", "TestWidgetRecorded", {"label": "nut", "size": 2}),
    ])
    recorded = list(widget_store.read_stream("arena-widgets"))

    assert [r.schema_version for r in recorded] == [1, 2, 3]  # None means current
    assert [r.payload_bytes for r in recorded] == [
        b'{"name":"gear"}', b'{"name":"cog","size":9}', b'{"label":"nut","size":2}'
    ]
    decoded = [catalogue.decode(r.type, r.schema_version, r.payload) for r in recorded]
    assert decoded == [WidgetV3(label="gear", size=4), WidgetV3(label="cog", size=9),
                       WidgetV3(label="nut", size=2)]
    # Reading did not rewrite anything: the bytes, and so the chain, are unchanged.
    assert [r.payload_bytes for r in widget_store.read_all()] == [
        r.payload_bytes for r in recorded]
    assert widget_store.verify().ok


def test_a_payload_is_validated_against_the_version_it_claims(widget_store: EventStore) -> None:
    with pytest.raises(SchemaError) as caught:
        widget_store.append([EventDraft("arena-widgets", "TestWidgetRecorded",
                                        {"label": "gear", "size": 1}, schema_version=1)])
    assert caught.value.path == "$.payload.name"  # type: ignore[attr-defined]  # v1 needs it
    assert caught.value.errors == 3  # type: ignore[attr-defined]  # and has two unknown fields
    assert widget_store.head().position == 0


# The catalogue's own rules (docs/concepts.md): a type's current version is its
# highest registered one whatever the registration order; an upcaster from a version that does not
# exist is refused by name; Catalogue.types is a copy; upcasting never touches the recorded
# payload, and a payload its upcast leaves off schema names the current version; a stream of
# another category is refused even when its name starts like its own; the size and length limits
# are inclusive; RFC 8785 key order holds for non-ASCII field names.


# -- the catalogue -----------------------------------------------------------------------------


class _GadgetV1(Event):
    """Records a gadget (v1: its parts), a test-only type with a nested value."""

    event_type: ClassVar[str] = "TestGadgetBuilt"
    schema_version: ClassVar[int] = 1
    category: ClassVar[str | None] = "arena"
    parts: list[str]


class _GadgetV2(Event):
    """Records a gadget (v2: the parts end with the version that lifted them)."""

    event_type: ClassVar[str] = "TestGadgetBuilt"
    schema_version: ClassVar[int] = 2
    category: ClassVar[str | None] = "arena"
    parts: list[str]


def _careless_nested(payload: dict[str, Any]) -> dict[str, Any]:
    """Edits a nested value in place: the catalogue must hand it a copy of the record."""
    payload["parts"].append("v2")
    return payload


def test_the_current_version_is_the_highest_whatever_the_registration_order() -> None:
    catalogue = widget_catalogue((WidgetV3, WidgetV1, WidgetV2)).seal()
    assert catalogue.types == {"TestWidgetRecorded": 3}
    assert catalogue.model("TestWidgetRecorded") is WidgetV3
    assert catalogue.decode("TestWidgetRecorded", 1, {"name": "gear"}) == WidgetV3(
        label="gear", size=4
    )


@pytest.mark.parametrize("from_version", [0, 7])
def test_an_upcaster_from_a_version_that_does_not_exist_is_named_so(from_version: int) -> None:
    catalogue = widget_catalogue()
    catalogue.register_upcaster("TestWidgetRecorded", from_version, widget_v1_to_v2)
    with pytest.raises(
        CatalogueError, match=f"v{from_version} starts at a version that does not exist"
    ):
        catalogue.seal()


def test_the_types_mapping_is_a_copy() -> None:
    catalogue = widget_catalogue().seal()
    shown = catalogue.types
    shown["TestWidgetRecorded"] = 1
    shown["Other"] = 1
    assert catalogue.types == {"TestWidgetRecorded": 3}
    assert catalogue.decode("TestWidgetRecorded", 1, {"name": "gear"}) == WidgetV3(
        label="gear", size=4
    )
    assert "Other" not in CATALOGUE.types and CATALOGUE.types is not CATALOGUE.types


def test_upcasting_never_touches_a_nested_value_of_the_record() -> None:
    catalogue = Catalogue()
    catalogue.register(_GadgetV1)
    catalogue.register(_GadgetV2)
    catalogue.register_upcaster("TestGadgetBuilt", 1, _careless_nested)
    catalogue.seal()
    recorded = {"parts": ["cog"]}
    assert catalogue.decode("TestGadgetBuilt", 1, recorded) == _GadgetV2(parts=["cog", "v2"])
    assert catalogue.decode("TestGadgetBuilt", 1, recorded) == _GadgetV2(parts=["cog", "v2"])
    assert recorded == {"parts": ["cog"]}


def test_a_record_its_upcast_leaves_off_schema_names_the_current_version() -> None:
    # The path is one of the lifted (v3) payload, so the version named is v3, not the
    # version the event was recorded at.
    catalogue = widget_catalogue(
        upcasters=(
            (1, widget_v1_to_v2),
            (2, lambda p: {"label": p["name"], "size": str(p["size"])}),
        )
    ).seal()
    with pytest.raises(SchemaError) as caught:
        catalogue.decode("TestWidgetRecorded", 2, {"name": "gear", "size": 9})
    assert caught.value.context["path"] == "$.payload.size"
    assert caught.value.message.startswith("TestWidgetRecorded v3: $.payload.size: ")


def test_an_event_is_refused_in_a_category_that_only_starts_like_its_own(
    widget_store: EventStore,
) -> None:
    check_stream_name("arenas-x")  # a well-formed stream of another category
    for event_type, payload in (("ArenaRetired", {"block": 1, "reason": "r"}),):
        with pytest.raises(SchemaError) as caught:
            CATALOGUE.validate(event_type, 1, payload, "arenas-x")
        assert caught.value.context["path"] == "$.stream"
    with pytest.raises(SchemaError) as caught:
        widget_store.append(
            [EventDraft("arenas-x", "TestWidgetRecorded", {"label": "gear", "size": 1})]
        )
    assert caught.value.context["path"] == "$.stream"
    assert widget_store.head().position == 0


def test_an_integer_beyond_2_53_in_a_flat_payload_is_the_codecs_error(
    widget_store: EventStore,
) -> None:
    # WidgetV2.size is an unbounded int: validation passes, and the canonical form refuses.
    def sized(size: int) -> list[EventDraft]:
        payload = {"name": "gear", "size": size}
        return [EventDraft("arena-widgets", "TestWidgetRecorded", payload, schema_version=2)]

    for size in (2**53, -(2**53), 2**64):
        with pytest.raises(CanonicalFormError) as caught:
            widget_store.append(sized(size))
        assert caught.value.context["path"] == "$.payload.size"
    assert widget_store.head().position == 0
    widget_store.append(sized(2**53 - 1))
    assert widget_store.head().position == 1


def test_a_nested_payload_of_exactly_payload_bytes_max_is_accepted() -> None:
    from machines import samples

    document = samples.commission_document()
    document["engine"]["engine_config"] = {"pad": ""}
    size = len(CATALOGUE.validate("ArenaCommissioned", 1, document))
    document["engine"]["engine_config"] = {"pad": "x" * (limits.payload_bytes_max - size)}
    assert len(CATALOGUE.validate("ArenaCommissioned", 1, document)) == limits.payload_bytes_max
    document["engine"]["engine_config"]["pad"] += "x"
    with pytest.raises(LimitExceeded):
        CATALOGUE.validate("ArenaCommissioned", 1, document)


def test_a_stream_name_of_exactly_stream_name_chars_max_is_accepted() -> None:
    name = "misc-" + "a" * (limits.stream_name_chars_max - len("misc-"))
    check_stream_name(name)
    with pytest.raises(LimitExceeded):
        check_stream_name(name + "a")


def test_a_schema_error_quotes_a_value_of_exactly_80_characters_whole() -> None:
    from machines import samples

    hotkey = "x" * 78  # its repr, quotes included, is 80 characters
    payload = {**samples.claimed("0" * 64, "1" * 64).model_dump(), "validator_hotkey": hotkey}
    with pytest.raises(SchemaError) as caught:
        CATALOGUE.validate("AttemptClaimed", 1, payload)
    assert caught.value.message.endswith(f"; got {hotkey!r})"), caught.value.message


class _OddNames(Event):
    """Records two numbers under non-ASCII field names (identifiers may be; NFKC keeps these)."""

    event_type: ClassVar[str] = "TestOddNames"
    﨎: int
    𠀀: int


def test_non_ascii_field_names_are_sorted_as_rfc_8785_sorts_them() -> None:
    # validate(): the fast path's orjson key sort is RFC 8785's only for ASCII keys. Here
    # U+FA0E sorts before U+20000 by UTF-8 bytes, after it by UTF-16 code units (RFC 8785).
    catalogue = Catalogue()
    catalogue.register(_OddNames)
    catalogue.seal()
    payload = {"\ufa0e": 1, "\U00020000": 2}
    assert set(payload) == set(_OddNames.model_fields)
    data = catalogue.validate("TestOddNames", 1, payload)
    assert data == canonical_bytes(payload)
    assert data.decode().index("\U00020000") < data.decode().index("\ufa0e")


def test_a_nested_payload_is_held_at_its_own_size_too() -> None:
    # _exact(): "Both paths return exact-size bytes" (test_catalogue checks the flat one);
    # an orjson result kept as it is holds a 4 KiB block per payload.
    import tracemalloc

    from machines import samples

    document = samples.commission_document()
    kept: list[bytes] = []
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        kept.extend(CATALOGUE.validate("ArenaCommissioned", 1, document) for _ in range(200))
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert ("ArenaCommissioned", 1) not in CATALOGUE._flat  # the full walk
    per_payload = held / len(kept)
    assert per_payload < len(kept[0]) + 256, f"{per_payload:.0f} bytes held per payload"


def test_an_unknown_type_or_version_names_its_path() -> None:
    with pytest.raises(UnknownEventType) as caught:
        CATALOGUE.validate("SubmissionVanished", 1, {})
    assert caught.value.context["path"] == "$.type"
    with pytest.raises(UnknownEventType) as caught:
        CATALOGUE.validate("ArenaRetired", 2, {"block": 1, "reason": "r"})
    assert caught.value.context["path"] == "$.schema_version"

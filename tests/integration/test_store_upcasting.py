"""Appends old schema versions through a store and reads them back upcast (DOMAIN §2.8).

Old events are never rewritten: the stored bytes stay those of the version they were
recorded at, and the store's catalogue lifts them to the current version on read.
"""

from __future__ import annotations

import pytest
from upcast_widgets import WidgetV3  # tests/, through its conftest

from ledger.records import EventDraft
from ledger.store import EventStore
from vocabulary.errors import SchemaError


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

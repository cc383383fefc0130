"""A test-only event type with three schema versions and its upcasters (docs/concepts.md).

Shared by the catalogue's unit tests and the store's upcasting tests (a conftest's
directory is on ``sys.path`` in pytest's prepend import mode).
"""

from __future__ import annotations

from typing import Any, ClassVar

from vocabulary.catalogue import Catalogue
from vocabulary.events import Event

__all__ = [
    "WidgetV1",
    "WidgetV2",
    "WidgetV3",
    "widget_catalogue",
    "widget_v1_to_v2",
    "widget_v2_to_v3",
]


class WidgetV1(Event):
    """Records a widget (v1: a name)."""

    event_type: ClassVar[str] = "TestWidgetRecorded"
    schema_version: ClassVar[int] = 1
    category: ClassVar[str | None] = "arena"
    name: str


class WidgetV2(Event):
    """Records a widget (v2: adds size)."""

    event_type: ClassVar[str] = "TestWidgetRecorded"
    schema_version: ClassVar[int] = 2
    category: ClassVar[str | None] = "arena"
    name: str
    size: int


class WidgetV3(Event):
    """Records a widget (v3: name is renamed label)."""

    event_type: ClassVar[str] = "TestWidgetRecorded"
    schema_version: ClassVar[int] = 3
    category: ClassVar[str | None] = "arena"
    label: str
    size: int


def widget_v1_to_v2(payload: dict[str, Any]) -> dict[str, Any]:
    """Adds ``size``; a v1 widget's size is the length of its name."""
    return {**payload, "size": len(payload["name"])}


def widget_v2_to_v3(payload: dict[str, Any]) -> dict[str, Any]:
    """Renames ``name`` to ``label``."""
    lifted = {k: v for k, v in payload.items() if k != "name"}
    lifted["label"] = payload["name"]
    return lifted


def widget_catalogue(
    models: tuple[type[Event], ...] = (WidgetV1, WidgetV2, WidgetV3),
    upcasters: tuple[tuple[int, Any], ...] = ((1, widget_v1_to_v2), (2, widget_v2_to_v3)),
) -> Catalogue:
    """Returns an unsealed catalogue of ``models`` with ``upcasters`` (from version, fn)."""
    catalogue = Catalogue()
    for model in models:
        catalogue.register(model)
    for from_version, upcaster in upcasters:
        catalogue.register_upcaster("TestWidgetRecorded", from_version, upcaster)
    return catalogue

"""Pins rules of vocabulary.catalogue and ledger.migrate that their main tests leave loose.

Found by a hand-made mutation review of vocabulary/catalogue.py and ledger/migrate.py: each test
here fails on one small change to those modules that the other tests let through. They pin,
from DOMAIN §2.8, docs/concepts.md, docs/operations.md and the modules' docstrings:

* a type's current version is its highest registered one, whatever the registration order;
* an upcaster that starts at a version that does not exist is refused as that, by name;
* ``Catalogue.types`` is a copy: editing it cannot change what a catalogue decodes;
* upcasting never touches the recorded payload, not even a nested value of it;
* a recorded payload that its upcast leaves off the current schema is a SchemaError naming
  the current version (the shape whose path it names);
* an event is refused in a stream of another category even when that category's name
  starts with its own (``arenas-x`` is no ``arena-…`` stream), on both backends;
* an integer beyond ±(2**53 - 1) in a flat payload is the codec's CanonicalFormError with
  its path, never orjson's own exception, on both backends;
* ``payload_bytes_max`` and ``stream_name_chars_max`` are inclusive: a payload or a stream
  name of exactly that size is accepted, one more is LimitExceeded;
* a schema error quotes a value whose repr is exactly 80 characters whole;
* a model whose field names are not ASCII still gets RFC 8785's key order (UTF-16 code
  units, not orjson's UTF-8 bytes), and a payload that takes the full walk is held at its
  own size, as a flat one is;
* an unknown type names the path ``$.type`` and an unknown version ``$.schema_version``
  (docs/reliability.md, F5);
* a ledger URL holding ``%`` (a SQLite path, a PostgreSQL query parameter) upgrades,
  online and as SQL, and downgrades;
* ``upgrade``/``downgrade`` with ``sql`` write the SQL without opening the database, and
  refuse an unknown revision with the same words as without it (asked first);
* a database that does not open is StoreUnavailable naming the database (``_open``);
* ``current(must_exist=True)`` of a missing SQLite file is SchemaNotInitialised and leaves
  no file behind;
* a ledger at a revision this release does not ship (a newer release's) is refused by
  ``upgrade``, ``downgrade``, ``pending`` and ``check`` as StoreError ``unknown_revision``,
  exit 5, and nothing changes (docs/operations.md, Migrations step 1);
* on PostgreSQL a downgrade counts the records it would drop only once it has locked the
  table against writers (it waits for an open append).
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any, ClassVar

import pytest
from sqlalchemy import text
from test_migrations import stamp  # same directory, prepend import mode
from upcast_widgets import (  # tests/, on sys.path through its conftest
    WidgetV1,
    WidgetV2,
    WidgetV3,
    widget_catalogue,
    widget_v1_to_v2,
)

from ledger import migrate
from ledger.records import EventDraft
from ledger.store import EventStore, make_engine, safe_url
from vocabulary import limits
from vocabulary.catalogue import CATALOGUE, Catalogue, CatalogueError, check_stream_name
from vocabulary.codec import canonical_bytes
from vocabulary.errors import (
    CanonicalFormError,
    InvalidInput,
    LimitExceeded,
    Refused,
    SchemaError,
    SchemaNotInitialised,
    StoreError,
    StoreUnavailable,
    UnknownEventType,
)
from vocabulary.events import Event

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


# -- migrations ------------------------------------------------------------------------------

NEWER = "0009_from_a_newer_release"


def _tables_and_events(url: str) -> tuple[set[str], list[tuple[Any, ...]]]:
    from sqlalchemy import inspect

    engine = make_engine(url)
    try:
        with engine.connect() as conn:
            rows = conn.execute(text("SELECT position, entry_hash FROM events")).all()
            return set(inspect(conn).get_table_names()), [tuple(r) for r in rows]
    finally:
        engine.dispose()


def test_a_ledger_at_a_newer_releases_revision_is_refused_and_nothing_changes(
    store: EventStore, draft: Any
) -> None:
    # operations.md, Migrations 1: "a revision it does not ship was made by a newer
    # release, so init, db upgrade, db check, db downgrade … exit 5 (unknown_revision) and
    # change nothing".
    store.append([draft("arena-a", n) for n in range(3)])
    stamp(store.url, NEWER)
    before = _tables_and_events(store.url)
    actions = {
        "upgrade": lambda: migrate.upgrade(store.url),
        "downgrade": lambda: migrate.downgrade(store.url, "0001_initial"),
        "downgrade base": lambda: migrate.downgrade(store.url, "base", discard_recorded=True),
        "pending": lambda: migrate.pending(store.url),
        "check": lambda: migrate.check(store.url),
    }
    for name, action in actions.items():
        with pytest.raises(StoreError) as caught:
            action()
        assert type(caught.value) is StoreError, name
        assert caught.value.context["reason"] == "unknown_revision", name
        assert caught.value.context["revision"] == NEWER, name
        assert caught.value.exit_code == 5, name
        assert caught.value.message.startswith(
            f"the ledger is at schema revision {NEWER!r}, which this release does not know"
        ), name
        assert migrate.current(store.url) == NEWER, name
        assert _tables_and_events(store.url) == before, name


def test_a_url_holding_a_percent_sign_migrates(
    backend: str, store_url: str, tmp_path: Path
) -> None:
    if backend == "sqlite":
        (tmp_path / "100%").mkdir()
        url = f"sqlite:///{tmp_path / '100%' / 'ledger.db'}"
    else:
        url = f"{store_url}?application_name=arena%20ledger"
    assert "CREATE TABLE events" in migrate.upgrade(url, sql=True)
    assert migrate.current(url) is None
    migrate.upgrade(url)
    assert migrate.current(url) == migrate.heads()[0]
    assert "DROP TABLE events" in migrate.downgrade(url, "base", sql=True)
    migrate.downgrade(url, "base")
    assert migrate.current(url) is None


def test_a_database_that_does_not_open_is_unavailable_naming_it(
    backend: str, tmp_path: Path
) -> None:
    if backend == "sqlite":
        junk = tmp_path / "junk.db"
        junk.write_bytes(b"this is not a SQLite database " * 200)
        url = f"sqlite:///{junk}"
    else:  # a server that does not answer (nothing listens on port 1)
        url = "postgresql+psycopg://postgres@127.0.0.1:1/no_ledger"
    for action in (lambda: migrate.current(url), lambda: migrate.upgrade(url)):
        with pytest.raises(StoreUnavailable) as caught:
            action()
        assert f"cannot open the database {safe_url(url)}: " in caught.value.message
        assert caught.value.exit_code == 5
    if backend == "sqlite":
        assert junk.read_bytes() == b"this is not a SQLite database " * 200


def test_current_of_a_missing_file_that_must_exist_says_there_is_no_ledger(
    tmp_path: Path,
) -> None:
    missing = tmp_path / "typo.db"
    url = f"sqlite:///{missing}"
    assert migrate.current(url) is None
    with pytest.raises(SchemaNotInitialised, match="there is no ledger at"):
        migrate.current(url, must_exist=True)
    assert not missing.exists()


@pytest.mark.postgres
@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
def test_a_postgres_downgrade_counts_records_only_once_writers_are_locked_out(
    store: EventStore, draft: Any
) -> None:
    # downgrade(): "PostgreSQL: the tables are locked against writers first", so no append
    # lands between the count and the drop. A writer's open transaction makes it wait.
    store.append([draft("arena-a", 1)])
    outcome: dict[str, Exception] = {}

    def downgrade() -> None:
        try:
            migrate.downgrade(store.url, "base")
        except Exception as exc:  # reported to the test below
            outcome["error"] = exc

    engine = make_engine(store.url)
    try:
        with engine.connect() as writer:
            writer.execute(text("LOCK TABLE events IN ROW EXCLUSIVE MODE"))  # as an INSERT
            worker = threading.Thread(target=downgrade)
            worker.start()
            waiting = 0
            deadline = time.monotonic() + 30
            while not waiting and worker.is_alive() and time.monotonic() < deadline:
                time.sleep(0.05)
                waiting = writer.execute(
                    text(
                        "SELECT count(*) FROM pg_locks WHERE NOT granted "
                        "AND relation = 'events'::regclass"
                    )
                ).scalar_one()
            assert waiting and worker.is_alive(), outcome
            writer.rollback()
        worker.join(timeout=60)
    finally:
        engine.dispose()
    assert isinstance(outcome.get("error"), Refused)
    assert migrate.current(store.url) == migrate.heads()[0]


def test_the_sql_of_an_upgrade_or_downgrade_needs_no_database(backend: str, tmp_path: Path) -> None:
    # operations.md: "The SQL is offline": it is written without opening the database.
    if backend == "sqlite":
        junk = tmp_path / "junk.db"
        junk.write_bytes(b"this is not a SQLite database " * 200)
        url = f"sqlite:///{junk}"
    else:
        url = "postgresql+psycopg://postgres@127.0.0.1:1/no_ledger"
    assert "CREATE TABLE events" in migrate.upgrade(url, sql=True)
    assert "DROP TABLE events" in migrate.downgrade(url, "base", sql=True)
    if backend == "sqlite":
        assert junk.read_bytes() == b"this is not a SQLite database " * 200


@pytest.mark.parametrize("name", ["nope", ""])
def test_an_unknown_revision_is_refused_alike_with_or_without_sql(
    name: str, tmp_path: Path
) -> None:
    # require_revision(): "asked first, the answer is the same whatever the ledger holds".
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    with pytest.raises(InvalidInput) as asked:
        migrate.require_revision(name)
    for sql in (True, False):
        with pytest.raises(InvalidInput) as caught:
            migrate.upgrade(url, name, sql=sql)
        assert caught.value.message == asked.value.message
        with pytest.raises(InvalidInput) as caught:
            migrate.downgrade(url, name, sql=sql)
        assert caught.value.message == asked.value.message
    assert not (tmp_path / "ledger.db").exists()

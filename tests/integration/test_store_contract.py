"""Runs the event store contract (docs/concepts.md, docs/storage.md) on SQLite and PostgreSQL.

Every test takes the ``store`` fixture, which is parametrised over both backends, so a
behaviour that differs between them fails here.
"""

from __future__ import annotations

import hashlib
import multiprocessing
import queue
import re
import sqlite3
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import event as sa_event
from sqlalchemy import text
from sqlalchemy.exc import OperationalError

from ledger import migrate
from ledger.chain import GENESIS_HASH
from ledger.database import cannot_open, store_error
from ledger.merkle import root_from_leaves
from ledger.records import ANY, NO_STREAM, EventDraft, Head, StreamState
from ledger.store import (
    EventStore,
    database_identity,
    make_engine,
    parse_expected_version,
    recorded_at_text,
    safe_url,
    sqlite_busy_timeout_ms,
)
from ledger.stored_tree import stored_level_min
from vocabulary import limits
from vocabulary.codec import canonical_bytes
from vocabulary.errors import (
    ConcurrencyConflict,
    IdempotencyKeyReused,
    InvalidInput,
    LimitExceeded,
    NotFound,
    Refused,
    SchemaError,
    SchemaNotInitialised,
    StoreError,
    StoreUnavailable,
    UnknownEventType,
)
from vocabulary.events import ArenaRetired

Draft = Callable[..., EventDraft]
SPAWN = multiprocessing.get_context("spawn")
PROCESS_TIMEOUT_S = 90


def _hex(seed: object) -> str:
    return hashlib.sha256(repr(seed).encode()).hexdigest()


def _positions(store: EventStore, **filters: Any) -> list[int]:
    return [r.position for r in store.read_all(**filters)]


def _assert_nothing_written(store: EventStore, before: Head, rows: int, count_rows: Any) -> None:
    assert store.head() == before
    assert count_rows("events") == rows
    assert store.verify().ok


# -- append and read -------------------------------------------------------------------------


def test_an_empty_store_has_the_genesis_head_and_no_events(store: EventStore) -> None:
    assert store.head() == Head(0, GENESIS_HASH)
    assert list(store.read_all()) == []
    assert list(store.read_stream("arena-none")) == []
    assert store.stream_version("arena-none") == 0
    report = store.verify()
    assert (report.ok, report.checked, report.head_hash) == (True, 0, GENESIS_HASH)


def test_appends_get_gapless_positions_and_per_stream_versions(
    store: EventStore, draft: Draft
) -> None:
    first = store.append([draft("arena-a", 1), draft("credit-c", 1), draft("arena-a", 2)])
    second = store.append([draft("credit-c", 2), draft("arena-b", 1)])

    assert first.positions == (1, 2, 3) and not first.already_recorded
    assert second.positions == (4, 5)
    recorded = list(store.read_all())
    assert [r.position for r in recorded] == [1, 2, 3, 4, 5]
    assert [(r.stream, r.version) for r in recorded] == [
        ("arena-a", 1), ("credit-c", 1), ("arena-a", 2), ("credit-c", 2), ("arena-b", 1)
    ]
    assert [r.entry_hash for r in recorded] == [*first.entry_hashes, *second.entry_hashes]
    assert store.head() == Head(5, recorded[-1].entry_hash)
    assert [r.version for r in store.read_stream("arena-a")] == [1, 2]
    assert [r.position for r in store.read_stream("credit-c", from_version=2)] == [4]
    assert store.stream_version("arena-a") == 2
    assert store.get(3).payload == {"block": 2, "reason": "r2"}
    assert store.entry_hash_at(3) == recorded[2].entry_hash
    assert store.entry_hash_at(0) == GENESIS_HASH  # what position 1 chains from
    for missing in (store.get, store.entry_hash_at):
        with pytest.raises(NotFound, match="no event at position 6") as caught:
            missing(6)
        assert caught.value.context["position"] == 6


def test_stored_payload_is_the_canonical_bytes_and_decodes_to_the_model(
    store: EventStore,
) -> None:
    payload = {"reason": "caf\u00e9 \u2713 \U0001f680 \"q\" \\ \n", "block": 12}
    store.append([EventDraft("arena-u", "ArenaRetired", payload)], actor="validator-7")

    recorded = store.get(1)
    assert recorded.payload_bytes == canonical_bytes(payload)
    assert recorded.payload_bytes.startswith(b'{"block":12,"reason":"caf\xc3\xa9')
    assert (recorded.type, recorded.schema_version, recorded.actor) == (
        "ArenaRetired", 1, "validator-7")
    assert recorded.event() == ArenaRetired(block=12, reason=payload["reason"])


def test_a_draft_built_from_a_model_round_trips(store: EventStore) -> None:
    model = ArenaRetired(block=7, reason="sunset")
    store.append([EventDraft.of("arena-m", model, NO_STREAM)])
    assert store.get(1).event() == model


def test_recorded_at_comes_from_the_injected_clock(make_store: Callable[..., EventStore],
                                                   draft: Draft) -> None:
    clocked = make_store(clock=lambda: "2030-01-02T03:04:05.000006Z")
    clocked.append([draft("arena-t", 1), draft("arena-t", 2)])
    assert {r.recorded_at for r in clocked.read_all()} == {"2030-01-02T03:04:05.000006Z"}


def test_a_batch_of_many_events_takes_the_bulk_path_and_verifies(
    store: EventStore, draft: Draft
) -> None:
    # 100 rows crosses the PostgreSQL COPY threshold; SQLite takes executemany.
    result = store.append([draft(f"arena-bulk{i % 3}", i) for i in range(100)])
    assert result.positions == tuple(range(1, 101))
    recorded = list(store.read_all())
    assert [r.position for r in recorded] == list(range(1, 101))
    assert recorded[41].payload == {"block": 41, "reason": "r41"}
    assert [r.entry_hash for r in recorded] == list(result.entry_hashes)
    assert store.verify().ok


# -- expected versions -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("given", "parsed"),
    [(None, ANY), ("any", ANY), ("no_stream", NO_STREAM), (NO_STREAM, NO_STREAM), (0, 0), (7, 7)],
)
def test_parse_expected_version_accepts_the_three_forms(given: Any, parsed: Any) -> None:
    assert parse_expected_version(given) == parsed


@pytest.mark.parametrize("given", [-1, True, "1", 1.0, "none"])
def test_parse_expected_version_refuses_anything_else(given: Any) -> None:
    with pytest.raises(SchemaError):
        parse_expected_version(given)


def test_expected_version_any_no_stream_and_exact(store: EventStore, draft: Draft) -> None:
    assert store.append([draft("arena-x", 1, NO_STREAM)]).positions == (1,)
    assert store.append([draft("arena-x", 2, 1)]).positions == (2,)
    assert store.append([draft("arena-x", 3, ANY)]).positions == (3,)
    assert store.append([draft("arena-x", 4, 3), draft("arena-x", 5, 4)]).positions == (4, 5)
    assert [r.version for r in store.read_stream("arena-x")] == [1, 2, 3, 4, 5]


@pytest.mark.parametrize(
    ("expected", "wanted"), [(NO_STREAM, "no_stream"), (1, 1), (3, 3)]
)
def test_a_version_mismatch_names_stream_expected_actual_and_writes_nothing(
    store: EventStore, draft: Draft, count_rows: Any, expected: Any, wanted: Any
) -> None:
    store.append([draft("arena-x", 1), draft("arena-x", 2)])
    before = store.head()

    with pytest.raises(ConcurrencyConflict) as caught:
        store.append([draft("credit-other", 1), draft("arena-x", 3, expected)])

    err = caught.value
    assert (err.stream, err.expected, err.actual) == ("arena-x", wanted, 2)
    assert err.code == "concurrency_conflict" and err.index == 1
    assert "arena-x" in str(err)
    _assert_nothing_written(store, before, 2, count_rows)
    assert store.stream_version("credit-other") == 0


def test_two_events_of_one_stream_must_expect_n_then_n_plus_one(
    store: EventStore, draft: Draft, count_rows: Any
) -> None:
    store.append([draft("arena-x", 1)])
    before = store.head()
    with pytest.raises(ConcurrencyConflict) as caught:
        store.append([draft("arena-x", 2, 1), draft("arena-x", 3, 1)])
    assert (caught.value.expected, caught.value.actual, caught.value.index) == (1, 2, 1)
    _assert_nothing_written(store, before, 1, count_rows)

    assert store.append([draft("arena-x", 2, 1), draft("arena-x", 3, 2)]).positions == (2, 3)


# -- idempotency -----------------------------------------------------------------------------


def test_repeating_a_key_with_the_same_content_returns_the_original_positions(
    store: EventStore, make_store: Callable[..., EventStore], draft: Draft, count_rows: Any
) -> None:
    batch = [draft("arena-k", 1, NO_STREAM), draft("credit-k", 1)]
    original = store.append(batch, idempotency_key="intake:block-9:0")
    store.append([draft("arena-other", 1)])
    before = store.head()

    again = store.append(batch, idempotency_key="intake:block-9:0")

    assert again.positions == original.positions == (1, 2)
    assert again.already_recorded and not original.already_recorded
    assert again.entry_hashes == original.entry_hashes
    _assert_nothing_written(store, before, 3, count_rows)
    assert count_rows("idempotency_keys") == 1
    # The key is durable (a table), not a per-process cache.
    fresh = make_store()
    assert fresh.append(batch, idempotency_key="intake:block-9:0").positions == (1, 2)
    assert count_rows("events") == 3


def test_a_key_is_stored_with_the_documented_digest_of_its_batch(
    store: EventStore, draft: Draft
) -> None:
    """docs/storage.md: SHA-256 over [stream, type, schema_version, expected] in canonical
    JSON, the payload's length (8 bytes, big-endian) and its bytes, event by event. A retry
    from before an upgrade must still match, so the format is pinned here."""
    batch = [draft("arena-k", 1, NO_STREAM), draft("credit-k", 1), draft("arena-k", 2, 1)]
    store.append(batch, idempotency_key="intake:block-9:0")
    expected = hashlib.sha256()
    for event, marker in zip(batch, ("no_stream", "any", 1), strict=True):
        payload = canonical_bytes(event.payload)
        expected.update(canonical_bytes([event.stream, event.type, 1, marker]))
        expected.update(len(payload).to_bytes(8, "big") + payload)
    with store.engine.connect() as conn:
        stored = conn.execute(text("SELECT content_digest, first_position, last_position "
                                   "FROM idempotency_keys")).one()
    assert tuple(stored) == (expected.hexdigest(), 1, 3)


def test_repeating_a_key_with_other_content_is_refused_and_writes_nothing(
    store: EventStore, draft: Draft, count_rows: Any
) -> None:
    store.append([draft("arena-z", 1)])
    store.append([draft("arena-k", 1), draft("credit-k", 1)], idempotency_key="k1")  # 2..3
    before = store.head()
    for other in (
        [draft("arena-k", 2), draft("credit-k", 1)],  # other payload
        [draft("arena-j", 1), draft("credit-k", 1)],  # other stream
        [draft("arena-k", 1), draft("credit-k", 1), draft("arena-k", 1)],  # more events
        [draft("arena-k", 1)],  # fewer events
        [draft("arena-k", 1, NO_STREAM), draft("credit-k", 1)],  # other expectation
    ):
        with pytest.raises(IdempotencyKeyReused) as caught:
            store.append(other, idempotency_key="k1")
        assert caught.value.code == "idempotency_key_reused"
        assert caught.value.first_position == 2
        assert caught.value.message == (
            "idempotency key 'k1' was used for other content (positions 2..3); nothing was "
            "written"
        )
    _assert_nothing_written(store, before, 3, count_rows)


def test_a_refused_append_does_not_consume_its_key(
    store: EventStore, draft: Draft, count_rows: Any
) -> None:
    store.append([draft("arena-k", 1)])
    with pytest.raises(ConcurrencyConflict):
        store.append([draft("arena-k", 2, NO_STREAM)], idempotency_key="k2")
    assert count_rows("idempotency_keys") == 0
    assert store.append([draft("arena-k", 2, 1)], idempotency_key="k2").positions == (2,)


# -- atomicity -------------------------------------------------------------------------------


def test_a_batch_whose_third_event_conflicts_writes_none(
    store: EventStore, draft: Draft, count_rows: Any
) -> None:
    store.append([draft("arena-c", 1)])
    before = store.head()
    batch = [draft("credit-a", 1, NO_STREAM), draft("submission-" + _hex(1), 1, NO_STREAM),
             draft("arena-c", 2, NO_STREAM)]
    with pytest.raises(ConcurrencyConflict) as caught:
        store.append(batch, idempotency_key="atomic")
    assert caught.value.index == 2
    _assert_nothing_written(store, before, 1, count_rows)
    assert store.stream_version("credit-a") == store.stream_version("submission-" + _hex(1)) == 0
    assert count_rows("idempotency_keys") == 0


def test_a_batch_whose_third_event_is_invalid_writes_none(
    store: EventStore, draft: Draft, count_rows: Any
) -> None:
    before = store.head()
    bad = EventDraft("arena-c", "ArenaRetired", {"block": "12", "reason": "x"})
    with pytest.raises(SchemaError) as caught:
        store.append([draft("credit-a", 1), draft("arena-c", 1), bad])
    assert caught.value.index == 2
    assert caught.value.context["index"] == 2  # what the CLI and --json report
    assert caught.value.path == "$.payload.block"
    _assert_nothing_written(store, before, 0, count_rows)


def test_a_guard_that_refuses_inside_the_transaction_writes_none(
    make_store: Callable[..., EventStore], draft: Draft, count_rows: Any
) -> None:
    seen: list[tuple[str, ...]] = []

    def guard(store: EventStore, conn: Any, batch: Any) -> None:
        seen.append(tuple(p.stream for p in batch))
        if any(p.stream == "arena-forbidden" for p in batch):
            raise Refused("forbidden arena", reason="test_refusal")

    guarded = make_store(guard=guard)
    guarded.append([draft("arena-ok", 1)])
    before = guarded.head()
    with pytest.raises(Refused):
        guarded.append([draft("arena-ok", 2), draft("arena-forbidden", 1)])
    assert seen == [("arena-ok",), ("arena-ok", "arena-forbidden")]
    _assert_nothing_written(guarded, before, 1, count_rows)


@pytest.mark.parametrize(
    ("bad", "error", "path"),
    [
        (EventDraft("arena-c", "NoSuchEvent", {}), UnknownEventType, None),
        (EventDraft("arena-c", "ArenaRetired", {"block": 1, "reason": "x"}, schema_version=2),
         UnknownEventType, None),
        (EventDraft("credit-c", "ArenaRetired", {"block": 1, "reason": "x"}), SchemaError,
         "$.stream"),
        (EventDraft("Arena-C", "ArenaRetired", {"block": 1, "reason": "x"}), SchemaError,
         "stream"),
        (EventDraft("arena-c", "ArenaRetired", {"block": 1, "reason": "x"},
                    expected_version=-1), SchemaError, "expected_version"),
        (EventDraft("arena-c", "ArenaRetired", {"block": 1.0, "reason": "x"}),
         InvalidInput, "$.payload.block"),
        (EventDraft(["arena-c"], "ArenaRetired", {"block": 1, "reason": "x"}),  # type: ignore[arg-type]
         SchemaError, "stream"),
        (EventDraft("arena-c", 7, {"block": 1, "reason": "x"}),  # type: ignore[arg-type]
         SchemaError, "$.type"),
        *[(EventDraft("arena-c", "ArenaRetired", {"block": 1, "reason": "x"},
                      schema_version=version),  # type: ignore[arg-type]
           SchemaError, "$.schema_version") for version in (0, -1, "1", True, 1.0)],
    ],
)
def test_invalid_drafts_are_refused_before_anything_is_written(
    store: EventStore, count_rows: Any, bad: EventDraft, error: type[Exception], path: str | None
) -> None:
    with pytest.raises(error) as caught:
        store.append([bad])
    if path is not None:
        assert caught.value.path == path  # type: ignore[attr-defined]
    assert count_rows("events") == 0 and store.head().position == 0


def test_actor_and_key_are_checked(store: EventStore, draft: Draft, count_rows: Any) -> None:
    for kwargs, path in (
        ({"actor": ""}, "actor"),
        ({"actor": "x" * (limits.actor_chars_max + 1)}, "actor"),
        ({"actor": "tab\there"}, "actor"),
        ({"actor": 7}, "actor"),
        ({"idempotency_key": ""}, "idempotency_key"),
        ({"idempotency_key": "k" * (limits.idempotency_key_chars_max + 1)}, "idempotency_key"),
        ({"idempotency_key": "new\nline"}, "idempotency_key"),
        ({"idempotency_key": 7}, "idempotency_key"),
    ):
        with pytest.raises(InvalidInput) as caught:
            store.append([draft("arena-a", 1)], **kwargs)
        assert caught.value.context["path"] == path
    with pytest.raises(InvalidInput):
        store.append([])
    assert count_rows("events") == 0
    # Both bounds are inclusive: one character, and the limit.
    for position, (actor, key) in enumerate(
        (("a", "k"), ("x" * limits.actor_chars_max, "k" * limits.idempotency_key_chars_max)),
        start=1,
    ):
        written = store.append([draft("arena-a", 1)], actor=actor, idempotency_key=key)
        assert written.last == position
    assert [e.actor for e in store.read_all()] == ["a", "x" * limits.actor_chars_max]


# -- limits ----------------------------------------------------------------------------------


def test_batch_events_max_is_inclusive_and_one_more_is_refused(
    store: EventStore, draft: Draft, count_rows: Any
) -> None:
    with pytest.raises(LimitExceeded) as caught:
        store.append([draft("arena-a", 1)] * (limits.batch_events_max + 1))
    assert str(limits.batch_events_max) in str(caught.value)
    assert count_rows("events") == 0 and store.head().position == 0
    written = store.append([draft("arena-a", 1)] * limits.batch_events_max)
    assert written.last == limits.batch_events_max == store.head().position


def _settlement_payload(size: int) -> dict[str, Any]:
    """Builds a SettlementComputed payload whose canonical form is exactly ``size`` bytes."""
    payload: dict[str, Any] = {
        "block": 1, "as_of_position": 0, "claims": [], "weights_ppm": {"5Burn": 1_000_000},
        "fees": {"pad": ""}, "settlement_digest": _hex("s"),
    }
    payload["fees"]["pad"] = "x" * (size - len(canonical_bytes(payload)))
    assert len(canonical_bytes(payload)) == size
    return payload


def test_payload_bytes_max_is_inclusive_and_one_more_byte_is_refused(
    store: EventStore, draft: Draft, count_rows: Any
) -> None:
    at_limit = EventDraft("settlement", "SettlementComputed",
                          _settlement_payload(limits.payload_bytes_max))
    over = EventDraft("settlement", "SettlementComputed",
                      _settlement_payload(limits.payload_bytes_max + 1))
    with pytest.raises(LimitExceeded) as caught:
        store.append([draft("arena-a", 1), over])
    assert caught.value.path == "$.payload" and caught.value.index == 1
    assert count_rows("events") == 0

    assert store.append([at_limit]).positions == (1,)
    assert len(store.get(1).payload_bytes) == limits.payload_bytes_max


def test_a_stream_name_over_its_limit_is_refused(store: EventStore, count_rows: Any) -> None:
    name = "arena-" + "a" * (limits.stream_name_chars_max - len("arena-") + 1)
    with pytest.raises(LimitExceeded):
        store.append([EventDraft(name, "ArenaRetired", {"block": 1, "reason": "x"})])
    assert count_rows("events") == 0


# -- reads: filters and paging ---------------------------------------------------------------


@pytest.fixture
def filtered_store(make_store: Callable[..., EventStore], draft: Draft) -> EventStore:
    """Holds ten events over five streams, one second of clock per append."""
    ticks = iter(range(100))
    clocked = make_store(clock=lambda: f"2030-01-01T00:00:{next(ticks):02d}.000000Z")
    clocked.append([draft("arena-alpha", 1), draft("credit-c1", 1)])  # 1, 2     t=00
    clocked.append([draft("arena-alphabet", 1)])  # 3                             t=01
    clocked.append([draft("arena-ab", 1), draft("arena-a-b", 1)])  # 4, 5         t=02
    clocked.append([draft("credit-c1", 2), draft("settlement", 1)])  # 6, 7       t=03
    clocked.append([draft("arena-alpha", 2)])  # 8                                t=04
    clocked.append([draft("credit-c2", 1), draft("submission-" + _hex(0), 1)])  # 9, 10 t=05
    return clocked


@pytest.mark.parametrize(
    ("filters", "expected"),
    [
        ({}, list(range(1, 11))),
        ({"types": ["CreditSpent"]}, [2, 6, 9]),
        ({"types": ("CreditSpent", "EmissionPolicySet")}, [2, 6, 7, 9]),
        ({"types": ["NoSuchType"]}, []),
        ({"stream": "arena-alpha"}, [1, 8]),
        ({"stream": "arena-alph"}, []),
        ({"stream_prefix": "arena-"}, [1, 3, 4, 5, 8]),
        ({"stream_prefix": "arena-alpha"}, [1, 3, 8]),
        ({"stream_prefix": "arena-ab"}, [4]),  # not arena-a-b: a byte range, not a collation
        ({"stream_prefix": "credit"}, [2, 6, 9]),
        ({"stream_prefix": "settlement"}, [7]),
        ({"stream_prefix": "zzz"}, []),
        ({"from_position": 4}, [4, 5, 6, 7, 8, 9, 10]),
        ({"from_position": 3, "to_position": 5}, [3, 4, 5]),
        ({"from_position": 11}, []),
        ({"recorded_from": "2030-01-01T00:00:02.000000Z"}, [4, 5, 6, 7, 8, 9, 10]),
        ({"recorded_to": "2030-01-01T00:00:02.000000Z"}, [1, 2, 3]),  # exclusive
        ({"recorded_from": "2030-01-01T00:00:01.000000Z",
          "recorded_to": "2030-01-01T00:00:03.000000Z"}, [3, 4, 5]),
        ({"limit": 3}, [1, 2, 3]),
        ({"limit": 0}, []),
        ({"limit": 2, "stream_prefix": "credit-", "from_position": 3}, [6, 9]),
        ({"types": ["ArenaRetired"], "stream_prefix": "arena-alpha", "to_position": 7}, [1, 3]),
    ],
)
def test_read_all_filters(filtered_store: EventStore, filters: dict[str, Any],
                          expected: list[int]) -> None:
    assert _positions(filtered_store, **filters) == expected


def test_read_all_with_an_empty_type_list_yields_nothing(filtered_store: EventStore) -> None:
    # An empty filter matches no type; it must not turn into invalid SQL ("IN ()").
    assert _positions(filtered_store, types=[]) == []


@pytest.mark.parametrize(
    ("to_position", "limit", "filters", "expected"),
    [
        (10, 3, {}, [10, 9, 8]),
        (99, 2, {}, [10, 9]),  # past the head: from the head
        (4, 10, {}, [4, 3, 2, 1]),
        (0, 5, {}, []),
        (10, 0, {}, []),
        (10, 5, {"types": ["CreditSpent"]}, [9, 6, 2]),
        (8, 5, {"types": ["CreditSpent"]}, [6, 2]),
        (10, 5, {"types": []}, []),
        (10, 2, {"stream_prefix": "arena-"}, [8, 5]),
        (10, 9, {"stream_prefix": "arena-ab"}, [4]),  # a byte range, as read_all's
        (10, 9, {"stream": "credit-c1"}, [6, 2]),
        (7, 9, {"types": ["ArenaRetired"], "stream_prefix": "arena-alpha"}, [3, 1]),
    ],
)
def test_read_back_is_newest_first_with_read_alls_filters(
    filtered_store: EventStore, to_position: int, limit: int, filters: dict[str, Any],
    expected: list[int],
) -> None:
    # The newest page of a listing: read_all's rows at or below to_position, last first.
    found = filtered_store.read_back(to_position, limit, **filters)
    assert [r.position for r in found] == expected
    assert found == list(reversed(list(filtered_store.read_all(
        1, to_position=to_position, **filters))))[:limit]


def test_filters_page_correctly_with_a_small_page(
    filtered_store: EventStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(limits, "read_page_events", 2)
    assert _positions(filtered_store, stream_prefix="arena-") == [1, 3, 4, 5, 8]
    assert _positions(filtered_store, types=["CreditSpent"], from_position=2) == [2, 6, 9]
    assert [r.version for r in filtered_store.read_stream("credit-c1")] == [1, 2]


def _count_event_selects(store: EventStore) -> list[str]:
    statements: list[str] = []

    def before(conn: Any, cursor: Any, statement: str, *rest: Any) -> None:
        if statement.lstrip().upper().startswith("SELECT") and "FROM events" in statement:
            statements.append(statement)

    sa_event.listen(store.engine, "before_cursor_execute", before)
    return statements


def test_a_limited_read_fetches_no_more_rows_than_its_limit(
    store: EventStore, draft: Draft, monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A page of 4 (the dashboard's, a follower's batch) is one query of 4 rows: not a
    # store page of 2,000, and not one query more once the 4th row is taken.
    store.append([draft(f"arena-p{i % 2}", i) for i in range(1, 11)])
    selects = _count_event_selects(store)
    assert [r.position for r in store.read_all(3, 4)] == [3, 4, 5, 6]
    assert len(selects) == 1 and "LIMIT 4" in selects[0]
    selects.clear()
    monkeypatch.setattr(limits, "read_page_events", 3)
    assert [r.position for r in store.read_all(1, 7)] == list(range(1, 8))
    assert len(selects) == 3 and all("LIMIT 3" in s for s in selects)  # 3 + 3 + 1 taken


def test_read_all_is_lazy_and_paged(store: EventStore, draft: Draft,
                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(limits, "read_page_events", 3)
    store.append([draft(f"arena-p{i % 2}", i) for i in range(1, 11)])
    selects = _count_event_selects(store)

    rows = store.read_all()
    assert selects == []  # nothing is read until iterated
    first = next(rows)
    assert first.position == 1 and len(selects) == 1
    rest = list(rows)
    assert [r.position for r in [first, *rest]] == list(range(1, 11))  # no duplicate, no skip
    assert len(selects) == 4  # 3 + 3 + 3 + 1
    assert all(f"LIMIT {3}" in s for s in selects)

    selects.clear()
    assert [r.version for r in store.read_stream("arena-p0")] == [1, 2, 3, 4, 5]
    assert len(selects) == 2


def test_a_page_boundary_on_the_last_event_neither_repeats_nor_skips(
    store: EventStore, draft: Draft, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(limits, "read_page_events", 3)
    store.append([draft("arena-p", i) for i in range(9)])
    reader = store.read_all()
    seen = [next(reader).position for _ in range(9)]
    store.append([draft("arena-p", 9)])  # lands after the last full page was fetched
    seen += [r.position for r in reader]
    assert seen == list(range(1, 11))


# -- verify and an un-migrated database -------------------------------------------------------


def test_verify_covers_the_whole_chain_and_a_range(store: EventStore, draft: Draft) -> None:
    result = store.append([draft("arena-v", i) for i in range(6)])
    report = store.verify()
    assert (report.ok, report.checked, report.to_position) == (True, 6, 6)
    assert report.head_hash == result.entry_hashes[-1] == store.head().entry_hash
    partial = store.verify(3, 5)
    assert (partial.ok, partial.checked, partial.from_position, partial.to_position) == (
        True, 3, 3, 5)
    assert partial.head_hash == result.entry_hashes[4]


def test_the_merkle_root_at_the_head_is_the_root_of_every_entry(
    store: EventStore, draft: Draft, count_rows: Any
) -> None:
    result = store.append([draft("arena-v", i) for i in range(40)])
    leaves = [bytes.fromhex(h) for h in result.entry_hashes]
    # Perfect subtrees of 16 leaves and more are stored: [0, 16), [16, 32) and [0, 32).
    assert stored_level_min == 4 and count_rows("merkle_nodes") == 3
    assert store.merkle_root() == (40, root_from_leaves(leaves))  # from the stored frontier
    assert store.merkle_root(40) == store.merkle_root()  # from stored nodes and entries
    for size in (5, 16, 33):
        assert store.merkle_root(size) == (size, root_from_leaves(leaves[:size]))


def test_checkpoints_are_kept_in_order_and_listed_newest_first(
    make_store: Callable[..., EventStore],
) -> None:
    store = make_store(clock=lambda: "2026-12-01T05:00:00.000000Z")
    ids = [store.add_checkpoint(n, f"{n:064x}", "ops.example/log", "ops.example", f"note {n}\n")
           for n in range(1, 23)]
    assert ids == list(range(1, 23))  # the store's own ids, on both backends
    listed = store.checkpoints()
    assert len(listed) == 20  # the default limit
    assert [c["id"] for c in listed] == list(range(22, 2, -1))
    assert listed[0] == {
        "id": 22, "tree_size": 22, "root_hash": f"{22:064x}", "origin": "ops.example/log",
        "key_name": "ops.example", "note": "note 22\n", "created_at": "2026-12-01T05:00:00.000000Z",
    }
    assert [c["id"] for c in store.checkpoints(limit=2)] == [22, 21]


@pytest.mark.postgres
def test_a_checkpoint_id_is_its_own_when_another_writer_adds_one_meanwhile(
    pg_database: str,
) -> None:
    # SQLite writes one at a time; on PostgreSQL another writer can commit a checkpoint
    # between this INSERT and its commit, and SELECT MAX(id) then returned that one's id.
    from ledger import migrate

    migrate.upgrade(pg_database)
    with EventStore(pg_database) as mine, EventStore(pg_database) as theirs:
        theirs_ids: list[int] = []

        @sa_event.listens_for(mine.engine, "after_cursor_execute")
        def meanwhile(_conn: Any, _cursor: Any, statement: str, *_: Any) -> None:
            if statement.startswith("INSERT INTO checkpoints") and not theirs_ids:
                theirs_ids.append(theirs.add_checkpoint(2, "bb" * 32, "o", "k", "theirs"))

        own = mine.add_checkpoint(1, "aa" * 32, "o", "k", "mine")
        notes = {c["id"]: c["note"] for c in mine.checkpoints()}
    assert own != theirs_ids[0]
    assert notes == {own: "mine", theirs_ids[0]: "theirs"}


def test_reads_through_a_given_connection_see_its_transaction(
    store: EventStore, draft: Draft
) -> None:
    store.append([draft("arena-v", 1), draft("credit-v", 1)])
    with store.engine.connect() as conn, conn.begin():
        conn.execute(text("DELETE FROM ledger_head"))  # visible only inside this transaction
        assert [e.position for e in store.read_all(conn=conn)] == [1, 2]
        assert [e.stream for e in store.read_stream("credit-v", conn=conn)] == ["credit-v"]
        with pytest.raises(StoreError, match="ledger_head row is missing"):
            store.head(conn)
        conn.rollback()
    assert store.head().position == 2


def test_an_unmigrated_database_raises_schema_not_initialised(
    store_url: str, draft: Draft
) -> None:
    with EventStore(store_url) as bare:
        assert bare.is_initialised() is False
        for call in (
            bare.require_initialised,
            bare.head,
            lambda: bare.append([draft("arena-a", 1)]),
            lambda: list(bare.read_all()),
            bare.verify,
            lambda: list(bare.read_stream("arena-a")),
            lambda: bare.stream_version("arena-a"),
            lambda: bare.get(1),
            lambda: bare.entry_hash_at(1),
            bare.merkle_root,
            lambda: bare.merkle_root(1),  # through tree(), a context manager of its own
            bare.checkpoints,
            lambda: bare.add_checkpoint(1, "00" * 32, "origin", "key", "note"),
        ):
            with pytest.raises(SchemaNotInitialised) as caught:
                call()
            assert caught.value.code == "store_not_initialised"


# -- how database failures are named -----------------------------------------------------------


@pytest.mark.parametrize(
    ("driver_message", "code", "message"),
    [
        ("no such table: events", "store_not_initialised",
         "the ledger's tables do not exist; run `arena-ledger init`"),
        ('relation "events" does not exist\nLINE 1: SELECT …', "store_not_initialised",
         "the ledger's tables do not exist; run `arena-ledger init`"),
        ("events are append-only: UPDATE refused", "store_error",
         "the database refused a change to recorded events: events are append-only: UPDATE "
         "refused"),
        ("database is locked", "store_unavailable", "the database is unavailable: database is "
         "locked"),
        ("attempt to write a readonly database", "store_unavailable",
         "the database is unavailable: attempt to write a readonly database"),
        ("database or disk is full", "store_unavailable",
         "the database is unavailable: database or disk is full"),
        ("connection refused", "store_unavailable", "the database is unavailable: connection "
         "refused"),
        ('column "x" does not exist', "store_error", 'database error: column "x" does not '
         "exist"),
    ],
)
def test_a_database_failure_becomes_the_store_error_that_names_it(
    driver_message: str, code: str, message: str
) -> None:
    url = "postgresql+psycopg://ledger:s3cret@db.example:5432/ledger"
    for raised in (sqlite3.OperationalError(driver_message),  # from the driver's own cursor
                   OperationalError("SELECT 1", {}, sqlite3.OperationalError(driver_message))):
        error = store_error(raised, url)
        assert (error.code, error.message) == (code, message)
        assert "s3cret" not in repr(error.context)


def test_urls_in_errors_hide_the_password() -> None:
    url = "postgresql+psycopg://ledger:s3cret@db.example:5432/ledger"
    safe = "postgresql+psycopg://ledger:***@db.example:5432/ledger"
    assert safe_url(url) == safe
    assert safe_url("not a url") == "<invalid url>"
    # Without a password, the URL as written (not re-rendered with its brackets escaped).
    for plain in ("sqlite:////tmp/[x] 100%/l.db", "postgresql+psycopg://ledger@db/ledger"):
        assert safe_url(plain) == plain
    refused = url.replace("db.example:5432", "127.0.0.1:1")  # nothing listens on port 1
    with pytest.raises(StoreUnavailable) as caught:
        EventStore(refused).head()
    assert caught.value.context["url"] == safe_url(refused) != refused
    assert "s3cret" not in caught.value.message
    error = cannot_open(OperationalError("SELECT 1", {}, sqlite3.OperationalError(
        "unable to open database file\nmore detail")), url)
    assert error.message == f"cannot open the database {safe}: unable to open database file"
    assert error.context == {"url": safe, "reason": "unable to open database file"}


# -- concurrency (separate processes, spawn) -------------------------------------------------


def _race_worker(url: str, rounds: int, barrier: Any, results: Any, tag: str) -> None:
    store = EventStore(url)
    try:
        store.head()  # open the connection before the start line
        for round_ in range(rounds):
            barrier.wait(timeout=30)
            payload = {"block": round_, "reason": f"claimed by {tag}"}
            draft = EventDraft(f"arena-race{round_}", "ArenaRetired", payload,
                               expected_version=NO_STREAM)
            try:
                outcome = ("ok", round_, store.append([draft]).positions)
            except ConcurrencyConflict as exc:
                outcome = ("conflict", round_, (exc.stream, exc.expected, exc.actual))
            results.put((tag, *outcome))
    except Exception as exc:  # reported to the parent, which fails the test
        barrier.abort()  # so the other racer stops waiting at the start line
        results.put((tag, "error", -1, repr(exc)))
    finally:
        store.close()


def _run_processes(processes: list[Any]) -> None:
    for process in processes:
        process.start()


def _join(processes: list[Any]) -> None:
    for process in processes:
        process.join(PROCESS_TIMEOUT_S)
    for process in processes:
        if process.is_alive():
            process.terminate()
            process.join(5)
            pytest.fail(f"{process.name} did not finish in {PROCESS_TIMEOUT_S}s")
        assert process.exitcode == 0, f"{process.name} exited with {process.exitcode}"


def _drain(results: Any, count: int, processes: list[Any]) -> list[Any]:
    """Collects ``count`` results, or fewer if every worker has exited (a failure)."""
    collected: list[Any] = []
    deadline = time.monotonic() + PROCESS_TIMEOUT_S
    while len(collected) < count and time.monotonic() < deadline:
        try:
            collected.append(results.get(timeout=0.2))
        except queue.Empty:
            if not any(p.is_alive() for p in processes):
                break
    while len(collected) < count:  # a worker may have exited right after its last put
        try:
            collected.append(results.get(timeout=0.5))
        except queue.Empty:
            break
    return collected


def test_two_processes_racing_on_no_stream_exactly_one_wins(store: EventStore) -> None:
    rounds = 3
    barrier, results = SPAWN.Barrier(2), SPAWN.Queue()
    racers = [SPAWN.Process(target=_race_worker, args=(store.url, rounds, barrier, results, t),
                            name=f"racer-{t}") for t in ("a", "b")]
    _run_processes(racers)
    outcomes = _drain(results, 2 * rounds, racers)
    _join(racers)

    assert not [o for o in outcomes if o[1] == "error"], outcomes
    assert len(outcomes) == 2 * rounds, outcomes
    for round_ in range(rounds):
        this = sorted((o for o in outcomes if o[2] == round_), key=lambda o: o[1])
        assert [o[1] for o in this] == ["conflict", "ok"], this
        assert this[0][3] == (f"arena-race{round_}", "no_stream", 1)
        winner = this[1][0]
        events = list(store.read_stream(f"arena-race{round_}"))
        assert len(events) == 1 and events[0].payload["reason"] == f"claimed by {winner}"
    assert store.head().position == rounds
    assert store.verify().ok


def _writer_worker(url: str, stream: str, batches: int, pause_s: float, results: Any) -> None:
    store = EventStore(url)
    acknowledged: list[int] = []
    try:
        version = 0
        for i in range(batches):
            size = 1 + i % 2
            drafts = [
                EventDraft(stream, "CreditSpent", {"submission_id": _hex((stream, version + j))},
                           expected_version=version + j)
                for j in range(size)
            ]
            acknowledged.extend(store.append(drafts).positions)
            version += size
            if pause_s:
                time.sleep(pause_s)
        results.put((stream, "ok", acknowledged))
    except Exception as exc:
        results.put((stream, "error", repr(exc)))
    finally:
        store.close()


def _start_writers(url: str, writers: int, batches: int, pause_s: float) -> tuple[list[Any], Any]:
    results = SPAWN.Queue()
    processes = [
        SPAWN.Process(target=_writer_worker, name=f"writer-{i}",
                      args=(url, f"credit-w{i}", batches, pause_s, results))
        for i in range(writers)
    ]
    _run_processes(processes)
    return processes, results


def _events_for(batches: int) -> int:
    return sum(1 + i % 2 for i in range(batches))


def test_four_writers_on_different_streams_get_gapless_positions(store: EventStore) -> None:
    writers, batches = 4, 12
    processes, results = _start_writers(store.url, writers, batches, 0.0)
    outcomes = _drain(results, writers, processes)
    _join(processes)

    assert len(outcomes) == writers and all(o[1] == "ok" for o in outcomes), outcomes
    total = writers * _events_for(batches)
    acknowledged = sorted(p for o in outcomes for p in o[2])
    assert acknowledged == list(range(1, total + 1))  # each exactly once, no gap
    assert store.head().position == total
    by_position = {r.position: r for r in store.read_all()}
    assert sorted(by_position) == acknowledged
    for stream, _status, positions in outcomes:
        assert {by_position[p].stream for p in positions} == {stream}
        assert [r.version for r in store.read_stream(stream)] == list(
            range(1, _events_for(batches) + 1))
    report = store.verify()
    assert report.ok and report.checked == total


def test_a_tailing_reader_sees_every_event_in_order_while_writers_run(
    store: EventStore, make_store: Callable[..., EventStore]
) -> None:
    writers, batches = 2, 15
    total = writers * _events_for(batches)
    reader = make_store()
    seen: list[tuple[int, str]] = []
    problems: list[str] = []
    polls_with_news: list[int] = []
    stop = threading.Event()

    def tail() -> None:
        cursor = 1
        deadline = time.monotonic() + PROCESS_TIMEOUT_S
        while cursor <= total and not stop.is_set() and time.monotonic() < deadline:
            got = 0
            for recorded in reader.read_all(cursor):
                if recorded.position != cursor:
                    problems.append(f"expected position {cursor}, read {recorded.position}")
                    return
                seen.append((recorded.position, recorded.entry_hash))
                cursor += 1
                got += 1
            if got:
                polls_with_news.append(got)
            else:
                time.sleep(0.002)

    thread = threading.Thread(target=tail, name="tailing-reader")
    thread.start()
    try:
        processes, results = _start_writers(store.url, writers, batches, 0.003)
        outcomes = _drain(results, writers, processes)
        _join(processes)
        thread.join(10)  # everything is committed; the reader only has to catch up
    finally:
        stop.set()
        thread.join(5)

    assert len(outcomes) == writers and all(o[1] == "ok" for o in outcomes), outcomes
    assert problems == []
    assert [p for p, _ in seen] == list(range(1, total + 1))
    assert [h for _, h in seen] == [r.entry_hash for r in store.read_all()]
    assert len(polls_with_news) > 1  # it really tailed: it caught up more than once
    assert store.verify().ok


def test_stream_state_values_are_stable() -> None:
    # These spellings enter idempotency digests and the CLI; renaming them breaks both.
    assert (StreamState.ANY.value, StreamState.NO_STREAM.value) == ("any", "no_stream")


# -- SQLite file layout ---------------------------------------------------------------------


def test_a_new_sqlite_ledger_uses_large_pages_and_an_old_one_keeps_its_own(tmp_path: Any) -> None:
    from ledger import migrate
    from ledger.store import sqlite_page_bytes

    def page_size(path: Any) -> int:
        conn = sqlite3.connect(path)
        try:
            return int(conn.execute("PRAGMA page_size").fetchone()[0])
        finally:
            conn.close()

    fresh = tmp_path / "fresh.db"
    migrate.upgrade(f"sqlite:///{fresh}")
    assert page_size(fresh) == sqlite_page_bytes == 16_384

    old = tmp_path / "old.db"  # made with 4 KiB pages, as ledgers were before
    conn = sqlite3.connect(old)
    conn.execute("PRAGMA page_size = 4096")
    conn.execute("PRAGMA journal_mode = WAL")
    conn.close()
    migrate.upgrade(f"sqlite:///{old}")
    with EventStore(f"sqlite:///{old}") as store:
        store.append([EventDraft("arena-a", "ArenaRetired", {"block": 1, "reason": "x"})])
        assert store.verify().ok
    assert page_size(old) == 4096


def test_every_sqlite_connection_waits_for_the_lock_in_wal_mode_with_full_sync(
    tmp_path: Any,
) -> None:
    """The pragmas each connection gets (``_on_sqlite_connect``): a writer waits 30 s for
    the lock (sqlite3's own default is 5 s), WAL lets readers run beside the writer, and
    synchronous FULL makes a committed append survive a power cut."""
    from ledger import migrate

    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    migrate.upgrade(url)
    with EventStore(url) as store, store.engine.connect() as one, store.engine.connect() as two:
        for conn in (one, two):
            pragma = conn.exec_driver_sql
            assert pragma("PRAGMA busy_timeout").scalar() == sqlite_busy_timeout_ms == 30_000
            assert pragma("PRAGMA journal_mode").scalar() == "wal"
            # FULL (2); also this SQLite build's default: the check is against a weaker one.
            assert pragma("PRAGMA synchronous").scalar() == 2


@pytest.mark.postgres
@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
def test_a_bare_postgresql_url_means_psycopg_3(store_url: str, draft: Draft) -> None:
    # SQLAlchemy 2.1 reads postgresql:// as psycopg 3 by itself, 2.0 (also allowed by
    # pyproject) as psycopg2, which the ledger does not install: make_engine names psycopg.
    from ledger import migrate

    bare = store_url.replace("postgresql+psycopg://", "postgresql://", 1)
    assert bare != store_url
    migrate.upgrade(bare)
    with EventStore(bare) as store:
        assert store.engine.dialect.driver == "psycopg"
        store.append([draft("arena-a", 1)])
        assert store.head().position == 1 and store.verify().ok


@pytest.mark.parametrize("size", [1, 3, 255, 256, 257, 1000])
def test_sqlite_multi_row_inserts_write_every_event_in_order(tmp_path: Any, size: int) -> None:
    from ledger import migrate

    url = f"sqlite:///{tmp_path / 'multi.db'}"
    migrate.upgrade(url)
    drafts = [EventDraft(f"arena-m{i % 7}", "ArenaRetired", {"block": i, "reason": f"r{i}"})
              for i in range(size)]
    with EventStore(url) as store:
        store.append([EventDraft("arena-w", "ArenaRetired", {"block": i, "reason": "w"})
                      for i in range(2)])  # the batch starts mid-ledger
        result = store.append(drafts)
        assert result.positions == tuple(range(3, size + 3))
        recorded = list(store.read_all(3))
        assert [e.position for e in recorded] == list(result.positions)
        assert [e.entry_hash for e in recorded] == list(result.entry_hashes)
        assert [e.payload for e in recorded] == [d.payload for d in drafts]
        assert store.verify().ok


def test_sqlite_inserts_stay_within_the_builds_parameter_bound(tmp_path: Any) -> None:
    from ledger import migrate

    url = f"sqlite:///{tmp_path / 'bound.db'}"
    migrate.upgrade(url)
    with EventStore(url) as store:
        # As an old SQLite build (999) would, but tighter: 99 parameters is 11 rows of 9.
        sa_event.listen(store.engine, "connect", lambda conn, _: conn.setlimit(
            sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER, 99))
        drafts = [EventDraft("arena-b", "ArenaRetired", {"block": i, "reason": "r"})
                  for i in range(300)]
        assert store.append(drafts).positions == tuple(range(1, 301))
        assert store.verify().ok


# Timestamps, position bounds, URL handling and SQLite file identity at the edges of the store;
# like the rest of this suite, every test that takes ``store`` runs on SQLite and PostgreSQL.


#: The spelling docs/concepts.md and ``recorded_at_text`` give ``recorded_at``.
_RECORDED_AT = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z")


def test_recorded_at_text_is_utc_with_microseconds_and_z() -> None:
    # The same instant, given in three zones: one spelling, in UTC, every microsecond kept.
    instant = datetime(2030, 1, 2, 3, 4, 5, 6, tzinfo=UTC)
    for zone in (UTC, timezone(timedelta(hours=5, minutes=30)), timezone(-timedelta(hours=7))):
        spelled = recorded_at_text(instant.astimezone(zone))
        assert _RECORDED_AT.fullmatch(spelled), spelled
        assert datetime.strptime(spelled, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC) == instant


def test_the_default_clock_stamps_events_so_a_bound_it_spells_selects_them(
    store: EventStore, draft: Draft
) -> None:
    before = datetime.now(UTC) - timedelta(microseconds=1)
    store.append([draft("arena-t", 1)])
    after = datetime.now(UTC) + timedelta(microseconds=1)
    recorded = store.get(1).recorded_at
    assert _RECORDED_AT.fullmatch(recorded), recorded
    # Bounds given in another zone, spelled by recorded_at_text, as read_all asks.
    east = timezone(timedelta(hours=9))
    window = {
        "recorded_from": recorded_at_text(before.astimezone(east)),
        "recorded_to": recorded_at_text(after.astimezone(east)),
    }
    assert [e.position for e in store.read_all(**window)] == [1]
    later = {"recorded_from": recorded_at_text(after.astimezone(east))}
    assert list(store.read_all(**later)) == []


@pytest.mark.parametrize("position", [0, -1])
def test_get_below_the_first_position_is_not_found(
    store: EventStore, draft: Draft, position: int
) -> None:
    store.append([draft("arena-g", 1), draft("arena-g", 2)])
    with pytest.raises(NotFound) as caught:
        store.get(position)
    assert caught.value.context["position"] == position
    assert store.get(1).position == 1  # the ledger does have a first event


def test_only_position_0_has_the_genesis_hash(store: EventStore, draft: Draft) -> None:
    store.append([draft("arena-g", 1)])
    assert store.entry_hash_at(0) == GENESIS_HASH
    with pytest.raises(NotFound) as caught:
        store.entry_hash_at(-1)
    assert caught.value.context["position"] == -1


def test_stored_entry_hash_reads_a_row_or_none(store: EventStore, draft: Draft) -> None:
    written = store.append([draft("arena-s", 1)])
    assert store.stored_entry_hash(1) == written.entry_hashes[0]
    assert store.stored_entry_hash(2) is None


def test_stored_entry_hash_on_an_unmigrated_database_is_schema_not_initialised(
    store_url: str,
) -> None:
    with EventStore(store_url) as bare, pytest.raises(SchemaNotInitialised) as caught:
        bare.stored_entry_hash(1)
    assert caught.value.code == "store_not_initialised"


# -- URLs and files ----------------------------------------------------------------------------


def test_a_bare_postgresql_url_makes_a_psycopg_3_engine_without_connecting() -> None:
    # Creating an engine connects to nothing: no database is opened here.
    engine = make_engine("postgresql://postgres@127.0.0.1:5432/arena_ledger_never_opened")
    try:
        assert engine.dialect.driver == "psycopg"
    finally:
        engine.dispose()


def test_a_postgres_scheme_url_is_postgresql_through_psycopg_3() -> None:
    # postgres:// is what Heroku and libpq tools print; it names the same server.
    engine = make_engine("postgres://someone:pw@127.0.0.1:5432/arena_ledger_never_opened")
    try:
        assert engine.dialect.name == "postgresql" and engine.dialect.driver == "psycopg"
        assert (engine.url.username, engine.url.password, engine.url.database) == (
            "someone", "pw", "arena_ledger_never_opened")
    finally:
        engine.dispose()


def test_a_bare_file_name_is_refused_with_the_sqlite_url_it_means() -> None:
    with pytest.raises(InvalidInput) as caught:
        make_engine("my-ledger.db")
    assert caught.value.message == (
        "database URL 'my-ledger.db' is not valid: it is not a URL; for a SQLite file give "
        "sqlite:///my-ledger.db")


def test_sqlite_query_arguments_that_need_uri_true_are_refused_without_it(
    tmp_path: Path,
) -> None:
    path = tmp_path / "ledger.db"
    with pytest.raises(InvalidInput) as caught:
        make_engine(f"sqlite:///{path}?mode=ro")
    assert "(mode)" in caught.value.message and "uri=true" in caught.value.message
    assert not path.exists()
    make_engine(f"sqlite:///{path}?mode=rwc&uri=true").dispose()  # a SQLite URI: accepted


def test_a_new_sqlite_file_is_in_wal_mode_from_its_first_connection(tmp_path: Path) -> None:
    engine = make_engine(f"sqlite:///{tmp_path / 'new.db'}")
    try:
        with engine.connect() as conn:  # a reader: no BEGIN IMMEDIATE
            assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
    finally:
        engine.dispose()


def test_a_sqlite_file_has_one_identity_however_its_path_is_spelt(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    absolute = database_identity(f"sqlite:///{tmp_path / 'ledger.db'}")
    assert database_identity("sqlite:///ledger.db") == absolute
    assert database_identity("sqlite:///./sub/../ledger.db") == absolute
    assert str(tmp_path / "ledger.db") in absolute.splitlines()


@pytest.mark.postgres
def test_a_stream_prefix_read_is_a_prefix_under_any_database_collation(
    punctuation_blind_pg_database: str, draft: Draft
) -> None:
    # Under a collation that ignores punctuation, "payment-a.b" sorts between "payment-a-b"
    # and "payment-a0" by its letters: a range read in that order would return them all.
    url = punctuation_blind_pg_database
    migrate.upgrade(url)
    names = [
        "payment-a",
        "payment-a-b",
        "payment-a.b",
        "payment-a_b",
        "payment-a-c",
        "payment-a0",
        "payment-ab",
        "payment-b",
        "arena-a",
        "arena-a-b",
        "arena-a0",
    ]
    with EventStore(url) as store:
        for name in names:
            store.append([draft(name)])
        prefixes = "payment-a payment-a- payment-a. payment-a_ payment- arena-a- arena-a."
        for prefix in prefixes.split():
            found = sorted({e.stream for e in store.read_all(stream_prefix=prefix)})
            assert found == sorted(n for n in names if n.startswith(prefix)), prefix

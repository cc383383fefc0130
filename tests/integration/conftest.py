"""Provides the integration fixtures: extra store handles, draft builders and raw SQL access.

The backends themselves (``backend``, ``store_url``, ``store``) live in ``tests/conftest.py``
so that end-to-end tests can share them.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from settled_ledger import open_ledger  # beside this file
from sqlalchemy import text

from ledger.records import ANY, EventDraft, ExpectedVersion
from ledger.store import EventStore
from services.arena_ledger import ArenaLedger


def digest_of(seed: object) -> str:
    """Returns a deterministic 64-hex digest for test ids."""
    return hashlib.sha256(repr(seed).encode()).hexdigest()


def simple_draft(stream: str, n: int = 1, expected: ExpectedVersion = ANY) -> EventDraft:
    """Builds a small valid event for ``stream``'s category; ``n`` varies its payload."""
    category = stream.split("-", 1)[0]
    if category == "arena":
        return EventDraft(stream, "ArenaRetired", {"block": n, "reason": f"r{n}"},
                          expected_version=expected)
    if category == "credit":
        return EventDraft(stream, "CreditSpent", {"submission_id": digest_of(n)},
                          expected_version=expected)
    if category == "submission":
        return EventDraft(stream, "SubmissionHeld", {"reason": f"hold {n}", "block": n},
                          expected_version=expected)
    if category == "attempt":
        return EventDraft(stream, "QualityGraded", {
            "tokens_scored": n, "argmax_agreement": "0.9987", "drift_within_envelope": True,
            "regression": False}, expected_version=expected)
    if category == "payment":
        return EventDraft(stream, "PaymentReleased", {"submission_id": digest_of(n),
                          "reason": "refund"}, expected_version=expected)
    if category == "settlement":
        return EventDraft(stream, "EmissionPolicySet", {
            "half_life_blocks": 1000 + n, "burn_hotkey": "5Burn", "validator_hotkey": "5Val"},
            expected_version=expected)
    raise ValueError(f"no simple event for category {category!r}")


@pytest.fixture(scope="session")
def draft() -> Callable[..., EventDraft]:
    """Returns ``simple_draft`` (stream, n=1, expected=ANY) -> EventDraft (a pure function:
    one for the session, so module-scoped fixtures may build with it too)."""
    return simple_draft


@pytest.fixture
def widget_store(store: EventStore) -> Iterator[EventStore]:
    """The migrated ``store``, opened with the test widget catalogue (tests/upcast_widgets.py:
    a type with three schema versions and their upcasters)."""
    from upcast_widgets import widget_catalogue  # tests/, on the path through its conftest

    with EventStore(store.url, catalogue=widget_catalogue().seal()) as widgets:
        yield widgets


@pytest.fixture
def make_store(store: EventStore) -> Iterator[Callable[..., EventStore]]:
    """Opens more ``EventStore`` handles on the migrated database (e.g. with a fake clock)."""
    opened: list[EventStore] = []

    def factory(**kwargs: Any) -> EventStore:
        extra = EventStore(store.url, **kwargs)
        opened.append(extra)
        return extra

    yield factory
    for extra in opened:
        extra.close()


@pytest.fixture
def count_rows(store: EventStore) -> Callable[[str], int]:
    """Counts the rows of a table directly, bypassing the store's reads."""

    def count(table: str = "events") -> int:
        with store.engine.connect() as conn:
            return int(conn.execute(text(f"SELECT COUNT(*) FROM {table}")).scalar_one())

    return count


@pytest.fixture
def fresh_pg_database(request: pytest.FixtureRequest) -> Iterator[str]:
    """Yields the URL of a second empty, un-migrated PostgreSQL database (a restore target
    beside the test's own store), from the session's pool as ``spare_store`` takes one:
    no CREATE/DROP DATABASE per test (tests/conftest.py, ``_PgDatabases``)."""
    pool = request.getfixturevalue("_pg_databases")
    name = pool.take()
    try:
        yield pool.url(name)
    finally:
        pool.give_back(name)


@pytest.fixture
def ledger(store_url: str) -> Iterator[ArenaLedger]:
    """Yields a guarded ArenaLedger on a freshly migrated database of each backend (a
    module that needs another opening, a commission say, defines its own ``ledger``)."""
    opened = open_ledger(store_url)
    try:
        yield opened
    finally:
        opened.close()

"""Pages kept per head position: asked again at the same head they come from memory, byte
for byte; the first event appended after them is on the next answer; what depends on more
than the events (checkpoints, proofs, tiles, the live stream) is never kept."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from dashboard_ledger import DashboardLedger, build
from fastapi.testclient import TestClient

from ledger.checkpoint import load_signer, sign_tree
from ledger.store import EventStore
from services.arena_ledger import ArenaLedger
from web.app import create_app
from web.cache import PageCache, cacheable


@pytest.fixture
def own(tmp_path: Path) -> Iterator[tuple[DashboardLedger, TestClient, PageCache]]:
    """A dashboard ledger of this test's own (the test appends to it), its client, and
    the app's cache."""
    built = build(f"sqlite:///{tmp_path / 'ledger.db'}", tmp_path)
    app = create_app(built.url)
    with TestClient(app) as client:
        stack = app.middleware_stack
        while stack is not None and not isinstance(stack, PageCache):
            stack = getattr(stack, "app", None)
        assert isinstance(stack, PageCache)
        yield built, client, stack


def test_a_page_asked_again_at_the_same_head_comes_from_memory(own) -> None:  # type: ignore[no-untyped-def]
    _, client, cache = own
    first = client.get("/api/events?limit=5")
    hits = cache.hits
    again = client.get("/api/events?limit=5")
    assert cache.hits == hits + 1
    assert again.content == first.content
    assert again.headers["content-security-policy"] == first.headers["content-security-policy"]
    # The page and its twin are kept apart (one key per kind of answer).
    page = client.get("/events?limit=5", headers={"accept": "text/html"})
    assert page.headers["content-type"].startswith("text/html")


def test_an_appended_event_is_on_the_next_answer(own) -> None:  # type: ignore[no-untyped-def]
    built, client, _ = own
    before = client.get("/api/events?limit=1").json()
    with ArenaLedger(built.url) as ledger:
        ledger.grant_credit("cr-after", "5After", 1, "appended after the page was kept")
    after = client.get("/api/events?limit=1").json()
    newest = after["events"][0]
    assert newest["position"] == before["events"][0]["position"] + 1
    assert newest["type"] == "CreditGranted"


def test_checkpoints_are_never_kept(own) -> None:  # type: ignore[no-untyped-def]
    built, client, cache = own
    assert not cacheable("/api/checkpoints") and not cacheable("/checkpoint")
    assert not cacheable("/tile/0/000") and not cacheable("/api/events/stream")
    assert not cacheable("/api/proofs/inclusion")
    before = client.get("/api/checkpoints").json()
    # A checkpoint is signed without any event: the head does not move.
    with EventStore(built.url) as store:
        sign_tree(store, load_signer(built.public_key.with_suffix("")), origin="again/test")
    after = client.get("/api/checkpoints").json()
    assert after != before
    assert all(key[0] != "/api/checkpoints" for key in cache.entries)


def test_the_budget_bounds_what_is_kept(own) -> None:  # type: ignore[no-untyped-def]
    _, client, cache = own
    cache.budget = 20_000
    for limit in range(1, 40):
        client.get(f"/api/events?limit={limit}")
        assert cache.used <= cache.budget
    assert 0 < len(cache.entries) < 39

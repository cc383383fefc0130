"""The events pages and their twins: pages newest first whose cursors walk the whole ledger,
filters and as_of as ``arena-ledger events`` applies them (the same JSON objects), one event
with its payload escaped and its chain link, problems naming the parameter, a page cost that
does not grow with the ledger; and the live stream: each commit arrives with its position
as ``id:``, a reconnect resumes from Last-Event-ID, and the stream ends with its client.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from dashboard_ledger import HOSTILE_HOTKEY, HOSTILE_NOTE, DashboardLedger
from fastapi.testclient import TestClient
from sqlalchemy import event as sa_event
from typer.testing import CliRunner

import web.routes.events as live
from cli.app import app as cli_app
from cli.common import state
from ledger import migrate
from ledger.chain import GENESIS_HASH
from ledger.records import EventDraft
from ledger.store import EventStore
from services.event_pages import EventFilter, event_page
from web.app import create_app
from web.pages import PROBLEM
from web.server import background

# -- helpers ----------------------------------------------------------------------------------


def cli_events(url: str, monkeypatch: pytest.MonkeyPatch, *args: str) -> list[dict[str, Any]]:
    """Runs ``arena-ledger events --json ARGS`` in-process and returns its JSON Lines."""
    monkeypatch.setattr(state, "db_url", state.db_url)  # --db sets it; put back afterwards
    done = CliRunner().invoke(cli_app, ["--db", url, "events", "--json", *args])
    assert done.exit_code == 0, done.output
    return [json.loads(line) for line in done.stdout.splitlines() if line]


def positions(document: dict[str, Any]) -> list[int]:
    return [e["position"] for e in document["events"]]


def walk(client: TestClient, query: str, key: str, start: dict[str, Any]) -> list[int]:
    """Follows ``key``'s cursor (older_before or newer_after) from ``start`` to the end."""
    param = "before" if key == "older_before" else "after"
    seen, document = positions(start), start
    while document[key] is not None:
        document = client.get(f"/api/events?{query}&{param}={document[key]}").json()
        seen += positions(document)
    return seen


@pytest.fixture(scope="module")
def everything(dashboard: DashboardLedger) -> list[dict[str, Any]]:
    """Every event of the dashboard ledger, oldest first, as the store gives them."""
    with EventStore(dashboard.url) as store:
        return [r.to_json() for r in store.read_all()]


# -- the listing ------------------------------------------------------------------------------


def test_the_listing_is_newest_first_and_its_cursors_walk_the_whole_ledger(
    client: TestClient, everything: list[dict[str, Any]],
) -> None:
    newest = client.get("/api/events?limit=7").json()
    head = client.get("/api/head").json()["position"]
    assert newest["order"] == "newest_first" and newest["head"] == head
    assert newest["events"] == list(reversed(everything))[:7]
    assert newest["newer_after"] is None and newest["older_before"] == head - 6
    # Older pages to the first event, then newer pages back to the head: no gap, no repeat.
    down = walk(client, "limit=7", "older_before", newest)
    assert down == list(range(head, 0, -1))
    oldest = client.get("/api/events?limit=7&after=0").json()
    assert positions(oldest) == [7, 6, 5, 4, 3, 2, 1] and oldest["older_before"] is None
    up = walk(client, "limit=7", "newer_after", oldest)
    assert sorted(up) == list(range(1, head + 1)) and len(up) == head


def test_a_cursor_past_either_end_gives_an_empty_page_that_leads_back(
    client: TestClient,
) -> None:
    head = client.get("/api/head").json()["position"]
    beyond = client.get(f"/api/events?after={head + 5}").json()
    assert beyond["events"] == [] and beyond["newer_after"] is None
    assert beyond["older_before"] == head + 1  # the newest page again
    below = client.get("/api/events?before=1").json()
    assert below["events"] == [] and below["older_before"] is None
    assert below["newer_after"] == 0  # the oldest page
    assert positions(client.get("/api/events?after=0&limit=2").json()) == [2, 1]


def test_a_filtered_listing_holds_the_objects_events_json_prints(
    client: TestClient, dashboard: DashboardLedger, monkeypatch: pytest.MonkeyPatch,
) -> None:
    for query, args in [
        ("type=CreditGranted&type=CreditSpent", ("--type", "CreditGranted", "--type",
                                                 "CreditSpent")),
        ("stream_prefix=credit-", ("--stream-prefix", "credit-")),
        ("stream=credit-cr-hostile", ("--stream", "credit-cr-hostile")),
        ("type=SubmissionArrived&as_of=40", ("--type", "SubmissionArrived", "--as-of", "40")),
    ]:
        printed = cli_events(dashboard.url, monkeypatch, *args)
        assert printed, query  # each filter matches something in this ledger
        listed = walk(client, f"{query}&limit=3", "older_before",
                      client.get(f"/api/events?{query}&limit=3").json())
        document = client.get(f"/api/events?{query}&limit=500").json()
        assert document["events"] == list(reversed(printed)), query
        assert listed == [e["position"] for e in reversed(printed)], query


def test_as_of_shows_the_ledger_as_it_stood_and_links_nothing_newer(
    client: TestClient, everything: list[dict[str, Any]],
) -> None:
    document = client.get("/api/events?as_of=20&limit=5").json()
    assert positions(document) == [20, 19, 18, 17, 16]
    assert document["as_of"] == 20 and document["newer_after"] is None
    assert client.get("/api/events?as_of=20&after=17").json()["events"] == \
        list(reversed(everything[17:20]))  # 18..20, nothing past 20
    assert client.get("/api/events?as_of=0").json()["events"] == []


def test_one_event_is_the_object_events_json_prints_with_its_chain_link(
    client: TestClient, dashboard: DashboardLedger, everything: list[dict[str, Any]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    (printed,) = cli_events(dashboard.url, monkeypatch, "--from-position", "5",
                            "--to-position", "5")
    document = client.get("/api/events/5").json()
    assert document["event"] == printed == everything[4]
    assert document["previous_hash"] == everything[3]["hash"]
    assert document["inclusion_proof"] == "/api/proofs/inclusion?position=5&download=1"
    proof = client.get(document["inclusion_proof"])  # the link leads to a proof to save
    assert proof.status_code == 200 and "attachment" in proof.headers["content-disposition"]
    assert proof.json()["kind"] == "inclusion" and proof.json()["leaf_index"] == 4
    assert proof.json()["entry_hash"] == printed["hash"]
    assert client.get("/api/events/1").json()["previous_hash"] == GENESIS_HASH


@pytest.mark.parametrize(
    ("query", "named"),
    [
        ("type=CreditGrant", "type"),
        ("stream=Credit-cr-1", "stream"),
        ("stream=sub-x", "stream"),
        ("stream_prefix=atempt-", "stream_prefix"),
        ("after=3&before=9", "before"),
        ("limit=501", "query.limit"),
        ("after=-1", "query.after"),
        ("as_of=x", "query.as_of"),
        ("before=0", "query.before"),
    ],
)
def test_a_bad_filter_is_a_400_problem_naming_the_parameter(
    client: TestClient, query: str, named: str,
) -> None:
    for path in ("/api/events", "/api/events/stream"):
        if path.endswith("stream") and named in ("before", "query.limit", "query.as_of",
                                                 "query.before"):
            continue  # the stream takes no page cursor, limit or as_of
        response = client.get(f"{path}?{query}")
        assert response.status_code == 400, (path, query)
        assert response.headers["content-type"] == PROBLEM
        assert response.json()["path"] == named, response.json()


def test_a_submission_stream_cut_short_points_to_the_prefix_parameter(
    client: TestClient, dashboard: DashboardLedger,
) -> None:
    cut = f"submission-{dashboard.sids['hostile'][:16]}"
    problem = client.get(f"/api/events?stream={cut}").json()
    assert problem["path"] == "stream" and f"stream_prefix={cut}" in problem["detail"]


def test_an_unknown_or_impossible_position_is_a_problem(client: TestClient) -> None:
    head = client.get("/api/head").json()["position"]
    missing = client.get(f"/api/events/{head + 1}")
    assert missing.status_code == 404 and missing.json()["code"] == "not_found"
    assert str(head + 1) in missing.json()["detail"]
    assert client.get("/api/events/0").status_code == 400
    assert client.get(f"/api/events/{2**53}").status_code == 400
    assert client.get(f"/events/{head + 1}", headers={"accept": "text/html"}).status_code == 404


def test_a_page_costs_a_few_bounded_queries_whatever_the_ledger(
    dashboard: DashboardLedger,
) -> None:
    # Every read a page makes is an indexed query with a LIMIT of the page (plus one), never
    # a read through the ledger: a ledger of millions pages as one of a hundred does.
    with EventStore(dashboard.url) as store:
        statements: list[tuple[str, Any]] = []
        sa_event.listen(store.engine, "before_cursor_execute",
                        lambda _c, _cur, sql, params, *_: statements.append((sql, params)))
        chosen = EventFilter.checked(types=["CreditGranted"])
        for cursor in ({}, {"before": 50}, {"after": 10}, {"as_of": 30}):
            statements.clear()
            event_page(store, chosen, 10, **cursor)
            reads = [(sql, params) for sql, params in statements if "FROM events" in sql]
            assert 1 <= len(reads) <= 2, (cursor, statements)
            for sql, params in reads:
                inline = re.search(r"LIMIT (\d+)$", sql)
                bound = int(inline.group(1)) if inline else params[-1]  # SQLite: LIMIT ?
                assert sql.rstrip().split()[-2] == "LIMIT" and bound <= 11, (sql, params)


# -- the pages --------------------------------------------------------------------------------


def test_the_events_page_links_every_position_to_its_event_and_its_as_of(
    html_page: Any, client: TestClient,
) -> None:
    document = client.get("/api/events?limit=5").json()
    html = html_page("/events?limit=5")
    for event in document["events"]:
        p = event["position"]
        assert f'href="/events/{p}"' in html
        assert f'href="/events?as_of={p}&amp;limit=5"' in html
    assert f'href="/events?before={document["older_before"]}&amp;limit=5"' in html
    assert 'href="/api/events?limit=5"' in html  # the JSON twin


def test_the_newest_page_opts_in_to_live_updates_with_script_from_a_file(
    html_page: Any, client: TestClient,
) -> None:
    head = client.get("/api/head").json()["position"]
    html = html_page("/events?type=CreditGranted")
    assert f'data-live-after="{head}"' in html
    assert f'data-live-src="/api/events/stream?type=CreditGranted&amp;after={head}"' in html
    assert 'data-live-rows="event-rows"' in html and 'id="event-rows"' in html
    assert '<script src="/static/live.js" defer></script>' in html
    assert not re.search(r"<script(?![^>]*\bsrc=)", html), "no inline script"
    assert " style=" not in html
    # An older page or the ledger as of a position stays as rendered: no live notice.
    for still in ("/events?before=10", "/events?as_of=10", "/events?after=3"):
        assert "data-live-after" not in html_page(still)
        assert "live.js" not in html_page(still)
    script = client.get("/static/live.js")
    assert script.status_code == 200 and "EventSource" in script.text
    assert "innerHTML" not in script.text  # ledger data is set as text


def test_the_event_page_shows_the_payload_escaped_and_links_its_proof(
    html_page: Any, client: TestClient,
) -> None:
    (granted,) = client.get("/api/events?stream=credit-cr-hostile&type=CreditGranted") \
        .json()["events"]
    p = granted["position"]
    html = html_page(f"/events/{p}")
    assert granted["payload"]["note"] == HOSTILE_NOTE
    assert "<img src=x" not in html and "&lt;img src=x onerror=alert(1)&gt;" in html
    assert "</textarea>" not in html and HOSTILE_HOTKEY not in html
    assert "\u202e" not in html and "[U+202E]</span>gnp.exe" in html  # shown, not obeyed
    assert f'href="/api/proofs/inclusion?position={p}&amp;download=1"' in html
    assert granted["hash"] in html
    assert client.get(f"/api/events/{p}").json()["previous_hash"] in html
    assert f'href="/events?as_of={p}"' in html


# -- the live stream --------------------------------------------------------------------------


def granted(n: int) -> EventDraft:
    return EventDraft(f"credit-live-{n}", "CreditGranted",
                      {"credit_id": f"live-{n}", "hotkey": "5Live", "amount_rao": n, "note": ""})


@pytest.fixture
def small(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[EventStore,
                                                                             TestClient]]:
    """A ledger of two events of its own (the tests append to it), its app polling fast."""
    monkeypatch.setattr(live, "live_poll_interval_s", 0.02)
    url = f"sqlite:///{tmp_path / 'live.db'}"
    migrate.upgrade(url)
    with EventStore(url) as store, TestClient(create_app(url)) as client:
        store.append([granted(1), granted(2)])
        yield store, client


def messages(lines: Iterator[str], count: int) -> list[dict[str, str]]:
    """Reads the next ``count`` messages (comments skipped) as field → value."""
    found: list[dict[str, str]] = []
    fields: dict[str, str] = {}
    for line in lines:
        if line == "":
            if fields:
                found.append(fields)
                fields = {}
            if len(found) == count:
                return found
        elif not line.startswith(":"):
            name, _, value = line.partition(": ")
            fields[name] = value
    raise AssertionError(f"the stream ended after {found}")


@pytest.mark.timeout(60)
def test_each_commit_arrives_with_its_position_as_id_and_its_events_json(
    small: tuple[EventStore, TestClient],
) -> None:
    store, client = small
    with client.stream("GET", "/api/events/stream") as response:  # from the head
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        assert response.headers["cache-control"] == "no-store"
        lines = response.iter_lines()
        store.append([granted(3)])
        store.append([granted(4), granted(5)])
        got = messages(lines, 3)
    assert [m["id"] for m in got] == ["3", "4", "5"]
    assert {m["event"] for m in got} == {"ledger"}
    assert [json.loads(m["data"]) for m in got] == [
        client.get(f"/api/events/{p}").json()["event"] for p in (3, 4, 5)]


@pytest.mark.timeout(60)
def test_a_reconnect_resumes_after_last_event_id_and_filters_hold(
    small: tuple[EventStore, TestClient],
) -> None:
    store, client = small
    store.append([granted(3), EventDraft("settlement", "EmissionPolicySet", {
        "half_life_blocks": 7200, "burn_hotkey": "5Burn", "validator_hotkey": "5V"})])
    # Last-Event-ID (a reconnecting EventSource's) wins over the page's after=.
    with client.stream("GET", "/api/events/stream?after=0",
                       headers={"last-event-id": "1"}) as response:
        assert [m["id"] for m in messages(response.iter_lines(), 3)] == ["2", "3", "4"]
    with client.stream("GET", "/api/events/stream?after=0&stream_prefix=credit-") as response:
        lines = response.iter_lines()
        assert [m["id"] for m in messages(lines, 3)] == ["1", "2", "3"]
        store.append([EventDraft("settlement", "EmissionPolicySet", {
            "half_life_blocks": 7201, "burn_hotkey": "5Burn", "validator_hotkey": "5V"}),
            granted(6)])
        assert [m["id"] for m in messages(lines, 1)] == ["6"]
    refused = client.get("/api/events/stream", headers={"last-event-id": "the-last"})
    assert refused.status_code == 400 and refused.json()["path"] == "Last-Event-ID"


@pytest.mark.timeout(60)
def test_a_quiet_stream_sends_keep_alive_comments(
    small: tuple[EventStore, TestClient], monkeypatch: pytest.MonkeyPatch,
) -> None:
    _, client = small
    monkeypatch.setattr(live, "live_keep_alive_s", 0.05)
    with client.stream("GET", "/api/events/stream") as response:
        lines = response.iter_lines()
        comments = [line for line in (next(lines) for _ in range(6)) if line]
    assert comments[0].startswith(": following after position 2")
    assert comments[1:] == [": keep-alive"] * (len(comments) - 1) and len(comments) >= 3


@pytest.mark.timeout(60)
@pytest.mark.parametrize("spec_version", ["2.3", "2.4"])
def test_the_stream_ends_when_its_client_disconnects(
    small: tuple[EventStore, TestClient], spec_version: str,
) -> None:
    # Driven as a server drives it: the client goes after the first event. Under ASGI 2.3
    # (uvicorn) Starlette notices the disconnect; under 2.4 only the stream's own check
    # does. Either way the app returns, and no poll outlives the client.
    _, client = small
    app = client.app
    sent: list[bytes] = []
    gone = anyio.Event()

    async def receive() -> dict[str, Any]:
        if not gone.is_set():  # as uvicorn: once gone, answered at once, without waiting
            await gone.wait()
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message.get("body", b""))
        if b"id: 2\n" in message.get("body", b""):
            gone.set()

    scope = {"type": "http", "asgi": {"version": "3.0", "spec_version": spec_version},
             "http_version": "1.1", "method": "GET", "scheme": "http", "path":
             "/api/events/stream", "raw_path": b"/api/events/stream",
             "query_string": b"after=1", "root_path": "", "headers": [],
             "client": ("127.0.0.1", 1), "server": ("testserver", 80), "state": {}}

    async def serve() -> None:
        with anyio.fail_after(10):
            await app(scope, receive, send)  # type: ignore[arg-type]

    anyio.run(serve)
    assert gone.is_set() and any(b"id: 2\n" in body for body in sent)


@pytest.mark.timeout(60)
def test_a_server_with_an_open_stream_stops_at_once(tmp_path: Path) -> None:
    # A live stream never ends by itself; the server tells it to as it stops, so Ctrl-C on
    # `arena-ledger serve` does not wait for every open page to go.
    url = f"sqlite:///{tmp_path / 'live.db'}"
    migrate.upgrade(url)
    opened = threading.Event()

    def listen(base: str) -> None:
        with httpx.Client(timeout=30) as http, http.stream("GET", f"{base}/api/events/stream") \
                as response:
            for _ in response.iter_lines():
                opened.set()

    with background(url) as base:
        reader = threading.Thread(target=listen, args=(base,), daemon=True)
        reader.start()
        assert opened.wait(10)
        stopping = time.monotonic()
    assert time.monotonic() - stopping < live.live_poll_interval_s + 2
    reader.join(10)
    assert not reader.is_alive()  # the stream ended: its response finished


# -- in a real browser ------------------------------------------------------------------------


@pytest.fixture
def live_site(tmp_path: Path) -> Iterator[tuple[EventStore, str]]:
    """A ledger of two events served on a loopback port, and its store to append with."""
    url = f"sqlite:///{tmp_path / 'live.db'}"
    migrate.upgrade(url)
    with EventStore(url) as store:
        store.append([granted(1), granted(2)])
        with background(url) as base:
            yield store, base


@pytest.mark.timeout(120)
def test_the_events_page_shows_new_events_as_they_commit(
    browser: Any, live_site: tuple[EventStore, str],
) -> None:
    store, base = live_site
    context = browser.new_context()
    try:
        page = context.new_page()
        errors: list[str] = []
        page.on("console", lambda m: m.type == "error" and errors.append(m.text))
        page.goto(f"{base}/events")
        notice = page.locator("p.live-notice")
        assert notice.is_hidden()
        page.wait_for_timeout(300)  # the stream opens after the page
        store.append([granted(3), granted(4)])
        page.wait_for_selector("p.live-notice:not([hidden])", timeout=20_000)
        page.wait_for_function(
            "document.querySelectorAll('#event-rows tr[data-position]').length === 4",
            timeout=20_000)
        assert notice.inner_text() == "2 new events \u2014 reload"
        rows = page.locator("#event-rows tr")
        assert rows.first.get_attribute("data-position") == "4"  # newest first, on top
        first = rows.first.locator("td")
        assert first.nth(0).inner_text() == "4"
        assert first.nth(0).locator("a").get_attribute("href") == "/events/4"
        assert first.nth(6).locator("a").get_attribute("href") == "/events?as_of=4"
        assert errors == []
        notice.locator("a").click()
        page.wait_for_load_state()
        assert page.locator("p.live-notice").is_hidden()  # reloaded: rendered at the new head
        assert page.locator("p.live-notice").get_attribute("data-live-after") == "4"
    finally:
        context.close()


@pytest.mark.timeout(120)
def test_with_javascript_off_the_events_page_is_what_the_server_rendered(
    browser: Any, live_site: tuple[EventStore, str],
) -> None:
    store, base = live_site
    context = browser.new_context(java_script_enabled=False)
    try:
        page = context.new_page()
        page.goto(f"{base}/events")
        store.append([granted(3)])
        page.wait_for_timeout(1_500)
        assert page.locator("p.live-notice").is_hidden()
        assert page.locator("#event-rows tr").count() == 2
        page.locator("input[name=type]").fill("CreditGranted")
        page.locator("form.filters button").click()
        page.wait_for_load_state()
        assert page.locator("#event-rows tr").count() == 3  # the form works without script
        page.locator("#event-rows tr").first.locator("a").first.click()
        assert page.locator("h1").inner_text() == "Event 3"
    finally:
        context.close()

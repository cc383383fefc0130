"""A hotkey's page and its JSON twin: ``history``'s rows a page at a time (each page the
slice of ``history`` it claims, on both backends, from the read models and from the
events), the hotkey's weight in the latest settlements, its latest fees and credits (with
``earnings``' totals over all of them), every list bounded by ``limit``, pager links that
work without JavaScript, a hotkey of any printable characters in the path, and hostile text
shown as text."""

from __future__ import annotations

import html
import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote

import anyio
import httpx
import pytest
from dashboard_ledger import HOSTILE_HOTKEY, HOSTILE_NOTE, DashboardLedger, build
from dashboard_ledger import settlement_scenario as scenario
from fastapi.testclient import TestClient
from markupsafe import escape
from svg_marks import charts

from services import operations
from services.arena_ledger import ArenaLedger, HistoryPage
from services.earnings import hotkey_earnings
from services.hotkey_board import hotkey_board
from vocabulary.errors import InvalidInput
from vocabulary.fields import require_hotkey
from web.pages import PROBLEM

ALICE, BOB, CAROL = scenario().ALICE, scenario().BOB, scenario().CAROL
HOTKEYS = [ALICE, BOB, CAROL, HOSTILE_HOTKEY]


def api(client: TestClient, hotkey: str, **params: Any) -> dict[str, Any]:
    """GETs the hotkey's JSON twin, the hotkey encoded as one path segment."""
    response = client.get("/api/hotkeys/" + quote(hotkey, safe=""), params=params)
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def earnings(dashboard: DashboardLedger, hotkey: str) -> dict[str, Any]:
    """Returns ``arena-ledger earnings --hotkey HOTKEY --json``'s document (the fold's)."""
    with ArenaLedger(dashboard.url) as ledger:
        return hotkey_earnings(ledger, hotkey)


def settlements(dashboard: DashboardLedger) -> list[tuple[dict[str, Any], int]]:
    """Returns the recorded settlements' payloads and positions, in order."""
    return [(dict(payload), position) for payload, position in dashboard.settlements]


@pytest.mark.parametrize("hotkey", HOTKEYS)
def test_the_submissions_are_the_cli_history_rows(
        client: TestClient, dashboard: DashboardLedger, hotkey: str) -> None:
    rows = json.loads(json.dumps(operations.history(dashboard.url, hotkey)))
    body = api(client, hotkey)
    assert body["hotkey"] == hotkey
    assert body["submissions"] == rows
    assert {r["submission_id"] for r in rows} == {
        sid for name, sid in dashboard.sids.items()
        if (name, hotkey) in {("a1", ALICE), ("b2", ALICE), ("a5", ALICE), ("a2", BOB),
                              ("a4", BOB), ("b1", CAROL), ("a3", CAROL),
                              ("hostile", HOSTILE_HOTKEY)}}


@pytest.mark.parametrize("hotkey", HOTKEYS)
def test_fees_credits_and_weights_are_what_earnings_reports(
        client: TestClient, dashboard: DashboardLedger, hotkey: str) -> None:
    body, expected = api(client, hotkey), earnings(dashboard, hotkey)
    assert body["fees"] == expected["fees"]
    assert body["credit_totals"] == expected["credits"]
    assert len(body["settlements"]) == body["totals"]["settlements"] == \
        expected["settlements"]["recorded"]
    # Listed newest first; earnings lists them in the order they were recorded.
    assert [s for s in reversed(body["settlements"]) if s["weight_ppm"] or s["claims"]] == \
        expected["settlements"]["with_weight"]


def test_the_settled_ledgers_fees_and_credits(client: TestClient) -> None:
    # Alice paid a1 (1e9) and b2 (2e9) and a5 with a credit at mlp-a's fee; Bob's a2 was
    # refunded (docstring: FEES_A, the credit granted at 3 x FEE_A).
    fee_a, fee_b = scenario().FEE_A, scenario().FEE_B
    alice, bob = api(client, ALICE), api(client, BOB)
    assert alice["fees"] == {"consumed_rao": fee_a + fee_b, "released_rao": 0,
                             "net_rao": fee_a + fee_b, "credits_spent_rao": fee_a}
    assert alice["credit_totals"] == {"granted": 1, "granted_rao": 3 * fee_a, "spent": 1}
    assert bob["fees"] == {"consumed_rao": 2 * fee_a, "released_rao": fee_a,
                           "net_rao": fee_a, "credits_spent_rao": 0}
    assert [p["status"] for p in bob["payments"]] == ["CONSUMED", "RELEASED"]  # newest first


@pytest.mark.parametrize("hotkey", [ALICE, BOB, CAROL])
def test_the_weight_chart_draws_each_settlements_weight_by_block(
        html_page: Callable[..., str], dashboard: DashboardLedger, hotkey: str) -> None:
    page = html_page("/hotkeys/" + quote(hotkey, safe=""))
    (chart,) = [c for c in charts(page) if c.title.startswith("weight")]
    expected = [(float(payload["block"]), float(payload["weights_ppm"].get(hotkey, 0)))
                for payload, _ in settlements(dashboard)]
    assert [(m.x, m.y) for m in chart.marks] == expected
    if hotkey != CAROL:  # the first settlement's weights, worked out in the docstring
        assert chart.marks[0].y == scenario().WEIGHTS_1[hotkey]


def test_the_claims_are_the_settlements_claims(
        client: TestClient, dashboard: DashboardLedger) -> None:
    rows = api(client, ALICE)["settlements"]  # newest first
    for (payload, position), row in zip(settlements(dashboard)[::-1], rows, strict=True):
        assert row["position"] == position and row["block"] == payload["block"]
        assert row["claims"] == [
            {k: c[k] for k in ("arena_id", "submission_id", "block", "speedup_ppm", "credit")}
            for c in payload["claims"] if c["hotkey"] == ALICE]


def test_the_page_lists_each_submission_with_its_cause_and_next_step(
        html_page: Callable[..., str], client: TestClient) -> None:
    page = html_page("/hotkeys/" + quote(ALICE, safe=""))
    for row in api(client, ALICE)["submissions"]:
        assert f'<a href="/submissions/{row["submission_id"]}">' in page
        assert f'<td class="cause">{escape(row["cause"])}</td>' in page
        assert f'<td class="next-step">{escape(row["next_step"])}</td>' in page
        assert f'<a href="/events/{row["latest_position"]}">' in page


def test_the_hostile_hotkey_and_note_arrive_as_text(
        html_page: Callable[..., str], client: TestClient) -> None:
    path = "/hotkeys/" + quote(HOSTILE_HOTKEY, safe="")
    page = html_page(path)
    assert f'<code class="hotkey">{escape(HOSTILE_HOTKEY)}</code>' in page
    assert "<script" not in page.lower() and "<img" not in page.lower()
    assert "&lt;img src=x onerror=alert(1)&gt; &lt;/textarea&gt;" in page
    assert "&#34;quoted&#34; &#39;single&#39;" in page
    # The right-to-left override is shown by its code point, not obeyed: obeyed, it would
    # show "gnp.exe" as "exe.png" (web/routes/hotkeys.py says why).
    assert "\u202e" not in page
    assert '<span class="bidi" title="U+202E RIGHT-TO-LEFT OVERRIDE">[U+202E]</span>gnp.exe' \
        in page
    # The twin is linked encoded and keeps the note's every character.
    twin = "/api" + path
    assert f'href="{twin}"' in page
    assert [c["note"] for c in client.get(twin).json()["credits"]] == [HOSTILE_NOTE]


def served(client: TestClient, path: str, accept: str = "application/json") -> httpx.Response:
    """GETs ``path`` (percent-encoded) with the path decoded once, as a server does.

    Starlette's TestClient decodes the path twice (``p%2541`` reaches the app as ``pA``,
    not ``p%41``), so a hotkey with a ``%`` goes through httpx's ASGI transport instead.
    """
    async def get() -> httpx.Response:
        transport = httpx.ASGITransport(app=client.app)
        async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as c:
            return await c.get(path, headers={"accept": accept})

    return anyio.run(get)


@pytest.mark.parametrize("hotkey", ["a/b", "q?x=1", "h#frag", "p%41", "..x", "<b>/%2F"])
def test_a_hotkey_of_any_printable_characters_is_one_path_segment(
        client: TestClient, hotkey: str) -> None:
    segment = quote(hotkey, safe="")
    body = served(client, f"/api/hotkeys/{segment}").json()
    assert body["hotkey"] == hotkey
    page = served(client, f"/hotkeys/{segment}", accept="text/html")
    assert page.status_code == 200
    assert f'<h1>Hotkey <code class="hotkey">{escape(hotkey)}</code></h1>' in page.text
    assert f'href="/api/hotkeys/{segment}"' in page.text  # the twin, encoded the same way


def test_a_hotkey_without_submissions_gets_empty_lists_as_history_does(
        client: TestClient, html_page: Callable[..., str], dashboard: DashboardLedger) -> None:
    body = api(client, "5Nobody")
    assert body["submissions"] == operations.history(dashboard.url, "5Nobody") == []
    assert body["payments"] == body["credits"] == []
    assert {s["weight_ppm"] for s in body["settlements"]} == {0}
    page = html_page("/hotkeys/5Nobody")
    assert '<p class="empty">no submissions from <code>5Nobody</code></p>' in page


@pytest.mark.parametrize("segment", ["", "a%20b", "x" * 65, "tab%09", "caf%C3%A9"])
def test_text_that_is_no_hotkey_is_a_400_naming_it(client: TestClient, segment: str) -> None:
    response = client.get(f"/api/hotkeys/{segment}")
    assert response.status_code == 400
    assert response.headers["content-type"] == PROBLEM
    with pytest.raises(InvalidInput) as raised:
        require_hotkey(unquote(segment))
    assert response.json()["detail"] == raised.value.message
    assert response.json()["path"] == "hotkey"


def test_the_read_models_and_the_events_give_one_document(
        store_url: str, tmp_path: Path) -> None:
    # On each backend: the read models answer at the head; a view as of the head reads the
    # events instead (read models answer no view as of a position). Both must agree.
    built = build(store_url, tmp_path)
    with ArenaLedger(built.url) as ledger:
        head = ledger.store.head().position
        with ArenaLedger(built.url, as_of=head) as view:
            for hotkey in [*HOTKEYS, "5Burn", "5Nobody"]:
                assert hotkey_board(ledger, hotkey) == hotkey_board(view, hotkey)


def test_the_page_reads_no_fold(client: TestClient, html_page: Callable[..., str]) -> None:
    for hotkey in HOTKEYS:
        html_page("/hotkeys/" + quote(hotkey, safe=""))
    # The dashboard's per-thread ledgers: a fold they caught up would have a position.
    opened = client.app.state.dashboard.ledgers()
    assert opened and all(ledger.guard.fold.position == 0 for ledger in opened)


def pages_forward(ledger: ArenaLedger, hotkey: str, limit: int) -> list[HistoryPage]:
    """Returns the hotkey's history pages from the first, each after the last one's end."""
    found = [ledger.history_page(hotkey, limit)]
    while found[-1].next is not None:
        found.append(ledger.history_page(hotkey, limit, after=found[-1].next))
    return found


def pages_back(ledger: ArenaLedger, hotkey: str, limit: int, last: HistoryPage
               ) -> list[HistoryPage]:
    """Returns the pages from ``last`` back to the first, each before the next one's start."""
    found = [last]
    while found[-1].previous is not None:
        found.append(ledger.history_page(hotkey, limit, before=found[-1].previous))
    return found[::-1]


def assert_slices(pages: list[HistoryPage], rows: list[dict[str, Any]]) -> None:
    """Asserts each page is the slice of ``rows`` it claims and that together they are all
    of them: each page's rows, how many, where it starts, and the ids to page on from."""
    at = pages[0].start
    for page in pages:
        assert page.start == at and page.total == len(rows)
        assert page.rows == rows[at:at + len(page.rows)]
        assert page.previous == (rows[at]["submission_id"] if at and page.rows else None)
        end = at + len(page.rows)
        assert page.next == (rows[end - 1]["submission_id"] if 0 < end < len(rows) else None)
        at = end
    assert [r for page in pages for r in page.rows] == rows[pages[0].start:at]


def test_each_history_page_is_its_slice_of_history(store_url: str, tmp_path: Path) -> None:
    # On each backend, from the read models (SQL, a page's rows) and from the events (a
    # view as of the head slices the whole history): the same pages, across every page
    # boundary, forward and back.
    built = build(store_url, tmp_path)
    with ArenaLedger(built.url) as ledger:
        head = ledger.store.head().position
        with ArenaLedger(built.url, as_of=head) as view:
            _, alice = ledger.history(ALICE)
            # The page's order is history's (arrival first), not arena first: worth a page.
            assert [r["arena_id"] for r in alice] != sorted(r["arena_id"] for r in alice)
            for hotkey in [*HOTKEYS, "5Nobody"]:
                _, rows = ledger.history(hotkey)
                for limit in (1, 2, 3, 500):
                    forward = pages_forward(ledger, hotkey, limit)
                    assert_slices(forward, rows)
                    assert_slices(pages_back(ledger, hotkey, limit, forward[-1]), rows)
                    assert pages_forward(view, hotkey, limit) == forward
                if rows:  # a cursor at either end: an empty page, as the slice gives
                    first, last = rows[0]["submission_id"], rows[-1]["submission_id"]
                    for source in (ledger, view):
                        assert source.history_page(hotkey, 2, before=first) == \
                            HistoryPage(head, [], len(rows), 0, None, None)
                        assert source.history_page(hotkey, 2, after=last) == \
                            HistoryPage(head, [], len(rows), len(rows), None, None)


@pytest.mark.parametrize("hotkey", HOTKEYS)
def test_every_list_is_bounded_by_limit_and_the_totals_count_them_all(
        client: TestClient, dashboard: DashboardLedger, hotkey: str) -> None:
    full, one, expected = api(client, hotkey), api(client, hotkey, limit=1), \
        earnings(dashboard, hotkey)
    # The fee and credit totals are over every payment and credit, whatever the limit.
    assert one["fees"] == full["fees"] == expected["fees"]
    assert one["credit_totals"] == full["credit_totals"] == expected["credits"]
    assert one["totals"] == full["totals"]
    assert full["totals"]["submissions"] == expected["submissions"]["total"]
    assert full["totals"]["credits"] == expected["credits"]["granted"]
    for name, position in (("settlements", "position"), ("payments", "consumed_position"),
                           ("credits", "granted_position")):
        # The small ledger fits the default limit: the lists are whole, newest first.
        assert len(full[name]) == full["totals"][name]
        positions = [row[position] for row in full[name]]
        assert positions == sorted(positions, reverse=True)
        assert one[name] == full[name][:1]
    assert one["submissions"] == full["submissions"][:1]
    assert one["limit"] == 1 and full["limit"] == 100


def test_the_read_models_and_the_events_give_one_page(store_url: str, tmp_path: Path) -> None:
    # As test_the_read_models_and_the_events_give_one_document, for bounded pages.
    built = build(store_url, tmp_path)
    with ArenaLedger(built.url) as ledger:
        head = ledger.store.head().position
        with ArenaLedger(built.url, as_of=head) as view:
            for hotkey in HOTKEYS:
                first = hotkey_board(ledger, hotkey, limit=1)
                assert first == hotkey_board(view, hotkey, limit=1)
                after = first["page"]["next"]
                if after is not None:
                    assert hotkey_board(ledger, hotkey, 1, after=after) == \
                        hotkey_board(view, hotkey, 1, after=after)


@pytest.mark.parametrize("query", ["limit=0", "limit=501", "limit=ten"])
def test_a_limit_out_of_bounds_is_a_400(client: TestClient, query: str) -> None:
    response = client.get(f"/api/hotkeys/{ALICE}?{query}")
    assert response.status_code == 400
    assert response.json()["path"] == "query.limit"


def test_a_cursor_that_is_no_submission_of_the_hotkey_is_a_400_naming_it(
        client: TestClient, dashboard: DashboardLedger) -> None:
    bobs, alices = dashboard.sids["a2"], dashboard.sids["a1"]
    for name, sid in (("after", bobs), ("before", "0" * 64), ("after", alices[:16])):
        response = client.get(f"/api/hotkeys/{ALICE}", params={name: sid})
        assert response.status_code == 400
        assert response.json()["path"] == name
        assert repr(sid) in response.json()["detail"] and ALICE in response.json()["detail"]
    both = client.get(f"/api/hotkeys/{ALICE}", params={"after": alices, "before": alices})
    assert both.status_code == 400 and both.json()["path"] == "before"


def submission_links(page: str) -> list[str]:
    """Returns the submission ids the page's submissions table links to, in order."""
    (table,) = re.findall(r'<table class="submissions">.*?</table>', page, re.S)
    return re.findall(r'<a href="/submissions/([0-9a-f]{64})">', table)


def pager_link(page: str, rel: str) -> str | None:
    """Returns the href of the submissions pager's ``rel`` link, or None."""
    (nav,) = re.findall(r'<nav class="pager submissions">.*?</nav>', page, re.S)
    found = re.findall(rf'<a rel="{rel}" href="([^"]*)"', nav)
    return html.unescape(found[0]) if found else None


def test_the_pager_walks_the_submissions_without_javascript(
        client: TestClient, html_page: Callable[..., str]) -> None:
    # Plain links, followed as a browser with JavaScript off follows them.
    rows = [r["submission_id"] for r in api(client, ALICE)["submissions"]]
    shown: list[list[str]] = []
    path: str | None = "/hotkeys/" + ALICE + "?limit=2"
    while path is not None:
        page = html_page(path)
        shown.append(submission_links(page))
        start = sum(len(ids) for ids in shown[:-1])
        assert (f"showing {start + 1}–{start + len(shown[-1])} of {len(rows)} submissions "
                f"from <code>{ALICE}</code>") in page
        assert (pager_link(page, "first") is None) == (start == 0)
        assert f'href="/api/hotkeys/{ALICE}?' in page  # the twin of this very page
        path = pager_link(page, "next")
    assert [sid for ids in shown for sid in ids] == rows and len(shown) > 1
    back = pager_link(page, "prev")
    assert back is not None and submission_links(html_page(back)) == shown[-2]


def test_the_page_says_how_many_of_each_list_it_shows(html_page: Callable[..., str],
                                                      client: TestClient) -> None:
    full = api(client, BOB)["totals"]
    page = html_page(f"/hotkeys/{BOB}?limit=1")
    assert f"showing the latest 1 of {full['settlements']} settlements, newest first" in page
    assert f"showing the latest 1 of {full['payments']} payments, newest first" in page
    assert len(re.findall(r'<td class="num weight">', page)) == 1


def test_the_library_refuses_an_empty_page_or_one_running_both_ways(
        dashboard: DashboardLedger) -> None:
    sid = dashboard.sids["a1"]
    with ArenaLedger(dashboard.url) as ledger:
        for kwargs, path in (({"limit": 0}, "limit"),
                             ({"limit": 2, "after": sid, "before": sid}, "before")):
            with pytest.raises(InvalidInput) as raised:
                ledger.history_page(ALICE, **kwargs)
            assert raised.value.path == path

"""Every page, in a real browser (Debian's Chromium through Playwright): reached by following
links from the arenas page, each loads with no console error (a Content-Security-Policy
violation is one), the charts' data points are read back from the rendered page, hostile
ledger strings arrive as text, and the pages work with JavaScript off."""

from __future__ import annotations

from collections import deque
from typing import Any
from urllib.parse import quote, urljoin, urlsplit

from dashboard_ledger import HOSTILE_HOTKEY, HOSTILE_NOTE

#: Enough to reach every kind of page of the dashboard ledger without walking every event.
CRAWL_LIMIT = 60


def _links(page: Any) -> list[str]:
    hrefs: list[str] = page.eval_on_selector_all("a[href]", "els => els.map(e => e.href)")
    return hrefs


def test_following_links_from_the_arenas_page_reaches_every_kind_of_page(
        browser_page: Any, base_url: str, client: Any) -> None:
    seen: set[str] = set()
    twins: dict[str, str] = {}
    kinds: set[str] = set()
    queue = deque([f"{base_url}/"])
    dialogs: list[str] = []
    browser_page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    while queue and len(seen) < CRAWL_LIMIT:
        url = queue.popleft()
        path = urlsplit(url).path
        # One page of each kind per id-bearing prefix is enough beyond the first few.
        kind = "/" + path.strip("/").split("/")[0] if path != "/" else "/"
        if url in seen or (kind in kinds and sum(k == kind for k in kinds) > 3):
            continue
        seen.add(url)
        response = browser_page.goto(url)
        assert response is not None and response.status == 200, (url, response and
                                                                   response.status)
        kinds.add(kind)
        assert "Traceback" not in browser_page.content(), url
        assert browser_page.console_errors == [], (url, browser_page.console_errors)
        twin = browser_page.locator("footer a.twin")
        assert twin.count() == 1, f"{url} links no JSON twin"
        twins[url] = twin.get_attribute("href")
        for href in _links(browser_page):
            split = urlsplit(href)
            if (href.startswith(base_url) and not split.path.startswith(("/api/", "/static/"))
                    and not split.path.endswith("/note")):
                queue.append(urljoin(href, split.path + (f"?{split.query}" if split.query
                                                         else "")))
    assert {"/", "/arenas", "/submissions", "/hotkeys", "/settlements", "/checkpoints",
            "/events"} <= kinds, kinds
    assert dialogs == [], "a page ran a script from the ledger"
    # Every page's twin answers JSON (the same data, as each page's own suite checks).
    for url, twin in twins.items():
        response = client.get(twin)
        assert response.status_code == 200, (url, twin, response.status_code)
        assert response.headers["content-type"].startswith("application/json"), (url, twin)


def test_the_submission_chart_points_are_its_windows(browser_page: Any, base_url: str,
                                                     client: Any, dashboard: Any) -> None:
    sid = dashboard.sids["a1"]
    document = client.get(f"/api/submissions/{sid}").json()
    browser_page.goto(f"{base_url}/submissions/{sid}")
    drawn = browser_page.eval_on_selector_all(
        "svg.chart circle.point", "els => els.map(e => Number(e.dataset.y))")
    ratios = [float(w["ratio"]) for a in document["attempts"] for w in a["windows"]]
    assert drawn and sorted(drawn) == sorted(ratios)
    # Each mark is drawn: the browser laid it out inside its chart.
    box = browser_page.locator("svg.chart circle.point").first.bounding_box()
    assert box is not None and box["width"] > 0


def test_hostile_strings_render_as_text(browser_page: Any, base_url: str) -> None:
    dialogs: list[str] = []
    browser_page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    browser_page.goto(f"{base_url}/hotkeys/{quote(HOSTILE_HOTKEY, safe='')}")
    assert HOSTILE_HOTKEY in browser_page.locator("h1").inner_text()
    note = HOSTILE_NOTE.replace("\u202e", "[U+202E]")
    assert note in browser_page.locator("main").inner_text()
    # No element the strings spell was created: they stayed text.
    assert browser_page.locator("main script, main img, main textarea").count() == 0
    assert dialogs == []
    assert browser_page.console_errors == []


def test_pages_work_with_javascript_off(browser: Any, base_url: str, dashboard: Any) -> None:
    context = browser.new_context(java_script_enabled=False)
    try:
        page = context.new_page()
        page.goto(f"{base_url}/")
        page.locator("a", has_text="mlp-a").first.click()
        assert urlsplit(page.url).path == "/arenas/mlp-a"
        page.goto(f"{base_url}/submissions/{dashboard.sids['a4']}")
        assert page.locator("svg.chart circle.point").count() > 0
        assert "rewarded" in page.locator("main").inner_text() or \
            "QUALIFIED" in page.locator("main").inner_text()
    finally:
        context.close()

"""The frame every page shares, in a real browser: it loads with no console error or CSP
violation, the nav's links lead to pages, and an error page reads as a page."""

from __future__ import annotations

from typing import Any


def test_the_head_page_loads_clean_and_names_the_head(browser_page: Any, base_url: str,
                                                       client: Any) -> None:
    response = browser_page.goto(f"{base_url}/head")
    assert response.status == 200
    assert response.headers["content-security-policy"].startswith("default-src 'none'")
    head = client.get("/api/head").json()
    facts = browser_page.locator("dl.facts dd")
    assert str(head["position"]) in facts.all_inner_texts()
    assert browser_page.console_errors == []


def test_the_json_twin_link_leads_to_the_same_head(browser_page: Any, base_url: str) -> None:
    browser_page.goto(f"{base_url}/head")
    shown = browser_page.locator("dl.facts dd.num").inner_text()
    browser_page.locator("a.twin").click()
    assert browser_page.url == f"{base_url}/api/head"
    assert f'"position":{shown}' in browser_page.content()


def test_an_unknown_page_is_an_error_page_without_a_traceback(browser_page: Any,
                                                              base_url: str) -> None:
    response = browser_page.goto(f"{base_url}/no/such/page")
    assert response.status == 404
    assert browser_page.locator("h1").inner_text() == "404 Not found"
    assert "/no/such/page" in browser_page.locator("p.problem").inner_text()
    assert "Traceback" not in browser_page.content()

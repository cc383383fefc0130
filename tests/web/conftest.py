"""Provides the dashboard suites' ledgers (built once per module, on each backend) and a
client of the app over them.

``dashboard`` is the built ledger; ``client`` a FastAPI TestClient (in-process ASGI, no
socket) that asks for JSON unless a test asks for HTML with ``page()``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from dashboard_ledger import DashboardLedger, build
from fastapi.testclient import TestClient
from live_server import chromium, chromium_path

from web.app import create_app
from web.server import background

HTML = {"accept": "text/html"}


@pytest.fixture(scope="module")
def dashboard(tmp_path_factory: pytest.TempPathFactory) -> DashboardLedger:
    """The dashboard ledger on SQLite, built once per module."""
    root = tmp_path_factory.mktemp("dashboard")
    return build(f"sqlite:///{root / 'ledger.db'}", root)


@pytest.fixture(scope="module")
def client(dashboard: DashboardLedger) -> Iterator[TestClient]:
    """A client of the app over ``dashboard`` (lifespan run, so the app closes its ledgers)."""
    with TestClient(create_app(dashboard.url), raise_server_exceptions=False) as found:
        yield found


def page(client: TestClient, path: str, status: int = 200) -> str:
    """GETs ``path`` as a browser would and returns the HTML, asserting its status."""
    response = client.get(path, headers=HTML)
    assert response.status_code == status, (path, response.status_code, response.text[:500])
    assert response.headers["content-type"].startswith("text/html")
    return response.text


@pytest.fixture
def html_page(client: TestClient):  # type: ignore[no-untyped-def]
    """``html_page(path, status=200)``: the page's HTML (see ``page``)."""
    return lambda path, status=200: page(client, path, status)




@pytest.fixture(scope="module")
def base_url(dashboard: DashboardLedger) -> Iterator[str]:
    """The dashboard served on a real loopback port (uvicorn in a thread)."""
    with background(dashboard.url) as found:
        yield found


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """A headless Chromium (Debian's package, driven by Playwright); the test skips when it
    is not installed (.ci/run installs it)."""
    executable = chromium_path()
    if executable is None:
        pytest.skip("Debian's chromium is not installed (apt-get install chromium)")
    with chromium(executable) as found:
        yield found


@pytest.fixture
def browser_page(browser: Any) -> Iterator[Any]:
    """A fresh page with JavaScript on, which records console errors and CSP violations."""
    context = browser.new_context()
    page = context.new_page()
    page.console_errors = []  # type: ignore[attr-defined]
    page.on("console", lambda m: m.type == "error" and page.console_errors.append(m.text))
    try:
        yield page
    finally:
        context.close()

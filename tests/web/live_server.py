"""Serves the app on a real loopback socket (uvicorn in a thread) and opens Debian's
Chromium through Playwright, for the browser suites and the screenshot script.

Nothing is downloaded: Playwright drives the system's ``chromium`` through
``executable_path``; without it the browser suites skip, naming the package to install.
"""

from __future__ import annotations

import shutil
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import uvicorn

from web.app import create_app

#: Where Debian's chromium package puts the browser (checked in this order).
CHROMIUM_PATHS = ("/usr/bin/chromium", "/usr/bin/chromium-browser")
#: Chromium's own network chatter is refused on a closed machine; these flags stop it.
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update",
                 "--disable-sync"]


def chromium_path() -> str | None:
    """Returns the system Chromium's path, or None when it is not installed."""
    for path in CHROMIUM_PATHS:
        if shutil.which(path):
            return path
    return None


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextmanager
def served(url: str) -> Iterator[str]:
    """Serves the ledger at ``url`` on a free loopback port; yields the base URL."""
    port = _free_port()
    config = uvicorn.Config(create_app(url), host="127.0.0.1", port=port, log_level="warning",
                            access_log=False)
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, name="uvicorn", daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("the test server did not start")
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=30)


@contextmanager
def chromium(executable: str) -> Iterator[Any]:
    """Yields a headless Playwright Browser of the system Chromium."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=executable, headless=True,
                                             args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()

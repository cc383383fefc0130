"""Opens Debian's Chromium through Playwright for the browser suites (the app itself is
served on a real loopback socket by ``web.server.background``).

Nothing is downloaded: Playwright drives the system's ``chromium`` through
``executable_path``; without it the browser suites skip, naming the package to install.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

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

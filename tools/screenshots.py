"""Regenerates the dashboard screenshots in docs/screenshots/ from a ledger.

Serves the ledger with ``web.server.background``, opens each main page in Debian's Chromium
(driven by Playwright through ``executable_path``; nothing is downloaded) and saves a PNG
per page. The ids come from the ledger itself: its first arena, a PASS (else any)
submission, that submission's hotkey, the latest settlement.

    arena-ledger demo                       # writes arena-ledger.db here
    python tools/screenshots.py --db sqlite:///arena-ledger.db
"""

from __future__ import annotations

import argparse
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path
from urllib.parse import quote

_ROOT = Path(__file__).resolve().parents[1]
if str(_ROOT) not in sys.path:
    sys.path.append(str(_ROOT))

from ledger.store import EventStore  # noqa: E402
from services.arena_ledger import ArenaLedger  # noqa: E402
from web.server import background  # noqa: E402

OUT = _ROOT / "docs" / "screenshots"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update",
                 "--disable-sync"]


def pages(url: str) -> list[tuple[str, str]]:
    """Returns (file name, path) of the pages to capture."""
    with ArenaLedger(url) as ledger:
        rows = ledger.submissions()
    if not rows:
        raise SystemExit("the ledger has no submission: run `arena-ledger demo` first")
    chosen = next((r for r in rows if r["status"] == "QUALIFIED"), rows[0])
    with EventStore(url) as store:
        settlement = None
        for recorded in store.read_all(types=["SettlementComputed"]):
            settlement = recorded.position
    found = [
        ("arenas", "/"),
        ("arena", f"/arenas/{quote(chosen['arena_id'], safe='')}"),
        ("submission", f"/submissions/{chosen['submission_id']}"),
        ("hotkey", f"/hotkeys/{quote(chosen['hotkey'], safe='')}"),
        ("events", "/events?limit=25"),
        ("checkpoints", "/checkpoints"),
    ]
    if settlement is not None:
        found.append(("settlement", f"/settlements/{settlement}"))
    return found


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--db", default="sqlite:///arena-ledger.db")
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--width", type=int, default=1200)
    args = parser.parse_args(argv)
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        raise SystemExit("Debian's chromium is not installed (apt-get install chromium)")
    from playwright.sync_api import sync_playwright

    args.out.mkdir(parents=True, exist_ok=True)
    with background(args.db) as base, sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium, headless=True,
                                             args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": args.width, "height": 900})
        for name, path in pages(args.db):
            response = page.goto(base + path)
            if response is None or response.status != 200:
                raise SystemExit(f"{path} answered {response.status if response else 'nothing'}")
            target = args.out / f"{name}.png"
            page.screenshot(path=str(target), full_page=True)
            print(f"{target.relative_to(_ROOT) if target.is_relative_to(_ROOT) else target}")
        browser.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Writes the generated pages (docs/cli.md, docs/events.md, docs/machines.md) and the generated
part of docs/engine.md (the delta table); --check compares."""

from __future__ import annotations

import argparse
import functools
import sys
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from cli.docs import render_cli_md, render_events_md  # noqa: E402
from engine_bridge.docs import render_engine_md  # noqa: E402
from machines.docs import render_machines_md  # noqa: E402

PAGES: dict[str, Callable[[], str]] = {
    "cli.md": render_cli_md,
    "events.md": render_events_md,
    "machines.md": render_machines_md,
}
#: Hand-written pages with a generated part between markers: the page's text in, out again.
SPLICED: dict[str, Callable[[str], str]] = {
    "engine.md": render_engine_md,
}


def _spliced() -> list[tuple[str, Callable[[], str]]]:
    pages: list[tuple[str, Callable[[], str]]] = []
    for name, splice in SPLICED.items():
        current = (ROOT / "docs" / name).read_text(encoding="utf-8")
        pages.append((name, functools.partial(splice, current)))
    return pages


def main(argv: list[str] | None = None) -> int:
    """Writes every generated page, or with ``--check`` exits 1 naming the stale ones."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--check", action="store_true", help="fail if a page is stale")
    args = parser.parse_args(argv)
    stale = []
    for name, render in [*PAGES.items(), *_spliced()]:
        target = ROOT / "docs" / name
        text = render()
        current = target.read_text(encoding="utf-8") if target.exists() else ""
        if current == text:
            continue
        if args.check:
            stale.append(name)
        else:
            target.write_text(text, encoding="utf-8")
            print(f"wrote {target}")
    if stale:
        print("stale: " + ", ".join(stale) + "; run python tools/gen_docs.py", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

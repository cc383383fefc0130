"""Writes docs/machines.md from machines.docs.render_machines_md() (or checks it with --check)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from machines.docs import render_machines_md  # noqa: E402  (after the path is set)

TARGET = ROOT / "docs" / "machines.md"


def main(argv: list[str] | None = None) -> int:
    """Writes the page, or with ``--check`` exits 1 when the page is out of date."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--check", action="store_true", help="fail if the page is stale")
    args = parser.parse_args(argv)
    text = render_machines_md()
    if args.check:
        current = TARGET.read_text(encoding="utf-8") if TARGET.exists() else ""
        if current != text:
            print(f"{TARGET} is stale; run python tools/gen_machines_doc.py", file=sys.stderr)
            return 1
        return 0
    TARGET.write_text(text, encoding="utf-8")
    print(f"wrote {TARGET}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

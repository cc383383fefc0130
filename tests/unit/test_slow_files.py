"""The suite's slowest-first file order names files that exist, each once."""

from __future__ import annotations

from pathlib import Path

from slow_files import SLOW_FIRST

ROOT = Path(__file__).resolve().parents[2]


def test_every_listed_slow_file_exists_and_is_listed_once() -> None:
    missing = [path for path in SLOW_FIRST if not (ROOT / path).is_file()]
    assert missing == []
    assert len(set(SLOW_FIRST)) == len(SLOW_FIRST)

"""Fails when a generated page in docs/ differs from what the code renders."""

from __future__ import annotations

from pathlib import Path

import pytest

from cli.docs import render_cli_md, render_events_md
from vocabulary.catalogue import CATALOGUE

DOCS = Path(__file__).resolve().parents[2] / "docs"


@pytest.mark.parametrize(("page", "render"), [("cli.md", render_cli_md),
                                              ("events.md", render_events_md)])
def test_generated_page_is_fresh(page: str, render: object) -> None:
    assert callable(render)
    assert (DOCS / page).read_text(encoding="utf-8") == render(), (
        f"docs/{page} is stale; run python tools/gen_docs.py"
    )


def test_event_page_lists_every_catalogue_type_at_its_version() -> None:
    text = render_events_md()
    for event_type, version in CATALOGUE.types.items():
        assert f"## {event_type} (v{version})" in text


def test_cli_page_lists_the_core_commands_and_exit_codes() -> None:
    text = render_cli_md()
    for command in ("append", "events", "head", "verify", "init", "db upgrade", "explain",
                    "settle", "replay"):
        assert f"### `arena-ledger {command}`" in text
    assert "| 3 | concurrency conflict" in text

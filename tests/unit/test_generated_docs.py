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


def test_the_engine_pages_delta_table_is_the_one_the_code_renders() -> None:
    from engine_bridge.docs import render_engine_md

    page = (DOCS / "engine.md").read_text(encoding="utf-8")
    assert render_engine_md(page) == page, (
        "docs/engine.md's delta table is stale; run python tools/gen_docs.py")


def test_the_delta_table_gives_each_digest_by_the_documented_formula() -> None:
    from engine_bridge.deltas import REGISTRY, registered
    from engine_bridge.docs import render_delta_table
    from vocabulary.codec import digest

    # The page gave skip_mlp as ae46cc7b…6c6e; the formula the page states gives …5c6e.
    table = render_delta_table()
    for name, entry in REGISTRY.items():
        full = digest("arena-ledger.delta", {"kind": "registered", "name": name,
                                             "params": dict(entry.defaults),
                                             "registry": "engine-bridge-deltas.v1"})
        assert full == registered(name).digest
        assert f"| `{full[:8]}…{full[-4:]}` |" in table.splitlines()[2 + list(REGISTRY).index(name)]

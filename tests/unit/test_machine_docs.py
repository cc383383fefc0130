"""Checks that docs/machines.md is exactly what the tables render, and what it shows."""

from __future__ import annotations

from pathlib import Path

from machines import attempt, submission
from machines.docs import render_machines_md, render_reason_table, render_state_diagram
from machines.reasons import REASONS

DOC = Path(__file__).resolve().parents[2] / "docs" / "machines.md"


def test_docs_match_the_render() -> None:
    assert DOC.read_text(encoding="utf-8") == render_machines_md(), (
        "docs/machines.md is stale: run python tools/gen_machines_doc.py"
    )


def test_render_is_deterministic() -> None:
    assert render_machines_md() == render_machines_md()


def test_diagrams_name_every_state_and_terminal() -> None:
    for table in (submission.TABLE, attempt.TABLE):
        diagram = render_state_diagram(table)
        assert diagram.startswith("```mermaid\nstateDiagram-v2\n")
        assert f"[*] --> {table.initial} : {table.opening}" in diagram
        for state in table.states:
            assert state in diagram
        for terminal in table.terminals:
            assert f"    {terminal} --> [*]" in diagram


def test_reason_table_lists_every_code() -> None:
    table = render_reason_table()
    for code in REASONS:
        assert f"| `{code}` |" in table


def test_worked_example_is_rendered_with_the_domain_digits() -> None:
    text = render_machines_md()
    assert '`"1.019129"`' in text and '`"0.018884"`' in text and "look_window 3" in text
    assert "| 3 | 0.9875000 | 0.9750000 | 1.0191290 | 0.0093541 | 0.0188844 | pass |" in text

"""Builds the settlement rules' inputs the property tests draw: one submission from a few
small numbers, so two suites that generate reward groups describe a row the same way."""

from __future__ import annotations

from machines import samples
from machines.settlement_rules import SubmissionInput


def drawn_input(index: int, block: int, order: int, status: str, group: str,
                speedup: str, verdict: str, hotkeys: int) -> SubmissionInput:
    """Returns submission ``index`` (hotkey ``5H<index mod hotkeys>``) arrived at ``block``
    (event ``order``) in reward ``group``; a QUALIFIED one passed at ``speedup``, any other
    carries ``verdict`` unless that is PASS (a live submission has none)."""
    passed = status == "QUALIFIED"
    return SubmissionInput(
        submission_id=samples.hex64(f"sub:{index}"),
        hotkey=f"5H{index % hotkeys}",
        content_hash=samples.hex64(f"content:{index}"),
        block=block,
        event_index=order,
        event_subindex=0,
        status=status,
        incumbent_digest=group,
        verdict="PASS" if passed else (None if verdict == "PASS" else verdict),
        speedup=speedup if passed else None,
    )

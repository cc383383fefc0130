"""Projects the outcome of registered controls: ``as_expected``, ``unexpected`` or ``pending``.

A submission whose delta_digest is a registered control of its arena is ``as_expected``
when its verdict (and reason, when the control registered one) matches, ``unexpected``
otherwise, and ``pending`` while unresolved (ARRIVED, QUEUED, QUALIFYING, or HELD without
any verdict yet). A control submission that was REJECTED, or EXPIRED before any verdict, never
produced a verdict and is ``unexpected``: the control did not demonstrate what it was registered
to. One that expired after its verdict (a parked NO_DECISION) is judged by that verdict.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from machines.arena import ArenaState
from machines.submission import (
    ARRIVED,
    EXPIRED,
    QUALIFYING,
    QUEUED,
    REJECTED,
    SubmissionState,
)
from vocabulary.events import ControlRegistered

__all__ = [
    "AS_EXPECTED",
    "CONTROL_HOTKEY",
    "OUTCOMES",
    "PENDING",
    "UNEXPECTED",
    "ControlRow",
    "complete_runs",
    "control_outcome",
    "control_report",
    "control_rows",
    "latest_complete_run",
]

#: Hotkey a validator submits its own control runs under; never rewarded, never blocking.
CONTROL_HOTKEY = "arena-ledger-controls"

AS_EXPECTED = "as_expected"
UNEXPECTED = "unexpected"
PENDING = "pending"
OUTCOMES = (AS_EXPECTED, UNEXPECTED, PENDING)


def control_outcome(control: ControlRegistered, submission: SubmissionState) -> str:
    """Returns how a control's submission turned out against its registered expectation."""
    if submission.status in (ARRIVED, QUEUED, QUALIFYING):
        return PENDING
    if submission.status in (REJECTED, EXPIRED) and submission.verdict is None:
        return UNEXPECTED
    if submission.verdict is None:
        return PENDING
    if submission.verdict != control.expected_verdict:
        return UNEXPECTED
    expected_reason = control.expected_reason
    if expected_reason is not None and submission.reason != expected_reason:
        return UNEXPECTED
    return AS_EXPECTED


@dataclass(frozen=True)
class ControlRow:
    """Is one line of the control report: a control and one of its submissions (or none)."""

    control_id: str
    kind: str
    delta_digest: str
    expected_verdict: str
    expected_reason: str | None
    submission_id: str | None
    verdict: str | None
    reason: str | None
    outcome: str
    #: The submission's arrival block and its latest attempt: which run the row is, since a
    #: control is run again at every block its validator picks (rows otherwise repeat).
    block: int | None = None
    attempt_id: str | None = None


def control_rows(arena: ArenaState, submissions: Iterable[SubmissionState]) -> list[ControlRow]:
    """Returns the control report of an arena, submissions in the order given.

    Controls come in registration order, each with a row per submission of its delta digest;
    controls registered with the same digest are each judged against every one of those
    submissions. A control with no submission yet gets one ``pending`` row without one.
    """
    return control_report(arena.controls, submissions)


def control_report(
    controls: Mapping[str, ControlRegistered], submissions: Iterable[SubmissionState]
) -> list[ControlRow]:
    """Is ``control_rows`` given the arena's controls in registration order (the read
    models keep those, not the arena's whole state)."""
    by_delta: dict[str, list[str]] = {}
    for control_id, registered in controls.items():
        by_delta.setdefault(registered.delta_digest, []).append(control_id)
    rows: dict[str, list[ControlRow]] = {cid: [] for cid in controls}
    for sub in submissions:
        for control_id in by_delta.get(sub.delta_digest, ()):
            control = controls[control_id]
            rows[control_id].append(
                ControlRow(
                    control_id, control.kind, control.delta_digest, control.expected_verdict,
                    control.expected_reason, sub.submission_id, sub.verdict, sub.reason,
                    control_outcome(control, sub), sub.arrival_block, sub.attempt_id,
                )
            )
    report: list[ControlRow] = []
    for control_id, found in rows.items():
        if not found:
            c = controls[control_id]
            found = [
                ControlRow(
                    control_id, c.kind, c.delta_digest, c.expected_verdict, c.expected_reason,
                    None, None, None, PENDING,
                )
            ]
        report.extend(found)
    return report


def _runs(rows: Iterable[ControlRow]) -> dict[int, list[ControlRow]]:
    runs: dict[int, list[ControlRow]] = {}
    for row in rows:
        if row.block is not None:
            runs.setdefault(row.block, []).append(row)
    return runs


def complete_runs(rows: Iterable[ControlRow]) -> list[tuple[int, tuple[str, ...]]]:
    """Returns every complete control run as (block, ids of its unexpected controls), by
    block: what the settlement-rules.v2 control gate reads of an arena's control report.

    Runs and completeness are as ``latest_complete_run`` has them; a control id is listed
    once however many of its rows came out unexpected.
    """
    found = []
    for block, run in sorted(_runs(rows).items()):
        if all(r.outcome != PENDING for r in run):
            unexpected = sorted({r.control_id for r in run if r.outcome == UNEXPECTED})
            found.append((block, tuple(unexpected)))
    return found


def latest_complete_run(rows: Iterable[ControlRow]) -> list[ControlRow]:
    """Returns the rows of the latest complete control run, or none when no run is complete.

    A run is the rows whose submissions arrived at one block (``run-controls`` submits every
    control at its ``--block``); it is complete when none of its rows is ``pending``. A run
    that was interrupted stays pending and never hides the last run that finished.
    """
    runs = _runs(rows)
    complete = [block for block, found in runs.items()
                if all(r.outcome != PENDING for r in found)]
    return runs[max(complete)] if complete else []

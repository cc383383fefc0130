"""Records arrivals and admissions in a Scenario one event at a time, without the fee event
that should come with them, for the fold suites that test what intake makes of such gaps.
"""

from __future__ import annotations

from machines import samples
from machines.scenario import Scenario
from vocabulary.events import (
    SubmissionAdmitted,
)

BILLION = 1_000_000_000
FEE = BILLION


def arrived_alone(sc: Scenario, **fields: object) -> str:
    """Records an arrival alone (no intake outcome yet); returns its submission id."""
    event = samples.arrived(**fields)  # type: ignore[arg-type]
    sc.append(f"submission-{event.submission_id}", event)
    return event.submission_id


def admitted_with_fee(kind: str, ref: str) -> SubmissionAdmitted:
    """Returns a SubmissionAdmitted at block 1,000 with a fee of ``FEE`` by ``kind`` and ``ref``."""
    fee = {"kind": kind, "ref": ref, "amount_rao": FEE}
    return SubmissionAdmitted.model_validate({"block": 1_000, "fee": fee})


def admitted_alone(sc: Scenario, kind: str, ref: str, **arrival: object) -> str:
    """Records an arrival and its admission, without the fee event that should come with it."""
    sid = arrived_alone(sc, **arrival)
    sc.append(f"submission-{sid}", admitted_with_fee(kind, ref))
    return sid

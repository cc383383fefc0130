"""Defines ``Refusal``: a machine's stable, data-shaped "no" to an event."""

from __future__ import annotations

from dataclasses import dataclass

from machines.reasons import REASONS

__all__ = ["ABSENT", "Refusal"]

#: The state name a refusal reports when the stream has no event yet.
ABSENT = "NONE"


@dataclass(frozen=True)
class Refusal:
    """Names the machine, its state, the refused event type and a stable reason code.

    ``code`` is one of the ``refusal`` codes of ``machines.reasons.REASONS`` (checked on
    construction, so an unlisted code is a programming error, not a silent new code).
    ``detail`` is free text for people; where a field differs it starts with the field name.
    """

    machine: str
    state: str
    event_type: str
    code: str
    detail: str = ""

    def __post_init__(self) -> None:
        entry = REASONS.get(self.code)
        if entry is None or entry.kind != "refusal":
            raise ValueError(f"{self.code!r} is not a refusal code in machines.reasons")

    def to_dict(self) -> dict[str, str]:
        """Returns the refusal as a JSON-ready object."""
        return {
            "machine": self.machine,
            "state": self.state,
            "event_type": self.event_type,
            "code": self.code,
            "detail": self.detail,
        }

    def __str__(self) -> str:
        """Returns one line for a person: machine, state, event, code and detail."""
        tail = f": {self.detail}" if self.detail else ""
        return f"{self.machine} in {self.state} refuses {self.event_type} ({self.code}){tail}"

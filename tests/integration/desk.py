"""Opens a Desk: a freshly migrated ledger with the writes the domain suites repeat.

The domain enforcement, input, process and concurrency suites, and the store guard's edge
cases, all write through ``ArenaLedger`` the same way; the Desk and its constants are that
shared way.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from ledger import migrate
from ledger.records import EventDraft
from machines import samples
from services.arena_ledger import ArenaLedger, IntakeOutcome
from vocabulary.errors import Refused
from vocabulary.events import (
    AttemptClaimed,
    Event,
)

ARENA = "mlp-arena"
FEE = 1_000_000_000
#: The worked example of docs/machines.md: (stock, candidate) costs of windows 1..3.
WORKED = ((1_000_000_000, 990_000_000), (1_000_000_000, 985_000_000),
          (1_000_000_000, 975_000_000))
#: Costs that make the candidate 2 % slower in every window.
SLOWER = ((1_000_000_000, 1_020_000_000),) * 4


def payload_of(event: Event) -> dict[str, Any]:
    """Returns an event's payload as it is appended (fields that were set, JSON types)."""
    return event.model_dump(mode="json", exclude_unset=True)


@dataclass
class Desk:
    """Wraps one ArenaLedger with the writes the tests repeat."""

    ledger: ArenaLedger

    @property
    def head(self) -> int:
        return self.ledger.store.head().position

    def version(self, stream: str) -> int:
        return self.ledger.store.stream_version(stream)

    def types(self, stream: str) -> list[str]:
        return [r.type for r in self.ledger.store.read_stream(stream)]

    def commission(self, arena_id: str = ARENA, **fields: Any) -> str:
        """Commissions an arena and returns its commission digest."""
        self.ledger.commission(payload_of(samples.commissioned(arena_id, **fields)))
        arena = self.ledger.fold.arena(arena_id)
        assert arena is not None
        return arena.commission_digest

    @staticmethod
    def arrival(arena_id: str = ARENA, **fields: Any) -> dict[str, Any]:
        """Returns SubmissionArrived's fields without submission_id (what intake takes)."""
        document = payload_of(samples.arrived(arena_id, **fields))
        document.pop("submission_id")
        return document

    def intake(self, paid: int | None = FEE, arena_id: str = ARENA,
               **fields: Any) -> IntakeOutcome:
        return self.ledger.intake(self.arrival(arena_id, **fields), payment_amount_rao=paid)

    def admitted(self, content: str, *, paid: int | None = FEE, arena_id: str = ARENA,
                 **fields: Any) -> str:
        """Intakes a submission paid with ``pay-<content>`` and returns its id (admitted)."""
        fields.setdefault("payment_ref", f"pay-{content}")
        outcome = self.intake(paid, arena_id, content=content, **fields)
        assert outcome.admitted, outcome
        return outcome.submission_id

    def claim(self, sid: str, attempt_id: str, *, block: int = 1_010,
              plan: str = "normal") -> AttemptClaimed:
        return self.ledger.claim(attempt_id=attempt_id, pair_id="pair-1",
                                 validator_hotkey="5Validator", block=block,
                                 submission_id=sid, plan=plan)

    def windows(self, attempt_id: str, costs: tuple[tuple[int, int], ...],
                first: int = 1) -> None:
        """Records windows ``first``.. with the orientation the policy (W = 4) prescribes."""
        for index, (stock, candidate) in enumerate(costs, start=first):
            self.ledger.record(attempt_id, samples.window(index, 1 if index <= 2 else 2,
                                                          stock, candidate))

    def passed_speed(self, content: str, attempt_id: str) -> str:
        """Admits, claims and measures the worked example (speed PASS at look 3)."""
        sid = self.admitted(content)
        self.claim(sid, attempt_id)
        self.windows(attempt_id, WORKED)
        return sid

    def refused(self, action: Callable[[], object], *, machine: str, state: str,
                event_type: str, reason: str) -> Refused:
        """Runs ``action``, expecting exactly this refusal and nothing written."""
        before = self.ledger.store.head()
        with pytest.raises(Refused) as caught:
            action()
        assert self.ledger.store.head() == before
        context = caught.value.context
        found = (context["machine"], context["state"], context["event_type"], context["reason"])
        assert found == (machine, state, event_type, reason), caught.value.message
        assert caught.value.code == "refused" and caught.value.exit_code == 1
        return caught.value

    def raw(self, *drafts: EventDraft) -> Callable[[], object]:
        """Returns an action appending raw drafts to the guarded store (like the CLI)."""
        return lambda: self.ledger.store.append(list(drafts), actor="test")

    def model(self, stream: str, event: Event) -> Callable[[], object]:
        """Returns an action appending one event model through ArenaLedger.append."""
        return lambda: self.ledger.append([(stream, event)])


def open_desk(store_url: str) -> Iterator[Desk]:
    """Yields a Desk on a freshly migrated ledger (the ``desk`` fixture of each module)."""
    migrate.upgrade(store_url)
    with ArenaLedger(store_url, actor="tester") as ledger:
        yield Desk(ledger)

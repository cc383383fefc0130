"""Folds an ``arena-<arena_id>`` stream: commissions, controls, incumbent and retirement.

States: ``ACTIVE`` (opened by ArenaCommissioned; re-commissioning, controls and incumbent
advances keep it there) and ``RETIRED`` (terminal: absorbs nothing). Every commission the
arena ever had stays in ``commissions`` by digest, because attempts stay bound to the
commission they were claimed under and are never regraded under another one.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from machines.arithmetic import PolicyParams, compile_policy, line_out_of_range
from machines.refusal import ABSENT, Refusal
from machines.table import Guard, Table, evolve
from vocabulary.codec import digest
from vocabulary.events import (
    ArenaCommissioned,
    ArenaRetired,
    ControlRegistered,
    Event,
    IncumbentAdvanced,
    Policy,
    PolicyV2,
)

__all__ = [
    "ACTIVE",
    "RETIRED",
    "STATES",
    "TABLE",
    "ArenaState",
    "Commission",
    "apply",
    "commission_digest",
    "decide",
    "fold",
    "policy_digest",
    "start",
    "step",
]

ACTIVE = "ACTIVE"
RETIRED = "RETIRED"
STATES = (ACTIVE, RETIRED)

#: The recorded payload of an ArenaCommissioned, when the caller has it (see commission_digest).
Payload = Mapping[str, Any] | None


def commission_digest(event: ArenaCommissioned, payload: Payload = None) -> str:
    """Returns digest(``arena-ledger.commission``, the payload as recorded).

    Pass the recorded payload when you have it. Without it the payload is rebuilt from the
    model with only the fields that were set (``exclude_unset``), which is the recorded
    payload whenever the model was validated from it, as the catalogue does on read.
    """
    document = payload if payload is not None else event.model_dump(mode="json", exclude_unset=True)
    return digest("arena-ledger.commission", document)


def policy_digest(policy: Policy | PolicyV2) -> str:
    """Returns digest(``arena-ledger.policy``, policy), omitting an empty control list.

    The policy is hashed in full (defaults spelled out), so two spellings of one sealed
    policy share a digest; an empty ``audit_control_delta_digests`` is left out so adding
    that feature did not change existing digests.
    """
    document = policy.model_dump(mode="json")
    if not document.get("audit_control_delta_digests"):
        document.pop("audit_control_delta_digests", None)
    return digest("arena-ledger.policy", document)


@dataclass(frozen=True)
class Commission:
    """Is one commission of an arena: its digests, compiled policy and the event."""

    digest: str
    policy_digest: str
    params: PolicyParams
    event: ArenaCommissioned

    @property
    def block(self) -> int:
        """Returns the block the arena was commissioned at."""
        return self.event.commissioned_block


@dataclass(frozen=True)
class ArenaState:
    """Is an arena's folded state: current commission, all commissions, controls, incumbent."""

    arena_id: str
    status: str
    commission: Commission
    commissions: Mapping[str, Commission]
    controls: Mapping[str, ControlRegistered]
    #: delta digest → the controls registered with it, in registration order (docs/machines.md:
    #: every control of a digest is judged against every submission of that digest).
    controls_by_delta: Mapping[str, tuple[str, ...]]
    incumbent_digest: str
    incumbent_block: int
    retired_block: int | None = None
    retired_reason: str | None = None

    @property
    def commission_digest(self) -> str:
        """Returns the digest of the current commission."""
        return self.commission.digest

    @property
    def params(self) -> PolicyParams:
        """Returns the current commission's compiled policy."""
        return self.commission.params

    @property
    def fee_rao(self) -> int:
        """Returns the current evaluation fee in rao."""
        return self.commission.event.fee_rao

    @property
    def retired(self) -> bool:
        """Tells whether the arena takes no new arrivals."""
        return self.status == RETIRED


def _commission(event: ArenaCommissioned, payload: Payload) -> Commission:
    return Commission(
        commission_digest(event, payload),
        policy_digest(event.policy),
        compile_policy(event.policy),
        event,
    )


def start(event: ArenaCommissioned, payload: Payload = None) -> ArenaState:
    """Opens an arena stream with its first commission."""
    commission = _commission(event, payload)
    return ArenaState(
        arena_id=event.arena_id,
        status=ACTIVE,
        commission=commission,
        commissions={commission.digest: commission},
        controls={},
        controls_by_delta={},
        incumbent_digest=event.incumbent_digest,
        incumbent_block=event.commissioned_block,
    )


def _policy_refusal(state: str, event: ArenaCommissioned) -> Refusal | None:
    """Refuses a sealed policy that later decisions or settlements would fail on: a negative
    reward_margin (settlement-rules.v1 reads it as a non-negative decimal), or a z whose
    pass line is beyond the decision arithmetic (``line_out_of_range``)."""
    policy = event.policy
    margin = policy.reward_margin
    if margin.startswith("-"):  # a DecimalStr is canonical: negative exactly when so spelt
        return TABLE.refuse(
            state, event.event_type, "reward_margin_negative", f"reward_margin: {margin}"
        )
    window = line_out_of_range(policy)
    if window is not None:
        return TABLE.refuse(
            state, event.event_type, "pass_line_out_of_range",
            f"z: window {window}'s critical value {policy.z[str(window)]} gives a pass line "
            "of 28 or more integer digits, which no decision can record",
        )
    return None


def _recommission(
    state: ArenaState, event: ArenaCommissioned, payload: Payload
) -> ArenaState | Refusal:
    if event.arena_id != state.arena_id:
        return TABLE.refuse(
            state.status, event.event_type, "arena_id_mismatch",
            f"arena_id: stream holds {state.arena_id!r}, event names {event.arena_id!r}",
        )
    refusal = _policy_refusal(state.status, event)
    if refusal is not None:
        return refusal
    commission = _commission(event, payload)
    return evolve(
        state,
        commission=commission,
        commissions={**state.commissions, commission.digest: commission},
        incumbent_digest=event.incumbent_digest,
        incumbent_block=event.commissioned_block,
    )


def _register(state: ArenaState, event: ControlRegistered, _: Payload) -> ArenaState | Refusal:
    if event.control_id in state.controls:
        return TABLE.refuse(
            state.status, event.event_type, "control_id_reused", f"control_id: {event.control_id}"
        )
    return evolve(
        state,
        controls={**state.controls, event.control_id: event},
        controls_by_delta={
            **state.controls_by_delta,
            event.delta_digest: (
                *state.controls_by_delta.get(event.delta_digest, ()), event.control_id
            ),
        },
    )


def _advance(state: ArenaState, event: IncumbentAdvanced, target: str) -> ArenaState:
    return evolve(
        state,
        status=target,
        incumbent_digest=event.incumbent_digest,
        incumbent_block=event.block,
    )


def _retire(state: ArenaState, event: ArenaRetired, target: str) -> ArenaState:
    return evolve(state, status=target, retired_block=event.block, retired_reason=event.reason)


#: The arena machine (ACTIVE → RETIRED); guards get the recorded payload as context.
TABLE: Table[ArenaState, Payload] = Table(
    machine="arena",
    states=STATES,
    initial=ACTIVE,
    opening="ArenaCommissioned",
    terminals=frozenset({RETIRED}),
    rules={
        (ACTIVE, "ArenaCommissioned"): Guard((ACTIVE,), _recommission, "same arena_id"),
        (ACTIVE, "ControlRegistered"): Guard((ACTIVE,), _register, "new control_id"),
        (ACTIVE, "IncumbentAdvanced"): ACTIVE,
        (ACTIVE, "ArenaRetired"): RETIRED,
    },
    effects={"IncumbentAdvanced": _advance, "ArenaRetired": _retire},
)


def step(state: ArenaState | None, event: Event, payload: Payload = None) -> ArenaState | Refusal:
    """Returns the arena after ``event``, or the refusal of it."""
    if state is None:
        if isinstance(event, ArenaCommissioned):
            return _policy_refusal(ABSENT, event) or start(event, payload)
        return TABLE.refuse(ABSENT, event.event_type, "stream_not_started")
    return TABLE.step(state, event, payload)


def decide(state: ArenaState | None, event: Event, payload: Payload = None) -> Refusal | None:
    """Returns the refusal of ``event`` in ``state``, or None when it may be appended."""
    result = step(state, event, payload)
    return result if isinstance(result, Refusal) else None


def apply(state: ArenaState | None, event: Event, payload: Payload = None) -> ArenaState | None:
    """Returns the arena after ``event``; a refused event leaves it unchanged."""
    result = step(state, event, payload)
    return state if isinstance(result, Refusal) else result


def fold(events: Iterable[Event]) -> ArenaState | None:
    """Folds a whole arena stream from nothing."""
    state: ArenaState | None = None
    for event in events:
        state = apply(state, event)
    return state

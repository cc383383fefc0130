"""Folds a ``submission-<submission_id>`` stream through the Submission machine (docs/machines.md).

``ARRIVED`` → ``QUEUED`` (admitted) or ``REJECTED``; ``QUEUED`` → ``QUALIFYING``; on
SubmissionResolved: PASS → ``QUALIFIED``, FAIL → ``FAILED``, NO_DECISION by disposition:
COMPLETE → ``NO_DECISION`` (parked), REQUEUE → ``QUEUED``, HOLD → ``HELD``. Any non-terminal
state → ``HELD`` (SubmissionHeld) → released (HoldReleased); ``NO_DECISION`` → ``QUEUED``
(SubmissionRequeued); any non-terminal → ``EXPIRED`` once the block is ``sla_blocks`` past
arrival. Terminal: REJECTED, QUALIFIED, FAILED, EXPIRED.

Decisions this module takes beyond the transition table (documented in docs/machines.md):

- Retry budget: a NO_DECISION with disposition REQUEUE normally re-queues. The submission
  may be re-queued that way ``requeues_max`` (3) times; the 4th such resolution moves it to
  ``HELD`` with hold reason ``retry_budget_exhausted`` — the fold decides this from the
  SubmissionResolved alone; no SubmissionHeld is appended (one would be refused
  ``already_held``). An operator's HoldReleased grants one more attempt; the budget stays
  spent, so the next REQUEUE resolution holds again.
- HoldReleased returns to ``QUEUED``, except for a submission held before it was ever
  admitted: it returns to ``ARRIVED`` so intake (and its fee) still applies.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass
from typing import NamedTuple

from machines.arithmetic import Decision
from machines.limits import requeues_max
from machines.refusal import ABSENT, Refusal
from machines.table import Guard, Table, build, evolve
from vocabulary.codec import digest
from vocabulary.events import (
    Event,
    HoldReleased,
    QualificationStarted,
    SubmissionAdmitted,
    SubmissionArrived,
    SubmissionExpired,
    SubmissionHeld,
    SubmissionRejected,
    SubmissionRequeued,
    SubmissionResolved,
)
from vocabulary.limits import json_integer_abs_max

__all__ = [
    "ARRIVED",
    "EXPIRED",
    "FAILED",
    "HELD",
    "LIVE",
    "NO_DECISION",
    "QUALIFIED",
    "QUALIFYING",
    "QUEUED",
    "REJECTED",
    "STATES",
    "TABLE",
    "TERMINALS",
    "ArrivalKey",
    "Fee",
    "SubmissionContext",
    "SubmissionState",
    "apply",
    "arrival_key",
    "decide",
    "fold",
    "sla_blocks_default",
    "sla_due",
    "start",
    "step",
    "submission_id_of",
]

ARRIVED = "ARRIVED"
QUEUED = "QUEUED"
QUALIFYING = "QUALIFYING"
QUALIFIED = "QUALIFIED"
FAILED = "FAILED"
NO_DECISION = "NO_DECISION"
HELD = "HELD"
REJECTED = "REJECTED"
EXPIRED = "EXPIRED"
STATES = (ARRIVED, QUEUED, QUALIFYING, QUALIFIED, FAILED, NO_DECISION, HELD, REJECTED, EXPIRED)
TERMINALS = frozenset({REJECTED, QUALIFIED, FAILED, EXPIRED})
#: Non-terminal states, in table order.
LIVE = tuple(s for s in STATES if s not in TERMINALS)

#: SLA in blocks when the policy names none (the default of policy.sla_blocks).
sla_blocks_default = 500_000

#: Queue order: (block, event_index, event_subindex, miner_hotkey, content_hash).
ArrivalKey = tuple[int, int, int, str, str]


def arrival_key(event: SubmissionArrived) -> ArrivalKey:
    """Returns the arrival key that orders the queue and breaks every tie."""
    # The fields through ``__dict__``: pydantic models define ``__getattr__``, which puts
    # every attribute read on CPython's slow path, and the fold reads these per arrival.
    fields = event.__dict__
    arrival = fields["arrival"].__dict__
    return (
        arrival["block"],
        arrival["event_index"],
        arrival["event_subindex"],
        fields["miner_hotkey"],
        fields["content_hash"],
    )


def submission_id_of(event: SubmissionArrived) -> str:
    """Returns digest(``arena-ledger.arrival``, the arrival fields) (docs/concepts.md).

    The fold computes this for every arrival. When every text is printable ASCII without
    a quote or backslash and every number a JSON-safe integer (any real arrival), the
    canonical JSON is spelled directly: ``vocabulary.codec`` would write exactly these bytes
    (keys sorted, no whitespace, nothing escaped). Anything else takes ``digest`` itself.
    """
    block, index, subindex, hotkey, content = arrival_key(event)
    arena_id = event.arena_id
    if (
        type(arena_id) is str
        and type(hotkey) is str
        and type(content) is str
        and type(block) is int
        and type(index) is int
        and type(subindex) is int
        and 0 <= block <= json_integer_abs_max
        and 0 <= index <= json_integer_abs_max
        and 0 <= subindex <= json_integer_abs_max
        and _plain_text(arena_id + hotkey + content)
    ):
        document = (
            f'{{"domain":"{_ARRIVAL_DOMAIN}","payload":{{"arena_id":"{arena_id}",'
            f'"block":{block},"content_hash":"{content}","event_index":{index},'
            f'"event_subindex":{subindex},"miner_hotkey":"{hotkey}"}}}}'
        )
        return hashlib.sha256(document.encode("ascii")).hexdigest()
    arrival = event.arrival
    payload = {
        "arena_id": event.arena_id,
        "block": arrival.block,
        "event_index": arrival.event_index,
        "event_subindex": arrival.event_subindex,
        "miner_hotkey": event.miner_hotkey,
        "content_hash": event.content_hash,
    }
    return digest(_ARRIVAL_DOMAIN, payload)


_ARRIVAL_DOMAIN = "arena-ledger.arrival"


def _plain_text(text: str) -> bool:
    """Tells whether canonical JSON writes ``text`` as is between quotes (no escapes)."""
    return text.isascii() and text.isprintable() and '"' not in text and "\\" not in text


#: ``tuple.__new__(Cls, values)`` builds a named tuple without its Python-level ``__new__``.
_new_tuple = tuple.__new__


class Fee(NamedTuple):
    """Is the fee an admission recorded: kind (payment, credit, waived), ref and amount."""

    kind: str
    ref: str
    amount_rao: int


@dataclass(frozen=True)
class SubmissionState:
    """Is a submission's folded state: identity, status and what later rules need."""

    submission_id: str
    arena_id: str
    hotkey: str
    content_hash: str
    delta_digest: str
    target: str
    arrival_key: ArrivalKey
    payment_ref: str | None
    status: str = ARRIVED
    fee: Fee | None = None
    rejection: str | None = None
    attempts: int = 0
    attempt_id: str | None = None
    requeues: int = 0
    verdict: str | None = None
    reason: str | None = None
    disposition: str | None = None
    hold_reason: str | None = None
    expired_block: int | None = None

    @property
    def arrival_block(self) -> int:
        """Returns the chain block the submission arrived in."""
        return self.arrival_key[0]

    @property
    def terminal(self) -> bool:
        """Tells whether the submission is in a terminal state."""
        return self.status in TERMINALS


class SubmissionContext(NamedTuple):
    """Carries what the submission machine checks beyond its own stream.

    ``sla_blocks`` comes from the arena's current policy. When ``check_resolution`` is set,
    a SubmissionResolved must equal ``attempt_decision`` (the attempt's recorded
    AttemptDecided; None when the attempt is not decided yet). A named tuple: the fold
    builds one per resolution, and a frozen dataclass's ``__init__`` costs several times as
    much.
    """

    sla_blocks: int = sla_blocks_default
    check_resolution: bool = False
    attempt_decision: Decision | None = None


_DEFAULT = SubmissionContext()


def sla_due(state: SubmissionState, block: int, sla_blocks: int = sla_blocks_default) -> bool:
    """Tells whether a live submission may expire at finalized ``block``."""
    return not state.terminal and block - state.arrival_block >= sla_blocks


def start(event: SubmissionArrived) -> SubmissionState:
    """Opens a submission stream in ``ARRIVED``."""
    fields = event.__dict__  # pydantic's __getattr__ makes attribute reads slow
    return build(
        SubmissionState,
        submission_id=fields["submission_id"],
        arena_id=fields["arena_id"],
        hotkey=fields["miner_hotkey"],
        content_hash=fields["content_hash"],
        delta_digest=fields["delta_digest"],
        target=fields["target"],
        arrival_key=arrival_key(event),
        payment_ref=fields["payment_ref"],
    )


def _admit(state: SubmissionState, event: SubmissionAdmitted, target: str) -> SubmissionState:
    fee = event.fee.__dict__  # pydantic's __getattr__ makes attribute reads slow
    # Fee(kind, ref, amount_rao) without its Python-level __new__ (once per admission).
    recorded = _new_tuple(Fee, (fee["kind"], fee["ref"], fee["amount_rao"]))
    return evolve(state, status=target, fee=recorded)


def _reject(state: SubmissionState, event: SubmissionRejected, target: str) -> SubmissionState:
    return evolve(state, status=target, rejection=event.reason)


def _start_attempt(
    state: SubmissionState, event: QualificationStarted, target: str
) -> SubmissionState:
    return evolve(state, status=target, attempts=state.attempts + 1, attempt_id=event.attempt_id)


def _hold(state: SubmissionState, event: SubmissionHeld, target: str) -> SubmissionState:
    return evolve(state, status=target, hold_reason=event.reason)


def _requeue(state: SubmissionState, _: SubmissionRequeued, target: str) -> SubmissionState:
    return evolve(state, status=target)


def _resolution_refusal(
    state: SubmissionState, event: SubmissionResolved, context: SubmissionContext
) -> Refusal | None:
    fields = event.__dict__  # pydantic's __getattr__ makes attribute reads slow
    verdict, disposition = fields["verdict"], fields["disposition"]
    if fields["attempt_id"] != state.attempt_id:
        return TABLE.refuse(
            state.status, event.event_type, "attempt_mismatch",
            f"attempt_id: current is {state.attempt_id!r}, event names {event.attempt_id!r}",
        )
    if verdict != "NO_DECISION" and disposition != "COMPLETE":
        return TABLE.refuse(
            state.status, event.event_type, "disposition_invalid",
            f"disposition: {verdict} is always COMPLETE, event has {disposition}",
        )
    if not context.check_resolution:
        return None
    decided = context.attempt_decision
    if decided is None:
        return TABLE.refuse(state.status, event.event_type, "attempt_not_decided", event.attempt_id)
    if decided[:3] == (verdict, fields["reason"], disposition):  # verdict, reason, disposition
        return None
    for name in ("verdict", "reason", "disposition"):
        if getattr(decided, name) != getattr(event, name):
            return TABLE.refuse(
                state.status, event.event_type, "resolution_mismatch",
                f"{name}: attempt decided {getattr(decided, name)!r}, "
                f"event has {getattr(event, name)!r}",
            )
    return None


def _resolve(
    state: SubmissionState, event: SubmissionResolved, context: SubmissionContext
) -> SubmissionState | Refusal:
    refusal = _resolution_refusal(state, event, context)
    if refusal is not None:
        return refusal
    requeues, hold_reason = state.requeues, state.hold_reason
    fields = event.__dict__  # pydantic's __getattr__ makes attribute reads slow
    verdict, reason, disposition = fields["verdict"], fields["reason"], fields["disposition"]
    if verdict == "PASS":
        target = QUALIFIED
    elif verdict == "FAIL":
        target = FAILED
    elif disposition == "COMPLETE":
        target = NO_DECISION
    elif disposition == "HOLD":
        target, hold_reason = HELD, reason
    elif requeues < requeues_max:
        target, requeues = QUEUED, requeues + 1
    else:
        target, hold_reason = HELD, "retry_budget_exhausted"
    return evolve(
        state,
        status=target,
        verdict=verdict,
        reason=reason,
        disposition=disposition,
        requeues=requeues,
        hold_reason=hold_reason,
    )


def _release(state: SubmissionState, _: HoldReleased, __: SubmissionContext) -> SubmissionState:
    return evolve(state, status=ARRIVED if state.fee is None else QUEUED, hold_reason=None)


def _expire(
    state: SubmissionState, event: SubmissionExpired, context: SubmissionContext
) -> SubmissionState | Refusal:
    age = event.block - state.arrival_block
    if age < context.sla_blocks:
        return TABLE.refuse(
            state.status, event.event_type, "sla_not_reached",
            f"block: {age} blocks past arrival, sla_blocks is {context.sla_blocks}",
        )
    return evolve(state, status=EXPIRED, expired_block=event.block)


_RESOLVE = Guard((QUALIFIED, FAILED, NO_DECISION, QUEUED, HELD), _resolve, "verdict, disposition")
_RELEASE = Guard((QUEUED, ARRIVED), _release, "admitted?")
_EXPIRE = Guard((EXPIRED,), _expire, "age in blocks ≥ sla_blocks")

#: The Submission machine (docs/machines.md).
TABLE: Table[SubmissionState, SubmissionContext] = Table(
    machine="submission",
    states=STATES,
    initial=ARRIVED,
    opening="SubmissionArrived",
    terminals=TERMINALS,
    rules={
        (ARRIVED, "SubmissionAdmitted"): QUEUED,
        (ARRIVED, "SubmissionRejected"): REJECTED,
        (QUEUED, "QualificationStarted"): QUALIFYING,
        (QUALIFYING, "SubmissionResolved"): _RESOLVE,
        **{(s, "SubmissionHeld"): HELD for s in LIVE if s != HELD},
        (HELD, "HoldReleased"): _RELEASE,
        (NO_DECISION, "SubmissionRequeued"): QUEUED,
        **{(s, "SubmissionExpired"): _EXPIRE for s in LIVE},
    },
    effects={
        "SubmissionAdmitted": _admit,
        "SubmissionRejected": _reject,
        "QualificationStarted": _start_attempt,
        "SubmissionHeld": _hold,
        "SubmissionRequeued": _requeue,
    },
    refusals={(HELD, "SubmissionHeld"): "already_held"},
)


def step(
    state: SubmissionState | None, event: Event, context: SubmissionContext | None = None
) -> SubmissionState | Refusal:
    """Returns the submission after ``event``, or the refusal of it."""
    if state is None:
        if isinstance(event, SubmissionArrived):
            return start(event)
        return TABLE.refuse(ABSENT, event.event_type, "stream_not_started")
    if isinstance(event, SubmissionArrived):
        return TABLE.refuse(state.status, event.event_type, "stream_already_started")
    return TABLE.step(state, event, _DEFAULT if context is None else context)


def decide(
    state: SubmissionState | None, event: Event, context: SubmissionContext | None = None
) -> Refusal | None:
    """Returns the refusal of ``event`` in ``state``, or None when it may be appended."""
    result = step(state, event, context)
    return result if isinstance(result, Refusal) else None


def apply(
    state: SubmissionState | None, event: Event, context: SubmissionContext | None = None
) -> SubmissionState | None:
    """Returns the submission after ``event``; a refused event leaves it unchanged."""
    result = step(state, event, context)
    return state if isinstance(result, Refusal) else result


def fold(
    events: Iterable[Event], context: SubmissionContext | None = None
) -> SubmissionState | None:
    """Folds a whole submission stream from nothing."""
    state: SubmissionState | None = None
    for event in events:
        state = apply(state, event, context)
    return state

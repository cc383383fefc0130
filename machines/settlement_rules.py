"""Computes `settlement-rules.v1` and `.v2` settlements (docs/settlement.md) from plain inputs.

The module is pure: it reads no clock, store or randomness, uses integers for money, blocks
and weights, and ``decimal.Decimal`` in one fixed context (precision 34, ROUND_HALF_EVEN)
for speedups. A projection of the ledger as of a position fills the input dataclasses;
:func:`compute_settlement` turns them into claims, a weight vector that sums to exactly
1,000,000 ppm, a fee summary and the ``settlement_digest``; :func:`settlement_payload`
renders the ``SettlementComputed`` payload that replay recomputes and compares field by
field. docs/settlement.md states the rules with a worked example.

Choices this module makes where the rules leave a mechanism open (also in docs/settlement.md):

- A submission's reward group is (arena, the arena's incumbent_digest current at its
  arrival). The group is fixed when the submission enters the queue, so it never depends
  on when evaluation finished.
- Blocking is arena-wide and by arrival key: an ARRIVED, QUEUED, QUALIFYING or HELD
  submission blocks every later PASS of its arena, whatever their group. A pending PASS
  therefore makes every later PASS of its arena pending too (whatever blocks it arrived
  earlier than they did), so assessed PASSes always form a prefix of the arrival order.
- A credit is never negative (a PASS whose speedup_ppm is below 1,000,000 earns 0), and a
  settlement block before a claim's arrival block is refused.
- Weights of zero are left out of ``weights_ppm``.

``settlement-rules.v2`` is v1 plus a control gate, selected by the emission policy: an arena
whose latest complete control run at or before the settlement block found an unexpected
outcome, or that has no complete run within ``control_max_age_blocks`` blocks before it, is
suspended, and its pool goes to the burn hotkey. v1 settlements are computed, hashed and
rendered exactly as before.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from decimal import (
    ROUND_FLOOR,
    ROUND_HALF_EVEN,
    Context,
    Decimal,
    DivisionByZero,
    InvalidOperation,
    Overflow,
)
from operator import itemgetter
from typing import Any, Final, Literal

from machines.reasons import CONTROL_UNEXPECTED, CONTROLS_STALE
from vocabulary.codec import (
    canonical_bytes,
    canonical_decimal,
    digest,
    is_canonical_decimal,
    is_fixed6,
)
from vocabulary.errors import InvalidInput
from vocabulary.events import EmissionPolicySet
from vocabulary.fields import is_arena_id, is_digest, is_hotkey, is_local_id
from vocabulary.limits import json_integer_abs_max

_new_object = object.__new__
_set_attribute = object.__setattr__

__all__ = [
    "BLOCKING_STATUSES",
    "RULES_VERSION",
    "RULES_VERSIONS",
    "RULES_VERSION_V2",
    "SETTLEMENT_DOMAIN",
    "SUBMISSION_STATUSES",
    "TERMINAL_STATUSES",
    "ArenaFees",
    "ArenaInput",
    "Claim",
    "ControlRun",
    "CreditRecord",
    "EmissionPolicy",
    "FeeRecords",
    "FeeSummary",
    "PaymentRecord",
    "RewardAssessment",
    "RewardScan",
    "RewardStatus",
    "Settlement",
    "SettlementInput",
    "SubmissionInput",
    "SubmissionRow",
    "Suspension",
    "assess_rewarded_rows",
    "assess_rewards",
    "build_claims",
    "check_settlement_digest",
    "claim_credit",
    "compute_settlement",
    "compute_weights",
    "control_suspension",
    "control_suspensions",
    "describe_suspension",
    "diff_settlement_payload",
    "explain_rewards",
    "fee_summary",
    "judge_passes",
    "largest_remainder",
    "settle_assessed",
    "settlement_digest",
    "settlement_document",
    "settlement_payload",
    "speedup_scale_ppm",
    "speedup_to_ppm",
    "summarize_fees",
    "weights_total_ppm",
]

#: Rules version hashed into every settlement digest (of a policy that names no other).
RULES_VERSION: Final = "settlement-rules.v1"
#: v1 plus the control gate: suspended arenas' pools burn (docs/settlement.md).
RULES_VERSION_V2: Final = "settlement-rules.v2"
#: Every rules version an emission policy may name, oldest first.
RULES_VERSIONS: Final = (RULES_VERSION, RULES_VERSION_V2)
#: Digest domain of the settlement document (docs/settlement.md).
SETTLEMENT_DOMAIN: Final = "arena-ledger.settlement"
#: The weight vector always sums to this many parts per million.
weights_total_ppm: Final = 1_000_000
#: One whole speedup expressed in ppm (speedup_ppm = floor(S * speedup_scale_ppm)).
speedup_scale_ppm: Final = 1_000_000

#: Submission states (docs/machines.md), spelled as the submission machine names them.
SUBMISSION_STATUSES: Final = (
    "ARRIVED",
    "QUEUED",
    "QUALIFYING",
    "QUALIFIED",
    "FAILED",
    "NO_DECISION",
    "HELD",
    "REJECTED",
    "EXPIRED",
)
#: States that absorb nothing (docs/machines.md).
TERMINAL_STATUSES: Final = ("REJECTED", "QUALIFIED", "FAILED", "EXPIRED")
#: States of an earlier arrival that keep a later PASS from being assessed (docs/settlement.md).
#: A completed NO_DECISION is parked, not blocking; everything else here may still PASS.
BLOCKING_STATUSES: Final = ("ARRIVED", "QUEUED", "QUALIFYING", "HELD")
_VERDICTS: Final = ("PASS", "FAIL", "NO_DECISION")

RewardStatus = Literal["rewarded", "lost_potential", "pending"]

# Every speedup comparison runs in this one context; traps turn a bad value into an error
# instead of a silent NaN, so every platform reproduces every digit or fails loudly.
_DECIMAL: Final = Context(
    prec=34, rounding=ROUND_HALF_EVEN, traps=[InvalidOperation, DivisionByZero, Overflow]
)


# --- input checks ---------------------------------------------------------------------------


def _refuse(message: str, reason: str, **context: Any) -> InvalidInput:
    return InvalidInput(message, reason=reason, **context)


def _check_int(
    value: object, name: str, low: int = 0, high: int = json_integer_abs_max
) -> None:
    if type(value) is not int or not low <= value <= high:
        raise _refuse(
            f"{name} must be an integer in [{low}, {high}], got {value!r}",
            "settlement_input_invalid",
            field=name,
        )


def _check_text(value: object, name: str, valid: bool, kind: str) -> None:
    if not isinstance(value, str) or not valid:
        raise _refuse(
            f"{name} must be {kind}, got {value!r}", "settlement_input_invalid", field=name
        )


def _parse_decimal(text: object, name: str) -> Decimal:
    """Parses a non-negative decimal written canonically or in the fixed 6-place form."""
    if not _is_decimal_text(text):
        raise _refuse(
            f"{name} must be a non-negative decimal string such as '1.019129', got {text!r}",
            "settlement_input_invalid",
            field=name,
        )
    return Decimal(str(text))


def _is_decimal_text(text: object) -> bool:
    """Tells whether ``_parse_decimal`` accepts ``text`` (without building the Decimal)."""
    return (
        isinstance(text, str)
        and (is_canonical_decimal(text) or is_fixed6(text))
        and not text.startswith("-")
    )


def _first_duplicate(keys: Iterable[str]) -> str | None:
    seen: set[str] = set()
    for key in keys:
        if key in seen:
            return key
        seen.add(key)
    return None


def _as_tuple(owner: object, name: str) -> None:
    # Frozen dataclasses forbid plain assignment; converting once here lets a projection
    # pass lists while the stored value stays immutable and hashable.
    object.__setattr__(owner, name, tuple(getattr(owner, name)))


# --- inputs ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class SubmissionInput:
    """Describes one submission of an arena as the ledger stands at the settlement position.

    ``block``, ``event_index``, ``event_subindex``, ``hotkey`` and ``content_hash`` are the
    arrival key (docs/concepts.md). ``status`` is the submission machine's state name.
    ``verdict`` is the latest SubmissionResolved verdict (None before any); ``speedup`` is the
    recorded speedup of the deciding look of a PASS (e.g. "1.019129"). ``incumbent_digest``
    is the arena's incumbent at the submission's arrival, which names its reward group.
    """

    submission_id: str
    hotkey: str
    content_hash: str
    block: int
    event_index: int
    event_subindex: int
    status: str
    incumbent_digest: str
    verdict: str | None = None
    speedup: str | None = None

    def __post_init__(self) -> None:
        _check_text(self.submission_id, "submission_id", is_digest(self.submission_id), "a digest")
        _check_text(self.hotkey, "hotkey", is_hotkey(self.hotkey), "a hotkey")
        _check_text(self.content_hash, "content_hash", is_digest(self.content_hash), "a digest")
        digest_ok = is_digest(self.incumbent_digest)
        _check_text(self.incumbent_digest, "incumbent_digest", digest_ok, "a digest")
        for name in ("block", "event_index", "event_subindex"):
            _check_int(getattr(self, name), name)
        if self.status not in SUBMISSION_STATUSES:
            raise _refuse(
                f"status {self.status!r} of {self.submission_id} is not one of "
                f"{', '.join(SUBMISSION_STATUSES)}",
                "settlement_input_invalid",
                field="status",
            )
        self._check_outcome()

    def _check_outcome(self) -> None:
        if self.verdict is not None and self.verdict not in _VERDICTS:
            raise _refuse(
                f"verdict {self.verdict!r} of {self.submission_id} is not PASS, FAIL or "
                "NO_DECISION",
                "settlement_input_invalid",
                field="verdict",
            )
        if (self.status == "QUALIFIED") != (self.verdict == "PASS"):
            raise _refuse(
                f"submission {self.submission_id} is {self.status} with verdict "
                f"{self.verdict}: a PASS is exactly a QUALIFIED submission",
                "settlement_input_invalid",
                field="verdict",
            )
        if self.status == "QUALIFIED":
            _parse_decimal(self.speedup, "speedup")

    @classmethod
    def folded(
        cls,
        submission_id: str,
        hotkey: str,
        content_hash: str,
        arrival: tuple[int, int, int],
        status: str,
        incumbent_digest: str,
        verdict: str | None,
        speedup: str | None,
    ) -> SubmissionInput:
        """Returns the input of a submission as a ledger fold holds it, checking only what
        the fold cannot vouch for.

        The ids, hotkey, digests and arrival numbers come from the fold's states, and each
        was checked when its event was, by an event schema that spells it as
        ``__post_init__`` checks it (a digest, a hotkey, an integer in [0, 2**53 - 1]).
        What depends on how the caller combined them is checked here: the status, the
        verdict, PASS exactly for QUALIFIED, and a QUALIFIED one's speedup. When any of
        those fails, the checked constructor builds (and refuses) the input, so the error
        is the one it always was. Settlement builds one input per changed submission per
        check, and ``__post_init__`` was most of what building an input cost.
        """
        qualified = status == "QUALIFIED"
        if (
            status not in SUBMISSION_STATUSES
            or (verdict is not None and verdict not in _VERDICTS)
            or qualified != (verdict == "PASS")
            or (qualified and not _is_decimal_text(speedup))
        ):
            return cls(
                submission_id, hotkey, content_hash, *arrival, status, incumbent_digest,
                verdict, speedup,
            )
        block, event_index, event_subindex = arrival
        # machines.table.build makes frozen dataclasses the same way, but checks the field
        # names on every call; here the names are fixed, so the check is left out.
        made: SubmissionInput = _new_object(cls)
        _set_attribute(made, "__dict__", {
            "submission_id": submission_id,
            "hotkey": hotkey,
            "content_hash": content_hash,
            "block": block,
            "event_index": event_index,
            "event_subindex": event_subindex,
            "status": status,
            "incumbent_digest": incumbent_digest,
            "verdict": verdict,
            "speedup": speedup,
        })
        return made

    @property
    def arrival_key(self) -> tuple[int, int, int, str, str]:
        """Returns the arrival key (block, event_index, event_subindex, hotkey, hash)."""
        return (self.block, self.event_index, self.event_subindex, self.hotkey, self.content_hash)

    @property
    def is_pass(self) -> bool:
        """Tells whether the submission qualified with a PASS."""
        return self.status == "QUALIFIED"


@dataclass(frozen=True)
class ArenaInput:
    """Describes one arena: its emission share, its reward margin and its submissions.

    ``reward_margin`` is the sealed policy's decimal string (e.g. "0.015"). Submissions may
    come in any order; they are assessed in arrival-key order.
    """

    arena_id: str
    emission_share_ppm: int
    reward_margin: str
    submissions: Sequence[SubmissionInput] = ()

    def __post_init__(self) -> None:
        _check_text(self.arena_id, "arena_id", is_arena_id(self.arena_id), "an arena slug")
        _check_int(self.emission_share_ppm, "emission_share_ppm", 0, weights_total_ppm)
        _parse_decimal(self.reward_margin, "reward_margin")
        _as_tuple(self, "submissions")
        for sub in self.submissions:
            if not isinstance(sub, SubmissionInput):
                raise _refuse(
                    f"arena {self.arena_id} lists {sub!r}, not a SubmissionInput",
                    "settlement_input_invalid",
                    field="submissions",
                )
        dup = _first_duplicate(s.submission_id for s in self.submissions)
        if dup is not None:
            raise _refuse(
                f"submission {dup} appears twice in arena {self.arena_id}",
                "duplicate_submission",
                submission_id=dup,
            )


@dataclass(frozen=True)
class EmissionPolicy:
    """Holds the emission policy in force: half-life in blocks, the burn hotkey, and the
    rules version with its control gate's maximum age.

    ``validator_hotkey`` names the validator the policy was set for; neither rules version
    gives it weight. ``control_max_age_blocks`` is set exactly under settlement-rules.v2.
    """

    half_life_blocks: int
    burn_hotkey: str
    validator_hotkey: str
    rules_version: str = RULES_VERSION
    control_max_age_blocks: int | None = None

    def __post_init__(self) -> None:
        _check_int(self.half_life_blocks, "half_life_blocks", 1)
        _check_text(self.burn_hotkey, "burn_hotkey", is_hotkey(self.burn_hotkey), "a hotkey")
        valid = is_hotkey(self.validator_hotkey)
        _check_text(self.validator_hotkey, "validator_hotkey", valid, "a hotkey")
        if self.rules_version not in RULES_VERSIONS:
            raise _refuse(
                f"rules_version must be one of {', '.join(RULES_VERSIONS)}, got "
                f"{self.rules_version!r}",
                "settlement_input_invalid",
                field="rules_version",
            )
        if self.gated:
            _check_int(self.control_max_age_blocks, "control_max_age_blocks", 1)
        elif self.control_max_age_blocks is not None:
            raise _refuse(
                f"control_max_age_blocks is a {RULES_VERSION_V2} setting; "
                f"{self.rules_version} has no control gate",
                "settlement_input_invalid",
                field="control_max_age_blocks",
            )

    @property
    def gated(self) -> bool:
        """Tells whether the rules gate arenas on their controls (settlement-rules.v2)."""
        return self.rules_version == RULES_VERSION_V2

    @classmethod
    def from_event(cls, event: EmissionPolicySet) -> EmissionPolicy:
        """Builds the policy from the latest EmissionPolicySet event."""
        return cls(
            event.half_life_blocks,
            event.burn_hotkey,
            event.validator_hotkey,
            event.rules_version,
            event.control_max_age_blocks,
        )


@dataclass(frozen=True)
class ControlRun:
    """Describes one complete control run of an arena (no control pending): the block its
    submissions arrived at, and the ids of the controls whose outcome was unexpected."""

    block: int
    unexpected: Sequence[str] = ()

    def __post_init__(self) -> None:
        _check_int(self.block, "block")
        _as_tuple(self, "unexpected")
        for control_id in self.unexpected:
            ok = is_local_id(control_id)
            _check_text(control_id, "unexpected", ok, "a control id")


@dataclass(frozen=True)
class PaymentRecord:
    """Describes one consumed payment; ``released`` is True once PaymentReleased refunded it."""

    arena_id: str
    payment_ref: str
    amount_rao: int
    released: bool = False

    def __post_init__(self) -> None:
        _check_text(self.arena_id, "arena_id", is_arena_id(self.arena_id), "an arena slug")
        ref_ok = is_local_id(self.payment_ref)
        _check_text(self.payment_ref, "payment_ref", ref_ok, "a local id")
        _check_int(self.amount_rao, "amount_rao")
        if type(self.released) is not bool:
            raise _refuse("released must be a bool", "settlement_input_invalid", field="released")


@dataclass(frozen=True)
class CreditRecord:
    """Describes one spent credit: the arena of the submission it paid and its amount."""

    arena_id: str
    credit_id: str
    amount_rao: int

    def __post_init__(self) -> None:
        _check_text(self.arena_id, "arena_id", is_arena_id(self.arena_id), "an arena slug")
        _check_text(self.credit_id, "credit_id", is_local_id(self.credit_id), "a local id")
        _check_int(self.amount_rao, "amount_rao")


@dataclass(frozen=True)
class FeeRecords:
    """Holds every consumed payment and every spent credit as of the settlement position."""

    payments: Sequence[PaymentRecord] = ()
    credits: Sequence[CreditRecord] = ()

    def __post_init__(self) -> None:
        _as_tuple(self, "payments")
        _as_tuple(self, "credits")
        refs = (p.payment_ref for p in self.payments)
        ids = (c.credit_id for c in self.credits)
        for kind, keys in (("payment_ref", refs), ("credit_id", ids)):
            dup = _first_duplicate(keys)
            if dup is not None:
                raise _refuse(
                    f"{kind} {dup} is recorded twice; a payment or credit pays once",
                    "duplicate_fee_record",
                    field=kind,
                    key=dup,
                )


@dataclass(frozen=True)
class SettlementInput:
    """Gathers everything a settlement reads: block, position, policy, arenas and fees.

    ``block`` is the finalized chain block the settlement is computed at (the age of every
    claim is measured to it); ``as_of_position`` is the ledger position the inputs were
    projected as of.
    """

    block: int
    as_of_position: int
    policy: EmissionPolicy
    arenas: Sequence[ArenaInput] = ()
    fees: FeeRecords = field(default_factory=FeeRecords)
    #: Per arena id, its complete control runs (any order); read under settlement-rules.v2
    #: only, where an arena missing here has no run.
    control_runs: Mapping[str, Sequence[ControlRun]] = field(default_factory=dict, hash=False)

    def __post_init__(self) -> None:
        _check_int(self.block, "block")
        _check_int(self.as_of_position, "as_of_position")
        _check_control_runs(self.control_runs)
        object.__setattr__(
            self, "control_runs", {a: tuple(runs) for a, runs in self.control_runs.items()}
        )
        _as_tuple(self, "arenas")
        arena = _first_duplicate(a.arena_id for a in self.arenas)
        if arena is not None:
            raise _refuse(f"arena {arena} is listed twice", "duplicate_arena", arena_id=arena)
        sub = _first_duplicate(s.submission_id for a in self.arenas for s in a.submissions)
        if sub is not None:
            raise _refuse(
                f"submission {sub} is listed under two arenas",
                "duplicate_submission",
                submission_id=sub,
            )
        _check_shares({a.arena_id: a.emission_share_ppm for a in self.arenas})


def _check_control_runs(control_runs: Mapping[str, Sequence[ControlRun]]) -> None:
    for arena_id, runs in control_runs.items():
        blocks: set[int] = set()
        for run in runs:
            if not isinstance(run, ControlRun):
                raise _refuse(
                    f"control runs of arena {arena_id} list {run!r}, not a ControlRun",
                    "settlement_input_invalid",
                    field="control_runs",
                )
            if run.block in blocks:
                raise _refuse(
                    f"arena {arena_id} lists two control runs at block {run.block}; a run "
                    "is every control's submission at one block",
                    "settlement_input_invalid",
                    field="control_runs",
                )
            blocks.add(run.block)


def _check_shares(shares: Mapping[str, int]) -> None:
    total = sum(shares.values())
    if total > weights_total_ppm:
        raise _refuse(
            f"emission shares sum to {total} ppm, more than {weights_total_ppm}; "
            "lower an arena's emission_share_ppm before settling",
            "emission_shares_exceed_total",
            total_ppm=total,
            shares=dict(sorted(shares.items())),
        )


# --- reward assessment ----------------------------------------------------------------------


@dataclass(frozen=True)
class RewardAssessment:
    """Explains one PASS: its group, the best before it, its status and what blocks it.

    ``best_before_id`` and ``best_before`` name the group's best rewarded PASS among those
    assessed before this one (None for the first); ``required_speedup`` is
    best * (1 + reward_margin), the speedup this PASS needed. ``blocked_by`` lists, in
    arrival order, the earlier submissions of the arena whose state keeps it ``pending``.
    """

    arena_id: str
    incumbent_digest: str
    submission_id: str
    hotkey: str
    block: int
    speedup: str
    status: RewardStatus
    best_before_id: str | None
    best_before: str | None
    required_speedup: str | None
    blocked_by: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        """Returns the assessment as a JSON-ready object."""
        return {
            "arena_id": self.arena_id,
            "incumbent_digest": self.incumbent_digest,
            "submission_id": self.submission_id,
            "hotkey": self.hotkey,
            "block": self.block,
            "speedup": self.speedup,
            "status": self.status,
            "best_before": None
            if self.best_before_id is None
            else {"submission_id": self.best_before_id, "speedup": self.best_before},
            "required_speedup": self.required_speedup,
            "blocked_by": list(self.blocked_by),
        }


def _arrival_order(sub: SubmissionInput) -> tuple[tuple[int, int, int, str, str], str]:
    # submission_id only breaks ties a well-formed ledger never has (equal arrival keys).
    return (sub.arrival_key, sub.submission_id)


def _judge(
    sub: SubmissionInput,
    arena: ArenaInput,
    best: dict[str, tuple[Decimal, SubmissionInput]],
    blockers: tuple[str, ...],
) -> RewardAssessment:
    speedup = Decimal(str(sub.speedup))
    prior = best.get(sub.incumbent_digest)
    required: Decimal | None = None
    if prior is not None:
        factor = _DECIMAL.add(Decimal(1), Decimal(arena.reward_margin))
        required = _DECIMAL.multiply(prior[0], factor)
    status: RewardStatus
    if blockers:
        status = "pending"
    elif required is None or speedup >= required:
        status = "rewarded"
        best[sub.incumbent_digest] = (speedup, sub)
    else:
        status = "lost_potential"
    return RewardAssessment(
        arena_id=arena.arena_id,
        incumbent_digest=sub.incumbent_digest,
        submission_id=sub.submission_id,
        hotkey=sub.hotkey,
        block=sub.block,
        speedup=str(sub.speedup),
        status=status,
        best_before_id=None if prior is None else prior[1].submission_id,
        best_before=None if prior is None else str(prior[1].speedup),
        required_speedup=None if required is None else canonical_decimal(required),
        blocked_by=blockers,
    )


def _assess_arena(arena: ArenaInput) -> list[RewardAssessment]:
    best: dict[str, tuple[Decimal, SubmissionInput]] = {}
    blockers: list[str] = []
    results: list[RewardAssessment] = []
    for sub in sorted(arena.submissions, key=_arrival_order):
        if sub.is_pass:
            results.append(_judge(sub, arena, best, tuple(blockers)))
        # Blockers only accumulate, so once one PASS is pending every later one is too.
        if sub.status in BLOCKING_STATUSES:
            blockers.append(sub.submission_id)
    return results


def assess_rewards(arenas: Iterable[ArenaInput]) -> tuple[RewardAssessment, ...]:
    """Assesses every PASS: by arena id, then in arrival-key order within each arena."""
    results: list[RewardAssessment] = []
    for arena in sorted(arenas, key=lambda a: a.arena_id):
        results.extend(_assess_arena(arena))
    return tuple(results)


#: A submission as ``assess_rewarded_rows`` reads it: (block, event_index, event_subindex,
#: hotkey, content_hash, submission_id, status, incumbent_digest, verdict, speedup). The
#: first six are ``_arrival_order``, so plain tuple order is arrival order.
SubmissionRow = tuple[int, int, int, str, str, str, str, str, str | None, str | None]

_ROW_VERDICTS: Final = frozenset({None, *_VERDICTS})


def assess_rewarded_rows(
    arena: ArenaInput, rows: Iterable[SubmissionRow]
) -> list[RewardAssessment] | None:
    """Returns the ``rewarded`` assessments ``assess_rewards`` gives for ``arena`` with these
    submissions, in arrival order, or None when a row is one ``SubmissionInput.folded``
    would refuse (the caller then builds the inputs, which raises the refusal).

    A settlement reads only the rewarded PASSes, so this builds no input and judges no
    PASS past the arena's first blocking submission (every later one is ``pending``), and
    builds an assessment for the rewarded ones alone; the comparisons are ``_judge``'s,
    in the same context. ``rows`` hold the submissions ``arena.submissions`` would (a PASS
    carries verdict ``"PASS"``; any other status its verdict or None).
    """
    ordered = sorted(rows)
    for row in ordered:  # what folded() checks, so a bad row is refused as it always was
        status, verdict = row[6], row[8]
        if (
            status not in SUBMISSION_STATUSES
            or verdict not in _ROW_VERDICTS
            or (status == "QUALIFIED") != (verdict == "PASS")
            or (status == "QUALIFIED" and not _is_decimal_text(row[9]))
        ):
            return None
    factor = _DECIMAL.add(Decimal(1), Decimal(arena.reward_margin))
    best: dict[str, tuple[Decimal, str, str]] = {}
    rewarded: list[RewardAssessment] = []
    for block, _, _, hotkey, _, submission_id, status, group, _, text in ordered:
        if status in BLOCKING_STATUSES:
            break  # this and every later PASS of the arena is pending: no claim
        if status != "QUALIFIED":
            continue
        speedup = Decimal(str(text))
        prior = best.get(group)
        required = None if prior is None else _DECIMAL.multiply(prior[0], factor)
        if required is not None and speedup < required:
            continue  # lost_potential: earns nothing and leaves the group's best as it was
        best[group] = (speedup, submission_id, str(text))
        rewarded.append(RewardAssessment(
            arena_id=arena.arena_id,
            incumbent_digest=group,
            submission_id=submission_id,
            hotkey=hotkey,
            block=block,
            speedup=str(text),
            status="rewarded",
            best_before_id=None if prior is None else prior[1],
            best_before=None if prior is None else prior[2],
            required_speedup=None if required is None else canonical_decimal(required),
            blocked_by=(),
        ))
    return rewarded


def judge_passes(
    reward_margin: str,
    best: dict[str, str],
    passes: Iterable[tuple[str, str | None]],
) -> list[RewardStatus]:
    """Returns the status ``assess_rewards`` gives each of an arena's PASSes that come,
    in arrival order, before its first blocking submission: ``rewarded`` or
    ``lost_potential``, with ``_judge``'s comparisons in the same context.

    ``passes`` hold (incumbent_digest, speedup) in arrival order; ``best`` maps a group to
    the speedup of its latest rewarded PASS before them, and is updated as they are
    judged, so a later call goes on from where this one stopped. The list stops short at
    the first speedup ``SubmissionInput.folded`` would refuse: a settlement of that
    ledger is refused, and the caller treats that PASS as the end of what is assessed.
    """
    factor = _DECIMAL.add(Decimal(1), Decimal(reward_margin))
    statuses: list[RewardStatus] = []
    for group, text in passes:
        if not _is_decimal_text(text):
            break
        speedup = Decimal(str(text))
        prior = best.get(group)
        if prior is not None and speedup < _DECIMAL.multiply(Decimal(prior), factor):
            statuses.append("lost_potential")
        else:
            best[group] = str(text)
            statuses.append("rewarded")
    return statuses


def explain_rewards(arenas: Iterable[ArenaInput]) -> list[dict[str, Any]]:
    """Returns every PASS as a JSON-ready explanation (group, best before, status, blockers)."""
    return [a.to_dict() for a in assess_rewards(arenas)]


class RewardScan:
    """Assesses one arena's rewards incrementally, for a replay that settles again and again.

    It holds the arena's submissions (those ``assess_rewards`` would be given) sorted by
    arrival order, and the assessment of the longest prefix already walked. Only PASSes
    before the first blocking submission can be ``rewarded`` or ``lost_potential`` (every
    later one is ``pending`` and earns nothing), and that prefix holds only QUALIFIED
    (terminal) submissions, so a new settlement walks on from where the last one stopped.
    A change inside the walked prefix (an earlier arrival, a requeued one) rolls the walk
    back to the last mark before it (one every ``mark_every_walked``). ``rewarded()``
    equals the ``rewarded`` assessments ``assess_rewards([ArenaInput(..., submissions)])``
    gives, in the same order.

    With ``keep_walked``, the walked prefix more than that many submissions behind the walk
    is dropped (at a mark, so the walk can still roll back to it): those submissions are
    QUALIFIED and terminal, and what they decided lives on in the rewarded assessments and
    the mark's best-per-group. Memory then follows the unwalked tail (from the first
    blocking submission on) and the claims, not the arena's history. A change that reaches
    the dropped part (an arrival before it, a new margin) cannot be walked from what is
    kept: the scan turns ``stale`` and its owner builds a new one from every submission.
    Dropping assumes what the ledger guarantees: a QUALIFIED submission is terminal, so its
    input is never removed once put. Any other dropped one earned and blocked nothing:
    removing it changes nothing, and putting it again (a requeued NO_DECISION) turns the
    scan stale.
    """

    def __init__(
        self, arena: ArenaInput, *, mark_every_walked: int = 64, keep_walked: int | None = None
    ) -> None:
        if mark_every_walked < 1:
            raise ValueError(f"mark_every_walked must be at least 1, not {mark_every_walked}")
        if keep_walked is not None and keep_walked < 0:
            raise ValueError(f"keep_walked must be at least 0, not {keep_walked}")
        #: Walked submissions between two saved walk states (the rollback points).
        self.mark_every_walked = mark_every_walked
        #: Walked submissions kept behind the walk before older ones are dropped (None: all).
        self.keep_walked = keep_walked
        #: Submissions dropped from the front of the walked prefix so far.
        self.dropped = 0
        #: True once a change reached the dropped prefix: ``rewarded`` refuses until rebuilt.
        self.stale = False
        self.arena = arena
        self._order: list[tuple[tuple[int, int, int, str, str], str]] = []
        self._subs: dict[str, SubmissionInput] = {}
        self._floor: tuple[tuple[int, int, int, str, str], str] | None = None  # last dropped
        self._restart()

    def _restart(self) -> None:
        if self.dropped:
            self.stale = True  # the walk from the start needs what was dropped
            return
        self._walked = 0
        self._best: dict[str, tuple[Decimal, SubmissionInput]] = {}
        self._rewarded: list[RewardAssessment] = []
        # (walked, best then, len(rewarded) then): the state before assessing order[walked].
        self._marks: list[tuple[int, dict[str, tuple[Decimal, SubmissionInput]], int]] = []

    def __len__(self) -> int:
        """Returns how many submissions the scan holds (dropped ones not counted)."""
        return len(self._subs)

    def set_arena(self, arena: ArenaInput) -> None:
        """Replaces the arena's share and reward margin; the walk starts over."""
        if arena != self.arena:
            self.arena = arena
            self._restart()

    def put(self, submission_id: str, sub: SubmissionInput | None) -> None:
        """Sets (or, with None, removes) one submission's input."""
        old = self._subs.get(submission_id)
        if old == sub:
            return
        if sub is not None and sub.submission_id != submission_id:
            raise ValueError(f"input of {sub.submission_id} put as {submission_id}")
        if old is not None:
            index = bisect_left(self._order, _arrival_order(old))
            del self._order[index]
            del self._subs[submission_id]
            self._changed(index)
        if sub is not None:
            key = _arrival_order(sub)
            if self._floor is not None and key <= self._floor:
                self.stale = True  # it belongs in the dropped prefix (or is a dropped one)
                return
            index = bisect_left(self._order, key)
            self._order.insert(index, key)
            self._subs[submission_id] = sub
            self._changed(index)

    def _changed(self, index: int) -> None:
        """Forgets the walk from ``index`` on: order[:index] is as it was when walked."""
        if index >= self._walked:
            return
        marks = self._marks
        while marks and marks[-1][0] > index:
            marks.pop()
        if not marks:
            self._restart()
            return
        walked, best, count = marks[-1]
        self._walked, self._best = walked, dict(best)
        del self._rewarded[count:]

    def rewarded(self) -> tuple[RewardAssessment, ...]:
        """Returns the arena's rewarded assessments in arrival order, walking what is new."""
        if self.stale:
            raise ValueError(
                f"the reward scan of arena {self.arena.arena_id} is stale (a change reached "
                "its dropped prefix); build a new one from every submission"
            )
        order, subs, arena, best = self._order, self._subs, self.arena, self._best
        marks, rewarded, every = self._marks, self._rewarded, self.mark_every_walked
        index, end = self._walked, len(order)
        while index < end:
            if index % every == 0 and (not marks or marks[-1][0] < index):
                marks.append((index, dict(best), len(rewarded)))
            sub = subs[order[index][1]]
            if sub.status in BLOCKING_STATUSES:
                break  # every later PASS is pending: nothing more to assess now
            if sub.is_pass:
                assessed = _judge(sub, arena, best, ())
                if assessed.status == "rewarded":
                    rewarded.append(assessed)
            index += 1
        self._walked = index
        if self.keep_walked is not None and index >= 2 * self.keep_walked + every:
            self._drop(index - self.keep_walked)
        return tuple(rewarded)

    def _drop(self, limit: int) -> None:
        """Drops the walked submissions before the last mark at or before ``limit``."""
        marks = self._marks
        at = bisect_right(marks, limit, key=itemgetter(0)) - 1  # by mark index
        if at < 0 or marks[at][0] == 0:
            return
        cut = marks[at][0]
        order, subs = self._order, self._subs
        self._floor = order[cut - 1]
        for _, sid in order[:cut]:
            del subs[sid]
        del order[:cut]
        # Mark indices count from the new front; a mark's index stays a multiple of
        # mark_every_walked only if the cut is one, which it is (marks sit at multiples).
        self._marks = [(walked - cut, best, count) for walked, best, count in marks[at:]]
        self._walked -= cut
        self.dropped += cut


# --- claims ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Claim:
    """Records a rewarded PASS and the credit it earns at the settlement block."""

    arena_id: str
    incumbent_digest: str
    submission_id: str
    hotkey: str
    speedup_ppm: int
    block: int
    credit: int

    def to_dict(self) -> dict[str, Any]:
        """Returns the claim as the object written into the settlement document."""
        return {
            "arena_id": self.arena_id,
            "block": self.block,
            "credit": self.credit,
            "hotkey": self.hotkey,
            "incumbent_digest": self.incumbent_digest,
            "speedup_ppm": self.speedup_ppm,
            "submission_id": self.submission_id,
        }

    @property
    def sort_key(self) -> tuple[str, int, str]:
        """Returns the claim's place in the document: (arena_id, block, submission_id)."""
        return (self.arena_id, self.block, self.submission_id)


def speedup_to_ppm(speedup: str) -> int:
    """Converts a recorded speedup to floor(S * 10^6), e.g. "1.019129" → 1019129."""
    value = _parse_decimal(speedup, "speedup")
    scaled = _DECIMAL.multiply(value, Decimal(speedup_scale_ppm))
    return int(scaled.to_integral_value(rounding=ROUND_FLOOR, context=_DECIMAL))


def claim_credit(
    speedup_ppm: int, claim_block: int, settlement_block: int, half_life_blocks: int
) -> int:
    """Returns floor((speedup_ppm - 10^6) * h / (h + age)), never below 0, in integers.

    ``age`` is settlement_block - claim_block; a settlement block before the claim's
    arrival block is refused, since the claim could not have existed then.
    """
    _check_int(speedup_ppm, "speedup_ppm", 0, 2**63)
    _check_int(half_life_blocks, "half_life_blocks", 1)
    _check_int(claim_block, "claim_block")
    _check_int(settlement_block, "settlement_block")
    if settlement_block < claim_block:
        raise _refuse(
            f"settlement block {settlement_block} is before claim block {claim_block}; "
            "settle at a block no earlier than every arrival in the ledger",
            "settlement_block_before_claim",
            settlement_block=settlement_block,
            claim_block=claim_block,
        )
    gain = max(0, speedup_ppm - speedup_scale_ppm)
    return gain * half_life_blocks // (half_life_blocks + settlement_block - claim_block)


def build_claims(
    assessments: Iterable[RewardAssessment], settlement_block: int, half_life_blocks: int
) -> tuple[Claim, ...]:
    """Turns every rewarded assessment into a claim, sorted by (arena_id, block, id)."""
    claims = []
    for a in assessments:
        if a.status != "rewarded":
            continue
        ppm = speedup_to_ppm(a.speedup)
        try:
            credit = claim_credit(ppm, a.block, settlement_block, half_life_blocks)
        except InvalidInput as exc:
            raise InvalidInput(
                f"claim {a.submission_id}: {exc.message}",
                **exc.context,
                submission_id=a.submission_id,
            ) from exc
        claims.append(
            Claim(a.arena_id, a.incumbent_digest, a.submission_id, a.hotkey, ppm, a.block, credit)
        )
    return tuple(sorted(claims, key=lambda c: c.sort_key))


# --- weights --------------------------------------------------------------------------------


def largest_remainder(pool_ppm: int, credits: Mapping[str, int]) -> dict[str, int]:
    """Splits ``pool_ppm`` in proportion to ``credits`` by the largest-remainder method.

    Each hotkey first gets floor(pool * credit / sum(credit)); the ppm left over go one each to
    the hotkeys with the larger remainders, ties broken by hotkey (ascending). Hotkeys with
    zero credit get nothing; with no credit at all the result is empty.
    """
    _check_int(pool_ppm, "pool_ppm")
    for hotkey, credit in credits.items():
        _check_int(credit, f"credit of {hotkey}", 0, 2**63)
    positive = {h: c for h, c in credits.items() if c > 0}
    total = sum(positive.values())
    if total == 0:
        return {}
    shares = {h: pool_ppm * c // total for h, c in positive.items()}
    left = pool_ppm - sum(shares.values())
    by_remainder = sorted(positive, key=lambda h: (-(pool_ppm * positive[h] % total), h))
    for hotkey in by_remainder[:left]:
        shares[hotkey] += 1
    return shares


def compute_weights(
    claims: Iterable[Claim], shares_ppm: Mapping[str, int], burn_hotkey: str
) -> dict[str, int]:
    """Returns the {hotkey: ppm} vector: arena pools split by credit, the rest to burn.

    Every arena in ``shares_ppm`` is a pool; a pool without credit, and the ppm no arena
    holds, go to ``burn_hotkey``. A hotkey paid by several pools (the burn hotkey included)
    gets their sum. Zero weights are left out; the values sum to exactly 1,000,000.
    """
    _check_shares(shares_ppm)
    credit_by_arena: dict[str, dict[str, int]] = {a: {} for a in shares_ppm}
    for claim in claims:
        if claim.arena_id not in credit_by_arena:
            raise _refuse(
                f"claim {claim.submission_id} names arena {claim.arena_id}, which has no "
                "emission share",
                "claim_without_arena",
                arena_id=claim.arena_id,
            )
        pool = credit_by_arena[claim.arena_id]
        pool[claim.hotkey] = pool.get(claim.hotkey, 0) + claim.credit
    weights: dict[str, int] = {}
    burned = weights_total_ppm - sum(shares_ppm.values())
    for arena_id in sorted(shares_ppm):
        split = largest_remainder(shares_ppm[arena_id], credit_by_arena[arena_id])
        if not split:
            burned += shares_ppm[arena_id]
        for hotkey, ppm in split.items():
            weights[hotkey] = weights.get(hotkey, 0) + ppm
    weights[burn_hotkey] = weights.get(burn_hotkey, 0) + burned
    return {h: weights[h] for h in sorted(weights) if weights[h] > 0}


# --- fees -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class ArenaFees:
    """Sums one arena's fees in rao: payments consumed and released, credits spent."""

    consumed_rao: int = 0
    released_rao: int = 0
    credits_spent_rao: int = 0

    @property
    def net_rao(self) -> int:
        """Returns consumed minus released payments: the arena's fee revenue."""
        return self.consumed_rao - self.released_rao

    def plus(self, other: ArenaFees) -> ArenaFees:
        """Returns the field-by-field sum of two fee records."""
        return ArenaFees(
            self.consumed_rao + other.consumed_rao,
            self.released_rao + other.released_rao,
            self.credits_spent_rao + other.credits_spent_rao,
        )

    def to_dict(self) -> dict[str, int]:
        """Returns the fees as the object written into the settlement document."""
        return {
            "consumed_rao": self.consumed_rao,
            "credits_spent_rao": self.credits_spent_rao,
            "net_rao": self.net_rao,
            "released_rao": self.released_rao,
        }


@dataclass(frozen=True)
class FeeSummary:
    """Holds fees per arena (sorted by arena id) and their total across arenas."""

    arenas: tuple[tuple[str, ArenaFees], ...]
    total: ArenaFees

    def to_dict(self) -> dict[str, Any]:
        """Returns ``{"arenas": {arena_id: fees}, "total": fees}`` for the document."""
        return {
            "arenas": {arena_id: fees.to_dict() for arena_id, fees in self.arenas},
            "total": self.total.to_dict(),
        }


def summarize_fees(arena_ids: Iterable[str], records: FeeRecords) -> FeeSummary:
    """Sums payments (consumed minus released) and credits (waived, not revenue) per arena.

    Every arena in ``arena_ids`` appears, with zeros when it has no fee record; an arena
    that only appears in ``records`` appears too.
    """
    sums: dict[str, list[int]] = {}
    for p in records.payments:
        row = sums.setdefault(p.arena_id, [0, 0, 0])
        row[0] += p.amount_rao
        if p.released:
            row[1] += p.amount_rao
    for c in records.credits:
        sums.setdefault(c.arena_id, [0, 0, 0])[2] += c.amount_rao
    return fee_summary(arena_ids, sums)


def fee_summary(arena_ids: Iterable[str], sums: Mapping[str, Sequence[int]]) -> FeeSummary:
    """Builds the summary from per-arena sums (consumed, released, credits spent) in rao.

    Every arena in ``arena_ids`` appears, with zeros when ``sums`` has no row for it; an
    arena that only appears in ``sums`` appears too. ``summarize_fees`` and the replay's
    running sums (``services.settlements.SettlementTracker``) both end here.
    """
    per: dict[str, ArenaFees] = {a: ArenaFees() for a in arena_ids}
    for arena_id, (consumed, released, credits) in sums.items():
        per[arena_id] = ArenaFees(consumed, released, credits)
    total = ArenaFees()
    for fees in per.values():
        total = total.plus(fees)
    return FeeSummary(tuple(sorted(per.items())), total)


# --- control gate (settlement-rules.v2) -----------------------------------------------------


def describe_suspension(suspension: Mapping[str, Any]) -> str:
    """Says in words why settlement-rules.v2 suspended an arena, from a SettlementComputed's
    ``suspensions`` entry (what the CLI's and the dashboard's sentences share)."""
    if suspension["reason"] == CONTROL_UNEXPECTED:
        return (f"its control run at block {suspension['run_block']} did not come out as "
                f"registered ({', '.join(suspension['control_ids'])}), so its verdicts are "
                "not trusted")
    if suspension["run_block"] is None:
        return "it has no complete control run"
    return f"its latest complete control run (block {suspension['run_block']}) is too old"


@dataclass(frozen=True)
class Suspension:
    """Records why an arena's pool went to the burn hotkey under settlement-rules.v2.

    ``reason`` is ``control_unexpected`` (``control_ids`` the controls that came out
    unexpected in the run at ``run_block``) or ``controls_stale`` (the latest complete run,
    ``run_block``, is older than the policy allows, or there is none: ``run_block`` None).
    """

    arena_id: str
    reason: str
    run_block: int | None
    control_ids: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """Returns the suspension as the object written into the settlement document."""
        return {
            "arena_id": self.arena_id,
            "control_ids": list(self.control_ids),
            "reason": self.reason,
            "run_block": self.run_block,
        }


def control_suspension(
    arena_id: str, runs: Iterable[ControlRun], block: int, max_age_blocks: int
) -> Suspension | None:
    """Returns the arena's suspension at settlement ``block``, or None when it is not.

    Only the complete runs at or before ``block`` count, and the latest of them decides:
    an unexpected outcome suspends (``control_unexpected``, whatever the run's age); else a
    run more than ``max_age_blocks`` blocks before ``block``, or no run, suspends
    (``controls_stale``). A run exactly ``max_age_blocks`` old is still fresh.
    """
    latest: ControlRun | None = None
    for run in runs:
        if run.block <= block and (latest is None or run.block > latest.block):
            latest = run
    if latest is None:
        return Suspension(arena_id, CONTROLS_STALE, None)
    if latest.unexpected:
        return Suspension(
            arena_id, CONTROL_UNEXPECTED, latest.block, tuple(sorted(set(latest.unexpected)))
        )
    if block - latest.block > max_age_blocks:
        return Suspension(arena_id, CONTROLS_STALE, latest.block)
    return None


def control_suspensions(
    arena_ids: Iterable[str],
    control_runs: Mapping[str, Sequence[ControlRun]],
    block: int,
    max_age_blocks: int,
) -> tuple[Suspension, ...]:
    """Returns the suspension of every suspended arena of ``arena_ids``, sorted by arena id
    (an arena missing from ``control_runs`` has no run)."""
    found = (
        control_suspension(a, control_runs.get(a, ()), block, max_age_blocks)
        for a in sorted(arena_ids)
    )
    return tuple(s for s in found if s is not None)


# --- settlement and its digest --------------------------------------------------------------


def settlement_document(
    block: int,
    as_of_position: int,
    claims: Iterable[Claim],
    weights_ppm: Mapping[str, int],
    fees: FeeSummary,
    rules_version: str = RULES_VERSION,
    suspensions: Iterable[Suspension] = (),
) -> dict[str, Any]:
    """Returns the exact document ``settlement_digest`` hashes (see docs/settlement.md).

    ``{"as_of_position", "block", "claims": [claim objects sorted by (arena_id, block,
    submission_id)], "fees": {"arenas", "total"}, "rules_version": "settlement-rules.v1",
    "weights_ppm": {hotkey: ppm}}``; under settlement-rules.v2 also ``"suspensions":
    [suspension objects sorted by arena_id]`` (a v1 document has no such key).
    """
    document = {
        "as_of_position": as_of_position,
        "block": block,
        "claims": [c.to_dict() for c in sorted(claims, key=lambda c: c.sort_key)],
        "fees": fees.to_dict(),
        "rules_version": rules_version,
        "weights_ppm": {h: weights_ppm[h] for h in sorted(weights_ppm)},
    }
    suspended = sorted(suspensions, key=lambda s: s.arena_id)
    if rules_version == RULES_VERSION:
        if suspended:
            raise ValueError(f"{RULES_VERSION} suspends no arena")
    else:
        document["suspensions"] = [s.to_dict() for s in suspended]
    return document


def settlement_digest(document: Mapping[str, Any]) -> str:
    """Returns digest("arena-ledger.settlement", document) as 64 lowercase hex characters."""
    return digest(SETTLEMENT_DOMAIN, dict(document))


@dataclass(frozen=True)
class Settlement:
    """Holds one computed settlement: its claims, weights, fees, digest and explanation."""

    block: int
    as_of_position: int
    claims: tuple[Claim, ...]
    weights_ppm: Mapping[str, int]
    fees: FeeSummary
    settlement_digest: str
    assessments: tuple[RewardAssessment, ...]
    rules_version: str = RULES_VERSION
    #: The arenas settlement-rules.v2 suspended, by arena id (always empty under v1).
    suspensions: tuple[Suspension, ...] = ()

    def document(self) -> dict[str, Any]:
        """Returns the document the settlement digest covers."""
        return settlement_document(
            self.block, self.as_of_position, self.claims, self.weights_ppm, self.fees,
            self.rules_version, self.suspensions,
        )


def compute_settlement(inputs: SettlementInput) -> Settlement:
    """Computes the settlement of ``inputs``: assess, claim, gate, weigh, sum fees, hash."""
    assessments = assess_rewards(inputs.arenas)
    shares = {a.arena_id: a.emission_share_ppm for a in inputs.arenas}
    return _settle(
        inputs.block,
        inputs.as_of_position,
        inputs.policy,
        shares,
        assessments,
        lambda: summarize_fees(shares, inputs.fees),
        inputs.control_runs,
    )


def settle_assessed(
    block: int,
    as_of_position: int,
    policy: EmissionPolicy,
    shares_ppm: Mapping[str, int],
    assessments: Sequence[RewardAssessment],
    fees: FeeSummary,
    control_runs: Mapping[str, Sequence[ControlRun]] | None = None,
) -> Settlement:
    """Computes a settlement from assessments made elsewhere (``RewardScan``) and fee sums.

    Claims, weights, document and digest come from the same code as ``compute_settlement``;
    only the rewarded ``assessments`` matter (the others earn nothing), and ``shares_ppm``
    must name every arena. ``Settlement.assessments`` holds what was passed in.
    ``control_runs`` (per arena, its complete control runs) is read under
    settlement-rules.v2 only.
    """
    # What SettlementInput checks on construction (the rest holds by how a fold is built).
    _check_int(block, "block")
    _check_int(as_of_position, "as_of_position")
    _check_shares(shares_ppm)
    runs = {} if control_runs is None else control_runs
    _check_control_runs(runs)
    return _settle(
        block, as_of_position, policy, shares_ppm, tuple(assessments), lambda: fees, runs
    )


def _settle(
    block: int,
    as_of_position: int,
    policy: EmissionPolicy,
    shares: Mapping[str, int],
    assessments: tuple[RewardAssessment, ...],
    fees_of: Callable[[], FeeSummary],
    control_runs: Mapping[str, Sequence[ControlRun]],
) -> Settlement:
    claims = build_claims(assessments, block, policy.half_life_blocks)
    suspensions: tuple[Suspension, ...] = ()
    paid = claims
    if policy.gated:
        assert policy.control_max_age_blocks is not None  # EmissionPolicy checks it
        suspensions = control_suspensions(
            shares, control_runs, block, policy.control_max_age_blocks
        )
        # A suspended arena's claims stay on record; its pool has no credit, so it burns.
        suspended = {s.arena_id for s in suspensions}
        paid = tuple(c for c in claims if c.arena_id not in suspended)
    weights = compute_weights(paid, shares, policy.burn_hotkey)
    fees = fees_of()  # after the weights, so errors come in the order they always did
    document = settlement_document(
        block, as_of_position, claims, weights, fees, policy.rules_version, suspensions
    )
    return Settlement(
        block=block,
        as_of_position=as_of_position,
        claims=claims,
        weights_ppm=weights,
        fees=fees,
        settlement_digest=settlement_digest(document),
        assessments=assessments,
        rules_version=policy.rules_version,
        suspensions=suspensions,
    )


def settlement_payload(settlement: Settlement) -> dict[str, Any]:
    """Returns the SettlementComputed payload: the document plus its digest, less
    ``rules_version`` under settlement-rules.v1 (whose payloads never carried it); a later
    version's payload keeps it, so that the payload still names the rules it was made by."""
    payload = settlement.document()
    if settlement.rules_version == RULES_VERSION:
        del payload["rules_version"]
    payload["settlement_digest"] = settlement.settlement_digest
    return payload


def check_settlement_digest(payload: Mapping[str, Any]) -> bool:
    """Tells whether a SettlementComputed payload's digest matches its own fields."""
    document = {k: v for k, v in payload.items() if k != "settlement_digest"}
    document.setdefault("rules_version", RULES_VERSION)  # a v1 payload omits it
    return settlement_digest(document) == payload.get("settlement_digest")


def diff_settlement_payload(
    expected: Mapping[str, Any], recorded: Mapping[str, Any]
) -> tuple[str, ...]:
    """Names, sorted, the payload fields whose canonical bytes differ between two payloads.

    Replay recomputes ``expected`` from the ledger and compares it with the ``recorded``
    SettlementComputed payload; an empty result means they agree byte for byte.
    """
    names = sorted(set(expected) | set(recorded))
    return tuple(
        n
        for n in names
        if n not in expected
        or n not in recorded
        or canonical_bytes(expected[n]) != canonical_bytes(recorded[n])
    )

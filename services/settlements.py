"""Builds settlements from the folded ledger and checks recorded ones (docs/settlement.md).

The arithmetic is ``machines.settlement_rules`` (pure); this module feeds it from a
``LedgerFold`` caught up to a position: every arena's submissions in arrival-key order with
status, verdict, recorded speedup and reward group, the emission policy in force, and the
fee records. A SettlementComputed is accepted (at append and in replay) only when it was
computed as of the position right before it and equals, byte for byte, what the ledger
up to that position gives.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

from ledger import read_models
from ledger.log import get_logger
from machines import settlement_rules as rules
from machines.control import CONTROL_HOTKEY, ControlRow, complete_runs, control_report
from services.projections import state_of
from services.read_view import ReadView
from vocabulary.catalogue import CATALOGUE
from vocabulary.errors import LedgerError, Refused
from vocabulary.events import AttemptDecided, EmissionPolicySet, SettlementComputed

if TYPE_CHECKING:
    from machines.arena import ArenaState
    from machines.attempt import Decision
    from machines.payment import CreditState, PaymentState
    from machines.projection import Finished, LedgerFold
    from machines.settlement_rules import Settlement, SettlementInput
    from machines.submission import SubmissionState

__all__ = [
    "SettlementTracker",
    "arena_inputs",
    "check_recorded",
    "compute",
    "compute_from_read_models",
    "control_runs",
    "fee_summary",
    "fold_control_runs",
    "read_model_control_runs",
    "rewards",
    "settlement_input",
]

_log = get_logger("arena_ledger.settle")


def _require_policy(policy: EmissionPolicySet | None) -> EmissionPolicySet:
    """Returns ``policy``; Refused when the ledger has none yet."""
    if policy is None:
        raise Refused(
            "no settlement (settle, weights, a replay's check) can be computed until the "
            "settlement stream holds an EmissionPolicySet (record one with `arena-ledger "
            "emission-policy`); nothing was written",
            reason="emission_policy_missing",
        )
    return policy


def settlement_input(
    fold: LedgerFold, policy: EmissionPolicySet | None, block: int
) -> SettlementInput:
    """Returns the settlement input of the ledger as folded, at settlement ``block``."""
    policy = _require_policy(policy)
    arenas = [_arena_input(fold, arena) for arena in fold.arenas()]
    emission = rules.EmissionPolicy.from_event(policy)
    return rules.SettlementInput(
        block=block,
        as_of_position=fold.position,
        policy=emission,
        arenas=arenas,
        fees=_fee_records(fold),
        control_runs=fold_control_runs(fold) if emission.gated else {},
    )


# --- the control gate's input (settlement-rules.v2) -----------------------------------------


def control_runs(
    arena_ids: Iterable[str], rows_of: Callable[[str], Iterable[ControlRow]]
) -> dict[str, tuple[rules.ControlRun, ...]]:
    """Returns each arena's complete control runs, from its control report ``rows_of(id)``:
    what the settlement-rules.v2 gate reads (``rules.control_suspension``)."""
    return {
        arena_id: tuple(
            rules.ControlRun(block, unexpected)
            for block, unexpected in complete_runs(rows_of(arena_id))
        )
        for arena_id in arena_ids
    }


def fold_control_runs(fold: LedgerFold) -> dict[str, tuple[rules.ControlRun, ...]]:
    """Is ``control_runs`` of every arena of a fold, from ``LedgerFold.controls``."""
    return control_runs([a.arena_id for a in fold.arenas()], fold.controls)


def read_model_control_runs(
    reader: read_models.Reader, arena_ids: Iterable[str]
) -> dict[str, tuple[rules.ControlRun, ...]]:
    """Is ``control_runs`` from the read models at ``reader.position``: the same runs the
    fold gives, from the arenas' control rows and their controls' submissions only."""
    return control_runs(arena_ids, ReadView(reader).controls)


#: Statuses that matter to rewards: a PASS, or an earlier arrival that blocks one.
_RELEVANT = frozenset({"QUALIFIED", "ARRIVED", "QUEUED", "QUALIFYING", "HELD"})


def _arena_input(fold: LedgerFold, arena: ArenaState) -> rules.ArenaInput:
    subs = []
    for sub in fold.submissions(arena.arena_id):
        found = _submission_input(fold, arena, sub)
        if found is not None:
            subs.append(found)
    return _arena_header(arena, subs)


def _arena_header(
    arena: ArenaState, submissions: Sequence[rules.SubmissionInput] = ()
) -> rules.ArenaInput:
    """Returns the arena's ArenaInput: the share and reward margin of its commission in force."""
    commission = arena.commissions[arena.commission_digest].event
    return rules.ArenaInput(
        arena_id=arena.arena_id,
        emission_share_ppm=commission.emission_share_ppm,
        reward_margin=commission.policy.reward_margin,
        submissions=submissions,
    )


def _submission_input(
    fold: LedgerFold, arena: ArenaState, sub: SubmissionState
) -> rules.SubmissionInput | None:
    """Returns the SubmissionInput settlement reads for ``sub``, or None when it is not one."""
    if sub.hotkey == CONTROL_HOTKEY or sub.status not in _RELEVANT:
        return None
    resolution = fold.resolution(sub.submission_id) if sub.status == "QUALIFIED" else None
    return _input(arena, sub, fold.reward_group(sub.submission_id), resolution)


def _finished_input(arena: ArenaState, record: Finished) -> rules.SubmissionInput | None:
    """Is ``_submission_input`` of a submission the fold is archiving, read from its record."""
    sub = record.state
    if sub.hotkey == CONTROL_HOTKEY or sub.status not in _RELEVANT:
        return None
    resolution = None
    if sub.status == "QUALIFIED" and sub.attempt_id is not None:
        attempt = record.attempts.get(sub.attempt_id)
        resolution = None if attempt is None else attempt.decision
    return _input(arena, sub, record.group, resolution)


def _input(
    arena: ArenaState, sub: SubmissionState, group: str | None, resolution: Decision | None
) -> rules.SubmissionInput:
    """Returns the SubmissionInput of a relevant submission, given its group and decision.

    A control run is never rewarded and never blocks; a submission that finished without
    a PASS blocks nothing and earns nothing: the callers return None for those.
    """
    status = sub.status
    return rules.SubmissionInput.folded(
        sub.submission_id,
        sub.hotkey,
        sub.content_hash,
        sub.arrival_key[:3],
        status,
        group or arena.incumbent_digest,
        "PASS" if status == "QUALIFIED" else _verdict(sub),
        None if resolution is None else resolution.speedup,
    )


def _verdict(sub: SubmissionState) -> str | None:
    verdict = sub.verdict
    return None if verdict == "PASS" else verdict


def _fee_records(fold: LedgerFold) -> rules.FeeRecords:
    payments = [_payment_record(p) for p in fold.payments()]
    credits = []
    for credit in fold.credits():
        found = _credit_record(fold, credit)
        if found is not None:
            credits.append(found)
    return rules.FeeRecords(payments=payments, credits=credits)


def _payment_record(payment: PaymentState) -> rules.PaymentRecord:
    released = payment.status == "RELEASED"
    return rules.PaymentRecord(
        payment.arena_id, payment.payment_ref, payment.amount_rao, released
    )


def _credit_record(fold: LedgerFold, credit: CreditState) -> rules.CreditRecord | None:
    sub = None if credit.submission_id is None else fold.submission(credit.submission_id)
    row = _credit_row(credit, sub)
    return None if row is None else rules.CreditRecord(row[0], credit.credit_id, row[1])


def compute(fold: LedgerFold, policy: EmissionPolicySet | None, block: int) -> Settlement:
    """Computes the settlement of the ledger as folded, at ``block``."""
    return rules.compute_settlement(settlement_input(fold, policy, block))


def arena_inputs(
    reader: read_models.Reader, arenas: Sequence[ArenaState], arena_id: str | None = None
) -> list[rules.ArenaInput]:
    """Returns each arena's ArenaInput from the read models, as ``_arena_input`` builds it
    from a fold: only the submissions a settlement reads (a PASS, or a live one that may
    block one), in arrival-key order, each with its reward group and recorded speedup.
    ``arena_id``, when given, reads that arena's rows only (``arenas`` must be it alone)."""
    by_arena: dict[str, list[tuple[SubmissionState, str | None, str | None]]] = {}
    for row, speedup in reader.settlement_rows(sorted(_RELEVANT), CONTROL_HOTKEY, arena_id):
        sub = state_of(row)
        by_arena.setdefault(sub.arena_id, []).append((sub, row["reward_group"], speedup))
    found = []
    for arena in arenas:
        subs = sorted(by_arena.get(arena.arena_id, ()), key=lambda entry: entry[0].arrival_key)
        found.append(_arena_header(arena, [
            rules.SubmissionInput.folded(
                sub.submission_id, sub.hotkey, sub.content_hash, sub.arrival_key[:3],
                sub.status, group or arena.incumbent_digest,
                "PASS" if sub.status == "QUALIFIED" else _verdict(sub),
                speedup if sub.status == "QUALIFIED" else None,
            )
            for sub, group, speedup in subs
        ]))
    return found


def compute_from_read_models(
    reader: read_models.Reader,
    arenas: Sequence[ArenaState],
    policy: EmissionPolicySet | None,
    block: int,
) -> Settlement:
    """Is ``compute`` on the read models of a ledger at ``reader.position`` (``arenas``: its
    arenas' states then): the same settlement, digest and all, without a fold's archive."""
    policy = _require_policy(policy)
    ordered = sorted(arenas, key=lambda a: a.arena_id)
    emission = rules.EmissionPolicy.from_event(policy)
    gate = (
        read_model_control_runs(reader, [a.arena_id for a in ordered])
        if emission.gated else None
    )
    rewarded = _rewarded_from_read_models(reader, ordered)
    if rewarded is None:  # a row the inputs refuse: build them, which raises the refusal
        inputs = rules.SettlementInput(
            block=block,
            as_of_position=reader.position,
            policy=emission,
            arenas=arena_inputs(reader, ordered),
        )
        shares = {a.arena_id: a.emission_share_ppm for a in inputs.arenas}
        return rules.settle_assessed(
            inputs.block, inputs.as_of_position, inputs.policy, shares,
            rules.assess_rewards(inputs.arenas),
            rules.fee_summary(shares, reader.fee_sums()), gate,
        )
    headers, assessed = rewarded
    # The checks SettlementInput makes of its header (block, position, shares, a repeated
    # arena); a submission id cannot repeat, being rm_submissions' key.
    inputs = rules.SettlementInput(
        block=block,
        as_of_position=reader.position,
        policy=emission,
        arenas=headers,
    )
    shares = {a.arena_id: a.emission_share_ppm for a in headers}
    return rules.settle_assessed(
        inputs.block, inputs.as_of_position, inputs.policy, shares, assessed,
        rules.fee_summary(shares, reader.fee_sums()), gate,
    )


def _rewarded_from_read_models(
    reader: read_models.Reader, arenas: Sequence[ArenaState]
) -> tuple[list[rules.ArenaInput], list[rules.RewardAssessment]] | None:
    """Returns each arena's header and the rewarded assessments of all of them (by arena,
    then arrival order), as ``assess_rewards(arena_inputs(reader, arenas))`` would give
    them, or None when a row is one ``arena_inputs`` would refuse.

    Only the rewarded PASSes reach a settlement's claims, weights and digest, and the read
    models keep each PASS's reward status (``projections.walk_rewards``), so only the
    rewarded rows are read, as plain tuples, and no input is built: assessed alone, in
    arrival order, each is rewarded again against the group's rewarded one before it,
    which is the best it was judged against (``rules.assess_rewarded_rows``)."""
    if any(status == "QUALIFIED" for status in reader.frontier_statuses().values()):
        return None  # the walk stopped at a PASS whose speedup the rules refuse
    # A submission whose arrival recorded no group ranks under the arena's incumbent.
    incumbents = {arena.arena_id: arena.incumbent_digest for arena in arenas}
    by_arena: dict[str, list[rules.SubmissionRow]] = {}
    for (block, index, subindex, hotkey, content, sid, arena_id, status, verdict, group,
         speedup) in reader.rewarded_keys(CONTROL_HOTKEY):
        qualified = status == "QUALIFIED"
        by_arena.setdefault(arena_id, []).append((
            block, index, subindex, hotkey, content, sid, status,
            group or incumbents.get(arena_id, ""),
            "PASS" if qualified else (None if verdict == "PASS" else verdict),
            speedup if qualified else None,
        ))
    headers: list[rules.ArenaInput] = []
    assessed: list[rules.RewardAssessment] = []
    for arena in arenas:
        header = _arena_header(arena)
        found = rules.assess_rewarded_rows(header, by_arena.get(arena.arena_id, []))
        if found is None:
            return None
        headers.append(header)
        assessed.extend(found)
    return headers, assessed


def check_recorded(
    fold: LedgerFold,
    policy: EmissionPolicySet | None,
    event: SettlementComputed,
    payload: dict[str, Any],
    reader: read_models.Reader | None = None,
) -> tuple[str, Any, Any] | None:
    """Returns (field, recorded, recomputed) of the first difference, or None when equal.

    The fold must stand at the position right before the SettlementComputed; ``reader``,
    when given, reads the read models at that position (the guard's seeded fold), and the
    settlement is computed from them.
    """
    if event.as_of_position != fold.position:
        return ("as_of_position", event.as_of_position, fold.position)
    if reader is not None:
        computed = compute_from_read_models(reader, fold.arenas(), policy, event.block)
    else:
        computed = compute(fold, policy, event.block)
    expected = rules.settlement_payload(computed)
    differing = rules.diff_settlement_payload(expected, payload)
    if not differing:
        return None
    # Name the substance (weights, claims, fees) before the digest that merely follows it.
    name = next((n for n in differing if n != "settlement_digest"), differing[0])
    return (name, payload.get(name), expected.get(name))


def rewards(fold: LedgerFold, arena_id: str | None = None) -> list[dict[str, Any]]:
    """Explains every PASS: its group, the best before it, rewarded/lost_potential/pending."""
    arenas = [
        _arena_input(fold, a) for a in fold.arenas() if arena_id is None or a.arena_id == arena_id
    ]
    return rules.explain_rewards(arenas)


def fee_summary(fold: LedgerFold, arena_id: str | None = None) -> dict[str, Any]:
    """Returns payments consumed and released, credits, and totals, per arena and overall."""
    arena_ids = [a.arena_id for a in fold.arenas() if arena_id is None or a.arena_id == arena_id]
    records = _fee_records(fold)
    if arena_id is not None:
        records = rules.FeeRecords(
            payments=[p for p in records.payments if p.arena_id == arena_id],
            credits=[c for c in records.credits if c.arena_id == arena_id],
        )
    summary: dict[str, Any] = rules.summarize_fees(arena_ids, records).to_dict()
    return summary


class SettlementTracker:
    """Checks recorded settlements during a replay at the cost of what changed since the last.

    ``check_recorded`` rebuilds every arena's settlement input from the whole fold, so a
    replay that meets a settlement every few thousand events would pay O(ledger) each time.
    The tracker keeps those inputs instead: the replay calls ``note`` with every event
    before it folds it, naming the submission, payment, credit or arena the event touches,
    and each check recomputes only the touched entries (with the same functions the full
    build uses) before settling through ``machines.settlement_rules.RewardScan`` and running fee
    sums.

    On a fold that archives finished submissions, the tracker is one of its
    ``archive_listeners``: it takes a finished submission's input, payment and credit from
    the record as it leaves memory, adds the fee amounts to the arena's sums and keeps no
    entry for them, and its reward scans drop the walked prefix (``keep_walked``). What it
    holds then follows live state and the claims, as the fold's memory does; it reads the
    archive back only when a change reaches what it dropped (a payment released after its
    submission finished; an arrival or a margin that reaches a scan's dropped prefix).

    It trusts nothing it cannot re-derive: until its first check, after ``dirty_entries_max``
    touched entries, and after any error or mismatch, it rebuilds from the fold. A check that
    does not match, or that raises, is answered by ``check_recorded`` itself, so the field or
    error a divergence names is exactly the full recomputation's.
    """

    #: Touched entries kept between two checks before the tracker rebuilds from the fold
    #: instead (bounds its memory on a ledger that settles rarely or never).
    dirty_entries_max = 100_000
    #: Walked submissions a reward scan keeps behind its walk on an archiving fold (rolling
    #: back further, e.g. for a requeue of a long-finished NO_DECISION, rebuilds the arena).
    #: At 256 the 1M-event benchmark ledger rebuilds no arena after the first check, and
    #: each scan holds about 500 inputs where 4,096 let them grow past 4,000.
    keep_walked = 256
    #: Walked submissions between two rollback points of a reward scan.
    mark_every_walked = 64

    def __init__(self, fold: LedgerFold) -> None:
        self.fold = fold
        #: Reward scans built from the whole fold (the first check, and stale scans).
        self.arena_builds = 0
        self._archiving = fold.archive is not None
        self._scans: dict[str, Any] = {}
        # Per-key fee rows (arena, amount, released) / (arena, amount) of what the fold holds
        # in memory; an archived one's amounts are only in ``_fees``.
        self._payments: dict[str, tuple[str, int, bool]] = {}
        self._credits: dict[str, tuple[str, int]] = {}
        self._credit_of: dict[str, str] = {}
        self._fallback: dict[str, set[str]] = {}  # arena -> inputs that read its incumbent
        self._fees: dict[str, list[int]] = {}
        self._subs: set[str] = set()
        self._arenas: set[str] = set()
        self._payment_refs: set[str] = set()
        self._credit_ids: set[str] = set()
        self._rebuild = True
        #: settlement-rules.v2's input: per arena, its control digests and the states of
        #: the submissions of those digests (a control's runs), kept as ``note`` and the
        #: archive report them; an arena whose digests changed is read from the fold again.
        self._control_subs: dict[str, tuple[frozenset[str], dict[str, SubmissionState]]] = {}
        #: Every touched set, for the steps that size or empty them all.
        self._touched = (self._subs, self._arenas, self._payment_refs, self._credit_ids)
        by_category = {
            "submission": self._subs,
            "payment": self._payment_refs,
            "credit": self._credit_ids,
            "arena": self._arenas,
        }
        #: Event class → (length of its stream's category prefix, the touched set its
        #: stream's id goes to): what ``note`` does for every class but AttemptDecided.
        #: The replay does the same inline (one set add per event, no call), and calls
        #: ``bound`` now and then in place of note's size check.
        self.touches: dict[type, tuple[int, set[str]]] = {}
        for kind in CATALOGUE.types:
            category = CATALOGUE.model(kind).category
            if category in by_category:
                self.touches[CATALOGUE.model(kind)] = (len(category) + 1, by_category[category])
        fold.archive_listeners.append(self._archived)

    def note(self, stream: str, event: Any) -> None:
        """Records which settlement input ``event``, about to be folded on ``stream``, may
        change.

        Call it before the fold applies the event: a submission the event finishes is
        archived while it is applied, and the tracker takes it whole from the record then
        (``_archived``), which a later note would undo. A noted event the fold refuses
        costs nothing but a recomputation: a noted entry is read back from the fold.
        """
        found = self.touches.get(type(event))
        if found is not None:
            cut, touched = found
            touched.add(stream[cut:])
            if len(touched) > self.dirty_entries_max:
                self._forget()
        elif type(event) is AttemptDecided:
            # Of the attempt events only a decision reaches settlement (the speedup of a
            # QUALIFIED submission, read through its attempt).
            attempt = self.fold.attempt(stream[8:])
            if attempt is not None:
                self._subs.add(attempt.submission_id)

    def bound(self) -> None:
        """Forgets everything (the next check rebuilds) once too many entries are touched:
        ``note``'s size check, for a caller that touches the sets itself."""
        if any(len(entries) > self.dirty_entries_max for entries in self._touched):
            self._forget()

    def check_recorded(
        self, policy: EmissionPolicySet | None, event: SettlementComputed, payload: dict[str, Any]
    ) -> tuple[str, Any, Any] | None:
        """Is ``check_recorded(fold, policy, event, payload)``, incrementally."""
        fold = self.fold
        if event.as_of_position != fold.position:
            return ("as_of_position", event.as_of_position, fold.position)
        try:
            expected = self.payload(policy, event.block)
        except LedgerError:
            expected = None
        if expected is not None and not rules.diff_settlement_payload(expected, payload):
            return None
        self._forget()
        difference = check_recorded(fold, policy, event, payload)
        if difference is None:  # the full projection accepts what the tracker did not: a bug
            _log.warning("settlement_tracker_disagreed", position=fold.position + 1)
        return difference

    def payload(self, policy: EmissionPolicySet | None, block: int) -> dict[str, Any]:
        """Returns the SettlementComputed payload ``compute`` gives for the fold as it stands."""
        if policy is None:
            settlement_input(self.fold, policy, block)  # raises the refusal
        assert policy is not None
        emission = rules.EmissionPolicy.from_event(policy)
        rebuilding, touched = self._rebuild, set(self._subs) if emission.gated else set()
        self._catch_up()
        shares: dict[str, int] = {}
        rewarded: list[Any] = []
        for arena in self.fold.arenas():
            scan = self._scans.get(arena.arena_id)
            if scan is None or scan.stale:  # not announced by note(), or past what it kept
                self._build(arena.arena_id)
                scan = self._scans[arena.arena_id]
            shares[arena.arena_id] = scan.arena.emission_share_ppm
            rewarded.extend(scan.rewarded())
        sums = {a: row[:3] for a, row in self._fees.items() if row[3]}
        fees = rules.fee_summary(shares, sums)
        gate = self._control_runs(rebuilding, touched) if emission.gated else None
        settlement = rules.settle_assessed(
            block, self.fold.position, emission, shares, rewarded, fees, gate
        )
        return rules.settlement_payload(settlement)

    def _control_runs(
        self, rebuilding: bool, touched: set[str]
    ) -> dict[str, tuple[rules.ControlRun, ...]]:
        """Is ``fold_control_runs(self.fold)`` from the kept control submissions: each check
        reads the submissions touched since the last one, not every arena's whole report."""
        fold, kept = self.fold, self._control_subs
        if rebuilding:
            kept.clear()  # the touches were forgotten: read every arena from the fold again
        for sid in touched:
            sub = fold.submission(sid)
            if sub is not None:
                self._keep_control_sub(sub)
        arenas = {arena.arena_id: arena for arena in fold.arenas()}
        for arena_id, arena in arenas.items():
            digests = frozenset(c.delta_digest for c in arena.controls.values())
            found = kept.get(arena_id)
            if found is None or found[0] != digests:
                subs = fold.submissions(arena_id) if digests else ()
                kept[arena_id] = (digests, {
                    sub.submission_id: sub for sub in subs if sub.delta_digest in digests
                })
        return control_runs(
            arenas, lambda a: control_report(arenas[a].controls, kept[a][1].values())
        )

    def _keep_control_sub(self, sub: SubmissionState) -> None:
        """Keeps ``sub``'s latest state when its delta is one of its arena's controls."""
        found = self._control_subs.get(sub.arena_id)
        if found is not None and sub.delta_digest in found[0]:
            found[1][sub.submission_id] = sub

    # --- keeping the inputs ---------------------------------------------------------------

    def _forget(self) -> None:
        self._rebuild = True
        self._untouch_all()

    def _untouch_all(self) -> None:
        for touched in self._touched:
            touched.clear()

    def _archived(self, record: Finished) -> None:
        """Takes what settlement reads of a submission as the fold archives it.

        The record holds the submission's final state, reward group, attempts, payment and
        credit; reading them back from the archive at the next check would cost a read each.
        So the touches noted for them (the event that finished the submission was noted
        before it was folded) are dropped: a check must not read them back.
        """
        sub = record.state
        sid = sub.submission_id
        self._subs.discard(sid)
        self._keep_control_sub(sub)
        payment, credit = record.payment, record.credit
        if payment is not None:
            self._payment_refs.discard(payment.payment_ref)
        if credit is not None:
            self._credit_ids.discard(credit.credit_id)
        if self._rebuild:
            return  # the next check rebuilds from the fold, archive included
        scan = self._scans.get(sub.arena_id)
        arena = self.fold.arena(sub.arena_id)
        if scan is not None and arena is not None:  # else the next check builds the arena
            self._put_input(scan, sub.arena_id, sid, _finished_input(arena, record), record.group)
        if payment is not None or credit is not None:
            self._account_finished(record)
        self._credit_of.pop(sid, None)

    def _account_finished(self, record: Finished) -> None:
        """Moves an archived submission's payment and credit from the per-key rows to the sums."""
        payment, credit = record.payment, record.credit
        if payment is not None:
            self._fee_swap(self._payments, payment.payment_ref, _payment_row(payment), keep=False)
        if credit is not None:
            # The fold archives a spent credit with the submission it paid.
            row = _credit_row(credit, record.state)
            self._fee_swap(self._credits, credit.credit_id, row, keep=False)

    def _archived_rows(self, space: str, key: str) -> tuple[Any, ...] | None:
        """Returns the fee row the sums took for an archived payment or credit, or None.

        A payment or credit the fold changed after its submission was archived is back in
        memory; the amounts its record added to the sums when archived must come out first.
        """
        if not self._archiving:
            return None
        record = self.fold.finished_record(space, key)
        if record is None:
            return None
        if space == "payment":
            payment = record.payment
            return None if payment is None else _payment_row(payment)
        credit = record.credit
        return None if credit is None else _credit_row(credit, record.state)

    def _catch_up(self) -> None:
        fold = self.fold
        if self._rebuild:
            self._untouch_all()  # the rebuild reads everything as it stands now
            self._rebuild_all()
        self._rebuild = True  # until this catch-up completes
        for arena_id in self._arenas:
            self._refresh_arena(arena_id)
        for sid in self._subs:
            sub = fold.submission(sid)
            if sub is None:
                continue
            credit_id = self._credit_of.get(sid)
            if credit_id is not None:
                self._credit_ids.add(credit_id)  # its amount is the submission's fee
            scan = self._scans.get(sub.arena_id)
            if scan is None:
                self._build(sub.arena_id)
            else:
                self._put(scan, fold.arena(sub.arena_id), sub)
        for ref in self._payment_refs:
            payment = fold.payment(ref)
            # What _payment_record(payment) holds, without building (and re-checking) a
            # PaymentRecord per touched payment: the fold's state passed the event schema.
            found = None if payment is None else _payment_row(payment)
            self._fee_swap(self._payments, ref, found, "payment")
        for credit_id in self._credit_ids:
            self._fee_swap(self._credits, credit_id, self._credit_found(credit_id), "credit")
        self._untouch_all()
        self._rebuild = False

    def _rebuild_all(self) -> None:
        """Builds every scan and the fee sums from the fold, in one pass over its archive."""
        fold = self.fold
        self._scans.clear()
        self._payments.clear()
        self._credits.clear()
        self._credit_of.clear()
        self._fallback.clear()
        self._fees.clear()
        arenas = {arena.arena_id: arena for arena in fold.arenas()}
        for arena_id, arena in arenas.items():
            self._scans[arena_id] = self._new_scan(arena)
        for record in fold.finished_records():
            sub = record.state
            owner = arenas.get(sub.arena_id)
            if owner is not None:
                found = _finished_input(owner, record)
                scan = self._scans[sub.arena_id]
                self._put_input(scan, sub.arena_id, sub.submission_id, found, record.group)
            self._account_finished(record)
        for arena_id, arena in arenas.items():
            for sub in fold.held_submissions(arena_id):
                self._put(self._scans[arena_id], arena, sub)
        self.arena_builds += len(arenas)
        self._payment_refs.update(fold.held_payment_refs())
        self._credit_ids.update(fold.held_credit_ids())

    def _new_scan(self, arena: ArenaState) -> rules.RewardScan:
        keep = self.keep_walked if self._archiving else None
        return rules.RewardScan(
            _arena_header(arena), mark_every_walked=self.mark_every_walked, keep_walked=keep
        )

    def _build(self, arena_id: str) -> None:
        """Builds one arena's scan from the fold (none when the fold has no such arena)."""
        arena = self.fold.arena(arena_id)
        self._scans.pop(arena_id, None)
        self._fallback.pop(arena_id, None)
        if arena is None:
            return
        scan = self._new_scan(arena)
        for record in self.fold.finished_records(arena_id):
            sid = record.state.submission_id
            self._put_input(scan, arena_id, sid, _finished_input(arena, record), record.group)
        for sub in self.fold.held_submissions(arena_id):
            self._put(scan, arena, sub)
        self._scans[arena_id] = scan
        self.arena_builds += 1

    def _refresh_arena(self, arena_id: str) -> None:
        """Brings one arena's scan up to date after an arena event.

        An arena event can change the share and reward margin in force, and the reward
        group of a submission whose arrival recorded none (it falls back to the arena's
        current incumbent; the fold records one for every arrival).
        """
        scan = self._scans.get(arena_id)
        arena = self.fold.arena(arena_id)
        if scan is None or arena is None:
            self._build(arena_id)
            return
        scan.set_arena(_arena_header(arena))
        for sid in list(self._fallback.get(arena_id, ())):
            sub = self.fold.submission(sid)
            if sub is not None:
                self._put(scan, arena, sub)

    def _put(self, scan: Any, arena: Any, sub: Any) -> None:
        sid = sub.submission_id
        found = _submission_input(self.fold, arena, sub)
        group = None if found is None else self.fold.reward_group(sid)
        self._put_input(scan, arena.arena_id, sid, found, group)

    def _put_input(
        self, scan: Any, arena_id: str, sid: str, found: Any, group: str | None
    ) -> None:
        scan.put(sid, found)
        if found is not None and not group:
            self._fallback.setdefault(arena_id, set()).add(sid)
        elif arena_id in self._fallback:
            self._fallback[arena_id].discard(sid)

    def _credit_found(self, credit_id: str) -> tuple[str, int] | None:
        credit = self.fold.credit(credit_id)
        if credit is None:
            return None
        if credit.submission_id is None:
            return None
        self._credit_of[credit.submission_id] = credit_id
        return _credit_row(credit, self.fold.submission(credit.submission_id))

    def _fee_swap(
        self,
        table: dict[str, Any],
        key: str,
        found: tuple[Any, ...] | None,
        space: str = "",
        *,
        keep: bool = True,
    ) -> None:
        """Replaces one payment's or credit's amounts in the sums.

        With ``space``, a key without a row may be an archived one whose amounts the sums
        took when its submission was archived; those come out instead. Without ``keep``
        the new amounts go into the sums only, with no row (an archived submission's).
        """
        old = table.pop(key, None)
        if old is None and space:
            old = self._archived_rows(space, key)
        if found is not None and keep:
            table[key] = found
        if old == found:
            return  # the sums already hold these amounts (most payments, as they finish)
        if old is not None:
            self._fee_add(old, -1)
        if found is not None:
            self._fee_add(found, 1)

    def _fee_add(self, record: tuple[Any, ...], sign: int) -> None:
        row = self._fees.setdefault(record[0], [0, 0, 0, 0])
        amount = sign * record[1]
        if len(record) == 2:  # a spent credit
            row[2] += amount
        else:
            row[0] += amount
            if record[2]:
                row[1] += amount
        row[3] += sign


def _payment_row(payment: Any) -> tuple[str, int, bool]:
    """Returns what ``_payment_record(payment)`` holds, as the tracker's fee row."""
    return (payment.arena_id, payment.amount_rao, payment.status == "RELEASED")


def _credit_row(credit: Any, sub: Any) -> tuple[str, int] | None:
    """Returns (arena, amount) of a credit spent on ``sub`` (its fee), or None: not spent,
    or on a submission without a fee."""
    if credit.submission_id is None or sub is None or sub.fee is None:
        return None
    return (sub.arena_id, sub.fee.amount_rao)

"""Turns generated operations into well-formed events for a LedgerFold: the world the fold's
property tests and the settlement tracker's incremental tests draw from.
"""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from machines import attempt, samples
from machines.arithmetic import Decision
from machines.intake import Admission
from machines.projection import LedgerFold
from vocabulary.events import (
    FAULT_CODES,
    ArenaRetired,
    ControlRegistered,
    CreditGranted,
    CreditSpent,
    Event,
    HoldReleased,
    InfrastructureFault,
    PaymentConsumed,
    PaymentReleased,
    QualificationStarted,
    SubmissionAdmitted,
    SubmissionExpired,
    SubmissionHeld,
    SubmissionRejected,
    SubmissionRequeued,
    SubmissionResolved,
)

ARENA = "a1"
HOTKEYS = ("5A", "5B")
STREAMS = ("arena-a1", "attempt-t0", "payment-p0", "credit-k0", "settlement")
#: (emission_share_ppm, reward_margin) a re-commission may set: settlement reads both, so a
#: tracker that kept the old ones would disagree with the full recomputation.
SHARES = ((500_000, None), (250_000, "0.05"), (1_000_000, "0"))

op = st.one_of(
    st.tuples(st.just("commission"), st.sampled_from([0, 0, 5]), st.integers(2, 5),
              st.sampled_from([None, "0.01"]), st.sampled_from([20, 500_000]),
              st.integers(0, len(SHARES) - 1)),
    st.tuples(st.just("arrive"), st.sampled_from(HOTKEYS), st.integers(0, 3),
              st.integers(0, 800), st.sampled_from([None, None, "p0", "p1"])),
    st.tuples(st.just("intake"), st.integers(0, 9), st.sampled_from([None, 5, 1])),
    st.tuples(st.just("claim"), st.integers(0, 9), st.booleans(), st.booleans()),
    *[st.tuples(st.just("window"), st.integers(0, 3), st.booleans(), st.integers(1, 5),
                st.integers(1, 2), st.integers(80, 110), st.booleans())] * 4,
    *[st.tuples(st.just("decide"), st.integers(0, 3), st.booleans())] * 2,
    *[st.tuples(st.just("resolve"), st.integers(0, 9), st.booleans())] * 2,
    *[st.tuples(st.just("audit"), st.integers(0, 3), st.integers(0, 1), st.integers(0, 12),
                st.integers(0, 1))] * 2,
    *[st.tuples(st.just("quality"), st.integers(0, 3), st.booleans(), st.booleans())] * 2,
    st.tuples(st.just("fault"), st.integers(0, 3), st.sampled_from(FAULT_CODES)),
    st.tuples(st.just("decide"), st.integers(0, 3), st.booleans()),
    st.tuples(st.just("resolve"), st.integers(0, 9), st.booleans()),
    st.tuples(st.just("ops"), st.integers(0, 9),
              st.sampled_from(["hold", "release", "requeue", "expire"]), st.integers(0, 10**6)),
    st.tuples(st.just("money"), st.integers(0, 9),
              st.sampled_from(["pay", "unpay", "grant", "spend"])),
    st.tuples(st.just("misc"), st.sampled_from(["retire", "control", "stray"]),
              st.sampled_from(STREAMS)),
)

Built = list[tuple[str, Event]]


class World:
    """Turns ops into (stream, event) pairs, reading the fold for well-formed choices."""

    def __init__(self, fold: LedgerFold) -> None:
        self.fold = fold
        self.subs: list[str] = []
        self.attempts: list[str] = []

    def sid(self, index: int) -> str | None:
        return self.subs[index % len(self.subs)] if self.subs else None

    def attempt_id(self, index: int) -> str:
        # Index 0 may pick any attempt (decided ones included); others prefer live ones.
        live = [a for a in self.attempts if isinstance(self.fold.attempt(a), attempt.AttemptState)]
        pool = self.attempts if index == 0 or not live else live
        return pool[index % len(pool)] if pool else "t9"

    def build(self, item: tuple[Any, ...]) -> Built:
        kind = item[0]
        return getattr(self, "_" + kind)(*item[1:])  # type: ignore[no-any-return]

    def _commission(
        self, fee: int, windows: int, futility: str | None, sla: int, shares: int = 0
    ) -> Built:
        z = {str(k): "1.5" for k in range(windows // 2 + 1, windows + 1)}
        share, margin = SHARES[shares]
        sealed = samples.policy(windows=windows, z=z, futility_margin=futility, sla_blocks=sla,
                                audit={"bar": "0.99", "min_calls": 4},
                                audit_control_delta_digests=[samples.hex64("delta:c0")],
                                **({} if margin is None else {"reward_margin": margin}))
        return [(f"arena-{ARENA}", samples.commissioned(ARENA, fee_rao=fee, sealed=sealed,
                                                        emission_share_ppm=share))]

    def _arrive(self, hotkey: str, content: int, block: int, ref: str | None) -> Built:
        event = samples.arrived(ARENA, hotkey=hotkey, content=f"c{content}", block=block,
                                payment_ref=ref)
        self.subs.append(event.submission_id)
        return [(f"submission-{event.submission_id}", event)]

    def _intake(self, index: int, paid: int | None) -> Built:
        sid = self.sid(index)
        if sid is None or self.fold.submission(sid) is None or self.fold.arena(ARENA) is None:
            return []
        outcome = self.fold.intake(sid, paid)
        if isinstance(outcome, Admission):
            fee = {"kind": outcome.kind, "ref": outcome.ref, "amount_rao": outcome.amount_rao}
            event: Event = SubmissionAdmitted.model_validate({"block": 900, "fee": fee})
        else:
            event = SubmissionRejected(block=900, reason=outcome.reason)
        return [(f"submission-{sid}", event)]

    def _claim(self, index: int, guided: bool, calibrate: bool) -> Built:
        state = self.fold.arena(ARENA)
        queued = self.fold.queue(ARENA)
        if state is None:
            return []
        sid = queued[index % len(queued)].submission_id if guided and queued else self.sid(index)
        if sid is None:
            return []
        attempt_id = f"t{len(self.attempts)}"
        self.attempts.append(attempt_id)
        plan = "calibration_observation" if calibrate else "normal"
        claim = samples.claimed(sid, state.commission_digest, attempt_id=attempt_id,
                                arena_id=ARENA, plan=plan)
        built: Built = [(f"attempt-{attempt_id}", claim)]
        if guided or index % 2:
            built.append((f"submission-{sid}", QualificationStarted(attempt_id=attempt_id)))
        return built

    def _window(
        self, index: int, guided: bool, window: int, orientation: int, cost: int, same: bool
    ) -> Built:
        attempt_id = self.attempt_id(index)
        state = self.fold.attempt(attempt_id)
        if guided and isinstance(state, attempt.AttemptState):
            window = state.last_window + 1
            orientation = state.params.orientation(min(window, 5))
        tokens = None if same or guided else 1
        cost = cost - 10 if guided else cost
        event = samples.window(min(window, 5), orientation, 100, cost, candidate_tokens=tokens)
        return [(f"attempt-{attempt_id}", event)]

    def _audit(self, index: int, rank: int, calls: int, violations: int) -> Built:
        event = samples.audit(rank=rank, calls=calls, violations=min(violations, calls))
        return [(f"attempt-{self.attempt_id(index)}", event)]

    def _quality(self, index: int, drift_ok: bool, regression: bool) -> Built:
        event = samples.quality(drift_within_envelope=drift_ok, regression=regression)
        return [(f"attempt-{self.attempt_id(index)}", event)]

    def _fault(self, index: int, code: str) -> Built:
        fault = InfrastructureFault(code=code, stage="speed", detail="")
        return [(f"attempt-{self.attempt_id(index)}", fault)]

    def _decide(self, index: int, derived: bool) -> Built:
        attempt_id = self.attempt_id(index)
        decision = self.fold.derive_decision(attempt_id) if derived else None
        if decision is None:
            decision = Decision("FAIL", "futility", "COMPLETE", None, None, 1)
        return [(f"attempt-{attempt_id}", samples.decided(decision, block=2_000))]

    def _resolve(self, index: int, derived: bool) -> Built:
        sid = self.sid(index)
        sub = None if sid is None else self.fold.submission(sid)
        if sub is None or sub.attempt_id is None:
            return []
        decision = self.fold.derive_decision(sub.attempt_id) if derived else None
        fields = ("PASS", "", "COMPLETE") if decision is None else (
            decision.verdict, decision.reason, decision.disposition
        )
        event = SubmissionResolved.model_validate(
            dict(zip(("attempt_id", "verdict", "reason", "disposition"),
                     (sub.attempt_id, *fields), strict=True))
        )
        return [(f"submission-{sid}", event)]

    def _ops(self, index: int, what: str, block: int) -> Built:
        sid = self.sid(index)
        if sid is None:
            return []
        event: Event = {
            "hold": SubmissionHeld(reason="ops", block=block),
            "release": HoldReleased(reason="ok", block=block, operator="5Op"),
            "requeue": SubmissionRequeued(reason="ops", block=block),
            "expire": SubmissionExpired(block=block, reason="sla_expired"),
        }[what]
        return [(f"submission-{sid}", event)]

    def _money(self, index: int, what: str) -> Built:
        sid = self.sid(index) or "0" * 64
        if what == "pay":
            return [("payment-p0", PaymentConsumed(payment_ref="p0", submission_id=sid,
                                                   arena_id=ARENA, amount_rao=5))]
        if what == "unpay":
            return [("payment-p0", PaymentReleased(submission_id=sid, reason="refund"))]
        if what == "grant":
            grant = CreditGranted(credit_id="k0", hotkey=HOTKEYS[index % 2], amount_rao=5, note="")
            return [("credit-k0", grant)]
        return [("credit-k0", CreditSpent(submission_id=sid))]

    def _misc(self, what: str, stream: str) -> Built:
        if what == "retire":
            return [(f"arena-{ARENA}", ArenaRetired(block=5, reason="done"))]
        if what == "control":
            return [(f"arena-{ARENA}", ControlRegistered(
                control_id="ctl", kind="identity", delta_digest=samples.hex64("delta:c1"),
                expected_verdict="PASS"))]
        return [(stream, samples.window(1, 1, 1, 1))]


#: Every sequence starts from a commissioned arena with a few queued submissions and a claim,
#: so the random part mostly exercises later states rather than "stream not started".
PRELUDE: list[tuple[Any, ...]] = [
    ("commission", 0, 4, None, 500_000),
    *[("arrive", HOTKEYS[n % 2], n, 100 + n, None) for n in range(3)],
    *[("intake", n, None) for n in range(3)],
    ("claim", 0, True, False),
]

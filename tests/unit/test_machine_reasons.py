"""Reaches every reason code of machines.reasons at least once, each through a real scenario."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

import pytest

from machines import arena, samples, settlement_rules
from machines.arithmetic import Decision
from machines.reasons import KINDS, REASONS, codes_of_kind, describe, duplicate_reason
from machines.refusal import Refusal
from machines.scenario import Scenario
from vocabulary.events import (
    FAULT_CODES,
    ArenaRetired,
    CalibrationConcluded,
    ControlRegistered,
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
    SubmissionRequeued,
    SubmissionResolved,
)

BILLION = 1_000_000_000
WORKED = samples.WORKED_EXAMPLE_COSTS
SLOW = ((BILLION, 1_040_000_000),) * 4
FLAT = ((BILLION, 998_000_000),) * 4


def _world(fee: int = 0, **policy: Any) -> tuple[Scenario, str]:
    """Returns a scenario with an arena and one QUEUED submission."""
    sc = Scenario()
    sc.commission(fee_rao=fee, sealed=samples.policy(**policy))
    return sc, sc.arrive(payment_ref="pay-1", paid_rao=fee) if fee else sc.arrive()


def _decide(sc: Scenario, stream: str, event: Event) -> str:
    refusal = sc.fold.decide(stream, event)
    assert refusal is not None, f"{event.event_type} on {stream} was accepted"
    return refusal.code


def _in_attempt(costs: tuple[tuple[int, int], ...], *events: Event, **policy: Any) -> Scenario:
    sc, sid = _world(**policy)
    sc.claim(sid, "att-1")
    sc.measure("att-1", costs)
    if events:
        sc.append("attempt-att-1", *events)
    return sc


def _noisy_verdict() -> str:
    """Returns the reason of a paired-windows.v2 attempt whose orientation-1 windows differ
    by far more than the sealed σw = 0.01 allows (ln 0.9 − ln 1.0, T ≈ 55.5 > 10.83)."""
    sc = Scenario()
    sc.commission(fee_rao=0, sealed=samples.policy_v2(futility_margin="0.05"))
    sid = sc.arrive()
    sub = sc.evaluate(sid, "att-1", ((BILLION, 900_000_000), (BILLION, BILLION)))
    assert sub.status == "QUEUED"  # REQUEUE: measured again on a later attempt
    return sc.fold.attempt("att-1").decision.reason  # type: ignore[union-attr]


def _verdict(costs: tuple[tuple[int, int], ...], *events: Event, **policy: Any) -> str:
    sc, sid = _world(**policy)
    sub = sc.evaluate(sid, "att-1", costs, *events)
    return sub.reason or ""


def _rejection(setup: Callable[[Scenario], None], fee: int = BILLION, **arrival: object) -> str:
    sc = Scenario()
    sc.commission(fee_rao=fee)
    setup(sc)
    sid = sc.arrive(**arrival)  # type: ignore[arg-type]
    sub = sc.fold.submission(sid)
    assert sub is not None and sub.rejection is not None
    return sub.rejection


def _admitted_then(sc: Scenario) -> None:
    sc.arrive(payment_ref="pay-1", paid_rao=BILLION, content="first")


def _failed_then(sc: Scenario) -> None:
    first = sc.arrive(payment_ref="pay-0", paid_rao=BILLION, content="same")
    sc.evaluate(first, "att-0", SLOW)


def _sixteen(sc: Scenario) -> None:
    for n in range(16):
        sc.arrive(payment_ref=f"pay-{n}", paid_rao=BILLION, content=f"c{n}")


def _retired(sc: Scenario) -> None:
    sc.append("arena-mlp-arena", ArenaRetired(block=1, reason="done"))


class _Unknown(Event):
    event_type: ClassVar[str] = "Unknown"
    category: ClassVar[str | None] = "arena"


def _fault(code: str) -> str:
    fault = InfrastructureFault(code=code, stage="speed", detail="")
    return _verdict(WORKED[:1], fault)


def _retry_budget() -> str:
    sc, sid = _world()
    fault = InfrastructureFault(code="adapter_request_failed", stage="run", detail="")
    for n in range(4):
        sub = sc.evaluate(sid, f"att-{n}", (), fault)
    return sub.hold_reason or ""


def _expiry() -> str:
    sc, sid = _world()
    sc.append(f"submission-{sid}", SubmissionExpired(block=501_000, reason="sla_expired"))
    sub = sc.fold.submission(sid)
    assert sub is not None and sub.status == "EXPIRED"
    return "sla_expired"


def _fee_for_a_waived_admission() -> str:
    sc, sid = _world()  # no fee: admitted as waived
    consumed = PaymentConsumed(payment_ref="pay-2", submission_id=sid, arena_id="mlp-arena",
                               amount_rao=BILLION)
    return _decide(sc, "payment-pay-2", consumed)


def _claim_of_an_unpaid_admission() -> str:
    sc = Scenario()
    state = sc.commission()
    arrived = samples.arrived(payment_ref="pay-1")
    sid = arrived.submission_id
    sc.append(f"submission-{sid}", arrived)
    fee = {"kind": "payment", "ref": "pay-1", "amount_rao": BILLION}
    sc.append(f"submission-{sid}", SubmissionAdmitted.model_validate({"block": 1, "fee": fee}))
    claim = samples.claimed(sid, state.commission_digest, attempt_id="att-1")
    return _decide(sc, "attempt-att-1", claim)


def _refusal_scenarios() -> dict[str, Callable[[], str]]:
    sid_of = samples.arrived().submission_id
    w = samples.window
    sub_stream = f"submission-{sid_of}"

    def queued() -> tuple[Scenario, str]:
        return _world()

    def resolved(reason: str = "candidate_slower", disposition: str = "COMPLETE") -> Event:
        return SubmissionResolved.model_validate(
            {"attempt_id": "att-1", "verdict": "FAIL", "reason": reason,
             "disposition": disposition}
        )

    def decided_slow() -> Scenario:
        sc = _in_attempt(SLOW)
        sc.decide("att-1")
        return sc

    def claim(sc: Scenario, sid: str, **fields: object) -> Event:
        state = sc.fold.arena("mlp-arena")
        assert state is not None
        return samples.claimed(sid, state.commission_digest, attempt_id="att-2", **fields)  # type: ignore[arg-type]

    def unadmitted() -> tuple[Scenario, str]:
        sc = Scenario()
        sc.commission()
        event = samples.arrived(content="raw")
        sc.append(f"submission-{event.submission_id}", event)
        return sc, event.submission_id

    control = ControlRegistered(control_id="c1", kind="identity", delta_digest="d" * 64,
                                expected_verdict="PASS")
    scenarios: dict[str, Callable[[], str]] = {
        "stream_not_started": lambda: _decide(queued()[0], "attempt-x", w(1, 1, 1, 1)),
        "stream_already_started": lambda: _decide(queued()[0], sub_stream, samples.arrived()),
        "terminal_state": lambda: _decide(decided_slow(), "attempt-att-1", samples.quality()),
        "transition_not_allowed": lambda: _decide(
            queued()[0], sub_stream, SubmissionRequeued(reason="x", block=1)
        ),
        "wrong_stream": lambda: _decide(queued()[0], "arena-mlp-arena", w(1, 1, 1, 1)),
        "stream_id_mismatch": lambda: _decide(queued()[0], "arena-zzz", samples.commissioned()),
        "event_type_unknown": lambda: _decide(queued()[0], "arena-mlp-arena", _Unknown()),
        "arena_unknown": lambda: _decide(
            Scenario(), sub_stream.replace(sid_of, samples.arrived("nowhere").submission_id),
            samples.arrived("nowhere"),
        ),
        "arena_id_mismatch": lambda: _pure_arena_refusal(),
        "control_id_reused": lambda: _twice(control),
        "submission_id_mismatch": lambda: _forged_arrival(),
        "intake_mismatch": lambda: _decide(
            unadmitted()[0], f"submission-{unadmitted()[1]}",
            SubmissionAdmitted.model_validate(
                {"block": 1, "fee": {"kind": "waived", "ref": "", "amount_rao": 0}}
            ),
        ),
        "already_held": lambda: _held_twice(),
        "sla_not_reached": lambda: _decide(
            queued()[0], sub_stream, SubmissionExpired(block=1_001, reason="sla_expired")
        ),
        "attempt_mismatch": lambda: _decide(_in_attempt(SLOW), sub_stream,
                                            resolved().model_copy(update={"attempt_id": "zz"})),
        "attempt_not_decided": lambda: _decide(_in_attempt(SLOW), sub_stream, resolved()),
        "attempt_not_claimed": lambda: _decide(
            queued()[0], sub_stream, QualificationStarted(attempt_id="att-unclaimed")
        ),
        "resolution_mismatch": lambda: _decide(
            decided_slow(), sub_stream, resolved("speed_threshold_not_met")
        ),
        "disposition_invalid": lambda: _decide(
            decided_slow(), sub_stream, resolved(disposition="HOLD")
        ),
        "submission_unknown": lambda: _decide(
            queued()[0], "attempt-att-2", claim(queued()[0], "9" * 64)
        ),
        "arena_mismatch": lambda: _decide(
            queued()[0], "attempt-att-2", claim(queued()[0], sid_of, arena_id="other")
        ),
        "submission_not_queued": lambda: _decide(
            unadmitted()[0], "attempt-att-2", claim(unadmitted()[0], unadmitted()[1])
        ),
        "commission_not_current": lambda: _decide(
            queued()[0], "attempt-att-2",
            samples.claimed(sid_of, "0" * 64, attempt_id="att-2"),
        ),
        "calibration_observation_not_listed": lambda: _decide(
            queued()[0], "attempt-att-2",
            claim(queued()[0], sid_of, plan="calibration_observation"),
        ),
        "window_past_limit": lambda: _decide(
            _in_attempt(WORKED[:2], windows=2, z={"2": "2"}),
            "attempt-att-1", w(3, 2, 1, 1),
        ),
        "window_after_speed_decided": lambda: _decide(
            _in_attempt(WORKED), "attempt-att-1", w(4, 2, 1, 1)
        ),
        "window_repeated": lambda: _decide(_in_attempt(WORKED[:1]), "attempt-att-1", w(1, 1, 1, 1)),
        "window_gap": lambda: _decide(_in_attempt(WORKED[:1]), "attempt-att-1", w(3, 2, 1, 1)),
        "window_orientation_wrong": lambda: _decide(
            _in_attempt(WORKED[:1]), "attempt-att-1", w(2, 2, 1, 1)
        ),
        "output_tokens_differ": lambda: _decide(
            _in_attempt(WORKED[:1]), "attempt-att-1", w(2, 1, 1, 1, candidate_tokens=3)
        ),
        "audit_out_of_stage": lambda: _decide(_in_attempt(SLOW), "attempt-att-1", samples.audit()),
        "audit_node_repeated": lambda: _decide(
            _in_attempt(WORKED, samples.audit()), "attempt-att-1", samples.audit()
        ),
        "audit_counts_inconsistent": lambda: _decide(
            _in_attempt(WORKED), "attempt-att-1", samples.audit(calls=1, violations=2)
        ),
        "audit_not_passed": lambda: _decide(
            _in_attempt(WORKED), "attempt-att-1", samples.quality()
        ),
        "quality_out_of_stage": lambda: _decide(
            _in_attempt(WORKED[:1]), "attempt-att-1", samples.quality()
        ),
        "quality_repeated": lambda: _decide(
            _in_attempt(WORKED, samples.audit(), samples.quality()),
            "attempt-att-1", samples.quality(),
        ),
        "fault_recorded": lambda: _decide(
            _in_attempt(WORKED[:1], InfrastructureFault(code="engine_killed", stage="s",
                                                        detail="")),
            "attempt-att-1", w(2, 1, 1, 1),
        ),
        "decision_not_derived": lambda: _decide(
            _in_attempt(WORKED[:1]), "attempt-att-1",
            samples.decided(Decision("FAIL", "futility", "COMPLETE", None, None, 2)),
        ),
        "decision_mismatch": lambda: _decide(
            _in_attempt(SLOW), "attempt-att-1",
            samples.decided(Decision("FAIL", "futility", "COMPLETE", None, None, 2)),
        ),
        "rules_version_mismatch": lambda: _decide(
            _in_attempt(SLOW), "attempt-att-1",
            samples.decided(_derived(_in_attempt(SLOW)), rules_version="paired-windows.v2"),
        ),
        "decided_before_claim": lambda: _decide(
            _in_attempt(SLOW), "attempt-att-1",
            samples.decided(_derived(_in_attempt(SLOW)), block=1),
        ),
        "credit_hotkey_mismatch": lambda: _foreign_credit(),
        "fee_mismatch": lambda: _fee_for_a_waived_admission(),
        "fee_unpaid": lambda: _claim_of_an_unpaid_admission(),
        "reward_margin_negative": lambda: _decide(
            Scenario(), "arena-mlp-arena",
            samples.commissioned(sealed=samples.policy(reward_margin="-0.5")),
        ),
        "pass_line_out_of_range": lambda: _decide(
            Scenario(), "arena-mlp-arena",
            samples.commissioned(sealed=samples.policy(windows=2, z={"2": "100000"})),
        ),
        "audit_bar_mismatch": lambda: _decide(
            _in_attempt(WORKED), "attempt-att-1", samples.audit().model_copy(update={"bar": "0.9"})
        ),
        "payment_submission_mismatch": lambda: _decide(
            _world(fee=BILLION)[0], "payment-pay-1",
            PaymentReleased(submission_id="9" * 64, reason="refund"),
        ),
        "calibration_target_mismatch": lambda: _decide(
            _world()[0], "calibration-cal-1",
            samples.calibration_started(arena=samples.commissioned(hardware={
                "gpu": "H100", "count": 1})),
        ),
        "calibration_window_out_of_order": lambda: _decide(
            _calibrating(0), "calibration-cal-1", samples.calibration_windows()[1]
        ),
        "calibration_incomplete": lambda: _decide(
            _calibrating(7), "calibration-cal-1", _concluded()
        ),
        "calibration_mismatch": lambda: _decide(
            _calibrating(8), "calibration-cal-1",
            _concluded().model_copy(update={"window_dof": 5}),
        ),
    }
    return scenarios


def _calibrating(windows: int) -> Scenario:
    """Returns a scenario whose calibration cal-1 of the arena has its first ``windows``
    windows of the worked example measured."""
    sc, _ = _world()
    started = samples.calibration_started(arena=samples.commissioned())
    sc.append("calibration-cal-1", started, *samples.calibration_windows()[:windows])
    return sc


def _concluded() -> CalibrationConcluded:
    """Returns the worked example's CalibrationConcluded (docs/calibration.md)."""
    return CalibrationConcluded(
        window_noise="0.013833", boot_noise="0.004926", window_noise_bound="0.032817",
        boot_noise_bound="0.048357", window_dof=4, boot_dof=2, seal_window_noise="0.0329",
        seal_boot_noise="0.0484", seal_policy_version="paired-windows.v2",
        concluded_block=300, rules_version="calibration.v1",
    )


def _derived(sc: Scenario) -> Decision:
    decision = sc.fold.derive_decision("att-1")
    assert decision is not None
    return decision


def _pure_arena_refusal() -> str:
    state = arena.start(samples.commissioned())
    refusal = arena.decide(state, samples.commissioned("other"))
    assert refusal is not None
    return refusal.code


def _twice(event: Event) -> str:
    sc, _ = _world()
    sc.append("arena-mlp-arena", event)
    return _decide(sc, "arena-mlp-arena", event)


def _forged_arrival() -> str:
    sc, _ = _world()
    forged = samples.arrived(content="forged").model_copy(update={"submission_id": "7" * 64})
    return _decide(sc, "submission-" + "7" * 64, forged)


def _held_twice() -> str:
    sc, sid = _world()
    sc.append(f"submission-{sid}", SubmissionHeld(reason="ops", block=2))
    code = _decide(sc, f"submission-{sid}", SubmissionHeld(reason="ops", block=3))
    sc.append(f"submission-{sid}", HoldReleased(reason="ok", block=4, operator="5Op"))
    return code


def _foreign_credit() -> str:
    sc, _ = _world(fee=BILLION)
    sc.credit("cr-1", "5Somebody")
    other = sc.arrive(content="other")
    return _decide(sc, "credit-cr-1", CreditSpent(submission_id=other))


def _suspension(runs: tuple[settlement_rules.ControlRun, ...]) -> str:
    """Settles one arena under settlement-rules.v2 (max age 100) at block 500 with ``runs``;
    returns the reason the arena was suspended for."""
    policy = settlement_rules.EmissionPolicy(10, "5Burn", "5Val", "settlement-rules.v2", 100)
    inputs = settlement_rules.SettlementInput(
        500, 1, policy, [settlement_rules.ArenaInput("a", 1_000, "0.015")],
        control_runs={"a": runs},
    )
    [suspension] = settlement_rules.compute_settlement(inputs).suspensions
    return suspension.reason


def _observed() -> dict[str, Callable[[], str]]:
    observed: dict[str, Callable[[], str]] = {
        "missing_eval_cost_payment": lambda: _rejection(lambda sc: None),
        "eval_cost_payment_used": lambda: _rejection(
            _admitted_then, payment_ref="pay-1", paid_rao=BILLION
        ),
        "eval_cost_payment_invalid": lambda: _rejection(
            lambda sc: None, payment_ref="pay-9", paid_rao=1
        ),
        "hotkey_epoch_admission_limit": lambda: _rejection(
            _sixteen, payment_ref="pay-x", paid_rao=BILLION
        ),
        "duplicate_of": lambda: _rejection(
            _failed_then, payment_ref="pay-1", paid_rao=BILLION, content="same", block=1_001
        ).split(":")[0],
        "arena_retired": lambda: _rejection(_retired, payment_ref="pay-1", paid_rao=BILLION),
        "futility": lambda: _verdict(SLOW, futility_margin="0.02"),
        "candidate_slower": lambda: _verdict(SLOW),
        "speed_threshold_not_met": lambda: _verdict(FLAT),
        "slot_audit_failed": lambda: _verdict(WORKED, samples.audit(violations=1)),
        "audit_not_covered": lambda: _verdict(WORKED, samples.audit(calls=2)),
        "quality_drift": lambda: _verdict(
            WORKED, samples.audit(), samples.quality(drift_within_envelope=False)
        ),
        "noise_above_seal": _noisy_verdict,
        "quality_regression": lambda: _verdict(
            WORKED, samples.audit(), samples.quality(regression=True)
        ),
        "retry_budget_exhausted": _retry_budget,
        "sla_expired": _expiry,
        "control_unexpected": lambda: _suspension((settlement_rules.ControlRun(450, ["c"]),)),
        "controls_stale": lambda: _suspension((settlement_rules.ControlRun(399),)),
    }
    for code in FAULT_CODES:
        observed[code] = lambda code=code: _fault(code)  # type: ignore[misc]
    observed.update(_refusal_scenarios())
    return observed


SCENARIOS = _observed()


def test_every_code_has_a_scenario() -> None:
    assert set(SCENARIOS) == set(REASONS)


@pytest.mark.parametrize("code", sorted(SCENARIOS))
def test_code_is_reachable(code: str) -> None:
    assert SCENARIOS[code]() == code


def test_refusal_accepts_only_refusal_codes() -> None:
    with pytest.raises(ValueError, match="not a refusal code"):
        Refusal("attempt", "SPEED", "WindowMeasured", "candidate_slower")
    with pytest.raises(ValueError, match="not a refusal code"):
        Refusal("attempt", "SPEED", "WindowMeasured", "brand_new_code")
    refusal = Refusal("attempt", "SPEED", "WindowMeasured", "window_gap", "window: expected 2")
    assert refusal.to_dict()["code"] == "window_gap"
    assert str(refusal) == (
        "attempt in SPEED refuses WindowMeasured (window_gap): window: expected 2"
    )


def test_describe_handles_parametrised_duplicates() -> None:
    reason = duplicate_reason("ab" * 32, "futility")
    assert reason == "duplicate_of:abababababababab:futility"
    entry = describe(reason)
    assert entry is not None and entry.kind == "rejection"
    assert describe("no_such_code") is None
    for code, listed in REASONS.items():  # every plain code answers with its own entry
        assert describe(code) is listed
    assert set(codes_of_kind("fault")) == set(FAULT_CODES)
    for entry in REASONS.values():
        assert entry.meaning and entry.cause and entry.next_step


# Reason codes are listed in the order docs/machines.md lists them, a kind that is not one has
# none, and describe reads its parameters only after duplicate_of.


DOC = Path(__file__).resolve().parents[2] / "docs" / "machines.md"


# --- machines.reasons ----------------------------------------------------------------------


def _documented_codes() -> list[tuple[str, str]]:
    """Returns (code, kind) of every row of docs/machines.md's reason table, in its order."""
    text = DOC.read_text(encoding="utf-8").split("## Reason codes", 1)[1]
    return re.findall(r"^\| `([a-z_]+)` \| ([a-z]+) \|", text, flags=re.MULTILINE)


def test_reasons_and_codes_of_kind_are_in_the_order_docs_list_them() -> None:
    documented = _documented_codes()
    assert list(REASONS) == [code for code, _ in documented]
    for kind in KINDS:
        assert codes_of_kind(kind) == tuple(code for code, k in documented if k == kind)
    assert codes_of_kind("fault") == tuple(FAULT_CODES)  # the catalogue's closed list, in order


def test_a_kind_that_is_not_one_has_no_codes() -> None:
    assert sum(len(codes_of_kind(kind)) for kind in KINDS) == len(REASONS)
    for kind in ("", "re", "refusals", "Fault"):
        assert codes_of_kind(kind) == ()


def test_describe_reads_parameters_only_after_duplicate_of() -> None:
    assert describe(duplicate_reason("ab" * 32, "futility")) is REASONS["duplicate_of"]
    for text in (
        "duplicate_ofx",
        "duplicate_of_futility",
        "not_duplicate_of:abababababababab:x",
        "futility:abababababababab",
        "candidate_slower:",
        ":duplicate_of",
    ):
        assert describe(text) is None, text

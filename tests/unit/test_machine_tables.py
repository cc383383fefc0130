"""Checks the transition tables as data: one initial state, absorbing terminals, reachability."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from machines import arena, attempt, calibration, payment, samples, submission
from machines.arithmetic import Decision
from machines.reasons import REASONS
from machines.refusal import Refusal
from machines.submission import SubmissionState
from machines.table import Guard, Table, build
from vocabulary.events import (
    ALL_EVENTS_V1,
    ArenaRetired,
    CalibrationConcluded,
    ControlRegistered,
    CreditGranted,
    CreditSpent,
    EmissionPolicySet,
    Event,
    HoldReleased,
    IncumbentAdvanced,
    InfrastructureFault,
    PaymentConsumed,
    PaymentReleased,
    QualificationStarted,
    SettlementComputed,
    SubmissionAdmitted,
    SubmissionExpired,
    SubmissionHeld,
    SubmissionRejected,
    SubmissionRequeued,
    SubmissionResolved,
)

TABLES: dict[str, Table[Any, Any]] = {
    "submission": submission.TABLE,
    "attempt": attempt.TABLE,
    "arena": arena.TABLE,
    "payment": payment.PAYMENT_TABLE,
    "credit": payment.CREDIT_TABLE,
    "calibration": calibration.CALIBRATION_TABLE,
}


def example_events() -> dict[str, Event]:
    """Returns one well-formed instance of every v1 event type."""
    sid = "a" * 64
    examples: list[Event] = [
        samples.commissioned(),
        ControlRegistered(control_id="c", kind="identity", delta_digest="d" * 64,
                          expected_verdict="PASS"),
        IncumbentAdvanced(incumbent_digest="e" * 64, block=5, reason="better"),
        ArenaRetired(block=9, reason="done"),
        samples.arrived(),
        SubmissionAdmitted.model_validate(
            {"block": 1, "fee": {"kind": "waived", "ref": "", "amount_rao": 0}}
        ),
        SubmissionRejected(block=1, reason="arena_retired"),
        QualificationStarted(attempt_id="att-1"),
        SubmissionResolved(attempt_id="att-1", verdict="PASS", reason="", disposition="COMPLETE"),
        SubmissionHeld(reason="ops", block=2),
        HoldReleased(reason="ok", block=3, operator="5Op"),
        SubmissionRequeued(reason="ops", block=4),
        SubmissionExpired(block=10**7, reason="sla_expired"),
        PaymentConsumed(payment_ref="p", submission_id=sid, arena_id="mlp-arena", amount_rao=1),
        PaymentReleased(submission_id=sid, reason="refund"),
        CreditGranted(credit_id="c", hotkey="5H", amount_rao=1, note=""),
        CreditSpent(submission_id=sid),
        samples.claimed(sid, "c" * 64),
        samples.window(1, 1, 1, 1),
        samples.audit(),
        samples.quality(),
        InfrastructureFault(code="engine_killed", stage="speed", detail=""),
        samples.decided(Decision("PASS", "", "COMPLETE", "1.000000", "0.000000", 3)),
        EmissionPolicySet(half_life_blocks=10, burn_hotkey="5B", validator_hotkey="5V"),
        SettlementComputed(block=1, as_of_position=1, claims=[], weights_ppm={}, fees={},
                           settlement_digest="f" * 64),
        samples.calibration_started(),
        samples.calibration_windows()[0],
        CalibrationConcluded(
            window_noise="0.010000", boot_noise="0.000000", window_noise_bound="0.020000",
            boot_noise_bound="0.010000", window_dof=4, boot_dof=2, seal_window_noise="0.02",
            seal_boot_noise="0.01", seal_policy_version="paired-windows.v1",
            concluded_block=1, rules_version="calibration.v1",
        ),
    ]
    found = {event.event_type: event for event in examples}
    assert set(found) == {model.event_type for model in ALL_EVENTS_V1}
    return found


@dataclass(frozen=True)
class _Stub:
    status: str


@pytest.mark.parametrize("name", TABLES)
def test_one_initial_state_opened_by_one_event(name: str) -> None:
    table = TABLES[name]
    assert table.initial in table.states
    assert table.initial not in table.terminals
    assert table.event_types()[0] == table.opening
    assert all(source in table.states for source, _ in table.rules)


@pytest.mark.parametrize("name", TABLES)
def test_every_state_is_reachable_from_the_initial_one(name: str) -> None:
    table = TABLES[name]
    assert table.reachable() == frozenset(table.states)


@pytest.mark.parametrize("name", TABLES)
def test_terminal_states_absorb_nothing(name: str) -> None:
    table = TABLES[name]
    assert table.terminals, "every machine ends somewhere"
    assert not [key for key in table.rules if key[0] in table.terminals]
    for terminal in table.terminals:
        for event in example_events().values():
            result = table.step(_Stub(terminal), event, None)
            assert isinstance(result, Refusal)
            assert result.code in {"terminal_state", "stream_already_started"}
            assert (result.machine, result.state) == (name, terminal)


@pytest.mark.parametrize("name", TABLES)
def test_targets_and_codes_are_declared(name: str) -> None:
    table = TABLES[name]
    for rule in table.rules.values():
        targets = rule.targets if isinstance(rule, Guard) else (rule,)
        assert set(targets) <= set(table.states)
        if not isinstance(rule, Guard):
            assert rule is not None
    for (state, event_type), code in table.refusals.items():
        assert state in table.states and (state, event_type) not in table.rules
        assert REASONS[code].kind == "refusal"
    plain_events = {e for (_, e), rule in table.rules.items() if not isinstance(rule, Guard)}
    assert plain_events <= set(table.effects)


def test_non_terminal_states_have_a_way_forward() -> None:
    for table in TABLES.values():
        for state in table.states:
            if state not in table.terminals:
                assert any(source == state for source, _ in table.rules), (table.machine, state)


def test_domain_state_names() -> None:
    assert submission.STATES == (
        "ARRIVED", "QUEUED", "QUALIFYING", "QUALIFIED", "FAILED", "NO_DECISION", "HELD",
        "REJECTED", "EXPIRED",
    )
    assert {"REJECTED", "QUALIFIED", "FAILED", "EXPIRED"} == submission.TERMINALS
    assert attempt.STATES == ("CLAIMED", "SPEED", "AUDIT", "QUALITY", "DECIDED")


# build fills only the fields it is not given from the defaults; a table's specific refusal code
# wins over terminal_state, which wins over transition_not_allowed; event_types names every ruled
# event type once, opening first; a guard without a label still draws one arrow per target, so its
# targets stay reachable.


# --- machines.table ------------------------------------------------------------------------


def test_build_fills_only_the_fields_it_is_not_given_from_the_defaults() -> None:
    fields: dict[str, Any] = dict(
        submission_id="s",
        arena_id="a",
        hotkey="h",
        content_hash="c",
        delta_digest="d",
        target="t",
        arrival_key=(1, 2, 3, "h", "c"),
        payment_ref=None,
    )
    given = {"status": "QUEUED", "attempts": 2, "reason": "futility"}
    built = build(SubmissionState, **fields, **given)
    assert built == SubmissionState(**fields, **given)
    assert (built.status, built.attempts, built.reason, built.verdict) == (
        "QUEUED",
        2,
        "futility",
        None,
    )


def _toy_table(**extra: Any) -> Table[Any, Any]:
    """Returns a two-state payment-like table: OPEN --PaymentReleased--> DONE (terminal)."""
    fields: dict[str, Any] = dict(
        machine="payment",
        states=("OPEN", "DONE"),
        initial="OPEN",
        opening="PaymentConsumed",
        terminals=frozenset({"DONE"}),
        rules={("OPEN", "PaymentReleased"): "DONE"},
        effects={"PaymentReleased": lambda state, event, target: _Stub(target)},
    )
    fields.update(extra)
    return Table(**fields)


def test_a_specific_refusal_wins_over_terminal_state_which_wins_over_not_allowed() -> None:
    table = _toy_table(refusals={("DONE", "PaymentConsumed"): "stream_already_started"})
    events = example_events()
    consumed, released = events["PaymentConsumed"], events["PaymentReleased"]
    codes = {}
    for state, event in (
        (_Stub("DONE"), consumed),
        (_Stub("DONE"), released),
        (_Stub("OPEN"), consumed),
    ):
        result = table.step(state, event, None)
        assert isinstance(result, Refusal)
        codes[state.status, event.event_type] = result.code
    assert codes == {
        ("DONE", "PaymentConsumed"): "stream_already_started",
        ("DONE", "PaymentReleased"): "terminal_state",
        ("OPEN", "PaymentConsumed"): "transition_not_allowed",
    }
    assert table.step(_Stub("OPEN"), released, None) == _Stub("DONE")


@pytest.mark.parametrize("name", TABLES)
def test_event_types_names_each_ruled_event_type_once_opening_first(name: str) -> None:
    table = TABLES[name]
    types = table.event_types()
    assert types[0] == table.opening
    assert len(types) == len(set(types))
    assert set(types) == {table.opening} | {event_type for _, event_type in table.rules}
    assert set(types) <= set(example_events())


def test_a_guard_without_a_label_still_draws_one_arrow_per_target() -> None:
    guard: Guard[Any, Any] = Guard(("B", "C"), lambda state, event, context: state)
    table = _toy_table(
        states=("OPEN", "B", "C"),
        terminals=frozenset({"B", "C"}),
        rules={("OPEN", "PaymentReleased"): guard},
    )
    assert [(e.source, e.event_type, e.target, e.label) for e in table.edges()] == [
        ("OPEN", "PaymentReleased", "B", ""),
        ("OPEN", "PaymentReleased", "C", ""),
    ]
    assert table.reachable() == frozenset(table.states)

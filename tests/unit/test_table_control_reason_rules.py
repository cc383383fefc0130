"""Pins rules of machines.table, machines.control and machines.reasons the main tests leave loose.

Found by a hand-made mutation review of the three modules: each test here fails on one small
change to them that the other unit tests let through. They pin, from DOMAIN §5, the control
outcome and reason-code sections of docs/machines.md and the modules' docstrings:

* ``build`` fills only the fields it is not given from the defaults: a given value wins;
* a table's specific refusal code wins over ``terminal_state``, which wins over
  ``transition_not_allowed``;
* ``event_types`` names every event type the table has a rule for, once each, opening first;
* a guard without a label still draws one arrow per target, so its targets stay reachable;
* a control submission is ``pending`` while it waits for a verdict of its current attempt:
  QUEUED or QUALIFYING again after an automatic requeue, and HELD before any verdict;
* a HELD submission that has its verdict (disposition HOLD) and a parked NO_DECISION are
  judged by that verdict;
* REJECTED, and EXPIRED before any verdict, are ``unexpected``; a submission that expired
  after its verdict (a parked NO_DECISION reaching its SLA) is judged by that verdict (this
  was a bug: it turned ``unexpected``);
* the reason is compared only when the control registered one, and a registered empty
  reason is compared too;
* the report keeps controls in registration order and submissions in the order given, and
  each row carries its own control's fields and its submission's verdict and reason;
* ``REASONS`` and ``codes_of_kind`` list codes in the order docs/machines.md lists them (the
  fault codes in DOMAIN's closed-list order), and an unknown kind has no codes;
* ``describe`` reads parameters only after ``duplicate_of:``; any other unknown text is None.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from test_machine_reasons import BILLION, SLOW  # same directory, prepend import mode
from test_machine_tables import TABLES, example_events

from machines import samples
from machines.control import ControlRow, control_rows
from machines.reasons import KINDS, REASONS, codes_of_kind, describe, duplicate_reason
from machines.refusal import Refusal
from machines.scenario import Scenario
from machines.submission import SubmissionState
from machines.table import Guard, Table, build
from vocabulary.events import (
    FAULT_CODES,
    ControlRegistered,
    InfrastructureFault,
    SubmissionExpired,
    SubmissionHeld,
)

DOC = Path(__file__).resolve().parents[2] / "docs" / "machines.md"
WORKED = samples.WORKED_EXAMPLE_COSTS
ARENA = "mlp-arena"
DELTA = samples.hex64("control-delta")


@dataclass(frozen=True)
class _Stub:
    status: str


def _control(
    control_id: str,
    verdict: str,
    reason: str | None = None,
    *,
    kind: str = "custom",
    delta: str = DELTA,
) -> ControlRegistered:
    return ControlRegistered(
        control_id=control_id,
        kind=kind,
        delta_digest=delta,
        expected_verdict=verdict,
        expected_reason=reason,
    )


def _arena(*controls: ControlRegistered, fee: int = 0, sla_blocks: int = 100) -> Scenario:
    """Returns a scenario with the arena commissioned and ``controls`` registered."""
    sc = Scenario()
    sc.commission(fee_rao=fee, sealed=samples.policy(sla_blocks=sla_blocks))
    if controls:
        sc.append(f"arena-{ARENA}", *controls)
    return sc


def _outcomes(sc: Scenario) -> list[tuple[str, str | None, str]]:
    return [(r.control_id, r.submission_id, r.outcome) for r in sc.fold.controls(ARENA)]


def _status(sc: Scenario, sid: str) -> str:
    sub = sc.fold.submission(sid)
    assert sub is not None
    return sub.status


def _fault(code: str) -> InfrastructureFault:
    return InfrastructureFault(code=code, stage="speed", detail="")


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


# --- machines.control ----------------------------------------------------------------------


def test_a_requeued_control_submission_is_pending_until_its_next_attempt_decides() -> None:
    sc = _arena(_control("honest", "PASS", kind="honest"))
    sid = sc.arrive(delta_digest=DELTA)
    sub = sc.evaluate(sid, "att-1", (), _fault("adapter_start_failed"))
    assert (sub.status, sub.verdict) == ("QUEUED", "NO_DECISION")  # requeued automatically
    assert _outcomes(sc) == [("honest", sid, "pending")]
    sc.claim(sid, "att-2")
    assert _outcomes(sc) == [("honest", sid, "pending")]  # QUALIFYING again
    sc.measure("att-2", WORKED)
    sc.append("attempt-att-2", samples.audit(), samples.quality())
    sc.decide("att-2")
    assert sc.resolve(sid).status == "QUALIFIED"
    assert _outcomes(sc) == [("honest", sid, "as_expected")]


def test_a_held_control_submission_is_pending_before_a_verdict_and_judged_after() -> None:
    sc = _arena(_control("lost", "NO_DECISION", "evidence_unavailable"))
    waiting = sc.arrive(delta_digest=DELTA, content="waiting")
    sc.append(f"submission-{waiting}", SubmissionHeld(reason="operator", block=1_001))
    held = sc.arrive(delta_digest=DELTA, content="held", block=1_002)
    sub = sc.evaluate(held, "att-1", WORKED[:1], _fault("evidence_unavailable"))
    assert (sub.status, sub.verdict) == ("HELD", "NO_DECISION")  # disposition HOLD
    assert _outcomes(sc) == [("lost", waiting, "pending"), ("lost", held, "as_expected")]


def test_a_parked_no_decision_control_is_judged_by_its_verdict() -> None:
    sc = _arena(_control("kill", "NO_DECISION", "engine_killed", kind="engine_kill"))
    sid = sc.arrive(delta_digest=DELTA)
    sub = sc.evaluate(sid, "att-1", WORKED[:1], _fault("engine_killed"))
    assert sub.status == "NO_DECISION"  # disposition COMPLETE: parked, not terminal
    assert _outcomes(sc) == [("kill", sid, "as_expected")]


def test_rejected_and_expired_before_a_verdict_are_unexpected() -> None:
    sc = _arena(_control("honest", "PASS", kind="honest"), fee=BILLION)
    rejected = sc.arrive(delta_digest=DELTA, content="unpaid")
    expired = sc.arrive(
        delta_digest=DELTA, content="late", payment_ref="pay-1", paid_rao=BILLION, block=1_001
    )
    sc.append(f"submission-{expired}", SubmissionExpired(block=1_101, reason="sla_expired"))
    assert [_status(sc, sid) for sid in (rejected, expired)] == ["REJECTED", "EXPIRED"]
    assert _outcomes(sc) == [("honest", rejected, "unexpected"), ("honest", expired, "unexpected")]


def test_a_control_that_expired_after_its_verdict_is_judged_by_that_verdict() -> None:
    # An engine_kill control parks in NO_DECISION, which is not terminal: the SLA sweep
    # expires it. It produced the verdict it was registered for (DOMAIN §5: as_expected when
    # its verdict matches); it must not turn unexpected when it expires.
    sc = _arena(_control("kill", "NO_DECISION", "engine_killed", kind="engine_kill"))
    sid = sc.arrive(delta_digest=DELTA)
    sc.evaluate(sid, "att-1", WORKED[:1], _fault("engine_killed"))
    assert [s.submission_id for s in sc.fold.expirable(1_100)] == [sid]
    sc.append(f"submission-{sid}", SubmissionExpired(block=1_100, reason="sla_expired"))
    assert _status(sc, sid) == "EXPIRED"
    assert _outcomes(sc) == [("kill", sid, "as_expected")]


def test_the_reason_is_compared_only_when_the_control_registered_one() -> None:
    sc = _arena(_control("any-fail", "FAIL"), _control("fail-without-reason", "FAIL", ""))
    sid = sc.arrive(delta_digest=DELTA)
    assert sc.evaluate(sid, "att-1", SLOW).reason == "candidate_slower"
    assert _outcomes(sc) == [
        ("any-fail", sid, "as_expected"),
        ("fail-without-reason", sid, "unexpected"),
    ]


def test_the_report_keeps_registration_order_and_the_order_submissions_are_given() -> None:
    other = samples.hex64("other-delta")
    sc = _arena(_control("zz-first", "FAIL", delta=other), _control("aa-second", "FAIL"))
    sids = [sc.arrive(delta_digest=DELTA, content=f"c{n}", block=1_000 + n) for n in range(3)]
    arena = sc.fold.arena(ARENA)
    assert arena is not None
    subs = sc.fold.submissions(ARENA)
    assert [s.submission_id for s in subs] == sids
    for given in (subs, subs[::-1], sorted(subs, key=lambda s: s.submission_id, reverse=True)):
        rows = control_rows(arena, given)
        assert [(r.control_id, r.submission_id) for r in rows] == [("zz-first", None)] + [
            ("aa-second", s.submission_id) for s in given
        ]


def test_each_row_carries_its_own_control_and_its_submission() -> None:
    judged = _control("wrong-mlp", "FAIL", "slot_audit_failed", kind="wrong_mlp")
    waiting = _control(
        "skip-mlp", "FAIL", "quality_regression", kind="skip_mlp", delta=samples.hex64("skip")
    )
    sc = _arena(judged, waiting)
    sid = sc.arrive(delta_digest=DELTA)
    sub = sc.evaluate(sid, "att-1", WORKED, samples.audit(violations=3))
    assert (sub.verdict, sub.reason, sub.hold_reason) == ("FAIL", "slot_audit_failed", None)
    assert sc.fold.controls(ARENA) == [
        ControlRow(
            judged.control_id,
            judged.kind,
            judged.delta_digest,
            judged.expected_verdict,
            judged.expected_reason,
            sid,
            sub.verdict,
            sub.reason,
            "as_expected",
        ),
        ControlRow(
            waiting.control_id,
            waiting.kind,
            waiting.delta_digest,
            waiting.expected_verdict,
            waiting.expected_reason,
            None,
            None,
            None,
            "pending",
        ),
    ]


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
    assert codes_of_kind("fault") == tuple(FAULT_CODES)  # DOMAIN §4's closed list, in order


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

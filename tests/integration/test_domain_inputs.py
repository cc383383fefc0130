"""Bad input to the library's processes is a SchemaError naming the field; nothing is written."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from desk import Desk  # same directory, prepend import mode

from ledger import migrate
from machines import samples
from services.arena_ledger import ArenaLedger, submission_id
from vocabulary.errors import ConcurrencyConflict, InvalidInput, Refused, SchemaError
from vocabulary.events import ArenaRetired, ControlRegistered, IncumbentAdvanced


@pytest.fixture
def ledger(tmp_path: Any) -> Iterator[ArenaLedger]:
    url = f"sqlite:///{tmp_path / 'inputs.db'}"
    migrate.upgrade(url)
    with ArenaLedger(url) as opened:
        opened.commission(samples.commissioned("mlp-arena").model_dump(exclude_unset=True))
        yield opened


@pytest.mark.parametrize(
    ("call", "path"),
    [
        (lambda led: led.grant_credit("BAD ID", "hk", 1, ""), "$.payload.credit_id"),
        (
            lambda led: led.register_control(
                "mlp-arena",
                {
                    "control_id": "c1",
                    "kind": "nonsense",
                    "delta_digest": "0" * 64,
                    "expected_verdict": "PASS",
                },
            ),
            "$.payload.kind",
        ),
        (lambda led: led.intake({"miner_hotkey": "hk"}), "$.payload.arena_id"),
        (lambda led: led.hold("0" * 64, "x" * 300, 5), "$.payload.reason"),
        (lambda led: led.release("0" * 64, "ok", 5, "has space"), "$.payload.operator"),
        (lambda led: led.set_emission_policy(0, "burn", "val"), "$.payload.half_life_blocks"),
        (lambda led: led.fault("a1", "not_a_code", "speed", ""), "$.payload.code"),
    ],
)
def test_bad_process_input_is_a_schema_error_and_writes_nothing(
    ledger: ArenaLedger, call: Any, path: str
) -> None:
    before = ledger.store.head()
    with pytest.raises(SchemaError) as raised:
        call(ledger)
    assert raised.value.context["path"] == path
    assert ledger.store.head() == before


@pytest.mark.parametrize("amount", [0, 2**53 - 1])
@pytest.mark.parametrize("block", [None, 0, 2**53 - 1])
def test_intake_takes_amounts_and_blocks_up_to_the_json_integer_limit(
    ledger: ArenaLedger, amount: int, block: int | None
) -> None:
    # Both ends of [0, 2**53 - 1] are chain facts intake must take (0: a payment of
    # nothing, rejected by the rules, not by the input check).
    arrival = Desk.arrival(content="edge", payment_ref="pay-edge")
    outcome = ledger.intake(arrival, payment_amount_rao=amount, block=block)
    expected = (True, "") if amount else (False, "eval_cost_payment_invalid")
    assert (outcome.admitted, outcome.reason) == expected
    assert outcome.positions[0] == 2  # recorded after the commission


@pytest.mark.parametrize(
    ("keyword", "value"),
    [
        ("payment_amount_rao", -1),
        ("payment_amount_rao", 2**53),
        ("payment_amount_rao", True),
        ("payment_amount_rao", 1.0),
        ("block", -1),
        ("block", 2**53),
        ("block", False),
    ],
)
def test_intake_refuses_amounts_and_blocks_outside_the_json_integers(
    ledger: ArenaLedger, keyword: str, value: Any
) -> None:
    before = ledger.store.head()
    with pytest.raises(SchemaError) as raised:
        ledger.intake(Desk.arrival(content="bad", payment_ref="pay-bad"), **{keyword: value})
    assert raised.value.context["path"] == keyword
    assert ledger.store.head() == before


def test_intake_takes_a_stated_submission_id_only_when_it_is_the_arrivals_own(
    ledger: ArenaLedger,
) -> None:
    # docs/concepts.md: the id is a digest of the arrival's fields. One stated otherwise (a
    # mistyped copy, another system's id) is refused, not silently replaced.
    arrival = Desk.arrival(content="stated", payment_ref="pay-stated")
    own = submission_id(arrival)
    before = ledger.store.head()
    for wrong in ("f" * 64, own.upper(), "", 7):
        with pytest.raises(SchemaError) as raised:
            ledger.intake({**arrival, "submission_id": wrong}, payment_amount_rao=10**9)
        assert raised.value.context["path"] == "$.submission_id"
        assert raised.value.message == (
            f"submission_id {wrong!r} is not the id of this arrival: its fields give {own} "
            "(the id is derived from them; omit it, or state that one)")
    assert ledger.store.head() == before
    outcome = ledger.intake({**arrival, "submission_id": own}, payment_amount_rao=10**9)
    assert (outcome.submission_id, outcome.admitted) == (own, True)


def test_append_holds_an_expected_version_given_with_an_event(ledger: ArenaLedger) -> None:
    control = ControlRegistered(control_id="c1", kind="identity", delta_digest="d" * 64,
                                expected_verdict="PASS")
    before = ledger.store.head()
    with pytest.raises(ConcurrencyConflict):
        ledger.append([("arena-mlp-arena", control, 0)])  # the stream is at version 1
    assert ledger.store.head() == before
    written = ledger.append([("arena-mlp-arena", control, 1)])
    assert written.positions == (before.position + 1,)


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        ("a" * 118, repr("a" * 118)),  # 120 characters with its quotes: shown whole
        ("a" * 119, repr("a" * 119)[:119] + "…"),  # 121: cut to 119 and an ellipsis
        ({"5Alice": 1}, "{'5Alice': 1}"),
    ],
)
def test_a_refusal_quotes_a_value_cut_to_120_characters(value: Any, shown: str) -> None:
    # A SettlementComputed refused for a differing field quotes the recorded and the
    # recomputed value; a weight vector of 256 hotkeys would otherwise fill the terminal.
    from services.arena_ledger import _short

    assert _short(value) == shown
    assert len(_short(value)) <= 120


@pytest.mark.parametrize("reason", ["", " ", "\t\n"])
@pytest.mark.parametrize(
    ("call", "event_type"),
    [
        (lambda led, why: led.hold("0" * 64, why, 5), "SubmissionHeld"),
        (lambda led, why: led.release("0" * 64, why, 5, "5Operator"), "HoldReleased"),
        (lambda led, why: led.requeue("0" * 64, why, 5), "SubmissionRequeued"),
    ],
)
def test_an_operator_action_without_a_reason_is_refused_and_writes_nothing(
    ledger: ArenaLedger, call: Any, event_type: str, reason: str
) -> None:
    # The schema takes an empty reason (a PASS decision carries one); an operator's action
    # on a submission must say why, for the auditor who later asks.
    before = ledger.store.head()
    with pytest.raises(InvalidInput) as raised:
        call(ledger, reason)
    assert type(raised.value) is InvalidInput
    assert raised.value.context["path"] == "$.payload.reason"
    assert raised.value.message.startswith(f"{event_type} needs a reason an auditor can read")
    assert ledger.store.head() == before


def test_a_credit_id_is_granted_once_a_retry_is_recorded_and_other_terms_are_refused(
    ledger: ArenaLedger,
) -> None:
    # A retried grant (a lost reply, a re-run script) answers what is recorded: a
    # concurrency conflict, exit 3 "re-read and retry", is one no retry could ever pass.
    first = ledger.grant_credit("c-dup", "5Hk", 7, "welcome")
    head = ledger.store.head()
    again = ledger.grant_credit("c-dup", "5Hk", 7, "welcome")
    assert (again.positions, again.already_recorded, again.entry_hashes) == (
        first.positions, True, first.entry_hashes
    )
    for other in (("5Other", 7, "welcome"), ("5Hk", 8, "welcome"), ("5Hk", 7, "another")):
        with pytest.raises(Refused) as caught:
            ledger.grant_credit("c-dup", *other)
        assert caught.value.context == {
            "reason": "credit_exists", "credit_id": "c-dup", "position": first.first
        }
        assert caught.value.message.startswith(
            f"credit 'c-dup' was already granted at position {first.first} (to 5Hk, 7 rao)"
        )
    assert ledger.store.head() == head


def test_the_current_commission_sent_again_is_recorded_once_and_keeps_the_incumbent(
    ledger: ArenaLedger,
) -> None:
    # A retried `commission` appended a second ArenaCommissioned, which also put back the
    # commission's incumbent after an IncumbentAdvanced.
    sent = samples.commission_document("mlp-arena")
    first = next(e for e in ledger.store.read_stream("arena-mlp-arena")
                 if e.type == "ArenaCommissioned")
    ledger.append([("arena-mlp-arena", IncumbentAdvanced(
        incumbent_digest="b" * 64, block=150, reason="a PASS was rewarded"))])
    head = ledger.store.head()
    again = ledger.commission(sent)
    assert (again.positions, again.already_recorded, again.entry_hashes) == (
        (first.position,), True, (first.entry_hash,)
    )
    assert ledger.store.head() == head
    arena = ledger.fold.arena("mlp-arena")
    assert arena is not None and arena.incumbent_digest == "b" * 64
    changed = ledger.commission(samples.commission_document("mlp-arena", block=200))
    assert not changed.already_recorded and changed.first == head.position + 1
    # The first commission is no longer the current one: sent again, it is recorded again.
    back = ledger.commission(sent)
    assert not back.already_recorded and back.first == changed.first + 1
    # A retired arena refuses a commission, the current one included.
    ledger.append([("arena-mlp-arena", ArenaRetired(block=300, reason="season over"))])
    with pytest.raises(Refused, match="ArenaCommissioned refused"):
        ledger.commission(sent)


def test_an_empty_attempt_id_is_named_as_empty(ledger: ArenaLedger) -> None:
    # "attempt  does not exist" hid what was wrong with the input.
    with pytest.raises(InvalidInput, match="the attempt id is empty") as caught:
        ledger.explain_attempt("")
    assert caught.value.context == {"path": "attempt_id"}

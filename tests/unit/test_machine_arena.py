"""Checks the arena machine's digests and that every folded state is an immutable value."""

from __future__ import annotations

import copy
import dataclasses
from decimal import Context, Decimal
from typing import Any

import pytest

from machines import arena as A
from machines import samples
from machines import submission as S
from machines.arena import commission_digest, policy_digest
from machines.refusal import Refusal
from machines.scenario import Scenario
from machines.table import evolve
from vocabulary.codec import digest
from vocabulary.events import (
    ArenaCommissioned,
    ArenaRetired,
    ControlRegistered,
    Event,
    IncumbentAdvanced,
)

#: A commission as an appender writes it: the sealed policy names only what it sets, so
#: its defaults (sla_blocks, reward_margin, the audit near-miss bounds, …) are not spelled.
DOCUMENT: dict[str, Any] = samples.commission_document()


def test_the_commission_digest_is_the_recorded_payloads_with_or_without_it() -> None:
    # docs/machines.md: digest("arena-ledger.commission", the payload as recorded). A fold given no
    # payload rebuilds it from the model with only the fields that were set: the defaults
    # the model fills in (sla_blocks, reward_margin, …) were never recorded.
    assert "sla_blocks" not in DOCUMENT["policy"] and "reward_margin" not in DOCUMENT["policy"]
    event = ArenaCommissioned.model_validate(DOCUMENT)
    expected = digest("arena-ledger.commission", DOCUMENT)
    assert commission_digest(event, DOCUMENT) == expected
    assert commission_digest(event) == expected
    assert event.policy.sla_blocks == 500_000  # filled in by the model, not recorded


def test_the_policy_digest_omits_an_empty_control_list_only() -> None:
    # Policies sealed before audit controls existed keep their digest: an empty list is
    # left out. A non-empty one is part of what the digest seals.
    plain = samples.policy()
    document = plain.model_dump(mode="json")
    assert document["audit_control_delta_digests"] == []
    del document["audit_control_delta_digests"]
    assert policy_digest(plain) == digest("arena-ledger.policy", document)
    assert policy_digest(samples.policy(audit_control_delta_digests=[])) == policy_digest(plain)
    controlled = samples.policy(audit_control_delta_digests=[samples.hex64("delta:c0")])
    listed = controlled.model_dump(mode="json")
    assert listed["audit_control_delta_digests"] == [samples.hex64("delta:c0")]
    assert policy_digest(controlled) == digest("arena-ledger.policy", listed)
    assert policy_digest(controlled) != policy_digest(plain)


def _states() -> list[Any]:
    sc = Scenario()
    arena = sc.commission(fee_rao=0)
    sid = sc.arrive()
    sc.claim(sid, "att-1")
    submission = sc.fold.submission(sid)
    return [arena, arena.commission, submission, sc.attempt("att-1")]


@pytest.mark.parametrize("index", range(4), ids=["arena", "commission", "submission", "attempt"])
def test_folded_states_are_immutable_values(index: int) -> None:
    # The fold shares states between its tables, the archive encodes them as they leave,
    # and replay reuses a decision derived for "this very state" (LedgerFold._derived):
    # all of it relies on a state never changing once built, by __init__ or by evolve.
    state = _states()[index]
    name = dataclasses.fields(state)[0].name
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(state, name, "changed")
    copied = evolve(state, **{name: getattr(state, name)})
    assert copied == state and copied is not state
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(copied, name, "changed")


def test_a_negative_reward_margin_is_refused_at_the_commission_not_at_every_settlement() -> None:
    # settlement-rules.v1 reads reward_margin as a non-negative decimal: accepted here, a
    # negative one made every later settle fail (settlement_input_invalid).
    sc = Scenario()
    negative = samples.commissioned(sealed=samples.policy(reward_margin="-0.015"))
    refusal = sc.fold.decide("arena-mlp-arena", negative)
    assert refusal is not None and (refusal.state, refusal.code, refusal.detail) == (
        "NONE", "reward_margin_negative", "reward_margin: -0.015")
    sc.commission()
    again = sc.fold.decide("arena-mlp-arena", negative)
    assert again is not None and (again.state, again.code) == ("ACTIVE", "reward_margin_negative")
    zero = samples.commissioned(sealed=samples.policy(reward_margin="0"))
    assert sc.fold.decide("arena-mlp-arena", zero) is None


def _line_at(z: str) -> Decimal:
    # σw = σb = 0.01 and W = 2 (n1 = n2 = 1): SE = sqrt((0.0001 · 2 + 2 · 0.0001) / 4) = 0.01,
    # so L = exp(z / 100) − 1 (g = 0), here at 60 digits, apart from the machine's context.
    wide = Context(prec=60)
    return wide.subtract(wide.exp(wide.divide(Decimal(z), Decimal(100))), Decimal(1))


def test_a_z_whose_pass_line_no_decision_can_record_is_refused_at_the_commission() -> None:
    # A look failing against L records L with 6 places, which the 34-digit arithmetic holds
    # only below 10^28: a larger line would leave every attempt that reaches it undecided.
    assert _line_at("6447") < Decimal(10) ** 28 < _line_at("6448")
    sc = Scenario()
    for z in ("6448", "300000000"):  # the second overflows exp itself
        sealed = samples.policy(windows=2, z={"2": z})
        refusal = sc.fold.decide("arena-mlp-arena", samples.commissioned(sealed=sealed))
        assert refusal is not None and (refusal.state, refusal.code, refusal.detail) == (
            "NONE", "pass_line_out_of_range",
            f"z: window 2's critical value {z} gives a pass line of 28 or more integer "
            "digits, which no decision can record")
    sc.commission()
    again = samples.commissioned(block=200, sealed=samples.policy(windows=2, z={"2": "6448"}))
    refused = sc.fold.decide("arena-mlp-arena", again)
    assert refused is not None and (refused.state, refused.code) == (
        "ACTIVE", "pass_line_out_of_range")


def test_the_largest_pass_line_a_commission_takes_is_recorded_by_a_failing_look() -> None:
    sc = Scenario()
    sc.commission(fee_rao=0, sealed=samples.policy(windows=2, z={"2": "6447"}))
    sid = sc.arrive()
    sc.claim(sid, "att-1")
    sc.measure("att-1", ((1_000_000_000, 1_000_000_000),) * 2)
    decision = sc.decide("att-1")
    expected = _line_at("6447").quantize(Decimal("0.000001"), context=Context(prec=60))
    assert (decision.verdict, decision.reason, decision.pass_line) == (
        "FAIL", "speed_threshold_not_met", f"{expected:f}")
    assert len(f"{expected:f}".partition(".")[0]) == 28


# Commissions and the incumbent (docs/concepts.md, docs/machines.md): the commission digest is the
# recorded payload's; a re-commission keeps every earlier commission by digest and carries its own
# policy digest, fee and incumbent; IncumbentAdvanced and ArenaRetired record their block (and
# reason); controls of one delta digest stay in registration order.


def _steps(step: Any, state: Any, events: tuple[Event, ...]) -> Any:
    """Applies ``events`` with a machine's ``step``, each accepted; returns the last state."""
    for event in events:
        result = step(state, event)
        assert not isinstance(result, Refusal), str(result)
        state = result
    assert state is not None
    return state


# --- Arena -----------------------------------------------------------------------------


def _fold(*events: Event) -> A.ArenaState:
    return _steps(A.step, None, events)


FIRST = samples.commissioned(block=100, incumbent="incumbent-0", fee_rao=1_000_000_000)


SECOND = samples.commissioned(
    block=200, incumbent="incumbent-1", fee_rao=0,
    model={"name": "tiny-llama", "revision": "r2"},
    sealed=samples.policy(window_noise="0.02"),
)


def test_the_recorded_payload_decides_the_commission_digest() -> None:
    # docs/concepts.md: digest("arena-ledger.commission", the payload as recorded). A payload that
    # spells a default the model was not given hashes as recorded, not as rebuilt.
    document = samples.commission_document()
    event = ArenaCommissioned.model_validate(document)
    recorded: dict[str, Any] = copy.deepcopy(document)
    recorded["policy"]["sla_blocks"] = 500_000
    expected = digest("arena-ledger.commission", recorded)
    assert expected != A.commission_digest(event)
    assert A.commission_digest(event, recorded) == expected
    opened = A.step(None, event, recorded)
    assert isinstance(opened, A.ArenaState)
    assert opened.commission_digest == expected
    assert list(opened.commissions) == [expected]


def test_a_recommission_keeps_every_earlier_commission_by_digest() -> None:
    # Attempts stay bound to the commission they were claimed under (docs/concepts.md).
    state = _fold(FIRST, SECOND)
    first, second = A.commission_digest(FIRST), A.commission_digest(SECOND)
    assert first != second
    assert state.commission_digest == second
    assert list(state.commissions) == [first, second]
    assert state.commissions[first].event == FIRST
    assert state.commissions[first].block == 100 and state.commissions[second].block == 200


def test_each_commission_carries_its_own_policy_digest() -> None:
    state = _fold(FIRST, SECOND)
    first, second = A.commission_digest(FIRST), A.commission_digest(SECOND)
    assert state.commissions[first].policy_digest == A.policy_digest(FIRST.policy)
    assert state.commissions[second].policy_digest == A.policy_digest(SECOND.policy)
    assert A.policy_digest(FIRST.policy) != A.policy_digest(SECOND.policy)


def test_the_incumbent_starts_at_the_commission_and_moves_with_a_recommission() -> None:
    # Re-commissioning with another incumbent starts a new reward group (docs/machines.md).
    opened = _fold(FIRST)
    assert (opened.incumbent_digest, opened.incumbent_block) == (samples.hex64("incumbent-0"), 100)
    state = _fold(FIRST, SECOND)
    assert (state.incumbent_digest, state.incumbent_block) == (samples.hex64("incumbent-1"), 200)


def test_incumbent_advanced_records_its_digest_and_block() -> None:
    advanced = IncumbentAdvanced(
        incumbent_digest=samples.hex64("incumbent-2"), block=150, reason="a better kernel"
    )
    state = _fold(FIRST, advanced)
    assert (state.status, state.incumbent_digest, state.incumbent_block) == (
        A.ACTIVE, samples.hex64("incumbent-2"), 150,
    )


def test_retirement_records_its_block_and_reason() -> None:
    state = _fold(FIRST, ArenaRetired(block=300, reason="model withdrawn"))
    assert (state.status, state.retired, state.retired_block, state.retired_reason) == (
        A.RETIRED, True, 300, "model withdrawn",
    )


def test_the_fee_is_the_current_commissions() -> None:
    # Intake reads the arena fee (docs/machines.md): after a re-commission at fee 0, an arrival
    # naming no payment is admitted waived.
    assert _fold(FIRST, SECOND).fee_rao == 0
    sc = Scenario()
    sc.commission(fee_rao=1_000_000_000)
    sc.commission(fee_rao=0, block=200, model={"name": "tiny-llama", "revision": "r2"})
    sub = sc.fold.submission(sc.arrive(block=1_000))
    assert sub is not None
    assert (sub.status, sub.fee) == (S.QUEUED, S.Fee("waived", "", 0))


def test_controls_of_one_delta_digest_stay_in_registration_order() -> None:
    # Every control of a digest is judged against its submissions, controls in registration
    # order (docs/machines.md); the names are chosen so sorted order differs.
    delta = "d" * 64
    later = ControlRegistered(control_id="zz-first", kind="identity", delta_digest=delta,
                              expected_verdict="PASS")
    earlier = ControlRegistered(control_id="aa-second", kind="honest", delta_digest=delta,
                                expected_verdict="PASS")
    state = _fold(FIRST, later, earlier)
    assert state.controls_by_delta == {delta: ("zz-first", "aa-second")}
    assert list(state.controls) == ["zz-first", "aa-second"]

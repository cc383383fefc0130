"""Tests settlement-rules.v2's control gate on plain inputs, and that v1 is left as it was.

The world is docs/settlement.md's worked example (arenas ``mlp`` 600,000 ppm and ``cache``
300,000 ppm, h = 1000, settled at block 1100 with c1 FAILed so that both pools have credit)
under a v2 policy with ``control_max_age_blocks = 500``.
"""

from __future__ import annotations

import hashlib
from typing import Any

import pytest

from machines.control import AS_EXPECTED, PENDING, UNEXPECTED, ControlRow, complete_runs
from machines.reasons import CONTROL_UNEXPECTED, CONTROLS_STALE, REASONS, codes_of_kind
from machines.settlement_rules import (
    RULES_VERSION,
    RULES_VERSION_V2,
    ArenaInput,
    ControlRun,
    EmissionPolicy,
    SettlementInput,
    SubmissionInput,
    Suspension,
    check_settlement_digest,
    compute_settlement,
    control_suspension,
    describe_suspension,
    settle_assessed,
    settlement_payload,
    summarize_fees,
)
from vocabulary.catalogue import CATALOGUE
from vocabulary.codec import canonical_bytes
from vocabulary.errors import InvalidInput, SchemaError
from vocabulary.events import EmissionPolicySet, SettlementComputed


def hexid(name: str) -> str:
    """Returns a stable 64-hex id for a readable test name."""
    return hashlib.sha256(name.encode()).hexdigest()


V1 = EmissionPolicy(1000, "burn", "val")
V2 = EmissionPolicy(1000, "burn", "val", RULES_VERSION_V2, 500)
BLOCK = 1100


def sub(name: str, hotkey: str, block: int, status: str, speedup: str | None = None,
        group: str = "mlp") -> SubmissionInput:
    verdict = {"QUALIFIED": "PASS", "FAILED": "FAIL"}.get(status)
    return SubmissionInput(hexid(name), hotkey, hexid("content-" + name), block, 0, 0, status,
                           hexid("incumbent-" + group), verdict, speedup)


ARENAS = (
    ArenaInput("mlp", 600_000, "0.015", (
        sub("s1", "alice", 100, "QUALIFIED", "1.019129"),
        sub("s4", "bob", 130, "QUALIFIED", "1.040000"),
    )),
    ArenaInput("cache", 300_000, "0.015", (
        sub("c1", "carol", 200, "FAILED", group="cache"),
        sub("c2", "alice", 210, "QUALIFIED", "1.050000", group="cache"),
    )),
)
#: docs/settlement.md's weights at block 1100 with c1 FAILed (no arena suspended).
UNGATED = {"alice": 492_125, "bob": 407_875, "burn": 100_000}


def settle(policy: EmissionPolicy, runs: dict[str, list[ControlRun]], block: int = BLOCK
           ) -> Any:
    return compute_settlement(SettlementInput(block, 42, policy, ARENAS, control_runs=runs))


def fresh(block: int = 900) -> list[ControlRun]:
    return [ControlRun(block)]


# --- the gate, one arena at a time ----------------------------------------------------------


def test_an_unexpected_latest_run_suspends_the_arena_and_its_pool_burns() -> None:
    # docs/settlement.md's v2 worked example; cache's later run (1200) is not seen at 1100.
    cache = [ControlRun(700), ControlRun(900, ["wrong-cache"]), ControlRun(1_200)]
    result = settle(V2, {"mlp": [ControlRun(600)], "cache": cache})
    assert result.suspensions == (Suspension("cache", CONTROL_UNEXPECTED, 900, ("wrong-cache",)),)
    # mlp is split as in v1; cache's 300,000 join the unshared 100,000 at burn.
    assert result.weights_ppm == {"alice": 192_125, "bob": 407_875, "burn": 400_000}
    # The claim stays on record: it was rewarded; the suspension withholds its weight only.
    assert [(c.submission_id, c.credit) for c in result.claims if c.arena_id == "cache"] == [
        (hexid("c2"), 26_455)]
    # At 1200 the as-expected run at 1200 is the latest: the suspension is lifted.
    assert settle(V2, {"mlp": [ControlRun(1_000)], "cache": cache}, 1_200).suspensions == ()


def test_a_stale_latest_run_suspends_the_arena() -> None:
    runs = {"mlp": [ControlRun(599)], "cache": fresh()}
    result = settle(V2, runs)
    assert result.suspensions == (Suspension("mlp", CONTROLS_STALE, 599),)
    assert result.weights_ppm == {"alice": 300_000, "burn": 700_000}


def test_an_arena_without_a_complete_run_is_suspended_as_stale() -> None:
    result = settle(V2, {"mlp": fresh()})  # cache has no run at all
    assert result.suspensions == (Suspension("cache", CONTROLS_STALE, None),)
    assert settle(V2, {"mlp": fresh(), "cache": []}).suspensions == result.suspensions


def test_fresh_runs_as_expected_suspend_nothing_and_pay_as_v1_does() -> None:
    result = settle(V2, {"mlp": fresh(), "cache": fresh(1_000)})
    assert result.suspensions == ()
    assert result.weights_ppm == UNGATED == settle(V1, {}).weights_ppm
    # ...but the digest names the rules: the same weights under v2 hash differently.
    assert result.settlement_digest != settle(V1, {}).settlement_digest


@pytest.mark.parametrize(("run_block", "suspended"), [(600, False), (599, True), (1100, False)])
def test_a_run_exactly_max_age_blocks_old_is_still_fresh(run_block: int, suspended: bool) -> None:
    found = control_suspension("mlp", [ControlRun(run_block)], BLOCK, 500)
    assert (found is not None) is suspended
    if found is not None:
        assert (found.reason, found.run_block) == (CONTROLS_STALE, run_block)


def test_only_runs_at_or_before_the_settlement_block_count() -> None:
    # A later run (even an unexpected one) is not seen; the earlier one decides.
    runs = [ControlRun(900), ControlRun(1_101, ["honest"])]
    assert control_suspension("mlp", runs, BLOCK, 500) is None
    assert control_suspension("mlp", runs, 1_101, 500) == Suspension(
        "mlp", CONTROL_UNEXPECTED, 1_101, ("honest",))
    assert control_suspension("mlp", [ControlRun(1_101)], BLOCK, 500) == Suspension(
        "mlp", CONTROLS_STALE, None)


def test_the_latest_run_decides_in_any_order() -> None:
    healed = [ControlRun(1_000), ControlRun(900, ["honest"])]
    assert control_suspension("mlp", healed, BLOCK, 500) is None
    broken = [ControlRun(1_000, ["b", "a"]), ControlRun(900)]
    assert control_suspension("mlp", broken, BLOCK, 500) == Suspension(
        "mlp", CONTROL_UNEXPECTED, 1_000, ("a", "b"))
    # An unexpected run that is also too old is reported as what it found.
    assert control_suspension("mlp", [ControlRun(100, ["a"])], BLOCK, 500) == Suspension(
        "mlp", CONTROL_UNEXPECTED, 100, ("a",))


def test_complete_runs_come_from_the_control_report_as_the_arena_board_reads_it() -> None:
    def row(control: str, block: int | None, outcome: str) -> ControlRow:
        return ControlRow(control, "honest", hexid(control), "FAIL", None, None, None, None,
                          outcome, block)
    rows = [row("a", 100, AS_EXPECTED), row("b", 100, UNEXPECTED), row("b", 100, UNEXPECTED),
            row("a", 200, AS_EXPECTED), row("b", 200, PENDING),  # interrupted: not complete
            row("a", 300, AS_EXPECTED), row("c", None, PENDING)]
    assert complete_runs(rows) == [(100, ("b",)), (300, ())]


# --- settlement document, payload and event -------------------------------------------------


def test_the_v2_document_lists_suspensions_and_names_its_rules() -> None:
    result = settle(V2, {"mlp": fresh()})
    document = result.document()
    assert document["rules_version"] == RULES_VERSION_V2
    assert document["suspensions"] == [
        {"arena_id": "cache", "control_ids": [], "reason": "controls_stale", "run_block": None}]
    payload = settlement_payload(result)
    # The payload keeps rules_version (so it verifies itself) and is a valid event.
    assert {k: v for k, v in payload.items() if k != "settlement_digest"} == document
    assert check_settlement_digest(payload)
    CATALOGUE.validate("SettlementComputed", 1, payload, "settlement")
    assert SettlementComputed.model_validate(payload).suspensions == document["suspensions"]
    tampered = {**payload, "suspensions": []}
    assert not check_settlement_digest(tampered)


def test_a_v1_settlement_reads_no_control_run_and_carries_nothing_new() -> None:
    runs = {"mlp": [ControlRun(900, ["honest"])]}  # would suspend mlp under v2
    gated_input = settle(V1, runs)
    assert gated_input.suspensions == ()
    assert gated_input.settlement_digest == settle(V1, {}).settlement_digest
    payload = settlement_payload(gated_input)
    assert set(payload) == {"as_of_position", "block", "claims", "fees", "weights_ppm",
                            "settlement_digest"}
    assert gated_input.document()["rules_version"] == RULES_VERSION
    assert check_settlement_digest(payload)


def test_settle_assessed_gates_like_compute_settlement() -> None:
    runs = {"mlp": fresh(), "cache": [ControlRun(900, ["x"])]}
    whole = settle(V2, runs)
    shares = {a.arena_id: a.emission_share_ppm for a in ARENAS}
    again = settle_assessed(BLOCK, 42, V2, shares, whole.assessments,
                            summarize_fees(shares, SettlementInput(BLOCK, 42, V2).fees), runs)
    assert settlement_payload(again) == settlement_payload(whole)


# --- policy and inputs ----------------------------------------------------------------------


def test_a_policy_event_without_the_new_fields_is_v1_and_keeps_its_bytes() -> None:
    payload = {"half_life_blocks": 7200, "burn_hotkey": "5Burn", "validator_hotkey": "5Val"}
    event = EmissionPolicySet.model_validate(payload)
    assert EmissionPolicy.from_event(event) == EmissionPolicy(7200, "5Burn", "5Val")
    assert event.model_dump(exclude_unset=True) == payload
    assert CATALOGUE.validate("EmissionPolicySet", 1, payload) == canonical_bytes(payload)
    gated = {**payload, "rules_version": RULES_VERSION_V2, "control_max_age_blocks": 300}
    assert EmissionPolicy.from_event(EmissionPolicySet.model_validate(gated)) == EmissionPolicy(
        7200, "5Burn", "5Val", RULES_VERSION_V2, 300)


@pytest.mark.parametrize("extra", [
    {"rules_version": RULES_VERSION_V2},  # v2 without its max age
    {"control_max_age_blocks": 300},  # a max age under v1
    {"rules_version": "settlement-rules.v1", "control_max_age_blocks": 300},
    {"rules_version": RULES_VERSION_V2, "control_max_age_blocks": 0},
    {"rules_version": "settlement-rules.v3", "control_max_age_blocks": 300},
])
def test_a_policy_event_whose_gate_fields_disagree_is_refused(extra: dict[str, Any]) -> None:
    payload = {"half_life_blocks": 7200, "burn_hotkey": "5Burn", "validator_hotkey": "5Val"}
    with pytest.raises(SchemaError):
        CATALOGUE.validate("EmissionPolicySet", 1, {**payload, **extra}, "settlement")


@pytest.mark.parametrize(("args", "message"), [
    ((RULES_VERSION_V2, None), "control_max_age_blocks must be"),
    ((RULES_VERSION_V2, 0), "control_max_age_blocks must be"),
    ((RULES_VERSION, 10), "is a settlement-rules.v2 setting"),
    (("settlement-rules.v9", None), "rules_version must be one of"),
])
def test_a_bad_policy_is_refused(args: tuple[Any, Any], message: str) -> None:
    with pytest.raises(InvalidInput, match=message):
        EmissionPolicy(1000, "burn", "val", *args)


def test_an_input_with_control_runs_is_still_hashable_and_keeps_its_runs() -> None:
    runs = [ControlRun(900, ["b", "a"])]
    inputs = SettlementInput(BLOCK, 42, V2, ARENAS, control_runs={"mlp": runs})
    hash(inputs)
    runs.append(ControlRun(1_000))  # the caller's list is not the input's
    assert inputs.control_runs == {"mlp": (ControlRun(900, ("b", "a")),)}


def test_two_runs_of_an_arena_at_one_block_are_refused() -> None:
    with pytest.raises(InvalidInput, match="two control runs at block 900"):
        settle(V2, {"mlp": [ControlRun(900), ControlRun(900, ["x"])]})
    with pytest.raises(InvalidInput, match="block must be"):
        ControlRun(-1)


def test_the_reason_codes_are_in_the_table() -> None:
    assert codes_of_kind("suspension") == (CONTROL_UNEXPECTED, CONTROLS_STALE)
    assert all(REASONS[c].meaning.startswith("settlement-rules.v2")
               for c in codes_of_kind("suspension"))


@pytest.mark.parametrize(("suspension", "sentence"), [
    (Suspension("a", "control_unexpected", 2_050, ("honest", "kill")),
     "its control run at block 2050 did not come out as registered (honest, kill), so its "
     "verdicts are not trusted"),
    (Suspension("a", "controls_stale", 2_100), "its latest complete control run (block 2100) "
     "is too old"),
    (Suspension("a", "controls_stale", None), "it has no complete control run"),
])
def test_each_suspension_is_said_in_words_from_what_the_settlement_records(
        suspension: Suspension, sentence: str) -> None:
    assert describe_suspension(suspension.to_dict()) == sentence

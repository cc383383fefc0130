"""Settles the ledger of settled_ledger.py on SQLite and PostgreSQL.

Every event goes through the guarded store, and every weight, credit and fee is checked
against the numbers settled_ledger.py's docstring works out by hand.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
from settled_ledger import (
    ALICE,
    ARENA_A,
    ARENA_B,
    BOB,
    BURN,
    FEES_A,
    FEES_B,
    FEES_TOTAL,
    HALF_LIFE_BLOCKS,
    HEAD_BEFORE_POLICY,
    OPERATOR,
    VALIDATOR,
    WEIGHTS_1,
    build_before_policy,
    build_settled,
    evaluate,
    set_policy,
)
from sqlalchemy import text

from ledger.records import EventDraft
from machines import samples
from machines.settlement_rules import (
    RULES_VERSION,
    check_settlement_digest,
    settlement_digest,
    settlement_payload,
)
from services.arena_ledger import ArenaLedger
from vocabulary.errors import NotFound, Refused

INCUMBENT = samples.hex64("incumbent-0")
# Settlement 2, block 2000, b1 released and FAILed: b2 is rewarded.
#   b2 Alice: 41,667 * 1000 / (1000 + 985) = 41,667,000 / 1985 = 20,990 (r 1,850)
#   pool mlp-b: all 300,000 to Alice (the only credit); pool mlp-a as in settlement 1.
WEIGHTS_2 = {ALICE: 165_829 + 300_000, BOB: 434_171, BURN: 100_000}
# Settlement 3, block 3000 (every claim 1000 blocks older):
#   a1: 20,408,000 / 3000 = 6,802 (r 2,000); a4: 52,632,000 / 2970 = 17,721 (r 630);
#   b2: 41,667,000 / 2985 = 13,958 (r 2,370)
#   pool mlp-a Σ = 24,523:
#     Alice 600,000 * 6,802  = 4,081,200,000  = 24,523 * 166,423 + 8,771
#     Bob   600,000 * 17,721 = 10,632,600,000 = 24,523 * 433,576 + 15,752
#     this time Bob has the larger remainder and takes the spare ppm.
WEIGHTS_3 = {ALICE: 166_423 + 300_000, BOB: 433_577, BURN: 100_000}


# --- fixtures and helpers -----------------------------------------------------------------


def _rows(ledger: ArenaLedger) -> int:
    with ledger.store.engine.connect() as conn:
        return int(conn.execute(text("SELECT COUNT(*) FROM events")).scalar_one())


def _statuses(ledger: ArenaLedger, sids: dict[str, str]) -> list[tuple[str, str, list[str]]]:
    names = {sid: name for name, sid in sids.items()}
    return [(names[r["submission_id"]], r["status"], [names[b] for b in r["blocked_by"]])
            for r in ledger.rewards()]


def _forged(payload: dict[str, Any], *, digest: str) -> dict[str, Any]:
    """Moves one ppm from Bob to Alice (the sum stays 1,000,000); keeps or redoes the digest."""
    forged = copy.deepcopy(payload)
    forged["weights_ppm"][ALICE] += 1
    forged["weights_ppm"][BOB] -= 1
    if digest == "recomputed":
        document = {k: v for k, v in forged.items() if k != "settlement_digest"}
        document["rules_version"] = RULES_VERSION
        forged["settlement_digest"] = settlement_digest(document)
        assert check_settlement_digest(forged)
    return forged


# --- tests ----------------------------------------------------------------------------------


def test_settle_and_weights_are_refused_until_an_emission_policy_is_set(
    ledger: ArenaLedger,
) -> None:
    build_before_policy(ledger)
    for call in (ledger.settle, ledger.weights):
        with pytest.raises(Refused) as caught:
            call(2_000)
        assert caught.value.context["reason"] == "emission_policy_missing"
        # Says what computes nothing (weights is a preview too) and how to proceed.
        assert "no settlement (settle, weights" in caught.value.message
        assert "`arena-ledger emission-policy`" in caught.value.message
    assert ledger.store.head().position == HEAD_BEFORE_POLICY
    assert _rows(ledger) == HEAD_BEFORE_POLICY

    assert set_policy(ledger).positions == (80,)
    _, result = ledger.settle(2_000)
    assert result.positions == (81,)


def test_first_settlement_burns_the_pool_blocked_by_a_held_submission(
    ledger: ArenaLedger,
) -> None:
    sids = build_before_policy(ledger)
    set_policy(ledger)
    preview = settlement_payload(ledger.weights(2_000))
    assert ledger.store.head().position == 80  # weights previews, it never appends

    settlement, result = ledger.settle(2_000)
    payload = settlement_payload(settlement)
    assert payload == preview
    assert result.positions == (81,)
    assert payload["as_of_position"] == 80 and payload["block"] == 2_000
    assert payload["weights_ppm"] == WEIGHTS_1
    assert sum(payload["weights_ppm"].values()) == 1_000_000
    assert payload["claims"] == [
        {"arena_id": ARENA_A, "block": 1_000, "credit": 10_204, "hotkey": ALICE,
         "incumbent_digest": INCUMBENT, "speedup_ppm": 1_020_408, "submission_id": sids["a1"]},
        {"arena_id": ARENA_A, "block": 1_030, "credit": 26_716, "hotkey": BOB,
         "incumbent_digest": INCUMBENT, "speedup_ppm": 1_052_632, "submission_id": sids["a4"]},
    ]
    # The recorded event holds exactly that payload, and its digest covers its own fields.
    recorded = ledger.store.get(81)
    assert (recorded.stream, recorded.type) == ("settlement", "SettlementComputed")
    assert recorded.payload == payload
    assert check_settlement_digest(recorded.payload)


def test_rewards_name_lost_potential_pending_and_the_completed_no_decision_blocks_nothing(
    ledger: ArenaLedger,
) -> None:
    sids = build_before_policy(ledger)
    # a2 (NO_DECISION, COMPLETE) arrived before a3 and a4, yet both are assessed; b2 waits
    # for the held b1, which arrived earlier in mlp-b.
    assert _statuses(ledger, sids) == [
        ("a1", "rewarded", []), ("a3", "lost_potential", []), ("a4", "rewarded", []),
        ("b2", "pending", ["b1"]),
    ]
    rows = {r["submission_id"]: r for r in ledger.rewards(ARENA_A)}
    assert [r["arena_id"] for r in rows.values()] == [ARENA_A] * 3
    a3 = rows[sids["a3"]]
    assert a3["speedup"] == "1.030928"
    assert a3["best_before"] == {"submission_id": sids["a1"], "speedup": "1.020408"}
    assert a3["required_speedup"] == "1.03571412"  # 1.020408 * 1.015
    assert rows[sids["a4"]]["speedup"] == "1.052632"
    assert rows[sids["a4"]]["required_speedup"] == "1.03571412"
    assert rows[sids["a1"]]["best_before"] is None

    ledger.release(sids["b1"], "evidence checked", 2_100, OPERATOR)
    # Released is QUEUED again: it may still PASS first, so b2 stays pending.
    assert _statuses(ledger, sids)[-1] == ("b2", "pending", ["b1"])
    evaluate(ledger, sids["b1"], "att-b1", 970_000_000, audit_violations=1)
    assert ledger.fold.submission(sids["b1"]).status == "FAILED"  # type: ignore[union-attr]
    assert _statuses(ledger, sids)[-1] == ("b2", "rewarded", [])


def test_weights_after_release_and_decay_over_blocks(ledger: ArenaLedger) -> None:
    built = build_settled(ledger)
    (first, p1), (second, p2), (third, p3) = built.settlements
    assert (p1, p2, p3) == (81, 91, 92)
    assert first["weights_ppm"] == WEIGHTS_1
    assert second["weights_ppm"] == WEIGHTS_2
    assert third["weights_ppm"] == WEIGHTS_3
    for payload, _ in built.settlements:
        assert sum(payload["weights_ppm"].values()) == 1_000_000
    assert (second["as_of_position"], third["as_of_position"]) == (90, 91)
    credits = [(c["submission_id"], c["credit"]) for c in third["claims"]]
    sids = built.sids
    # Sorted by (arena_id, block, submission_id): a1, a4 in mlp-a, then b2 in mlp-b.
    assert credits == [(sids["a1"], 6_802), (sids["a4"], 17_721), (sids["b2"], 13_958)]
    assert [c["credit"] for c in second["claims"]] == [10_204, 26_716, 20_990]
    # The same ledger state gives different digests at different blocks.
    assert len({p["settlement_digest"] for p, _ in built.settlements}) == 3


def test_fees_per_arena_report_the_credit_paid_submission_apart(ledger: ArenaLedger) -> None:
    build_before_policy(ledger)
    fees = ledger.fees()
    assert fees == {"arenas": {ARENA_A: FEES_A, ARENA_B: FEES_B}, "total": FEES_TOTAL}
    assert ledger.fees(ARENA_A) == {"arenas": {ARENA_A: FEES_A}, "total": FEES_A}
    assert ledger.fees(ARENA_B) == {"arenas": {ARENA_B: FEES_B}, "total": FEES_B}
    set_policy(ledger)
    settlement, _ = ledger.settle(2_000)
    assert settlement_payload(settlement)["fees"] == fees


def test_an_arena_never_commissioned_is_not_found_rather_than_an_empty_report(
    ledger: ArenaLedger,
) -> None:
    # A misspelt arena must not read as "no PASS, no fees, no submissions yet".
    build_before_policy(ledger)
    head = ledger.store.head()
    for query in (ledger.rewards, ledger.fees, ledger.submissions, ledger.controls):
        with pytest.raises(NotFound) as caught:
            query("mlp-z")
        assert caught.value.message == "arena 'mlp-z' is not commissioned", query
        assert caught.value.context["arena_id"] == "mlp-z"
    assert ledger.store.head() == head
    # A commissioned arena still answers with its own rows.
    passes = [r for r in ledger.rewards() if r["arena_id"] == ARENA_B]
    assert passes and ledger.rewards(ARENA_B) == passes
    subs = ledger.submissions(ARENA_B)
    assert subs and {r["arena_id"] for r in subs} == {ARENA_B}


@pytest.mark.parametrize("digest", ["kept", "recomputed"])
def test_a_settlement_with_a_changed_weight_is_refused_and_nothing_is_written(
    ledger: ArenaLedger, digest: str
) -> None:
    build_before_policy(ledger)
    set_policy(ledger)
    honest = settlement_payload(ledger.weights(2_000))
    forged = _forged(honest, digest=digest)
    head = ledger.store.head()

    with pytest.raises(Refused) as caught:
        ledger.store.append([EventDraft("settlement", "SettlementComputed", forged)])

    # Even a forger who recomputes the digest over the forged weights must be told which
    # content field is wrong: the digest only follows from the weights.
    assert caught.value.context["reason"] == "settlement_mismatch"
    assert caught.value.context["field"] == "weights_ppm", caught.value.message
    # The message shows both values (each cut to 120 characters: test_domain_inputs).
    assert caught.value.message == (
        f"SettlementComputed differs from the ledger at field 'weights_ppm': recorded "
        f"{forged['weights_ppm']!r}, recomputed {honest['weights_ppm']!r}; nothing was written"
    )
    assert ledger.store.head() == head
    assert _rows(ledger) == 80
    assert ledger.store.verify().ok
    # The honest payload is accepted through the very same path.
    accepted = ledger.store.append([EventDraft("settlement", "SettlementComputed", honest)])
    assert accepted.positions == (81,)


def test_a_settlement_not_computed_as_of_the_head_is_refused(ledger: ArenaLedger) -> None:
    sids = build_before_policy(ledger)
    set_policy(ledger)
    stale = settlement_payload(ledger.weights(2_000))  # as of position 80
    ledger.release(sids["b1"], "evidence checked", 2_100, OPERATOR)  # the head moves to 81

    with pytest.raises(Refused) as caught:
        ledger.store.append([EventDraft("settlement", "SettlementComputed", stale)])

    assert caught.value.context["reason"] == "settlement_mismatch"
    assert caught.value.context["field"] == "as_of_position"
    assert "recorded 80, recomputed 81" in caught.value.message
    assert ledger.store.head().position == 81
    assert _rows(ledger) == 81


def test_a_settlement_must_open_its_batch(ledger: ArenaLedger) -> None:
    build_before_policy(ledger)
    set_policy(ledger)
    honest = settlement_payload(ledger.weights(2_000))
    policy = EventDraft("settlement", "EmissionPolicySet", {
        "half_life_blocks": HALF_LIFE_BLOCKS, "burn_hotkey": BURN, "validator_hotkey": VALIDATOR})

    with pytest.raises(Refused) as caught:
        ledger.store.append([policy, EventDraft("settlement", "SettlementComputed", honest)])

    assert caught.value.context["reason"] == "settlement_not_at_head"
    assert ledger.store.head().position == 80

"""Settles under settlement-rules.v2 on SQLite and PostgreSQL, and checks that the live
settlement, the preview from a fold as of its position and the replay agree; and that a
settlement-rules.v1 ledger keeps the bytes and digests it had before v2 existed."""

from __future__ import annotations

import pytest
from gated_ledger import MAX_AGE_BLOCKS, SETTLE_BLOCKS, build_gated
from settled_ledger import (
    ALICE,
    ARENA_A,
    ARENA_B,
    BOB,
    BURN,
    VALIDATOR,
    WEIGHTS_1,
    build_before_policy,
    build_settled,
)

from ledger.records import EventDraft
from machines.settlement_rules import (
    RULES_VERSION_V2,
    check_settlement_digest,
    settlement_digest,
    settlement_payload,
)
from services.arena_ledger import ArenaLedger
from services.replay import replay_store
from vocabulary.codec import canonical_bytes
from vocabulary.errors import InvalidInput, Refused

#: What each settlement of gated_ledger.py suspends: (arena, reason, run block, controls).
SUSPENSIONS = {
    2_000: [(ARENA_B, "controls_stale", None, [])],
    2_100: [(ARENA_A, "control_unexpected", 2_050, ["honest"]),
            (ARENA_B, "controls_stale", None, [])],
    2_600: [(ARENA_B, "controls_stale", None, [])],
    2_601: [(ARENA_A, "controls_stale", 2_100, []), (ARENA_B, "controls_stale", None, [])],
}
#: The settlement digests and head hash of settled_ledger.py's v1 ledger, as the code
#: before settlement-rules.v2 wrote them (docs/settlement.md quotes the first).
V1_DIGESTS = [
    "df9058d7ec4ae925ee9c472916e44bf935987b6164589e2b658868644285ea47",
    "c6ee685fedd3b759ccdfc89e491803c8dac4597ad1356fcb55f3220370bf1a17",
    "cd88c4e794ce9c2f02ee289f1ff3fa382a901a74391afe3b93f2136203ff7610",
]
V1_HEAD_HASH = "e36ceda016cfea57284caefcab0af7ac7aa98110ef9788e63256cfb399538fae"


def test_v2_settlements_suspend_as_the_controls_say_and_replay_to_the_same_payloads(
    ledger: ArenaLedger, store_url: str
) -> None:
    settled = build_gated(ledger)
    for (payload, _), block in zip(settled, SETTLE_BLOCKS, strict=True):
        assert payload["rules_version"] == RULES_VERSION_V2
        found = [(s["arena_id"], s["reason"], s["run_block"], s["control_ids"])
                 for s in payload["suspensions"]]
        assert found == SUSPENSIONS[block], block
        assert check_settlement_digest(payload)
    weights = [payload["weights_ppm"] for payload, _ in settled]
    # 2000: as v1's first settlement (mlp-b had no credit: b1 held). 2100 and 2601: every
    # pool burns. 2600: mlp-a is paid again, its claims aged (a1 20,408,000 / 2600 = 7,849,
    # a4 52,632,000 / 2570 = 20,479; 600,000 split 166,245 / 433,755 by largest remainder).
    assert weights == [WEIGHTS_1, {BURN: 1_000_000}, {ALICE: 166_245, BOB: 433_755,
                                                       BURN: 400_000}, {BURN: 1_000_000}]
    # The whole-ledger fold (replay, with and without the archive) agrees with the live
    # settlements (computed from the read models) at every position.
    for archive in (True, False):
        report = replay_store(ledger.store, archive_finished=archive)
        assert report.ok and report.divergence is None, report.divergence
        assert report.settlements_checked == len(SETTLE_BLOCKS)
        assert report.settlement_digest == settled[-1][0]["settlement_digest"]
    # A view as of each settlement's position folds the ledger (no read models) and
    # previews the same payload, digest and all.
    for payload, position in settled:
        with ArenaLedger(store_url, as_of=position - 1) as view:
            assert settlement_payload(view.weights(payload["block"])) == payload


def test_a_live_preview_names_the_suspensions_and_a_settlement_without_them_is_refused(
    ledger: ArenaLedger
) -> None:
    settled = build_gated(ledger)
    preview = ledger.weights(2_601)  # from the read models, as of the head
    assert [s.arena_id for s in preview.suspensions] == [ARENA_A, ARENA_B]
    honest = settlement_payload(preview)
    assert honest["suspensions"] == settled[-1][0]["suspensions"]
    # A forger who drops a suspension and redoes the digest is told which field is wrong.
    forged = {**honest, "suspensions": honest["suspensions"][1:]}
    document = {k: v for k, v in forged.items() if k != "settlement_digest"}
    forged["settlement_digest"] = settlement_digest(document)
    assert check_settlement_digest(forged)
    head = ledger.store.head()
    with pytest.raises(Refused) as caught:
        ledger.store.append([EventDraft("settlement", "SettlementComputed", forged)])
    assert (caught.value.context["reason"], caught.value.context["field"]) == (
        "settlement_mismatch", "suspensions")
    assert ledger.store.head() == head
    # The same payload under v1's name (no rules_version, no suspensions) is refused too.
    as_v1 = {k: v for k, v in honest.items() if k not in ("rules_version", "suspensions")}
    with pytest.raises(Refused, match="rules_version"):
        ledger.store.append([EventDraft("settlement", "SettlementComputed", as_v1)])
    assert ledger.store.append(
        [EventDraft("settlement", "SettlementComputed", honest)]).first == head.position + 1


def test_a_v2_policy_needs_its_max_age_and_a_v1_policy_refuses_one(ledger: ArenaLedger) -> None:
    build_before_policy(ledger)
    head = ledger.store.head().position
    with pytest.raises(InvalidInput, match=r"settlement-rules\.v2 needs control_max_age_blocks"):
        ledger.set_emission_policy(1_000, BURN, VALIDATOR, RULES_VERSION_V2)
    with pytest.raises(InvalidInput, match=r"is a settlement-rules\.v2 setting"):
        ledger.set_emission_policy(1_000, BURN, VALIDATOR, "settlement-rules.v1",
                                   MAX_AGE_BLOCKS)
    with pytest.raises(InvalidInput, match="rules_version"):
        ledger.set_emission_policy(1_000, BURN, VALIDATOR, "settlement-rules.v3",
                                   MAX_AGE_BLOCKS)
    assert ledger.store.head().position == head  # nothing was written


def test_a_v1_ledger_keeps_its_bytes_and_digests(ledger: ArenaLedger) -> None:
    built = build_settled(ledger)
    assert [p["settlement_digest"] for p, _ in built.settlements] == V1_DIGESTS
    assert ledger.store.head().entry_hash == V1_HEAD_HASH
    [policy] = [r for r in ledger.store.read_all(1) if r.type == "EmissionPolicySet"]
    assert policy.payload_bytes == canonical_bytes(
        {"burn_hotkey": BURN, "half_life_blocks": 1_000, "validator_hotkey": VALIDATOR})
    for payload, _ in built.settlements:
        assert "rules_version" not in payload and "suspensions" not in payload
    report = replay_store(ledger.store)
    assert report.ok and report.settlement_digest == V1_DIGESTS[-1]

"""Replays the settled ledger of settled_ledger.py and catches forgeries where they are.

Replay is a second validator's check of a first one: chain, fold and re-derivation of every
AttemptDecided, SubmissionResolved and SettlementComputed, from nothing. Forged events are
written around the machines through a plain ``EventStore`` (no guard), which is what a
validator running different code (or an attacker with the database) would produce; a
tampered byte goes around the append-only triggers the way test_store_tamper.py does.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from replay_forgery import (
    HEAD,
    forge_weights,
    replay,
)
from settled_ledger import (  # the shared builder (same directory, prepend import mode)
    ALICE,
    ARENA_A,
    BURN,
    CAROL,
    FEE_A,
    VALIDATOR,
    Settled,
    build_before_policy,
    build_settled,
    evaluate,
    intake,
    open_ledger,
)
from sqlalchemy import text
from tampering import triggers_bypassed

from ledger.bundle import export_bundle, read_bundle_events
from ledger.chain import chain_rows, chained
from ledger.records import EventDraft
from ledger.store import EventStore
from machines import samples
from machines.settlement_rules import RULES_VERSION, settlement_digest, settlement_payload
from services.arena_ledger import ArenaLedger
from services.replay import replay_bundle, replay_events, replay_rows, replay_store
from vocabulary.catalogue import CATALOGUE
from vocabulary.codec import canonical_bytes, loads
from vocabulary.errors import InvalidInput, LedgerError, LimitExceeded, Refused
from vocabulary.events import ArenaRetired, AttemptDecided, ControlRegistered, SubmissionResolved


@pytest.fixture
def settled(store_url: str) -> Iterator[tuple[ArenaLedger, Settled]]:
    """Yields the fully built and settled ledger (92 events) on each backend."""
    ledger = open_ledger(store_url)
    try:
        yield ledger, build_settled(ledger)
    finally:
        ledger.close()


def _digests(built: Settled) -> list[str]:
    return [payload["settlement_digest"] for payload, _ in built.settlements]


# --- agreement ------------------------------------------------------------------------------


@pytest.mark.postgres
def test_sqlite_and_postgresql_replay_to_the_same_digest_and_head_hash(
    tmp_path: Path, pg_database: str
) -> None:
    reports, heads, digests = [], [], []
    for url in (f"sqlite:///{tmp_path / 'ledger.db'}", pg_database):
        ledger = open_ledger(url)
        try:
            built = build_settled(ledger)
            heads.append(ledger.store.head().entry_hash)
        finally:
            ledger.close()
        digests.append(_digests(built)[-1])
        reports.append(replay(url))
    on_sqlite, on_postgresql = reports
    assert on_sqlite.to_json() == on_postgresql.to_json()
    assert on_sqlite.ok and on_sqlite.divergence is None
    assert (on_sqlite.events, on_sqlite.last_position) == (HEAD, HEAD)
    # 7 attempts (a1..a5, b2, b1), each decided and resolved; 3 settlements.
    assert (on_sqlite.verdicts_checked, on_sqlite.resolutions_checked,
            on_sqlite.settlements_checked) == (7, 7, 3)
    assert heads[0] == heads[1] == on_sqlite.head_hash == on_postgresql.head_hash
    assert digests[0] == digests[1] == on_sqlite.settlement_digest


def test_replay_as_of_stops_there_and_checks_the_expected_digest(
    settled: tuple[ArenaLedger, Settled], store_url: str
) -> None:
    ledger, built = settled
    first, second, third = _digests(built)
    full = replay(store_url)
    assert full.ok and full.settlement_digest == third
    assert full.head_hash == ledger.store.head().entry_hash

    for as_of, digest in ((80, None), (81, first), (90, first), (91, second), (HEAD, third)):
        report = replay(store_url, as_of=as_of)
        assert (report.events, report.last_position) == (as_of, as_of)
        assert report.head_hash == ledger.store.entry_hash_at(as_of)
        assert report.settlement_digest == digest
        assert report.ok

    # Reproducing the first published settlement: --as-of its position, --expect its digest.
    assert replay(store_url, as_of=81, expect=first).ok
    wrong = replay(store_url, expect="0" * 64)
    assert wrong.ok is False and wrong.divergence is None
    assert wrong.to_json()["ok"] is False
    assert wrong.to_json()["expected_digest"] == "0" * 64
    assert wrong.settlement_digest == third
    # A true digest of an earlier settlement is not the head's.
    assert replay(store_url, expect=first).ok is False
    # Hex case carries no meaning: the published digest in capitals is the same digest.
    shouted = replay(store_url, expect=third.upper())
    assert shouted.ok and shouted.expected_digest == third


@pytest.mark.parametrize("expect", ["zz", "0" * 63, "0" * 65, "g" * 64, " " + "0" * 64, ""])
def test_an_expected_digest_that_is_no_sha256_is_refused_before_anything_is_read(
    expect: str,
) -> None:
    def never_read() -> Iterator[Any]:
        raise AssertionError("replay read a row before checking the expected digest")
        yield

    with pytest.raises(InvalidInput) as caught:
        replay_rows(never_read(), expect=expect)
    assert caught.value.context["path"] == "--expect"
    assert repr(expect) in caught.value.message
    assert "64 hex characters" in caught.value.message


@pytest.mark.parametrize("digest", ["kept", "recomputed"])
def test_a_settlement_forged_around_the_guard_is_caught_at_its_position(
    settled: tuple[ArenaLedger, Settled], store_url: str, digest: str
) -> None:
    ledger, built = settled
    honest = settlement_payload(ledger.weights(4_000))
    assert honest["as_of_position"] == HEAD
    forged = forge_weights(honest, digest)
    with EventStore(store_url) as unguarded:
        written = unguarded.append([EventDraft("settlement", "SettlementComputed", forged)])
    assert written.positions == (HEAD + 1,)

    report = replay(store_url)

    assert report.ok is False
    divergence = report.divergence
    assert divergence is not None
    assert (divergence.position, divergence.stream, divergence.type, divergence.code) == (
        HEAD + 1, "settlement", "SettlementComputed", "settlement_mismatch")
    # The field that differs is named, not only the digest that follows from it.
    assert divergence.field == "weights_ppm", divergence
    assert divergence.recorded == forged["weights_ppm"]
    assert divergence.recomputed == honest["weights_ppm"]
    # The report's digest is the last settlement that did check out.
    assert report.settlement_digest == _digests(built)[-1]
    assert replay(store_url, as_of=HEAD).ok


def _forge_a6(
    store_url: str, decision: dict[str, Any] | None, resolution: dict[str, str]
) -> tuple[int, str, str]:
    """Evaluates a6 (Carol, every window at 0.97: PASS "1.030928") up to its decision on the
    ledger before its policy, then appends AttemptDecided (the derived decision, with
    ``decision`` over it; none when ``decision`` is None) and SubmissionResolved
    (``resolution``) around the guard, once the guarded path has refused that batch.
    Returns the first position written, a6's id and the guard's reason."""
    ledger = open_ledger(store_url)
    try:
        build_before_policy(ledger)
        a6 = intake(ledger, ARENA_A, CAROL, "a6", 1_060, FEE_A)
        evaluate(ledger, a6, "att-a6", 970_000_000, conclude=False)  # derives 1/0.97
        derived = ledger.fold.derive_decision("att-a6")
        assert derived is not None and (derived.verdict, derived.speedup) == ("PASS", "1.030928")
        resolved = SubmissionResolved(attempt_id="att-a6", **resolution)
        batch = [EventDraft.of(f"submission-{a6}", resolved)]
        if decision is not None:
            decided = AttemptDecided.model_validate({
                **derived._asdict(), "decided_block": 1_200,
                "rules_version": "paired-windows.v1", **decision,
            })
            batch.insert(0, EventDraft.of("attempt-att-a6", decided))
        head = ledger.store.head().position
        with pytest.raises(Refused) as refused:  # the guarded path refuses the same batch
            ledger.store.append(batch)
        assert ledger.store.head().position == head
    finally:
        ledger.close()
    with EventStore(store_url) as unguarded:
        position = unguarded.append(batch).first
    assert position == head + 1
    return position, a6, str(refused.value.context["reason"])


def test_a_decision_forged_around_the_guard_is_caught_at_its_position(
    store_url: str,
) -> None:
    position, _, refused = _forge_a6(
        store_url, {"speedup": "1.040000"},
        {"verdict": "PASS", "reason": "", "disposition": "COMPLETE"},
    )
    assert refused == "decision_mismatch"

    report = replay(store_url)

    divergence = report.divergence
    assert divergence is not None
    assert (divergence.position, divergence.stream, divergence.type) == (
        position, "attempt-att-a6", "AttemptDecided")
    assert (divergence.field, divergence.recorded, divergence.recomputed, divergence.code) == (
        "speedup", "1.040000", "1.030928", "decision_mismatch")
    assert report.ok is False
    assert report.verdicts_checked == 7  # a1..a5, b2, then the forged one


def test_a_resolution_forged_around_the_guard_is_caught_at_its_position(
    store_url: str,
) -> None:
    # The attempt's decision is honest (PASS); the submission's resolution says FAIL.
    position, a6, _ = _forge_a6(
        store_url, {},
        {"verdict": "FAIL", "reason": "speed_threshold_not_met", "disposition": "COMPLETE"},
    )

    report = replay(store_url)

    divergence = report.divergence
    assert divergence is not None
    assert (divergence.position, divergence.stream, divergence.type) == (
        position + 1, f"submission-{a6}", "SubmissionResolved")
    assert (divergence.field, divergence.recorded, divergence.recomputed, divergence.code) == (
        "verdict", "FAIL", "PASS", "decision_mismatch")
    assert (report.ok, report.verdicts_checked, report.resolutions_checked) == (False, 7, 7)


def test_a_resolution_of_an_undecided_attempt_is_caught_at_its_position(
    store_url: str,
) -> None:
    position, a6, refused = _forge_a6(
        store_url, None, {"verdict": "PASS", "reason": "", "disposition": "COMPLETE"}
    )
    assert refused == "attempt_not_decided"

    report = replay(store_url)

    divergence = report.divergence
    assert divergence is not None
    assert (divergence.position, divergence.stream, divergence.type) == (
        position, f"submission-{a6}", "SubmissionResolved")
    assert (divergence.field, divergence.recorded, divergence.recomputed, divergence.code) == (
        "verdict", "PASS", None, "decision_not_derivable")
    assert (report.ok, report.resolutions_checked) == (False, 7)


def test_a_tampered_payload_byte_is_a_hash_mismatch_at_its_position(
    settled: tuple[ArenaLedger, Settled], store_url: str
) -> None:
    ledger, _ = settled
    decided = [r for r in ledger.store.read_stream("attempt-att-a1") if r.type == "AttemptDecided"]
    assert len(decided) == 1
    target = decided[0]
    index = target.payload_bytes.index(b'"speedup":"1.020408"') + len(b'"speedup":"1.02040')
    assert target.payload_bytes[index : index + 1] == b"8"
    tampered = target.payload_bytes[:index] + b"9" + target.payload_bytes[index + 1 :]
    with triggers_bypassed(ledger.store) as conn:
        conn.execute(text("UPDATE events SET payload = :p WHERE position = :n"),
                     {"p": tampered, "n": target.position})
    assert ledger.store.get(target.position).payload["speedup"] == "1.020409"

    report = replay(store_url)

    divergence = report.divergence
    assert divergence is not None
    assert (divergence.position, divergence.type, divergence.field, divergence.code) == (
        target.position, "AttemptDecided", "entry_hash", "hash_mismatch")
    assert divergence.stream == "attempt-att-a1"
    assert divergence.recorded == target.entry_hash
    assert divergence.recomputed != target.entry_hash
    assert (report.events, report.last_position) == (target.position - 1, target.position - 1)
    assert report.ok is False
    verified = ledger.store.verify()
    assert (verified.first_bad_position, verified.kind) == (target.position, "hash_mismatch")


# --- bundles --------------------------------------------------------------------------------


def test_a_bundle_replays_to_the_same_digest_and_head(
    settled: tuple[ArenaLedger, Settled], store_url: str, tmp_path: Path
) -> None:
    ledger, built = settled
    bundle = tmp_path / "bundle"
    export_bundle(ledger.store, bundle)
    from_store = replay(store_url)

    records, total = read_bundle_events(bundle, None)
    from_bundle = replay_events(records)

    assert total == HEAD
    assert from_bundle.to_json() == from_store.to_json()
    assert from_bundle.settlement_digest == _digests(built)[-1]

    records, total = read_bundle_events(bundle, 81)
    first = replay_events(records, expect=_digests(built)[0])
    assert total == 81
    assert (first.events, first.ok) == (81, True)


# --- every field of a forged AttemptDecided is compared ------------------------------------


@pytest.mark.parametrize(("forged", "field", "recorded", "recomputed"), [
    ({"look_window": 4}, "look_window", 4, 3),
    ({"pass_line": "0.020000"}, "pass_line", "0.020000", "0.018884"),
])
def test_every_field_of_a_forged_decision_is_compared(
    store_url: str, forged: dict[str, Any], field: str, recorded: Any, recomputed: Any
) -> None:
    # a6: PASS at look 3, speedup "1.030928", pass line "0.018884" (worked numbers).
    position, _, refused = _forge_a6(
        store_url, forged, {"verdict": "PASS", "reason": "", "disposition": "COMPLETE"}
    )
    assert refused == "decision_mismatch"

    report = replay(store_url)

    d = report.divergence
    assert d is not None and report.ok is False
    assert (d.position, d.stream, d.type, d.code) == (
        position, "attempt-att-a6", "AttemptDecided", "decision_mismatch")
    assert (d.field, d.recorded, d.recomputed) == (field, recorded, recomputed)


# --- every field of a forged SubmissionResolved is compared ---------------------------------


@pytest.mark.parametrize(("resolution", "field", "recorded", "recomputed"), [
    ({"verdict": "PASS", "reason": "", "disposition": "HOLD"}, "disposition", "HOLD",
     "COMPLETE"),
    ({"verdict": "PASS", "reason": "futility", "disposition": "COMPLETE"}, "reason",
     "futility", ""),
])
def test_a_resolution_that_keeps_the_verdict_but_changes_another_field_is_caught(
    store_url: str, resolution: dict[str, str], field: str, recorded: Any, recomputed: Any
) -> None:
    position, a6, _ = _forge_a6(store_url, {}, resolution)  # the decision itself is honest

    report = replay(store_url)

    d = report.divergence
    assert d is not None and report.ok is False
    assert (d.position, d.stream, d.type, d.code) == (
        position + 1, f"submission-{a6}", "SubmissionResolved", "decision_mismatch")
    assert (d.field, d.recorded, d.recomputed) == (field, recorded, recomputed)


# --- a missing position is a gap at that position -------------------------------------------


def test_a_deleted_event_is_a_gap_at_its_position(
    settled: tuple[ArenaLedger, Settled], store_url: str
) -> None:
    ledger, _ = settled
    with triggers_bypassed(ledger.store) as conn:
        conn.execute(text("DELETE FROM events WHERE position = 50"))

    report = replay_store(ledger.store)

    d = report.divergence
    assert d is not None and report.ok is False
    # Position 50 is missing: the ledger holds 51 where 50 belongs.
    assert (d.position, d.field, d.recorded, d.recomputed, d.code) == (
        50, "position", 51, 50, "gap")
    assert (report.events, report.last_position) == (49, 49)
    verified = ledger.store.verify()  # replay and verify name the same place
    assert (verified.first_bad_position, verified.kind) == (50, "gap")


# --- the latest EmissionPolicySet applies from its position on -------------------------------


def test_a_settlement_under_a_replaced_emission_policy_replays(
    settled: tuple[ArenaLedger, Settled], store_url: str
) -> None:
    ledger, built = settled
    ledger.set_emission_policy(4_000, BURN, VALIDATOR)  # h 1000 -> 4000: other credits
    settlement, result = ledger.settle(3_000)
    assert settlement_payload(settlement)["settlement_digest"] != _digests(built)[-1]

    report = replay(store_url)

    assert report.divergence is None and report.ok
    assert report.settlements_checked == 4
    assert report.settlement_digest == settlement_payload(settlement)["settlement_digest"]
    assert report.last_position == result.first


# --- every field of a forged SettlementComputed is compared, the digest too ------------------


def _append_forged(store_url: str, forged: dict[str, Any]) -> int:
    with EventStore(store_url) as unguarded:
        return unguarded.append([EventDraft("settlement", "SettlementComputed", forged)]).first


def test_a_settlement_whose_recorded_digest_alone_is_forged_is_caught(
    settled: tuple[ArenaLedger, Settled], store_url: str
) -> None:
    ledger, built = settled
    honest = settlement_payload(ledger.weights(4_000))
    forged = {**honest, "settlement_digest": "ab" * 32}
    position = _append_forged(store_url, forged)

    report = replay(store_url)

    d = report.divergence
    assert d is not None and report.ok is False
    assert (d.position, d.type, d.field, d.code) == (
        position, "SettlementComputed", "settlement_digest", "settlement_mismatch")
    assert (d.recorded, d.recomputed) == ("ab" * 32, honest["settlement_digest"])
    assert report.settlement_digest == _digests(built)[-1]  # not the forged digest


def test_a_settlement_with_forged_fees_and_honest_weights_is_caught(
    settled: tuple[ArenaLedger, Settled], store_url: str
) -> None:
    ledger, _ = settled
    honest = settlement_payload(ledger.weights(4_000))
    forged = copy.deepcopy(honest)
    forged["fees"]["total"]["net_rao"] += 1
    position = _append_forged(store_url, forged)

    report = replay(store_url)

    d = report.divergence
    assert d is not None and report.ok is False
    assert (d.position, d.field, d.code) == (position, "fees", "settlement_mismatch")
    assert (d.recorded, d.recomputed) == (forged["fees"], honest["fees"])


# --- the JSON summary counts verdicts and resolutions apart ---------------------------------


def test_the_json_summary_counts_verdicts_and_resolutions_apart(store_url: str) -> None:
    _forge_a6(store_url, {"speedup": "1.040000"},
              {"verdict": "PASS", "reason": "", "disposition": "COMPLETE"})

    summary = replay(store_url).to_json()

    # The forged decision (the 7th verdict) stops the replay before its resolution.
    assert (summary["verdicts_checked"], summary["resolutions_checked"]) == (7, 6)
    assert summary["ok"] is False and summary["divergence"]["field"] == "speedup"


# --- a store's rows must reach its head row ------------------------------------------------


def test_a_store_missing_events_before_its_head_does_not_replay_ok(
    settled: tuple[ArenaLedger, Settled], store_url: str
) -> None:
    ledger, _ = settled
    assert ledger.store.head().position == HEAD
    with triggers_bypassed(ledger.store) as conn:  # the last settlement's row is deleted
        conn.execute(text("DELETE FROM events WHERE position = :n"), {"n": HEAD})
    assert ledger.store.head().position == HEAD  # the head row still says 92
    verified = ledger.store.verify()
    assert (verified.ok, verified.first_bad_position, verified.kind) == (False, HEAD, "gap")

    report = replay_store(ledger.store)

    # verify names a gap at 92; a replay of the same store to its head must not say OK (it
    # said OK to position 91, with the settlement before the deleted one).
    assert report.ok is False
    d = report.divergence
    assert d is not None
    assert (d.position, d.stream, d.type, d.field, d.recorded, d.recomputed, d.code) == (
        HEAD, "", "", "position", None, HEAD, "gap")
    assert (report.events, report.last_position) == (HEAD - 1, HEAD - 1)
    # Short of the head, the rows up to --as-of are all there: that replay is OK.
    assert replay_store(ledger.store, HEAD - 1).ok


def test_a_head_row_that_is_not_the_last_event_does_not_replay_ok(
    settled: tuple[ArenaLedger, Settled],
) -> None:
    # The head row is the one row appends rewrite (no trigger keeps it): an entry hash
    # other than the last event's, or a position moved back with events past it, is
    # damage verify reports, and a replay to the head reports it too.
    ledger, _ = settled
    store = ledger.store
    last = store.head().entry_hash
    with store.engine.begin() as conn:
        conn.execute(text("UPDATE ledger_head SET entry_hash = :h WHERE id = 1"),
                     {"h": "e" * 64})
    d = replay_store(store).divergence
    assert d is not None
    assert (d.position, d.field, d.recorded, d.recomputed, d.code) == (
        HEAD, "entry_hash", "e" * 64, last, "head_mismatch")
    with store.engine.begin() as conn:
        conn.execute(text("UPDATE ledger_head SET position = :p, entry_hash = (SELECT "
                          "entry_hash FROM events WHERE position = :p) WHERE id = 1"),
                     {"p": HEAD - 2})
    report = replay_store(store)
    d = report.divergence
    assert d is not None and report.last_position == HEAD - 2
    assert (d.position, d.field, d.recorded, d.recomputed, d.code) == (
        HEAD - 1, "position", HEAD, HEAD - 2, "head_mismatch")
    assert store.verify().kind == "head_mismatch"


# --- a settlement forged before any EmissionPolicySet names the refusal's reason -------------


def test_a_settlement_forged_before_the_emission_policy_names_the_missing_policy(
    tmp_path: Path, store_url: str
) -> None:
    elsewhere = open_ledger(f"sqlite:///{tmp_path / 'elsewhere.db'}")
    try:
        payload = build_settled(elsewhere).settlements[0][0]  # a well-formed settlement
    finally:
        elsewhere.close()
    ledger = open_ledger(store_url)
    try:
        build_before_policy(ledger)  # 79 events, no EmissionPolicySet
    finally:
        ledger.close()
    forged = {**payload, "as_of_position": 79}
    document = {k: v for k, v in forged.items() if k != "settlement_digest"}
    forged["settlement_digest"] = settlement_digest({**document, "rules_version": RULES_VERSION})
    position = _append_forged(store_url, forged)
    assert position == 80

    report = replay(store_url)

    d = report.divergence
    assert d is not None and report.ok is False
    assert (d.position, d.stream, d.type) == (80, "settlement", "SettlementComputed")
    # The reason code settle itself is refused with (docs/settlement.md), not a generic one.
    assert d.code == "emission_policy_missing"
    # Nothing can be recomputed: the recomputed side says why (the refusal), not nothing.
    assert isinstance(d.recomputed, str) and "EmissionPolicySet" in d.recomputed
    assert report.settlement_digest is None


# --- a chain that is consistent but skips a position is a gap --------------------------------


def test_a_consistently_rechained_ledger_that_skips_a_position_is_a_gap() -> None:
    # A ledger whose entry hashes were computed over positions 1, 2, 4: every hash checks
    # out, yet position 3 is missing (docs/concepts.md: positions are gapless).
    from ledger.chain import chained
    from machines import samples
    from vocabulary.catalogue import CATALOGUE
    from vocabulary.codec import canonical_bytes
    from vocabulary.events import ControlRegistered

    events = [samples.commissioned("mlp")] + [
        ControlRegistered(control_id=f"ctl-{n}", kind="identity",
                          delta_digest=samples.hex64(f"delta-{n}"), expected_verdict="PASS")
        for n in (1, 2)
    ]
    rows = [
        (position, "arena-mlp", version, e.event_type, CATALOGUE.types[e.event_type],
         canonical_bytes(e.model_dump(mode="json", exclude_unset=True)),
         "2026-01-01T00:00:00Z", "tester", "")
        for position, version, e in zip((1, 2, 4), (1, 2, 3), events, strict=True)
    ]
    rows = [(*row[:8], computed.hex()) for row, computed in chained(bytes(32), rows)]
    honest = [(3 if r[0] == 4 else r[0], *r[1:]) for r in rows]  # the same events, 1, 2, 3
    honest = [(*row[:8], computed.hex()) for row, computed in chained(bytes(32), honest)]
    assert replay_rows(honest).ok  # the events themselves fold without a refusal

    report = replay_rows(rows)

    d = report.divergence
    assert d is not None and report.ok is False
    assert (d.position, d.field, d.recorded, d.recomputed, d.code) == (3, "position", 4, 3, "gap")
    assert (report.events, report.last_position) == (2, 2)


# Replay's edges: gapless positions, progress up to the position where replay stops, payload
# decoding and the expected digest. Ledgers are built by the guarded path and then forged around
# the guard through a plain EventStore, or as raw rows chained here, so that only the rule under
# test tells them from an honest ledger.


def _rows(events: list[tuple[str, Any]]) -> list[Any]:
    """Returns the rows of a ledger recording ``(stream, event)`` canonically, chained."""
    drafts = [
        (stream, e.event_type, CATALOGUE.types[e.event_type],
         canonical_bytes(e.model_dump(mode="json", exclude_unset=True)))
        for stream, e in events
    ]
    versions = dict.fromkeys((d[0] for d in drafts), 0)
    rows, _ = chain_rows(bytes(32), 0, versions, drafts, "2026-01-01T00:00:00Z", "tester")
    return list(rows)


def _rechained(rows: list[Any]) -> list[Any]:
    """Returns ``rows`` with every entry hash recomputed over the rows as they now are."""
    return [(*row[:8], computed.hex()) for row, computed in chained(bytes(32), rows)]


def _controls(count: int) -> list[tuple[str, Any]]:
    """Returns an arena's commission and ``count`` controls: a ledger that folds cleanly."""
    return [("arena-mlp", samples.commissioned("mlp"))] + [
        ("arena-mlp", ControlRegistered(control_id=f"ctl-{n}", kind="identity",
                                        delta_digest=samples.hex64(f"delta-{n}"),
                                        expected_verdict="PASS"))
        for n in range(1, count + 1)
    ]


# --- docs/concepts.md: positions are gapless and increasing; a repeated one is a gap too --


def test_a_consistently_rechained_ledger_that_repeats_a_position_is_a_gap() -> None:
    # Positions 1, 2, 2, 3: every entry hash checks out over its row, yet the third row is
    # not position 3. The first divergence is at 3 (where the ledger must hold position 3),
    # recorded 2, recomputed 3, and nothing past position 2 is counted.
    rows = _rows(_controls(3))
    honest = replay_rows(rows)
    assert honest.ok and (honest.events, honest.last_position) == (4, 4)
    repeated = _rechained([rows[0], rows[1], (2, *rows[2][1:]), (3, *rows[3][1:])])

    report = replay_rows(repeated)

    d = report.divergence
    assert d is not None and report.ok is False
    assert (d.position, d.stream, d.type, d.field, d.recorded, d.recomputed, d.code) == (
        3, "arena-mlp", "ControlRegistered", "position", 2, 3, "gap")
    assert (report.events, report.last_position) == (2, 2)
    assert report.head_hash == repeated[1][8]


# --- the progress callback sees every position read, the last one included ------------------


def test_progress_is_called_once_per_position_up_to_the_last() -> None:
    # The replay command's bar is advanced to each position and ends on the last one
    # (CHANGELOG: "updated every 1/200 of the ledger and at its end").
    seen: list[int] = []
    report = replay_rows(_rows(_controls(4)), progress=seen.append)
    assert report.ok
    assert seen == [1, 2, 3, 4, 5]


def test_progress_reaches_the_position_where_a_chain_divergence_stops_the_replay() -> None:
    rows = _rows(_controls(3))
    tampered = [*rows[:2], (*rows[2][:8], "0" * 64), rows[3]]  # position 3's hash altered
    seen: list[int] = []

    report = replay_rows(tampered, progress=seen.append)

    d = report.divergence
    assert d is not None and (d.position, d.code) == (3, "hash_mismatch")
    assert seen == [1, 2, 3]


def test_progress_reaches_the_position_of_an_unreadable_payload() -> None:
    rows = _rows(_controls(3))
    unreadable = _rechained([*rows[:2], (*rows[2][:5], b'{"control_id":', *rows[2][6:]),
                             rows[3]])
    seen: list[int] = []

    report = replay_rows(unreadable, progress=seen.append)

    d = report.divergence
    assert d is not None and (d.position, d.code, d.field) == (3, "non_canonical", "event")
    assert seen == [1, 2, 3]


# --- an AttemptDecided the machines cannot derive at all -----------------------------------


def test_a_decision_recorded_before_any_window_is_not_derivable(store_url: str) -> None:
    # An attempt claimed and given no window has no decision to derive; a recorded PASS for
    # it is the first divergence, naming the verdict: recorded PASS, recomputed nothing.
    ledger = open_ledger(store_url)
    try:
        build_before_policy(ledger)
        a6 = intake(ledger, ARENA_A, ALICE, "a6", 1_060, FEE_A)
        ledger.claim(attempt_id="att-a6", pair_id="pair-1", validator_hotkey=VALIDATOR,
                     block=1_100, submission_id=a6)
        assert ledger.fold.derive_decision("att-a6") is None
        decided = AttemptDecided(verdict="PASS", reason="", disposition="COMPLETE",
                                 speedup="1.030928", pass_line="0.018884", look_window=3,
                                 decided_block=1_200, rules_version="paired-windows.v1")
        batch = [EventDraft.of("attempt-att-a6", decided)]
        head = ledger.store.head().position
        with pytest.raises(Refused):  # the guarded path refuses it
            ledger.store.append(batch)
    finally:
        ledger.close()
    with EventStore(store_url) as unguarded:
        position = unguarded.append(batch).first
        assert position == head + 1

        report = replay_store(unguarded)

    d = report.divergence
    assert d is not None and report.ok is False
    assert (d.position, d.stream, d.type, d.field, d.recorded, d.recomputed, d.code) == (
        position, "attempt-att-a6", "AttemptDecided", "verdict", "PASS", None,
        "decision_not_derivable")
    assert report.verdicts_checked == 7  # a1..a5 and b2 before it, then this one


# --- a payload orjson reads but cannot write back is read by codec.loads ---------------------


def test_a_payload_nested_beyond_what_codec_loads_reads_is_its_error() -> None:
    # parse_payload's docstring: anything not given back byte for byte by the fast path
    # "takes codec.loads itself, which raises or returns exactly as it always did". This
    # canonical ASCII document is nested deeper than orjson writes (so it is not given
    # back) and deeper than codec.loads reads: the divergence is codec.loads's error.
    depth = 1_020
    data = b'{"control_id":' + b"[" * depth + b"]" * depth + b"}"
    with pytest.raises(LimitExceeded) as refused:
        loads(data)
    rows = _rows(_controls(1))
    deep = _rechained([rows[0], (*rows[1][:5], data, *rows[1][6:])])

    report = replay_rows(deep)

    d = report.divergence
    assert d is not None and report.ok is False
    assert (d.position, d.stream, d.type, d.field, d.recorded, d.recomputed, d.code) == (
        2, "arena-mlp", "ControlRegistered", "event", None, refused.value.message,
        "limit_exceeded")
    assert (report.events, report.last_position) == (1, 1)


# --- the replay loop's fast parse takes canonical ASCII only -------------------------------


def test_replay_hands_a_non_ascii_payload_to_codec_loads(monkeypatch: pytest.MonkeyPatch) -> None:
    # parse_payload's docstring, which the loop inlines: non-ASCII "takes codec.loads
    # itself". A canonical UTF-8 payload (a retirement reason in French) goes there; the
    # ASCII commission before it does not.
    import services.replay as replay_module

    seen: list[bytes] = []

    def counted(data: bytes) -> Any:
        seen.append(data)
        return loads(data)

    monkeypatch.setattr(replay_module, "loads", counted)
    retired = ArenaRetired(block=200, reason="déjà remplacée")
    rows = _rows([("arena-mlp", samples.commissioned("mlp")), ("arena-mlp", retired)])
    data = rows[1][5]
    assert not data.isascii() and data == canonical_bytes(retired.model_dump(mode="json"))

    report = replay_rows(rows)

    assert seen == [data]
    assert report.ok and (report.events, report.last_position) == (2, 2)


# --- the temporary archive is deleted when the replay ends, however it ends ----------------


@pytest.mark.parametrize("damaged", [False, True])
def test_replay_closes_its_temporary_archive(
    monkeypatch: pytest.MonkeyPatch, damaged: bool
) -> None:
    # docs/settlement.md: finished submissions go to "a private temporary file
    # (ledger.archive.DiskArchive, deleted when replay ends)"; DiskArchive.close deletes it.
    from ledger.archive import DiskArchive

    opened: list[DiskArchive] = []
    closed: list[DiskArchive] = []
    original_init, original_close = DiskArchive.__init__, DiskArchive.close

    def init(self: DiskArchive, *args: Any, **kwargs: Any) -> None:
        original_init(self, *args, **kwargs)
        opened.append(self)

    def close(self: DiskArchive) -> None:
        closed.append(self)
        original_close(self)

    monkeypatch.setattr(DiskArchive, "__init__", init)
    monkeypatch.setattr(DiskArchive, "close", close)
    rows = _rows(_controls(2))
    if damaged:
        rows = [*rows[:2], (*rows[2][:8], "0" * 64)]

    report = replay_rows(rows)

    assert report.ok is not damaged
    assert len(opened) == 1 and closed == opened


# --- a schema version the catalogue does not know is a divergence, even for a valid body -----


def test_a_valid_payload_under_an_unknown_schema_version_is_a_divergence() -> None:
    # docs/concepts.md and the module: the payload is decoded at its recorded version (upcast,
    # or refused); one the catalogue does not know is the catalogue's error at its position,
    # even when the body would validate as the current version.
    retired = ArenaRetired(block=200, reason="replaced")
    unknown = CATALOGUE.types["ArenaRetired"] + 1
    payload = retired.model_dump(mode="json")
    with pytest.raises(LedgerError) as refused:
        CATALOGUE.decode("ArenaRetired", unknown, payload)
    rows = _rows([("arena-mlp", samples.commissioned("mlp")), ("arena-mlp", retired)])
    assert replay_rows(rows).ok
    rows = _rechained([rows[0], (*rows[1][:4], unknown, *rows[1][5:])])

    report = replay_rows(rows)

    d = report.divergence
    assert d is not None and report.ok is False
    assert refused.value.code == "unknown_event_type"  # docs/verification.md names it
    # The error names no payload path: the field is the event as a whole.
    assert (d.position, d.stream, d.type, d.field, d.recorded, d.recomputed, d.code) == (
        2, "arena-mlp", "ArenaRetired", "event", None, refused.value.message,
        "unknown_event_type")
    assert (report.events, report.last_position) == (1, 1)


# --- replay keeps the settlement inputs up to date as it folds -------------------------------


@pytest.mark.parametrize("archive_finished", [True, False])
def test_an_honest_replay_checks_every_settlement_without_the_full_projection(
    store_url: str, monkeypatch: pytest.MonkeyPatch, archive_finished: bool
) -> None:
    # docs/settlement.md: replay keeps the settlement inputs up to date as it folds,
    # re-projecting only what events touched since the previous settlement; only a
    # settlement that does not match is checked again by the full projection. On an honest
    # ledger every settlement matches the inputs replay kept, so that never happens.
    import services.settlements

    full: list[int] = []
    original = services.settlements.check_recorded

    def counted(fold: Any, *args: Any) -> Any:
        full.append(fold.position + 1)
        return original(fold, *args)

    ledger_ = open_ledger(store_url)
    try:
        build_settled(ledger_)
        # A PASS between two settlements: a6 arrives, is evaluated (every window at 0.97:
        # PASS "1.030928") and qualifies while it stays live, then the ledger settles again.
        a6 = intake(ledger_, ARENA_A, CAROL, "a6", 1_060, FEE_A)
        evaluate(ledger_, a6, "att-a6", 970_000_000)
        settlement, _ = ledger_.settle(4_000)
        last = settlement_payload(settlement)["settlement_digest"]
        monkeypatch.setattr(services.settlements, "check_recorded", counted)

        report = replay_store(ledger_.store, archive_finished=archive_finished)
    finally:
        ledger_.close()

    assert report.ok and report.settlements_checked == 4
    assert report.settlement_digest == last
    assert full == []


# --- a refusal's field: "field: …" names one, any other detail the event ---------------------


@pytest.mark.parametrize(("detail", "field"), [
    ("window: expected 2, got 3", "window"),  # the docstring's own example
    ("control_id: ctl-1", "control_id"),
    # A real machine detail (machines/attempt.py) with a colon after words, not a field.
    ("calibration_observation after a speed FAIL: quality never runs", "event"),
    ("intake gives Rejection(reason='fee_missing')", "event"),
    ("node 3 rank 0", "event"),
    ("mlp", "event"),  # an id alone
])
def test_a_refusal_names_the_field_its_detail_starts_with_or_the_event(
    detail: str, field: str
) -> None:
    # docs/settlement.md: for a machine's refusal "`field` the field it names, as in
    # `window: expected 2, got 3`, or `event` when the detail names none".
    from machines.refusal import Refusal
    from services.replay import _refused

    refusal = Refusal("attempt", "RUNNING", "WindowMeasured", "window_gap", detail)
    d = _refused(7, "attempt-att-1", "WindowMeasured", refusal)
    assert (d.position, d.stream, d.type, d.field, d.recorded, d.recomputed, d.code) == (
        7, "attempt-att-1", "WindowMeasured", field, None, detail, "window_gap")


# --- decoded_rows trusts the bytes and parses them as RecordedEvent.payload does ------------


def test_decoded_rows_parse_a_respelled_payload_as_recorded_event_payload_does(
    store_url: str,
) -> None:
    # decoded_rows's docstring: "the payload parsed as RecordedEvent.payload parses it
    # (orjson)", the bytes trusted ("neither the hash chain nor the canonical form is
    # checked"). A payload respelled around the triggers with a repeated key (which
    # codec.loads would refuse) is read as orjson reads it: the last value wins.
    from services.replay import decoded_rows

    open_ledger(store_url).close()  # migrated
    retired = ArenaRetired(block=200, reason="replaced")
    respelled = b'{"block":200,"reason":"first","reason":"replaced"}'
    with EventStore(store_url) as store:
        store.append([EventDraft.of("arena-mlp", samples.commissioned("mlp")),
                      EventDraft.of("arena-mlp", retired)])
        with triggers_bypassed(store) as conn:
            conn.execute(text("UPDATE events SET payload = :p WHERE position = 2"),
                         {"p": respelled})
        recorded = store.get(2)
        assert recorded.payload_bytes == respelled

        decoded = list(decoded_rows(store, 2, 2))

    assert len(decoded) == 1
    row, payload, event = decoded[0]
    assert (row[0], row[1], row[3]) == (2, "arena-mlp", "ArenaRetired")
    assert payload == recorded.payload == {"block": 200, "reason": "replaced"}
    assert event == retired


# --- --as-of the head is a replay to the head; --expect holds from every source ---------------


def test_a_replay_as_of_the_head_position_checks_the_head_row(store_url: str) -> None:
    # replay_store: "a replay to the head must end on the head row's entry hash". The replay
    # command passes the head position itself as as_of when none is given; that is still a
    # replay to the head, and a rewritten head row fails it.
    ledger_ = open_ledger(store_url)
    try:
        build_settled(ledger_)
        store = ledger_.store
        last = store.head().entry_hash
        assert replay_store(store, HEAD).ok
        with store.engine.begin() as conn:
            conn.execute(text("UPDATE ledger_head SET entry_hash = :h WHERE id = 1"),
                         {"h": "e" * 64})

        report = replay_store(store, HEAD)
    finally:
        ledger_.close()

    d = report.divergence
    assert d is not None and report.ok is False
    assert (d.position, d.stream, d.type, d.field, d.recorded, d.recomputed, d.code) == (
        HEAD, "", "", "entry_hash", "e" * 64, last, "head_mismatch")


def test_the_expected_digest_is_checked_from_a_store_and_from_a_bundle(
    store_url: str, tmp_path: Path
) -> None:
    # docs/settlement.md step 3: `--expect D` compares D with the digest of the last
    # settlement checked, from the database and straight from a bundle alike.
    ledger_ = open_ledger(store_url)
    try:
        built = build_settled(ledger_)
        first, last = (built.settlements[i][0]["settlement_digest"] for i in (0, -1))
        bundle = tmp_path / "bundle"
        export_bundle(ledger_.store, bundle)
        from_store = [replay_store(ledger_.store, 81, expect=d) for d in (first, last)]
    finally:
        ledger_.close()
    from_bundle = [replay_bundle(bundle, 81, expect=d) for d in (first, last)]

    for right, wrong in (from_store, from_bundle):
        assert (right.ok, right.expected_digest, right.settlement_digest) == (True, first, first)
        assert (wrong.ok, wrong.expected_digest, wrong.settlement_digest) == (False, last, first)
        assert wrong.divergence is None and wrong.to_json()["ok"] is False


def test_every_store_entry_point_reports_progress_per_position(store_url: str) -> None:
    # The replay command hands its progress bar to replay_store; replay_events reads the
    # same rows as records. Both call it once per position, ending on the last.
    open_ledger(store_url).close()  # migrated
    with EventStore(store_url) as store:
        store.append([EventDraft.of(stream, event) for stream, event in _controls(2)])
        through_store: list[int] = []
        through_records: list[int] = []
        assert replay_store(store, progress=through_store.append).ok
        assert replay_events(store.read_all(1), progress=through_records.append).ok
    assert through_store == through_records == [1, 2, 3]

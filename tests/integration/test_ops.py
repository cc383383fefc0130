"""Checks the operator and auditor tasks of ``services.operations`` on SQLite and a real PostgreSQL.

One small ledger (two arenas, seven submissions, four attempts, holds and a checkpoint) is
built through ``ArenaLedger`` with ``machines.samples``; ``stats`` must report its numbers
exactly and ``history`` must list a hotkey's submissions across both arenas in arrival order.
Backups must verify and carry the source's head; restores must refuse a non-empty target; an
upgrade must refuse a ledger whose chain was tampered with (the append-only triggers bypassed
the way tests/integration/test_store_tamper.py does).
"""

from __future__ import annotations

import os
import sqlite3
import subprocess
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from operator_ledger import fill  # same directory, prepend import mode
from sqlalchemy import text
from sqlalchemy.engine import make_url
from tampering import triggers_bypassed

from ledger import migrate
from ledger.checkpoint import sign_tree
from ledger.note import Signer
from ledger.records import EventDraft
from ledger.store import EventStore
from machines import samples
from machines.reasons import describe
from services import operations as ops
from services.arena_ledger import ArenaLedger
from vocabulary.errors import (
    IntegrityError,
    InvalidInput,
    SchemaNotInitialised,
    StoreError,
    StoreUnavailable,
)

ARENA_A, ARENA_B = "mlp-arena", "cache-arena"
FEE = 1_000_000_000
WORKED = samples.WORKED_EXAMPLE_COSTS[:3]
SLOWER = ((1_000_000_000, 1_020_000_000),) * 4


# -- the small ledger ------------------------------------------------------------------------


def _payload(event: Any) -> dict[str, Any]:
    return dict(event.model_dump(mode="json", exclude_unset=True))


class Builder:
    """Writes the scenario through ArenaLedger, the way a validator and an operator would."""

    def __init__(self, ledger: ArenaLedger) -> None:
        self.ledger = ledger

    def commission(self, arena_id: str) -> None:
        self.ledger.commission(_payload(samples.commissioned(arena_id, fee_rao=FEE)))

    def intake(self, arena_id: str, hotkey: str, content: str, block: int,
               paid: bool = True) -> str:
        arrival = _payload(samples.arrived(arena_id, hotkey=hotkey, content=content, block=block,
                                           payment_ref=f"pay-{content}" if paid else None))
        arrival.pop("submission_id")
        outcome = self.ledger.intake(arrival, payment_amount_rao=FEE if paid else None)
        assert outcome.admitted is paid, outcome
        return outcome.submission_id

    def claim(self, sid: str, attempt_id: str) -> None:
        self.ledger.claim(attempt_id=attempt_id, pair_id="pair-1", validator_hotkey="5Validator",
                          block=1_010, submission_id=sid)

    def windows(self, attempt_id: str, costs: tuple[tuple[int, int], ...]) -> None:
        for index, (stock, candidate) in enumerate(costs, start=1):
            self.ledger.record(attempt_id, samples.window(index, 1 if index <= 2 else 2, stock,
                                                          candidate))


def build(url: str) -> dict[str, str]:
    """Builds the scenario on a migrated ledger; returns the submission ids by name.

    mlp-arena:   s1 5Alice PASS · s2 5Bob NO_DECISION (engine_killed, completed) ·
                 s3 5Alice REJECTED (no payment) · s4 5Carol HELD (held, released, held again) ·
                 s5 5Dave HELD (unproven_infrastructure_failure, disposition HOLD)
    cache-arena: s6 5Alice QUEUED (the earliest arrival of all) · s7 5Bob FAILED
    """
    with ArenaLedger(url, actor="tester") as ledger:
        b = Builder(ledger)
        b.commission(ARENA_A)
        b.commission(ARENA_B)
        ids = {
            "s6": b.intake(ARENA_B, "5Alice", "d6", 900),
            "s1": b.intake(ARENA_A, "5Alice", "d1", 1_000),
            "s2": b.intake(ARENA_A, "5Bob", "d2", 1_001),
            "s3": b.intake(ARENA_A, "5Alice", "d3", 1_002, paid=False),
            "s4": b.intake(ARENA_A, "5Carol", "d4", 1_003),
            "s5": b.intake(ARENA_A, "5Dave", "d5", 1_004),
            "s7": b.intake(ARENA_B, "5Bob", "d7", 1_005),
        }
        b.claim(ids["s1"], "att-1")
        b.windows("att-1", WORKED)
        ledger.record("att-1", samples.audit())
        ledger.record("att-1", samples.quality())
        ledger.conclude("att-1", 1_020)
        b.claim(ids["s2"], "att-2")
        ledger.fault("att-2", "engine_killed", "speed", "killed in the test")
        ledger.conclude("att-2", 1_021)
        ledger.hold(ids["s4"], "operator review", 1_022)
        ledger.release(ids["s4"], "looked fine", 1_023, "5Operator")
        ledger.hold(ids["s4"], "second look", 1_024)
        b.claim(ids["s5"], "att-3")
        ledger.fault("att-3", "unproven_infrastructure_failure", "speed", "lost the lane")
        ledger.conclude("att-3", 1_025)
        b.claim(ids["s7"], "att-4")
        b.windows("att-4", SLOWER)
        ledger.conclude("att-4", 1_026)
    return ids


#: What the scenario records, counted by hand from ``build``.
EVENTS_BY_TYPE = {
    "ArenaCommissioned": 2,
    "AttemptClaimed": 4,
    "AttemptDecided": 4,
    "AuditNodeGraded": 1,
    "HoldReleased": 1,
    "InfrastructureFault": 2,
    "PaymentConsumed": 6,
    "QualificationStarted": 4,
    "QualityGraded": 1,
    "SubmissionAdmitted": 6,
    "SubmissionArrived": 7,
    "SubmissionHeld": 2,
    "SubmissionRejected": 1,
    "SubmissionResolved": 4,
    "WindowMeasured": 7,
}
EVENTS_TOTAL = sum(EVENTS_BY_TYPE.values())


def _statuses(**counts: int) -> dict[str, int]:
    statuses = ("ARRIVED", "QUEUED", "QUALIFYING", "QUALIFIED", "FAILED", "NO_DECISION", "HELD",
                "REJECTED", "EXPIRED")
    row = {s: counts.get(s, 0) for s in statuses}
    return {**row, "total": sum(row.values())}


@pytest.fixture
def built(store_url: str) -> tuple[str, dict[str, str]]:
    migrate.upgrade(store_url)
    return store_url, build(store_url)


# -- stats -----------------------------------------------------------------------------------


def test_stats_reports_the_small_ledger_exactly(built: tuple[str, dict[str, str]]) -> None:
    url, _ = built
    with EventStore(url) as store:
        signer = Signer.generate("ops.test")
        issued = sign_tree(store, signer, size=40)
        store.append([EventDraft("credit-late", "CreditGranted", {
            "credit_id": "late", "hotkey": "5Erin", "amount_rao": 5, "note": "after"})],
            actor="tester")
        head = store.head()
        size, root = store.merkle_root()

    doc = ops.stats(url)

    assert head.position == EVENTS_TOTAL + 1
    assert doc["head"] == {"position": head.position, "entry_hash": head.entry_hash}
    assert doc["tip"]["position"] == head.position and doc["tip"]["type"] == "CreditGranted"
    assert doc["tip"]["stream"] == "credit-late" and doc["tip_matches_head"] is True
    assert doc["merkle"] == {"tree_size": size, "root_hash": root.hex()}
    checkpoint = doc["last_checkpoint"]
    assert (checkpoint["id"], checkpoint["tree_size"], checkpoint["root_hash"]) == (
        issued.id, 40, issued.root_hash)
    assert checkpoint["age_positions"] == head.position - 40 == 13
    assert doc["events"] == {"total": EVENTS_TOTAL + 1,
                             "by_type": {**EVENTS_BY_TYPE, "CreditGranted": 1}}
    assert doc["submissions"] == {
        ARENA_B: _statuses(QUEUED=1, FAILED=1),
        ARENA_A: _statuses(QUALIFIED=1, NO_DECISION=1, REJECTED=1, HELD=2),
    }
    assert doc["holds"] == {
        "current": {"second look": 1, "unproven_infrastructure_failure": 1},
        "placed": {"operator review": 1, "second look": 1, "unproven_infrastructure_failure": 1},
    }
    assert doc["no_decision"] == {
        ARENA_B: {"no_decision": 0, "decided": 1, "rate": "0.000000"},
        ARENA_A: {"no_decision": 2, "decided": 3, "rate": "0.666667"},
    }
    assert doc["revision"] == migrate.heads()[0]
    assert doc["backend"] == ("sqlite" if url.startswith("sqlite") else "postgresql")


def test_stats_counts_types_like_an_independent_query(built: tuple[str, dict[str, str]]) -> None:
    url, _ = built
    with EventStore(url) as store, store.engine.connect() as conn:
        rows = conn.execute(text("SELECT type, COUNT(*) FROM events GROUP BY type")).all()
    assert ops.stats(url)["events"]["by_type"] == {str(t): int(n) for t, n in sorted(rows)}


def test_stats_of_a_damaged_head_row_is_an_integrity_failure_that_reports_nothing(
    built: tuple[str, dict[str, str]],
) -> None:
    # The head's Merkle root is read from the head row once it is held to the tables: a
    # rewritten head row stops stats (exit 4 on the command line, which the cron check in
    # operations.md alerts on), and the message says nothing was reported, not "signed".
    url, _ = built
    with EventStore(url) as store, store.engine.begin() as conn:
        conn.execute(text("UPDATE ledger_head SET entry_hash = :h WHERE id = 1"),
                     {"h": "e" * 64})
    with pytest.raises(IntegrityError) as caught:
        ops.stats(url)
    assert caught.value.context["reason"] == "head_mismatch"
    assert "nothing was reported" in caught.value.message


def test_stats_of_an_empty_ledger(store: EventStore) -> None:
    doc = ops.stats(store.url)
    assert doc["head"]["position"] == 0 and doc["tip"] is None and doc["tip_matches_head"]
    assert doc["merkle"]["tree_size"] == 0 and doc["last_checkpoint"] is None
    assert doc["events"] == {"total": 0, "by_type": {}}
    assert doc["submissions"] == {} and doc["no_decision"] == {}
    assert doc["holds"] == {"current": {}, "placed": {}}


def test_stats_of_an_arena_with_nothing_decided_has_no_rate(store: EventStore) -> None:
    """NO_DECISION / decided is undefined with nothing decided: null, not 0 or an error."""
    with ArenaLedger(store.url, actor="tester") as ledger:
        Builder(ledger).commission(ARENA_A)
    doc = ops.stats(store.url)
    assert doc["no_decision"] == {ARENA_A: {"no_decision": 0, "decided": 0, "rate": None}}
    assert doc["submissions"] == {ARENA_A: _statuses()}


def test_stats_refuses_an_uninitialised_database(store_url: str) -> None:
    with pytest.raises(SchemaNotInitialised):
        ops.stats(store_url)


def test_stats_as_of_a_position_is_the_stats_the_ledger_gave_then(
    built: tuple[str, dict[str, str]],
) -> None:
    """Every figure as of N equals what stats said when N was the head, checkpoints included:
    one signed later over a larger tree is not the ledger's as of N; the newest one whose
    tree N holds is, even when it was signed after a larger one."""
    url, _ = built
    with EventStore(url) as store:
        signer = Signer.generate("ops.test")
        early = sign_tree(store, signer, size=20)
        then = ops.stats(url)
        store.append([EventDraft("credit-late", "CreditGranted", {
            "credit_id": "late", "hotkey": "5Erin", "amount_rao": 5, "note": "after"})],
            actor="tester")
        sign_tree(store, signer, size=EVENTS_TOTAL + 1)
        small = sign_tree(store, signer, size=10)  # after a larger tree, over a smaller one
        sign_tree(store, signer, size=EVENTS_TOTAL + 1)  # the newest: past N

    as_of = ops.stats(url, as_of=EVENTS_TOTAL)

    assert then["head"]["position"] == EVENTS_TOTAL and then["last_checkpoint"]["id"] == early.id
    assert as_of["as_of_position"] == EVENTS_TOTAL and then["as_of_position"] is None
    checkpoint = as_of.pop("last_checkpoint")
    assert (checkpoint["id"], checkpoint["tree_size"]) == (small.id, 10)
    assert checkpoint["age_positions"] == EVENTS_TOTAL - 10
    then.pop("last_checkpoint")
    assert {**as_of, "as_of_position": None} == then
    # Past the head it is the head; at 0, the empty ledger.
    past = ops.stats(url, as_of=10**9)
    assert past["as_of_position"] == past["events"]["total"] == EVENTS_TOTAL + 1
    assert {**past, "as_of_position": None} == ops.stats(url)
    empty = ops.stats(url, as_of=0)
    assert empty["head"]["position"] == 0 and empty["events"] == {"total": 0, "by_type": {}}
    assert empty["last_checkpoint"] is None and empty["submissions"] == {}


@pytest.mark.parametrize("bad", [-1, 2**53, "7", 1.0, True])
def test_stats_refuses_a_bad_as_of_before_reading(store_url: str, bad: Any) -> None:
    with pytest.raises(InvalidInput) as caught:
        ops.stats(store_url, as_of=bad)  # an uninitialised store: the check comes first
    assert caught.value.context["path"] == "as_of"
    assert "an integer from 0 to 2**53 - 1" in caught.value.message


# -- history ---------------------------------------------------------------------------------


def test_history_lists_a_hotkey_across_arenas_in_arrival_order(
    built: tuple[str, dict[str, str]],
) -> None:
    url, ids = built
    rows = ops.history(url, "5Alice")

    assert [r["submission_id"] for r in rows] == [ids["s6"], ids["s1"], ids["s3"]]
    assert [r["arena_id"] for r in rows] == [ARENA_B, ARENA_A, ARENA_A]
    assert [r["arrival"] for r in rows] == [[900, 0, 0], [1_000, 0, 0], [1_002, 0, 0]]
    assert [(r["status"], r["verdict"], r["reason"]) for r in rows] == [
        ("QUEUED", None, ""), ("QUALIFIED", "PASS", ""),
        ("REJECTED", None, "missing_eval_cost_payment")]
    rejected = describe("missing_eval_cost_payment")
    assert (rows[2]["cause"], rows[2]["next_step"]) == (rejected.cause, rejected.next_step)
    assert rows[0]["cause"] == "admitted and waiting for a validator"
    assert rows[1]["next_step"] == "nothing: rewards follow at settlement"
    assert rows[1]["fee"] == {"kind": "payment", "ref": "pay-d1", "amount_rao": FEE}
    assert rows[2]["fee"] is None
    assert [r["attempt_ids"] for r in rows] == [[], ["att-1"], []]
    assert all(r["hotkey"] == "5Alice" for r in rows)
    with EventStore(url) as store:
        stream = list(store.read_stream(f"submission-{ids['s1']}"))
    assert (rows[1]["arrived_position"], rows[1]["latest_position"]) == (
        stream[0].position, stream[-1].position)


def test_history_states_the_cause_of_holds_and_no_decisions(
    built: tuple[str, dict[str, str]],
) -> None:
    url, ids = built
    [bob_a, bob_b] = sorted(ops.history(url, "5Bob"), key=lambda r: r["arena_id"] != ARENA_A)
    assert (bob_a["submission_id"], bob_a["status"], bob_a["reason"]) == (
        ids["s2"], "NO_DECISION", "engine_killed")
    assert bob_a["cause"] == describe("engine_killed").cause
    assert (bob_b["status"], bob_b["reason"]) == ("FAILED", "candidate_slower")
    [dave] = ops.history(url, "5Dave")
    assert (dave["status"], dave["reason"]) == ("HELD", "unproven_infrastructure_failure")
    assert dave["next_step"] == describe("unproven_infrastructure_failure").next_step


def test_history_of_an_unknown_hotkey_is_empty_and_a_bad_one_is_refused(
    built: tuple[str, dict[str, str]],
) -> None:
    url, _ = built
    assert ops.history(url, "5Nobody") == []
    for bad in ("", "has space", "x" * 65):
        with pytest.raises(InvalidInput):
            ops.history(url, bad)


# -- backup and restore: SQLite --------------------------------------------------------------


@pytest.fixture
def sqlite_ledger(tmp_path: Path) -> tuple[str, dict[str, str]]:
    url = f"sqlite:///{tmp_path / 'source.db'}"
    migrate.upgrade(url)
    return url, build(url)


def _fingerprint(url: str) -> tuple[Any, ...]:
    with EventStore(url) as store:
        report = store.verify()
        size, root = store.merkle_root()
        return report.ok, report.checked, store.head(), size, root.hex(), store.checkpoints()


def test_a_sqlite_backup_verifies_and_carries_the_head(
    sqlite_ledger: tuple[str, dict[str, str]], tmp_path: Path,
) -> None:
    url, _ = sqlite_ledger
    with EventStore(url) as store:
        sign_tree(store, Signer.generate("ops.test"))
    target = tmp_path / "backup.db"

    report = ops.backup(url, target)

    assert report.method == "sqlite-backup-api" and report.verified is not None
    assert report.verified.ok and report.verified.checked == EVENTS_TOTAL
    assert report.head is not None and report.bytes == target.stat().st_size
    # One self-contained file: rollback journal (not WAL), nothing beside it, nothing partial.
    assert target.read_bytes()[18:20] == b"\x01\x01"
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("backup")) == [
        "backup.db"]
    copy = _fingerprint(f"sqlite:///{target}")
    assert copy == _fingerprint(url)
    assert copy[2] == report.head and copy[0] is True


def test_reading_a_backup_leaves_it_byte_for_byte_and_the_first_append_makes_it_wal(
    sqlite_ledger: tuple[str, dict[str, str]], tmp_path: Path,
) -> None:
    """Verify, stats, history, replay and an export read a backup without changing a byte
    (no WAL switch, no file beside it); a writer switches it to WAL before it writes."""
    from ledger.bundle import export_bundle
    from services.replay import replay_store

    url, _ = sqlite_ledger
    target = tmp_path / "backup.db"
    ops.backup(url, target)
    before = target.read_bytes()
    copy = f"sqlite:///{target}"
    with EventStore(copy) as store:
        assert store.verify().ok and replay_store(store).ok
        export_bundle(store, tmp_path / "bundle")
    assert ops.stats(copy)["head"]["position"] == EVENTS_TOTAL
    assert ops.history(copy, "5Alice")
    assert target.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("backup")) == [
        "backup.db"]

    with EventStore(copy) as store:
        store.append([EventDraft("credit-after", "CreditGranted", {
            "credit_id": "after", "hotkey": "5Erin", "amount_rao": 1, "note": ""})])
        assert store.verify().checked == EVENTS_TOTAL + 1
    assert target.read_bytes()[18:20] == b"\x02\x02"  # WAL from the first write on


def test_a_backup_never_overwrites_and_needs_a_ledger(
    sqlite_ledger: tuple[str, dict[str, str]], tmp_path: Path,
) -> None:
    url, _ = sqlite_ledger
    existing = tmp_path / "taken.db"
    existing.write_bytes(b"keep me")
    with pytest.raises(InvalidInput, match="already exists"):
        ops.backup(url, existing)
    assert existing.read_bytes() == b"keep me"
    with pytest.raises(InvalidInput, match="does not exist"):
        ops.backup(url, tmp_path / "no-such-dir" / "b.db")
    missing = tmp_path / "missing.db"
    with pytest.raises(SchemaNotInitialised):
        ops.backup(f"sqlite:///{missing}", tmp_path / "b.db")
    assert not missing.exists() and not (tmp_path / "b.db").exists()


def test_a_backup_is_consistent_while_a_validator_appends(
    sqlite_ledger: tuple[str, dict[str, str]], tmp_path: Path,
) -> None:
    url, _ = sqlite_ledger
    stop = threading.Event()
    written: list[int] = []

    def append_forever() -> None:
        with EventStore(url) as store:
            n = 0
            while not stop.is_set() and n < 400:
                n += 1
                result = store.append([EventDraft(f"credit-c{n}", "CreditGranted", {
                    "credit_id": f"c{n}", "hotkey": "5Busy", "amount_rao": n, "note": ""})],
                    actor="busy")
                written.append(result.last)

    worker = threading.Thread(target=append_forever)
    worker.start()
    try:
        while len(written) < 20:
            stop.wait(0.01)
        reports = [ops.backup(url, tmp_path / f"b{i}.db") for i in range(3)]
    finally:
        stop.set()
        worker.join()
    for report in reports:
        assert report.verified is not None and report.verified.ok
        assert report.head is not None and report.head.position >= EVENTS_TOTAL + 20
        assert report.verified.checked == report.head.position


def _tamper(url: str, position: int) -> None:
    with EventStore(url) as store, triggers_bypassed(store) as conn:
        conn.execute(text("UPDATE events SET actor = 'mallory' WHERE position = :p"),
                     {"p": position})


def test_a_backup_of_a_tampered_ledger_fails_and_is_kept_aside(
    sqlite_ledger: tuple[str, dict[str, str]], tmp_path: Path,
) -> None:
    url, _ = sqlite_ledger
    _tamper(url, 7)
    target = tmp_path / "backup.db"
    with pytest.raises(IntegrityError) as caught:
        ops.backup(url, target)
    assert caught.value.context["first_bad_position"] == 7
    assert not target.exists()
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("backup")) == [
        "backup.db.unverified"]


def test_a_sqlite_restore_into_a_new_file_verifies(
    sqlite_ledger: tuple[str, dict[str, str]], tmp_path: Path,
) -> None:
    url, ids = sqlite_ledger
    ops.backup(url, tmp_path / "backup.db")
    target = f"sqlite:///{tmp_path / 'restored.db'}"

    report = ops.restore(target, tmp_path / "backup.db")

    assert (tmp_path / "restored.db").read_bytes()[18:20] == b"\x02\x02"  # a live WAL ledger
    assert (tmp_path / "backup.db").read_bytes()[18:20] == b"\x01\x01"  # the backup as it was
    assert report.verified.ok and report.verified.checked == EVENTS_TOTAL
    assert report.revision == migrate.heads()[0] and report.pending == []
    assert _fingerprint(target) == _fingerprint(url)
    assert ops.history(target, "5Alice") == ops.history(url, "5Alice")
    with EventStore(target) as restored:  # a live ledger again: appends chain on
        restored.append([EventDraft("credit-next", "CreditGranted", {
            "credit_id": "next", "hotkey": "5Erin", "amount_rao": 1, "note": ""})])
        assert restored.verify().checked == EVENTS_TOTAL + 1
    assert ids


def test_a_sqlite_restore_into_an_initialised_empty_ledger(
    sqlite_ledger: tuple[str, dict[str, str]], tmp_path: Path,
) -> None:
    url, _ = sqlite_ledger
    ops.backup(url, tmp_path / "backup.db")
    target = f"sqlite:///{tmp_path / 'empty.db'}"
    migrate.upgrade(target)
    report = ops.restore(target, tmp_path / "backup.db")
    assert report.head == _fingerprint(url)[2]
    assert _fingerprint(target) == _fingerprint(url)


def test_a_restore_refuses_a_non_empty_target_and_changes_nothing(
    sqlite_ledger: tuple[str, dict[str, str]], tmp_path: Path,
) -> None:
    url, _ = sqlite_ledger
    ops.backup(url, tmp_path / "backup.db")
    other = f"sqlite:///{tmp_path / 'other.db'}"
    migrate.upgrade(other)
    with EventStore(other) as store:
        store.append([EventDraft("credit-own", "CreditGranted", {
            "credit_id": "own", "hotkey": "5Own", "amount_rao": 1, "note": ""})])
    before = _fingerprint(other)

    with pytest.raises(InvalidInput, match="not empty"):
        ops.restore(other, tmp_path / "backup.db")
    with pytest.raises(InvalidInput, match="not empty"):
        ops.restore(url, tmp_path / "backup.db")  # onto the source itself

    assert _fingerprint(other) == before
    assert not list(tmp_path.glob("*.restore-partial"))


def test_a_restore_refuses_a_tampered_backup_or_a_foreign_file(
    sqlite_ledger: tuple[str, dict[str, str]], tmp_path: Path,
) -> None:
    url, _ = sqlite_ledger
    backup = tmp_path / "backup.db"
    ops.backup(url, backup)
    _tamper(f"sqlite:///{backup}", 3)
    target = tmp_path / "restored.db"
    with pytest.raises(IntegrityError) as caught:
        ops.restore(f"sqlite:///{target}", backup)
    assert caught.value.context["first_bad_position"] == 3
    assert not target.exists() and not list(tmp_path.glob("*.restore-partial"))

    foreign = tmp_path / "notes.txt"
    foreign.write_text("not a database")
    with pytest.raises(InvalidInput):
        ops.restore(f"sqlite:///{target}", foreign)
    with pytest.raises(InvalidInput, match="does not exist"):
        ops.restore(f"sqlite:///{target}", tmp_path / "missing.db")
    assert not target.exists()


def _sqlite_file(path: Path, *statements: str) -> Path:
    """Writes a SQLite database of another kind at ``path`` by running ``statements``."""
    conn = sqlite3.connect(path)
    try:
        for statement in statements:
            conn.execute(statement)
        conn.commit()
    finally:
        conn.close()
    return path


def test_a_restore_never_overwrites_another_database_or_file(
    sqlite_ledger: tuple[str, dict[str, str]], tmp_path: Path,
) -> None:
    """A SQLite file of another application, or a file that is no database at all, is
    refused and left byte for byte; a database file with nothing in it is restored into."""
    url, _ = sqlite_ledger
    ops.backup(url, tmp_path / "backup.db")
    app = _sqlite_file(tmp_path / "app.db", "CREATE TABLE accounts (id INTEGER PRIMARY KEY, "
                       "balance INTEGER)", "INSERT INTO accounts VALUES (1, 100)")
    text_file = tmp_path / "notes.db"
    text_file.write_bytes(b"keep me, I am not a database" * 200)
    refusals: list[tuple[Path, type[Exception], str]] = [
        (app, InvalidInput, "exists and is not an arena-ledger database"),
        (text_file, StoreUnavailable, "notes.db: file is not a database"),
    ]
    for target, error, message in refusals:
        before = target.read_bytes()
        with pytest.raises(error, match=message):
            ops.restore(f"sqlite:///{target}", tmp_path / "backup.db")
        assert target.read_bytes() == before, target
    assert not list(tmp_path.glob("*.restore-partial"))

    emptied = _sqlite_file(tmp_path / "emptied.db", "CREATE TABLE gone (x INTEGER)",
                           "DROP TABLE gone")
    assert emptied.stat().st_size > 0
    ops.restore(f"sqlite:///{emptied}", tmp_path / "backup.db")
    assert _fingerprint(f"sqlite:///{emptied}") == _fingerprint(url)


# -- backup and restore: PostgreSQL ----------------------------------------------------------


@pytest.mark.postgres
@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
def test_a_postgres_backup_restores_into_a_new_database_and_verifies(
    built: tuple[str, dict[str, str]], tmp_path: Path, fresh_pg_database: str,
) -> None:
    url, _ = built
    with EventStore(url) as store:
        sign_tree(store, Signer.generate("ops.test"))
    archive = tmp_path / "ledger.dump"

    report = ops.backup(url, archive)

    assert report.method == "pg_dump" and report.verified is None
    assert report.head == _fingerprint(url)[2] and archive.stat().st_size == report.bytes
    assert "restor" in report.note
    with pytest.raises(InvalidInput, match="already exists"):
        ops.backup(url, archive)

    # A password in the URL (trust authentication ignores it) never reaches the report,
    # which `db restore --json` prints.
    with_password = fresh_pg_database.replace("@", ":hunter2@", 1)
    restored = ops.restore(with_password, archive)

    assert restored.url == with_password.replace("hunter2", "***")
    assert "hunter2" not in repr(restored.to_json())
    assert restored.method == "pg_restore" and restored.verified.ok
    assert restored.head == report.head and restored.revision == migrate.heads()[0]
    assert _fingerprint(fresh_pg_database) == _fingerprint(url)
    with pytest.raises(InvalidInput, match="already holds ledger tables"):
        ops.restore(fresh_pg_database, archive)
    with pytest.raises(InvalidInput, match="already holds ledger tables"):
        ops.restore(url, archive)
    with EventStore(fresh_pg_database) as store:  # the triggers came back with the tables
        with pytest.raises(Exception, match="append-only"), store.engine.begin() as conn:
            conn.exec_driver_sql("DELETE FROM events WHERE position = 1")
        assert store.verify().ok


@pytest.mark.postgres
@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
def test_a_postgres_restore_onto_a_database_downgraded_to_base_works(
    built: tuple[str, dict[str, str]], tmp_path: Path, fresh_pg_database: str,
) -> None:
    # `db downgrade base --discard-recorded` leaves Alembic's version table, empty; the
    # archive creates it, so pg_restore used to stop at "relation alembic_version already
    # exists" and the operator had to drop and recreate the database.
    url, _ = built
    archive = tmp_path / "ledger.dump"
    ops.backup(url, archive)
    migrate.upgrade(fresh_pg_database)
    migrate.downgrade(fresh_pg_database, "base", discard_recorded=True)
    with EventStore(fresh_pg_database) as target, target.engine.connect() as conn:
        left = conn.exec_driver_sql(
            "SELECT tablename FROM pg_tables WHERE schemaname = 'public'").scalars().all()
    assert left == ["alembic_version"] and migrate.current(fresh_pg_database) is None

    restored = ops.restore(fresh_pg_database, archive)

    assert restored.verified.ok and restored.revision == migrate.heads()[0]
    assert _fingerprint(fresh_pg_database) == _fingerprint(url)


@pytest.mark.postgres
@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
def test_a_postgres_restore_names_an_object_in_the_way_and_restores_nothing(
    built: tuple[str, dict[str, str]], tmp_path: Path, fresh_pg_database: str,
) -> None:
    url, _ = built
    archive = tmp_path / "ledger.dump"
    ops.backup(url, archive)
    with EventStore(fresh_pg_database) as target, target.engine.begin() as conn:
        conn.exec_driver_sql("CREATE TABLE checkpoints (x integer)")
    with pytest.raises(StoreError) as caught:
        ops.restore(fresh_pg_database, archive)
    assert caught.value.message == (
        'pg_restore stopped: the target database already holds relation "checkpoints", which '
        "the backup creates; nothing was restored. Restore into a freshly created, empty "
        'database (createdb NAME), or drop relation "checkpoints" first')
    with EventStore(fresh_pg_database) as target, target.engine.connect() as conn:
        left = conn.exec_driver_sql(
            "SELECT tablename FROM pg_tables WHERE schemaname = 'public'").scalars().all()
    assert left == ["checkpoints"]  # one transaction: nothing of the archive stayed
    # A version table that records a revision is never dropped to make room.
    with EventStore(fresh_pg_database) as target, target.engine.begin() as conn:
        conn.exec_driver_sql("DROP TABLE checkpoints")
        conn.exec_driver_sql("CREATE TABLE alembic_version (version_num varchar(32))")
        conn.exec_driver_sql("INSERT INTO alembic_version VALUES ('0001_x')")
    with pytest.raises(InvalidInput, match="already holds ledger tables"):
        ops.restore(fresh_pg_database, archive)
    assert migrate.current(fresh_pg_database) == "0001_x"


@pytest.mark.postgres
@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
def test_a_postgres_restore_refuses_what_is_not_a_ledger_archive(
    store_url: str, tmp_path: Path,
) -> None:
    junk = tmp_path / "junk.dump"
    junk.write_bytes(b"PGDMP but not really")
    with pytest.raises(InvalidInput, match="pg_restore failed") as caught:
        ops.restore(store_url, junk)
    assert caught.value.context["tool"] == "pg_restore"
    assert migrate.current(store_url) is None
    # Tables of any revision, not only the latest, make the target a ledger already.
    migrate.upgrade(store_url, str(migrate.history()[-1]["revision"]))
    with pytest.raises(InvalidInput, match="already holds ledger tables"):
        ops.restore(store_url, junk)
    # Ledger tables that no migration stamped (Alembic's table gone) are refused alike.
    migrate.upgrade(store_url)
    with EventStore(store_url) as store, store.engine.begin() as conn:
        conn.exec_driver_sql("DROP TABLE alembic_version")
    assert migrate.current(store_url) is None
    with pytest.raises(InvalidInput, match="already holds ledger tables"):
        ops.restore(store_url, junk)


@pytest.mark.postgres
@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
def test_a_postgres_backup_of_a_newer_releases_ledger_is_refused_before_restoring(
    built: tuple[str, dict[str, str]], tmp_path: Path, fresh_pg_database: str,
) -> None:
    # The archive's own alembic_version row is read first, so nothing reaches the target: a
    # restore refused only afterwards would leave a database to drop by hand.
    url, _ = built
    with EventStore(url) as store, store.engine.begin() as conn:
        conn.exec_driver_sql("UPDATE alembic_version SET version_num = '0009_from_a_newer'")
    archive = tmp_path / "newer.dump"
    ops.backup(url, archive)
    with pytest.raises(StoreError) as caught:
        ops.restore(fresh_pg_database, archive)
    assert caught.value.context["reason"] == "unknown_revision"
    assert caught.value.message.startswith(
        "the backup is at schema revision '0009_from_a_newer', which this release does not "
        "know")
    assert "Nothing was restored" in caught.value.message
    assert migrate.current(fresh_pg_database) is None
    with EventStore(fresh_pg_database) as target:
        assert not target.is_initialised()
        with target.engine.connect() as conn:
            tables = conn.exec_driver_sql(
                "SELECT count(*) FROM pg_tables WHERE schemaname = 'public'").scalar_one()
    assert tables == 0
    # The archive of a known revision reads back as that revision.
    with EventStore(url) as store, store.engine.begin() as conn:
        conn.exec_driver_sql(
            f"UPDATE alembic_version SET version_num = '{migrate.heads()[0]}'")
    known = tmp_path / "known.dump"
    ops.backup(url, known)
    assert ops._archived_revisions(ops._tool("pg_restore"), known) == [migrate.heads()[0]]


# -- upgrade ---------------------------------------------------------------------------------


def _previous_revision() -> str:
    return str(migrate.history()[1]["revision"])


def _old_ledger(url: str) -> None:
    """Leaves a ledger with events one revision behind head (revisions never touch events)."""
    migrate.upgrade(url)
    build(url)
    migrate.downgrade(url, _previous_revision())
    assert migrate.pending(url) == [migrate.heads()[0]]


def test_an_upgrade_refuses_a_tampered_ledger_and_migrates_nothing(store_url: str) -> None:
    _old_ledger(store_url)
    _tamper(store_url, 5)

    with pytest.raises(IntegrityError) as caught:
        ops.upgrade(store_url)

    assert caught.value.exit_code == 4
    assert caught.value.context["first_bad_position"] == 5
    assert "position 5" in caught.value.message and "nothing was migrated" in caught.value.message
    assert migrate.current(store_url) == _previous_revision()

    report = ops.upgrade(store_url, skip_verify=True)
    assert report.skipped_verify and report.verified is None
    assert report.after == migrate.heads()[0] and report.applied == [migrate.heads()[0]]


def test_an_upgrade_verifies_an_intact_ledger_first(store_url: str) -> None:
    _old_ledger(store_url)
    report = ops.upgrade(store_url)
    assert report.verified is not None and report.verified.ok
    assert report.verified.checked == EVENTS_TOTAL
    assert (report.before, report.after) == (_previous_revision(), migrate.heads()[0])
    document = report.to_json()
    assert document["verified"] == report.verified.to_json()
    assert document["verified"]["checked"] == EVENTS_TOTAL
    assert document["applied"] == [migrate.heads()[0]] and not document["skipped_verify"]
    assert ops.upgrade(store_url).applied == []  # already at head: nothing to do


def test_an_upgrade_to_a_named_revision_reports_only_the_revisions_it_ran(
    store_url: str,
) -> None:
    revisions = [r["revision"] for r in reversed(migrate.history())]
    report = ops.upgrade(store_url, revisions[1])
    assert (report.before, report.after) == (None, revisions[1])
    assert report.applied == revisions[:2]
    assert report.to_json()["verified"] is None
    report = ops.upgrade(store_url)
    assert (report.before, report.after) == (revisions[1], revisions[-1])
    assert report.applied == revisions[2:]


def test_a_new_database_upgrades_without_a_check(store_url: str) -> None:
    report = ops.upgrade(store_url)
    assert report.before is None and report.verified is None and not report.skipped_verify
    assert report.after == migrate.heads()[0]
    assert report.applied == [r["revision"] for r in reversed(migrate.history())]


# Operator-path rules from docs/operations.md and the module's docstrings: a backup or
# restore replaces a scratch file an interrupted run left; copies are fsynced under their scratch
# name before they take their final name, and the directory after; a restore copies next to the
# target and refuses a file without ledger tables or a target holding any schema object; pg_dump
# and pg_restore get the password through PGPASSWORD only; a missing or failing client tool is
# InvalidInput naming the manual procedure; db upgrade with nothing pending runs and verifies
# nothing.


Draft = Callable[..., EventDraft]


sqlite_only = pytest.mark.parametrize("backend", ["sqlite"], indirect=True)


def _leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if "partial" in p.name)


# -- scratch files ---------------------------------------------------------------------------


@sqlite_only
def test_a_backup_and_a_restore_replace_a_scratch_file_an_interrupted_run_left(
    store: EventStore,
    draft: Draft,
    tmp_path: Path,
) -> None:
    fill(store, draft, 5)
    target = tmp_path / "backup.db"
    torn = b"half a page of an interrupted copy" * 100
    for stale in ("backup.db.partial", "backup.db.partial-journal"):
        (tmp_path / stale).write_bytes(torn)
    report = ops.backup(store.url, target)
    assert report.verified is not None and report.verified.ok and report.head == store.head()

    restored = tmp_path / "restored.db"
    (tmp_path / "restored.db.restore-partial").write_bytes(torn)
    assert ops.restore(f"sqlite:///{restored}", target).head == store.head()
    assert _leftovers(tmp_path) == []


@sqlite_only
def test_a_backup_that_fails_verification_names_the_copy_it_kept(
    store: EventStore, draft: Draft, tmp_path: Path
) -> None:
    # operations.md: the command exits 4 naming the first bad position and "keeps the copy as
    # PATH.unverified for investigation"; the error carries where (its context, as --json).
    fill(store, draft, 4)
    _tamper(store.url, 3)
    target = tmp_path / "backup.db"
    with pytest.raises(IntegrityError) as caught:
        ops.backup(store.url, target)
    kept = tmp_path / "backup.db.unverified"
    assert caught.value.context["path"] == str(kept) and str(kept) in caught.value.message
    with EventStore(f"sqlite:///{kept}") as copy:
        assert copy.verify().first_bad_position == caught.value.context["first_bad_position"] == 3


# -- durability ------------------------------------------------------------------------------


@pytest.fixture
def fsynced(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, list[str]]]:
    """Records every fsync: the path the descriptor names and the folder's listing then."""
    calls: list[tuple[str, list[str]]] = []
    real = os.fsync

    def spy(fd: int) -> None:
        path = os.readlink(f"/proc/self/fd/{fd}")
        folder = path if os.path.isdir(path) else os.path.dirname(path)
        calls.append((path, sorted(os.listdir(folder))))
        real(fd)

    monkeypatch.setattr(os, "fsync", spy)
    return calls


def _assert_durable(calls: list[tuple[str, list[str]]], scratch: Path, final: Path) -> None:
    """The copy's bytes reach the disk under the scratch name, before the rename; the
    directory entry of the final name reaches it after."""
    assert any(path == str(scratch) for path, _ in calls), calls
    assert any(
        path == str(final.parent) and final.name in listing and scratch.name not in listing
        for path, listing in calls
    ), calls


@pytest.mark.parametrize(
    "backend", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)], indirect=True
)
def test_a_backup_is_fsynced_before_and_after_it_takes_its_name(
    store: EventStore,
    draft: Draft,
    tmp_path: Path,
    fsynced: list[tuple[str, list[str]]],
) -> None:
    fill(store, draft, 3)
    target = tmp_path / "backup.db"
    ops.backup(store.url, target)
    _assert_durable(fsynced, tmp_path / "backup.db.partial", target)


@sqlite_only
def test_a_restore_into_a_new_file_is_fsynced_before_and_after_it_takes_its_name(
    store: EventStore,
    draft: Draft,
    tmp_path: Path,
    fsynced: list[tuple[str, list[str]]],
) -> None:
    fill(store, draft, 3)
    ops.backup(store.url, tmp_path / "backup.db")
    fsynced.clear()
    restored = tmp_path / "restored.db"
    ops.restore(f"sqlite:///{restored}", tmp_path / "backup.db")
    _assert_durable(fsynced, tmp_path / "restored.db.restore-partial", restored)


# -- SQLite restore --------------------------------------------------------------------------


@sqlite_only
def test_a_restore_copies_the_backup_next_to_the_target(
    store: EventStore,
    draft: Draft,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # operations.md: "The backup is copied next to the target and verified before the
    # target is touched" (the same file system, so the verified copy is renamed in place).
    fill(store, draft, 3)
    (tmp_path / "backups").mkdir()
    (tmp_path / "live").mkdir()
    backup = tmp_path / "backups" / "backup.db"
    ops.backup(store.url, backup)
    verified: list[Path] = []
    real = ops._verify_file

    def spy(file: Path, *rest: Any) -> Any:
        verified.append(file)
        return real(file, *rest)

    monkeypatch.setattr(ops, "_verify_file", spy)
    ops.restore(f"sqlite:///{tmp_path / 'live' / 'ledger.db'}", backup)
    assert [file.parent for file in verified] == [tmp_path / "live"]
    assert _leftovers(tmp_path / "backups") == [] and _leftovers(tmp_path / "live") == []


@sqlite_only
@pytest.mark.parametrize(
    "statements",
    [
        ("CREATE TABLE accounts (id INTEGER PRIMARY KEY, balance INTEGER)",),
        ("CREATE TABLE events (position INTEGER PRIMARY KEY)",),  # a name alone is no ledger
    ],
    ids=["another-application", "events-table-only"],
)
def test_a_restore_refuses_a_sqlite_file_without_ledger_tables_and_creates_nothing(
    store_url: str,
    tmp_path: Path,
    statements: tuple[str, ...],
) -> None:
    foreign = _sqlite_file(tmp_path / "foreign.db", *statements)
    target = tmp_path / "restored.db"
    with pytest.raises(InvalidInput, match="holds no arena-ledger tables"):
        ops.restore(f"sqlite:///{target}", foreign)
    assert not target.exists() and _leftovers(tmp_path) == []


@sqlite_only
def test_a_restore_refuses_a_target_holding_any_schema_object(
    store: EventStore,
    draft: Draft,
    tmp_path: Path,
) -> None:
    # operations.md: the target "must be a new file, an empty file, or an initialised ledger
    # with no events"; a database whose only object is a view is none of them.
    fill(store, draft, 3)
    ops.backup(store.url, tmp_path / "backup.db")
    viewed = _sqlite_file(tmp_path / "viewed.db", "CREATE VIEW answer AS SELECT 42 AS value")
    before = viewed.read_bytes()
    with pytest.raises(InvalidInput, match="is not an arena-ledger database"):
        ops.restore(f"sqlite:///{viewed}", tmp_path / "backup.db")
    assert viewed.read_bytes() == before and _leftovers(tmp_path) == []


# -- PostgreSQL client tools -----------------------------------------------------------------


@pytest.fixture
def tool_calls(monkeypatch: pytest.MonkeyPatch) -> list[tuple[list[str], dict[str, str]]]:
    """Records the argv and environment of every client tool run (the tools still run)."""
    calls: list[tuple[list[str], dict[str, str]]] = []
    real = subprocess.run

    def spy(argv: list[str], **kwargs: Any) -> Any:
        calls.append((list(argv), dict(kwargs.get("env") or {})))
        return real(argv, **kwargs)

    monkeypatch.setattr(subprocess, "run", spy)
    return calls


@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
@pytest.mark.postgres
def test_the_client_tools_get_the_url_but_never_its_password_on_the_command_line(
    store: EventStore,
    draft: Draft,
    tmp_path: Path,
    fresh_pg_database: str,
    tool_calls: list[tuple[list[str], dict[str, str]]],
) -> None:
    # operations.md: "db backup / db restore pass the URL's password to pg_dump / pg_restore
    # through PGPASSWORD, never on their command line" (trust authentication ignores it).
    fill(store, draft, 3)
    password = "s3cret pass'word"
    url = make_url(store.url).set(password=password, query={"application_name": "o'ops rules"})
    url_str = url.render_as_string(hide_password=False)
    ops.backup(url_str, tmp_path / "with-options.dump")
    plain = make_url(store.url)
    no_port = f"postgresql+psycopg://{plain.username}@{plain.host}/{plain.database}"
    ops.backup(no_port, tmp_path / "default-port.dump")  # libpq's default port, 5432 here
    target = make_url(fresh_pg_database).set(password=password)
    ops.restore(target.render_as_string(hide_password=False), tmp_path / "with-options.dump")

    assert [Path(argv[0]).name for argv, _ in tool_calls] == [
        "pg_dump",
        "pg_dump",
        "pg_restore",
        "pg_restore",
        "pg_restore",
    ]
    for argv, _ in tool_calls:
        assert not any("s3cret" in arg for arg in argv), argv
    (dumped, env), restored = tool_calls[0], tool_calls[-1]
    assert env["PGPASSWORD"] == password and restored[1]["PGPASSWORD"] == password
    assert "application_name='o\\'ops rules'" in dumped[-1]
    assert "port=" not in tool_calls[1][0][-1]
    assert migrate.current(fresh_pg_database) == migrate.heads()[0]


@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
@pytest.mark.postgres
def test_a_missing_client_tool_is_invalid_input_pointing_to_the_manual_procedure(
    store: EventStore,
    draft: Draft,
    tmp_path: Path,
    fresh_pg_database: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # operations.md: "If pg_dump is missing, db backup exits 1 with a message that points here."
    fill(store, draft, 2)
    archive = tmp_path / "ledger.dump"
    ops.backup(store.url, archive)
    monkeypatch.setenv("PATH", str(tmp_path / "no-tools"))
    for call, tool in (
        (lambda: ops.backup(store.url, tmp_path / "b.dump"), "pg_dump"),
        (lambda: ops.restore(fresh_pg_database, archive), "pg_restore"),
    ):
        with pytest.raises(InvalidInput, match=r"docs/operations\.md") as caught:
            call()
        assert caught.value.exit_code == 1 and caught.value.context["tool"] == tool
    assert not (tmp_path / "b.dump").exists() and _leftovers(tmp_path) == []
    assert migrate.current(fresh_pg_database) is None


@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
@pytest.mark.postgres
def test_a_failing_tools_message_is_quoted_cut_to_the_limit(
    store_url: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    tools = tmp_path / "tools"
    tools.mkdir()
    fake = tools / "pg_restore"
    fake.write_text("#!/bin/sh\nprintf 'pg_restore: error: %0900d\\n' 0 >&2\nexit 2\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tools}{os.pathsep}{os.environ['PATH']}")
    archive = tmp_path / "ledger.dump"
    archive.write_bytes(b"PGDMP")
    with pytest.raises(InvalidInput) as caught:
        ops.restore(store_url, archive)
    prefix = "pg_restore failed (exit 2): "
    assert caught.value.message.startswith(prefix)
    quoted = caught.value.message.removeprefix(prefix)
    assert len(quoted) == ops.tool_message_chars_max
    assert quoted.startswith("pg_restore: error: 000")
    assert caught.value.context["tool"] == "pg_restore"


# -- upgrade and stats -----------------------------------------------------------------------


def test_an_upgrade_with_nothing_pending_runs_and_verifies_nothing(
    store: EventStore,
    draft: Draft,
) -> None:
    # operations.md: "A ledger already at head prints `already at …; nothing to do`": the
    # chain is verified before pending revisions run, and none are pending.
    fill(store, draft, 3)
    head = migrate.heads()[0]
    report = ops.upgrade(store.url)
    assert (report.before, report.after, report.applied) == (head, head, [])
    assert report.verified is None and not report.skipped_verify


def test_an_upgrade_without_the_check_says_so_in_its_json(store: EventStore, draft: Draft) -> None:
    # operations.md: "--skip-verify migrates without the check and prints a warning"; the
    # JSON report (`db upgrade --json`) carries the same fact.
    fill(store, draft, 3)
    previous = str(migrate.history()[1]["revision"])
    migrate.downgrade(store.url, previous)
    document = ops.upgrade(store.url, skip_verify=True).to_json()
    assert (document["before"], document["after"]) == (previous, migrate.heads()[0])
    assert document["skipped_verify"] is True and document["verified"] is None


@sqlite_only
def test_ledger_tables_without_a_revision_are_a_damaged_store_not_another_application(
    store: EventStore,
    draft: Draft,
) -> None:
    # The file holds the ledger's own tables, so "check --db" would be the wrong advice:
    # StoreError (exit 5) says the store is damaged and to restore a backup; nothing changes.
    fill(store, draft, 2)
    with store.engine.begin() as conn:
        conn.exec_driver_sql("DROP TABLE alembic_version")
    store.close()
    file = Path(make_url(store.url).database or "")
    before = file.read_bytes()
    with pytest.raises(StoreError, match="no schema revision: the store is damaged") as caught:
        ops.upgrade(store.url)
    assert caught.value.exit_code == 5
    assert file.read_bytes() == before and migrate.current(store.url) is None


def test_a_file_that_is_no_database_is_refused_as_invalid_input(tmp_path: Path) -> None:
    # init and `db upgrade` create a ledger "in a new or empty file only"; a file that is not
    # a SQLite database at all is refused with the library's own error, and left as it was.
    notes = tmp_path / "notes.db"
    notes.write_bytes(b"keep me, I am not a database" * 200)
    with pytest.raises(InvalidInput, match=r"notes\.db is not an arena-ledger database"):
        ops.refuse_foreign_sqlite(f"sqlite:///{notes}")
    assert notes.read_bytes() == b"keep me, I am not a database" * 200


@pytest.mark.parametrize(
    ("part", "whole", "rate"),
    [
        (1, 128, "0.007812"),  # 0.0078125: the tie goes to the even digit
        (3, 128, "0.023438"),  # 0.0234375
        (1, 3, "0.333333"),
        (2, 3, "0.666667"),
        (0, 5, "0.000000"),
        (5, 5, "1.000000"),
    ],
)
def test_a_no_decision_rate_is_rounded_half_even_to_six_places(
    part: int, whole: int, rate: str
) -> None:
    assert ops._rate(part, whole) == rate
    assert ops._rate(part, 0) is None


# -- history ---------------------------------------------------------------------------------


def test_history_lists_every_attempt_a_qualification_started_in_order(store_url: str) -> None:
    # One attempt that never ran (adapter_start_failed: REQUEUE), then a second one still
    # qualifying: two attempts, though only the first has been resolved.
    migrate.upgrade(store_url)
    with ArenaLedger(store_url, actor="tester") as ledger:
        b = Builder(ledger)
        b.commission(ARENA_A)
        sid = b.intake(ARENA_A, "5Alice", "d1", 1_000)
        b.claim(sid, "att-first")
        ledger.fault("att-first", "adapter_start_failed", "speed", "the lane never started")
        ledger.conclude("att-first", 1_011)
        b.claim(sid, "att-second")
    [row] = ops.history(store_url, "5Alice")
    assert (row["status"], row["attempts"]) == ("QUALIFYING", 2)
    assert row["attempt_ids"] == ["att-first", "att-second"]

"""Drives the operator and auditor commands through the installed script: stats, history, db.

A small ledger is written once per module with the library (two arenas, three submissions, a
NO_DECISION, a hold); the commands under test then run as a user runs them, in subprocesses:
exit codes, ``--json`` documents, one ``error[code]`` line and no traceback on expected
errors. A second ledger is tampered with (its append-only triggers bypassed) to check that
``db upgrade``, ``db backup`` and ``db restore`` refuse it with exit 4.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text

from ledger import migrate
from ledger.records import EventDraft
from ledger.store import EventStore
from machines import samples
from services.arena_ledger import ArenaLedger

FEE = 1_000_000_000


def _payload(event: Any) -> dict[str, Any]:
    return dict(event.model_dump(mode="json", exclude_unset=True))


def _intake(ledger: ArenaLedger, arena: str, hotkey: str, content: str, block: int,
            paid: bool) -> str:
    arrival = _payload(samples.arrived(arena, hotkey=hotkey, content=content, block=block,
                                       payment_ref=f"pay-{content}" if paid else None))
    arrival.pop("submission_id")
    return ledger.intake(arrival, payment_amount_rao=FEE if paid else None).submission_id


def _write_ledger(url: str) -> dict[str, str]:
    migrate.upgrade(url)
    with ArenaLedger(url, actor="e2e") as ledger:
        for arena in ("arena-a", "arena-b"):
            ledger.commission(_payload(samples.commissioned(arena, fee_rao=FEE)))
        ids = {"a1": _intake(ledger, "arena-a", "5Alice", "a1", 1_000, paid=True),
               "b1": _intake(ledger, "arena-b", "5Alice", "b1", 1_001, paid=False),
               "b2": _intake(ledger, "arena-b", "5Bob", "b2", 1_002, paid=True)}
        ledger.claim(attempt_id="att-1", pair_id="p", validator_hotkey="5Val", block=1_010,
                     submission_id=ids["a1"])
        ledger.fault("att-1", "engine_killed", "speed", "killed")
        ledger.conclude("att-1", 1_011)
        ledger.hold(ids["b2"], "operator review", 1_012)
    return ids


@pytest.fixture(scope="module")
def ops_cli(cli_factory: Any) -> tuple[Any, dict[str, str]]:
    cli = cli_factory("ops")
    return cli, _write_ledger(cli.db)


def test_stats_json_reports_the_ledger(ops_cli: tuple[Any, dict[str, str]]) -> None:
    cli, _ = ops_cli
    stats, head = cli.many([(("stats", "--json"), 0), (("head", "--json"), 0)])
    doc, tip = json.loads(stats.stdout), json.loads(head.stdout)

    assert doc["head"] == tip and doc["tip"]["position"] == tip["position"]
    assert doc["events"]["total"] == tip["position"] == 16
    assert doc["submissions"]["arena-a"]["NO_DECISION"] == 1
    assert (doc["submissions"]["arena-b"]["REJECTED"], doc["submissions"]["arena-b"]["HELD"]) == (
        1, 1)
    assert doc["no_decision"] == {
        "arena-a": {"no_decision": 1, "decided": 1, "rate": "1.000000"},
        "arena-b": {"no_decision": 0, "decided": 0, "rate": None},
    }
    assert doc["holds"] == {"current": {"operator review": 1}, "placed": {"operator review": 1}}
    assert doc["last_checkpoint"] is None


def test_stats_and_history_print_readable_tables(ops_cli: tuple[Any, dict[str, str]]) -> None:
    cli, ids = ops_cli
    stats, history = cli.many([(("stats",), 0), (("history", "--hotkey", "5Alice"), 0)])
    assert "head        position 16" in stats.stdout
    assert re.search(r"^chain tip   position 16  SubmissionHeld on submission-\S+  recorded "
                     r"\S+Z  \(matches the head\)$", stats.stdout, re.MULTILINE)
    assert "checkpoint  none signed yet" in stats.stdout
    assert "submissions by status" in stats.stdout and "operator review" in stats.stdout
    assert "1/1" in stats.stdout and "1.000000" in stats.stdout
    # Only the statuses that occur, in the machine's order, then the totals and the rate.
    table = stats.stdout.split("submissions by status\n")[1].splitlines()[:3]
    assert [re.split(r"\s{2,}", line.strip()) for line in table] == [
        ["arena", "NO_DECISION", "HELD", "REJECTED", "total", "NO_DECISION / decided", "rate"],
        ["arena-a", "1", "0", "0", "1", "1/1", "1.000000"],
        ["arena-b", "0", "1", "1", "2", "0/0", "-"],
    ]
    lines = history.stdout.splitlines()
    assert "2 submissions from 5Alice" in lines[-1]
    assert ids["a1"][:16] in history.stdout and "engine_killed" in history.stdout
    assert "missing_eval_cost_payment" in history.stdout


def test_stats_as_of_a_position_says_so_and_counts_only_what_came_before(
    ops_cli: tuple[Any, dict[str, str]],
) -> None:
    cli, _ = ops_cli
    human, as_json, first, bad = cli.many([
        (("stats", "--as-of", "5"), 0), (("stats", "--as-of", "5", "--json"), 0),
        (("events", "--as-of", "5", "--json"), 0), (("stats", "--as-of", "-1"), 2)])
    lines = human.stdout.splitlines()
    assert lines[0] == "as of position 5" and lines[2].startswith("head        position 5  ")
    doc = json.loads(as_json.stdout)
    fifth = [json.loads(line) for line in first.stdout.splitlines()][-1]
    assert doc["as_of_position"] == 5 and doc["events"]["total"] == 5
    assert doc["head"] == {"position": 5, "entry_hash": fifth["hash"]}
    assert doc["tip"]["type"] == fifth["type"] and doc["tip_matches_head"] is True
    assert "--as-of" in bad.stderr and bad.stdout == ""


def test_history_json_lists_a_hotkey_in_arrival_order(ops_cli: tuple[Any, dict[str, str]]) -> None:
    cli, ids = ops_cli
    rows = cli.jsonl("history", "--hotkey", "5Alice")
    assert [(r["submission_id"], r["arena_id"], r["status"], r["reason"]) for r in rows] == [
        (ids["a1"], "arena-a", "NO_DECISION", "engine_killed"),
        (ids["b1"], "arena-b", "REJECTED", "missing_eval_cost_payment")]
    assert all(r["cause"] and r["next_step"] for r in rows)
    assert rows[0]["attempt_ids"] == ["att-1"]
    assert cli.jsonl("history", "--hotkey", "5Nobody") == []


def test_history_refuses_a_bad_hotkey_and_needs_one(ops_cli: tuple[Any, dict[str, str]]) -> None:
    cli, _ = ops_cli
    bad, missing, long_one, listed = cli.many([
        (("history", "--hotkey", "two words"), 1), (("history",), 2),
        (("submissions", "--hotkey", "5" * 65), 1), (("submissions", "--hotkey", "5" * 64), 0)])
    cli.error_line(bad.stderr, "invalid_input")
    assert "--hotkey" in missing.stderr
    # submissions --hotkey takes the same check: no submission can carry a 65-character one.
    assert cli.error_line(long_one.stderr, "invalid_input") == (
        "error[invalid_input] [path --hotkey]: --hotkey: a hotkey is 1-64 printable non-space "
        "ASCII characters")
    assert long_one.stdout == "" and "submission" in listed.stdout


def test_stats_of_an_empty_ledger_says_so_without_empty_tables(cli: Any) -> None:
    cli("init")
    lines = cli("stats").stdout.splitlines()
    assert lines[-4:] == ["checkpoint  none signed yet (`arena-ledger checkpoint --key …`)",
                          "events: 0", "no arenas commissioned", "holds: none placed"]


def test_stats_and_backup_need_a_ledger(cli: Any) -> None:
    stats, backup = cli.many([(("stats",), 5), (("db", "backup", cli.root / "b.db"), 5)])
    cli.error_line(stats.stderr, "store_not_initialised")
    cli.error_line(backup.stderr, "store_not_initialised")
    assert not (cli.root / "b.db").exists()


def test_backup_then_restore_round_trips_and_refuses_to_overwrite(
    ops_cli: tuple[Any, dict[str, str]], tmp_path: Path,
) -> None:
    cli, _ = ops_cli
    target = tmp_path / "backup.db"
    report = json.loads(cli("db", "backup", target, "--json").stdout)
    assert report["method"] == "sqlite-backup-api" and report["verified"]["ok"] is True
    again = cli("db", "backup", target, expect=1)
    cli.error_line(again.stderr, "invalid_input")

    restored_db = f"sqlite:///{tmp_path / 'restored.db'}"
    restored = cli("--db", restored_db, "db", "restore", target)
    assert "16 events verified" in restored.stdout
    head, copy = cli.many([(("head", "--json"), 0), (("--db", restored_db, "head", "--json"), 0)])
    assert json.loads(head.stdout) == json.loads(copy.stdout) == report["head"]
    onto_source = cli("db", "restore", target, expect=1)
    assert "not empty" in cli.error_line(onto_source.stderr, "invalid_input")


@pytest.fixture
def tampered(cli: Any) -> Any:
    """A ledger one revision behind head whose event at position 2 was changed."""
    migrate.upgrade(cli.db)
    with EventStore(cli.db) as store:
        for n in range(1, 4):
            store.append([EventDraft(f"credit-c{n}", "CreditGranted", {
                "credit_id": f"c{n}", "hotkey": "5Miner", "amount_rao": 1, "note": ""})])
    migrate.downgrade(cli.db, str(migrate.history()[1]["revision"]))
    with EventStore(cli.db) as store, store.engine.connect() as conn, conn.begin():
        triggers = conn.exec_driver_sql(
            "SELECT name, sql FROM sqlite_master WHERE type = 'trigger'").all()
        for name, _sql in triggers:
            conn.exec_driver_sql(f'DROP TRIGGER "{name}"')
        conn.execute(text("UPDATE events SET actor = 'mallory' WHERE position = 2"))
        for _name, sql in triggers:
            conn.exec_driver_sql(sql)
    return cli


def test_upgrade_refuses_a_tampered_ledger(tampered: Any) -> None:
    cli = tampered
    previous = str(migrate.history()[1]["revision"])
    refused = cli("db", "upgrade", expect=4)
    assert refused.stdout.startswith(f"pending: {migrate.heads()[0]}")
    line = cli.error_line(refused.stderr, "integrity_failure")
    assert "position 2" in line and "nothing was migrated" in line
    assert cli("db", "current").stdout.strip() == previous

    forced = cli("db", "upgrade", "--skip-verify")
    assert "--skip-verify" in forced.stderr and f"now at {migrate.heads()[0]}" in forced.stdout
    cli("verify", expect=4)


def test_backup_and_restore_refuse_a_tampered_ledger(tampered: Any) -> None:
    cli = tampered
    migrate.upgrade(cli.db)
    backup = cli("db", "backup", cli.root / "b.db", expect=4)
    assert "position 2" in cli.error_line(backup.stderr, "integrity_failure")
    assert not (cli.root / "b.db").exists()
    kept = cli.root / "b.db.unverified"
    assert kept.is_file()
    restore = cli("--db", f"sqlite:///{cli.root / 'r.db'}", "db", "restore", kept, expect=4)
    assert "nothing was restored" in cli.error_line(restore.stderr, "integrity_failure")
    assert not (cli.root / "r.db").exists()


def test_a_sound_ledger_behind_head_is_backed_up_verified_restored_and_upgraded_readably(
    cli: Any, tmp_path: Path
) -> None:
    """The human forms of backup, restore and upgrade say what was verified, at which head."""
    migrate.upgrade(cli.db)
    with EventStore(cli.db) as store:
        for n in range(1, 4):
            store.append([EventDraft(f"credit-c{n}", "CreditGranted", {
                "credit_id": f"c{n}", "hotkey": "5Miner", "amount_rao": 1, "note": ""})])
        head = store.head()
    previous, latest = str(migrate.history()[1]["revision"]), migrate.heads()[0]
    migrate.downgrade(cli.db, previous)

    target = tmp_path / "behind.db"
    wrote, verified = cli("db", "backup", target).stdout.splitlines()
    assert wrote == f"wrote {target} ({target.stat().st_size:,} bytes, sqlite-backup-api)"
    assert verified == (
        f"verified: 3 events, head position 3 entry_hash {head.entry_hash}"
    )
    restored_db = f"sqlite:///{tmp_path / 'restored.db'}"
    assert cli("--db", restored_db, "db", "restore", target).stdout.splitlines() == [
        f"restored {target} (sqlite-backup-api): 3 events verified, head position 3 "
        f"entry_hash {head.entry_hash}",
        f"schema at {previous}; run `arena-ledger db upgrade` to apply {latest}",
    ]

    assert cli("db", "upgrade").stdout.splitlines() == [
        f"pending: {latest}",
        f"verified 3 events before migrating (head {head.entry_hash})",
        f"now at {latest}",
    ]
    # --sql prints what a downgrade would run and changes nothing; then it runs.
    sql = cli("db", "downgrade", previous, "--sql").stdout
    assert f"-- Running downgrade {latest} -> {previous}" in sql
    assert f"UPDATE alembic_version SET version_num='{previous}'" in sql
    assert cli("db", "current").stdout.strip() == latest
    assert cli("db", "downgrade", previous).stdout.strip() == f"now at {previous}"
    assert cli("db", "current").stdout.strip() == previous
    # Down to base would drop the recorded events: refused, one line, nothing changed.
    refused = cli("db", "downgrade", "base", expect=1)
    assert refused.stdout == "" and cli.error_line(refused.stderr, "refused") == (
        "error[refused] [path revision]: downgrading to base would drop the events table and "
        "its 3 recorded events; nothing was changed. Back up first (`arena-ledger db backup "
        "PATH`), then pass --discard-recorded to drop them")
    assert cli("db", "current").stdout.strip() == previous and cli.head() == 3
    dropped = cli("db", "downgrade", "base", "--discard-recorded")
    assert dropped.stdout.strip() == "now at base"


def test_upgrade_of_a_new_database_runs_without_a_check(cli: Any) -> None:
    done = cli("db", "upgrade")
    assert done.stdout.startswith("pending: ") and "verified" not in done.stdout
    assert done.stdout.strip().endswith(f"now at {migrate.heads()[0]}")
    assert "nothing to do" in cli("db", "upgrade").stdout

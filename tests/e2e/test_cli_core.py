"""Drives the core commands through the installed ``arena-ledger`` script: store, append, read.

An uninitialised database, ``db`` migrations, ``append`` of JSON Lines (good, malformed,
conflicting, repeated), ``verify``, ``head`` and ``events`` with its filters, and ``--help``
for every command. Reads of one state run side by side to keep the module quick.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
import threading
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from vocabulary import limits

ENVELOPE = {"position", "stream", "version", "type", "schema_version", "payload", "recorded_at",
            "actor", "hash"}


def hex64(seed: str) -> str:
    return hashlib.sha256(seed.encode()).hexdigest()


COMMISSION = {
    "arena_id": "core-arena", "commissioned_block": 100,
    "model": {"name": "tiny-llama", "revision": "r1"}, "hardware": {"gpu": "H200", "count": 1},
    "engine": {"runtime": "torch-reference", "runtime_version": "2.13.0",
               "image_digest": "sha256:" + hex64("image"), "engine_config": {"tp": 1},
               "engine_env": {}},
    "policy": {"policy_version": "paired-windows.v1", "windows": 4, "z": {"3": "2", "4": "1.5"},
               "window_noise": "0.01", "boot_noise": "0.01",
               "audit": {"bar": "0.99999", "min_calls": 8}},
    "fee_rao": 1_000_000_000, "incumbent_digest": hex64("incumbent-0"),
    "emission_share_ppm": 500_000,
}


def credit(credit_id: str, amount: Any = 5_000) -> tuple[str, str, dict[str, Any]]:
    return (f"credit-{credit_id}", "CreditGranted",
            {"credit_id": credit_id, "hotkey": "5Miner", "amount_rao": amount, "note": ""})


@dataclass
class Session:
    cli: Any  # conftest.Cli
    out: dict[str, subprocess.CompletedProcess[str]] = field(default_factory=dict)


@pytest.fixture(scope="module")
def session(cli_factory: Any) -> Session:
    """Initialises a ledger and appends good, bad, conflicting and repeated input."""
    cli = cli_factory("core")
    s = Session(cli)
    cli("init")
    good = cli.drafts(("arena-core-arena", "ArenaCommissioned", COMMISSION), credit("cr-1"),
                      credit("cr-2"), ("settlement", "EmissionPolicySet", {
                          "half_life_blocks": 7200, "burn_hotkey": "5Burn",
                          "validator_hotkey": "5Validator"}))
    s.out["good"] = cli("append", cli.write("good.jsonl", good), "--json")
    bad = cli.drafts(credit("cr-3"), credit("cr-4", amount=5.5))
    s.out["bad"] = cli("append", cli.write("bad.jsonl", bad), expect=1)
    conflict = [*cli.drafts(credit("cr-5")),
                {**cli.drafts(credit("cr-1"))[0], "expected_version": "no_stream"}]
    s.out["conflict"] = cli("append", cli.write("conflict.jsonl", conflict), expect=3)
    keyed = cli.drafts(credit("cr-6"), credit("cr-7"), idempotency_key="grants-2024-06")
    path = cli.write("keyed.jsonl", keyed)
    s.out["keyed"] = cli("append", path)
    s.out["keyed-again"] = cli("append", path)
    return s


def test_good_lines_are_appended_as_one_batch(session: Session) -> None:
    assert session.cli.lines(session.out["good"].stdout) == [
        {"first_line": 1, "last_line": 4, "positions": [1, 2, 3, 4], "already_recorded": False}]


def test_a_float_in_a_payload_names_its_line_and_path_and_writes_nothing(
    session: Session,
) -> None:
    line = session.cli.error_line(session.out["bad"].stderr, "non_canonical")
    assert line.startswith("error[non_canonical] [line 2] [path $.payload.amount_rao]: "), line
    assert session.out["bad"].stdout == ""


def test_a_version_conflict_exits_3_and_writes_nothing(session: Session) -> None:
    line = session.cli.error_line(session.out["conflict"].stderr, "concurrency_conflict")
    assert line == ("error[concurrency_conflict] [line 2]: stream 'credit-cr-1' is at version "
                    "1, expected no_stream; nothing was written")


def test_repeating_a_keyed_append_returns_the_original_positions(session: Session) -> None:
    assert session.out["keyed"].stdout.strip() == "appended positions 5..6 (2 events, lines 1..2)"
    assert session.out["keyed-again"].stdout.strip() == (
        "already recorded at positions 5..6 (2 events, lines 1..2)")


def test_drafts_and_payloads_are_read_from_a_pipe_and_a_device_is_named(cli: Any) -> None:
    """`append <(jq …)` hands the command a named pipe: it is read like a file, never refused
    as "does not exist". A device that reads empty is named for what it holds."""
    cli("init")
    fifo = cli.root / "drafts.pipe"
    os.mkfifo(fifo)
    line = json.dumps({"stream": "credit-p1", "type": "CreditGranted", "payload": {
        "credit_id": "p1", "hotkey": "5Miner", "amount_rao": 5, "note": "piped"}}) + "\n"
    writer = threading.Thread(target=fifo.write_text, args=(line,))
    writer.start()
    try:
        piped = cli("append", fifo)
    finally:
        writer.join(timeout=30)
    assert piped.stdout.strip() == "appended position 1 (1 event, line 1)"
    empty = cli("append", "/dev/null", expect=1)
    assert cli.error_line(empty.stderr, "invalid_input") == (
        "error[invalid_input] [path /dev/null]: the input holds no events")
    unreadable = cli("append", "/proc/self/mem", expect=1)  # opens, then fails to read
    assert cli.error_line(unreadable.stderr, "invalid_input") == (
        "error[invalid_input] [path /proc/self/mem]: input file /proc/self/mem cannot be "
        "read: Input/output error")
    assert cli.head() == 1


def test_reads_head_verify_and_events_with_filters(session: Session) -> None:
    cli = session.cli
    head, verify, everything, typed_after, stream, as_of, table, misspelt, malformed, unknown = (
        cli.many([
            (("head", "--json"), 0), (("verify",), 0), (("events", "--json"), 0),
            (("events", "--type", "CreditGranted", "--from-position", "3", "--json"), 0),
            (("events", "--stream", "credit-cr-6", "--json"), 0),
            (("events", "--as-of", "2", "--json"), 0), (("events",), 0),
            (("events", "--type", "CreditGranted", "--type", "CreditGrant", "--json"), 1),
            (("events", "--stream", "Credit-cr-6", "--json"), 1),
            (("events", "--stream", "credit-cr-99", "--json"), 0)]))
    events = cli.lines(everything.stdout)
    # Only the good batch and the keyed one were written: bad and conflicting input left nothing.
    assert [(e["position"], e["stream"], e["version"], e["type"]) for e in events] == [
        (1, "arena-core-arena", 1, "ArenaCommissioned"), (2, "credit-cr-1", 1, "CreditGranted"),
        (3, "credit-cr-2", 1, "CreditGranted"), (4, "settlement", 1, "EmissionPolicySet"),
        (5, "credit-cr-6", 1, "CreditGranted"), (6, "credit-cr-7", 1, "CreditGranted")]
    for event in events:
        assert set(event) == ENVELOPE
        assert event["schema_version"] == 1 and event["actor"] == "cli"
        assert re.fullmatch(r"[0-9a-f]{64}", event["hash"])
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z", event["recorded_at"])
    assert events[0]["payload"] == COMMISSION
    assert events[1]["payload"] == {"amount_rao": 5000, "credit_id": "cr-1", "hotkey": "5Miner",
                                    "note": ""}
    assert json.loads(head.stdout) == {"position": 6, "entry_hash": events[-1]["hash"]}
    assert verify.stdout.strip() == f"ok: 6 events verified (1..6), head {events[-1]['hash']}"
    # --type drops position 4 (EmissionPolicySet), --from-position drops 1 and 2.
    assert [e["position"] for e in cli.lines(typed_after.stdout)] == [3, 5, 6]
    assert cli.lines(stream.stdout) == [events[4]]
    assert cli.lines(as_of.stdout) == events[:2]
    assert "6 events" in table.stdout and "EmissionPolicySet v1" in table.stdout
    # A misspelt type is an error naming it, not "0 events".
    line = cli.error_line(misspelt.stderr, "invalid_input")
    assert line.startswith("error[invalid_input] [path --type]: unknown event type "
                           "'CreditGrant' (did you mean 'CreditGranted'?); the types are "), line
    assert "CreditGranted, CreditSpent" in line
    assert misspelt.stdout == ""
    # So is a stream name no ledger can hold; a well-formed one with no events lists none.
    line = cli.error_line(malformed.stderr, "schema_invalid")
    assert line == ("error[schema_invalid] [path --stream]: --stream 'Credit-cr-6' is not a "
                    "valid stream name (category-id, lowercase)"), line
    assert malformed.stdout == "" and unknown.stdout == ""


def test_events_refuses_a_stream_or_prefix_of_no_category(session: Session) -> None:
    """Every event type belongs to one stream category, so a misspelt category is an error
    naming the option and the categories, not "0 events"; a prefix may stop anywhere in a
    category's name or go on into its ids."""
    cli = session.cli
    outcomes = cli.many([
        (("events", "--stream", "credits-cr-6", "--json"), 1),
        (("events", "--stream-prefix", "cred", "--json"), 0),
        (("events", "--stream-prefix", "credit-cr-", "--json"), 0),
        (("events", "--stream-prefix", "settle", "--json"), 0),
        (("events", "--stream-prefix", "settlement-", "--json"), 1),
        (("events", "--stream-prefix", "atempt-", "--json"), 1)])
    stream, short, into_ids, settle, past_settlement, misspelt = outcomes
    streams = ("the streams are arena-…, attempt-…, calibration-…, credit-…, payment-…, "
               "settlement, submission-…")
    assert cli.error_line(stream.stderr, "invalid_input") == (
        "error[invalid_input] [path --stream]: no event type belongs to a stream named "
        f"'credits-cr-6'; {streams}")
    assert cli.error_line(misspelt.stderr, "invalid_input") == (
        "error[invalid_input] [path --stream-prefix]: no event type belongs to a stream "
        f"starting with 'atempt-'; {streams}")
    assert "'settlement-'" in cli.error_line(past_settlement.stderr, "invalid_input")
    assert stream.stdout == misspelt.stdout == past_settlement.stdout == ""
    credits = [e["position"] for e in cli.lines(short.stdout)]
    assert credits == [2, 3, 5, 6]
    assert [e["position"] for e in cli.lines(into_ids.stdout)] == credits
    assert [e["position"] for e in cli.lines(settle.stdout)] == [4]


def test_time_filters_take_any_offset_and_ranges_past_the_head_are_refused(
    session: Session,
) -> None:
    cli = session.cli
    events = cli.lines(cli("events", "--json").stdout)
    # The keyed batch (positions 5 and 6) was appended after the good one (1 to 4).
    fifth = datetime.fromisoformat(events[4]["recorded_at"])
    local = fifth.astimezone(timezone(timedelta(hours=1))).isoformat()
    assert local.endswith("+01:00") and local[:13] != events[4]["recorded_at"][:13]
    since, until, day, word, month, year0, backwards, past = cli.many([
        (("events", "--since", local, "--json"), 0),
        (("events", "--until", local, "--json"), 0),
        (("events", "--since", events[0]["recorded_at"][:10], "--json"), 0),
        (("events", "--since", "yesterday"), 1),
        (("events", "--until", "2026-13-01T00:00:00Z"), 1),
        (("events", "--since", "0001-01-01T00:00:00+01:00"), 1),  # year 0 in UTC
        (("verify", "--from", "5", "--to", "4"), 1),
        (("verify", "--from", "7"), 1)])
    # The same instant written with an offset selects what it means, not what sorts after it.
    assert [e["position"] for e in cli.lines(since.stdout)] == [5, 6]
    assert [e["position"] for e in cli.lines(until.stdout)] == [1, 2, 3, 4]
    assert cli.lines(day.stdout) == events  # a date is its midnight, UTC
    assert cli.error_line(word.stderr, "invalid_input").startswith(
        "error[invalid_input] [path --since]: 'yesterday' is not an RFC 3339 date-time")
    assert "[path --until]: '2026-13-01T00:00:00Z'" in cli.error_line(
        month.stderr, "invalid_input")
    assert "[path --since]: '0001-01-01T00:00:00+01:00'" in cli.error_line(
        year0.stderr, "invalid_input")
    assert cli.error_line(backwards.stderr, "invalid_input") == (
        "error[invalid_input] [path --to]: the range 5..4 ends before it starts")
    # Exit 4 is for a broken chain; a range past the head is a mistyped number.
    assert cli.error_line(past.stderr, "invalid_input") == (
        "error[invalid_input] [path --from]: the range starts at 7, past the head "
        "(position 6)")
    assert (word.stdout, backwards.stdout, past.stdout) == ("", "", "")


def test_db_commands_on_an_initialised_ledger(session: Session) -> None:
    current, current_json, history, check, up, down = session.cli.many([
        (("db", "current"), 0), (("db", "current", "--json"), 0), (("db", "history"), 0),
        (("db", "check"), 0), (("db", "upgrade", "0009_nope"), 1),
        (("db", "downgrade", "0009_nope"), 1)])
    head_revision = current.stdout.strip()
    assert json.loads(current_json.stdout) == {"current": head_revision,
                                               "heads": [head_revision], "known": True}
    revisions = history.stdout.strip().splitlines()
    assert revisions[0].split(": ")[0].endswith(f" -> {head_revision}")  # newest first
    assert revisions[-1].startswith("base -> 0001_initial: ")
    # The ledger's answer alone: no Alembic notice before it.
    assert check.stdout == "no drift: the database matches the table metadata\n"
    # An unknown revision is named, not "already at head; nothing to do" (upgrade) or an
    # alembic message without the choices (downgrade).
    for refused in (up, down):
        line = session.cli.error_line(refused.stderr, "invalid_input")
        assert line.startswith("error[invalid_input] [path revision]: unknown revision "
                               f"'0009_nope'; the revisions are {head_revision}, "), line
        assert refused.stdout == ""
    assert session.cli("db", "current").stdout.strip() == head_revision


def test_an_input_past_one_append_points_to_batch_and_batch_is_bounded(cli: Any) -> None:
    cli("init")
    drafts = cli.write("big.jsonl", [{"stream": f"credit-c{i}", "type": "CreditGranted",
                                      "payload": {"credit_id": f"c{i}", "hotkey": "5Miner",
                                                  "amount_rao": 1, "note": "n"}}
                                     for i in range(limits.batch_events_max + 1)])
    whole = cli("append", drafts, expect=1)
    assert cli.error_line(whole.stderr, "limit_exceeded") == (
        f"error[limit_exceeded] [path $]: one append takes at most {limits.batch_events_max} "
        f"events and this one would hold {limits.batch_events_max + 1}: give --batch "
        f"{limits.batch_events_max} (or fewer) to append the input in batches, each one atomic")
    too_wide = cli("append", drafts, "--batch", str(limits.batch_events_max + 1), expect=2)
    assert "--batch" in too_wide.stderr
    assert json.loads(cli("head", "--json").stdout)["position"] == 0  # nothing was written
    batched = cli("append", drafts, "--batch", str(limits.batch_events_max))
    assert batched.stdout.splitlines()[-1] == (
        f"appended position {limits.batch_events_max + 1} (1 event, line "
        f"{limits.batch_events_max + 1})")


def test_append_names_a_misspelt_type_malformed_json_and_the_stream_an_event_belongs_on(
    cli: Any,
) -> None:
    cli("init")
    grant = credit("cr-1")
    misspelt = cli("append", cli.write("misspelt.jsonl", cli.drafts(
        (grant[0], "CreditGrantd", grant[2]))), expect=1)
    assert cli.error_line(misspelt.stderr, "unknown_event_type") == (
        "error[unknown_event_type] [line 1] [path $.type]: unknown event type 'CreditGrantd' "
        "(did you mean 'CreditGranted'?)")
    # Text that is not JSON is named as such (invalid_json), not as non-canonical JSON.
    (cli.root / "broken.jsonl").write_text(
        json.dumps(dict(zip(("stream", "type", "payload"), grant, strict=True))) + "\n"
        + '{"stream": "credit-cr-2", "type": "CreditGranted" "payload": {}}\n')
    broken = cli("append", "broken.jsonl", expect=1)
    assert cli.error_line(broken.stderr, "invalid_json") == (
        "error[invalid_json] [line 2] [path $]: line 2 is not valid JSON: Expecting ',' "
        "delimiter at column 51")
    # A stream whose id is not the event's says which stream the event belongs on.
    moved = cli("append", cli.write("moved.jsonl", cli.drafts(
        ("credit-cr-9", "CreditGranted", grant[2]),
        ("arena-other", "ArenaCommissioned", COMMISSION))), expect=1)
    assert cli.error_line(moved.stderr, "refused") == (
        "error[refused] [line 1]: CreditGranted refused by the credit machine in state NONE: "
        "stream_id_mismatch (cr-1): the event's credit_id is cr-1, so it belongs on stream "
        "credit-cr-1, not credit-cr-9; nothing was written")
    moved = cli("append", cli.write("moved-arena.jsonl", cli.drafts(
        ("arena-other", "ArenaCommissioned", COMMISSION))), expect=1)
    assert moved.stderr.rstrip().endswith(
        "the event's arena_id is core-arena, so it belongs on stream arena-core-arena, not "
        "arena-other; nothing was written")
    assert cli.head() == 0


def test_an_uninitialised_database_exits_5_with_one_line(cli: Any) -> None:
    # Three ways in: a store read, an ArenaLedger query, and an append from stdin.
    calls = [("head",), ("submissions", "--json"), ("append", "-")]
    done = cli.many([(args, 5) for args in calls[:-1]])
    done.append(cli(*calls[-1], expect=5,
                    stdin=json.dumps({"stream": "credit-x", "type": "CreditGranted", "payload": {
                        "credit_id": "x", "hotkey": "5M", "amount_rao": 1, "note": ""}})))
    for args, result in zip(calls, done, strict=True):
        line = cli.error_line(result.stderr, "store_not_initialised")
        assert "arena-ledger init" in line, (args, line)
        assert result.stdout == "", args
    sql, current = cli.many([(("db", "upgrade", "--sql"), 0), (("db", "current"), 5)])
    assert "CREATE TABLE events" in sql.stdout and "CREATE TABLE alembic_version" in sql.stdout
    assert "there is no ledger at" in current.stderr  # --sql changed nothing


def test_a_database_that_does_not_open_exits_5_naming_it_and_changes_nothing(
    cli: Any, tmp_path: Any
) -> None:
    """init and the db commands connect through Alembic, not the store: a file that is not
    a database, a directory that does not exist and a server that does not answer are each
    one error line naming the database (its password hidden), never a driver traceback."""
    text = tmp_path / "notes.txt"
    text.write_bytes(b"not a ledger\n" * 100)
    every = [("init",), ("db", "upgrade"), ("db", "current"), ("db", "check"),
             ("db", "downgrade", "base"), ("head",)]
    urls = {
        f"sqlite:///{text}": ("file is not a database", every),
        # Only the commands that create a ledger try to open a path that does not exist.
        f"sqlite:///{tmp_path / 'missing' / 'l.db'}": (
            "unable to open database file", [("init",), ("db", "upgrade")]),
        "postgresql+psycopg://postgres:hunter2@127.0.0.1:1/test": ("connection", every),
    }
    for url, (reason, commands) in urls.items():
        done = type(cli)(cli.root, url).many([(args, 5) for args in commands])
        for args, result in zip(commands, done, strict=True):
            line = cli.error_line(result.stderr, "store_unavailable")
            assert f"cannot open the database {url.replace('hunter2', '***')}: " in line, line
            assert reason in line and "hunter2" not in line, (args, line)
    assert text.read_bytes() == b"not a ledger\n" * 100
    assert not (tmp_path / "missing").exists()


def test_init_names_a_sqlite_path_as_written(
    cli: Any, tmp_path: Any
) -> None:
    """init's line once took a path's brackets for rich markup: `[bold]` vanished from the
    path it named (the password half of that fault: the PostgreSQL test below)."""
    from ledger.migrate import heads

    folder = tmp_path / "[bold]ledgers"
    folder.mkdir()
    path = folder / "l.db"
    done = type(cli)(cli.root, f"sqlite:///{path}")("init")
    assert done.stdout == f"ledger ready at sqlite:///{path} (head 0, revision {heads()[0]})\n"
    assert path.is_file()


@pytest.mark.postgres
def test_init_on_postgresql_hides_the_password(cli: Any, pg_database: str) -> None:
    from ledger.migrate import heads

    # Trust authentication ignores the password; a server that asked for it would not.
    url = pg_database.replace("@", ":hunter2@", 1)
    assert "hunter2" in url
    done = type(cli)(cli.root, url)("init")
    assert done.stdout == (f"ledger ready at {url.replace('hunter2', '***')} (head 0, revision "
                           f"{heads()[0]})\n")


def test_a_missing_sqlite_file_is_named_and_never_created_except_by_init(
    cli: Any, tmp_path: Any
) -> None:
    """SQLite creates a file it is asked to open, so a mistyped --db could leave an empty
    database behind, even for a read. Reads, db current/check/downgrade and writes refuse
    without creating it; init (db upgrade) is what creates a ledger."""
    path = tmp_path / "typo.db"
    other = type(cli)(cli.root, f"sqlite:///{path}")
    refusals = [("head",), ("events",), ("verify",), ("replay",), ("stats",),
                ("submissions",), ("db", "current"), ("db", "current", "--json"),
                ("db", "check"), ("db", "downgrade", "base"), ("db", "backup", tmp_path / "b.db")]
    for args, result in zip(refusals, other.many([(a, 5) for a in refusals]), strict=True):
        line = cli.error_line(result.stderr, "store_not_initialised")
        assert f"there is no ledger at {path}" in line, (args, line)
    appended = other("append", "-", expect=5, stdin=json.dumps({
        "stream": "credit-x", "type": "CreditGranted",
        "payload": {"credit_id": "x", "hotkey": "5M", "amount_rao": 1, "note": ""}}))
    cli.error_line(appended.stderr, "store_not_initialised")
    assert sorted(p.name for p in tmp_path.iterdir()) == []
    assert "ledger ready" in other("init").stdout
    assert path.is_file()


def test_an_unsupported_driver_is_refused_by_name(cli: Any, tmp_path: Any) -> None:
    for url in ("postgresql+psycopg2://postgres:pw@127.0.0.1:5432/test",
                "postgresql+asyncpg://postgres@127.0.0.1:5432/test",
                f"sqlite+aiosqlite:///{tmp_path / 'a.db'}"):
        for args in (("head",), ("init",)):
            done = type(cli)(cli.root, url)(*args, expect=1)
            line = cli.error_line(done.stderr, "invalid_input")
            driver = url.split(":", 1)[0]
            assert f"database driver '{driver}' is not supported" in line, line
            assert "psycopg 3" in line and ":pw@" not in line
    assert list(tmp_path.iterdir()) == []


def test_an_in_memory_sqlite_url_is_refused_by_name(cli: Any, tmp_path: Any) -> None:
    """An in-memory URL is refused by every command, `init` included: a ledger there would
    vanish with the process, and the next command would say "run `arena-ledger init`"."""
    for url in ("sqlite://", "sqlite:///", "sqlite:///:memory:",
                "sqlite:///file:ledger?mode=memory&uri=true"):
        for args in (("init",), ("head",), ("db", "upgrade")):
            done = type(cli)(cli.root, url)(*args, expect=1)
            assert cli.error_line(done.stderr, "invalid_input") == (
                f"error[invalid_input]: database URL {url!r} names an in-memory SQLite "
                "database: every connection gets its own, empty one, and it is gone when the "
                "process ends, so no ledger can live there; give a file, e.g. "
                "sqlite:///arena-ledger.db")
    # A file: URI that is not in memory (read-only, say) is a file like any other.
    done = type(cli)(cli.root, f"sqlite:///file:{tmp_path / 'none.db'}?mode=ro&uri=true")(
        "head", expect=5)
    assert "in-memory" not in done.stderr


@pytest.mark.postgres
def test_a_role_without_privileges_gets_one_error_line_from_every_command(
    cli: Any, pg_database: str
) -> None:
    """A PostgreSQL role that may connect but not read the ledger's tables: every command is
    the store's one line (exit 5) naming the refusal, never the driver's traceback; the
    migration commands read alembic_version, stats the Merkle head, the rest ledger_head."""
    import uuid

    import psycopg
    from sqlalchemy.engine import make_url

    from ledger import migrate

    migrate.upgrade(pg_database)
    role = f"al_noread_{uuid.uuid4().hex[:8]}"
    admin_url = make_url(pg_database).set(drivername="postgresql", database="postgres")
    admin = admin_url.render_as_string(hide_password=False)
    owner = make_url(pg_database).set(drivername="postgresql").render_as_string(
        hide_password=False)
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'CREATE ROLE "{role}" LOGIN')
    # It sees the schema (a recreated public schema grants nobody USAGE), not the tables.
    with psycopg.connect(owner, autocommit=True) as conn:
        conn.execute(f'GRANT USAGE ON SCHEMA public TO "{role}"')
    try:
        url = make_url(pg_database).set(username=role).render_as_string(hide_password=False)
        commands = [("head",), ("events",), ("verify",), ("replay",), ("stats",),
                    ("checkpoints",), ("db", "current"), ("db", "upgrade"), ("db", "check"),
                    ("settle", "--block", "10")]
        done = type(cli)(cli.root, url).many([(args, 5) for args in commands])
        for args, result in zip(commands, done, strict=True):
            line = cli.error_line(result.stderr, "store_error")
            assert "permission denied for table" in line, (args, line)
    finally:
        with psycopg.connect(owner, autocommit=True) as conn:
            conn.execute(f'REVOKE USAGE ON SCHEMA public FROM "{role}"')
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'DROP ROLE "{role}"')


@pytest.mark.parametrize("args", [("events",), ("events", "--json")])
def test_a_reader_that_stops_early_ends_the_command_quietly_with_exit_0(
    cli: Any, script: Any, args: tuple[str, ...]
) -> None:
    """``arena-ledger events | head``: the pipe closes while the command still writes; a
    table (rich) and JSON Lines alike end with exit 0 and nothing on stderr."""
    cli("init")
    grants = [{"stream": f"credit-c{i}", "type": "CreditGranted", "payload": {
        "credit_id": f"c{i}", "hotkey": "5Miner", "amount_rao": i + 1, "note": "x" * 100}}
        for i in range(3000)]
    cli("append", "-", stdin="".join(json.dumps(g) + "\n" for g in grants))
    reader = subprocess.Popen(  # far more output than a pipe buffers (64 KiB)
        [str(script), *args], cwd=cli.root, env=cli.env(),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert reader.stdout is not None and reader.stderr is not None
    assert len(reader.stdout.read(100)) == 100
    reader.stdout.close()
    stderr = reader.stderr.read().decode()
    assert reader.wait(timeout=120) == 0, stderr
    assert stderr == ""


def test_an_unknown_log_level_is_a_usage_error_naming_the_levels(cli: Any) -> None:
    bad = cli("--log-level", "LOUD", "head", expect=2)
    assert "--log-level" in bad.stderr and "'LOUD'" in bad.stderr
    assert all(level in bad.stderr for level in ("'debug'", "'info'", "'warning'", "'error'"))
    assert bad.stdout == ""
    # Any case of a known level is taken (the uninitialised database then exits 5).
    quiet = cli("--log-level", "error", "head", expect=5)
    cli.error_line(quiet.stderr, "store_not_initialised")
    loud = cli("--log-level", "Debug", "init")
    assert "ledger ready" in loud.stdout


def test_the_removed_fold_snapshot_options_are_usage_errors(cli: Any, tmp_path: Any) -> None:
    # The commands read the read models now; an operator's old script is told, not ignored.
    for options in (["--no-snapshots"], ["--snapshot-dir", str(tmp_path / "cache")]):
        bad = cli(*options, "head", expect=2)
        assert f"No such option: {options[0]}" in bad.stderr and bad.stdout == ""
    assert not (tmp_path / "cache").exists()


HELP_DRIVER = r"""
import contextlib, io, json, re, sys
import typer.main
from cli.app import app, main
from machines.reasons import REASONS

def walk(command, path=()):
    yield path
    for name, sub in (getattr(command, "commands", None) or {}).items():
        yield from walk(sub, path + (name,))

report = {}
for path in list(walk(typer.main.get_command(app)))[1:]:
    sys.argv = ["arena-ledger", *path, "--help"]
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        try:
            main()
            code = 0
        except SystemExit as exit:
            code = exit.code or 0
    report[" ".join(path)] = [code, out.getvalue()]
named = sorted({m for r in REASONS.values() for text in (r.cause, r.next_step, r.meaning)
                for m in re.findall(r"`arena-ledger ([a-z][a-z -]*[a-z])", text)})
print(json.dumps({"help": report, "named_in_reasons": named}))
"""


@pytest.fixture(scope="module")
def help_report(script: Any) -> dict[str, Any]:
    """Runs every command's --help through the script's entry point in one interpreter.

    One process per command would cost an interpreter start each; ``main`` is exactly what
    the console script calls.
    """
    done = subprocess.run([sys.executable, "-c", HELP_DRIVER], capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    report: dict[str, Any] = json.loads(done.stdout)
    return report


def test_help_works_for_every_command(script: Any, help_report: dict[str, Any]) -> None:
    top = subprocess.run([str(script), "--help"], capture_output=True, text=True, timeout=60,
                         check=False)
    assert top.returncode == 0 and "Exit codes: 0 ok; 1 refused" in " ".join(top.stdout.split())
    report = help_report["help"]
    required = {"init", "append", "events", "head", "verify", "commission", "register-control",
                "intake", "claim", "conclude", "hold", "release", "requeue", "expire",
                "explain", "submissions", "controls", "grant-credit", "db", "db upgrade",
                "db downgrade", "db current", "db history", "db check"}
    assert required <= set(report), sorted(required - set(report))
    for name, (code, text) in report.items():
        assert code == 0, (name, text)
        assert f"Usage: arena-ledger {name}" in " ".join(text.split()), (name, text[:200])


def test_commands_that_reason_texts_tell_users_to_run_exist(help_report: dict[str, Any]) -> None:
    # A miner told "see `arena-ledger X`" must find X; a stated next step that fails is no step.
    commands = help_report["help"]

    def exists(named: str) -> bool:
        words = named.split()
        if any(c.startswith(words[0] + " ") for c in commands):  # a group: needs its command
            return " ".join(words[:2]) in commands
        return words[0] in commands

    assert help_report["named_in_reasons"], "the reason table names no command at all?"
    missing = [name for name in help_report["named_in_reasons"] if not exists(name)]
    assert missing == [], f"reason texts name commands that do not exist: {missing}"


def test_an_empty_ledger_verifies_as_empty_not_as_0_events_from_1_to_0(cli: Any) -> None:
    cli("init")
    done = cli("verify")
    assert done.stdout == "ok: the ledger is empty; there is no event to verify\n"
    report = cli.json("verify")
    assert (report["ok"], report["checked"]) == (True, 0)

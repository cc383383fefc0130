"""Drives the CLI on input it must refuse in one line, changing nothing.

A ledger a newer release migrated (its ``alembic_version`` names a revision this release
does not ship) and one an upgrade has not reached yet: every command says so in one line
with exit 5 and changes nothing; ``db current`` shows what it is. A mistyped path is not an
empty ledger, a URL that does not parse is named without its password, and an input that
never ends is refused at its limit, not read until memory runs out.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import subprocess
from pathlib import Path
from typing import Any

import pytest

from ledger import migrate
from ledger.tables import SCHEMA_REVISION
from services.draft_lines import line_bytes_max
from vocabulary.limits import input_file_bytes_max

FUTURE = "0009_from_a_newer_release"
CREDIT = ("grant-credit", "--id", "c1", "--hotkey", "5Hk", "--amount-rao", "5")


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _stamp(path: Path, revision: str) -> None:
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE alembic_version SET version_num = ?", (revision,))
    conn.close()


@pytest.fixture
def future(cli: Any) -> Any:
    """A ledger of one credit grant whose revision a newer release wrote."""
    cli("init")
    cli(*CREDIT)
    _stamp(cli.root / "l.db", FUTURE)
    return cli


def test_a_newer_releases_ledger_is_refused_by_every_writer_and_shown_by_db_current(
    future: Any,
) -> None:
    ledger = future.root / "l.db"
    before = _digest(ledger)
    for args in (("init",), ("db", "upgrade"), ("db", "check"),
                 ("db", "downgrade", "0003_sqlite_position_rowid")):
        line = future.error_line(future(*args, expect=5).stderr, "store_error")
        assert f"schema revision '{FUTURE}', which this release does not know" in line, args
        assert "nothing was changed" in line
    line = future.error_line(future(*CREDIT[:2], "c2", *CREDIT[3:], expect=5).stderr,
                             "store_not_initialised")
    assert f"is at schema revision {FUTURE}, not {SCHEMA_REVISION}" in line
    assert _digest(ledger) == before
    assert future("db", "current").stdout.strip() == (
        f"{FUTURE} (unknown to this release: a newer release migrated it)"
    )
    shown = future.json("db", "current")
    assert (shown["current"], shown["known"]) == (FUTURE, False)


def test_a_backup_of_a_newer_releases_ledger_is_not_restored(future: Any) -> None:
    future("db", "backup", "l.bak")
    target = future.root / "restored.db"
    done = future("--db", f"sqlite:///{target}", "db", "restore", "l.bak", expect=5)
    assert "which this release does not know" in future.error_line(done.stderr, "store_error")
    assert not target.exists()
    assert not list(future.root.glob("restored.db*"))


def test_db_check_on_a_ledger_behind_the_latest_revision_says_to_upgrade(cli: Any) -> None:
    migrate.upgrade(cli.db, "0003_sqlite_position_rowid")
    done = cli("db", "check", expect=5)
    line = cli.error_line(done.stderr, "store_not_initialised")
    assert "at schema revision 0003_sqlite_position_rowid, not the latest" in line
    assert "run `arena-ledger db upgrade` first" in line
    assert migrate.current(cli.db) == "0003_sqlite_position_rowid"


def test_db_current_on_a_mistyped_path_is_no_ledger_not_an_empty_one(cli: Any) -> None:
    for args in (("db", "current"), ("db", "current", "--json")):
        line = cli.error_line(cli(*args, expect=5).stderr, "store_not_initialised")
        assert "there is no ledger at" in line
    assert not (cli.root / "l.db").exists()
    cli("init")
    assert cli("db", "current").stdout.strip() == SCHEMA_REVISION
    assert cli.json("db", "current")["known"] is True


@pytest.mark.parametrize(
    ("url", "named"),
    [
        ("postgresql+psycopg://postgres:s3cret@127.0.0.1:notaport/x",
         "'postgresql+psycopg://postgres:***@127.0.0.1:notaport/x' is not valid: its port is "
         "not a number"),
        ("sqlite:///l.db?mode=ro",
         "has query arguments (mode) that SQLite ignores unless the URL also says uri=true"),
    ],
)
def test_a_database_url_that_cannot_be_used_is_one_line_without_its_password(
    cli: Any, url: str, named: str
) -> None:
    done = cli("--db", url, "head", expect=1)
    line = cli.error_line(done.stderr, "invalid_input")
    assert named in line
    assert "s3cret" not in done.stderr and "Warning" not in done.stderr
    assert not (cli.root / "l.db").exists()


def test_a_postgresql_database_that_does_not_exist_is_named_once(cli: Any) -> None:
    # The server's message has two spaces after FATAL:; the one line collapses them, and
    # the reason must not repeat the message it is already in.
    done = cli("--db", "postgresql+psycopg://postgres@127.0.0.1:5432/al_no_such_database",
               "head", expect=5)
    line = cli.error_line(done.stderr, "store_unavailable")
    assert line.count('database "al_no_such_database" does not exist') == 1, line


@pytest.mark.parametrize("command", ["append", "commission", "intake"])
def test_an_input_that_never_ends_is_refused_at_its_limit(
    cli: Any, script: Path, command: str
) -> None:
    cli("init")
    before = _digest(cli.root / "l.db")
    # /dev/zero has no line break and no end: read whole, it grew until the process died.
    done = subprocess.run(
        ["timeout", "60", str(script), command, "/dev/zero"], cwd=cli.root, env=cli.env(),
        capture_output=True, text=True, check=False,
    )
    assert done.returncode == 1, done.stderr
    line = cli.error_line(done.stderr, "limit_exceeded")
    if command == "append":
        assert f"[line 1] [path $]: line is over {line_bytes_max} bytes" in line
    else:
        assert f"[path /dev/zero]: file /dev/zero is over {input_file_bytes_max:,} bytes" in line
    assert _digest(cli.root / "l.db") == before


def _grant(n: int, amount: int | None = None, credit: int | None = None) -> str:
    return json.dumps({"stream": f"credit-c{credit or n}", "type": "CreditGranted",
                       "payload": {"credit_id": f"c{credit or n}", "hotkey": "5Hk",
                                   "amount_rao": n if amount is None else amount, "note": ""}})


def test_append_in_batches_checks_every_line_before_the_first_batch_commits(cli: Any) -> None:
    cli("init")
    (cli.root / "bad.jsonl").write_text("\n".join([_grant(1), _grant(2), _grant(3, -1),
                                                   _grant(4)]) + "\n")
    done = cli("append", "--batch", "1", "bad.jsonl", expect=1)
    line = cli.error_line(done.stderr, "schema_invalid")
    assert line.startswith("error[schema_invalid] [line 3] [path $.payload.amount_rao]")
    assert done.stdout == ""
    assert cli.head() == 0


def test_a_batch_the_machines_refuse_says_which_lines_earlier_batches_appended(
    cli: Any,
) -> None:
    # Batches are atomic one by one: a refusal at line 3 keeps lines 1-2, and says so.
    cli("init")
    (cli.root / "again.jsonl").write_text("\n".join([_grant(5), _grant(6), _grant(1, credit=5),
                                                     _grant(7)]) + "\n")
    done = cli("append", "--batch", "1", "again.jsonl", expect=1)
    line = cli.error_line(done.stderr, "refused")
    assert line.startswith("error[refused] [line 3]: CreditGranted refused")
    assert line.endswith("nothing was written; earlier batches appended lines 1..2 "
                         "(positions 1..2), which stay")
    assert cli.head() == 2


def test_init_does_not_create_a_ledger_in_another_applications_sqlite_file(cli: Any) -> None:
    # A --db naming the wrong file: init used to add the ledger's tables beside its own.
    path = cli.root / "l.db"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE users (id INTEGER PRIMARY KEY, name TEXT)")
        conn.execute("INSERT INTO users (name) VALUES ('someone')")
    conn.close()
    before = _digest(path)
    for args in (("init",), ("db", "upgrade")):
        done = cli(*args, expect=1)
        line = cli.error_line(done.stderr, "invalid_input")
        assert f"{path} holds tables of another application (users) and no ledger" in line, args
        assert done.stdout == "", args
    assert _digest(path) == before


def test_a_ledger_taken_down_to_base_is_created_again_by_init(cli: Any) -> None:
    # `db downgrade base` leaves an empty alembic_version table: not another application's.
    cli("init")
    cli("db", "downgrade", "base")
    assert "ledger ready" in cli("init").stdout
    assert cli("db", "current").stdout.strip() == SCHEMA_REVISION


def test_a_batch_recorded_before_is_not_reported_as_appended_by_this_run(cli: Any) -> None:
    cli("init")
    keyed = json.dumps({**json.loads(_grant(8)), "idempotency_key": "grant-8"})
    (cli.root / "first.jsonl").write_text(keyed + "\n")
    cli("append", "first.jsonl")
    (cli.root / "retry.jsonl").write_text("\n".join([keyed, _grant(1, credit=8)]) + "\n")
    done = cli("append", "--batch", "1", "retry.jsonl", expect=1)
    assert "already recorded at position 1" in done.stdout
    line = cli.error_line(done.stderr, "refused")
    assert line.startswith("error[refused] [line 2]:") and "earlier batches" not in line
    assert cli.head() == 1

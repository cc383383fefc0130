"""``arena-ledger projections check|rebuild`` and ``replay`` hold the read models to the events:
a ledger appended through the CLI matches; a changed row is named with exit 4 and a rebuild
mends it; queries answer from them."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from generated_drafts import generated_drafts  # same directory


@pytest.fixture(scope="module")
def ledger(cli_factory: Any) -> Any:
    cli = cli_factory("projections")
    cli("init")
    drafts = cli.write("ledger.jsonl", generated_drafts(400, seed=21))
    cli("append", drafts)
    return cli


def test_a_ledger_appended_through_the_cli_matches_its_events(ledger: Any) -> None:
    head = ledger.head()
    assert ledger("projections", "check").stdout == (
        f"ok: the read models match the events up to position {head}\n")
    report = ledger.json("replay")
    assert report["read_models"] == {
        "ok": True, "detail": f"match the events up to position {head}"}


def test_a_changed_row_is_named_with_exit_4_and_a_rebuild_mends_it(ledger: Any) -> None:
    path = Path(ledger.db.removeprefix("sqlite:///"))
    with sqlite3.connect(path) as conn:
        sid, status = conn.execute(
            "SELECT submission_id, status FROM rm_submissions ORDER BY submission_id LIMIT 1"
        ).fetchone()
        conn.execute("UPDATE rm_submissions SET hotkey = '5Forged' WHERE submission_id = ?",
                     (sid,))
    done = ledger("projections", "check", expect=4)
    line = ledger.error_line(done.stderr, "integrity_failure")
    assert line.endswith("(reason: read_model_mismatch)")
    assert f"rm_submissions row ('{sid}'): column hotkey is '5Forged' stored" in line
    assert "run `arena-ledger projections rebuild`" in line
    replayed = ledger("replay", "--json", expect=4)
    assert json.loads(replayed.stdout)["read_models"]["ok"] is False
    assert ledger.jsonl("submissions", "--hotkey", "5Forged")  # the queries read the models
    done = ledger("projections", "rebuild")
    assert done.stdout == f"rebuilt the read models up to position {ledger.head()}\n"
    ledger("projections", "check")
    assert ledger.jsonl("submissions", "--hotkey", "5Forged") == []
    assert ledger.json("explain", "submission", sid)["status"] == status

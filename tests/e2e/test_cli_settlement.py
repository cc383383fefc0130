"""Drives the settlement and replay commands of the installed ``arena-ledger`` as a user would.

The ledger before its emission policy (79 events: two arenas, seven submissions, a held
one, a credit-paid one, a refund) is written in-process by the builder of
tests/integration/settled_ledger.py, whose docstring works every number out by
hand; from there on every step is the real command line in a subprocess, with the database
named by ``ARENA_LEDGER_DB`` only.
"""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from scenario_loader import settlement_scenario  # same directory

import ledger.bundle as bundle_module
from ledger.store import EventStore
from services.build_info import build_name

CLI = Path(sys.executable).with_name("arena-ledger")


S = settlement_scenario()


def cli(
    *args: str | Path, db: str, cwd: Path, expect: int = 0
) -> subprocess.CompletedProcess[str]:
    """Runs the installed ``arena-ledger ARGS``; checks the exit code and that no traceback."""
    # Output to a pipe, whatever the session's terminal (pytest-xdist workers, and some
    # shells, export COLUMNS): tables as wide as their cells.
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    env["ARENA_LEDGER_DB"] = db
    done = subprocess.run([str(CLI), *map(str, args)], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=120, check=False)
    assert done.returncode == expect, (done.returncode, done.stdout, done.stderr)
    assert "Traceback" not in done.stderr, done.stderr
    return done


def as_json(done: subprocess.CompletedProcess[str]) -> Any:
    """Parses a command's JSON output."""
    return json.loads(done.stdout)


@pytest.fixture
def ledger_db(tmp_path: Path) -> tuple[str, dict[str, str]]:
    """Writes the 79-event ledger (no emission policy yet); returns its URL and submission ids."""
    assert CLI.is_file(), f"the arena-ledger entry point is not installed next to {sys.executable}"
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    ledger = S.open_ledger(url)
    try:
        sids = S.build_before_policy(ledger)
    finally:
        ledger.close()
    return url, sids


def test_settlement_commands_from_policy_to_replay(
    ledger_db: tuple[str, dict[str, str]], tmp_path: Path
) -> None:
    db, sids = ledger_db
    refused = cli("settle", "--block", "2000", "--json", db=db, cwd=tmp_path, expect=1)
    assert refused.stdout == ""
    assert len(refused.stderr.splitlines()) == 1
    assert refused.stderr.startswith("error[refused]: ") and "EmissionPolicySet" in refused.stderr

    policy = cli("emission-policy", "--half-life-blocks", "1000", "--burn-hotkey", "5Burn",
                 "--validator-hotkey", "5Validator", db=db, cwd=tmp_path)
    assert policy.stdout.strip() == "emission policy set at position 80"

    preview = as_json(cli("weights", "--block", "2000", "--json", db=db, cwd=tmp_path))
    assert preview["weights_ppm"] == S.WEIGHTS_1  # Alice 165,829, Bob 434,171, burn 400,000
    assert sum(preview["weights_ppm"].values()) == 1_000_000
    assert (preview["as_of_position"], preview["block"], preview["position"]) == (80, 2_000, None)

    settled = as_json(cli("settle", "--block", "2000", "--json", db=db, cwd=tmp_path))
    assert settled["position"] == 81
    assert {k: v for k, v in settled.items() if k != "position"} == {
        k: v for k, v in preview.items() if k != "position"}
    assert [(c["hotkey"], c["credit"]) for c in settled["claims"]] == [
        (S.ALICE, 10_204), (S.BOB, 26_716)]

    lines = cli("rewards", "--json", db=db, cwd=tmp_path).stdout.splitlines()
    names = {sid: name for name, sid in sids.items()}
    rows = [json.loads(line) for line in lines]
    assert [(names[r["submission_id"]], r["status"], [names[b] for b in r["blocked_by"]])
            for r in rows] == [("a1", "rewarded", []), ("a3", "lost_potential", []),
                               ("a4", "rewarded", []), ("b2", "pending", ["b1"])]
    assert rows[1]["required_speedup"] == "1.03571412"

    fees = as_json(cli("fees", "--json", db=db, cwd=tmp_path))
    assert fees == {"arenas": {S.ARENA_A: S.FEES_A, S.ARENA_B: S.FEES_B}, "total": S.FEES_TOTAL}

    report = as_json(cli("replay", "--json", db=db, cwd=tmp_path))
    with EventStore(db) as store:
        head = store.head()
    assert report["ok"] is True and report["divergence"] is None
    assert (report["events"], report["last_position"]) == (81, 81)
    assert report["head_hash"] == head.entry_hash
    assert report["settlement_digest"] == settled["settlement_digest"]
    assert (report["verdicts_checked"], report["resolutions_checked"],
            report["settlements_checked"]) == (6, 6, 1)

    timing = report.pop("timing")
    assert set(timing) == {"seconds", "cpu_seconds", "events_per_second", "build"}
    assert timing["seconds"] > 0 and timing["cpu_seconds"] > 0
    rate = 81 / timing["seconds"]  # seconds are rounded to the millisecond in the JSON
    assert abs(timing["events_per_second"] - rate) <= 0.05 * rate
    assert timing["build"] == build_name()  # the subprocess imports what the tests import

    kept = as_json(cli("replay", "--in-memory", "--json", db=db, cwd=tmp_path))
    assert kept.pop("timing")["build"] == timing["build"]
    assert kept == report  # finished submissions in memory or in a temporary file: alike

    human = cli("replay", db=db, cwd=tmp_path).stdout.splitlines()
    assert human[0] == "replay OK: 81 events to position 81, 6 verdicts, 6 resolutions, " \
        "1 settlement checked"
    assert human[1].startswith("took ") and " events/s (" in human[1]
    assert human[1].endswith(f"; {build_name()} build)")

    expected = as_json(cli("replay", "--as-of", "81", "--expect", settled["settlement_digest"],
                           "--json", db=db, cwd=tmp_path))
    assert expected["ok"] is True and expected["expected_digest"] == settled["settlement_digest"]

    wrong = cli("replay", "--expect", "0" * 64, "--json", db=db, cwd=tmp_path, expect=4)
    assert as_json(wrong)["ok"] is False
    assert as_json(wrong)["settlement_digest"] == settled["settlement_digest"]


def _cells(line: str) -> list[str]:
    """Returns the cells of one table row as printed to a pipe: no borders, columns two
    spaces or more apart (these tables have no empty cell and no cell with two spaces)."""
    return re.split(r" {2,}", line.strip())


def _row(lines: list[str], first: str) -> list[str]:
    """Returns the cells of the one table row whose first cell is ``first``."""
    (found,) = [cells for cells in map(_cells, lines) if cells[0] == first]
    return found


def test_the_human_forms_show_what_the_json_shows(
    ledger_db: tuple[str, dict[str, str]], tmp_path: Path
) -> None:
    # Piped (cli() drops COLUMNS): every cell whole on its row, no borders.
    db, _ = ledger_db
    cli("emission-policy", "--half-life-blocks", "1000", "--burn-hotkey", "5Burn",
        "--validator-hotkey", "5Validator", db=db, cwd=tmp_path)

    preview = as_json(cli("weights", "--block", "2000", "--json", db=db, cwd=tmp_path))
    shown = cli("weights", "--block", "2000", db=db, cwd=tmp_path).stdout.splitlines()
    assert shown[0] == "weights at block 2000 as of position 80"
    for hotkey, ppm in S.WEIGHTS_1.items():
        assert _row(shown, hotkey) == [hotkey, f"{ppm:,}"]
    claims = [line for line in shown if line.startswith("  claim ")]
    assert claims == [
        f"  claim {c['hotkey']} arena {c['arena_id']} speedup_ppm {c['speedup_ppm']} "
        f"credit {c['credit']}" for c in preview["claims"]
    ] and claims
    assert shown[-2] == f"settlement_digest {preview['settlement_digest']}"
    assert shown[-1] == (  # why a recorded settlement's digest may differ (none recorded yet)
        "the digest covers as_of_position (80) as well as the block, claims, weights and "
        "fees: a settlement of the same block as of another position has another digest")

    settled = cli("settle", "--block", "2000", db=db, cwd=tmp_path).stdout.splitlines()
    assert settled[-1] == "recorded at position 81"
    digest = settled[-2].removeprefix("settlement_digest ")
    assert as_json(cli("replay", "--json", db=db, cwd=tmp_path))["settlement_digest"] == digest

    rows = [json.loads(line) for line in
            cli("rewards", "--json", db=db, cwd=tmp_path).stdout.splitlines()]
    table = cli("rewards", db=db, cwd=tmp_path).stdout.splitlines()
    for row in rows:
        best = row["best_before"]
        assert _row(table, row["submission_id"][:16]) == [
            row["submission_id"][:16], row["arena_id"], row["hotkey"], str(row["speedup"]),
            "-" if not best else f"{best['speedup']} ({best['submission_id'][:12]}…)",
            row["status"], ", ".join(b[:16] for b in row["blocked_by"]) or "-",
        ]
    assert any(row["blocked_by"] for row in rows) and any(row["best_before"] for row in rows)
    statuses = [row["status"] for row in rows]
    assert table[-1] == f"{len(rows)} PASS verdicts: " + ", ".join(
        f"{statuses.count(s)} {s}" for s in ("lost_potential", "pending", "rewarded")
        if s in statuses)
    assert {"lost_potential", "rewarded"} <= set(statuses)

    fees = cli("fees", db=db, cwd=tmp_path).stdout.splitlines()
    for name, sums in ((S.ARENA_A, S.FEES_A), (S.ARENA_B, S.FEES_B), ("TOTAL", S.FEES_TOTAL)):
        assert _row(fees, name) == [name, *(f"{sums[k]:,}" for k in (
            "consumed_rao", "released_rao", "net_rao", "credits_spent_rao"))]

    wrong = cli("replay", "--expect", "0" * 64, db=db, cwd=tmp_path, expect=4)
    lines = wrong.stdout.splitlines()
    assert lines[0] == "replay DIVERGED: 81 events to position 81, 6 verdicts, 6 resolutions, " \
        "1 settlement checked"
    head = as_json(cli("head", "--json", db=db, cwd=tmp_path))["entry_hash"]
    assert lines[2:] == [f"head hash {head}", f"settlement digest {digest}",
                         "read models match the events up to position 81",
                         f"expected digest {'0' * 64} differs"]


def test_replay_from_an_exported_bundle_gives_the_same_digest(
    ledger_db: tuple[str, dict[str, str]], tmp_path: Path
) -> None:
    db, _ = ledger_db
    ledger = S.open_ledger(db)
    try:
        S.set_policy(ledger)
        settlement, _ = ledger.settle(2_000)
        bundle_module.export_bundle(ledger.store, tmp_path / "bundle")
    finally:
        ledger.close()
    offline = f"sqlite:///{tmp_path / 'no-such-dir' / 'x.db'}"  # the bundle needs no database

    report = as_json(cli("replay", "--from-bundle", tmp_path / "bundle", "--json", db=offline,
                         cwd=tmp_path))

    assert report["ok"] is True
    assert (report["events"], report["settlements_checked"]) == (81, 1)
    assert report["settlement_digest"] == settlement.settlement_digest
    with EventStore(db) as store:
        assert report["head_hash"] == store.head().entry_hash
    cli("replay", "--from-bundle", tmp_path / "bundle", "--expect", "f" * 64, "--json",
        db=offline, cwd=tmp_path, expect=4)

    # One altered payload byte on line 41 (position 41) stops the replay there.
    tampered = tmp_path / "tampered"
    shutil.copytree(tmp_path / "bundle", tampered)
    lines = (tampered / "events.jsonl").read_bytes().splitlines()
    line = json.loads(lines[40])
    payload = bytearray(base64.b64decode(line["payload_b64"]))
    payload[len(payload) // 2] ^= 0x01
    line["payload_b64"] = base64.b64encode(bytes(payload)).decode()
    lines[40] = json.dumps(line, sort_keys=True, separators=(",", ":")).encode()
    (tampered / "events.jsonl").write_bytes(b"\n".join(lines) + b"\n")
    broken = cli("replay", "--from-bundle", tampered, "--json", db=offline, cwd=tmp_path,
                 expect=4)
    assert broken.stdout == ""
    assert len(broken.stderr.splitlines()) == 1
    assert broken.stderr.startswith("error[integrity_failure] [line 41]: ")


def test_replay_from_a_signed_bundle_checks_its_signature_and_its_whole_file(
    ledger_db: tuple[str, dict[str, str]], tmp_path: Path
) -> None:
    db, _ = ledger_db
    cli("key", "generate", "--name", "validator.example", "--out", "v.key", db=db, cwd=tmp_path)
    cli("export", "bundle", "--key", "v.key", db=db, cwd=tmp_path)
    offline = f"sqlite:///{tmp_path / 'no-such-dir' / 'x.db'}"

    checked = as_json(cli("replay", "--from-bundle", "bundle", "--key", "v.key.pub", "--json",
                          db=offline, cwd=tmp_path))
    assert (checked["ok"], checked["events"]) == (True, 79)
    assert {k: checked["bundle"][k] for k in ("path", "signature_checked", "checkpoint_origin")} \
        == {"path": "bundle", "signature_checked": True,
            "checkpoint_origin": "arena-ledger/validator.example"}
    assert checked["bundle"]["head_hash"] == checked["head_hash"]
    human = cli("replay", "--from-bundle", "bundle", "--key", "v.key.pub", "--as-of", "40",
                db=offline, cwd=tmp_path).stdout.splitlines()
    from_store = cli("replay", "--as-of", "40", db=db, cwd=tmp_path).stdout.splitlines()
    assert human[0] == from_store[0] and human[0].startswith("replay OK: 40 events to position 40")
    assert human[2:4] == from_store[2:4]  # head hash, settlement digest
    assert human[-1] == "bundle signature verified: checkpoint of arena-ledger/validator.example"
    unchecked = cli("replay", "--from-bundle", "bundle", db=offline, cwd=tmp_path).stdout
    assert unchecked.splitlines()[-1] == (
        "bundle signature not checked (--key KEY.pub checks it, as verify-bundle does)")

    # The last line gone: replay up to 40 still reads (and fails on) the whole file.
    cut = tmp_path / "cut"
    shutil.copytree(tmp_path / "bundle", cut)
    lines = (cut / "events.jsonl").read_bytes().splitlines(keepends=True)
    (cut / "events.jsonl").write_bytes(b"".join(lines[:-1]))
    for extra in ((), ("--key", "v.key.pub")):
        failed = cli("replay", "--from-bundle", cut, "--as-of", "40", *extra, db=offline,
                     cwd=tmp_path, expect=4)
        assert failed.stdout == ""
        assert failed.stderr.startswith("error[integrity_failure]: ")
        assert "event count is 78 but manifest.json states 79" in failed.stderr

    for args, named in ((("--key", "v.key.pub"), "--key"), (("--origin", "x"), "--origin")):
        wrong = cli("replay", *args, db=db, cwd=tmp_path, expect=1)
        assert wrong.stderr.startswith(f"error[invalid_input] [path {named}]: "), wrong.stderr


def test_a_misspelt_arena_or_digest_is_one_error_line_naming_it(
    ledger_db: tuple[str, dict[str, str]], tmp_path: Path
) -> None:
    db, _ = ledger_db
    for command in ("rewards", "fees", "submissions"):
        done = cli(command, "--arena", "mlp-z", "--json", db=db, cwd=tmp_path, expect=1)
        assert done.stdout == ""
        assert done.stderr == "error[not_found]: arena 'mlp-z' is not commissioned\n", command
    done = cli("submissions", "--status", "PASSED", db=db, cwd=tmp_path, expect=1)
    assert done.stdout == ""
    assert done.stderr == (
        "error[invalid_input] [path --status]: --status: unknown submission status 'PASSED'; "
        "the statuses are ARRIVED, QUEUED, QUALIFYING, QUALIFIED, FAILED, NO_DECISION, HELD, "
        "REJECTED, EXPIRED\n")

    # Refused before a single event is read: no replay line, no timing, on stdout.
    done = cli("replay", "--expect", "deadbeef", "--json", db=db, cwd=tmp_path, expect=1)
    assert done.stdout == ""
    assert done.stderr.splitlines() == [
        "error[invalid_input] [path --expect]: the expected settlement digest must be 64 hex "
        "characters (a SHA-256, as settle prints it); got 'deadbeef'"]


def test_replay_of_an_uninitialised_database_is_one_line_and_exit_5(tmp_path: Path) -> None:
    done = cli("replay", db=f"sqlite:///{tmp_path / 'empty.db'}", cwd=tmp_path, expect=5)
    assert done.stdout == ""
    assert len(done.stderr.splitlines()) == 1
    assert done.stderr.startswith("error[store_not_initialised]: ")
    assert "arena-ledger init" in done.stderr


def _settled_file(tmp_path: Path) -> tuple[Path, Any]:
    """Builds the settled SQLite ledger in ``tmp_path``; returns its file and head."""
    db = tmp_path / "settled.db"
    ledger = S.open_ledger(f"sqlite:///{db}")
    try:
        S.build_settled(ledger)
        return db, ledger.store.head()
    finally:
        ledger.close()


def test_replay_of_a_store_whose_head_row_is_not_its_last_event_diverges(
    tmp_path: Path,
) -> None:
    # The head row is the one row appends rewrite (no trigger keeps it): rewritten, the
    # replay to the head names it (no event there to name), exit 4, as verify does.
    db, last = _settled_file(tmp_path)
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE ledger_head SET entry_hash = ? WHERE id = 1", ("e" * 64,))
    conn.close()
    done = cli("replay", db=f"sqlite:///{db}", cwd=tmp_path, expect=4)
    lines = done.stdout.splitlines()
    assert lines[0].startswith(f"replay DIVERGED: {last.position} events to position "
                               f"{last.position}, ")
    assert lines[-1] == (
        f"first divergence at position {last.position} (no event: the store's head row): "
        f"head_mismatch field entry_hash: recorded '{'e' * 64}', recomputed "
        f"'{last.entry_hash}'")
    document = as_json(cli("replay", "--json", db=f"sqlite:///{db}", cwd=tmp_path, expect=4))
    assert document["divergence"] == {
        "position": last.position, "stream": "", "type": "", "field": "entry_hash",
        "recorded": "e" * 64, "recomputed": last.entry_hash, "code": "head_mismatch"}


def test_a_rechained_payload_off_its_schema_is_a_divergence_not_a_traceback(
    tmp_path: Path,
) -> None:
    # Someone with the database rewrote an event's payload and every entry hash after it
    # (around the triggers): the chain holds, the payload is no ArenaCommissioned. Replay
    # names it at its position (exit 4); a command that folds the ledger says so in one line.
    from ledger.chain import chained

    db, _ = _settled_file(tmp_path)
    with sqlite3.connect(db) as conn:
        triggers = conn.execute(
            "SELECT name, sql FROM sqlite_master WHERE type = 'trigger' AND tbl_name = 'events'"
        ).fetchall()
        for name, _ in triggers:
            conn.execute(f'DROP TRIGGER "{name}"')
        rows = conn.execute(
            "SELECT position, stream, version, type, schema_version, payload, recorded_at, "
            "actor, entry_hash FROM events ORDER BY position").fetchall()
        payload = json.loads(rows[0][5])
        payload["surplus"] = 1
        rows[0] = (*rows[0][:5], json.dumps(payload, sort_keys=True,
                                            separators=(",", ":")).encode(), *rows[0][6:])
        for row, computed in chained(bytes(32), rows):
            conn.execute("UPDATE events SET payload = ?, entry_hash = ? WHERE position = ?",
                         (row[5], computed.hex(), row[0]))
        for _, sql in triggers:
            conn.execute(sql)
    conn.close()
    done = cli("replay", db=f"sqlite:///{db}", cwd=tmp_path, expect=4)
    assert done.stdout.splitlines()[-1] == (
        f"first divergence at position 1 (arena-{S.ARENA_A}, ArenaCommissioned): "
        "schema_invalid field surplus: recorded None, recomputed 'ArenaCommissioned v1: "
        "$.payload.surplus: Extra inputs are not permitted'")
    # `submissions` answers from the read models; as of a position it folds the events.
    listed = cli("submissions", "--as-of", "1", db=f"sqlite:///{db}", cwd=tmp_path, expect=1)
    assert listed.stderr.splitlines() == [
        "error[schema_invalid] [path $.payload.surplus]: ArenaCommissioned v1: "
        "$.payload.surplus: Extra inputs are not permitted"]


def _latest_block(events: list[dict[str, Any]]) -> tuple[int, int, str]:
    """Returns (block, position, type) of the last event whose payload states a block,
    read from the payloads as recorded: a "block" or "*_block" field, or a part's block."""
    for event in reversed(events):
        payload = event["payload"]
        for name, value in payload.items():
            if name == "block" or name.endswith("_block"):
                return value, event["position"], event["type"]
            if isinstance(value, dict) and "block" in value:
                return value["block"], event["position"], event["type"]
    raise AssertionError("no event states a block")


def test_weights_defaults_to_the_heads_block_and_says_why_a_digest_differs(
    ledger_db: tuple[str, dict[str, str]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "200")
    db, _ = ledger_db
    cli("emission-policy", "--half-life-blocks", "1000", "--burn-hotkey", "5Burn",
        "--validator-hotkey", "5Validator", db=db, cwd=tmp_path)
    # Before any settlement: the head's block is the latest block an event states.
    events = [json.loads(line) for line in
              cli("events", "--json", db=db, cwd=tmp_path).stdout.splitlines()]
    block, position, kind = _latest_block(events)
    defaulted = as_json(cli("weights", "--json", db=db, cwd=tmp_path))
    assert defaulted == as_json(cli("weights", "--block", str(block), "--json", db=db,
                                    cwd=tmp_path))
    shown = cli("weights", db=db, cwd=tmp_path).stdout.splitlines()
    assert shown[0] == (f"block {block}: the head's block (the latest event that carries one: "
                        f"{kind} at position {position})")

    # A settlement recorded at block 2000, as of 80; previewed later, as of the head, the
    # same weights have another digest, and the preview says why and what reproduces it.
    settled = as_json(cli("settle", "--block", "2000", "--json", db=db, cwd=tmp_path))
    later = cli("weights", "--block", "2000", db=db, cwd=tmp_path).stdout.splitlines()
    digest = later[-3].removeprefix("settlement_digest ")
    assert digest != settled["settlement_digest"]
    assert later[-2].startswith("the digest covers as_of_position (81) as well as the block")
    assert later[-1] == (
        f"the settlement recorded at position 81 for block 2000 was computed as of position 80 "
        f"(digest {settled['settlement_digest']}): `arena-ledger weights --block 2000 --as-of "
        "80` reproduces it")
    again = as_json(cli("weights", "--block", "2000", "--as-of", "80", "--json", db=db,
                        cwd=tmp_path))
    assert again["settlement_digest"] == settled["settlement_digest"]
    # The settlement is now the latest event stating a block: the default follows it.
    shown = cli("weights", db=db, cwd=tmp_path).stdout.splitlines()
    assert shown[0] == ("block 2000: the head's block (the latest event that carries one: "
                        "SettlementComputed at position 81)")
    # Nothing states a block as of position 0: --block is needed, and the error says so.
    done = cli("weights", "--as-of", "0", db=db, cwd=tmp_path, expect=1)
    assert done.stderr == (
        "error[invalid_input] [path --block]: no event up to position 0 carries a block, so "
        "there is no head's block to settle at: give --block B\n")


def _statuses(**counts: int) -> dict[str, int]:
    names = ("ARRIVED", "QUEUED", "QUALIFYING", "QUALIFIED", "FAILED", "NO_DECISION", "HELD",
             "REJECTED", "EXPIRED")
    return {**{name: counts.get(name, 0) for name in names}, "total": sum(counts.values())}


def test_earnings_and_rewards_of_one_hotkey(
    ledger_db: tuple[str, dict[str, str]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The numbers are the module docstring's of tests/integration/settled_ledger.py: Alice's
    # a1 (PASS, rewarded), b2 (PASS, pending behind the held b1), a5 (FAIL, paid by her
    # credit); Bob's a2 (NO_DECISION, refunded) and a4 (PASS, rewarded); settlement 1 at
    # block 2000 gives Alice 165,829 ppm for a1's credit 10,204 and Bob 434,171 for a4's.
    monkeypatch.setenv("COLUMNS", "200")
    db, sids = ledger_db
    cli("emission-policy", "--half-life-blocks", "1000", "--burn-hotkey", "5Burn",
        "--validator-hotkey", "5Validator", db=db, cwd=tmp_path)
    cli("settle", "--block", "2000", db=db, cwd=tmp_path)
    alice = as_json(cli("earnings", "--hotkey", S.ALICE, "--json", db=db, cwd=tmp_path))
    assert alice == {
        "hotkey": S.ALICE,
        "as_of_position": 81,
        "submissions": _statuses(QUALIFIED=2, FAILED=1),
        "passes": {"rewarded": 1, "pending": 1, "lost_potential": 0, "total": 2},
        "settlements": {"recorded": 1, "with_weight": [{
            "position": 81, "block": 2000, "as_of_position": 80, "weight_ppm": 165_829,
            "claims": [{"arena_id": S.ARENA_A, "submission_id": sids["a1"], "block": 1000,
                        "speedup_ppm": 1_020_408, "credit": 10_204}]}]},
        "fees": {"consumed_rao": S.FEE_A + S.FEE_B, "released_rao": 0,
                 "net_rao": S.FEE_A + S.FEE_B, "credits_spent_rao": S.FEE_A},
        "credits": {"granted": 1, "granted_rao": 3 * S.FEE_A, "spent": 1},
    }
    bob = as_json(cli("earnings", "--hotkey", S.BOB, "--json", db=db, cwd=tmp_path))
    assert bob["submissions"] == _statuses(QUALIFIED=1, NO_DECISION=1)
    assert bob["fees"] == {"consumed_rao": 2 * S.FEE_A, "released_rao": S.FEE_A,
                           "net_rao": S.FEE_A, "credits_spent_rao": 0}
    assert [r["weight_ppm"] for r in bob["settlements"]["with_weight"]] == [434_171]
    # Before the settlement, nothing was settled yet.
    before = as_json(cli("earnings", "--hotkey", S.ALICE, "--as-of", "80", "--json", db=db,
                         cwd=tmp_path))
    assert before["settlements"] == {"recorded": 0, "with_weight": []}
    assert before["as_of_position"] == 80

    shown = cli("earnings", "--hotkey", S.ALICE, db=db, cwd=tmp_path).stdout.splitlines()
    assert shown[:6] == [
        f"hotkey {S.ALICE}",
        "submissions: 3 (QUALIFIED 2, FAILED 1)",
        "PASS verdicts: 2 (rewarded 1, pending 1)",
        "fees: consumed 3,000,000,000 rao, refunded 0 rao, net 3,000,000,000 rao; paid by "
        "credits 1,000,000,000 rao",
        "credits: 1 grant (3,000,000,000 rao), 1 spent",
        "settlements: a weight in 1 of 1 settlement recorded",
    ]
    assert _row(shown, "81") == ["81", "2000", "80", "165,829",
                                 f"{sids['a1'][:16]} (10,204)"]

    # rewards --hotkey: that hotkey's PASSes only, the table counting them as its.
    rows = [json.loads(line) for line in cli("rewards", "--hotkey", S.ALICE, "--json", db=db,
                                             cwd=tmp_path).stdout.splitlines()]
    assert [(r["submission_id"], r["status"]) for r in rows] == [
        (sids["a1"], "rewarded"), (sids["b2"], "pending")]
    table = cli("rewards", "--hotkey", S.ALICE, db=db, cwd=tmp_path).stdout.splitlines()
    assert table[-1] == f"2 PASS verdicts of {S.ALICE}: 1 pending, 1 rewarded"
    # A hotkey no submission can carry is named by its option, not answered with zeros.
    for command in ("rewards", "earnings"):
        done = cli(command, "--hotkey", "has space", db=db, cwd=tmp_path, expect=1)
        assert done.stderr.startswith("error[invalid_input] [path --hotkey]: --hotkey: ")


def test_queries_as_of_a_position_reproduce_a_recorded_settlement(tmp_path: Path) -> None:
    # An auditor re-derives a published settlement as of its as_of_position, without
    # replaying the ledger, and sees what each PASS's status was then.
    db = f"sqlite:///{tmp_path / 'settled.db'}"
    ledger = S.open_ledger(db)
    try:
        built = S.build_settled(ledger)
    finally:
        ledger.close()
    first, _ = built.settlements[0]
    names = {sid: name for name, sid in built.sids.items()}
    weights, rewards, now, history, none_yet = (
        cli("weights", "--block", str(first["block"]), "--as-of", str(first["as_of_position"]),
            "--json", db=db, cwd=tmp_path),
        cli("rewards", "--arena", S.ARENA_B, "--as-of", str(S.HEAD_BEFORE_POLICY), db=db,
            cwd=tmp_path),
        cli("rewards", "--arena", S.ARENA_B, "--json", db=db, cwd=tmp_path),
        cli("history", "--hotkey", S.CAROL, "--as-of", "1000000", db=db, cwd=tmp_path),
        cli("rewards", "--as-of", "1", db=db, cwd=tmp_path),
    )
    assert as_json(weights) == {**first, "position": None}
    lines = rewards.stdout.splitlines()
    assert lines[0] == f"as of position {S.HEAD_BEFORE_POLICY}"
    assert any(built.sids["b2"][:16] in line and "pending" in line for line in lines)
    # The table ends with the count by status; an empty one says so rather than look failed.
    assert lines[-1] == f"1 PASS verdict in arena {S.ARENA_B}: 1 pending"
    assert none_yet.stdout.splitlines()[-1] == "0 PASS verdicts"
    assert [(names[r["submission_id"]], r["status"]) for r in map(json.loads,
            now.stdout.splitlines())] == [("b2", "rewarded")]
    assert history.stdout.splitlines()[0] == "as of position 92"  # past the head: the head

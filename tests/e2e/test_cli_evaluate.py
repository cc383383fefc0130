"""Drives ``arena-ledger evaluate`` and ``run-controls`` as a validator would, on the real engine.

One module-wide SQLite ledger: init, commission a torch-reference arena, register a control,
take a paid submission through intake, evaluate it, explain its attempt and run the
controls, each a subprocess of the installed console script. Only outcomes that do not
depend on CPU timing are asserted: ``wrong_mlp`` FAILs whatever its speed (a slow one
fails on speed, a fast one on the audit), and ``engine_kill`` always dies in window 2.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from evaluate_queue import (
    ARENA,
    FEE,
    WRONG,
    queued,
)

pytestmark = pytest.mark.slow
EVAL_BLOCK = 1_100
CONTROL_BLOCK = 1_200
SPEED_FAILS = ("futility", "candidate_slower", "speed_threshold_not_met")
#: Commands whose --json output is JSON Lines.
JSON_LINES = ("events", "controls", "submissions")


@pytest.fixture(scope="module")
def ledger(cli_factory: Callable[[str], Any]) -> dict[str, Any]:
    """Runs the whole session once and returns what each step printed."""
    cli = cli_factory("evaluate")
    intake = queued(cli)
    sid = intake["submission_id"]
    evaluated = cli.json("evaluate", sid, "--block", str(EVAL_BLOCK))
    controls = cli.jsonl("run-controls", ARENA, "--block", str(CONTROL_BLOCK))
    return {"cli": cli, "intake": intake, "sid": sid, "evaluated": evaluated,
            "controls": controls}


def read_json(cli: Any, *commands: tuple[str, ...]) -> list[Any]:
    """Runs read-only ``--json`` commands side by side (each one an interpreter start)."""
    done = cli.many([((*args, "--json"), 0) for args in commands])
    return [cli.lines(d.stdout) if args[0] in JSON_LINES else json.loads(d.stdout)
            for args, d in zip(commands, done, strict=True)]


def test_intake_admits_the_paid_submission(ledger: dict[str, Any]) -> None:
    intake = ledger["intake"]
    assert intake["admitted"] is True
    assert intake["fee"] == {"kind": "payment", "ref": "pay-1", "amount_rao": FEE}


def test_evaluate_prints_the_decision_and_what_was_appended(ledger: dict[str, Any]) -> None:
    cli, result, sid = ledger["cli"], ledger["evaluated"], ledger["sid"]
    assert result["attempt_id"] == f"{sid[:16]}-{EVAL_BLOCK}"
    assert result["submission_id"] == sid
    assert (result["verdict"], result["disposition"], result["fault"]) == (
        "FAIL", "COMPLETE", None)
    assert result["reason"] in ("slot_audit_failed", *SPEED_FAILS)
    assert result["quality"] is False  # a FAIL before quality, whichever way it failed
    if result["reason"] == "slot_audit_failed":
        assert result["audit_nodes"] == 4 and result["speedup"] is not None
    elif result["reason"] == "futility":
        assert (result["windows"], result["look_window"], result["speedup"]) == (2, 2, None)
    else:
        assert (result["windows"], result["look_window"]) == (4, 4)

    events, explained, status = read_json(
        cli, ("events", "--stream", f"attempt-{result['attempt_id']}"),
        ("explain", "attempt", result["attempt_id"]), ("explain", "submission", sid))
    assert [e["type"] for e in events] == [
        "AttemptClaimed", *["WindowMeasured"] * result["windows"],
        *["AuditNodeGraded"] * result["audit_nodes"], "AttemptDecided"]
    # explain shows the windows that were measured, and the verdict that was recorded.
    windows = explained["windows"]
    assert [w["window"] for w in windows] == list(range(1, result["windows"] + 1))
    assert [w["orientation"] for w in windows] == [1, 1, 2, 2][: len(windows)]
    assert [(w["stock_cost_ns"], w["candidate_cost_ns"]) for w in windows] == [
        (e["payload"]["stock_cost_ns"], e["payload"]["candidate_cost_ns"])
        for e in events if e["type"] == "WindowMeasured"]
    assert (explained["verdict"], explained["reason"]) == (result["verdict"], result["reason"])
    assert explained["recorded"]["decided_block"] == EVAL_BLOCK
    if result["reason"] == "slot_audit_failed":
        assert all(node["violations"] == node["calls"] > 0
                   for node in explained["audit"].values())
    assert (status["status"], status["reason"]) == ("FAILED", result["reason"])


def test_run_controls_reports_the_control_as_expected(ledger: dict[str, Any]) -> None:
    rows = ledger["controls"]
    assert [(r["control_id"], r["verdict"], r["reason"], r["outcome"]) for r in rows] == [
        ("kill", "NO_DECISION", "engine_killed", "as_expected")]
    killed, report, runs = read_json(
        ledger["cli"], ("explain", "attempt", f"ctl-kill-{CONTROL_BLOCK}"),
        ("controls", ARENA), ("submissions", "--arena", ARENA, "--hotkey",
                              "arena-ledger-controls"))
    assert [w["window"] for w in killed["windows"]] == [1]
    assert killed["fault"]["code"] == "engine_killed"
    assert report == rows
    assert [(r["status"], r["reason"]) for r in runs] == [("NO_DECISION", "engine_killed")]


def test_unknown_submission_is_one_error_line(ledger: dict[str, Any]) -> None:
    done = ledger["cli"]("evaluate", "f" * 64, "--block", "1300", "--json", expect=1)
    assert "f" * 64 in ledger["cli"].error_line(done.stderr, "not_found")
    assert done.stdout == ""


def test_a_delta_file_with_another_digest_is_refused_before_the_claim(
        ledger: dict[str, Any]) -> None:
    cli = ledger["cli"]
    other = cli.root / "other_delta.py"
    other.write_text("def build_mlp(stock):\n    return stock\n")
    arrival = {"arena_id": ARENA, "miner_hotkey": "5Other", "content_hash": "d" * 64,
               "delta_digest": "e" * 64, "target": "model.layers.*.mlp",
               "payment_ref": "pay-2",
               "arrival": {"block": 1_060, "event_index": 0, "event_subindex": 0}}
    sid = cli.json("intake", cli.write("other.json", arrival), "--paid-rao", str(FEE))[
        "submission_id"]
    done = cli("evaluate", sid, "--block", "1300", "--delta-file", other, expect=1)
    assert "e" * 64 in cli.error_line(done.stderr, "invalid_input")
    # Refused before the claim: the submission is still waiting in the queue.
    assert cli.json("explain", "submission", sid)["status"] == "QUEUED"


def test_a_crashed_attempt_is_concluded_by_append_and_conclude(ledger: dict[str, Any]) -> None:
    """What docs/engine.md tells an operator to do after a validator died mid-attempt."""
    cli = ledger["cli"]
    arrival = {"arena_id": ARENA, "miner_hotkey": "5Crash", "content_hash": "a" * 64,
               "delta_digest": WRONG.digest, "target": "model.layers.*.mlp",
               "payment_ref": "pay-3",
               "arrival": {"block": 1_070, "event_index": 0, "event_subindex": 0}}
    sid = cli.json("intake", cli.write("crash.json", arrival), "--paid-rao", str(FEE))[
        "submission_id"]
    # The partial attempt a crash leaves: a claim and one window, nothing deciding it.
    cli("claim", "--attempt", "crashed", "--submission", sid, "--validator", "validator",
        "--block", "1400")
    window = {"window": 1, "orientation": 1, "stock_cost_ns": 90_000_000,
              "candidate_cost_ns": 91_000_000, "stock_output_tokens": 128,
              "candidate_output_tokens": 128}
    cli("append", cli.write("w.jsonl", cli.drafts(("attempt-crashed", "WindowMeasured",
                                                   window))))
    fault = {"code": "unproven_infrastructure_failure", "stage": "speed",
             "detail": "validator process died during window 2"}
    cli("append", cli.write("f.jsonl", cli.drafts(("attempt-crashed", "InfrastructureFault",
                                                   fault))))
    decided = cli.json("conclude", "crashed", "--block", "1401")
    assert (decided["verdict"], decided["reason"], decided["disposition"]) == (
        "NO_DECISION", "unproven_infrastructure_failure", "HOLD")
    explained, status = read_json(cli, ("explain", "attempt", "crashed"),
                                  ("explain", "submission", sid))
    assert [w["window"] for w in explained["windows"]] == [1]
    assert (explained["fault"]["code"], status["status"]) == (
        "unproven_infrastructure_failure", "HELD")

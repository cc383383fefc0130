"""Drives the arena commands through the installed ``arena-ledger`` script, as an operator would.

One ledger is built per module by ``story``: commission an arena from a file, register a
control, intake three submissions (two paid, one reusing a payment), claim, append windows
as JSON Lines (a refused line first), conclude, fault a second attempt, requeue, hold,
release and expire. The tests then read what each step printed and what the ledger shows.
The files written are the same as in docs/cli-arena.md.
"""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
from dataclasses import dataclass, field
from typing import Any

import pytest

FEE = 1_000_000_000
ARENA = "mlp-arena"


def hex64(seed: str) -> str:
    return hashlib.sha256(seed.encode()).hexdigest()


CONTROL_DELTA = hex64("delta:engine-kill-control")
COMMISSION = {
    "arena_id": ARENA,
    "commissioned_block": 100,
    "model": {"name": "tiny-llama", "revision": "r1"},
    "hardware": {"gpu": "H200", "count": 1},
    "engine": {"runtime": "torch-reference", "runtime_version": "2.13.0",
               "image_digest": "sha256:" + hex64("image"), "engine_config": {"tp": 1},
               "engine_env": {}},
    "policy": {"policy_version": "paired-windows.v1", "windows": 4, "z": {"3": "2", "4": "1.5"},
               "window_noise": "0.01", "boot_noise": "0.01",
               "audit": {"bar": "0.99999", "min_calls": 8}},
    "fee_rao": FEE,
    "incumbent_digest": hex64("incumbent-0"),
    "emission_share_ppm": 500_000,
}


def arrival(content: str, *, hotkey: str = "5Miner", block: int = 1_000, index: int = 0,
            payment_ref: str | None = None, delta: str | None = None) -> dict[str, Any]:
    document: dict[str, Any] = {
        "arena_id": ARENA, "miner_hotkey": hotkey, "content_hash": hex64(content),
        "delta_digest": delta or hex64("delta:" + content), "target": "model.layers.*.mlp",
        "arrival": {"block": block, "event_index": index, "event_subindex": 0},
    }
    if payment_ref is not None:
        document["payment_ref"] = payment_ref
    return document


def window(attempt: str, index: int, candidate_ns: int) -> dict[str, Any]:
    return {"stream": f"attempt-{attempt}", "type": "WindowMeasured", "payload": {
        "window": index, "orientation": 1 if index <= 2 else 2,
        "stock_cost_ns": 1_000_000_000, "candidate_cost_ns": candidate_ns,
        "stock_output_tokens": 512, "candidate_output_tokens": 512}}


AUDIT = {"node": "model.layers.0.mlp", "rank": 0, "calls": 64, "violations": 0,
         "near_misses": 0, "uncomparable": 0, "min_score": "0.999995", "bar": "0.99999"}
QUALITY = {"tokens_scored": 4096, "argmax_agreement": "0.998", "drift_within_envelope": True,
           "regression": False}


@dataclass
class Story:
    """What each step of the module's session printed."""

    cli: Any  # conftest.Cli
    out: dict[str, subprocess.CompletedProcess[str]] = field(default_factory=dict)
    ids: dict[str, str] = field(default_factory=dict)
    docs: dict[str, Any] = field(default_factory=dict)


@pytest.fixture(scope="module")
def story(cli_factory: Any) -> Story:
    cli = cli_factory("arena")
    s = Story(cli)
    cli("init")
    s.out["commission"] = cli("commission", cli.write("arena.json", COMMISSION))
    s.out["control"] = cli("register-control", ARENA, "--id", "ctl-kill", "--kind",
                           "engine_kill", "--delta-digest", CONTROL_DELTA, "--expect",
                           "NO_DECISION", "--expect-reason", "engine_killed")
    for name, doc in [("a", arrival("delta-a", payment_ref="pay-1")),
                      ("b", arrival("delta-b", index=1, payment_ref="pay-2",
                                    delta=CONTROL_DELTA)),
                      ("c", arrival("delta-c", hotkey="5Other", index=2, payment_ref="pay-1"))]:
        s.docs[f"intake-{name}"] = cli.json("intake", cli.write(f"{name}.json", doc),
                                            "--paid-rao", str(FEE))
        s.ids[name] = s.docs[f"intake-{name}"]["submission_id"]
    s.out["claim-a"] = cli("claim", "--submission", s.ids["a"], "--attempt", "att-1",
                           "--validator", "5Validator", "--block", "1010")
    gap = [window("att-1", 1, 990_000_000), window("att-1", 2, 985_000_000),
           window("att-1", 4, 980_000_000)]
    s.out["refused"] = cli("append", cli.write("gap.jsonl", gap), expect=1)
    s.docs["head-after-refusal"] = cli.head()
    evidence = [window("att-1", 1, 990_000_000), window("att-1", 2, 985_000_000),
                window("att-1", 3, 975_000_000),
                {"stream": "attempt-att-1", "type": "AuditNodeGraded", "payload": AUDIT},
                {"stream": "attempt-att-1", "type": "QualityGraded", "payload": QUALITY}]
    s.out["windows"] = cli("append", cli.write("att-1.jsonl", evidence))
    s.docs["conclude-a"] = cli.json("conclude", "att-1", "--block", "1020")
    # Reads of one state run side by side (each call is an interpreter start).
    explain_attempt, explain_a, s.out["explain-a-text"] = cli.many([
        (("explain", "attempt", "att-1", "--json"), 0),
        (("explain", "submission", s.ids["a"], "--json"), 0),
        (("explain", "submission", s.ids["a"]), 0)])
    s.docs["explain-attempt"] = json.loads(explain_attempt.stdout)
    s.docs["explain-a"] = json.loads(explain_a.stdout)
    # The control submission: claimed as the arena's next one, its engine killed.
    s.out["claim-b"] = cli("claim", "--arena", ARENA, "--attempt", "att-2", "--validator",
                           "5Validator", "--block", "1030")
    fault = [window("att-2", 1, 990_000_000),
             {"stream": "attempt-att-2", "type": "InfrastructureFault", "payload": {
                 "code": "engine_killed", "stage": "speed", "detail": "SIGKILL on lane B"}}]
    cli("append", cli.write("att-2.jsonl", fault))
    s.out["conclude-b"] = cli("conclude", "att-2", "--block", "1040")
    s.out["requeue"] = cli("requeue", s.ids["b"], "--reason", "engine replaced", "--block",
                           "1045")
    s.out["hold"] = cli("hold", s.ids["b"], "--reason", "operator review", "--block", "1050")
    controls, s.out["controls-text"], held = cli.many([
        (("controls", ARENA, "--json"), 0), (("controls", ARENA), 0),
        (("submissions", "--json"), 0)])
    s.docs["controls"] = cli.lines(controls.stdout)
    s.docs["all"] = cli.lines(held.stdout)
    s.out["release"] = cli("release", s.ids["b"], "--reason", "reviewed", "--block", "1060",
                           "--operator", "5Operator")
    queued, other = cli.many([
        (("submissions", "--arena", ARENA, "--status", "queued", "--json"), 0),
        (("submissions", "--hotkey", "5Other", "--json"), 0)])
    s.docs["queued"], s.docs["other"] = cli.lines(queued.stdout), cli.lines(other.stdout)
    s.out["expire"] = cli("expire", "--block", "501000")
    final, s.out["submissions-text"], events, s.out["verify"] = cli.many([
        (("submissions", "--status", "EXPIRED", "--json"), 0), (("submissions",), 0),
        (("events", "--json"), 0), (("verify",), 0)])
    s.docs["final"], s.docs["events"] = cli.lines(final.stdout), cli.lines(events.stdout)
    return s


def test_commission_prints_the_position_and_commission_digest(story: Story) -> None:
    line = story.out["commission"].stdout.strip()
    match = re.fullmatch(r"commissioned mlp-arena at position 1; commission_digest ([0-9a-f]{64})",
                         line)
    assert match, line
    assert story.docs["explain-attempt"]["commission_digest"] == match.group(1)
    assert story.out["control"].stdout.strip() == "control ctl-kill registered at position 2"


def test_intake_admits_paid_submissions_and_rejects_a_reused_payment(story: Story) -> None:
    a, b, c = (story.docs[f"intake-{n}"] for n in "abc")
    assert a == {"submission_id": story.ids["a"], "admitted": True, "reason": "",
                 "fee": {"kind": "payment", "ref": "pay-1", "amount_rao": FEE},
                 "positions": [3, 4, 5], "already_recorded": False}
    assert (b["admitted"], b["positions"]) == (True, [6, 7, 8])
    assert c == {"submission_id": story.ids["c"], "admitted": False,
                 "reason": "eval_cost_payment_used", "fee": None, "positions": [9, 10],
                 "already_recorded": False}
    assert re.fullmatch(r"[0-9a-f]{64}", story.ids["a"])
    assert story.out["claim-a"].stdout.strip() == (
        f"attempt att-1 claims submission {story.ids['a']}")


def test_a_refused_line_names_its_line_and_writes_nothing(story: Story) -> None:
    error = story.cli.error_line(story.out["refused"].stderr, "refused")
    assert error.startswith("error[refused] [line 3]: WindowMeasured refused by the attempt "
                            "machine in state SPEED: window_gap"), error
    assert error.endswith("nothing was written")
    assert story.out["refused"].stdout == ""
    # Intake c ended at position 10 and the claim wrote 11..12; the refused batch added none.
    assert story.docs["head-after-refusal"] == 12
    assert "appended positions 13..17 (5 events, lines 1..5)" in story.out["windows"].stdout


def test_conclude_records_the_worked_example_pass(story: Story) -> None:
    assert story.docs["conclude-a"] == {
        "verdict": "PASS", "reason": "", "disposition": "COMPLETE", "speedup": "1.019129",
        "pass_line": "0.018884", "look_window": 3, "decided_block": 1020,
        "rules_version": "paired-windows.v1"}


def test_explain_attempt_json_has_every_number(story: Story) -> None:
    doc = story.docs["explain-attempt"]
    assert {k: doc[k] for k in ("attempt_id", "submission_id", "arena_id", "state", "verdict",
                                "reason", "disposition", "speedup", "pass_line",
                                "look_window")} == {
        "attempt_id": "att-1", "submission_id": story.ids["a"], "arena_id": ARENA,
        "state": "DECIDED", "verdict": "PASS", "reason": "", "disposition": "COMPLETE",
        "speedup": "1.019129", "pass_line": "0.018884", "look_window": 3}
    assert [(w["window"], w["orientation"], w["ratio"]) for w in doc["windows"]] == [
        (1, 1, "0.99"), (2, 1, "0.985"), (3, 2, "0.975")]
    [look] = doc["looks"]
    assert {"r1", "r2", "speedup", "se", "pass_line", "outcome"} <= set(look)
    assert (look["window"], look["r1"], look["r2"], look["outcome"]) == (3, "0.9875", "0.975",
                                                                       "pass")
    assert look["speedup"].startswith("1.0191289")
    assert look["se"].startswith("0.0093541")
    assert look["pass_line"].startswith("0.0188843")
    assert doc["recorded"]["speedup"] == "1.019129"
    assert doc["audit"]["model.layers.0.mlp"]["outcome"] == "PASS"


def test_explain_submission_states_status_cause_and_attempts(story: Story) -> None:
    doc = story.docs["explain-a"]
    assert (doc["status"], doc["verdict"], doc["cause"], doc["next_step"]) == (
        "QUALIFIED", "PASS", "passed", "nothing: rewards follow at settlement")
    assert (doc["speedup"], doc["pass_line"], doc["look_window"]) == ("1.019129", "0.018884", 3)
    assert [a["attempt_id"] for a in doc["attempts"]] == ["att-1"]
    text = story.out["explain-a-text"].stdout
    assert f"submission {story.ids['a']}" in text
    assert "status QUALIFIED" in text
    assert "verdict PASS" in text and "speedup 1.019129 pass line 0.018884 look 3" in text


def test_a_killed_engine_is_no_decision_and_the_control_is_as_expected(story: Story) -> None:
    assert story.out["claim-b"].stdout.strip() == (
        f"attempt att-2 claims submission {story.ids['b']}")
    assert story.out["conclude-b"].stdout.strip() == (
        "attempt att-2: NO_DECISION engine_killed (COMPLETE) speedup - pass line -")
    assert story.docs["controls"] == [{
        "control_id": "ctl-kill", "kind": "engine_kill", "delta_digest": CONTROL_DELTA,
        "expected_verdict": "NO_DECISION", "expected_reason": "engine_killed",
        "submission_id": story.ids["b"], "verdict": "NO_DECISION", "reason": "engine_killed",
        "outcome": "as_expected", "block": 1000, "attempt_id": "att-2"}]
    text = story.out["controls-text"].stdout
    assert "ctl-kill" in text and "as_expected" in text
    rows = [[cell.strip() for cell in line.strip().strip("│").split("│")]
            for line in text.splitlines() if line.startswith("│")]
    assert rows == [["ctl-kill", "1000", "att-2", "NO_DECISION engine_killed",
                     "NO_DECISION engine_killed", "as_expected"]]


def test_requeue_hold_release_and_expire(story: Story) -> None:
    printed = [story.out[step].stdout.strip() for step in ("requeue", "hold", "release")]
    assert printed == ["requeued at position 26", "held at position 27",
                       "released at position 28"]
    held = {r["submission_id"]: r for r in story.docs["all"]}[story.ids["b"]]
    assert (held["status"], held["reason"]) == ("HELD", "operator review")
    [queued] = story.docs["queued"]
    assert (queued["submission_id"], queued["status"]) == (story.ids["b"], "QUEUED")
    assert story.out["expire"].stdout.strip() == f"expired 1 submission\n  {story.ids['b']}"
    [expired] = story.docs["final"]
    assert (expired["submission_id"], expired["status"], expired["reason"]) == (
        story.ids["b"], "EXPIRED", "sla_expired")


def test_submissions_json_has_a_cause_and_next_step_for_every_row(story: Story) -> None:
    rows = story.docs["all"]
    assert [(r["submission_id"], r["status"], r["reason"]) for r in rows] == [
        (story.ids["a"], "QUALIFIED", ""), (story.ids["b"], "HELD", "operator review"),
        (story.ids["c"], "REJECTED", "eval_cost_payment_used")]
    assert {r["arena_id"] for r in rows} == {ARENA}
    assert [r["arrival"] for r in rows] == [[1000, 0, 0], [1000, 1, 0], [1000, 2, 0]]
    rejected = rows[2]
    assert rejected["cause"] == (
        "The payment you named was already consumed by an earlier submission.")
    assert rejected["next_step"] == "Make a new payment; a payment pays for exactly one submission."
    assert [r["submission_id"] for r in story.docs["other"]] == [story.ids["c"]]
    text = story.out["submissions-text"].stdout
    assert all(story.ids[n][:16] in text for n in "abc")
    missing = [(r["status"], k) for r in rows for k in ("cause", "next_step") if not r[k]]
    assert missing == [], f"rows without a stated cause or next step: {missing}"


def test_every_event_was_recorded_once_and_the_chain_verifies(story: Story) -> None:
    events = story.docs["events"]
    assert [e["position"] for e in events] == list(range(1, 30))
    types = [e["type"] for e in events]
    assert types.count("AttemptDecided") == 2 and types.count("PaymentConsumed") == 2
    assert types[-1] == "SubmissionExpired"
    assert {e["actor"] for e in events} == {"cli"}
    assert story.out["verify"].stdout.startswith("ok: 29 events verified (1..29)")


def test_a_bad_option_is_named_as_typed_and_nothing_is_written(story: Story) -> None:
    # The library names a bad field by its place in the event ($.payload.reason); the
    # operator typed --reason, so that is what the one error line names.
    b, a, long = story.ids["b"], story.ids["a"], "x" * 300
    calls = [
        (("hold", b, "--reason", long, "--block", "1070"),
         "[path --reason]: --reason: String should have at most 256 characters"),
        (("hold", b, "--reason", "  ", "--block", "1070"),
         "[path --reason]: --reason: SubmissionHeld needs a reason an auditor can read"),
        (("requeue", b, "--reason", "", "--block", "1070"),
         "[path --reason]: --reason: SubmissionRequeued needs a reason an auditor can read"),
        (("release", b, "--reason", "ok", "--block", "1070", "--operator", "has space"),
         "[path --operator]: --operator: String should match pattern "),
        (("grant-credit", "--id", "Bad Id", "--hotkey", "5H", "--amount-rao", "1"),
         "[path --id]: --id: String should match pattern "),
        (("grant-credit", "--id", "c-9", "--hotkey", "5H", "--amount-rao", "1", "--note", long * 2),
         "[path --note]: --note: String should have at most 512 characters"),
        (("emission-policy", "--half-life-blocks", "10", "--burn-hotkey", "",
          "--validator-hotkey", "5V"), "[path --burn-hotkey]: --burn-hotkey: String should "),
        (("claim", "--attempt", "att-9", "--validator", "5V", "--block", "1"),
         "[path --submission]: claim needs --submission or --arena"),
        (("claim", "--attempt", "Bad Attempt", "--submission", a, "--validator", "5V",
          "--block", "1"), "[path --attempt]: --attempt: String should match pattern "),
        (("claim", "--attempt", "att-9", "--submission", a[:16], "--validator", "5V",
          "--block", "1"), "[path --submission]: --submission: a submission is named here"),
        (("register-control", ARENA, "--id", "c9", "--kind", "nope", "--delta-digest",
          "0" * 64, "--expect", "PASS"), "[path --kind]: --kind: Input should be "),
    ]
    done = story.cli.many([(args, 1) for args, _ in calls])
    for (args, line), result in zip(calls, done, strict=True):
        assert result.stderr.count("\n") == 1 and line in result.stderr, (args, result.stderr)
    assert "(a hotkey is 1-64 printable non-space ASCII characters; got 'has space')" in (
        done[3].stderr)
    assert story.cli.head() == 29


def test_the_ledger_as_of_a_position(story: Story) -> None:
    # docs/cli-arena.md's "As of a position": b held at 27, its NO_DECISION at 24-25,
    # att-2 claimed at 20.
    b = story.ids["b"]
    held, explained, missing, text = story.cli.many([
        (("submissions", "--as-of", "27", "--json"), 0),
        (("explain", "submission", b[:8], "--as-of", "25", "--json"), 0),
        (("explain", "attempt", "att-2", "--as-of", "19"), 1),
        (("submissions", "--as-of", "27"), 0)])
    rows = {r["submission_id"]: r for r in story.cli.lines(held.stdout)}
    assert (rows[b]["status"], rows[b]["reason"]) == ("HELD", "operator review")
    document = json.loads(explained.stdout)
    assert (document["status"], document["reason"]) == ("NO_DECISION", "engine_killed")
    assert missing.stderr == (
        "error[not_found]: attempt att-2 does not exist as of position 19\n")
    assert text.stdout.splitlines()[0] == "as of position 27"
    assert story.cli.head() == 29


def test_a_short_id_is_named_short_and_a_cut_stream_points_to_stream_prefix(
    story: Story,
) -> None:
    # The tables show 16 characters of an id: explain takes 8 or more, and events --stream
    # a whole name, whose prefix --stream-prefix takes.
    a = story.ids["a"]
    short, cut, listed = story.cli.many([
        (("explain", "submission", a[:4]), 1),
        (("events", "--stream", f"submission-{a[:16]}"), 1),
        (("events", "--stream-prefix", f"submission-{a[:16]}", "--json"), 0)])
    assert story.cli.error_line(short.stderr, "invalid_input") == (
        f"error[invalid_input] [path submission_id]: '{a[:4]}' is 4 characters, shorter than "
        "a submission id prefix may be: give at least 8 characters of the id (the tables "
        "show 16), or all 64")
    assert story.cli.error_line(cut.stderr, "schema_invalid") == (
        f"error[schema_invalid] [path --stream]: --stream 'submission-{a[:16]}' does not carry "
        "a valid submission id: --stream takes a whole stream name, and a submission's id is "
        "64 hex characters, not 16; to list the streams that start with it, give "
        f"--stream-prefix submission-{a[:16]}")
    events = story.cli.lines(listed.stdout)
    assert events and {e["stream"] for e in events} == {f"submission-{a}"}


def test_repeating_an_intake_prints_already_recorded(story: Story) -> None:
    again = story.cli("intake", story.cli.root / "a.json", "--paid-rao", str(FEE))
    assert again.stdout.strip() == (f"submission {story.ids['a']} admitted at positions 3..5 "
                                    "(already recorded)")
    assert story.cli.head() == 29


def test_an_intake_recorded_by_separate_appends_prints_each_run_of_positions(
    cli_factory: Any,
) -> None:
    # Recorded with `append` (no intake key), the intake's events need not follow on: its
    # retry answers with their positions, not the range around them (nor a conflict).
    from services.arena_ledger import submission_id

    cli = cli_factory("separate")
    cli("init")
    cli("commission", cli.write("arena.json", COMMISSION))
    document = arrival("delta-s", payment_ref="pay-s")
    sid = submission_id(document)
    fee = {"kind": "payment", "ref": "pay-s", "amount_rao": FEE}
    lines = [
        {"stream": f"submission-{sid}", "type": "SubmissionArrived",
         "payload": {**document, "submission_id": sid}},
        {"stream": "credit-c1", "type": "CreditGranted",
         "payload": {"credit_id": "c1", "hotkey": "5Other", "amount_rao": FEE, "note": "n"}},
        {"stream": f"submission-{sid}", "type": "SubmissionAdmitted",
         "payload": {"block": 1_000, "fee": fee}},
        {"stream": "payment-pay-s", "type": "PaymentConsumed",
         "payload": {"payment_ref": "pay-s", "submission_id": sid, "arena_id": ARENA,
                     "amount_rao": FEE}},
    ]
    cli("append", cli.write("separate.jsonl", lines))
    again = cli("intake", cli.write("s.json", document), "--paid-rao", str(FEE))
    assert again.stdout.strip() == (
        f"submission {sid} admitted at positions 2, 4..5 (already recorded)")
    assert cli.head() == 5


def test_brackets_in_a_hotkey_or_reason_are_printed_as_written(cli_factory: Any) -> None:
    # A hotkey is any printable ASCII; rich's markup once ate "[b]" (two hotkeys then read
    # alike in every table) and raised on "[/]" (every human read of the ledger failed).
    cli = cli_factory("brackets")
    hotkey, reason = "5[b]Mal[/]ory", "[/]review [red]now"
    cli("init")
    cli("commission", cli.write("arena.json", {**COMMISSION, "fee_rao": 0}))
    sid = cli.json("intake", cli.write("a.json", arrival("delta-x", hotkey=hotkey)))[
        "submission_id"]
    cli("hold", sid, "--reason", reason, "--block", "1010")
    listed, explained, history, stats, intake = cli.many([
        (("submissions",), 0), (("explain", "submission", sid), 0),
        (("history", "--hotkey", hotkey), 0), (("stats",), 0),
        (("intake", cli.root / "a.json"), 0)])
    row = next(line for line in listed.stdout.splitlines() if sid[:12] in line)
    assert hotkey in row and "HELD" in row and reason in row, listed.stdout
    assert f"hotkey {hotkey}  arrival" in explained.stdout, explained.stdout
    assert f"status HELD  reason {reason}\n" in explained.stdout, explained.stdout
    assert reason in history.stdout and "HELD" in history.stdout, history.stdout
    assert reason in stats.stdout, stats.stdout
    assert intake.stdout.startswith(f"submission {sid} "), intake.stdout


def test_an_id_as_the_tables_show_it_is_enough_for_explain(story: Story) -> None:
    # The submissions table cuts ids to 16 characters; explain takes what it shows.
    shown = story.ids["a"][:16]
    assert shown in story.out["submissions-text"].stdout
    by_prefix, whole = story.cli.many([
        (("explain", "submission", shown, "--json"), 0),
        (("explain", "submission", story.ids["a"], "--json"), 0)])
    assert json.loads(by_prefix.stdout) == json.loads(whole.stdout)
    assert json.loads(whole.stdout)["submission_id"] == story.ids["a"]


def test_a_critical_value_beyond_the_arithmetic_is_one_error_line_and_writes_nothing(
    story: Story,
) -> None:
    # z = 300,000,000 overflows exp(z·SE) (it printed a decimal.Overflow traceback); z =
    # 10,000 gives a pass line of 38 integer digits at window 4 (SE = sqrt(0.000075)), which
    # no failing look could record.
    head = story.cli.head()
    for z in ("300000000", "10000"):
        policy = {**COMMISSION["policy"], "z": {"3": "2", "4": z}}  # type: ignore[dict-item]
        path = story.cli.write(f"arena-z{z}.json", {**COMMISSION, "policy": policy})
        done = story.cli("commission", path, expect=1)
        error = story.cli.error_line(done.stderr, "refused")
        assert error == (
            "error[refused]: ArenaCommissioned refused by the arena machine in state ACTIVE: "
            f"pass_line_out_of_range (z: window 4's critical value {z} gives a pass line of "
            "28 or more integer digits, which no decision can record); nothing was written")
        assert done.stdout == ""
    assert story.cli.head() == head


# --- control runs at several blocks ------------------------------------------------------------


def _run_controls_at(url: str, block: int, outcome: str) -> None:
    """Runs the ledger's one control (expected FAIL speed_threshold_not_met) at ``block`` on
    a FakeEngine: "pass" scripts the worked example's PASS (unexpected), "fail" costs as
    much as stock (as expected), "interrupted" stops in its first window (pending)."""
    from engine_bridge.deltas import registered
    from engine_bridge.hooks import NodeTally
    from engine_bridge.protocol import FakeEngine
    from machines import samples
    from services.arena_ledger import ArenaLedger
    from services.evaluation import run_controls

    worked = dict(enumerate((c for _, c in samples.WORKED_EXAMPLE_COSTS), start=1))

    def cost(lane_id: str, delta: Any, window: int) -> int:
        stock = 1_000_000_000
        return stock if outcome != "pass" or delta is None or window == 0 else worked[window]

    def stop(stage: str, info: dict[str, Any]) -> None:
        if outcome == "interrupted" and stage == "window":
            raise KeyboardInterrupt

    engine = FakeEngine(cost_ns=cost, tallies=[
        NodeTally(f"model.layers.{i}.mlp", 0, calls=32, min_score=1.0) for i in range(4)])
    with ArenaLedger(url) as ledger:
        if block == 1_200:
            document = samples.commissioned(ARENA, fee_rao=0, sealed=samples.policy())
            ledger.commission(document.model_dump(mode="json", exclude_unset=True))
            ledger.register_control(ARENA, {
                "control_id": "honest", "kind": "honest",
                "delta_digest": registered("fast_mlp").digest,
                "expected_verdict": "FAIL", "expected_reason": "speed_threshold_not_met"})
        try:
            run_controls(ledger, engine, arena_id=ARENA, block=block, progress=stop)
        except KeyboardInterrupt:
            assert outcome == "interrupted"


def test_controls_shows_each_runs_block_and_fails_when_the_latest_complete_run_did(
        cli: Any) -> None:
    cli("init")
    _run_controls_at(cli.db, 1_200, "pass")
    # It exited 0, and its rows, one per run, were identical but for the outcome.
    done = cli("controls", ARENA, expect=4)
    assert cli.error_line(done.stderr, "integrity_failure") == (
        "error[integrity_failure]: the latest complete control run of mlp-arena (block 1200) "
        "has an unexpected outcome: honest")
    assert "unexpected" in done.stdout  # the table is printed all the same

    _run_controls_at(cli.db, 1_300, "fail")
    _run_controls_at(cli.db, 1_400, "interrupted")
    done = cli("controls", ARENA)  # 1,300 is the latest complete run, and it is as expected
    rows = [[cell.strip() for cell in line.strip().strip("│").split("│")]
            for line in done.stdout.splitlines() if line.startswith("│")]
    assert [row[:3] + row[-1:] for row in rows] == [
        ["honest", "1200", "ctl-honest-1200", "unexpected"],
        ["honest", "1300", "ctl-honest-1300", "as_expected"],
        ["honest", "1400", "ctl-honest-1400", "pending"]]
    assert [(r["block"], r["attempt_id"]) for r in cli.jsonl("controls", ARENA)] == [
        (1_200, "ctl-honest-1200"), (1_300, "ctl-honest-1300"), (1_400, "ctl-honest-1400")]


def test_controls_of_every_arena_exit_4_and_v2_settlements_name_the_suspended_arena(
        cli: Any) -> None:
    cli("init")
    _run_controls_at(cli.db, 1_200, "pass")
    done = cli("controls", expect=4)  # no ARENA: every arena's latest complete run
    assert cli.error_line(done.stderr, "integrity_failure") == (
        "error[integrity_failure]: the latest complete control run of 1 arena has an "
        "unexpected outcome: mlp-arena (block 1200): honest")
    assert "mlp-arena" in done.stdout  # the table, with an arena column, is printed too
    listed = cli("controls", "--json", expect=4)
    assert [(r["arena_id"], r["block"], r["outcome"]) for r in cli.lines(listed.stdout)] == [
        (ARENA, 1_200, "unexpected")]

    policy = ("emission-policy", "--half-life-blocks", "1000", "--burn-hotkey", "5Burn",
              "--validator-hotkey", "5Val", "--rules", "settlement-rules.v2")
    refused = cli(*policy, expect=1)
    assert cli.error_line(refused.stderr, "invalid_input") == (
        "error[invalid_input] [path --control-max-age-blocks]: --control-max-age-blocks: "
        "settlement-rules.v2 needs control_max_age_blocks (a positive number of blocks); "
        "nothing was written")
    assert cli(*policy, "--control-max-age-blocks", "100").stdout.startswith(
        "emission policy (settlement-rules.v2, controls at most 100 blocks old) set at position ")

    settled = cli("settle", "--block", "1250")
    assert ("suspended arena mlp-arena: control_unexpected (run at block 1,200: honest); its "
            "pool went to the burn hotkey") in settled.stdout
    assert "rules settlement-rules.v2: 1 arena suspended" in settled.stdout

    _run_controls_at(cli.db, 1_300, "fail")
    cli("controls")  # the latest complete run is as expected: exit 0
    fresh = cli.json("weights", "--block", "1400")  # exactly 100 blocks old: fresh
    assert (fresh["suspensions"], fresh["weights_ppm"]) == ([], {"5Burn": 1_000_000})
    stale = cli.json("weights", "--block", "1401")
    assert stale["suspensions"] == [{"arena_id": ARENA, "control_ids": [],
                                     "reason": "controls_stale", "run_block": 1_300}]

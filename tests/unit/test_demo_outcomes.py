"""bench/demo_outcomes.py: which demo verdicts are wrong, and what the runs add up to.

The benchmark runs the real demo many times; these tests feed its pure part canned
summaries (the shape `arena-ledger demo --json` prints) and ledger records instead.
"""

from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path
from typing import Any

import pytest

_ROOT = Path(__file__).resolve().parents[2]
ARENA = "reference"
#: Digests the canned ledgers name, and the delta names the benchmark would give them.
NAMES = {"d-fast": "fast_mlp", "d-fused": "fused_gate_up", "d-scaled": "scaled",
         "d-slow": "slow", "d-kill": "engine_kill", "d-faithful": "faithful"}


@pytest.fixture(scope="module")
def bench() -> Any:
    if str(_ROOT) not in sys.path:
        sys.path.append(str(_ROOT))
    return importlib.import_module("bench.demo_outcomes")


def _control(control_id: str, kind: str, verdict: str | None, reason: str | None,
             outcome: str = "as_expected", digest: str = "d-other") -> dict[str, Any]:
    return {"control_id": control_id, "kind": kind, "delta_digest": digest,
            "submission_id": f"s-{control_id}", "verdict": verdict, "reason": reason,
            "outcome": outcome}


def _miner(hotkey: str, status: str, verdict: str | None, reason: str | None) -> dict[str, Any]:
    return {"submission_id": f"s-{hotkey}", "hotkey": hotkey, "status": status,
            "verdict": verdict, "reason": reason}


def _summary(fast: tuple[str | None, str | None] = ("PASS", None),
             fused: tuple[str | None, str | None] = ("PASS", None),
             faithful: tuple[str | None, str | None] = ("FAIL", "candidate_slower"),
             skip: tuple[str | None, str | None] = ("FAIL", "slot_audit_failed"),
             **extra: Any) -> dict[str, Any]:
    """Returns a demo summary: four controls, three miners and a refused duplicate."""
    skip_outcome = "as_expected" if skip == ("FAIL", "slot_audit_failed") else "unexpected"
    return {
        "ok": True,
        "arena_id": ARENA,
        "controls": [
            _control("faithful", "identity", *faithful, digest="d-faithful"),
            _control("wrong-mlp", "wrong_mlp", "FAIL", "slot_audit_failed"),
            _control("skip-mlp", "skip_mlp", *skip, outcome=skip_outcome),
            _control("engine-kill", "engine_kill", "NO_DECISION", "engine_killed",
                     digest="d-kill"),
        ],
        "submissions": [
            _miner("5Alice", "QUALIFIED" if fast[0] == "PASS" else "FAILED", *fast),
            _miner("5Bob", "QUALIFIED" if fused[0] == "PASS" else "FAILED", *fused),
            _miner("5Carol", "FAILED", "FAIL", "candidate_slower"),
            _miner("5Erin", "REJECTED", None, "duplicate_of:0540ce49602041f3:futility"),
        ],
        **extra,
    }


def _facts(bench: Any, suspensions: tuple[dict[str, Any], ...] = ()) -> Any:
    deltas = {"s-5Alice": "d-fast", "s-5Bob": "d-fused", "s-5Carol": "d-scaled",
              "s-5Erin": "d-fast"}
    speedups = {"s-5Alice": "1.310000", "s-5Bob": "1.050000", "s-5Carol": "0.980000",
                "s-faithful": "0.990000"}
    return bench.LedgerFacts(deltas, speedups, suspensions)


@pytest.mark.parametrize(
    ("delta", "verdict", "reason", "wrong"),
    [
        ("faithful", "PASS", None, True),
        ("faithful", "FAIL", "candidate_slower", False),
        ("fast_mlp", "FAIL", "candidate_slower", True),
        ("fused_gate_up", "FAIL", "candidate_slower", True),
        ("fast_mlp", "FAIL", "futility", False),  # not in the issue's definition
        ("fast_mlp", "PASS", None, False),
        ("wrong_mlp", "PASS", None, True),
        ("skip_mlp", "NO_DECISION", "engine_killed", True),
        ("skip_mlp", None, None, True),  # never decided is not a FAIL either
        ("skip_mlp", "FAIL", "candidate_slower", False),
        ("wrong_mlp", "FAIL", "slot_audit_failed", False),
        ("scaled", "FAIL", "candidate_slower", False),
        ("slow", "PASS", None, False),
    ],
)
def test_a_verdict_is_wrong_exactly_as_the_issue_defines_it(
    bench: Any, delta: str, verdict: str | None, reason: str | None, wrong: bool
) -> None:
    assert (bench.classify(delta, verdict, reason) is not None) is wrong


def test_a_run_names_each_verdict_with_its_delta_and_speedup(bench: Any) -> None:
    run = bench.tabulate_run(1, _summary(fast=("FAIL", "candidate_slower")), 0, 61.5,
                             _facts(bench), NAMES)
    by_name = {e.name: e for e in run.entries}
    assert [e.label for e in run.entries] == [
        "faithful", "wrong-mlp", "skip-mlp", "engine-kill", "5Alice (fast_mlp)",
        "5Bob (fused_gate_up)", "5Carol (scaled)", "5Erin (fast_mlp)"]
    assert by_name["5Alice"].speedup == "1.310000"
    assert by_name["faithful"].speedup == "0.990000"
    assert by_name["skip-mlp"].delta == "skip_mlp"  # by its control kind
    assert [e.name for e in run.wrong] == ["5Alice"]
    assert run.controls_as_expected and not run.suspended
    assert (run.exit_code, run.wall_s, run.replay_ok) == (0, 61.5, True)


def test_an_unexpected_control_is_excused_only_by_a_suspension_of_its_own_arena(
    bench: Any,
) -> None:
    broken = {"skip": ("PASS", None)}
    plain = bench.tabulate_run(1, _summary(**broken), 0, 1.0, _facts(bench), NAMES)
    assert not plain.controls_as_expected and not plain.suspended
    assert [e.wrong for e in plain.wrong] == ["skip_mlp PASS, not FAIL"]

    ours = {"arena_id": ARENA, "reason": "control_unexpected"}
    other = {"arena_id": "elsewhere", "reason": "controls_stale"}
    in_summary = _summary(**broken, settlement={"suspensions": [other, ours]})
    assert bench.tabulate_run(1, in_summary, 0, 1.0, _facts(bench), NAMES).suspensions == [ours]
    from_ledger = bench.tabulate_run(1, _summary(**broken), 0, 1.0,
                                     _facts(bench, (ours,)), NAMES)
    assert from_ledger.suspended
    elsewhere = bench.tabulate_run(1, _summary(**broken, suspensions=[other]), 0, 1.0,
                                   _facts(bench, (ours,)), NAMES)
    assert not elsewhere.suspended  # the summary's own list wins over the ledger's


def test_a_run_without_a_summary_counts_against_every_target(bench: Any) -> None:
    run = bench.tabulate_run(2, None, 1, 3.0, bench.LedgerFacts(), NAMES,
                             "Traceback …\nRuntimeError: boom")
    total = bench.totals([run])
    assert run.entries == [] and not run.controls_as_expected
    assert total["controls_ok_or_suspended"] == 0
    assert [t["ok"] for t in bench.targets(total)] == [True, False, False, False]
    assert "Run 2 printed no summary (exit 1): `RuntimeError: boom`" in bench.render_markdown(
        [run], total)


def test_totals_count_wrong_verdicts_controls_and_each_fast_miner_over_the_runs(
    bench: Any,
) -> None:
    summaries = [
        _summary(),
        _summary(fused=("FAIL", "candidate_slower")),
        _summary(fused=("FAIL", "futility")),
        _summary(fast=("FAIL", "futility"), faithful=("PASS", None), skip=("PASS", None),
                 suspensions=[{"arena_id": ARENA, "reason": "control_unexpected"}]),
    ]
    runs = [bench.tabulate_run(i, s, 0, 50.0 + i, _facts(bench), NAMES)
            for i, s in enumerate(summaries, start=1)]
    total = bench.totals(runs)
    # Erin's refused copy of a fast delta is no fast miner: 4 evaluations each, not 8.
    assert total["fast_qualified"] == {"fast_mlp": {"evaluated": 4, "qualified": 3},
                                      "fused_gate_up": {"evaluated": 4, "qualified": 2}}
    assert total["wrong_verdicts"] == 3  # fused slower in run 2; faithful and skip in run 4
    assert total["controls_ok_or_suspended"] == 4 and total["suspended"] == 1
    assert total["fast_failed_futility"] == 2
    assert total["wall_s"] == {"median": 52.5, "min": 51.0, "max": 54.0}
    met = {t["target"]: t["ok"] for t in bench.targets(total)}
    assert met == {"wrong verdicts = 0": False,
                   "controls as expected or the arena suspended in every run (4)": True,
                   "fast_mlp QUALIFIED in ≥ 3 of 4 runs": True,
                   "fused_gate_up QUALIFIED in ≥ 3 of 4 runs": False}


def test_the_markdown_marks_wrong_verdicts_and_missed_targets(bench: Any) -> None:
    runs = [bench.tabulate_run(1, _summary(fused=("FAIL", "candidate_slower")), 0, 50.0,
                               _facts(bench), NAMES)]
    text = bench.render_markdown(runs, bench.totals(runs))
    lines = text.splitlines()
    assert lines[0].split("|")[1:4] == [" run ", " wall s ", " exit "]
    assert "5Erin" not in text  # refused at intake: no verdict to tabulate
    assert "**FAIL candidate_slower S 1.050000** (wrong)" in lines[2]
    assert lines[2].rstrip(" |").endswith("1")  # the run's wrong verdicts
    assert any(ln.startswith("| wrong verdicts = 0") and "MISSED" in ln for ln in lines)


def test_the_ledger_gives_each_submission_its_delta_and_latest_decided_speedup(
    bench: Any,
) -> None:
    records = [
        ("SubmissionArrived", "submission-s1", {"submission_id": "s1", "delta_digest": "d1"}),
        ("AttemptClaimed", "attempt-a1", {"submission_id": "s1"}),
        ("AttemptDecided", "attempt-a1", {"verdict": "NO_DECISION", "speedup": None}),
        ("AttemptClaimed", "attempt-a2", {"submission_id": "s1"}),
        ("AttemptDecided", "attempt-a2", {"verdict": "PASS", "speedup": "1.200000"}),
        ("SettlementComputed", "settlement", {"suspensions": [{"arena_id": "x"}]}),
        ("SettlementComputed", "settlement", {"weights_ppm": {}}),  # a v1 settlement
    ]
    facts = bench.ledger_facts(records)
    assert facts.deltas == {"s1": "d1"}
    assert facts.speedups == {"s1": "1.200000"}
    assert facts.suspensions == ()  # the latest settlement's, not an earlier one's


def test_the_busy_loop_is_killed_when_the_runs_fail(bench: Any) -> None:
    with pytest.raises(RuntimeError), bench.busy_loop(True) as hog:
        assert hog.poll() is None
        raise RuntimeError("a run failed")
    assert hog.returncode is not None


def test_a_run_reads_the_summary_the_command_prints_and_keeps_its_exit_code(
    bench: Any,
) -> None:
    # A stand-in for the console script: prints a canned summary, exits 4 (replay diverged).
    printed = json.dumps(_summary(fast=("FAIL", "candidate_slower")))
    fake = [sys.executable, "-c", f"import sys; print({printed!r}); sys.exit(4)"]
    run = bench.run_once(3, fake, 60, NAMES)
    assert (run.run, run.exit_code, run.error) == (3, 4, None)
    # No ledger was written: a miner's delta is unknown, shown as such, never guessed.
    assert {e.delta for e in run.entries if e.role == "miner"} == {"?"}
    assert [e.verdict for e in run.entries][:4] == ["FAIL", "FAIL", "FAIL", "NO_DECISION"]
    assert run.wall_s > 0


def test_a_run_that_prints_no_summary_keeps_the_tail_of_what_it_said(bench: Any) -> None:
    fake = [sys.executable, "-c", "import sys; sys.exit('error: the engine extra is missing')"]
    run = bench.run_once(1, fake, 60, NAMES)
    assert run.exit_code == 1 and run.entries == []
    assert run.error is not None and "the engine extra is missing" in run.error

"""Runs demo sessions on a FakeEngine: each summary reports its own session and nothing else.

The real demo (tests/e2e/test_demo.py) takes minutes on the torch engine. What its summary
counts (which submissions, which control runs, whose credits) does not depend on the
engine, so here ``run_demo`` drives a FakeEngine: several sessions on one ledger in a
second, an interrupted one and one that runs while another is under way among them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from cli.demo import serve_command
from engine_bridge.protocol import FakeEngine
from services.arena_ledger import ArenaLedger
from services.demo import demo_arena_id, run_demo, session_blocks

CONTROLS = ["faithful", "wrong-mlp", "skip-mlp", "engine-kill"]
MINERS = ["5Alice", "5Bob", "5Carol", "5Dave", "5Erin"]


def _blocks(rows: list[dict[str, Any]], key: str) -> set[int]:
    return {row[key][0] if key == "arrival" else row[key] for row in rows}


def test_an_interrupted_sessions_pending_controls_stay_out_of_later_summaries(
        store_url: str, tmp_path: Path) -> None:
    def ctrl_c_in_the_second_control(stage: str, info: dict[str, Any]) -> None:
        if stage == "control" and info["control_id"] == "faithful":  # the second, by id
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_demo(store_url, tmp_path / "wd", engine=FakeEngine(),
                 notify=ctrl_c_in_the_second_control)
    with ArenaLedger(store_url) as ledger:
        left = ledger.controls(demo_arena_id)
    assert sorted(r["outcome"] for r in left) == ["as_expected", "pending", "pending", "pending"]

    summary = run_demo(store_url, tmp_path / "wd", engine=FakeEngine())

    # The summary counted the interrupted session's pending rows: "controls as expected
    # (every session): 5/8 ... engine-kill=-/pending", one more pending row every Ctrl-C.
    assert summary.session == 2
    assert [r["control_id"] for r in summary.controls] == CONTROLS
    assert _blocks(summary.controls, "block") == {2 * session_blocks + 5}
    assert "pending" not in {r["outcome"] for r in summary.controls}
    with ArenaLedger(store_url) as ledger:
        everything = ledger.controls(demo_arena_id)
    # The ledger still holds session 1's two runs: engine-kill's, decided, and faithful's,
    # admitted and never claimed.
    assert sorted((r["block"], r["control_id"], r["outcome"]) for r in everything
                  if r["block"] == session_blocks + 5) == [
        (session_blocks + 5, "engine-kill", "as_expected"),
        (session_blocks + 5, "faithful", "pending")]


def test_a_demo_run_meanwhile_is_not_in_this_sessions_summary(
        store_url: str, tmp_path: Path) -> None:
    other: dict[str, Any] = {}

    def run_the_other_now(stage: str, info: dict[str, Any]) -> None:
        # The second demo commissions, runs and settles a whole session while the first
        # one's submissions are admitted and not yet evaluated.
        if stage == "evaluate" and not other:
            other["summary"] = run_demo(store_url, tmp_path / "wd2", engine=FakeEngine())

    first = run_demo(store_url, tmp_path / "wd1", engine=FakeEngine(), notify=run_the_other_now)
    second = other["summary"]

    assert (first.session, second.session) == (1, 2)
    for summary in (first, second):
        base = summary.session * session_blocks
        # The first summary listed the second's submissions too (it took every arrival
        # from its own first block on), and every session's control runs.
        assert [r["hotkey"] for r in summary.submissions] == MINERS
        assert {b // session_blocks for b in _blocks(summary.submissions, "arrival")} == {
            summary.session}
        assert [r["control_id"] for r in summary.controls] == CONTROLS
        assert _blocks(summary.controls, "block") == {base + 5}
        assert summary.ok
    # Erin copies a FAILED submission of her own session, not the other's.
    for summary in (first, second):
        erin = summary.submissions[-1]["reason"]
        alice = summary.submissions[0]["submission_id"]
        assert erin.startswith(f"duplicate_of:{alice[:16]}:"), erin


def test_the_summary_says_what_the_credits_count_and_where_the_public_key_is(
        store_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from cli.app import app

    monkeypatch.setattr("services.demo.make_engine", lambda *args, **kwargs: FakeEngine())
    workdir = tmp_path / "wd"
    done = CliRunner().invoke(app, ["--db", store_url, "demo", "--workdir", str(workdir)],
                              env={"COLUMNS": "200"})
    assert done.exit_code == 0, done.output
    out = done.output
    # Window ratios and speedups are inverse ways round: the narration says which is which.
    assert ("a window's ratio is candidate ÷ stock cost (above 1: the candidate is slower);\n"
            "speedup is stock ÷ candidate (above 1: the candidate is faster)\n") in out
    assert (workdir / "validator.key.pub").is_file()
    assert (f"validator public key: {workdir}/validator.key.pub\n"
            "  (for verify-bundle --key and replay --key)\n") in out
    # The summary ends with the way to the dashboard over this very ledger.
    assert out.rstrip().endswith(f"dashboard: {serve_command(store_url)}\n"
                                 "  then open http://127.0.0.1:8080/")
    # 4 control runs and Bob's credit, the fee (0.1 TAO) each; it read "credits 500,000,000
    # rao" and nothing said that four fifths of that were the validator's own controls.
    assert ("credits spent (every session): 500,000,000 rao (waived fees, not revenue)\n"
            "  4 control runs 400,000,000 rao, 1 miner 100,000,000 rao\n") in out
    assert "controls run this session (block 100005): " in out
    for control in CONTROLS:
        assert f"\n  {control}: " in out


def test_the_dashboard_command_names_the_ledger_unless_it_is_the_default() -> None:
    assert serve_command("sqlite:///arena-ledger.db") == "arena-ledger serve"
    assert serve_command("sqlite:////tmp/a b.db") == (
        "arena-ledger --db 'sqlite:////tmp/a b.db' serve")
    shown = serve_command("postgresql+psycopg://ops:s3cret@db.example/ledger")
    assert "s3cret" not in shown and shown.startswith("arena-ledger --db ")

"""Runs ``arena-ledger demo``, the README's main job, as a user would, and checks its summary.

The demo evaluates for real on the CPU reference engine, so only what CPU timing cannot
change is asserted: the noise seal covers the A/A calibration it was sealed from, the audit
controls (``wrong_mlp``, ``skip_mlp``) and the fault control (``engine_kill``) meet their
expectations, the identity control (``faithful``) never PASSes (a FAIL, or the noise guard's
NO_DECISION when the host got noisier than sealed), the settlement suspends the arena exactly
when its controls are not as expected, the replay reproduces the settlement digest and a
second run appends a second session without touching the first. Whether a miner beats
stock by more than the calibrated pass line on a loaded 2-core host is noise.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
MAIN_JOB = "python3 -m venv .venv && .venv/bin/pip install -q -e '.[engine]' && " \
           ".venv/bin/arena-ledger demo"
TEST_COMMAND = "python3 -m venv .venv && .venv/bin/pip install -q -e '.[dev,engine]' && " \
               ".venv/bin/python -m pytest -q"
DEMO_TIMEOUT_S = 600
FEE_RAO = 100_000_000
#: The controls whose outcome does not depend on CPU timing: (verdict, reason).
DETERMINISTIC = {"wrong-mlp": ("FAIL", "slot_audit_failed"),
                 "skip-mlp": ("FAIL", "slot_audit_failed"),
                 "engine-kill": ("NO_DECISION", "engine_killed")}


def run_demo(cli: Any, script: Path, *args: str) -> dict[str, Any]:
    """Runs ``arena-ledger demo --json`` in the Cli's folder; asserts exit 0, no traceback."""
    done = subprocess.run([str(script), "demo", "--workdir", str(cli.root / "wd"), "--json",
                           *args], cwd=cli.root, env=cli.env(), capture_output=True,
                          text=True, timeout=DEMO_TIMEOUT_S, check=False)
    assert done.returncode == 0, (done.returncode, done.stdout[-2000:], done.stderr[-2000:])
    assert "Traceback" not in done.stderr, done.stderr
    summary: dict[str, Any] = json.loads(done.stdout)
    return summary


@pytest.fixture(scope="module")
def demo(cli_factory: Callable[[str], Any], script: Path) -> dict[str, Any]:
    """Runs one demo session with one miner, then snapshots the ledger it wrote."""
    cli = cli_factory("demo")
    assert cli.db.startswith("sqlite:///")
    summary = run_demo(cli, script, "--miners", "1")
    head = cli.head()
    events = cli.jsonl("events", "--to-position", str(head))
    return {"cli": cli, "summary": summary, "head": head, "events": events}


@pytest.mark.slow
def test_the_demo_summary_is_ok_and_replay_reproduces_its_settlement(
        demo: dict[str, Any]) -> None:
    summary = demo["summary"]
    assert (summary["ok"], summary["session"], summary["arena_id"]) == (True, 1, "reference")
    replay, verify = summary["replay"], summary["verify"]
    assert replay["ok"] is True and verify["ok"] is True
    assert re.fullmatch(r"[0-9a-f]{64}", summary["settlement_digest"])
    assert replay["settlement_digest"] == summary["settlement_digest"]
    assert replay["events"] == verify["checked"] == demo["head"] == len(demo["events"])
    # Four controls and one miner were evaluated; each attempt's verdict was re-derived.
    assert replay["verdicts_checked"] == replay["resolutions_checked"] == 5
    assert replay["settlements_checked"] == 1
    assert summary["checkpoint"]["tree_size"] == demo["head"]  # signs the whole ledger
    assert sum(summary["weights_ppm"].values()) == 1_000_000


@pytest.mark.slow
def test_the_deterministic_controls_are_as_expected(demo: dict[str, Any]) -> None:
    rows = {r["control_id"]: r for r in demo["summary"]["controls"]}
    assert sorted(rows) == ["engine-kill", "faithful", "skip-mlp", "wrong-mlp"]
    for control_id, (verdict, reason) in DETERMINISTIC.items():
        row = rows[control_id]
        assert (row["verdict"], row["reason"], row["outcome"]) == (
            verdict, reason, "as_expected"), row
    faithful = rows["faithful"]
    assert (faithful["expected_verdict"], faithful["expected_reason"]) == ("FAIL", None)
    # Identical work never passes a calibrated seal: a FAIL, or the guard's NO_DECISION
    # (requeued, so the run stays pending) when the windows spread wider than sealed.
    observed = (faithful["verdict"], faithful["reason"], faithful["outcome"])
    assert (observed[0] == "FAIL" and observed[2] == "as_expected") or observed == (
        "NO_DECISION", "noise_above_seal", "pending"), faithful


@pytest.mark.slow
def test_the_settlement_suspends_the_arena_exactly_when_its_controls_are_not_as_expected(
        demo: dict[str, Any]) -> None:
    summary = demo["summary"]
    outcomes = {r["outcome"] for r in summary["controls"]}
    if outcomes == {"as_expected"}:
        assert summary["suspensions"] == []
        # Not suspended: Alice's pool is hers if she passed, else it has no credit to pay.
        alice = next(r for r in summary["submissions"] if r["hotkey"] == "5Alice")
        expected = ({"5Alice": 600_000, "5BurnBurnBurn": 400_000}
                    if alice["status"] == "QUALIFIED" else {"5BurnBurnBurn": 1_000_000})
        assert summary["weights_ppm"] == expected
    else:  # a pending faithful leaves the run incomplete: no complete run to trust
        assert summary["suspensions"] == [{"arena_id": "reference", "control_ids": [],
                                           "reason": "controls_stale", "run_block": None}]
        assert summary["weights_ppm"] == {"5BurnBurnBurn": 1_000_000}
    policy = next(e for e in demo["events"] if e["type"] == "EmissionPolicySet")["payload"]
    assert (policy["rules_version"], policy["control_max_age_blocks"]) == (
        "settlement-rules.v2", 7_200)


@pytest.mark.slow
def test_the_noise_seal_covers_the_calibration_it_was_sealed_from(
        demo: dict[str, Any]) -> None:
    calibration = demo["summary"]["calibration"]
    assert calibration["reused"] is False
    types = [e["type"] for e in demo["events"] if e["stream"].startswith("calibration-")]
    assert types[0] == "CalibrationStarted" and types[-1] == "CalibrationConcluded"
    assert types.count("CalibrationWindowMeasured") == 4 * 6  # windows x boot rounds
    concluded = next(e for e in demo["events"] if e["type"] == "CalibrationConcluded")
    assert {k: calibration[k] for k in concluded["payload"]} == concluded["payload"]
    commission = next(e for e in demo["events"] if e["type"] == "ArenaCommissioned")
    policy = commission["payload"]["policy"]
    assert policy["policy_version"] == "paired-windows.v2"
    assert Decimal(policy["window_noise"]) >= Decimal(calibration["window_noise_bound"]) > 0
    assert Decimal(policy["boot_noise"]) >= Decimal(calibration["boot_noise_bound"])
    # The calibration comes before the commission that seals from it.
    positions = [e["position"] for e in (concluded, commission)]
    assert positions == sorted(positions)


@pytest.mark.slow
def test_intake_fees_and_the_miner(demo: dict[str, Any]) -> None:
    summary = demo["summary"]
    rows = {r["hotkey"]: r for r in summary["submissions"]}
    alice = rows["5Alice"]
    assert alice["status"] in ("QUALIFIED", "FAILED", "QUEUED") and alice["attempts"] == 1
    if alice["status"] == "QUEUED":  # only the noise guard sends an attempt back
        assert alice["reason"] == "noise_above_seal"
    # Dave named Alice's payment again: refused, nothing consumed twice.
    assert (rows["5Dave"]["status"], rows["5Dave"]["reason"]) == (
        "REJECTED", "eval_cost_payment_used")
    if alice["status"] == "FAILED":  # Erin resubmits a failed content: a duplicate
        assert rows["5Erin"]["reason"] == (
            f"duplicate_of:{alice['submission_id'][:16]}:{alice['reason']}")
    else:
        assert "5Erin" not in rows
    total = summary["fees"]["total"]
    # Alice paid; the four control runs were paid by credits (not revenue).
    assert (total["consumed_rao"], total["released_rao"], total["net_rao"]) == (
        FEE_RAO, 0, FEE_RAO)
    assert total["credits_spent_rao"] == 4 * FEE_RAO
    assert summary["credits"] == {"control_runs": 4, "control_runs_rao": 4 * FEE_RAO,
                                  "miners": 0, "miners_rao": 0}
    # The public key that checks the demo's checkpoint, where the summary says it is.
    public = Path(summary["keys"]["public"])
    assert public == demo["cli"].root / "wd" / "validator.key.pub" and public.is_file()


@pytest.mark.slow
def test_running_the_demo_again_appends_a_second_session(
        demo: dict[str, Any], script: Path) -> None:
    cli = demo["cli"]
    # The second session only re-commissions and settles: the controls already ran.
    second = run_demo(cli, script, "--miners", "0", "--no-controls")
    assert (second["ok"], second["session"]) == (True, 2)
    # Its own session ran no control and took no submission: the first session's are not its.
    assert (second["controls"], second["submissions"]) == ([], [])
    head = cli.head()
    assert head > demo["head"]
    assert cli.jsonl("events", "--to-position", str(demo["head"])) == demo["events"]
    added = cli.jsonl("events", "--from-position", str(demo["head"] + 1))
    assert [e["type"] for e in added] == ["ArenaCommissioned", "SettlementComputed"]
    assert added[0]["payload"]["commissioned_block"] == 200_000
    assert second["replay"]["events"] == head
    assert second["replay"]["settlement_digest"] == second["settlement_digest"]
    assert second["settlement_digest"] != demo["summary"]["settlement_digest"]
    # The host's calibration is reused; no control ran within the policy's 7,200 blocks, so
    # the settlement suspends the arena, whatever the first session's controls gave.
    assert second["calibration"]["reused"] is True
    assert second["calibration"]["calibration_id"] == demo["summary"]["calibration"][
        "calibration_id"]
    assert [s["reason"] for s in second["suspensions"]] == ["controls_stale"]
    assert second["weights_ppm"] == {"5BurnBurnBurn": 1_000_000}


# --- a workdir that cannot hold the key -------------------------------------------------------


@pytest.mark.parametrize(("workdir", "problem"), [
    ("a-file", "a-file exists and is not a directory (the demo keeps its validator key in it)"),
    ("a-file/wd", "cannot use {root}/a-file/wd for the demo's validator key: Not a directory"),
])
def test_a_workdir_that_cannot_hold_the_key_is_refused_and_nothing_is_written(
        cli: Any, workdir: str, problem: str) -> None:
    cli("init")
    cli("grant-credit", "--id", "c-1", "--hotkey", "5H", "--amount-rao", "1")
    events = cli.jsonl("events")
    (cli.root / "a-file").write_text("not a folder\n")

    # It printed a FileExistsError traceback, from the workdir's mkdir.
    done = cli("demo", "--workdir", cli.root / workdir, "--miners", "0", "--no-controls",
               expect=1)

    line = cli.error_line(done.stderr, "invalid_input")
    assert line.startswith("error[invalid_input] [path --workdir]: --workdir: "), line
    assert line.endswith(problem.format(root=cli.root)), line
    assert cli.jsonl("events") == events  # not migrated, commissioned or settled
    assert (cli.root / "a-file").read_text() == "not a folder\n"


def test_a_bad_workdir_leaves_a_new_database_uncreated(cli: Any) -> None:
    (cli.root / "a-file").write_text("")
    done = cli("demo", "--workdir", cli.root / "a-file", "--json", expect=1)
    assert "[path --workdir]" in cli.error_line(done.stderr, "invalid_input")
    assert done.stdout == ""
    assert not (cli.root / "l.db").exists()


# --- the README's quick start ------------------------------------------------------------


def first_sh_block(text: str) -> list[str]:
    match = re.search(r"^```sh\n(.*?)^```", text, flags=re.M | re.S)
    assert match, "README.md has no ```sh block"
    return match.group(1).splitlines()


def test_readme_opens_with_the_main_job_and_the_test_command() -> None:
    lines = first_sh_block((ROOT / "README.md").read_text())
    assert lines[:2] == [MAIN_JOB, TEST_COMMAND]
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    assert TEST_COMMAND in ci


@pytest.mark.slow
@pytest.mark.skipif(os.environ.get("ARENA_LEDGER_FRESH_VENV") != "1",
                    reason="builds a fresh virtual environment and runs the whole demo "
                           "(minutes); set ARENA_LEDGER_FRESH_VENV=1 to run it")
def test_the_readme_main_job_runs_in_a_fresh_venv(tmp_path: Path) -> None:
    # A copy of the working tree, so the editable install writes nothing into the repo.
    tree = tmp_path / "tree"
    shutil.copytree(ROOT, tree, ignore=shutil.ignore_patterns(
        ".venv", ".git", "*.egg-info", "__pycache__", "*.db*", ".*_cache", "build"))
    venv = tmp_path / "venv"
    # --no-deps: no downloading torch here; the dependencies come from the dev venv.
    setup = (f"python3 -m venv {venv} && {venv}/bin/pip install -q -e '.[engine]' --no-deps")
    subprocess.run(setup, shell=True, cwd=tree, check=True, timeout=DEMO_TIMEOUT_S)
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    site = next(Path(p) for p in sys.path if p.endswith("site-packages"))
    (venv / "lib" / version / "site-packages" / "dev-venv-deps.pth").write_text(f"{site}\n")
    work = tmp_path / "work"
    work.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("ARENA_LEDGER_")}
    env["ARENA_LEDGER_DB"] = f"sqlite:///{work / 'arena-ledger.db'}"
    done = subprocess.run([str(venv / "bin" / "arena-ledger"), "demo", "--json"], cwd=work,
                          env=env, capture_output=True, text=True, timeout=DEMO_TIMEOUT_S,
                          check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    summary = json.loads(done.stdout)
    assert summary["ok"] is True and summary["session"] == 1
    assert (work / "arena-ledger-demo" / "validator.key").exists()


def test_the_demo_without_the_engine_extra_names_it_and_writes_nothing(
        cli: Any, tmp_path: Path) -> None:
    # numpy and torch made unimportable, as in an install without the engine extra. The
    # demo wrote 6 events, its key and the ledger file, then died with a ModuleNotFoundError.
    probe = ("import sys; sys.modules.update(dict.fromkeys(('numpy', 'torch'))); "
             "from cli.app import main; sys.argv[0] = 'arena-ledger'; main()")
    done = subprocess.run([sys.executable, "-c", probe, "demo", "--workdir", "wd"],
                          cwd=cli.root, env=cli.env(), capture_output=True, text=True,
                          check=False, timeout=120)
    assert done.returncode == 6, done.stderr
    assert done.stderr == (
        "error[engine_unavailable]: the demo needs the engine extra, which is not installed "
        "(no module numpy, torch): install it with pip install -e '.[engine]' in a clone, or "
        "pip install 'arena-ledger[engine]'\n")
    assert done.stdout == ""
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # no ledger file, no workdir

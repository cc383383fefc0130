"""The prepared GPU check (tools/gpu_check.sh) on a host without a GPU or sglang.

Its real run needs a GPU host with sglang; here it must stop early with its documented exit
code and one line, and its CPU dry run (``--engine torch-reference``) must record, explain
and replay one attempt exactly as the GPU run would.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "tools" / "gpu_check.sh"
#: What the device tool brings back from $OUT: at most 8 files with plain names.
RETURNABLE = re.compile(r"[A-Za-z0-9._-]+")


def _run(out: Path, *args: str, wheels: Path | None = None,
         timeout: int = 120) -> subprocess.CompletedProcess[str]:
    # No wheels by default: a checkout's own .whl/ holds Python 3.12 wheels for the GPU host.
    env = {**os.environ, "OUT": str(out), "PYTHON": sys.executable,
           "GPU_CHECK_SITE": str(out.parent / "site"),
           "GPU_CHECK_WHEELS": str(wheels or out.parent / "no-wheels")}
    env.pop("PYTHONPATH", None)  # the script puts the checkout on it itself
    return subprocess.run(["bash", str(SCRIPT), *args], env=env, capture_output=True,
                          text=True, timeout=timeout, check=False, cwd=out.parent)


def test_the_entry_point_is_valid_bash() -> None:
    for script in ("gpu_check.sh", "gpu_wheels.sh"):
        done = subprocess.run(["bash", "-n", str(ROOT / "tools" / script)],
                              capture_output=True, text=True, check=False)
        assert done.returncode == 0, done.stderr


@pytest.mark.skipif(importlib.util.find_spec("sglang") is not None, reason="sglang is here")
def test_without_sglang_it_exits_3_with_one_line_and_writes_no_ledger(tmp_path: Path) -> None:
    out = tmp_path / "out"
    done = _run(out)

    assert done.returncode == 3, done.stdout + done.stderr
    output = done.stdout + done.stderr
    assert "Traceback" not in output
    last = output.strip().splitlines()[-1]
    assert last.startswith("gpu-check: sglang cannot be imported (ModuleNotFoundError")
    assert ".whl/" in last
    assert [line for line in output.splitlines() if "sglang" in line] == [last]
    host = (out / "host.txt").read_text()
    assert f"python: {sys.version.split()[0]}" in host
    assert "torch: " in host
    assert (out / "gpu-check.log").read_text().strip().endswith(last)
    assert sorted(p.name for p in out.iterdir()) == ["gpu-check.log", "host.txt"]


def test_wheels_that_do_not_install_exit_5_with_one_line(tmp_path: Path) -> None:
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    (wheels / "broken-1.0-py3-none-any.whl").write_bytes(b"not a zip file")
    out = tmp_path / "out"
    done = _run(out, wheels=wheels)

    assert done.returncode == 5
    output = done.stdout + done.stderr
    assert "Traceback" not in output
    assert output.strip().splitlines()[-1] == (
        f"gpu-check: installing the wheels under {wheels}/ failed (pip's output is in "
        f"{out}/gpu-check.log)")
    assert not (tmp_path / "site").exists() or not any((tmp_path / "site").iterdir())


@pytest.mark.slow
def test_the_cpu_dry_run_records_explains_and_replays_one_attempt(tmp_path: Path) -> None:
    """About 15 s on 2 busy cores: the reference engine's lanes plus two CLI processes."""
    out = tmp_path / "out"
    done = _run(out, "--engine", "torch-reference", timeout=300)

    assert done.returncode == 0, done.stdout + done.stderr
    names = sorted(p.name for p in out.iterdir())
    assert names == ["explain.json", "gpu-check.log", "host.txt", "ledger.db", "replay.json",
                     "stages.json", "summary.txt"]
    assert all(RETURNABLE.fullmatch(name) for name in names) and len(names) <= 8

    explained = json.loads((out / "explain.json").read_text())
    attempt = explained["attempts"][-1]
    replayed = json.loads((out / "replay.json").read_text())
    assert replayed["ok"] is True and replayed["verdicts_checked"] == 1
    with sqlite3.connect(out / "ledger.db") as db:
        types = [row[0] for row in db.execute("SELECT type FROM events ORDER BY position")]
    assert types[0] == "ArenaCommissioned" and types.count("AttemptDecided") == 1
    assert types.count("WindowMeasured") == len(attempt["windows"]) >= 2
    assert replayed["events"] == len(types)

    summary = (out / "summary.txt").read_text()
    assert f"verdict {attempt['verdict']} " in summary
    assert f"windows recorded {len(attempt['windows'])}" in summary
    stages = [s["stage"] for s in json.loads((out / "stages.json").read_text())]
    # The audit ran either in the ledger (speed passed) or beside it (speed did not).
    if types.count("AuditNodeGraded"):
        assert "audit" in stages and "direct_audit" not in stages
    else:
        assert "direct_audit" in stages and "direct_quality" in stages
        assert "direct_audit (outside the ledger)" in summary

"""Builds setup.py's optional mypyc extensions in a copy of the tree and tests replay on them.

The compiled build is opt-in (``ARENA_LEDGER_COMPILE=1``), so the plain test run never
imports it; this test keeps it honest in CI: it compiles the five modules into a scratch
copy and runs the replay, fold, settlement and tracker tests with that copy first on the
path, so every one of those tests exercises the compiled code. The steps live in
``compiled_check.py``; this test runs it (on one core, in its pytest-xdist worker
while the other worker goes on) and checks what it wrote.
"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest
from compiled_check import RESULT, SUITES, compiler_missing, start  # same directory


@pytest.mark.skipif(compiler_missing() is not None, reason=str(compiler_missing()))
def test_replay_tests_pass_on_the_compiled_build(tmp_path: Path) -> None:
    out = tmp_path / "check"
    job = start(out)
    try:
        returncode = job.wait(timeout=1500)
    finally:
        if job.poll() is None:  # interrupted or timed out: stop the build or test run too
            os.killpg(job.pid, signal.SIGKILL)
            job.wait()
    assert returncode == 0, (out / "log").read_text()[-4000:]
    result = json.loads((out / RESULT).read_text())
    assert "error" not in result, result.get("error")
    assert result["build"]["returncode"] == 0, result["build"]["stderr"]
    assert result["compiled"] == [
        "chain", "intake", "projection", "replay", "replay_compiled__mypyc", "settlements"
    ]

    probe = result["probe"]
    assert probe["returncode"] == 0, probe["stderr"]
    assert all(line.startswith(result["tree"]) and line.endswith(".so")
               for line in probe["stdout"].split()), probe["stdout"]
    assert len(probe["stdout"].split()) == 2
    assert result["named"]["stdout"].strip() == (  # what replay and the benchmarks report
        "mypyc-compiled (ledger.chain, services.replay, services.settlements, machines.intake, "
        "machines.projection)"
    ), result["named"]["stderr"]

    ran = result["ran"]
    assert ran["returncode"] == 0, ran["stdout"][-4000:] + ran["stderr"][-2000:]
    assert " passed" in ran["stdout"] and " failed" not in ran["stdout"]
    assert len(SUITES) == 12

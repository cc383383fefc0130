"""Builds setup.py's optional mypyc extensions in a copy of the tree and tests replay on them.

The compiled build is opt-in (``ARENA_LEDGER_COMPILE=1``), so the plain test run never
imports it; this test keeps it honest in CI: it compiles the five modules into a scratch
copy and runs the replay, fold, settlement and tracker tests with that copy first on the
path, so every one of those tests exercises the compiled code.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

#: Tests that drive the compiled modules hardest: the replay loop and its sources, the fold,
#: settlement and its incremental tracker, the archive the fold writes through.
SUITES = [
    "tests/unit/test_replay_decode.py",
    "tests/unit/test_machine_projection.py",
    "tests/unit/test_machine_fast_paths.py",
    "tests/unit/test_settlement.py",
    "tests/unit/test_settlement_incremental.py",
    "tests/unit/test_fold_archived.py",
    "tests/integration/test_replay.py",
    "tests/integration/test_replay_sources.py",
    "tests/integration/test_tracker_generated.py",
    "tests/integration/test_archive.py",
]


def _compiler_missing() -> str | None:
    try:
        import mypyc.build  # noqa: F401
    except ImportError as exc:
        return f"mypyc is not installed ({exc}); it comes with mypy, extra dev"
    if not (shutil.which("cc") or shutil.which("gcc")):
        return "no C compiler on PATH"
    return None


@pytest.mark.skipif(_compiler_missing() is not None, reason=str(_compiler_missing()))
def test_replay_tests_pass_on_the_compiled_build(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    tree.mkdir()
    for name in ("setup.py", "pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, tree / name)
    ignore = shutil.ignore_patterns("__pycache__", "*.so")
    for package in ("ledger", "machines"):
        shutil.copytree(ROOT / package, tree / package, ignore=ignore)
    # -O0: the C compiler's optimisation changes no behaviour these tests can see, and took
    # a third of the build (setup.py, ARENA_LEDGER_COMPILE_OPT).
    env = {**os.environ, "ARENA_LEDGER_COMPILE": "1", "ARENA_LEDGER_COMPILE_OPT": "0"}
    built = subprocess.run(
        [sys.executable, "setup.py", "build_ext", "--inplace", "--force"],
        cwd=tree, env=env, capture_output=True, text=True, timeout=900,
    )
    assert built.returncode == 0, built.stderr[-4000:]
    compiled = sorted(p.name.split(".", 1)[0] for p in tree.glob("*/*.so"))
    assert compiled == [
        "chain", "intake", "projection", "replay", "replay_compiled__mypyc", "settle"
    ]

    # The copy first on the path: ``ledger`` and ``machines`` are imported from it.
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tree), str(ROOT)])}
    probe = subprocess.run(
        [sys.executable, "-c", "import ledger.replay, machines.projection as p; "
         "print(ledger.replay.__file__); print(p.__file__)"],
        env=env, capture_output=True, text=True, timeout=120, cwd=tmp_path,
    )
    assert probe.returncode == 0, probe.stderr
    assert all(line.startswith(str(tree)) and line.endswith(".so")
               for line in probe.stdout.split()), probe.stdout
    named = subprocess.run(
        [sys.executable, "-c", "from ledger.build import build_name; print(build_name())"],
        env=env, capture_output=True, text=True, timeout=120, cwd=tmp_path,
    )
    assert named.stdout.strip() == (  # what replay and the benchmarks report
        "mypyc-compiled (ledger.chain, ledger.replay, ledger.settle, machines.intake, "
        "machines.projection)"
    ), named.stderr

    ran = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-x",
         "--rootdir", str(ROOT), *(str(ROOT / suite) for suite in SUITES)],
        env=env, capture_output=True, text=True, timeout=1200, cwd=tmp_path,
    )
    assert ran.returncode == 0, ran.stdout[-4000:] + ran.stderr[-2000:]
    assert " passed" in ran.stdout and " failed" not in ran.stdout

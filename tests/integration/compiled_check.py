"""Builds setup.py's optional mypyc extensions in a scratch copy and runs replay's tests on them.

``python compiled_check.py OUT`` copies the tree into OUT, compiles the five modules, asks
the copy what it imports, then runs the replay, fold, settlement and tracker tests with
that copy first on the path, and writes what each step gave to OUT/result.json
(written last, so its presence means the check ended). tests/integration/
test_compiled_build.py asserts on it, running this in its pytest-xdist worker while the
other worker goes on. Its own test run is one process (``-n 0``): it already has a core of
its own.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

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
    "tests/unit/test_settlement_gate.py",
    "tests/integration/test_settlement_gate_ledger.py",
]

#: Where result.json is written inside OUT.
RESULT = "result.json"


def compiler_missing() -> str | None:
    """Says why the extensions cannot be built here, or None when they can."""
    if importlib.util.find_spec("mypyc") is None:
        return "mypyc is not installed; it comes with mypy, extra dev"
    if not (shutil.which("cc") or shutil.which("gcc")):
        return "no C compiler on PATH"
    return None


def start(out: Path) -> subprocess.Popen[bytes]:
    """Starts the check, writing into ``out`` (its log: ``out/log``); its process group is
    its own, so that stopping it (``os.killpg``) stops the build or test run under it."""
    out.mkdir(parents=True, exist_ok=True)
    with (out / "log").open("wb") as log:
        return subprocess.Popen([sys.executable, __file__, str(out)], stdout=log,
                                stderr=subprocess.STDOUT, cwd=out, start_new_session=True)


def _run(argv: list[str], *, env: dict[str, str], cwd: Path, timeout: int) -> dict[str, Any]:
    done = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, check=False)
    return {"returncode": done.returncode, "stdout": done.stdout[-6000:],
            "stderr": done.stderr[-4000:]}


def check(out: Path) -> dict[str, Any]:
    """Runs every step in ``out``; returns what each gave (the build's failure stops it)."""
    tree = out / "tree"
    tree.mkdir()
    for name in ("setup.py", "pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, tree / name)
    ignore = shutil.ignore_patterns("__pycache__", "*.so")
    for package in ("vocabulary", "ledger", "machines", "services"):
        shutil.copytree(ROOT / package, tree / package, ignore=ignore)
    # -O0: the C compiler's optimisation changes no behaviour these tests can see, and took
    # a third of the build (setup.py, ARENA_LEDGER_COMPILE_OPT).
    env = {**os.environ, "ARENA_LEDGER_COMPILE": "1", "ARENA_LEDGER_COMPILE_OPT": "0"}
    result: dict[str, Any] = {"build": _run(
        [sys.executable, "setup.py", "build_ext", "--inplace", "--force"],
        env=env, cwd=tree, timeout=900)}
    if result["build"]["returncode"] != 0:
        return result
    result["compiled"] = sorted(p.name.split(".", 1)[0] for p in tree.glob("*/*.so"))
    # The copy first on the path: the compiled packages are imported from it.
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tree), str(ROOT)])}
    result["probe"] = _run(
        [sys.executable, "-c", "import services.replay, machines.projection as p; "
         "print(services.replay.__file__); print(p.__file__)"],
        env=env, cwd=out, timeout=120)
    result["tree"] = str(tree)
    result["named"] = _run(
        [sys.executable, "-c", "from services.build_info import build_name; print(build_name())"],
        env=env, cwd=out, timeout=120)
    result["ran"] = _run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-x", "-n", "0",
         "--basetemp", str(out / "basetemp"), "--rootdir", str(ROOT),
         *(str(ROOT / suite) for suite in SUITES)],
        env=env, cwd=out, timeout=1200)
    return result


def main(out: Path) -> None:
    """Runs ``check`` and writes its result (or the error that stopped it) to OUT/result.json."""
    try:
        result = check(out)
    except Exception as exc:  # reported by the test, which names it
        result = {"error": f"{type(exc).__name__}: {exc}"}
    partial = out / (RESULT + ".partial")
    partial.write_text(json.dumps(result))
    partial.replace(out / RESULT)


if __name__ == "__main__":
    main(Path(sys.argv[1]))

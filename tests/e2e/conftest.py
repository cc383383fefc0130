"""Provides the end-to-end fixtures: the installed ``arena-ledger`` console script, run as a user.

``Cli`` runs the console script in a subprocess with ``ARENA_LEDGER_DB`` pointing at a SQLite
file of its own, checks the exit code and that no traceback leaked, and parses JSON output.
Each call costs an interpreter start (about half a second), so modules build one ledger per
module (``cli_factory``) and tests read what it recorded.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

#: The console script ``pip install`` put next to this interpreter ([project.scripts]).
SCRIPT = Path(sys.executable).with_name("arena-ledger")


@dataclass
class Cli:
    """Runs ``arena-ledger`` against one database from one working directory."""

    root: Path
    db: str

    def env(self, columns: int | None = 200) -> dict[str, str]:
        """The environment of a run: tables laid out at ``columns``, or, with None, as for
        a pipe (stdout is one here: COLUMNS unset)."""
        env = {k: v for k, v in os.environ.items()
               if not k.startswith("ARENA_LEDGER_") and k != "COLUMNS"}
        env.update({"ARENA_LEDGER_DB": self.db, "NO_COLOR": "1"})
        if columns is not None:
            env["COLUMNS"] = str(columns)
        return env

    def __call__(self, *args: str | Path, expect: int = 0, stdin: str | None = None,
                 columns: int | None = 200) -> subprocess.CompletedProcess[str]:
        """Runs the script; asserts the exit code and that no traceback reached stderr."""
        done = subprocess.run([str(SCRIPT), *map(str, args)], cwd=self.root,
                              env=self.env(columns),
                              input=stdin, capture_output=True, text=True, timeout=120,
                              check=False)
        assert done.returncode == expect, (args, done.returncode, done.stdout, done.stderr)
        assert "Traceback" not in done.stderr, done.stderr
        return done

    def many(self, calls: Sequence[tuple[Sequence[str | Path], int]]
             ) -> list[subprocess.CompletedProcess[str]]:
        """Runs read-only calls (args, expected exit) side by side, results in order."""
        with ThreadPoolExecutor(max_workers=4) as pool:
            return list(pool.map(lambda c: self(*c[0], expect=c[1]), calls))

    def json(self, *args: str | Path) -> Any:
        """Runs a command with --json and returns the parsed document."""
        return json.loads(self(*args, "--json").stdout)

    def jsonl(self, *args: str | Path) -> list[Any]:
        """Runs a command with --json and returns its JSON Lines, parsed."""
        return self.lines(self(*args, "--json").stdout)

    def write(self, name: str, content: Any) -> Path:
        """Writes a JSON document (dict) or JSON Lines (list of dicts) into the root."""
        path = self.root / name
        if isinstance(content, list):
            path.write_text("".join(json.dumps(line) + "\n" for line in content))
        else:
            path.write_text(json.dumps(content))
        return path

    def head(self) -> int:
        return int(self.json("head")["position"])

    @staticmethod
    def lines(text: str) -> list[Any]:
        """Parses JSON Lines output."""
        return [json.loads(line) for line in text.splitlines() if line.strip()]

    @staticmethod
    def error_line(stderr: str, code: str) -> str:
        """Asserts stderr is exactly one ``error[code]`` line and returns it."""
        lines = stderr.strip().splitlines()
        assert len(lines) == 1, stderr
        assert lines[0].startswith(f"error[{code}]"), stderr
        return lines[0]

    @staticmethod
    def drafts(*events: tuple[str, str, dict[str, Any]], **extra: Any) -> list[dict[str, Any]]:
        """Builds JSON Lines drafts from (stream, type, payload) triples."""
        return [{"stream": s, "type": t, "payload": p, **extra} for s, t, p in events]


@pytest.fixture(scope="session")
def script() -> Path:
    """Returns the installed console script (fails clearly when the project is not installed)."""
    assert SCRIPT.is_file(), f"{SCRIPT} is missing: install the project (pip install -e .)"
    return SCRIPT


@pytest.fixture(scope="module")
def cli_factory(script: Path, tmp_path_factory: pytest.TempPathFactory
                ) -> Callable[[str], Cli]:
    """Returns name -> Cli on a fresh SQLite file under a module-wide temporary directory."""

    def make(name: str) -> Cli:
        root = tmp_path_factory.mktemp(name)
        return Cli(root, f"sqlite:///{root / 'l.db'}")

    return make


@pytest.fixture
def cli(script: Path, tmp_path: Path) -> Cli:
    """Returns a Cli on an empty, uninitialised SQLite file of this test."""
    return Cli(tmp_path, f"sqlite:///{tmp_path / 'l.db'}")

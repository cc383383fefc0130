"""Checks when the long commands draw a progress bar (cli/progress.py), through the installed
script: on a terminal, a bar on stderr naming the stage; piped, redirected or with --json, no
progress text at all, on stdout or stderr.

The terminal is a pseudo-terminal holding both stdout and stderr, as a person's shell does.
"""

from __future__ import annotations

import json
import os
import pty
import subprocess
from collections.abc import Callable
from typing import Any

import pytest
from conftest import SCRIPT  # same directory

#: What the bars are called: none may reach a pipe or JSON output.
STAGES = ("verifying", "exporting", "importing", "appending")


def _drafts(count: int, first: int = 0) -> list[dict[str, Any]]:
    return [{"stream": f"credit-g{n}", "type": "CreditGranted",
             "payload": {"credit_id": f"g{n}", "hotkey": "5Miner", "amount_rao": 1, "note": ""}}
            for n in range(first, first + count)]


@pytest.fixture(scope="module")
def filled(cli_factory: Callable[[str], Any]) -> Any:
    """A ledger of 40 events, appended through the script."""
    cli = cli_factory("progress")
    cli("init")
    cli("append", cli.write("drafts.jsonl", _drafts(40)))
    return cli


def _on_terminal(cli: Any, *args: str) -> str:
    """Runs the script with stdout and stderr on one pseudo-terminal; returns what it showed."""
    leader, follower = pty.openpty()
    env = {**cli.env(100), "TERM": "xterm"}
    with subprocess.Popen([str(SCRIPT), *args], cwd=cli.root, env=env,
                          stdin=subprocess.DEVNULL, stdout=follower, stderr=follower) as child:
        os.close(follower)
        shown = b""
        while True:
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # EIO: the child closed the terminal
                break
            if not chunk:
                break
            shown += chunk
        assert child.wait(timeout=120) == 0, shown
    os.close(leader)
    return shown.decode(errors="replace")


def test_on_a_terminal_verify_and_export_draw_a_bar_naming_the_stage(filled: Any) -> None:
    assert "verifying" in _on_terminal(filled, "verify")
    assert "exporting" in _on_terminal(filled, "export", "tty-bundle")


def test_on_a_terminal_json_output_draws_no_bar(filled: Any) -> None:
    shown = _on_terminal(filled, "verify", "--json")
    assert not [stage for stage in STAGES if stage in shown]
    assert json.loads(shown.replace("\r\n", "\n"))["ok"] is True


@pytest.mark.parametrize("as_json", [False, True], ids=["text", "json"])
def test_piped_no_command_writes_progress_text(
    filled: Any, cli_factory: Callable[[str], Any], as_json: bool,
) -> None:
    flag = ("--json",) if as_json else ()
    bundle = f"piped-bundle-{as_json}"
    target = cli_factory(f"import-{as_json}")
    target("init")
    drafts = target.write("more.jsonl", _drafts(30, first=100))
    runs = [
        filled("verify", *flag, columns=None),
        filled("export", bundle, *flag, columns=None),
        filled("verify-bundle", bundle, "--no-signature-check", *flag, columns=None),
        target("import", filled.root / bundle, "--no-signature-check", *flag, columns=None),
        target("append", drafts, "--batch", "10", *flag, columns=None),
    ]
    for done in runs:
        assert done.stderr == "", done.args
        assert not [stage for stage in STAGES if stage in done.stdout], done.args
        if as_json:  # JSON, and nothing else
            for line in done.stdout.splitlines() if done.args[1] == "append" else []:
                json.loads(line)
            if done.args[1] != "append":
                json.loads(done.stdout)

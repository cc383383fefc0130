"""``arena-ledger events --follow`` as a user runs it: the console script in a process of its
own prints what is recorded, then each event another ``arena-ledger append`` commits, as it
commits, honouring the filters; Ctrl-C (SIGINT) ends it with exit 130 and no traceback; the
options that would end a listing are refused with it.
"""

from __future__ import annotations

import json
import queue
import signal
import subprocess
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import pytest

#: Long enough for a loaded machine to start an interpreter and append; a line that does not
#: come within it is a failure, not a wait.
LINE_WAIT_S = 30.0


def credit(credit_id: str) -> tuple[str, str, dict[str, Any]]:
    return (f"credit-{credit_id}", "CreditGranted",
            {"credit_id": credit_id, "hotkey": "5Miner", "amount_rao": 5_000, "note": ""})


POLICY = ("settlement", "EmissionPolicySet",
          {"half_life_blocks": 7200, "burn_hotkey": "5Burn", "validator_hotkey": "5Validator"})


@dataclass
class Following:
    """A running ``events --follow`` and the lines it has printed, read as they come."""

    process: subprocess.Popen[str]
    lines: queue.Queue[str]

    def next_lines(self, count: int) -> list[str]:
        """Returns the next ``count`` lines of stdout, failing if one does not come."""
        found: list[str] = []
        for _ in range(count):
            try:
                found.append(self.lines.get(timeout=LINE_WAIT_S))
            except queue.Empty:
                pytest.fail(f"no line within {LINE_WAIT_S} s; got {found}")
        return found

    def next_events(self, count: int) -> list[dict[str, Any]]:
        """Returns the next ``count`` JSON Lines, parsed."""
        return [json.loads(line) for line in self.next_lines(count)]

    def nothing_more(self, seconds: float = 1.0) -> None:
        """Asserts no further line comes within ``seconds``."""
        try:
            extra = self.lines.get(timeout=seconds)
        except queue.Empty:
            return
        pytest.fail(f"unexpected line {extra!r}")

    def interrupt(self) -> tuple[int, str]:
        """Sends SIGINT (Ctrl-C) and returns the exit code and stderr."""
        self.process.send_signal(signal.SIGINT)
        code = self.process.wait(timeout=LINE_WAIT_S)
        assert self.process.stderr is not None
        return code, self.process.stderr.read()


def _pump(stream: IO[str], into: queue.Queue[str]) -> None:
    for line in stream:
        into.put(line.rstrip("\n"))


@contextmanager
def following(script: Path, cli: Any, *args: str) -> Iterator[Following]:
    """Starts ``arena-ledger events --follow ARGS`` (looking every 0.05 s); killed if a test
    leaves it running."""
    process = subprocess.Popen(
        [str(script), "events", "--follow", "--interval", "0.05", *args],
        cwd=cli.root, env=cli.env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    lines: queue.Queue[str] = queue.Queue()
    assert process.stdout is not None
    threading.Thread(target=_pump, args=(process.stdout, lines), daemon=True).start()
    try:
        yield Following(process, lines)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def append(cli: Any, name: str, *events: tuple[str, str, dict[str, Any]]) -> None:
    cli("append", cli.write(name, cli.drafts(*events)))


@pytest.fixture
def ledger(cli: Any) -> Any:
    """A ledger with three events: two credits and the emission policy."""
    cli("init")
    append(cli, "first.jsonl", credit("cr-1"), credit("cr-2"), POLICY)
    return cli


def test_follow_prints_the_recorded_events_then_each_commit_and_ctrl_c_ends_it(
    script: Path, ledger: Any,
) -> None:
    with following(script, ledger, "--json") as run:
        recorded = run.next_events(3)
        append(ledger, "more.jsonl", credit("cr-3"))
        later = run.next_events(1)
        append(ledger, "again.jsonl", credit("cr-4"), credit("cr-5"))
        later += run.next_events(2)
        run.nothing_more(0.5)
        code, stderr = run.interrupt()
    assert code == 130
    assert "Traceback" not in stderr and stderr.strip() == "interrupted", stderr
    # The same objects, in the same order, as the listing prints afterwards.
    assert recorded + later == ledger.jsonl("events")
    assert [e["position"] for e in recorded + later] == [1, 2, 3, 4, 5, 6]


def test_follow_honours_the_filters_and_the_start_position(
    script: Path, ledger: Any,
) -> None:
    with following(script, ledger, "--json", "--stream-prefix", "credit-",
                   "--from-position", "2") as run:
        assert [e["position"] for e in run.next_events(1)] == [2]
        append(ledger, "mixed.jsonl", POLICY, credit("cr-3"))
        assert [e["stream"] for e in run.next_events(1)] == ["credit-cr-3"]
        run.nothing_more(0.5)
        code, stderr = run.interrupt()
    assert code == 130 and "Traceback" not in stderr
    with following(script, ledger, "--json", "--type", "EmissionPolicySet") as run:
        assert [e["position"] for e in run.next_events(2)] == [3, 4]
        run.nothing_more(0.5)
        code, stderr = run.interrupt()
    assert code == 130 and "Traceback" not in stderr


def test_follow_without_json_prints_the_columns_once_and_each_row_as_it_commits(
    script: Path, ledger: Any,
) -> None:
    with following(script, ledger, "--type", "CreditGranted") as run:
        header, first, second = run.next_lines(3)
        append(ledger, "more.jsonl", credit("cr-3"))
        (third,) = run.next_lines(1)
        run.nothing_more(0.5)
        code, stderr = run.interrupt()
    assert code == 130 and "Traceback" not in stderr
    assert header.split() == ["pos", "stream", "ver", "type", "recorded_at", "hash"]
    assert [line.split()[:2] for line in (first, second, third)] == [
        ["1", "credit-cr-1"], ["2", "credit-cr-2"], ["4", "credit-cr-3"]]


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (("--limit", "3"), "--limit"),
        (("--to-position", "3"), "--to-position"),
        (("--as-of", "3"), "--as-of"),
        (("--until", "2030-01-01"), "--until"),
    ],
)
def test_follow_refuses_the_options_that_end_a_listing(
    ledger: Any, args: tuple[str, ...], named: str,
) -> None:
    done = ledger("events", "--follow", *args, expect=1)
    line = ledger.error_line(done.stderr, "invalid_input")
    assert f"[path {named}]" in line
    assert "--to-position, --as-of, --limit or --until" in line and f"drop {named}" in line
    assert done.stdout == ""


def test_an_interval_needs_follow_and_stays_in_its_bounds(ledger: Any) -> None:
    done = ledger("events", "--interval", "1", expect=1)
    assert "[path --interval]" in ledger.error_line(done.stderr, "invalid_input")
    for out_of_bounds in ("0", "61"):
        done = ledger("events", "--follow", "--interval", out_of_bounds, expect=2)
        assert "--interval" in done.stderr

"""Checks the progress plumbing: ``ledger.progress.ticker`` reports a loop's count every step
and at its end, and ``cli.progress.ProgressBar`` draws only when a person watches (stdout and
stderr terminals, no --json), one bar per stage."""

from __future__ import annotations

import sys

import pytest

from cli.progress import ProgressBar, watched
from ledger.progress import progress_step_events, ticker


def test_a_ticker_reports_zero_each_step_and_the_end() -> None:
    calls: list[tuple[str, int, int]] = []
    total = 2 * progress_step_events + 7
    tick = ticker(lambda *call: calls.append(call), "verifying", total)
    assert tick is not None
    for done in range(1, total + 1):
        tick(done)
    assert calls == [("verifying", done, total)
                     for done in (0, progress_step_events, 2 * progress_step_events, total)]
    assert ticker(None, "verifying", total) is None  # nobody listens: the loop skips it


@pytest.mark.parametrize(("stdout", "stderr", "as_json", "shown"), [
    (True, True, False, True),
    (True, True, True, False),  # --json
    (False, True, False, False),  # stdout piped or redirected
    (True, False, False, False),  # stderr redirected
])
def test_a_bar_is_drawn_only_when_a_person_watches(
    monkeypatch: pytest.MonkeyPatch, stdout: bool, stderr: bool, as_json: bool, shown: bool,
) -> None:
    monkeypatch.setattr(sys.stdout, "isatty", lambda: stdout, raising=False)
    monkeypatch.setattr(sys.stderr, "isatty", lambda: stderr, raising=False)
    assert watched(as_json) is shown
    with ProgressBar(as_json) as progress:
        assert (progress is not None) is shown


def test_each_stage_gets_a_bar_of_its_own_that_follows_the_counts(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(sys.stdout, "isatty", lambda: True, raising=False)
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True, raising=False)
    bar = ProgressBar(as_json=False)
    with bar as progress:
        assert progress is not None
        progress("verifying", 0, 50)
        progress("verifying", 50, 50)
        progress("importing", 20, 50)
        tasks = {task.description: (task.completed, task.total) for task in bar.bars.tasks}
        assert tasks == {"verifying": (50, 50), "importing": (20, 50)}
        assert bar.bars.live.is_started
    assert not bar.bars.live.is_started  # gone when the command ends

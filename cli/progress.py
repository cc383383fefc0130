"""Draws a long command's progress on stderr: a rich progress bar per stage of the work.

The library reports through a ``ledger.progress.Progress`` callback and draws nothing; the
CLI passes one only when a person watches: stdout and stderr both a terminal, and no
``--json``. Piped or redirected output, and JSON, carry no progress text at all.
"""

from __future__ import annotations

import sys
from types import TracebackType
from typing import Any

from cli.common import err_console
from ledger.progress import Progress

__all__ = ["ProgressBar", "watched"]


def _terminal(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # no isatty, or a closed stream
        return False


def watched(as_json: bool) -> bool:
    """Tells whether a person watches the output: stdout and stderr are terminals and the
    output is not JSON (a bar in a log file or between JSON documents is only noise)."""
    return not as_json and _terminal(sys.stdout) and _terminal(sys.stderr)


class ProgressBar:
    """A context whose value is a ``Progress`` callback drawing bars on stderr, or None when
    nobody watches (``watched``); each new stage gets a bar of its own, gone at the end."""

    def __init__(self, as_json: bool) -> None:
        self.enabled = watched(as_json)
        self.bars: Any = None
        self._tasks: dict[str, Any] = {}

    def __enter__(self) -> Progress | None:
        if not self.enabled:
            return None
        from rich.progress import Progress as Bars

        self.bars = Bars(*Bars.get_default_columns(), console=err_console, transient=True)
        self.bars.start()
        return self.report

    def report(self, stage: str, done: int, total: int) -> None:
        """Shows ``done`` of ``total`` on the bar of ``stage`` (made when first met)."""
        task = self._tasks.get(stage)
        if task is None:
            task = self._tasks[stage] = self.bars.add_task(stage, total=total)
        self.bars.update(task, completed=done, total=total)

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 traceback: TracebackType | None) -> None:
        if self.bars is not None:
            self.bars.stop()

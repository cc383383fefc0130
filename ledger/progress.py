"""Lets a long operation say how far it has got, without knowing who listens.

The library draws nothing: a caller that wants a progress bar passes a ``Progress`` callback
(the CLI does so on a terminal, never with ``--json`` or into a pipe), and the loops of
verify, export, import, bundle checks and appends report to it.
"""

from __future__ import annotations

from collections.abc import Callable

__all__ = ["Progress", "Tick", "progress_step_events", "ticker"]

#: ``progress(stage, done, total)``: ``done`` of ``total`` events of the named stage
#: ("verifying", "exporting", "importing", …) are behind; ``done`` only grows within a stage.
Progress = Callable[[str, int, int], None]

#: ``tick(done)``: what a loop calls as it goes (``ticker``).
Tick = Callable[[int], None]

#: Events between two reports of a loop that goes event by event: often enough for a bar to
#: move smoothly, rarely enough to cost nothing next to hashing an event.
progress_step_events = 1_000


def ticker(progress: Progress | None, stage: str, total: int) -> Tick | None:
    """Returns ``tick(done)`` that reports to ``progress`` every ``progress_step_events``
    and at ``total``; None when nobody listens (a loop then skips the call)."""
    if progress is None:
        return None
    progress(stage, 0, total)

    def tick(done: int) -> None:
        if done % progress_step_events == 0 or done >= total:
            progress(stage, done, total)

    return tick

"""Pauses Python's cyclic garbage collector while a long fold runs.

A fold's state is long-lived and acyclic, and the objects a fold makes and drops per event
die by reference counting, so the cyclic collector finds nothing there; yet with it on,
each full pass walks the whole fold (on a 1M-event replay its passes cost 6% of the time;
a guard catching up over the same ledger spent 3 s of 14 in them). ``CollectorPaused``
turns it off for the fold, and ``tick`` (every ``ticks_between_freezes`` events or so)
freezes what exists so far, so the first collection after the fold does not walk
everything it made either; at the end everything frozen here is unfrozen, so a cycle
made during the fold is still reclaimed later.

A caller that froze objects itself (``gc.freeze``, e.g. before forking workers) keeps
them frozen: then nothing is frozen or unfrozen here, the collector is only paused.
"""

from __future__ import annotations

import gc

__all__ = ["CollectorPaused", "ticks_between_freezes"]

#: Events between two ``tick`` calls that freeze (the replay loop's period, measured there:
#: it keeps the tracked-object list short without a freeze per event).
ticks_between_freezes = 10_000


class CollectorPaused:
    """Is the cyclic collector off for a ``with`` block, restored as it was afterwards."""

    def __init__(self) -> None:
        self._collecting = False
        self._freezing = False

    def __enter__(self) -> CollectorPaused:
        self._collecting = gc.isenabled()
        # Never unfreeze what a caller froze: with objects already frozen, only pause.
        self._freezing = gc.get_freeze_count() == 0
        gc.disable()
        return self

    def tick(self) -> None:
        """Freezes every object tracked so far (nothing when the caller had frozen some)."""
        if self._freezing:
            gc.freeze()

    def __exit__(self, *exc: object) -> None:
        if self._freezing:
            gc.unfreeze()
        if self._collecting:
            gc.enable()
